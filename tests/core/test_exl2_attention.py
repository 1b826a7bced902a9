"""exllamav2's own unpaged attention, run on the CPU, against a causal reference row by row.

exllamav2 cannot be imported without CUDA (it builds its extension on import), but its torch
attention path needs none: this loads the installed 0.3.2 package's source (`make test`
installs it, without its dependencies, into .venv/exllamav2-src): attn_params.py whole, with
its two imports stubbed (a tensor move and a constant), and from attn.py the two methods the
torch path runs (``_attn_torch``, ``repeat_kv``) on a class that carries what they read.
So the fault (0.2.9-0.3.2: SDPA with no causal mask), the library's masked matmul branch
(``no_sdpa``) and SpecDeck's fix (core.engines.exl2_attention) all run the library's code.
"""

from __future__ import annotations

import ast
import importlib.util
import math
import os
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from specdeck.core.engines import exl2_attention  # noqa: E402

SOURCE = Path(os.environ.get("SPECDECK_EXLLAMAV2_SOURCE", Path(sys.prefix) / "exllamav2-src"))


def _package_dir() -> Path:
    folder = SOURCE / "exllamav2"
    if not (folder / "attn.py").is_file():
        pytest.fail(f"exllamav2 0.3.2's source is not at {folder}: `make test` installs it "
                    "(pip install --no-deps --target .venv/exllamav2-src exllamav2==0.3.2).")
    return folder


@pytest.fixture(scope="module")
def exl2():
    """attn_params.Params and a fresh ExLlamaV2Attention-like class made of the library's
    own ``_attn_torch`` and ``repeat_kv``."""
    folder = _package_dir()
    stubs = {
        "exllamav2": types.ModuleType("exllamav2"),
        "exllamav2.compat": types.ModuleType("exllamav2.compat"),
        "exllamav2.tensor_p": types.ModuleType("exllamav2.tensor_p"),
    }
    stubs["exllamav2"].__path__ = []  # a package that runs no __init__ (that builds the extension)
    stubs["exllamav2.compat"].safe_move_tensor = lambda tensor, device, non_blocking=False: \
        tensor.to(device)
    stubs["exllamav2.tensor_p"].BROADCAST_KV = 0
    saved = {name: sys.modules.get(name) for name in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("exllamav2.attn_params",
                                                      folder / "attn_params.py")
        params = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(params)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module

    from torch.nn.attention.bias import causal_lower_right

    tree = ast.parse((folder / "attn.py").read_text(encoding="utf-8"))
    attention = next(node for node in tree.body
                     if isinstance(node, ast.ClassDef) and node.name == "ExLlamaV2Attention")
    methods = [node for node in attention.body if isinstance(node, ast.FunctionDef)
               and node.name in ("_attn_torch", "repeat_kv")]
    assert sorted(m.name for m in methods) == ["_attn_torch", "repeat_kv"]

    def make_class():
        host = ast.ClassDef(name="ExLlamaV2Attention", bases=[], keywords=[], body=methods,
                            decorator_list=[], type_params=[])
        module = ast.fix_missing_locations(ast.Module(body=[host], type_ignores=[]))
        namespace = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional, "math": math,
                     "has_lower_right_sdpa": True, "causal_lower_right": causal_lower_right,
                     "ext_c": None, "__name__": "exllamav2.attn"}
        exec(compile(module, str(folder / "attn.py"), "exec"), namespace)  # noqa: S102
        return namespace["ExLlamaV2Attention"]

    return SimpleNamespace(Params=params.Params, make_class=make_class)


HEADS, KV_HEADS, HEAD_DIM = 8, 2, 16
FP16 = 2e-3
"""How far an fp16 attention output may sit from the float64 reference (outputs are ~1)."""


def _layer(cls, sliding_window: int = 0):
    layer = cls.__new__(cls)
    layer.layer_idx = 3
    layer.num_key_value_groups = HEADS // KV_HEADS
    layer.scaling = 1 / math.sqrt(HEAD_DIM)
    layer.sliding_window = sliding_window
    return layer


def _cfg(no_sdpa: bool = False):
    return SimpleNamespace(no_sdpa=no_sdpa, attn_logit_softcapping=None)


def _tensors(past: int, q_len: int, seed: int):
    """What ``forward`` hands ``_attn_torch`` on the unpaged cached path (attn.py 1164-1178):
    q for the new rows, k and v for the cached keys and the new rows together, in fp16."""
    generator = torch.Generator().manual_seed(seed)
    shapes = ((1, q_len, HEADS, HEAD_DIM), (1, past + q_len, KV_HEADS, HEAD_DIM),
              (1, past + q_len, KV_HEADS, HEAD_DIM))
    return tuple(torch.randn(*shape, generator=generator).half() for shape in shapes)


def _reference(q, k, v, past: int, window: int = 0, padding: int = 0):
    """Attention one row at a time in float64: row i (position past + i) sees the keys up to
    its own position, not the first ``padding`` (a left-padded prompt), and with a sliding
    window only the last ``window`` keys the layer is given (exllamav2's cut, attn.py 885-887
    and 926-928, the same in both branches)."""
    q_len, keys = q.shape[1], k.shape[1]
    first = keys - window if window and keys >= window else 0
    rows = []
    for i in range(q_len):
        visible = list(range(max(first, padding), past + i + 1))
        if not visible:  # a padding row: nothing to attend to, nothing compared
            rows.append(torch.full((HEADS * HEAD_DIM,), math.nan, dtype=torch.float64))
            continue
        out = []
        for head in range(HEADS):
            kv = head // (HEADS // KV_HEADS)
            scores = torch.stack([(q[0, i, head].double() @ k[0, j, kv].double())
                                  for j in visible]) / math.sqrt(HEAD_DIM)
            weights = torch.softmax(scores, dim=0)
            out.append(sum(w * v[0, j, kv].double() for w, j in zip(weights, visible)))
        rows.append(torch.cat(out))
    return torch.stack(rows).unsqueeze(0)


def _params(exl2, past: int, q_len: int, input_mask=None):
    return exl2.Params(batch_size=1, seq_len=q_len, past_len=past, input_mask=input_mask)


CASES = {
    # name: (cached keys, rows, sliding window)
    "prefill": (0, 24, 0),
    "prefill of a later chunk": (40, 16, 0),
    "draft verification, k=4": (57, 5, 0),
    "sliding window": (30, 6, 12),
}


def _run(exl2, cls, name: str, no_sdpa: bool = False):
    past, q_len, window = CASES[name]
    q, k, v = _tensors(past, q_len, seed=len(name))
    out = _layer(cls, window)._attn_torch(1, q_len, q, k, v, _params(exl2, past, q_len),
                                          _cfg(no_sdpa))
    return out.double(), _reference(q, k, v, past, window)


def _rows_off(out, reference, tolerance: float) -> list[int]:
    return [i for i in range(out.shape[1])
            if not torch.allclose(out[0, i], reference[0, i], atol=tolerance, rtol=0)]


@pytest.mark.parametrize("name", [n for n in CASES if CASES[n][1] > 1])
def test_exllamav2_0_3_2_sdpa_branch_lets_rows_see_later_rows(exl2, name):
    """The fault, shown on the library's own code: every row but the last sees the rows after
    it (the last sees exactly its own keys, so it alone agrees)."""
    out, reference = _run(exl2, exl2.make_class(), name)
    assert _rows_off(out, reference, FP16) == list(range(CASES[name][1] - 1))


@pytest.mark.parametrize("name", list(CASES))
def test_the_restored_mask_matches_the_causal_reference_row_by_row(exl2, name):
    cls = exl2.make_class()
    assert exl2_attention.restore_causal_sdpa(cls)
    out, reference = _run(exl2, cls, name)
    assert _rows_off(out, reference, FP16) == []


@pytest.mark.parametrize("name", list(CASES))
def test_the_librarys_matmul_branch_agrees_within_its_fp16_softmax(exl2, name):
    """``no_sdpa`` (the fallback) is masked too; its softmax runs in fp16 (attn.py 930)."""
    out, reference = _run(exl2, exl2.make_class(), name, no_sdpa=True)
    assert _rows_off(out, reference, 3 * FP16) == []


def test_a_padded_prompt_keeps_its_padding_mask(exl2):
    """A left-padded batch row (input_mask, -65504 over the padding, as the library's
    tokenizer makes it): 0.2.8 took the library's causal-and-padding mask; so does the fix."""
    cls = exl2.make_class()
    exl2_attention.restore_causal_sdpa(cls)
    past, q_len, padding = 0, 10, 3
    q, k, v = _tensors(past, q_len, seed=9)
    mask = torch.zeros(1, past + q_len)
    mask[:, :padding] = -65504.0
    out = _layer(cls)._attn_torch(1, q_len, q, k, v, _params(exl2, past, q_len, mask), _cfg())
    reference = _reference(q, k, v, past, padding=padding)
    assert _rows_off(out.double()[:, padding:], reference[:, padding:], FP16) == []


def test_the_fix_hands_sdpa_a_causal_bias_never_a_score_sized_tensor(exl2):
    """What it allocates: torch's CausalBias, which SDPA's flash and memory-efficient CUDA
    kernels apply without holding scores; no mask tensor of rows x keys is built."""
    from torch.nn.attention.bias import CausalBias
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention
    seen = []

    class Record(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is sdpa:
                seen.append(args[3] if len(args) > 3 else kwargs.get("attn_mask"))
            return func(*args, **kwargs)

    cls = exl2.make_class()
    exl2_attention.restore_causal_sdpa(cls)
    with Record():
        for name in ("prefill", "draft verification, k=4", "sliding window"):
            _run(exl2, cls, name)
    assert len(seen) == 3 and all(isinstance(mask, CausalBias) for mask in seen)


def test_one_row_decoding_is_left_to_the_library(exl2, monkeypatch):
    cls = exl2.make_class()
    original = cls._attn_torch
    calls = []
    cls._attn_torch = lambda self, *args, **kwargs: calls.append(args) or original(
        self, *args, **kwargs)
    cls._attn_torch.__signature__ = __import__("inspect").signature(original)
    assert exl2_attention.restore_causal_sdpa(cls)
    past = 20
    q, k, v = _tensors(past, 1, seed=4)
    out = _layer(cls)._attn_torch(1, 1, q, k, v, _params(exl2, past, 1), _cfg())
    assert len(calls) == 1
    assert _rows_off(out.double(), _reference(q, k, v, past), FP16) == []


def test_installing_twice_wraps_once_and_another_signature_is_left_alone(exl2):
    cls = exl2.make_class()
    assert exl2_attention.restore_causal_sdpa(cls)
    wrapped = cls._attn_torch
    assert exl2_attention.restore_causal_sdpa(cls) and cls._attn_torch is wrapped
    assert exl2_attention.is_restored(cls)

    class Other:
        def _attn_torch(self, q, k, v, params):  # a future library's method
            return None

    assert not exl2_attention.restore_causal_sdpa(Other)
    assert not exl2_attention.is_restored(Other)


def _exllamav2(version: str, cls, **attn):
    return SimpleNamespace(version=version, attn=SimpleNamespace(
        ExLlamaV2Attention=cls, has_lower_right_sdpa=True, **attn))


def test_loading_restores_the_mask_and_keeps_sdpa(exl2):
    cls = exl2.make_class()
    config = SimpleNamespace(no_sdpa=False, attn_logit_softcapping=None)
    note = exl2_attention.mask_unpaged_attention(_exllamav2("0.3.2", cls), config, paged=False)
    assert exl2_attention.is_restored(cls) and config.no_sdpa is False
    assert "0.3.2" in note and "restores the causal" in note


def test_where_the_wrapper_cannot_go_the_matmul_branch_is_chosen_and_said(exl2):
    class Other:
        def _attn_torch(self, q, k, v, params):
            return None

    config = SimpleNamespace(no_sdpa=False, attn_logit_softcapping=None)
    note = exl2_attention.mask_unpaged_attention(_exllamav2("0.3.2", Other), config, paged=False)
    assert config.no_sdpa is True and "no_sdpa" in note and "VRAM plan counts" in note


@pytest.mark.parametrize("version, attn, paged, softcap, acts", [
    ("0.3.2", {}, False, None, True),
    ("0.2.9", {}, False, None, True),
    ("0.2.8", {}, False, None, False),  # before commit 2e630ae: 0.2.8 masks
    ("0.3.2", {"has_lower_right_sdpa": False}, False, None, False),  # old torch: matmul
    ("0.3.2", {"has_xformers": True}, False, None, False),  # xformers' causal kernel
    ("0.3.2", {}, True, None, False),  # paged: flash-attn's causal kernels
    ("0.3.2", {}, False, 50.0, False),  # soft-capping: always the matmul branch
])
def test_only_the_affected_setups_are_changed(exl2, version, attn, paged, softcap, acts):
    cls = exl2.make_class()
    x = _exllamav2(version, cls)
    x.attn.__dict__.update(attn)
    config = SimpleNamespace(no_sdpa=False, attn_logit_softcapping=softcap)
    note = exl2_attention.mask_unpaged_attention(x, config, paged)
    assert (note is not None) is acts and exl2_attention.is_restored(cls) is acts
    assert config.no_sdpa is False


# what the plan counts ------------------------------------------------------------------------
def test_the_unpaged_plan_counts_a_soft_capping_models_scores():
    """Gemma 2 (attn_logit_softcapping) attends through the matmul branch without flash-attn:
    heads x chunk x keys fp16 scores, twice. A Llama keeps SDPA and ExLlamaV2's own reserve."""
    from specdeck.core.exl2_facts import matmul_scores_bytes
    from specdeck.core.models import read_model
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS, model_costs

    fixtures = Path(__file__).resolve().parents[1] / "data" / "fixtures" / "models"
    unpaged = type(DEFAULT_OVERHEADS)(flash_attention=False)
    gemma = read_model(fixtures / "gemma-2-9b-it").arch
    llama = read_model(fixtures / "Llama-3.2-1B").arch
    assert gemma.softcaps_attention and not llama.softcaps_attention
    chunk, tokens = 2048, 32768
    scores = matmul_scores_bytes(gemma.num_heads, chunk, tokens)
    assert scores == 2 * 16 * 2048 * 32768 * 2  # 4 GiB for Gemma 2 9B's 16 heads
    with_scores = model_costs(gemma, "Q4", tokens, chunk, unpaged)
    with_flash = model_costs(gemma, "Q4", tokens, chunk, DEFAULT_OVERHEADS)
    assert with_scores.activations - with_flash.activations == scores
    plain = model_costs(llama, "Q4", tokens, chunk, unpaged)
    plain_flash = model_costs(llama, "Q4", tokens, chunk, DEFAULT_OVERHEADS)
    assert plain.activations - plain_flash.activations == plain.attention_temp
