"""The hostile GGUF variants SpecDeck refuses as "llama.cpp refuses" are refused by the real,
pinned llama-server too (tests/hostile_gguf.py): the base model gets through llama.cpp's GGUF
reader, hyperparameters and vocabulary and stops only at its tensors (it has few of them),
while every variant stops before that, at the check SpecDeck cites."""

from __future__ import annotations

import socket
import subprocess

import pytest
from hostile_gguf import VARIANTS, base, write

pytestmark = pytest.mark.slow
TENSOR_STAGE = "check_tensor_dims"
"""What llama.cpp checks after the metadata and the vocabulary: the base file stops here."""
SAME_STAGE_AS_BASE = {"a layer past the block count"}
"""Refused by llama.cpp after the tensors are created (done_getting_tensors), which the base
file never reaches: not told apart from the base by the log."""


@pytest.fixture(scope="module")
def llama_server():
    from tools.llama_server_build import binary

    path = binary("llama-server")
    if not path.is_file():
        pytest.skip("no llama-server built here (make llama-server)")
    return path


def _load(server, path) -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = subprocess.run([str(server), "-m", str(path), "--port", str(port), "-c", "256",
                             "--fit", "off", "-t", "1"], capture_output=True, text=True,
                            errors="replace", timeout=120)
    assert result.returncode != 0, "llama-server loaded it"
    return result.stdout + result.stderr


def test_the_base_model_passes_the_metadata_and_vocabulary(llama_server, tmp_path):
    path = tmp_path / "base.gguf"
    path.write_bytes(base().build())
    log = _load(llama_server, path)
    assert TENSOR_STAGE in log and "error loading model vocabulary" not in log, log[-2000:]


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.commands == ("check", "vram")
                                     and v.name not in SAME_STAGE_AS_BASE],
                         ids=lambda v: v.name)
def test_llama_server_refuses_what_specdeck_says_it_refuses(variant, llama_server, tmp_path):
    log = _load(llama_server, write(variant, tmp_path / "hostile.gguf"))
    assert TENSOR_STAGE not in log, log[-2000:]
    assert "failed to load model" in log or "GGML_ASSERT" in log, log[-2000:]
