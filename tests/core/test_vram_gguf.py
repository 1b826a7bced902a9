"""The llama-server VRAM plan from GGUF headers and flags (core/vram/gguf.py): sizes from the
real demo GGUF, placement as llama.cpp's load_tensors assigns layers, the CLI on a llama-swap
model. The KV and weight sizes are also checked against a real llama-server's own log in
tests/servers/test_vram_gguf_live.py."""

from __future__ import annotations

import json

import pytest
from specdeck.core.cli import main
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import InvalidInputError
from specdeck.core.vram.gguf import LlamaFlags, padded_ctx, plan_gguf, read_gguf_model
from specdeck.core.vram.gpus import GpuSpec

GiB = 1024**3


@pytest.fixture(scope="module")
def demo():
    return read_gguf_model(find_gguf())


def gpus(*sizes_gb: float) -> tuple[GpuSpec, ...]:
    return tuple(GpuSpec(i, f"{s} GB", int(s * GiB), 0) for i, s in enumerate(sizes_gb))


def test_tensor_sizes_from_the_header_add_up_to_the_files_data(demo):
    # Every byte of tensor data is accounted for by type and shape: nothing guessed.
    assert demo.weight_bytes == demo.file_data_bytes
    assert (demo.architecture, demo.n_layer, demo.context_length) == ("llama", 30, 8192)
    assert (demo.head_count_kv, demo.key_length, demo.value_length) == (3, 64, 64)
    assert len(set(demo.layer_bytes)) == 1 and demo.input_bytes > 0
    # K and V: 4096 cells x 30 layers x 3 heads x 64 dims, q8_0 = 34 bytes per 32 elements.
    assert demo.kv_bytes_per_layer(4096, "q8_0", "q8_0") * 30 == 2 * 4096 * 30 * 192 * 34 // 32


def test_ngl_counts_the_output_layer_as_llama_cpp_does(demo):
    one = gpus(24)
    def on_gpu(ngl: int):
        plan = plan_gguf(demo, None, LlamaFlags.from_args(["-ngl", str(ngl)]), one)
        return next(p for p in plan.placements if p.device == "CUDA0") if ngl else None

    # i_gpu_start = max(n_layer + 1 - ngl, 0) (src/llama-model.cpp, load_tensors)
    assert on_gpu(10).layers == tuple(range(21, 30)) and on_gpu(10).output
    assert on_gpu(1).layers == () and on_gpu(1).output
    assert on_gpu(31).layers == tuple(range(30)) and on_gpu(99).layers == tuple(range(30))
    # SmolLM2 ties its output to token_embd: llama.cpp duplicates it onto the output's device.
    assert demo.tied_output
    assert on_gpu(99).weight_bytes == sum(demo.layer_bytes) + demo.output_bytes + demo.input_bytes
    assert on_gpu(10).weight_bytes == sum(demo.layer_bytes[21:]) + demo.output_bytes + demo.input_bytes
    plan = plan_gguf(demo, None, LlamaFlags.from_args(["-ngl", "0"]), one)
    assert [p.device for p in plan.placements] == ["host"]
    assert plan.host_bytes == demo.weight_bytes + 30 * demo.kv_bytes_per_layer(8192, "f16", "f16")


def test_tensor_split_and_draft_devices_put_each_part_where_the_flags_say(demo):
    flags = LlamaFlags.from_args(["-c", "4000", "-ngl", "99", "-ts", "3,1", "-ctk", "q8_0",
                                  "-ctv", "q8_0", "-ngld", "99", "--device-draft", "CUDA1"])
    plan = plan_gguf(demo, demo, flags, gpus(24, 24))
    assert plan.n_ctx == padded_ctx(4000, demo) == 4096
    target = {p.device: p for p in plan.placements if p.role == "target"}
    assert len(target["CUDA0"].layers) == 24 and len(target["CUDA1"].layers) == 6
    assert target["CUDA1"].output and not target["CUDA0"].output
    draft = [p for p in plan.placements if p.role == "draft" and p.device != "host"]
    assert [p.device for p in draft] == ["CUDA1"] and len(draft[0].layers) == 30
    by_device = {g.device: g for g in plan.gpus}
    # The draft's cache is f16: -ctk/-ctv are the target's (-ctkd/-ctvd the draft's).
    assert by_device["CUDA1"].kv_bytes == (6 * demo.kv_bytes_per_layer(4096, "q8_0", "q8_0")
                                           + 30 * demo.kv_bytes_per_layer(4096, "f16", "f16"))
    assert plan.fits
    tight = plan_gguf(demo, demo, flags, gpus(24, 0.5))
    assert not tight.fits and tight.gpus[1].free_bytes < 0


def test_bad_flags_are_named(demo):
    with pytest.raises(InvalidInputError, match="Cache type 'q3_k' is not one llama-server accepts"):
        plan_gguf(demo, None, LlamaFlags.from_args(["-ctk", "q3_k"]), gpus(24))
    with pytest.raises(InvalidInputError, match="Device CUDA3 is not among the GPUs"):
        plan_gguf(demo, None, LlamaFlags.from_args(["--device", "CUDA3"]), gpus(24))
    with pytest.raises(InvalidInputError, match="--n-gpu-layers 'many' is not a whole number"):
        LlamaFlags.from_args(["-ngl", "many"])


def test_cli_plans_a_llama_swap_models_cmd(tmp_path, capsys):
    gguf = find_gguf()
    config = tmp_path / "config.yaml"
    config.write_text(f"""\
macros:
  "llama": /opt/llama.cpp/llama-server --port ${{PORT}}
models:
  "smol":
    cmd: |
      ${{llama}}
      -m {gguf}
      -md {gguf} -ngld 99 --device-draft CUDA1
      -c 8192 -ngl 99 -ctk q8_0 -ctv q8_0
""")
    code = main(["vram", "--swap-config", str(config), "--swap-model", "smol", "--gpus", "8,4",
                 "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["fits"] and data["n_ctx"] == 8192 and data["n_ctx_draft"] == 8192
    drafts = [p for p in data["placements"] if p["role"] == "draft" and p["device"] != "host"]
    assert [p["device"] for p in drafts] == ["CUDA1"]
    code = main(["vram", "--model", str(gguf), "--gpus", "0.25", "--llama-args", "-c 65536 -ngl 99"])
    out = capsys.readouterr().out
    assert code == 1 and "DOES NOT FIT" in out and "compute buffer size" in out
