"""The GGUF VRAM plan against a real llama-server: the KV cache and model buffer it reports
in its log equal SpecDeck's figures for the same file and flags (CPU here: the same sizes
llama.cpp allocates on a GPU, which are the part the plan cannot check without one)."""

from __future__ import annotations

import re

import pytest
from specdeck.core.vram.gguf import LlamaFlags, plan_gguf, read_gguf_model

pytestmark = pytest.mark.slow
MiB = 1024**2


@pytest.mark.parametrize("flags", [("-c", "4000", "-ctk", "q8_0", "-ctv", "q8_0"),
                                   ("-c", "2048", "-ctk", "f16", "-ctv", "q4_0", "-fa", "on")])
def test_kv_and_weights_equal_what_llama_server_allocates(llama_bin, tmp_path, flags):
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    gguf = find_gguf()
    log = tmp_path / "server.log"
    # -v: llama-server logs its buffer sizes (model, KV cache) at the verbose level.
    server = ManagedServer(LaunchProfile(str(llama_bin), str(gguf), ("-t", "1", "-v", *flags)), log)
    server.start(timeout=120)
    server.stop()
    text = log.read_text(errors="replace")
    kv = re.search(r"llama_kv_cache: size =\s+([\d.]+) MiB \(\s*(\d+) cells", text)
    weights = re.search(r"CPU_Mapped model buffer size =\s+([\d.]+) MiB", text)
    assert kv and weights, text[-2000:]
    plan = plan_gguf(read_gguf_model(gguf), None, LlamaFlags.from_args(list(flags)), ())
    host = plan.placements[0]
    assert host.device == "host" and int(kv.group(2)) == plan.n_ctx
    assert round(host.kv_bytes / MiB, 2) == float(kv.group(1))
    assert round(host.weight_bytes / MiB, 2) == float(weights.group(1))


def test_a_drafts_cache_keeps_f16_whatever_the_targets_cache_type(llama_bin, tmp_path):
    """-ctk q8_0 sets the target's K cache only: the draft's stays f16 unless -ctkd says
    otherwise. The plan had given the draft the target's types (276 MiB where llama-server
    allocated 360 MiB at -c 16384)."""
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    gguf = find_gguf()
    flags = ("-c", "4096", "-ctk", "q8_0", "-ctv", "q8_0")
    log = tmp_path / "server.log"
    server = ManagedServer(LaunchProfile(str(llama_bin), str(gguf), (
        "-t", "1", "-v", *flags, "-md", str(gguf), "--spec-type", "draft-simple")), log)
    server.start(timeout=180)
    server.stop()
    text = log.read_text(errors="replace")
    # The target's cache, then the draft's (this build logs the pair twice).
    sizes = list(dict.fromkeys(float(m) for m in re.findall(
        r"llama_kv_cache: size =\s+([\d.]+) MiB", text)))
    assert len(sizes) == 2, text[-3000:]
    model = read_gguf_model(gguf)
    plan = plan_gguf(model, model, LlamaFlags.from_args([*flags, "-md", str(gguf)]), ())
    by_role = {p.role: p for p in plan.placements}
    assert round(by_role["target"].kv_bytes / MiB, 2) == sizes[0]
    assert round(by_role["draft"].kv_bytes / MiB, 2) == sizes[1]
    assert sizes[1] > sizes[0]
