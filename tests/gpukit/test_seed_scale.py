"""The seed-scale step's CPU half (issue 40): EXL2 models of any shape in exllamav2 0.3.2's
tensor layout, checked against the library's own source (its option tables, its bit count
QParams.total_bits and its group-map builder make_group_map_py, run here from the installed
source without importing the package), read back with the real safetensors library, sized by
`specdeck vram` from their files, and the step's goal and prediction arithmetic.

What stays for a GPU: that exllamav2's loader and kernels accept these files (the layout is
the converter's by construction and by these checks, not yet by a load), and every number
the step measures."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math

import kit_paths  # noqa: F401
import numpy as np
import pytest
from conftest import REPO_ROOT

torch = pytest.importorskip("torch")

from gpukit import exl2_synth, seed_scale  # noqa: E402
from gpukit.config import TINY, SeedConfig  # noqa: E402

LLAMA_70B = json.loads((REPO_ROOT / "tests/data/models/Llama-3.1-70B-Instruct/config.json")
                       .read_text())


@pytest.fixture(scope="module")
def qparams():
    return exl2_synth.load_qparams()


@pytest.fixture(scope="module")
def make_group_map_py():
    """exllamav2's own pure-Python group map (ext.py), lifted out of the module whose import
    would build the CUDA extension."""
    tree = ast.parse((exl2_synth.exllamav2_dir() / "ext.py").read_text(encoding="utf-8"))
    node = next(n for n in tree.body
                if isinstance(n, ast.FunctionDef) and n.name == "make_group_map_py")
    namespace = {"torch": torch}
    exec(compile(ast.Module([node], []), "exllamav2/ext.py", "exec"), namespace)
    return namespace["make_group_map_py"]


def _every_option(qparams, config):
    attn, mlp = exl2_synth.llama_linears(config, 0)
    head = exl2_synth.Linear("lm_head", config["hidden_size"], config["vocab_size"])
    for table, linears in ((qparams.qparams_attn, attn), (qparams.qparams_mlp, mlp)):
        for option in table:
            yield from zip(option, linears)
    for option in qparams.qparams_headoptions.values():
        yield option, head


@pytest.mark.parametrize("shape", ["70B", "odd"])
def test_every_option_is_laid_out_as_the_converter_counts_it(qparams, make_group_map_py, shape):
    """Bytes = QParams.total_bits / 8 for every option of every table, and exllamav2's group
    map over q_groups covers exactly the layer's rows: the packed rows, groups and scales
    agree with the library. 'odd' has row counts that leave a short last group."""
    config = LLAMA_70B if shape == "70B" else {
        **LLAMA_70B, "hidden_size": 320, "intermediate_size": 928, "num_attention_heads": 5,
        "num_key_value_heads": 1, "head_dim": 64, "vocab_size": 4000}
    checked = 0
    for option, linear in _every_option(qparams, config):
        specs = exl2_synth.quantized_linear(linear, option)
        assert sum(s.nbytes for s in specs) * 8 == option.total_bits((linear.rows, linear.columns))
        groups = next(s for s in specs if s.fill == "groups").groups
        q_groups = torch.tensor([v for g in groups for v in (g.bits, g.first_qrow)],
                                dtype=torch.short)
        q_weight = next(s for s in specs if s.name.endswith(".q_weight"))
        assert len(make_group_map_py(q_groups, q_weight.shape[0])) == 2 * linear.rows
        bits = [g.bits for g in groups]
        assert bits == sorted(bits, reverse=True)  # the kernels' order: widest first
        checked += 1
    assert checked == sum(len(o) for o in qparams.qparams_attn + qparams.qparams_mlp) + len(
        qparams.qparams_headoptions)


@pytest.fixture(scope="module")
def kernels():
    return exl2_synth.exl2_kernels()


def test_the_kernel_sets_are_read_from_exllamav2s_source(kernels):
    """kernel_select.cuh's cases: 4-bit alone, 8 + 6 (the 6-bit head), 8 + 4 + 3 have
    kernels; 8 + 4 (an option of the converter's down_proj table) has none."""
    mask = exl2_synth.kernel_mask
    assert {mask([4]), mask([8, 6]), mask([8, 4, 3]), mask([3, 2])} <= kernels
    assert mask([8, 4]) not in kernels
    assert any(mask(q.bits) not in kernels for o in exl2_synth.load_qparams().qparams_mlp
               for q in o)


@pytest.mark.parametrize("bpw", [2.5, 3.0, 3.5, 4.0, 4.65, 5.0, 6.0])
def test_every_linear_of_the_seed_models_has_an_exllamav2_kernel(qparams, kernels, bpw):
    """q_gemm.cu returns without computing a linear whose bit-width set has no kernel, for
    up to 32 rows: a decode or verification step would skip it and the step costs would
    time less than a real model's forward. Every linear the writer plans at the seed's
    shapes (and at the toy rehearsal's) gets a kernel exllamav2 0.3.2 compiles."""
    for model in SeedConfig().models:
        for shape in ((), TINY.seed.shape):
            config = seed_scale.model_config(model, shape)
            plan = exl2_synth.plan_model(config, bpw, model.head_bits, qparams, kernels)
            for t in plan.tensors:
                if t.fill == "groups":
                    assert exl2_synth.kernel_mask([g.bits for g in t.groups]) in kernels, \
                        (model.name, t.name, [g.bits for g in t.groups])
    written = exl2_synth.plan_model(seed_scale.model_config(SeedConfig().models[1], ()), 4.0,
                                    6, qparams, kernels)
    assert abs(written.bpw_layers - 4.0) < 0.01


@pytest.mark.parametrize("bpw", [2.5, 3.0, 4.0, 4.65, 6.0])
def test_the_layers_reach_the_target_bits_per_weight(qparams, kernels, bpw):
    plan = exl2_synth.plan_model(LLAMA_70B, bpw, 6, qparams, kernels)
    assert abs(plan.bpw_layers - bpw) < 0.01
    # the decoder layers' bytes, over Llama-3-70B's weights (q, o: 8192 x 8192; k, v:
    # 8192 x 1024; gate, up, down: 8192 x 28672), are that rate
    layers = sum(t.nbytes for t in plan.tensors if t.name.startswith("model.layers."))
    numel = 80 * (8192 * 8192 * 2 + 8192 * 1024 * 2 + 8192 * 28672 * 3)
    assert layers * 8 / numel == pytest.approx(bpw, abs=0.01)


def test_a_written_model_reads_back_in_the_converters_layout(tmp_path, qparams):
    from safetensors import safe_open

    config = {**LLAMA_70B, **dict(TINY.seed.shape)}
    plan = exl2_synth.write_model(tmp_path / "m", config, 2.5, 6, qparams=qparams,
                                  shard_bytes=4 * 2**20)
    files = sorted((tmp_path / "m").glob("*.safetensors"))
    assert len(files) > 1 and files[0].name.startswith("output-00001-of-")
    seen = {}
    for path in files:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                seen[name] = f.get_tensor(name)
    assert set(seen) == {t.name for t in plan.tensors}
    dtypes = {"I32": torch.int32, "I16": torch.int16, "F16": torch.float16}
    for t in plan.tensors:
        assert seen[t.name].dtype == dtypes[t.dtype] and tuple(seen[t.name].shape) == t.shape
    perm = seen["model.layers.1.mlp.down_proj.q_invperm"]
    assert sorted(perm.tolist()) == list(range(config["intermediate_size"]))
    assert torch.isfinite(seen["model.embed_tokens.weight"]).all()
    assert seen["model.embed_tokens.weight"].float().std().item() == pytest.approx(0.02, rel=0.1)
    scale_max = seen["model.layers.0.self_attn.q_proj.q_scale_max"].float()
    assert (scale_max > 0).all() and torch.isfinite(scale_max).all()
    written = json.loads((tmp_path / "m" / "config.json").read_text())
    assert written["quantization_config"]["quant_method"] == "exl2"
    assert written["quantization_config"]["bits"] == 2.5
    assert (tmp_path / "m" / exl2_synth.COMPLETE).is_file()


def _unpack_codes(packed, bits):
    """pack_tensor.cu pack_columns inverted: ``bits`` words per 32 rows of a column, code i
    at bit i x bits of their little-endian stream."""
    words = packed.astype(np.uint64).reshape(-1, bits, packed.shape[1])
    stream = sum(words[:, k, :].astype(object) << (32 * k) for k in range(bits))
    return np.stack([(stream >> (i * bits)) & (2**bits - 1) for i in range(32)], axis=1)


@pytest.mark.parametrize("bits", [2, 3, 4, 5, 6, 8])
def test_the_written_codes_are_symmetric_about_the_kernels_zero_point(qparams, bits):
    """Random bits would decode to q - 2**(bits-1) with mean -0.5: every column leaning one
    way, a 70B's residual past fp16's range within three layers. The writer's codes are odd,
    so the dequantized weights have mean 0 and every code is still random."""
    linear = exl2_synth.Linear("w", 256, 96)
    specs = exl2_synth.quantized_linear(linear, qparams.QParams(128, [bits], [1], 4))
    spec = next(s for s in specs if s.name.endswith(".q_weight"))
    raw = b"".join(exl2_synth.Filler().chunks(spec))
    assert len(raw) == spec.nbytes
    codes = _unpack_codes(np.frombuffer(raw, dtype=np.uint32).reshape(spec.shape), bits)
    values = codes.astype(np.int64) - 2 ** (bits - 1)
    assert (codes % 2 == 1).all()
    assert abs(values.mean()) < 0.05 * values.std()
    assert len(np.unique(codes)) == 2 ** (bits - 1)


def test_a_half_written_model_is_written_again(tmp_path, qparams):
    config = {**LLAMA_70B, **dict(TINY.seed.shape)}
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "output.safetensors").write_bytes(b"cut off")
    exl2_synth.write_model(folder, config, 4.0, 6, qparams=qparams)
    assert (folder / exl2_synth.COMPLETE).is_file()
    assert (folder / "output.safetensors").stat().st_size > 1000


def _plan(*args: str) -> dict:
    from specdeck.core.cli import main

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        main(["vram", *args, "--json"])
    return json.loads(buffer.getvalue())


def test_specdeck_sizes_the_seed_models_from_their_files(tmp_path):
    """The plan reads the written folders as EXL2 and sizes them from their tensors: the
    target's weights are its files less the embedding (ExLlamaV2 keeps that in system RAM),
    the tied draft's include its embedding once, as the fp16 head on the GPU; each adds the
    index tensors exllamav2 builds on the GPU per input row (core.vram.weights)."""
    from specdeck.core.vram.weights import EXL2_INDEX_BYTES_PER_INPUT

    work = tmp_path / "work"
    models = seed_scale.write_models(TINY.seed, work, log=lambda _line: None)
    target, draft = seed_scale.load_args(TINY.seed.loads[0], work)
    plan = _plan("--model", str(target), "--draft", str(draft), "--ctx", "512",
                 "--cache-mode", "Q4", "--draft-cache-mode", "Q4", "--gpus", "80")
    gpu = plan["gpus"][0]
    by_name = {m.name: m for m in SeedConfig().models}
    gpu_bytes = {}
    for name in ("llama3-70b-2.5bpw", "llama3.2-1b-4.0bpw"):
        config = seed_scale.model_config(by_name[name], TINY.seed.shape)
        plan_of = exl2_synth.plan_model(config, by_name[name].bpw, 6, exl2_synth.load_qparams(),
                                        exl2_synth.exl2_kernels())
        rows = sum(t.shape[0] for t in plan_of.tensors if t.name.endswith(".q_invperm"))
        gpu_bytes[name] = models[name]["bytes"] + EXL2_INDEX_BYTES_PER_INPUT * rows
        if not config.get("tie_word_embeddings"):
            gpu_bytes[name] -= config["vocab_size"] * config["hidden_size"] * 2
    assert gpu["target_weights"] == gpu_bytes["llama3-70b-2.5bpw"]
    assert gpu["draft_weights"] == gpu_bytes["llama3.2-1b-4.0bpw"]
    assert plan["fits"] is True


def test_every_seed_load_names_models_the_config_defines():
    for cfg in (SeedConfig(), TINY.seed):
        names = {m.name for m in cfg.models}
        assert all({load.target, load.draft} - {None} <= names for load in cfg.loads)
        for model in seed_scale.needed_models(cfg):
            assert (REPO_ROOT / model.config).is_file()
    first = SeedConfig().loads[0]
    assert (first.context, first.cache_mode, first.draft_cache_mode) == (16384, "Q4", "Q4")


def test_the_goal_is_the_plan_above_the_peak_by_at_most_5_percent_or_300_mib():
    def comparison(planned, measured):
        return {"rows": [{"what": "device total (NVML used, peak)", "planned": planned,
                          "measured": measured}]}

    gib = 2**30
    assert seed_scale.goal(comparison(int(25.2 * gib), 24 * gib))["met"] is True   # +5.0%
    assert seed_scale.goal(comparison(int(25.3 * gib), 24 * gib))["met"] is False  # wasteful
    assert seed_scale.goal(comparison(23 * gib, 24 * gib))["met"] is False  # under: unsafe
    # a small load: 300 MiB is the allowance
    assert seed_scale.goal(comparison(2 * gib + 290 * 2**20, 2 * gib))["met"] is True
    assert seed_scale.goal({"rows": []})["met"] is None


def test_the_prediction_is_cores_formula_with_the_measured_acceptance_length():
    steps = {"k": 4, "target": {"1": {"median_s": 0.040}, "5": {"median_s": 0.046}},
             "draft": {"1": {"median_s": 0.004}}}
    p = seed_scale.predict(steps, 3.0)
    # 3 tokens per verification; one verification and four draft steps per 3 tokens
    assert p.speedup == pytest.approx(3.0 * 0.040 / (4 * 0.004 + 0.046))
    assert seed_scale.predict(steps, None) is None
    assert seed_scale.predict({k: v for k, v in steps.items() if k != "draft"}, 3.0) is None
    ab = {"summaries": [{"arm": "draft k=4", "mean_acceptance_length": 2.5},
                        {"arm": "n-gram k=4", "mean_acceptance_length": 1.9}]}
    assert seed_scale.draft_arm_length(ab, 4) == 2.5
    assert seed_scale.draft_arm_length(ab, 2) is None
    assert math.isclose(seed_scale.predict(steps, 1.0).speedup, 0.040 / 0.062)


def test_the_report_shows_the_seed_loads_goal_costs_and_prediction(tmp_path):
    from gpukit.report import write_report
    from gpukit.state import KitState
    from gpukit.steps import STEPS

    state = KitState(tmp_path / "work")
    state.write_json("env", {"date": "2026-12-01"})
    gib = 2**30
    comparison = {"label": "seed", "context": 16384, "plan_fits": True, "rows": [
        {"what": "device total (NVML used, peak)", "planned": int(25.5 * gib),
         "measured": 25 * gib, "error": 0.02, "verdict": "accurate"}]}
    state.write_json("seed", {
        "models": {"llama3-70b-2.5bpw": {"bytes": 24328759812, "bpw_target": 2.5,
                                         "bpw_layers": 2.5001, "seconds": 18.4}},
        "loads": [{"label": "70B 2.5 bpw + 1B draft 4.0 bpw, Q4 caches, 16k (seed 000)",
                   "comparison": comparison, "goal": seed_scale.goal(comparison),
                   "steps": {"k": 4, "prefix_tokens": 1024,
                             "target": {"1": {"median_s": 0.02, "runs": 20},
                                        "5": {"median_s": 0.023, "runs": 20}},
                             "draft": {"1": {"median_s": 0.002, "runs": 20}}},
                   "prediction": seed_scale.predict(
                       {"k": 4, "target": {"1": {"median_s": 0.02}, "5": {"median_s": 0.023}},
                        "draft": {"1": {"median_s": 0.002}}}, 2.6).to_json()}]})
    md, _ = write_report(state, STEPS, "gpu", tmp_path / "out")
    text = md.read_text()
    assert "| llama3-70b-2.5bpw | 22.66 | 2.5 / 2.5001 | 18.4 s |" in text
    assert "| device total (NVML used, peak) | 25.500 | 25.000 | +2.0% | accurate |" in text
    assert "Goal: **met** (within the goal)." in text
    assert "| target, 5 rows | 23.00 | 20 |" in text
    assert "(mean acceptance length 2.60 at k=4): **1.68x**" in text


def test_exllamav2s_own_config_reader_accepts_the_written_models(tmp_path, monkeypatch):
    """exllamav2 0.3.2's ExLlamaV2Config (config.py, run from its source with the compiled
    extension stubbed: reading a folder does not call it) prepares each written folder: the
    architecture is found, every key it expects is in the files' headers (it raises
    otherwise), and the tied draft's head is read from the embedding."""
    import sys
    import types

    work = tmp_path / "work"
    seed_scale.write_models(TINY.seed, work, log=lambda _line: None)
    package = types.ModuleType("exllamav2")
    package.__path__ = [str(exl2_synth.exllamav2_dir())]  # no __init__: that builds the extension
    ext = types.ModuleType("exllamav2.ext")
    ext.none_tensor = torch.empty((1, 1), device="meta")
    ext.exllamav2_ext = None
    for name in [n for n in sys.modules if n == "exllamav2" or n.startswith("exllamav2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "exllamav2", package)
    monkeypatch.setitem(sys.modules, "exllamav2.ext", ext)
    from exllamav2.config import ExLlamaV2Config

    target, draft = seed_scale.load_args(TINY.seed.loads[0], work)
    heads = {}
    for folder in (target, draft):
        config = ExLlamaV2Config(str(folder))
        assert config.arch.arch_string == "LlamaForCausalLM"
        assert config.num_hidden_layers == dict(TINY.seed.shape)["num_hidden_layers"]
        assert config.vocab_size == 128256
        heads[folder.name] = config.arch.lm.keys["lm_head"]
    assert heads == {"llama3-70b-2.5bpw": "lm_head", "llama3.2-1b-4.0bpw": "model.embed_tokens"}
    for name in [n for n in sys.modules if n.startswith("exllamav2.")]:
        monkeypatch.delitem(sys.modules, name)


def test_exllamav2_is_found_in_a_site_folder_made_after_start(tmp_path, monkeypatch):
    """The device's kit process starts with $WORK/site on sys.path before the install step
    makes it; the import system caches that the folder was missing."""
    import importlib.util
    import sys

    site = tmp_path / "site"
    monkeypatch.delenv("SPECDECK_EXLLAMAV2_SOURCE", raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "no-venv"))
    monkeypatch.syspath_prepend(str(site))
    assert importlib.util.find_spec("specdeck_no_such_module") is None  # caches 'missing'
    (site / "exllamav2" / "conversion").mkdir(parents=True)
    (site / "exllamav2" / "__init__.py").write_text("raise ImportError('would build')\n")
    (site / "exllamav2" / "conversion" / "qparams.py").write_text("import math\n")
    assert exl2_synth.exllamav2_dir() == site / "exllamav2"
