"""The VRAM planner against hand computation, ExLlamaV2's placement rules and published numbers.

Configs are the real ones in tests/data/fixtures (plus three public configs in tests/data that
the fixtures lack). Expected numbers are worked out by hand from those configs in the
comments, not taken from the planner.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from conftest import MODELS, REPO_ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from specdeck.core import vram
from specdeck.core.errors import InvalidInputError
from specdeck.core.models import read_model

DATA = REPO_ROOT / "tests" / "data" / "models"
MiB, GiB = 1024**2, 1024**3

# (folder, layers, E = num_key_value_heads x head_dim), read off each config.json by hand.
KV_SHAPES = [
    ("Llama-2-7b-hf", 32, 32 * 128),
    ("Llama-3.1-8B", 32, 8 * 128),
    ("Llama-3.2-1B", 16, 8 * 64),  # head_dim = 2048 / 32 heads
    ("Mistral-7B-v0.1", 32, 8 * 128),
    ("Qwen2.5-0.5B-Instruct", 24, 2 * 64),  # head_dim = 896 / 14 heads
    ("Qwen2.5-7B-Instruct", 28, 4 * 128),
    ("SmolLM2-135M", 30, 3 * 64),
    ("TinyLlama-1.1B-Chat-v1.0", 22, 4 * 64),
    ("gemma-2-9b-it", 42, 8 * 256),  # head_dim given explicitly in the config
]
FACTOR = {"FP16": 4.0, "Q8": 2.125, "Q6": 1.625, "Q4": 1.125}


def arch(name: str):
    folder = MODELS / name if (MODELS / name).is_dir() else DATA / name
    return read_model(folder).arch


@pytest.mark.parametrize("name,layers,width", KV_SHAPES)
@pytest.mark.parametrize("mode", ["FP16", "Q8", "Q6", "Q4"])
def test_kv_cache_bytes_match_hand_computation(name, layers, width, mode):
    a = arch(name)
    per_token_layer = FACTOR[mode] * width
    assert per_token_layer == int(per_token_layer)  # E is a multiple of 8 for all of them
    assert vram.kv_bytes_per_token_layer(a, mode) == per_token_layer
    assert vram.kv_cache_bytes(a, mode, 16384) == per_token_layer * layers * 16384


def test_kv_cache_of_an_8b_at_8k_is_one_gib():
    # Llama-3.1-8B: 4 x 1024 bytes x 32 layers x 8192 tokens = 2^30 exactly.
    assert vram.kv_cache_bytes(arch("Llama-3.1-8B"), "FP16", 8192) == GiB


def test_kv_per_token_matches_turboderps_published_phi3_figures():
    # exllamav2#425: Phi-3-mini "works out to 384 kB per token ... 108 kB with Q4 cache".
    phi = arch("Phi-3-mini-128k-instruct")
    assert vram.kv_bytes_per_token_layer(phi, "FP16") * phi.num_layers == 384 * 1024
    assert vram.kv_bytes_per_token_layer(phi, "Q4") * phi.num_layers == 108 * 1024


def test_scales_follow_exllamav2_integer_division_for_odd_head_dims():
    # A head_dim of 80 has 80 // 32 = 2 scale groups per head (not 2.5): ExLlamaV2's shape.
    base = arch("Llama-2-7b-hf")
    odd = type(base)(**{**base.__dict__, "head_dim": 80, "num_kv_heads": 4})
    assert vram.kv_bytes_per_token_layer(odd, "Q4") == 4 * 40 + 4 * 40 + 2 * 4 * 2 * 2


@pytest.mark.parametrize("tokens,rounded", [(1, 256), (256, 256), (16000, 16128), (16384, 16384),
                                            (32769, 33024)])
def test_context_rounds_up_to_multiples_of_256(tokens, rounded):
    assert vram.round_context(tokens) == rounded


def test_weights_from_bpw_match_hand_computation_for_llama2_7b():
    w = vram.model_weights(MODELS / "Llama-2-7b-hf", bpw=4.0)
    attention = [m for m in w.modules if m.kind is vram.ModuleKind.ATTENTION]
    mlp = [m for m in w.modules if m.kind is vram.ModuleKind.MLP]
    head = w.modules[-1]
    # q,k,v,o: 4 x 4096 x 4096 at 4 bits = 33,554,432 bytes, plus the FP16 norm (8192).
    # + EXL2's index tensors on the GPU: 4 bytes per input feature of q, k, v and o.
    assert {m.nbytes for m in attention} == {33_554_432 + 8192 + 4 * 4 * 4096}
    # gate, up, down: 3 x 4096 x 11008 at 4 bits = 67,633,152 bytes, plus the norm.
    # + the index tensors: gate and up take 4096 inputs, down 11008.
    assert {m.nbytes for m in mlp} == {67_633_152 + 8192 + 4 * (2 * 4096 + 11008)}
    assert len(attention) == len(mlp) == 32
    assert head.kind is vram.ModuleKind.HEAD and head.nbytes == 32000 * 4096 * 6 // 8 + 4 * 4096
    assert w.embedding_bytes == 32000 * 4096 * 2  # FP16, in system RAM
    assert w.source == "bpw" and w.head_bits == 6


def test_folder_without_exl2_weights_needs_a_bpw():
    with pytest.raises(InvalidInputError, match="--bpw"):
        vram.model_weights(MODELS / "Llama-2-7b-hf")


def test_exl2_config_without_weight_files_uses_its_own_bits(tmp_path):
    config = json.loads((MODELS / "TinyLlama-1.1B-Chat-v1.0" / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "exl2", "bits": 4.65, "head_bits": 8}
    (tmp_path / "config.json").write_text(json.dumps(config))
    w = vram.model_weights(tmp_path)
    assert (w.bpw, w.head_bits, w.source) == (4.65, 8, "bpw")


def _write_exl2_folder(folder, layers=2, hidden=256, inter=512, vocab=1000):
    """A tiny EXL2-shaped model folder with real safetensors files (random bytes)."""
    from safetensors.numpy import save_file

    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
        "intermediate_size": inter, "num_attention_heads": 4, "num_key_value_heads": 2,
        "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": 2048,
        "quantization_config": {"quant_method": "exl2", "version": "0.3.2", "bits": 4.0,
                                "head_bits": 6},
    }
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    rng = np.random.default_rng(0)
    tensors, attention = {}, [0] * layers
    for i in range(layers):
        for name, size in [("self_attn.q_proj.q_weight", 4096), ("self_attn.k_proj.q_weight", 1024),
                           ("self_attn.v_proj.q_weight", 1024), ("self_attn.o_proj.q_weight", 4096),
                           ("self_attn.q_proj.q_scale", 96), ("input_layernorm.weight", 256),
                           ("mlp.gate_proj.q_weight", 8192), ("mlp.up_proj.q_weight", 8192),
                           ("mlp.down_proj.q_weight", 8192), ("post_attention_layernorm.weight", 256)]:
            tensors[f"model.layers.{i}.{name}"] = rng.integers(0, 255, size, dtype=np.uint8)
            if name.startswith(("self_attn", "input_layernorm")):
                attention[i] += size
    tensors["model.embed_tokens.weight"] = np.zeros((vocab, hidden), dtype=np.float16)
    tensors["model.norm.weight"] = np.zeros(hidden, dtype=np.float16)
    tensors["lm_head.q_weight"] = rng.integers(0, 255, 150_000, dtype=np.uint8)
    names = sorted(tensors)
    save_file({n: tensors[n] for n in names[: len(names) // 2]}, str(folder / "output-00001.safetensors"))
    save_file({n: tensors[n] for n in names[len(names) // 2:]}, str(folder / "output-00002.safetensors"))
    return attention, tensors


def test_weights_from_exl2_files_are_exact_per_module(tmp_path):
    attention, tensors = _write_exl2_folder(tmp_path / "tiny-exl2")
    w = vram.model_weights(tmp_path / "tiny-exl2")
    assert w.source == "files" and w.bpw == 4.0
    got_attention = [m.nbytes for m in w.modules if m.kind is vram.ModuleKind.ATTENTION]
    got_mlp = [m.nbytes for m in w.modules if m.kind is vram.ModuleKind.MLP]
    # The files' bytes, and on the GPU EXL2's index tensors: 4 bytes per input feature of
    # every quantized matrix (q_perm, q_invperm, q_group_map).
    h, q_width, inter = w.arch.hidden_size, w.arch.num_heads * w.arch.head_dim, w.arch.intermediate_size
    index_attention, index_mlp = 4 * (3 * h + q_width), 4 * (2 * h + inter)
    assert attention == [4096 + 1024 + 1024 + 4096 + 96 + 256] * 2
    assert got_attention == [a + index_attention for a in attention]
    assert got_mlp == [3 * 8192 + 256 + index_mlp] * 2
    assert w.modules[-1].nbytes == 150_000 + 4 * h  # the quantized head
    assert w.modules[-2].nbytes == 256 * 2  # model.norm, FP16
    assert w.embedding_bytes == 1000 * 256 * 2  # stays in system RAM
    in_files = sum(t.nbytes for n, t in tensors.items() if "embed_tokens" not in n)
    assert w.gpu_bytes == in_files + 2 * (index_attention + index_mlp) + 4 * h


# placement -------------------------------------------------------------------------------------
def request(target, gpus, **kw):
    return vram.PlanRequest(target=target, gpus=vram.parse_gpu_sizes(gpus), **kw)


@pytest.fixture(scope="module")
def llama70b():
    return vram.model_weights(DATA / "Llama-3.1-70B-Instruct", bpw=4.0)


@pytest.fixture(scope="module")
def draft1b():
    return vram.model_weights(MODELS / "Llama-3.2-1B", bpw=4.0)


def test_single_gpu_holds_everything_and_the_cache_follows_the_layers():
    target = vram.model_weights(MODELS / "Llama-3.1-8B", bpw=5.0)
    plan = vram.plan(request(target, "24", context=8192, cache_mode="FP16"))
    gpu = plan.gpu(0)
    assert plan.verdict is vram.FitVerdict.FITS
    assert gpu.target_weights == target.gpu_bytes
    assert gpu.target_cache == GiB  # 8192 tokens x 32 layers x 4 x 1024 bytes
    assert gpu.target_layers == (0, 31)
    assert gpu.overhead["cuda_context"] == vram.DEFAULT_OVERHEADS.process_bytes(gpu.name)
    assert gpu.used_bytes + gpu.free_bytes == gpu.capacity_bytes
    assert plan.system_ram_bytes == 128256 * 4096 * 2


def test_autosplit_fills_gpu0_first_and_keeps_its_reserves_free(llama70b, draft1b):
    plan = vram.plan(request(llama70b, "32,24", context=32768, cache_mode="Q4", draft=draft1b,
                             draft_cache_mode="Q4"))
    g0, g1 = plan.gpus
    assert plan.verdict is vram.FitVerdict.FITS
    # The draft loads first: all of it on GPU 0; the target's layers continue on GPU 1.
    assert g0.draft_layers == (0, 15) and g1.draft_layers is None
    assert g0.target_layers[0] == 0 and g1.target_layers[1] == 79
    assert g1.target_layers[0] == g0.target_layers[1] + 1
    assert g0.target_weights + g1.target_weights == llama70b.gpu_bytes
    per_layer = 1.125 * 1024 * 32768
    for gpu in plan.gpus:
        first, last = gpu.target_layers
        assert gpu.target_cache == (last - first + 1) * per_layer
    # GPU 0 was filled until autosplit's 96 MB reserve + ExLlamaV2's 256 MB would not fit.
    assert not g0.binding and g1.binding
    assert 96 * MiB + 256 * MiB <= g0.free_bytes < 96 * MiB + 256 * MiB + 500 * MiB
    assert plan.headroom_bytes == g1.free_bytes


def test_a_70b_at_2_5_bpw_with_a_1_1b_draft_fits_on_the_5090_alone():
    # The workstation of the issue: 70B at 2.5 bpw, Q4 cache at 16k, a 1.1B draft, 32 + 24 GB.
    target = vram.model_weights(DATA / "Llama-2-70b-hf", bpw=2.5)
    draft = vram.model_weights(MODELS / "TinyLlama-1.1B-Chat-v1.0", bpw=4.0)
    plan = vram.plan(request(target, "32,24", context=16384, cache_mode="Q4", draft=draft,
                             draft_cache_mode="Q4"))
    assert plan.verdict is vram.FitVerdict.FITS
    assert plan.gpu(0).target_layers == (0, 79) and not plan.gpu(1).is_used
    assert plan.gpu(0).target_cache == 1152 * 80 * 16384  # 1.125 x 1024 bytes per layer-token
    assert plan.gpu(0).draft_cache == 288 * 22 * 16384  # 1.125 x 256
    assert 6 * GiB < plan.headroom_bytes < 9 * GiB


def test_turboderps_70b_on_one_24gb_gpu_claim_holds():
    # exllamav2 README: Llama 2 70B "on a single 24 GB GPU with a 2048-token context" at 2.55 bpw.
    target = vram.model_weights(DATA / "Llama-2-70b-hf", bpw=2.55)
    plan = vram.plan(request(target, "24", context=2048))
    assert plan.fits
    assert plan.max_context is not None and 2048 <= plan.max_context < 8192


def test_phi3_128k_q4_matches_the_reported_19_gb():
    # exllamav2#425: Phi-3-mini 6.0 bpw with Q4 cache "loads nicely into 19GB" at its full
    # 128k context (ExLlamaV2's default). nvidia-smi counts in MiB and includes the driver's
    # reservation (~0.45 GiB); the report is a rounded figure, so allow 1 GiB either way.
    target = vram.model_weights(DATA / "Phi-3-mini-128k-instruct", bpw=6.0)
    plan = vram.plan(request(target, "48", context=131072, cache_mode="Q4"))
    seen_by_nvidia_smi = plan.gpu(0).used_bytes + 459 * MiB
    assert abs(seen_by_nvidia_smi - 19 * GiB) < 1 * GiB
    assert plan.gpu(0).overhead["cache_staging"] == 4 * 3072 * 131072  # two FP16 K/V buffers


def test_manual_split_follows_the_shares_and_reports_too_small_ones(llama70b):
    split = vram.plan(request(llama70b, "32,24", context=8192, cache_mode="Q4", gpu_split=(18, 24)))
    assert split.verdict is vram.FitVerdict.FITS
    auto = vram.plan(request(llama70b, "32,24", context=8192, cache_mode="Q4"))
    # An 18 GB share takes fewer layers on GPU 0 than autosplit's fill of 32 GB.
    assert split.gpu(0).target_layers[1] < auto.gpu(0).target_layers[1]
    assert split.gpu(0).target_weights <= 18 * GiB
    too_small = vram.plan(request(llama70b, "32,24", context=8192, cache_mode="Q4", gpu_split=(10, 10)))
    assert too_small.verdict is vram.FitVerdict.NO_FIT
    assert "gpu_split shares" in too_small.problem
    assert any("Remove gpu_split" in tip for tip in too_small.suggestions)
    assert too_small.headroom_bytes < 0


def test_draft_gpu_split_moves_the_draft(llama70b, draft1b):
    plan = vram.plan(request(llama70b, "32,24", context=8192, cache_mode="Q4", draft=draft1b,
                             draft_gpu_split=(0, 2.0)))
    assert plan.gpu(0).draft_layers is None and plan.gpu(1).draft_layers == (0, 15)
    assert plan.gpu(1).draft_weights == draft1b.gpu_bytes


def test_no_fit_suggests_the_changes_that_would_fit(llama70b, draft1b):
    plan = vram.plan(request(llama70b, "32,24", context=65536, cache_mode="FP16", draft=draft1b,
                             draft_cache_mode="FP16"))
    assert plan.verdict is vram.FitVerdict.NO_FIT
    assert plan.problem.startswith("The target does not fit")
    tips = "\n".join(plan.suggestions)
    assert "cache_mode: Q8" in tips  # the first cheaper mode that fits
    assert f"max_seq_len (cache_size) to {plan.max_context}" in tips
    assert plan.max_context < plan.max_context_without_draft < 65536
    # Each suggestion holds: the first cache mode named fits, the context named fits.
    assert vram.plan(request(llama70b, "32,24", context=65536, cache_mode="Q8", draft=draft1b)).fits
    assert vram.plan(request(llama70b, "32,24", context=plan.max_context, draft=draft1b)).verdict \
        is vram.FitVerdict.FITS
    bpw = vram.largest_bpw(vram.PlanRequest(llama70b, vram.parse_gpu_sizes("32,24"), 65536,
                                            draft=draft1b))
    assert bpw is not None and f"{bpw:g} bpw" in tips and bpw < 4.0


def test_cheaper_cache_modes_use_less_memory(llama70b):
    used = [vram.plan(request(llama70b, "48,48", context=32768, cache_mode=m)).gpus
            for m in vram.CACHE_MODES]
    totals = [sum(g.target_cache for g in gpus) for gpus in used]
    assert totals == sorted(totals, reverse=True)
    assert totals[0] == 4 * 1024 * 80 * 32768 and totals[-1] == 1152 * 80 * 32768


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(min_value=6, max_value=48), min_size=1, max_size=3),
       mode=st.sampled_from(vram.CACHE_MODES))
def test_largest_context_is_the_boundary_of_what_fits(sizes, mode):
    target = vram.model_weights(MODELS / "Mistral-7B-v0.1", bpw=5.0)
    base = request(target, ",".join(map(str, sizes)), cache_mode=mode)
    limit = 32768
    best = vram.largest_context(base, limit)
    if best is None:
        small = vram.plan(vram.PlanRequest(**{**base.__dict__, "context": 256}))
        assert small.verdict is not vram.FitVerdict.FITS
        return
    assert best % 256 == 0
    assert vram.plan(vram.PlanRequest(**{**base.__dict__, "context": best})).verdict is vram.FitVerdict.FITS
    if best < limit:
        over = vram.plan(vram.PlanRequest(**{**base.__dict__, "context": best + 256}))
        assert over.verdict is not vram.FitVerdict.FITS


def test_gpus_from_a_frame_are_in_cuda_order_with_the_driver_reservation():
    from specdeck.core.gpu.replay import load_trace

    trace = load_trace(REPO_ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl")
    frame = trace.frames[0]  # the desktop holds ~0.57 GiB on the 4090 (NVML 0, CUDA 1)
    gpus = vram.gpus_from_frame(frame)
    assert [g.name for g in gpus] == ["NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 4090"]
    assert [g.nvml_index for g in gpus] == [1, 0]
    assert gpus[1].reserved_bytes == frame.gpu(0).memory_reserved
    assert gpus[1].in_use_bytes == 0
    counted = vram.gpus_from_frame(frame, count_in_use=True)
    assert counted[1].in_use_bytes == frame.gpu(0).memory_used
    assert counted[1].capacity_bytes == gpus[1].capacity_bytes - frame.gpu(0).memory_used


def test_a_plan_names_each_gpu_as_its_card_does():
    """The plan's GPU at a place in gpu_split is named by the CUDA index its card shows (one
    rule, core.gpu.telemetry.cuda_text), not by that place: where a GPU is lost, the second
    place holds CUDA 2; an estimated order says so; a GPU CUDA cannot see says that."""
    from dataclasses import replace

    from specdeck.core.gpu.replay import load_trace
    from specdeck.core.gpu.telemetry import GpuStatus

    frame = load_trace(REPO_ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl").frames[0]
    rtx4090, rtx5090 = frame.gpu(0), frame.gpu(1)
    lost = replace(rtx4090, index=2, cuda_index=1, status=GpuStatus.LOST)
    three = replace(frame, gpus=(replace(rtx4090, cuda_index=2), rtx5090, lost))
    assert [g.label for g in vram.gpus_from_frame(three)] == ["CUDA 0: RTX 5090",
                                                              "CUDA 2: RTX 4090"]
    guessed = replace(frame, gpus=tuple(replace(g, cuda_index_exact=False) for g in frame.gpus))
    assert [g.label for g in vram.gpus_from_frame(guessed)] == [
        "CUDA 0 (estimated): RTX 5090", "CUDA 1 (estimated): RTX 4090"]
    hidden = replace(frame, gpus=tuple(replace(g, cuda_index=None) for g in frame.gpus))
    assert [g.label for g in vram.gpus_from_frame(hidden)] == [
        "hidden from CUDA: RTX 4090", "hidden from CUDA: RTX 5090"]
    for gpu in vram.gpus_from_frame(frame):  # the card for it says the same
        assert gpu.label.startswith(frame.gpu(gpu.nvml_index).cuda_text + ":")
    typed = vram.parse_gpu_sizes("24,16")
    assert [g.label for g in typed] == ["CUDA 0: 24 GB GPU", "CUDA 1: 16 GB GPU"]
    assert typed[1].in_words == "the 16 GB GPU (CUDA 1)"
    planned = vram.plan(vram.PlanRequest(target=vram.model_weights(MODELS / "Llama-3.2-1B", bpw=4.0),
                                         gpus=vram.gpus_from_frame(guessed), context=4096))
    from specdeck.core.jsonout import to_jsonable

    assert [g["label"] for g in to_jsonable(planned.to_json())["gpus"]] == [  # --json too
        "CUDA 0 (estimated): RTX 5090", "CUDA 1 (estimated): RTX 4090"]


def test_the_plans_sentences_name_gpus_by_the_same_rule(llama70b):
    forced = vram.plan(request(llama70b, "24,24", gpu_split=(40, 4), context=4096))
    assert forced.verdict is vram.FitVerdict.NO_FIT
    assert forced.problem.startswith("The 24 GB GPU (CUDA 0) would need ")
    alone = request(llama70b, "48,24", autosplit=False, context=4096)
    assert alone.split_label == "gpu_split_auto off (all on the 48 GB GPU (CUDA 0))"


@pytest.mark.parametrize("bad,match", [
    (dict(cache_mode="Q5"), "Cache mode"),
    (dict(gpu_split=(10, 10, 10)), "gpu_split lists 3 GPUs"),
    (dict(chunk_size=0), "chunk_size"),
])
def test_bad_requests_say_what_is_wrong(llama70b, bad, match):
    with pytest.raises(InvalidInputError, match=match):
        vram.plan(request(llama70b, "32,24", **bad))


def test_no_gpus_and_bad_sizes_are_user_errors(llama70b):
    with pytest.raises(InvalidInputError, match="no GPUs"):
        vram.plan(vram.PlanRequest(llama70b, ()))
    for text in ("abc", "0", "-4,8", ""):
        with pytest.raises(InvalidInputError):
            vram.parse_gpu_sizes(text)
    with pytest.raises(InvalidInputError):
        vram.parse_split("0,0")
    assert vram.parse_split("20, 24") == (20.0, 24.0)
    assert vram.parse_reserve_mb("96") == (96.0,)
    with pytest.raises(InvalidInputError):
        vram.model_weights(MODELS / "Llama-2-7b-hf", bpw=40)


def test_notes_explain_rounding_and_rope_scaling():
    target = vram.model_weights(MODELS / "TinyLlama-1.1B-Chat-v1.0", bpw=4.0)
    plan = vram.plan(request(target, "8", context=4000))
    assert plan.context == 4096
    notes = " ".join(plan.notes)
    assert "4000 becomes 4096" in notes
    # r = 4096 / 2048 = 2: alpha = -0.13436 + 0.80541 x 2 + 0.28833 x 4
    assert f"{-0.13436 + 0.80541 * 2 + 0.28833 * 4:.2f}" in notes
    assert math.isclose(vram.ntk_rope_alpha(2.0), 2.62978, rel_tol=1e-6)


def test_plan_serialises_to_json(llama70b):
    from specdeck.core.jsonout import dumps

    data = json.loads(dumps(vram.plan(request(llama70b, "32,24", context=8192, cache_mode="Q4"))))
    assert data["verdict"] == "fits" and data["fits"] is True
    assert data["gpus"][0]["used_bytes"] + data["gpus"][0]["free_bytes"] == data["gpus"][0]["capacity_bytes"]
    assert set(data["gpus"][0]["overhead"]) == set(vram.OVERHEAD_PARTS)


# from a TabbyAPI config.yml ------------------------------------------------------------------
class _SampleConfig:
    """TabbyAPI's own config_sample.yml read with ruamel, answering the three calls the
    planner makes of specdeck.core.config's ConfigDocument (used when that is not here)."""

    def __init__(self, path, overrides=None):
        from ruamel.yaml import YAML

        self.path = path
        self.data = YAML().load(path.read_text())
        for (section, key), value in (overrides or {}).items():
            self.data[section][key] = value

    def value(self, section, key):
        return self.data.get(section, {}).get(key)

    def _folder(self, section, dir_key, name_key):
        name = self.value(section, name_key)
        return None if not name else self.path.parent / self.value(section, dir_key) / name

    def target_model_path(self):
        return self._folder("model", "model_dir", "model_name")

    def draft_model_path(self):
        return self._folder("draft_model", "draft_model_dir", "draft_model_name")


def _config_doc(tmp_path, overrides=None):
    from conftest import TABBY

    sample = tmp_path / "config.yml"
    sample.write_text((TABBY / "config_sample.exl2-checkpoint.yml").read_text())
    try:
        from specdeck.core import config  # the real API, once the config editor is merged
    except ImportError:
        return _SampleConfig(sample, overrides)
    doc = _SampleConfig(sample, overrides)  # write the overrides, then load for real
    from ruamel.yaml import YAML

    YAML().dump(doc.data, sample)
    return config.load(sample)


def test_plan_inputs_from_tabbyapis_sample_config(tmp_path):
    models = tmp_path / "models"
    (models / "drafts").mkdir(parents=True)
    doc = _config_doc(tmp_path, {
        ("model", "model_name"): "Llama-3.1-70B-exl2", ("model", "max_seq_len"): 32768,
        ("model", "cache_mode"): "Q4", ("model", "gpu_split"): [20, 24],
        ("draft_model", "draft_model_dir"): "models/drafts",
        ("draft_model", "draft_model_name"): "Llama-3.2-1B-exl2",
        ("draft_model", "draft_cache_mode"): "Q6",
    })
    inputs = vram.inputs_from_tabby_config(doc)
    assert inputs.model.endswith("models/Llama-3.1-70B-exl2")
    assert inputs.draft.endswith("models/drafts/Llama-3.2-1B-exl2")
    assert (inputs.context, inputs.cache_mode, inputs.draft_cache_mode) == (32768, "Q4", "Q6")
    assert inputs.gpu_split == "20,24" and inputs.draft_gpu_split is None
    assert inputs.autosplit and inputs.autosplit_reserve_mb == "96" and inputs.chunk_size == 2048


def test_config_without_a_model_name_is_a_user_error(tmp_path):
    with pytest.raises(InvalidInputError, match="model_name"):
        vram.inputs_from_tabby_config(_config_doc(tmp_path))


def test_max_seq_len_minus_one_means_the_native_context():
    inputs = vram.PlanInputs(model=str(MODELS / "Mistral-7B-v0.1"), bpw=4.0, gpus="24", context=-1)
    assert vram.build_request(inputs).context == 32768
    default = vram.PlanInputs(model=str(MODELS / "Mistral-7B-v0.1"), bpw=4.0, gpus="24")
    assert vram.build_request(default).context == 4096


def test_without_flash_attention_the_attention_matrix_is_counted():
    # ExLlamaV2 without flash-attn materialises 2 x chunk^2 x heads x 2 bytes per forward.
    inputs = vram.PlanInputs(model=str(MODELS / "Llama-2-7b-hf"), bpw=4.0, gpus="24", context=2048)
    flash = vram.plan_from_inputs(inputs).gpu(0)
    plain = vram.plan_from_inputs(vram.PlanInputs(**{**inputs.__dict__, "flash_attention": False})).gpu(0)
    extra = plain.overhead["activations"] - flash.overhead["activations"]
    assert extra == 2 * 2048 * 2048 * 32 * 2 + 128


def test_single_gpu_overheads_match_the_documented_formulas():
    # Llama-3.1-8B (hidden 4096, 32 heads, 8 KV heads x 128, vocab 128256), 8192 tokens FP16,
    # TabbyAPI's chunk_size 2048, worked out by hand from docs/vram.md:
    target = vram.model_weights(MODELS / "Llama-3.1-8B", bpw=5.0)
    gpu = vram.plan(request(target, "24", context=8192)).gpu(0)
    # The head dequantizes 4096 x 128256 = 525,336,576 elements (< 512 Mi) at 2 bytes:
    # larger than the MLP's 2048x4096x2 + 2 x 2048x14336x2 + 4096x14336x2 (+3 x 128).
    mlp = 2048 * 4096 * 2 + 2 * 2048 * 14336 * 2 + 4096 * 14336 * 2 + 3 * 128
    assert gpu.overhead["scratch"] == 2 * 4096 * 128256 > mlp
    assert gpu.overhead["rope_tables"] == 4 * 128 * 8192
    assert gpu.overhead["activations"] == 2048 * 2 * (2 * 4096 + 2 * 4096 + 2 * 1024) + 16 * 128256 * 8
    assert gpu.overhead["cache_staging"] == 0  # FP16 needs no staging
    # outside PyTorch: the context (400 MiB before Hopper), cuBLAS's handle, kernel images
    assert gpu.overhead["cuda_context"] == 400 * MiB + 69_206_016 + 92_274_688
    # inside it: a cuBLAS workspace per stream, two streams (8,519,680 B each before Hopper)
    assert gpu.overhead["blas_workspaces"] == 2 * 8_519_680
    assert gpu.overhead["allocator_slack"] == int((gpu.target_weights + GiB) * 0.02)
    assert gpu.used_bytes == gpu.target_weights + GiB + sum(gpu.overhead.values())


def test_buffers_are_sized_for_the_chunk_tabbyapi_passes_on(llama70b, draft1b):
    """TabbyAPI (backends/exllamav2/model.py, 02a8d68) clamps chunk_size to 256..max_seq_len
    and rounds it up to a multiple of 256 before exllamav2 sees it; exllamav2 0.3.2
    (model.py:536, load_autosplit_gen) clamps it to max_seq_len once more under autosplit, not
    with a manual gpu_split. So at a 1000-token context the 2048 default sizes buffers for
    1024 tokens with a manual split and for 1000 under autosplit, and chunk_size 128 plans as
    256."""
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS, model_costs

    def overheads(plan) -> int:
        return sum(g.overhead["activations"] + g.overhead["scratch"] for g in plan.gpus)

    def planned(**kw):
        return overheads(vram.plan(request(llama70b, "48,48", context=1000, draft=draft1b, **kw)))

    manual = {"gpu_split": (40.0, 40.0)}
    assert planned(**manual) == planned(**manual, chunk_size=1024)  # not 2048's buffers
    assert planned() < planned(**manual)  # autosplit: 1000, manual: 1024
    assert planned(chunk_size=128) == planned(chunk_size=256)
    full = model_costs(llama70b.arch, "FP16", 1024, 2048, DEFAULT_OVERHEADS)
    tabby = model_costs(llama70b.arch, "FP16", 1024, 1024, DEFAULT_OVERHEADS)
    assert tabby.activations < full.activations  # the clamp matters to the plan


def test_a_hopper_gpu_gets_the_overheads_measured_on_an_h200():
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS as o
    from specdeck.core.vram.costs import is_hopper

    assert is_hopper("NVIDIA H200") and is_hopper("NVIDIA H100 80GB HBM3") and is_hopper("NVIDIA GH200 480GB")
    assert not any(is_hopper(n) for n in ("NVIDIA GeForce RTX 4090", "32 GB GPU", "NVIDIA A100-SXM4-80GB"))
    # The probe split the process's memory outside PyTorch into context, cuBLAS and kernels
    # (docs/benchmarks/gpu-probe-2026-11-26.md); the kit's memory step, another machine the
    # same day, measured it whole: 811,139,072 bytes (NVML used after load less PyTorch's
    # reserved, docs/benchmarks/gpu-2026-11-26-2.json). The parts add up to it within 0.5%.
    assert o.process_bytes("NVIDIA H200") == pytest.approx(811_139_072, rel=0.005)
    assert o.workspace_bytes("NVIDIA H200") == 67_108_864  # what stayed allocated with no model
    target = vram.model_weights(MODELS / "Llama-3.1-8B", bpw=5.0)
    h200 = vram.GpuSpec(0, "NVIDIA H200", 150_754_820_096, 644_939_776)
    plan = vram.plan(vram.PlanRequest(target=target, gpus=(h200,), context=2048))
    assert plan.gpus[0].overhead["cuda_context"] == o.process_bytes("NVIDIA H200")
    assert plan.gpus[0].overhead["blas_workspaces"] == 67_108_864
