"""The VRAM plan: will this target (and this draft) fit on these GPUs, and where does it go?

The plan replays, in arithmetic, what TabbyAPI's ExLlamaV2 backend (exl2-checkpoint branch)
and ExLlamaV2 0.3.2 allocate when they load a model:

1. The draft loads first, with ExLlamaV2's autosplit loader over all GPUs (so it lands on
   GPU 0 if it fits), or with ``draft_gpu_split`` when given.
2. The target loads next: with autosplit its modules fill the GPUs in order starting again
   at GPU 0; with ``gpu_split`` they fill each GPU's share; on a single GPU TabbyAPI turns
   autosplit off and everything goes to GPU 0.
3. Modules are ExLlamaV2's: per layer an attention module then an MLP module, then the final
   norm and the output head. The token embedding stays in system RAM.
4. Each attention module's KV cache lives on the same GPU (the autosplit loader allocates it
   as the layer loads). Per token per layer: FP16 4E, Q8 2.125E, Q6 1.625E, Q4 1.125E bytes
   with E = num_key_value_heads x head_dim. The draft cache is as long as the target's.
5. Autosplit places a module on a GPU only if, with it and its cache, the GPU still has the
   autosplit reserve plus ExLlamaV2's 256 MB load reserve free; those are released after
   loading.
6. Every GPU a model touches also holds that model's scratch buffer, its RoPE tables, the
   quantized cache's FP16 staging tensors, the CUDA context (once per GPU), the forward
   pass's activations and the PyTorch allocator's rounding slack: see :class:`Overheads`.

Weights come from the EXL2 files on disk (exact per-layer bytes from the safetensors
headers) or, for a folder with only config.json, from the architecture and a bpw (the head
at its head bits). Everything here is pure arithmetic: a plan takes microseconds, which is
what lets :func:`plan` search for the largest context that fits.

docs/vram.md compares these numbers with published measurements and calculators.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from specdeck.core.errors import InvalidInputError
from specdeck.core.models import (
    WEIGHT_SUFFIX,
    Architecture,
    ModelInfo,
    read_model,
    read_safetensors_header,
)

MiB = 1024**2
GiB = 1024**3

CACHE_MODES = ("FP16", "Q8", "Q6", "Q4")
"""TabbyAPI's cache_mode / draft_cache_mode values for ExLlamaV2, largest first."""
CONTEXT_STEP = 256
"""TabbyAPI rounds cache_size up to a multiple of 256; ExLlamaV2's paged cache needs it."""
DEFAULT_HEAD_BITS = 6
"""ExLlamaV2's converter default (-hb 6) when quantization_config does not say."""
DEFAULT_CHUNK_SIZE = 2048
"""TabbyAPI's chunk_size default: becomes ExLlamaV2's max_input_len (sizes every buffer)."""
DEFAULT_AUTOSPLIT_RESERVE_MB = (96.0,)
"""TabbyAPI's autosplit_reserve default: 96 MB kept free on GPU 0, nothing on the others."""

# Per cache mode: (key elements per byte-unit, value elements per unit, bytes per unit,
# has scales) exactly as ExLlamaV2's cache classes shape their tensors (cache.py):
# FP16 stores K and V as float16; Q8/Q6/Q4 store uint8 with 1 or 2 elements per byte and
# add float16 scales, one per 32 elements of each of K and V.
_CACHE_LAYOUT = {
    "FP16": (1, 1, 2, False),
    "Q8": (1, 1, 1, True),
    "Q6": (1, 2, 1, True),
    "Q4": (2, 2, 1, True),
}
KV_BYTES_PER_ELEMENT = {"FP16": 4.0, "Q8": 2.125, "Q6": 1.625, "Q4": 1.125}
"""Bytes per token per layer per unit of E (when head_dim is a multiple of 32)."""


@dataclass(frozen=True)
class Overheads:
    """Every cost beyond weights and KV cache, in one place, with where it comes from.

    The defaults describe TabbyAPI (exl2-checkpoint) on ExLlamaV2 0.3.2 with flash-attn on
    an Ampere-or-newer GPU. The GPU-proof kit measures the real numbers on a lent GPU and
    docs/vram.md records the comparison; change a default only with a measurement.
    """

    cuda_context: int = 400 * MiB
    """Driver context + lazily loaded kernels per GPU a process touches: ~400 MB with CUDA
    >= 11.7 and lazy module loading (PyTorch's default); pytorch/pytorch#109888."""
    load_reserve: int = 256 * MiB
    """ExLlamaV2's autosplit holds 256 MB free on the GPU it is filling
    (model.py load_autosplit_gen, minimum_reserve_vram); released after loading."""
    driver_reserved: int = 512 * MiB
    """Memory no program can use on a GPU typed by hand (live GPUs report their own): the
    driver/GSP firmware carve-out; an idle headless RTX 4090 shows 459-507 MiB used of
    24564 MiB (driver 550). Live GPUs use NVML's v2 "reserved" figure instead."""
    allocator_slack: float = 0.02
    """PyTorch's caching allocator rounds large tensors up to 2 MiB and packs mid-sized ones
    into 20 MiB segments: about 2% of weights and cache end up as unusable padding."""
    max_dq_elements: int = 512 * 1024**2
    """ExLlamaV2's max_dq_size: the largest weight matrix it dequantizes in one go, which
    caps the scratch buffer (2 bytes per element)."""
    max_output_len: int = 16
    """TabbyAPI fixes max_output_len at 16 logits rows per forward pass."""
    flash_attention: bool = True
    """flash-attn present (TabbyAPI needs Ampere+ for paged mode): attention temporaries are
    small; without it ExLlamaV2 reserves a chunk_size^2 attention matrix."""
    margin: int = 300 * MiB
    """A GPU with less free memory than this after loading is reported as tight: it is
    the planner's stated accuracy (5% or 300 MB, whichever is larger, on weights+cache)."""


DEFAULT_OVERHEADS = Overheads()


# weights -----------------------------------------------------------------------------------
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

    @property
    def gpu_bytes(self) -> int:
        return sum(m.nbytes for m in self.modules)

    @property
    def label(self) -> str:
        if self.source == "files":
            bits = f"EXL2 {self.bpw:g} bpw, " if self.bpw else ""
            return f"{self.name} ({bits}sizes from its files)"
        return f"{self.name} ({self.bpw:g} bpw, head {self.head_bits} bits, estimated)"


def _linear_shapes(arch: Architecture) -> dict[ModuleKind, list[tuple[int, int]]]:
    """(in, out) features of every quantized matrix in one layer's modules."""
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    inter, experts = arch.intermediate_size, max(1, arch.num_experts)
    return {
        ModuleKind.ATTENTION: [(h, q_width), (h, kv_width), (h, kv_width), (q_width, h)],
        ModuleKind.MLP: [(h, inter), (h, inter), (inter, h)] * experts,
    }


def weights_from_bpw(arch: Architecture, bpw: float, head_bits: int = DEFAULT_HEAD_BITS,
                     name: str = "model") -> ModelWeights:
    """Estimate EXL2 module sizes from the architecture: layers at ``bpw``, head at
    ``head_bits``, norms and the MoE router in FP16, the embedding in FP16 (system RAM).

    EXL2's bpw is the average over the quantized layer matrices including their scales,
    so ``params x bpw / 8`` is the size on disk and on the GPU; biases (Qwen2's q/k/v) are
    left out (a few kB per layer).
    """
    if not 1.0 <= bpw <= 16.0:
        raise InvalidInputError(f"bpw {bpw:g} is out of range.", "EXL2 quants run from 2 to 8 bpw.")
    if not 2 <= head_bits <= 16:
        raise InvalidInputError(f"head bits {head_bits} are out of range (2-16).")
    h = arch.hidden_size
    norm = 2 * h
    shapes = _linear_shapes(arch)
    attention = round(sum(i * o for i, o in shapes[ModuleKind.ATTENTION]) * bpw / 8) + norm
    router = 2 * h * arch.num_experts if arch.num_experts > 1 else 0
    mlp = round(sum(i * o for i, o in shapes[ModuleKind.MLP]) * bpw / 8) + norm + router
    modules: list[ModuleWeights] = []
    for layer in range(arch.num_layers):
        modules.append(ModuleWeights(ModuleKind.ATTENTION, layer, attention))
        modules.append(ModuleWeights(ModuleKind.MLP, layer, mlp))
    modules.append(ModuleWeights(ModuleKind.NORM, None, norm))
    modules.append(ModuleWeights(ModuleKind.HEAD, None, round(arch.vocab_size * h * head_bits / 8)))
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
    modules: list[ModuleWeights] = []
    for layer, total in enumerate(sizes.layers):
        modules.append(ModuleWeights(ModuleKind.ATTENTION, layer, attention[layer]))
        modules.append(ModuleWeights(ModuleKind.MLP, layer, total - attention[layer]))
    modules.append(ModuleWeights(ModuleKind.NORM, None, sizes.other))
    # A tied model without its own head tensors uses the FP16 embedding as the head, on
    # the GPU (ExLlamaV2 loads it under the head's alternative key).
    head = sizes.head or (sizes.embedding if arch.tie_word_embeddings else 0)
    modules.append(ModuleWeights(ModuleKind.HEAD, None, head))
    return ModelWeights(info.name, arch, tuple(modules), sizes.embedding, "files",
                        info.quant.bits, info.quant.head_bits)


def model_weights(folder: str | Path, bpw: float | None = None,
                  head_bits: int | None = None) -> ModelWeights:
    """The planner's view of a model folder.

    An EXL2 folder with its weight files is measured exactly; ``bpw`` (and ``head_bits``)
    override that with an estimate, which is what a folder with only config.json needs.
    """
    info = read_model(folder)
    if bpw is None and info.is_exl2 and info.weights is not None:
        return weights_from_files(info)
    if bpw is None and info.is_exl2 and info.quant.bits:
        bpw = info.quant.bits  # an EXL2 config.json whose weights are not here (yet)
    if bpw is None:
        what = (f"{info.quant.label} weights" if info.quant.method != "none"
                else "no EXL2 quantization" if info.weights is None else "unquantized weights")
        raise InvalidInputError(
            f"{info.path} has {what}, so its size as an EXL2 model is unknown.",
            "Pass the bpw of the EXL2 quant you mean to run (e.g. --bpw 4.0).",
        )
    bits = head_bits or info.quant.head_bits or DEFAULT_HEAD_BITS
    return weights_from_bpw(info.arch, float(bpw), bits, name=info.name)


# KV cache ------------------------------------------------------------------------------------
def check_cache_mode(mode: str) -> str:
    normal = str(mode).strip().upper()
    if normal not in CACHE_MODES:
        raise InvalidInputError(
            f"Cache mode {mode!r} is not one ExLlamaV2 knows.", f"Use one of {', '.join(CACHE_MODES)}."
        )
    return normal


def round_context(tokens: int) -> int:
    """The cache length TabbyAPI allocates for ``tokens``: the next multiple of 256."""
    if tokens < 1:
        raise InvalidInputError(f"Context {tokens} must be at least 1 token.")
    return -(-int(tokens) // CONTEXT_STEP) * CONTEXT_STEP


def kv_bytes_per_token_layer(arch: Architecture, mode: str) -> int:
    """Exact bytes of K+V (and scales) per token per layer, as ExLlamaV2 shapes them."""
    k_per_unit, v_per_unit, unit_bytes, scales = _CACHE_LAYOUT[check_cache_mode(mode)]
    heads, head_dim = arch.num_kv_heads, arch.head_dim
    size = heads * (head_dim // k_per_unit) * unit_bytes + heads * (head_dim // v_per_unit) * unit_bytes
    if scales:  # float16 scale per 32 elements, for K and for V
        size += 2 * heads * (head_dim // 32) * 2
    return size


def kv_cache_bytes(arch: Architecture, mode: str, tokens: int) -> int:
    """The whole cache: every layer, ``tokens`` long."""
    return kv_bytes_per_token_layer(arch, mode) * arch.num_layers * tokens


# GPUs ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuSpec:
    """A GPU to plan for, numbered as CUDA (and so TabbyAPI's gpu_split) numbers it."""

    index: int
    name: str
    total_bytes: int
    reserved_bytes: int
    """Held by the driver and firmware; no program can use it."""
    in_use_bytes: int = 0
    """Held by other programs right now (the desktop, another server), when counted."""
    nvml_index: int | None = None

    @property
    def capacity_bytes(self) -> int:
        return self.total_bytes - self.reserved_bytes - self.in_use_bytes


def parse_gpu_sizes(text: str, overheads: Overheads = DEFAULT_OVERHEADS) -> tuple[GpuSpec, ...]:
    """GPUs typed by hand: "32,24" = a 32 GB card and a 24 GB card (GPU 0 first)."""
    sizes = _parse_numbers(text, "GPU sizes")
    if not sizes or any(s <= 0 for s in sizes):
        raise InvalidInputError(
            f"GPU sizes {text!r} should be positive numbers of GB.", "For example: --gpus 32,24"
        )
    return tuple(
        GpuSpec(i, f"{size:g} GB GPU", int(size * GiB), min(overheads.driver_reserved, int(size * GiB) // 4))
        for i, size in enumerate(sizes)
    )


def _parse_numbers(text: str | Sequence[float], what: str) -> list[float]:
    if not isinstance(text, str):
        return [float(v) for v in text]
    try:
        return [float(part) for part in text.replace(" ", "").strip("[]").split(",") if part]
    except ValueError:
        raise InvalidInputError(
            f"{what} {text!r} should be numbers separated by commas.", "For example: 20,24"
        ) from None


def parse_split(text: str | Sequence[float] | None, what: str = "gpu_split") -> tuple[float, ...] | None:
    """A gpu_split like "20,24" (GB per GPU, in CUDA order), or None."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    values = _parse_numbers(text, what)
    if not values or any(v < 0 for v in values) or not any(v > 0 for v in values):
        raise InvalidInputError(f"{what} {text!r} needs at least one positive size in GB.")
    return tuple(values)


def parse_reserve_mb(text: str | Sequence[float]) -> tuple[float, ...]:
    """TabbyAPI's autosplit_reserve: MB kept free per GPU during autosplit, e.g. "96"."""
    values = _parse_numbers(text, "autosplit_reserve")
    if not values or any(v < 0 for v in values):
        raise InvalidInputError(
            f"autosplit_reserve {text!r} should be MB per GPU (0 or more).", "For example: 96 or 96,0"
        )
    return tuple(values)


def gpus_from_frame(frame, count_in_use: bool = False,
                    overheads: Overheads = DEFAULT_OVERHEADS) -> tuple[GpuSpec, ...]:
    """The GPUs a telemetry frame shows, in CUDA order (what gpu_split means by GPU 0)."""
    usable = [g for g in frame.gpus if g.status.value == "ok" and g.memory_total]
    visible = [g for g in usable if g.cuda_index is not None] or usable
    visible.sort(key=lambda g: (g.cuda_index if g.cuda_index is not None else g.index))
    specs = []
    for position, g in enumerate(visible):
        reserved = g.memory_reserved if g.memory_reserved is not None else overheads.driver_reserved
        in_use = 0
        if count_in_use and g.memory_used is not None:
            # v1 "used" includes the driver's reservation, v2 "used" does not.
            held = g.memory_used - (0 if g.memory_reserved is not None else reserved)
            in_use = max(0, held - (g.own_bytes or 0))
        specs.append(GpuSpec(position, g.name, g.memory_total, reserved, in_use, g.index))
    return tuple(specs)


# the request -------------------------------------------------------------------------------
@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan depends on; field names follow TabbyAPI's config.yml."""

    target: ModelWeights
    gpus: tuple[GpuSpec, ...]
    context: int = 4096
    """max_seq_len / cache_size in tokens (rounded up to 256 in the plan)."""
    cache_mode: str = "FP16"
    draft: ModelWeights | None = None
    draft_cache_mode: str = "FP16"
    gpu_split: tuple[float, ...] | None = None
    """GB per GPU for the target; None = autosplit."""
    draft_gpu_split: tuple[float, ...] | None = None
    autosplit: bool = True
    """TabbyAPI's gpu_split_auto (ignored with one GPU, where TabbyAPI turns it off)."""
    autosplit_reserve_mb: tuple[float, ...] = DEFAULT_AUTOSPLIT_RESERVE_MB
    chunk_size: int = DEFAULT_CHUNK_SIZE

    def checked(self) -> PlanRequest:
        """This request with cache modes normalised; InvalidInputError for bad values."""
        if not self.gpus:
            raise InvalidInputError(
                "There are no GPUs to plan for.",
                "Type the GPU sizes to plan for another machine, e.g. --gpus 32,24.",
            )
        for split, what in ((self.gpu_split, "gpu_split"), (self.draft_gpu_split, "draft_gpu_split")):
            if split is not None and len(split) > len(self.gpus):
                raise InvalidInputError(
                    f"{what} lists {len(split)} GPUs but the plan has {len(self.gpus)}.",
                    "Give one size per GPU, or add the missing GPUs.",
                )
        if self.chunk_size < 256:
            raise InvalidInputError(f"chunk_size {self.chunk_size} is below TabbyAPI's minimum of 256.")
        return replace(
            self,
            cache_mode=check_cache_mode(self.cache_mode),
            draft_cache_mode=check_cache_mode(self.draft_cache_mode),
        )

    @property
    def cache_tokens(self) -> int:
        return round_context(self.context)

    @property
    def split_label(self) -> str:
        if len(self.gpus) == 1:
            return "single GPU"
        if self.gpu_split is not None:
            return f"gpu_split [{', '.join(f'{v:g}' for v in self.gpu_split)}]"
        if not self.autosplit:
            return "gpu_split_auto off (all on GPU 0)"
        reserve = ", ".join(f"{v:g}" for v in self.autosplit_reserve_mb)
        return f"autosplit (reserve [{reserve}] MB)"


# costs that scale with the model ---------------------------------------------------------------
@dataclass(frozen=True)
class _ModelCosts:
    """What one model adds on a GPU besides its weights, for a given request."""

    cache_per_layer: int
    cache_staging: int
    """Quantized caches dequantize through two FP16 tensors as long as the cache, per GPU."""
    scratch_fixed: int
    rope_tables: int
    activations: int
    # set_device_map's bookkeeping (manual split only)
    attention_scratch: int
    mlp_scratch: int
    head_scratch: int
    attention_temp: int
    split_constant: int


def _dq(features_in: int, features_out: int, overheads: Overheads) -> int:
    return 2 * min(features_in * features_out, overheads.max_dq_elements)


def _model_costs(arch: Architecture, mode: str, tokens: int, chunk: int,
                 overheads: Overheads) -> _ModelCosts:
    """Buffer sizes as ExLlamaV2's attn.py / mlp.py / linear.py / device.py compute them."""
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    inter, vocab = arch.intermediate_size, arch.vocab_size
    attention_state = chunk * max(q_width, h) * 2 + 128
    attention_dq = max(_dq(h, q_width, overheads), _dq(h, kv_width, overheads),
                       _dq(q_width, h, overheads))
    mlp_scratch = (chunk * h * 2 + 128) + 2 * (chunk * max(h, inter) * 2 + 128) + max(
        _dq(h, inter, overheads), _dq(inter, h, overheads))
    head_scratch = _dq(h, vocab, overheads)
    temp_kv = 0 if arch.num_kv_heads == arch.num_heads else 2 * tokens * q_width * 2 + 128
    attention_scratch = (attention_state + (chunk * q_width * 2 + 128)
                         + 2 * (chunk * kv_width * 2 + 128) + attention_dq + temp_kv)
    att_max = min(chunk * chunk, tokens * tokens)
    if overheads.flash_attention:
        att_max = int(att_max // (chunk / 190))
    attention_temp = 2 * att_max * arch.num_heads * 2 + 128
    rope = 4 * arch.head_dim * tokens  # sin and cos, float16, max_seq_len x head_dim
    # Live during a chunk's forward pass and then kept by PyTorch's allocator: hidden
    # states in and out, q/k/v and the attention output, the logits rows, and without
    # flash-attn the chunk x chunk attention matrix.
    activations = (chunk * 2 * (2 * h + 2 * q_width + 2 * kv_width)
                   + overheads.max_output_len * vocab * 4 * 2
                   + (0 if overheads.flash_attention else attention_temp))
    return _ModelCosts(
        cache_per_layer=kv_bytes_per_token_layer(arch, mode) * tokens,
        cache_staging=0 if mode == "FP16" else 4 * kv_width * tokens,
        scratch_fixed=max(attention_state + attention_dq, mlp_scratch, head_scratch),
        rope_tables=rope,
        activations=activations,
        attention_scratch=attention_scratch,
        mlp_scratch=mlp_scratch,
        head_scratch=head_scratch,
        attention_temp=attention_temp,
        split_constant=rope + h * chunk * 2 + chunk * chunk * 2,
    )


# placement ---------------------------------------------------------------------------------
OVERHEAD_PARTS = ("cuda_context", "scratch", "cache_staging", "rope_tables", "activations",
                  "allocator_slack")
OVERHEAD_LABELS = {
    "cuda_context": "CUDA context",
    "scratch": "ExLlamaV2 scratch",
    "cache_staging": "quantized-cache staging",
    "rope_tables": "RoPE tables",
    "activations": "activations",
    "allocator_slack": "allocator slack",
}


@dataclass
class _Ledger:
    """One GPU's running totals while the models are placed."""

    spec: GpuSpec
    parts: dict[str, int] = field(default_factory=dict)
    models: set[str] = field(default_factory=set)
    cached_models: set[str] = field(default_factory=set)
    layers: dict[str, list[int]] = field(default_factory=dict)
    passed_over: bool = False
    """An autosplit loader moved on from this GPU, so its fill adapts to reality."""

    def used(self, slack: float, extra: dict[str, int] | None = None) -> int:
        parts = dict(self.parts)
        for key, value in (extra or {}).items():
            parts[key] = parts.get(key, 0) + value
        bulk = sum(v for k, v in parts.items() if k.endswith(("_weights", "_cache")))
        return sum(parts.values()) + int(bulk * slack)

    def add(self, costs: dict[str, int]) -> None:
        for key, value in costs.items():
            self.parts[key] = self.parts.get(key, 0) + value


class _NoFit(Exception):
    """A model cannot be placed; the message says where it ran out."""

    def __init__(self, message: str, missing_bytes: int):
        super().__init__(message)
        self.missing_bytes = missing_bytes
        """Weights and cache of the modules left unplaced: the least that is missing."""


def _unplaced_bytes(model: ModelWeights, module: ModuleWeights, costs: _ModelCosts) -> int:
    rest = model.modules[model.modules.index(module):]
    caches = sum(1 for m in rest if m.kind is ModuleKind.ATTENTION)
    return sum(m.nbytes for m in rest) + caches * costs.cache_per_layer


def _module_costs(ledger: _Ledger, role: str, module: ModuleWeights, costs: _ModelCosts,
                  overheads: Overheads) -> dict[str, int]:
    """What placing ``module`` of model ``role`` on this GPU would add to it."""
    add = {f"{role}_weights": module.nbytes}
    if module.kind is ModuleKind.ATTENTION:
        add[f"{role}_cache"] = costs.cache_per_layer
        if costs.cache_staging and role not in ledger.cached_models:
            add["cache_staging"] = costs.cache_staging
    if role not in ledger.models:
        add["scratch"] = costs.scratch_fixed
        add["rope_tables"] = costs.rope_tables
        # Both models' forward passes run on one stream, so their freed activations are
        # reused: the GPU keeps the larger of the two.
        add["activations"] = max(0, costs.activations - ledger.parts.get("activations", 0))
        if not ledger.models:
            add["cuda_context"] = overheads.cuda_context
    return add


def _commit(ledger: _Ledger, role: str, module: ModuleWeights, add: dict[str, int]) -> None:
    ledger.add(add)
    ledger.models.add(role)
    if module.kind is ModuleKind.ATTENTION:
        ledger.cached_models.add(role)
        ledger.layers.setdefault(role, []).append(module.layer)


def _place_autosplit(ledgers: list[_Ledger], role: str, model: ModelWeights, costs: _ModelCosts,
                     reserve_mb: Sequence[float], overheads: Overheads) -> None:
    """ExLlamaV2's load_autosplit_gen: fill GPU 0, then the next, keeping the reserves free."""
    reserves = [int(math.ceil(v * MiB)) for v in reserve_mb] + [0] * len(ledgers)
    current = 0
    for module in model.modules:
        while True:
            if current >= len(ledgers):
                raise _NoFit(_ran_out(role, model, module), _unplaced_bytes(model, module, costs))
            ledger = ledgers[current]
            add = _module_costs(ledger, role, module, costs, overheads)
            held = reserves[current] + overheads.load_reserve
            if ledger.used(overheads.allocator_slack, add) + held <= ledger.spec.capacity_bytes:
                _commit(ledger, role, module, add)
                break
            ledger.passed_over = True
            current += 1


def _place_split(ledgers: list[_Ledger], role: str, model: ModelWeights, costs: _ModelCosts,
                 split_gb: Sequence[float], overheads: Overheads) -> None:
    """ExLlamaV2's set_device_map: each GPU's share must hold the weights and the scratch.

    The share does not include the cache, which is allocated afterwards next to each
    attention layer; the capacity check comes after placement.
    """
    allocation = [gb * GiB - costs.split_constant for gb in split_gb]
    reserve = [0] * len(split_gb)
    reserve_attention = [0] * len(split_gb)
    current = 0
    for module in model.modules:
        scratch = {ModuleKind.ATTENTION: costs.attention_scratch, ModuleKind.MLP: costs.mlp_scratch,
                   ModuleKind.HEAD: costs.head_scratch}.get(module.kind, 0)
        attention = costs.attention_temp if module.kind is ModuleKind.ATTENTION else 0
        while True:
            if current >= len(allocation):
                raise _NoFit(_ran_out(role, model, module, split=True),
                             _unplaced_bytes(model, module, costs))
            need_scratch = max(scratch, reserve[current])
            need_attention = max(attention, reserve_attention[current])
            if module.nbytes + need_scratch + need_attention <= allocation[current]:
                break
            current += 1
        reserve[current], reserve_attention[current] = need_scratch, need_attention
        allocation[current] -= module.nbytes
        ledger = ledgers[current]
        _commit(ledger, role, module, _module_costs(ledger, role, module, costs, overheads))


def _ran_out(role: str, model: ModelWeights, module: ModuleWeights, split: bool = False) -> str:
    where = f"layer {module.layer}" if module.layer is not None else f"the {module.kind.value}"
    done = module.layer if module.layer is not None else model.arch.num_layers
    share = "its gpu_split shares are" if split else "the GPUs are"
    return (f"The {role} does not fit: {share} full at {where} "
            f"({done} of {model.arch.num_layers} layers placed).")


def _layer_range(layers: Iterable[int]) -> tuple[int, int] | None:
    layers = list(layers)
    return (min(layers), max(layers)) if layers else None


# the result ----------------------------------------------------------------------------------
class Verdict(str, enum.Enum):
    FITS = "fits"
    TIGHT = "tight"
    NO_FIT = "does not fit"


@dataclass(frozen=True)
class GpuPlan:
    """One GPU in the plan: a stacked breakdown of what it will hold."""

    index: int
    name: str
    total_bytes: int
    capacity_bytes: int
    """What the plan may use: total less the driver's reservation and other programs."""
    reserved_bytes: int
    in_use_bytes: int
    target_weights: int
    target_cache: int
    draft_weights: int
    draft_cache: int
    overhead: dict[str, int]
    """Bytes per overhead part (see OVERHEAD_LABELS)."""
    target_layers: tuple[int, int] | None
    draft_layers: tuple[int, int] | None
    binding: bool
    """False where autosplit moved on to the next GPU (the split adapts to what fits)."""
    nvml_index: int | None = None

    @property
    def overhead_bytes(self) -> int:
        return sum(self.overhead.values())

    @property
    def used_bytes(self) -> int:
        return (self.target_weights + self.target_cache + self.draft_weights + self.draft_cache
                + self.overhead_bytes)

    @property
    def free_bytes(self) -> int:
        return self.capacity_bytes - self.used_bytes

    @property
    def is_used(self) -> bool:
        return self.used_bytes > 0

    def verdict(self, margin: int) -> Verdict:
        if self.free_bytes < 0:
            return Verdict.NO_FIT
        if self.is_used and self.binding and self.free_bytes < margin:
            return Verdict.TIGHT
        return Verdict.FITS

    def segments(self) -> list[tuple[str, int]]:
        """(label, bytes) in stacking order, for bars; "free" is clipped at zero."""
        return [
            ("target weights", self.target_weights),
            ("target cache", self.target_cache),
            ("draft weights", self.draft_weights),
            ("draft cache", self.draft_cache),
            ("overhead", self.overhead_bytes),
            ("other programs", self.in_use_bytes),
            ("free", max(0, self.free_bytes)),
        ]

    def to_json(self) -> dict:
        return {
            "index": self.index, "nvml_index": self.nvml_index, "name": self.name,
            "total_bytes": self.total_bytes, "reserved_bytes": self.reserved_bytes,
            "in_use_bytes": self.in_use_bytes, "capacity_bytes": self.capacity_bytes,
            "target_weights": self.target_weights, "target_cache": self.target_cache,
            "draft_weights": self.draft_weights, "draft_cache": self.draft_cache,
            "overhead_bytes": self.overhead_bytes, "overhead": dict(self.overhead),
            "used_bytes": self.used_bytes, "free_bytes": self.free_bytes,
            "target_layers": self.target_layers, "draft_layers": self.draft_layers,
            "binding": self.binding,
        }


@dataclass(frozen=True)
class VramPlan:
    """The answer: per-GPU breakdowns, a verdict with headroom, and what to change."""

    target: str
    draft: str | None
    context_requested: int
    context: int
    """The cache length that will be allocated (a multiple of 256)."""
    cache_mode: str
    draft_cache_mode: str | None
    split: str
    gpus: tuple[GpuPlan, ...]
    verdict: Verdict
    problem: str | None
    headroom_bytes: int
    """Free memory on the fullest GPU whose fill does not adapt; negative: the shortfall
    (when a model cannot be placed at all: the weights and cache left over, a lower bound)."""
    system_ram_bytes: int
    """Token embeddings, which ExLlamaV2 keeps in system RAM."""
    margin_bytes: int
    max_context: int | None = None
    """The largest context that fits with the draft (or of the target alone, if no draft)."""
    max_context_without_draft: int | None = None
    context_limit: int | None = None
    """The ceiling of that search: the target's native context or the request, if larger."""
    suggestions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def fits(self) -> bool:
        return self.verdict is not Verdict.NO_FIT

    def gpu(self, index: int) -> GpuPlan:
        return self.gpus[index]

    def to_json(self) -> dict:
        from dataclasses import fields

        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["fits"] = self.fits
        return data


def _ledgers_for(request: PlanRequest) -> list[_Ledger]:
    return [_Ledger(spec) for spec in request.gpus]


def _place_all(request: PlanRequest, overheads: Overheads) -> tuple[list[_Ledger], _NoFit | None]:
    """Place draft then target as TabbyAPI does; (ledgers, the failure or None)."""
    ledgers = _ledgers_for(request)
    tokens = request.cache_tokens
    try:
        if request.draft is not None:
            draft_costs = _model_costs(request.draft.arch, request.draft_cache_mode, tokens,
                                       request.chunk_size, overheads)
            if request.draft_gpu_split is not None:
                _place_split(ledgers, "draft", request.draft, draft_costs, request.draft_gpu_split,
                             overheads)
            else:  # TabbyAPI loads the draft with autosplit even on one GPU
                _place_autosplit(ledgers, "draft", request.draft, draft_costs,
                                 request.autosplit_reserve_mb, overheads)
        target_costs = _model_costs(request.target.arch, request.cache_mode, tokens,
                                    request.chunk_size, overheads)
        if request.gpu_split is not None and len(request.gpus) > 1:
            _place_split(ledgers, "target", request.target, target_costs, request.gpu_split, overheads)
        elif len(request.gpus) == 1 or not request.autosplit:
            # TabbyAPI turns autosplit off for one GPU: everything goes to GPU 0.
            _place_split(ledgers, "target", request.target, target_costs, (float("inf"),), overheads)
        else:
            _place_autosplit(ledgers, "target", request.target, target_costs,
                             request.autosplit_reserve_mb, overheads)
    except _NoFit as exc:
        return ledgers, exc
    return ledgers, None


def _gpu_plan(ledger: _Ledger, overheads: Overheads) -> GpuPlan:
    parts = ledger.parts
    bulk = sum(v for k, v in parts.items() if k.endswith(("_weights", "_cache")))
    overhead = {key: parts.get(key, 0) for key in OVERHEAD_PARTS if key != "allocator_slack"}
    overhead["allocator_slack"] = int(bulk * overheads.allocator_slack)
    spec = ledger.spec
    return GpuPlan(
        index=spec.index,
        name=spec.name,
        total_bytes=spec.total_bytes,
        capacity_bytes=spec.capacity_bytes,
        reserved_bytes=spec.reserved_bytes,
        in_use_bytes=spec.in_use_bytes,
        target_weights=parts.get("target_weights", 0),
        target_cache=parts.get("target_cache", 0),
        draft_weights=parts.get("draft_weights", 0),
        draft_cache=parts.get("draft_cache", 0),
        overhead=overhead if bulk else {key: 0 for key in OVERHEAD_PARTS},
        target_layers=_layer_range(ledger.layers.get("target", ())),
        draft_layers=_layer_range(ledger.layers.get("draft", ())),
        binding=not ledger.passed_over,
        nvml_index=spec.nvml_index,
    )


@dataclass(frozen=True)
class _Outcome:
    gpus: tuple[GpuPlan, ...]
    verdict: Verdict
    problem: str | None
    headroom: int


def _evaluate(request: PlanRequest, overheads: Overheads) -> _Outcome:
    ledgers, failure = _place_all(request, overheads)
    gpus = tuple(_gpu_plan(ledger, overheads) for ledger in ledgers)
    if failure is not None:
        return _Outcome(gpus, Verdict.NO_FIT, str(failure), -failure.missing_bytes)
    verdicts = [g.verdict(overheads.margin) for g in gpus]
    headroom = _headroom(gpus)
    if Verdict.NO_FIT in verdicts:
        short = next(g for g in gpus if g.free_bytes < 0)
        return _Outcome(gpus, Verdict.NO_FIT, (
            f"GPU {short.index} ({short.name}) would need {format_bytes(-short.free_bytes)} "
            "more than it has."), headroom)
    return _Outcome(gpus, Verdict.TIGHT if Verdict.TIGHT in verdicts else Verdict.FITS, None, headroom)


def _headroom(gpus: Sequence[GpuPlan]) -> int:
    """Free memory where it counts: on the GPUs whose fill does not adapt (see binding)."""
    used = [g for g in gpus if g.is_used] or list(gpus)
    binding = [g for g in used if g.binding or g.free_bytes < 0] or used
    return min(g.free_bytes for g in binding)


def _fits(request: PlanRequest, overheads: Overheads) -> bool:
    return _evaluate(request, overheads).verdict is Verdict.FITS


def largest_context(request: PlanRequest, limit: int,
                    overheads: Overheads = DEFAULT_OVERHEADS) -> int | None:
    """The largest multiple of 256 up to ``limit`` that fits (with margin), or None."""
    low, high = 0, max(1, limit // CONTEXT_STEP)
    if not _fits(replace(request, context=CONTEXT_STEP), overheads):
        return None
    low = 1
    while low < high:  # invariant: low fits; find the last step that fits
        middle = (low + high + 1) // 2
        if _fits(replace(request, context=middle * CONTEXT_STEP), overheads):
            low = middle
        else:
            high = middle - 1
    return low * CONTEXT_STEP


def plan(request: PlanRequest, overheads: Overheads = DEFAULT_OVERHEADS) -> VramPlan:
    """Place the models, judge the fit, and work out the largest context and the fixes."""
    request = request.checked()
    outcome = _evaluate(request, overheads)
    gpus, verdict = outcome.gpus, outcome.verdict
    limit = max(request.target.arch.max_position_embeddings, request.cache_tokens)
    limit = round_context(limit) if limit % CONTEXT_STEP else limit
    alone = replace(request, draft=None)
    max_with = largest_context(request, limit, overheads)
    max_without = largest_context(alone, limit, overheads) if request.draft is not None else max_with
    result = VramPlan(
        target=request.target.label,
        draft=request.draft.label if request.draft is not None else None,
        context_requested=request.context,
        context=request.cache_tokens,
        cache_mode=request.cache_mode,
        draft_cache_mode=request.draft_cache_mode if request.draft is not None else None,
        split=request.split_label,
        gpus=gpus,
        verdict=verdict,
        problem=outcome.problem,
        headroom_bytes=outcome.headroom,
        system_ram_bytes=request.target.embedding_bytes
        + (request.draft.embedding_bytes if request.draft is not None else 0),
        margin_bytes=overheads.margin,
        max_context=max_with,
        max_context_without_draft=max_without,
        context_limit=limit,
        notes=tuple(_notes(request)),
    )
    if verdict is not Verdict.FITS:
        result = replace(result, suggestions=tuple(_suggestions(request, result, overheads)))
    return result


# advice ------------------------------------------------------------------------------------
def ntk_rope_alpha(ratio: float) -> float:
    """TabbyAPI's automatic rope alpha for running at ``ratio`` x the native context."""
    return 1.0 if ratio <= 1 else -0.13436 + 0.80541 * ratio + 0.28833 * ratio**2


def _notes(request: PlanRequest) -> list[str]:
    notes = []
    tokens = request.cache_tokens
    if tokens != request.context:
        notes.append(f"The cache is allocated in steps of {CONTEXT_STEP} tokens: "
                     f"{request.context} becomes {tokens}.")
    for role, model in (("target", request.target), ("draft", request.draft)):
        if model is None:
            continue
        native = model.arch.max_position_embeddings
        if tokens > native:
            notes.append(
                f"The {role}'s native context is {native}; at {tokens} TabbyAPI applies NTK "
                f"rope alpha {ntk_rope_alpha(tokens / native):.2f} automatically."
            )
        if model.source == "bpw":
            notes.append(f"The {role}'s weights are estimated from its config.json at "
                         f"{model.bpw:g} bpw; an EXL2 folder on disk gives exact sizes.")
    return notes


def largest_bpw(request: PlanRequest, overheads: Overheads = DEFAULT_OVERHEADS) -> float | None:
    """For a target estimated from config.json: the largest bpw (in 0.05 steps, at least
    2.0) at which the request fits, or None."""
    target = request.target
    if target.source != "bpw" or target.bpw is None:
        return None
    steps = int(round((target.bpw - 2.0) / 0.05))

    def fits(step: int) -> bool:
        bits = weights_from_bpw(target.arch, 2.0 + step * 0.05, target.head_bits or DEFAULT_HEAD_BITS,
                                target.name)
        return _fits(replace(request, target=bits), overheads)

    if steps < 0 or not fits(0):
        return None
    low, high = 0, steps
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return round(2.0 + low * 0.05, 2)


def _suggestions(request: PlanRequest, result: VramPlan, overheads: Overheads) -> list[str]:
    tips: list[str] = []

    def works(candidate: PlanRequest) -> int | None:
        outcome = _evaluate(candidate, overheads)
        return outcome.headroom if outcome.verdict is Verdict.FITS else None

    for mode in CACHE_MODES[CACHE_MODES.index(request.cache_mode) + 1:]:
        headroom = works(replace(request, cache_mode=mode))
        if headroom is not None:
            tips.append(f"Use cache_mode: {mode} for the target (fits with "
                        f"{format_bytes(headroom)} of headroom).")
            break
    if request.draft is not None and request.draft_cache_mode != "Q4":
        headroom = works(replace(request, draft_cache_mode="Q4"))
        if headroom is not None:
            tips.append(f"Use draft_cache_mode: Q4 (fits with {format_bytes(headroom)} of headroom).")
    if result.max_context is not None and result.max_context < request.cache_tokens:
        tips.append(f"Lower max_seq_len (cache_size) to {result.max_context}: the largest "
                    "context that fits" + (" with the draft." if request.draft else "."))
    if request.draft is not None and len(request.gpus) > 1 and request.draft_gpu_split is None:
        for gpu in range(len(request.gpus) - 1, 0, -1):
            split = _draft_split_on(request, gpu)
            if works(replace(request, draft_gpu_split=split)) is not None:
                tips.append(f"Put the draft on GPU {gpu}: draft_gpu_split: "
                            f"[{', '.join(f'{v:g}' for v in split)}].")
                break
    if request.gpu_split is not None and len(request.gpus) > 1:
        headroom = works(replace(request, gpu_split=None, autosplit=True))
        if headroom is not None:
            tips.append("Remove gpu_split and let autosplit place the layers (it fits that way).")
    alone = result.max_context_without_draft
    if request.draft is not None and alone is not None and alone != result.max_context:
        if alone >= request.cache_tokens:
            tips.append("Without the draft the target fits at this context "
                        "(speculative decoding off).")
        else:
            tips.append(f"Without the draft the target fits up to {alone} tokens of context.")
    bpw = largest_bpw(request, overheads)
    if bpw is not None and bpw < (request.target.bpw or 0):
        tips.append(f"A {bpw:g} bpw quant of the target would fit as asked "
                    f"(this plan assumed {request.target.bpw:g} bpw).")
    elif not tips or all("max_seq_len" in t for t in tips):
        tips.append("Use a smaller quantization (lower bpw) of the target, or add GPU memory.")
    return tips


def _draft_split_on(request: PlanRequest, gpu: int) -> tuple[float, ...]:
    """A draft_gpu_split that puts the whole draft on ``gpu`` (with room for its buffers)."""
    draft = request.draft
    assert draft is not None
    costs = _model_costs(draft.arch, request.draft_cache_mode, request.cache_tokens,
                         request.chunk_size, DEFAULT_OVERHEADS)
    need = draft.gpu_bytes + costs.split_constant + costs.attention_scratch + costs.attention_temp
    gb = math.ceil(need / GiB * 10) / 10 + 0.1
    return tuple(0.0 for _ in range(gpu)) + (gb,)


def format_bytes(count: int | float) -> str:
    """Bytes in GiB (or MiB below 1 GiB), the way nvidia-smi's MiB figures add up."""
    sign = "-" if count < 0 else ""
    count = abs(count)
    if count >= GiB:
        return f"{sign}{count / GiB:.2f} GiB"
    return f"{sign}{count / MiB:.0f} MiB"


# from what a user types --------------------------------------------------------------------
@dataclass(frozen=True)
class PlanInputs:
    """A plan as a user gives it (CLI flags, the GUI form, a config.yml): folders, numbers,
    and TabbyAPI-style lists as text. :func:`plan_from_inputs` turns it into a plan."""

    model: str
    draft: str | None = None
    context: int | None = None
    """Tokens of cache; None: TabbyAPI's default, min(native context, 4096); -1: the
    target's native context (TabbyAPI's max_seq_len: -1)."""
    cache_mode: str = "FP16"
    draft_cache_mode: str = "FP16"
    gpus: str | None = None
    """Typed sizes in GB ("32,24"); None: this machine's GPUs."""
    bpw: float | None = None
    draft_bpw: float | None = None
    head_bits: int | None = None
    draft_head_bits: int | None = None
    gpu_split: str | None = None
    draft_gpu_split: str | None = None
    autosplit: bool = True
    autosplit_reserve_mb: str = "96"
    chunk_size: int = DEFAULT_CHUNK_SIZE
    count_in_use: bool = False
    flash_attention: bool = True
    """False for GPUs older than Ampere, where TabbyAPI runs without flash-attn."""


def build_request(inputs: PlanInputs, frame=None, overheads: Overheads = DEFAULT_OVERHEADS) -> PlanRequest:
    """Read the model folders and resolve the GPUs (``frame``: live telemetry, read now if
    None and no sizes were typed). Raises SpecDeckError with a fix for anything wrong."""
    if not inputs.model or not str(inputs.model).strip():
        raise InvalidInputError("No target model folder given.", "Pick the folder that holds config.json.")
    target = model_weights(inputs.model, inputs.bpw, inputs.head_bits)
    draft = None
    if inputs.draft and str(inputs.draft).strip():
        draft = model_weights(inputs.draft, inputs.draft_bpw, inputs.draft_head_bits)
    return PlanRequest(
        target=target,
        gpus=_resolve_gpus(inputs, frame, overheads),
        context=_context_tokens(inputs.context, target.arch.max_position_embeddings),
        cache_mode=inputs.cache_mode,
        draft=draft,
        draft_cache_mode=inputs.draft_cache_mode,
        gpu_split=parse_split(inputs.gpu_split, "gpu_split"),
        draft_gpu_split=parse_split(inputs.draft_gpu_split, "draft_gpu_split"),
        autosplit=inputs.autosplit,
        autosplit_reserve_mb=parse_reserve_mb(inputs.autosplit_reserve_mb or "0"),
        chunk_size=inputs.chunk_size,
    )


def _context_tokens(context: int | None, native: int) -> int:
    if context == -1:
        return native
    if context is None or context == 0:
        return min(native, 4096)
    if context < 0:
        raise InvalidInputError(f"Context {context} is not a number of tokens.",
                                "Use a positive number, or -1 for the model's own context.")
    return context


def _resolve_gpus(inputs: PlanInputs, frame, overheads: Overheads) -> tuple[GpuSpec, ...]:
    if inputs.gpus and str(inputs.gpus).strip():
        return parse_gpu_sizes(inputs.gpus, overheads)
    if frame is None:
        from specdeck.core.gpu import read_once

        frame = read_once()
    gpus = gpus_from_frame(frame, inputs.count_in_use, overheads)
    if not gpus:
        raise InvalidInputError(
            f"{frame.headline}, so there is nothing to plan on.",
            "Type the GPU sizes in GB to plan for another machine, e.g. --gpus 32,24.",
        )
    return gpus


def plan_from_inputs(inputs: PlanInputs, frame=None,
                     overheads: Overheads = DEFAULT_OVERHEADS) -> VramPlan:
    """:func:`build_request` then :func:`plan`. Reads safetensors headers: run it off the
    GUI thread."""
    overheads = replace(overheads, flash_attention=inputs.flash_attention)
    return plan(build_request(inputs, frame, overheads), overheads)


def _split_text(value) -> str | None:
    if value in (None, "", []) or (isinstance(value, (list, tuple)) and not any(value)):
        return None
    if isinstance(value, (list, tuple)):
        return ",".join(f"{float(v):g}" for v in value)
    return str(value)


def inputs_from_tabby_config(doc) -> PlanInputs:
    """Plan inputs from a TabbyAPI config.yml, through specdeck.core.config's document API
    (``value(section, key)`` with TabbyAPI's defaults filled in, ``target_model_path()``,
    ``draft_model_path()``). GPU sizes are left to the caller (live or typed)."""
    target = doc.target_model_path()
    if target is None:
        raise InvalidInputError(
            "This config.yml names no model (model.model_name is empty).",
            "Set model_name, or pick the target folder by hand.",
        )
    draft = doc.draft_model_path()
    # On Ampere and newer (paged mode) TabbyAPI allocates cache_size tokens, which defaults
    # to max_seq_len; max_seq_len -1 means the model's own context.
    context = doc.value("model", "cache_size") or doc.value("model", "max_seq_len")
    auto = doc.value("model", "gpu_split_auto")
    return PlanInputs(
        model=str(target),
        draft=str(draft) if draft is not None else None,
        context=int(context) if context else None,
        cache_mode=str(doc.value("model", "cache_mode") or "FP16"),
        draft_cache_mode=str(doc.value("draft_model", "draft_cache_mode") or "FP16"),
        gpu_split=_split_text(doc.value("model", "gpu_split")),
        draft_gpu_split=_split_text(doc.value("draft_model", "draft_gpu_split")),
        autosplit=True if auto is None else bool(auto),
        autosplit_reserve_mb=_split_text(doc.value("model", "autosplit_reserve")) or "96",
        chunk_size=int(doc.value("model", "chunk_size") or DEFAULT_CHUNK_SIZE),
    )
