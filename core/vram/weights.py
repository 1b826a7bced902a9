"""A model as the planner sees it: ExLlamaV2's modules in load order, with their bytes.

An EXL2 folder on disk is measured exactly (safetensors headers); a folder with only
config.json is estimated from its architecture at a bpw, the head at its head bits. The
token embedding is reported apart: ExLlamaV2 keeps it in system RAM.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import InvalidInputError
from specdeck.core.models import (
    WEIGHT_SUFFIX,
    Architecture,
    ModelInfo,
    read_model,
    read_safetensors_header,
)

DEFAULT_HEAD_BITS = 6
BPW_RANGE = (1.0, 16.0)
"""The bits per weight a plan may assume for a model's layers (``vram --bpw``, ``compat
suggest --bpw``, the GPUs page's bpw boxes, the estimate itself): an EXL3 quant's from 1, an
EXL2 quant's 2 to 8, 16 for an unquantized model known by its config.json alone."""
HEAD_BITS_RANGE = (1, 16)
"""The bits a plan may assume for the output head (``--head-bits``), in either format: an EXL3
head's from 1 (exllamav3 conversion/allocation.py ``allocate_linear`` floors the head's bits
to at least 1, and the trellis' K runs to 8), an EXL2 head's from 2
(:data:`EXL2_HEAD_BITS_RANGE`); 16 is an unquantized head in both."""
EXL2_HEAD_BITS_RANGE = (2, 16)
"""An EXL2 head's bits: exllamav2's converter quantizes a head at 2 to 8 bits (its
``qparams_headoptions``; quants use 6 or 8) or keeps it at 16."""
"""ExLlamaV2's converter default (-hb 6) when quantization_config does not say."""


class ModuleKind(str, enum.Enum):
    ATTENTION = "attention"
    MLP = "mlp"
    NORM = "norm"
    HEAD = "head"


@dataclass(frozen=True)
class ModuleWeights:
    """One ExLlamaV2 module's weights on the GPU."""

    kind: ModuleKind
    layer: int | None
    nbytes: int


@dataclass(frozen=True)
class ModelWeights:
    """A model as the planner sees it: its architecture and its modules in load order."""

    name: str
    arch: Architecture
    modules: tuple[ModuleWeights, ...]
    embedding_bytes: int
    """The token embedding, which ExLlamaV2 keeps in system RAM."""
    source: str
    """"files" (exact, from safetensors headers) or "bpw" (estimated from config.json)."""
    bpw: float | None = None
    head_bits: int | None = None
    quant_format: str = "exl2"
    """"exl2" (ExLlamaV2's modules: attention and MLP apart) or "exl3" (ExLlamaV3's: one
    transformer block per layer, listed as its attention module, which holds the cache)."""

    @property
    def gpu_bytes(self) -> int:
        return sum(m.nbytes for m in self.modules)

    @property
    def is_exl3(self) -> bool:
        return self.quant_format == "exl3"

    @property
    def label(self) -> str:
        fmt = self.quant_format.upper()
        if self.source == "files":
            bits = f"{fmt} {self.bpw:g} bpw, " if self.bpw else f"{fmt}, " if self.is_exl3 else ""
            return f"{self.name} ({bits}sizes from its files)"
        fmt = f"{fmt} " if self.is_exl3 else ""
        return f"{self.name} ({fmt}{self.bpw:g} bpw, head {self.head_bits} bits, estimated)"


def _linear_shapes(arch: Architecture) -> dict[ModuleKind, list[tuple[int, int]]]:
    """(in, out) features of every quantized matrix in one layer's modules."""
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    inter, experts = arch.intermediate_size, max(1, arch.num_experts)
    return {
        ModuleKind.ATTENTION: [(h, q_width), (h, kv_width), (h, kv_width), (q_width, h)],
        ModuleKind.MLP: [(h, inter), (h, inter), (inter, h)] * experts,
    }


EXL2_INDEX_BYTES_PER_INPUT = 4
"""What an EXL2 matrix holds on the GPU beyond its file: per input feature, q_perm as int16
and q_invperm shrunk from int32 to int16, and two int16 of q_group_map per row (exllamav2
0.3.2 module.py 120, ext.py 337-341, ext_qmatrix.cpp 341-360): 4 bytes per input feature."""


def _index_bytes(arch: Architecture) -> dict[ModuleKind, int]:
    """The GPU-only index tensors of one layer's quantized matrices, per module."""
    return {kind: EXL2_INDEX_BYTES_PER_INPUT * sum(i for i, _ in shapes)
            for kind, shapes in _linear_shapes(arch).items()}


def check_bpw(bpw: float) -> float:
    """``bpw`` if a plan may assume it (``BPW_RANGE``); else an error saying the range."""
    low, high = BPW_RANGE
    if not low <= bpw <= high:
        raise InvalidInputError(f"bpw {bpw:g} is out of range.",
                                f"Use {low:g} to {high:g}: EXL2 quants run from 2 to 8 bpw, "
                                "EXL3 quants from 1, an unquantized model is 16.")
    return bpw


def check_head_bits(head_bits: float, bounds: tuple[int, int] = HEAD_BITS_RANGE) -> float:
    """``head_bits`` if a plan may assume them (``bounds``: :data:`HEAD_BITS_RANGE`, an EXL3
    head's; :data:`EXL2_HEAD_BITS_RANGE` an EXL2 one's); else an error saying the range."""
    low, high = bounds
    if not low <= head_bits <= high:
        raise InvalidInputError(f"head bits {head_bits:g} are out of range ({low}-{high}).")
    return head_bits


def weights_from_bpw(arch: Architecture, bpw: float, head_bits: int = DEFAULT_HEAD_BITS,
                     name: str = "model") -> ModelWeights:
    """Estimate EXL2 module sizes from the architecture: layers at ``bpw``, head at
    ``head_bits``, norms and the MoE router in FP16, the embedding in FP16 (system RAM).

    EXL2's bpw is the average over the quantized layer matrices including their scales,
    so ``params x bpw / 8`` is the size on disk and on the GPU; biases (Qwen2's q/k/v) are
    left out (a few kB per layer).
    """
    check_bpw(bpw)
    check_head_bits(head_bits, EXL2_HEAD_BITS_RANGE)
    h = arch.hidden_size
    norm = 2 * h
    shapes = _linear_shapes(arch)
    index = _index_bytes(arch)
    attention = (round(sum(i * o for i, o in shapes[ModuleKind.ATTENTION]) * bpw / 8) + norm
                 + index[ModuleKind.ATTENTION])
    router = 2 * h * arch.num_experts if arch.num_experts > 1 else 0
    mlp = (round(sum(i * o for i, o in shapes[ModuleKind.MLP]) * bpw / 8) + norm + router
           + index[ModuleKind.MLP])
    modules: list[ModuleWeights] = []
    for layer in range(arch.num_layers):
        modules.append(ModuleWeights(ModuleKind.ATTENTION, layer, attention))
        modules.append(ModuleWeights(ModuleKind.MLP, layer, mlp))
    modules.append(ModuleWeights(ModuleKind.NORM, None, norm))
    head = round(arch.vocab_size * h * head_bits / 8) + EXL2_INDEX_BYTES_PER_INPUT * h
    modules.append(ModuleWeights(ModuleKind.HEAD, None, head))
    return ModelWeights(name, arch, tuple(modules), 2 * arch.vocab_size * h, "bpw", bpw, head_bits)


_LAYER_NAME = re.compile(r"(?:^|\.)layers\.(\d+)\.")
# ExLlamaV2 puts the attention norm (input_layernorm) and q/k/v/o in the attention module.
_ATTENTION_PARTS = (".self_attn.", ".attention.", ".attn.", ".input_layernorm.")


def _attention_bytes(folder: Path, num_layers: int) -> list[int]:
    """Bytes of each layer's attention module, from the safetensors headers."""
    attention = [0] * num_layers
    for weight_file in sorted(folder.glob(f"*{WEIGHT_SUFFIX}")):
        for tensor in read_safetensors_header(weight_file):
            match = _LAYER_NAME.search(tensor.name)
            if match and int(match.group(1)) < num_layers and any(
                part in tensor.name for part in _ATTENTION_PARTS
            ):
                attention[int(match.group(1))] += tensor.nbytes
    return attention


def weights_from_files(info: ModelInfo) -> ModelWeights:
    """Exact module sizes of an EXL2 model folder (needs its *.safetensors files)."""
    sizes = info.weights
    if sizes is None:
        raise InvalidInputError(f"{info.path} has no *.safetensors files to measure.")
    arch = info.arch
    attention = _attention_bytes(info.path, arch.num_layers)
    # Quantized matrices get their index tensors on the GPU; FP16 ones have none.
    index = _index_bytes(arch) if info.quant.bits else dict.fromkeys(ModuleKind, 0)
    modules: list[ModuleWeights] = []
    for layer, total in enumerate(sizes.layers):
        modules.append(ModuleWeights(ModuleKind.ATTENTION, layer,
                                     attention[layer] + index[ModuleKind.ATTENTION]))
        modules.append(ModuleWeights(ModuleKind.MLP, layer,
                                     total - attention[layer] + index[ModuleKind.MLP]))
    modules.append(ModuleWeights(ModuleKind.NORM, None, sizes.other))
    # A tied model without its own head tensors uses the FP16 embedding as the head, on
    # the GPU (ExLlamaV2 loads it under the head's alternative key).
    head = sizes.head or (sizes.embedding if arch.tie_word_embeddings else 0)
    if sizes.head and info.quant.head_bits:
        head += EXL2_INDEX_BYTES_PER_INPUT * arch.hidden_size
    modules.append(ModuleWeights(ModuleKind.HEAD, None, head))
    return ModelWeights(info.name, arch, tuple(modules), sizes.embedding, "files",
                        info.quant.bits, info.quant.head_bits)


def model_weights(folder: str | Path, bpw: float | None = None,
                  head_bits: int | None = None, bpw_flag: str = "--bpw") -> ModelWeights:
    """The planner's view of a model folder.

    An EXL2 folder with its weight files is measured exactly; ``bpw`` (and ``head_bits``)
    override that with an estimate, which is what a folder with only config.json needs.
    ``bpw_flag`` is the command-line option that gives this folder's bpw (``--draft-bpw``
    for a draft), named when one is needed.
    """
    info = read_model(folder)
    if info.quant.method == "exl3":
        return _exl3_weights(info, bpw, head_bits, bpw_flag)
    if bpw is None and info.is_exl2 and info.weights is not None:
        return weights_from_files(info)
    if bpw is None and info.is_exl2 and info.quant.bits:
        bpw = info.quant.bits  # an EXL2 config.json whose weights are not here (yet)
    if bpw is None:
        what = (f"{info.quant.label} weights" if info.quant.method != "none"
                else "no EXL2 quantization" if info.weights is None else "unquantized weights")
        raise InvalidInputError(
            f"{info.path} has {what}, so its size as an EXL2 model is unknown.",
            f"Give the bitrate of the EXL2 quant you mean to run, e.g. 4.0 ({bpw_flag} on the "
            "command line; the bpw box beside the model on the GPUs page).",
        )
    bits = head_bits or info.quant.head_bits or DEFAULT_HEAD_BITS
    return weights_from_bpw(info.arch, float(bpw), bits, name=info.name)


def _exl3_weights(info: ModelInfo, bpw: float | None, head_bits: int | None,
                  bpw_flag: str) -> ModelWeights:
    """An EXL3 folder: measured from its files, else estimated from quantization_config's
    bits (``bpw`` overrides both), as core.vram.exl3 reads exllamav3."""
    from specdeck.core.vram import exl3

    if bpw is None and info.weights is not None:
        return exl3.weights_from_files(info)
    bits = check_bpw(bpw) if bpw is not None else info.quant.bits
    if bits is None:
        raise InvalidInputError(f"{info.path}'s quantization_config names no bits.",
                                f"Pass the bits per weight of the EXL3 quant (e.g. {bpw_flag} 4.0).")
    head = head_bits or info.quant.head_bits or exl3.DEFAULT_HEAD_BITS
    return exl3.weights_from_bits(info.arch, float(bits), head, name=info.name)


def estimate_weights(model: ModelWeights, bpw: float) -> ModelWeights:
    """``model`` re-estimated at another bitrate, in its own format (the bpw search)."""
    if model.is_exl3:
        from specdeck.core.vram import exl3

        return exl3.weights_from_bits(model.arch, bpw, model.head_bits or exl3.DEFAULT_HEAD_BITS,
                                      model.name)
    return weights_from_bpw(model.arch, bpw, model.head_bits or DEFAULT_HEAD_BITS, model.name)
