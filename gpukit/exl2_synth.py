"""EXL2 models of any shape with random codes: a 70B the GPU machine can load without a download.

The kit's VRAM check at the seed's scale (issue 40: Llama-3-70B at 2.5 bpw with a
Llama-3.2-1B draft) needs models of those shapes in EXL2's real tensor layout. Nothing can
be downloaded on the device and a 22 GB model cannot be carried to it, so this module writes
one there: the loader and the kernels read the layout, not what the numbers mean.

The layout is exllamav2 0.3.2's converter's, read from its source (never imported here:
importing exllamav2 builds its CUDA extension):

- ``conversion/qparams.py``: the options the optimizer picks per layer (``qparams_attn``
  for q/k/v/o, ``qparams_mlp`` for gate/up/down, ``qparams_headoptions`` for the head) and
  ``QParams.total_bits``, the bits each costs. This module loads that file itself and uses
  its tables and arithmetic, so the bit budget is the converter's to the bit.
- ``conversion/adaptivegptq.py`` ``configure`` (groups per bit width: ``ceil(min(rows x
  prop, rows left) / group size)``, widest bits first) and ``pack`` (per linear layer, with
  rows = in_features and columns = out_features: ``q_invperm`` int32 [rows],
  ``q_scale_max`` fp16 [groups], ``q_groups`` int16 [groups x 2] = (bits, first packed row),
  ``q_scale`` int32 [groups, columns / 8] (4-bit scales), ``q_weight`` int32 [sum of
  rows x bits / 32 per group, columns]).
- ``conversion/compile.py``: norms and the embedding in fp16 as in the source model, shards
  of at most 8192 MB named ``output-0000i-of-0000n.safetensors``, and ``config.json``'s
  ``quantization_config`` (quant_method exl2, version, bits, head_bits, calibration).

Values: codes are random odd numbers (symmetric about the kernels' zero point: random
bits would average -0.5 and overflow fp16 within a few layers, see ``code_mask``) and
4-bit scales random bits; each group's ``q_scale_max`` is what
``AdaptiveQuantizer.find_params`` would give a weight of standard deviation 1/sqrt(rows)
(3 sigma over half the code range), so activations stay in fp16's range through 80
layers; ``q_invperm`` is a random permutation; norms are 1; the embedding is N(0, 0.02).
How each layer's options are chosen is this module's (exllamav2's optimizer needs a
measurement of real weights): two neighbouring options by cost, mixed over the layers to
hit the target bits per weight as the optimizer does (it records the target, not what it
reached, in quantization_config; this module records both).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

SHARD_BYTES = 8192 * 1024**2
"""The converter's default shard size (convert.py ``-ss 8192``, in MB of 2**20 bytes)."""
EXL2_VERSION = "0.3.2"
COMPLETE = ".synth-complete"
"""Written last: a folder without it is a half-written model (the writer starts over)."""
POOL_BYTES = 64 * 1024**2

ITEM_BYTES = {"I32": 4, "I16": 2, "F16": 2}
"""Bytes per element of each safetensors dtype the writer uses."""


def exllamav2_dir() -> Path:
    """exllamav2's package folder, found without importing it (that would build its
    extension): the installed package, else the source `make test` installs
    (``.venv/exllamav2-src``, or ``SPECDECK_EXLLAMAV2_SOURCE``)."""
    override = os.environ.get("SPECDECK_EXLLAMAV2_SOURCE")
    candidates = [Path(override) / "exllamav2"] if override else []
    # On the device the kit's install step fills a site folder that was on sys.path, but
    # missing, when the interpreter started: the import system remembers "nothing there"
    # until its caches are invalidated.
    importlib.invalidate_caches()
    spec = importlib.util.find_spec("exllamav2")
    if spec is not None and spec.submodule_search_locations:
        candidates.extend(Path(p) for p in spec.submodule_search_locations)
    candidates.append(Path(sys.prefix) / "exllamav2-src" / "exllamav2")
    for folder in candidates:
        if (folder / "conversion" / "qparams.py").is_file():
            return folder
    raise FileNotFoundError("exllamav2's source was not found (pip install --no-deps --target "
                            ".venv/exllamav2-src exllamav2==0.3.2, or install exllamav2)")


def load_qparams(folder: Path | None = None) -> ModuleType:
    """exllamav2's ``conversion/qparams.py`` as a module of its own (it imports only math)."""
    path = (folder or exllamav2_dir()) / "conversion" / "qparams.py"
    spec = importlib.util.spec_from_file_location("specdeck_exl2_qparams", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# Shapes ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Linear:
    name: str
    rows: int
    """in_features"""
    columns: int
    """out_features"""


def llama_linears(config: dict[str, Any], layer: int) -> tuple[list[Linear], list[Linear]]:
    """One decoder layer's attention (q, k, v, o) and MLP (gate, up, down) linears, in the
    order of exllamav2's option tables."""
    hidden = int(config["hidden_size"])
    heads = int(config["num_attention_heads"])
    kv_heads = int(config.get("num_key_value_heads", heads))
    head_dim = int(config.get("head_dim") or hidden // heads)
    inter = int(config["intermediate_size"])
    p = f"model.layers.{layer}"
    attn = [Linear(f"{p}.self_attn.q_proj", hidden, heads * head_dim),
            Linear(f"{p}.self_attn.k_proj", hidden, kv_heads * head_dim),
            Linear(f"{p}.self_attn.v_proj", hidden, kv_heads * head_dim),
            Linear(f"{p}.self_attn.o_proj", heads * head_dim, hidden)]
    mlp = [Linear(f"{p}.mlp.gate_proj", hidden, inter),
           Linear(f"{p}.mlp.up_proj", hidden, inter),
           Linear(f"{p}.mlp.down_proj", inter, hidden)]
    return attn, mlp


# Bits --------------------------------------------------------------------------------------
def option_bits(option: list[Any], linears: list[Linear]) -> tuple[int, int]:
    """(bits, weights) of one option of qparams_attn / qparams_mlp on these linears."""
    bits = sum(q.total_bits((lin.rows, lin.columns)) for q, lin in zip(option, linears))
    return bits, sum(lin.rows * lin.columns for lin in linears)


def kernel_mask(bits: list[int]) -> int:
    """The bit-width set of one linear as exllamav2's QMatrix records it (q_matrix.cu:
    ``kernel_p |= 1 << (bits - 1)`` over its groups)."""
    mask = 0
    for b in bits:
        mask |= 1 << (b - 1)
    return mask


def exl2_kernels(folder: Path | None = None) -> frozenset[int]:
    """The bit-width sets exllamav2 has a matmul kernel for, read from its extension's
    source (``cuda/comp_units/kernel_select.cuh``: the ``case 0b...`` of its
    ``map_m_count_exl2_*`` switches). A linear whose set is missing gets no kernel for
    up to 32 rows (q_gemm.cu ``if (!kernel) return;``): a decode or verification step
    silently skips it (the fused MLP adds nothing for down_proj), and only prefills,
    which dequantize and use cuBLAS, compute it. 0.3.2's converter tables offer one
    such set, 8 + 4 bits (three of ``qparams_mlp``'s down_proj options)."""
    import re

    path = (folder or exllamav2_dir()) / "exllamav2_ext" / "cuda" / "comp_units" / \
        "kernel_select.cuh"
    text = path.read_text(encoding="utf-8")
    found = frozenset(int(m, 2) for m in re.findall(r"case 0b([01]+)\s*:\s*return "
                                                    r"gemm_half_q_half_kernel<", text))
    if not found:
        raise ValueError(f"{path}: no EXL2 kernel cases found (not exllamav2 0.3.x's layout)")
    return found


def has_kernels(option: list[Any], kernels: frozenset[int] | None) -> bool:
    return kernels is None or all(kernel_mask(q.bits) in kernels for q in option)


def choose_options(options: list[list[Any]], linears: list[Linear], layers: int,
                   bpw: float, kernels: frozenset[int] | None = None) -> list[int]:
    """Per layer, the index of the option it gets: the two options whose costs on these
    shapes bracket ``bpw``, the dearer one on just enough layers to reach it. Only options
    every linear of which has a kernel in ``kernels`` (:func:`exl2_kernels`) are chosen:
    the step costs must time every matmul."""
    costs = sorted((option_bits(o, linears)[0], i) for i, o in enumerate(options)
                   if has_kernels(o, kernels))
    weights = option_bits(options[0], linears)[1]
    target = bpw * weights
    below = [c for c in costs if c[0] <= target]
    above = [c for c in costs if c[0] > target]
    if not below:
        return [costs[0][1]] * layers
    if not above:
        return [below[-1][1]] * layers
    (low, low_i), (high, high_i) = below[-1], above[0]
    dear = round(layers * (target - low) / (high - low))
    return [high_i] * dear + [low_i] * (layers - dear)


@dataclass(frozen=True)
class Group:
    bits: int
    rows: int
    first_qrow: int

    @property
    def qrows(self) -> int:
        return math.ceil(self.rows * self.bits / 32)


def groups_of(qparams: Any, rows: int) -> list[Group]:
    """AdaptiveGPTQ.configure's groups and pack's packed-row offsets for one linear."""
    out: list[Group] = []
    remaining, row, qrow = rows, 0, 0
    for bits, prop in zip(qparams.bits, qparams.bits_prop):
        size = qparams.group_size[bits]
        count = math.ceil(min(rows * prop, remaining) / size)
        remaining -= count * size
        for _ in range(count):
            g = Group(bits, min(size, rows - row), qrow)
            if g.rows <= 0:
                break
            out.append(g)
            row += g.rows
            qrow += g.qrows
    return out


# Tensors -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str
    """safetensors dtype: I32, I16 or F16."""
    shape: tuple[int, ...]
    fill: str
    """random (any bits) | codes (odd codes: see code_mask) | perm | groups | scale_max |
    ones | normal"""
    groups: tuple[Group, ...] = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ITEM_BYTES[self.dtype]


def quantized_linear(lin: Linear, qparams: Any) -> list[TensorSpec]:
    if lin.columns % 32:
        raise ValueError(f"{lin.name}: {lin.columns} output features, not a multiple of 32 "
                         "(the converter would pad; this writer does not)")
    groups = tuple(groups_of(qparams, lin.rows))
    qrows = groups[-1].first_qrow + groups[-1].qrows
    return [
        TensorSpec(f"{lin.name}.q_invperm", "I32", (lin.rows,), "perm"),
        TensorSpec(f"{lin.name}.q_scale_max", "F16", (len(groups),), "scale_max", groups),
        TensorSpec(f"{lin.name}.q_groups", "I16", (2 * len(groups),), "groups", groups),
        TensorSpec(f"{lin.name}.q_scale", "I32", (len(groups), lin.columns // 8), "random"),
        TensorSpec(f"{lin.name}.q_weight", "I32", (qrows, lin.columns), "codes", groups),
    ]


@dataclass(frozen=True)
class ModelPlan:
    tensors: tuple[TensorSpec, ...]
    bpw_target: float
    bpw_layers: float
    """What the chosen options cost over the decoder layers (the converter's "bits")."""
    head_bits: int

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors)


def plan_model(config: dict[str, Any], bpw: float, head_bits: int,
               qparams: ModuleType, kernels: frozenset[int] | None = None) -> ModelPlan:
    """Every tensor of a Llama-architecture EXL2 model at ``bpw``, in the converter's order,
    with only options exllamav2 has kernels for (``kernels``: :func:`exl2_kernels`)."""
    layers = int(config["num_hidden_layers"])
    hidden = int(config["hidden_size"])
    vocab = int(config["vocab_size"])
    attn0, mlp0 = llama_linears(config, 0)
    attn_choice = choose_options(qparams.qparams_attn, attn0, layers, bpw, kernels)
    mlp_choice = choose_options(qparams.qparams_mlp, mlp0, layers, bpw, kernels)
    if not config.get("tie_word_embeddings", False) and \
            not has_kernels([qparams.qparams_headoptions[head_bits]], kernels):
        raise ValueError(f"head_bits {head_bits}: exllamav2 has no kernel for that head")
    tensors = [TensorSpec("model.embed_tokens.weight", "F16", (vocab, hidden), "normal")]
    bits = weights = 0
    for layer in range(layers):
        attn, mlp = llama_linears(config, layer)
        tensors.append(TensorSpec(f"model.layers.{layer}.input_layernorm.weight", "F16",
                                  (hidden,), "ones"))
        for option, linears in ((qparams.qparams_attn[attn_choice[layer]], attn),
                                (qparams.qparams_mlp[mlp_choice[layer]], mlp)):
            b, w = option_bits(option, linears)
            bits, weights = bits + b, weights + w
            for q, lin in zip(option, linears):
                tensors.extend(quantized_linear(lin, q))
            if linears is attn:
                tensors.append(TensorSpec(f"model.layers.{layer}.post_attention_layernorm.weight",
                                          "F16", (hidden,), "ones"))
    tensors.append(TensorSpec("model.norm.weight", "F16", (hidden,), "ones"))
    if not config.get("tie_word_embeddings", False):
        # A tied model's head is the embedding itself (architecture.py 946-951: lm_head's
        # key becomes model.embed_tokens), loaded unquantized.
        tensors.extend(quantized_linear(Linear("lm_head", hidden, vocab),
                                        qparams.qparams_headoptions[head_bits]))
    return ModelPlan(tuple(tensors), bpw, bits / weights, head_bits)


# Writing -----------------------------------------------------------------------------------
def code_mask(bits: int) -> np.ndarray:
    """The ``bits`` words that hold 32 codes of one column (adaptivegptq.py ``pack`` through
    pack_tensor.cu ``pack_columns``: code i at bit i x bits of their little-endian stream),
    with the lowest bit of every code set.

    The kernels dequantize a code q as (q - 2**(bits - 1)) x scale (the quantizer's qzero),
    so uniformly random codes average -0.5 x scale: every weight of a column leans the same
    way, a hidden state's mean is multiplied by about sqrt(rows) per layer instead of being
    mixed away, and a 70B's residual passes fp16's 65504 within three layers (a CPU
    simulation at Llama-3-70B's widths: 72k at layer 3), so every logit would be NaN. Odd
    codes are symmetric about the zero point (+-1, +-3, ...): the mean is 0, the spread
    within 2% of uniform codes' from 4 bits up."""
    words = np.zeros(bits, dtype=np.uint32)
    for i in range(32):
        bit = i * bits
        words[bit // 32] |= np.uint32(1 << (bit % 32))
    return words


class Filler:
    """Bytes for each tensor: random bits and N(0, 0.02) fp16 cycled from fixed pools (the
    loader and the kernels read the layout, not the values), the structured ones exact."""

    def __init__(self, seed: int = 40):
        self._rng = np.random.default_rng(seed)
        self._bits = self._rng.integers(0, 256, POOL_BYTES, dtype=np.uint8).tobytes()
        self._normal = (self._rng.standard_normal(POOL_BYTES // 2) * 0.02).astype(
            np.float16).tobytes()
        self._offset = 0

    def chunks(self, spec: TensorSpec) -> Iterator[bytes | memoryview]:
        if spec.fill in ("random", "normal"):
            pool = memoryview(self._bits if spec.fill == "random" else self._normal)
            left = spec.nbytes
            while left:
                start = self._offset % len(pool)
                piece = pool[start:start + min(left, len(pool) - start)]
                self._offset += len(piece) + 4096  # shift: tensors differ from each other
                self._offset -= self._offset % ITEM_BYTES[spec.dtype]
                left -= len(piece)
                yield piece
            return
        if spec.fill == "codes":
            yield from self._codes(spec)
            return
        yield self.array(spec).tobytes()

    def _codes(self, spec: TensorSpec) -> Iterator[bytes]:
        """Random packed codes, each one odd (:func:`code_mask`), group by group."""
        columns = spec.shape[1]
        pool = np.frombuffer(self._bits, dtype=np.uint32)
        for g in spec.groups:
            count = g.qrows * columns
            start = (self._offset // 4) % (len(pool) - count) if count < len(pool) else 0
            self._offset += count * 4 + 4096
            words = pool[start:start + count].reshape(g.qrows, columns)
            mask = np.resize(code_mask(g.bits), g.qrows)  # each group starts a 32-row block
            yield (words | mask[:, None]).tobytes()

    def array(self, spec: TensorSpec) -> np.ndarray:
        if spec.fill == "perm":
            return self._rng.permutation(spec.shape[0]).astype(np.int32)
        if spec.fill == "groups":
            return np.array([v for g in spec.groups for v in (g.bits, g.first_qrow)],
                            dtype=np.int16)
        if spec.fill == "scale_max":
            rows = sum(g.rows for g in spec.groups)
            # find_params: max |w| / (maxq / 2) with max |w| ~ 3 sigma, sigma = 1/sqrt(rows)
            return np.array([3.0 / math.sqrt(rows) / ((2**g.bits - 1) / 2) for g in spec.groups],
                            dtype=np.float16)
        if spec.fill == "ones":
            return np.ones(spec.shape, dtype=np.float16)
        raise ValueError(spec.fill)


def shards(tensors: tuple[TensorSpec, ...], limit: int = SHARD_BYTES) -> list[list[TensorSpec]]:
    out: list[list[TensorSpec]] = [[]]
    size = 0
    for t in tensors:
        if out[-1] and size + t.nbytes > limit:
            out.append([])
            size = 0
        out[-1].append(t)
        size += t.nbytes
    return out


def shard_name(index: int, count: int) -> str:
    return "output.safetensors" if count == 1 else f"output-{index + 1:05}-of-{count:05}.safetensors"


def write_safetensors(path: Path, tensors: list[TensorSpec], filler: Filler) -> None:
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for t in tensors:
        header[t.name] = {"dtype": t.dtype, "shape": list(t.shape),
                          "data_offsets": [offset, offset + t.nbytes]}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for t in tensors:
            for chunk in filler.chunks(t):
                f.write(chunk)


def quantization_config(plan: ModelPlan) -> dict[str, Any]:
    return {"quant_method": "exl2", "version": EXL2_VERSION, "bits": plan.bpw_target,
            "head_bits": plan.head_bits,
            "calibration": {"rows": 0, "length": 0, "dataset": "(none: random codes)"},
            "synthetic": {"writer": "specdeck gpukit.exl2_synth",
                          "bits_reached": round(plan.bpw_layers, 4)}}


def write_model(folder: Path, config: dict[str, Any], bpw: float, head_bits: int,
                tokenizer: Path | None = None, qparams: ModuleType | None = None,
                shard_bytes: int = SHARD_BYTES) -> ModelPlan:
    """Write the model into ``folder`` (done once: a complete folder is kept)."""
    plan = plan_model(config, bpw, head_bits, qparams or load_qparams(), exl2_kernels())
    if (folder / COMPLETE).is_file():
        return plan
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    parts = shards(plan.tensors, shard_bytes)
    filler = Filler()
    for i, part in enumerate(parts):
        write_safetensors(folder / shard_name(i, len(parts)), part, filler)
    (folder / "config.json").write_text(json.dumps(
        {**config, "torch_dtype": "float16", "quantization_config": quantization_config(plan)},
        indent=2))
    if tokenizer is not None:
        for item in tokenizer.iterdir():
            if item.is_file() and item.name != "config.json":
                shutil.copy2(item, folder / item.name)
    (folder / COMPLETE).write_text(json.dumps({"bytes": plan.nbytes,
                                               "bpw_layers": plan.bpw_layers}))
    return plan
