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
   with E = num_key_value_heads x head_dim (core.exl2_facts.kv_bytes_per_element). The draft cache is as long as the target's.
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

Modules: ``costs`` (KV cache, buffers, :class:`Overheads`), ``weights`` (a model's modules),
``gpus`` (what to plan on), ``request`` (:class:`PlanRequest`), ``placement`` (the loaders'
rules, :class:`GpuPlan`), ``plan`` (:func:`plan`, :class:`VramPlan`, the advice), ``inputs``
(CLI / GUI / config.yml to a plan). docs/vram.md compares the numbers with published
measurements and calculators.
"""

from __future__ import annotations

from specdeck.core.exl2_facts import DEFAULT_CHUNK_SIZE
from specdeck.core.units import GiB, MiB, format_bytes
from specdeck.core.vram.costs import (
    CACHE_MODES,
    CONTEXT_STEP,
    DEFAULT_OVERHEADS,
    KV_BYTES_PER_ELEMENT,
    Overheads,
    check_cache_mode,
    kv_bytes_per_token_layer,
    kv_cache_bytes,
    round_context,
)
from specdeck.core.vram.gpus import (
    GpuSpec,
    gpus_from_frame,
    parse_gpu_sizes,
    parse_reserve_mb,
    parse_split,
)
from specdeck.core.vram.inputs import (
    PlanInputs,
    build_request,
    inputs_from_tabby_config,
    plan_from_inputs,
)
from specdeck.core.vram.placement import OVERHEAD_LABELS, OVERHEAD_PARTS, FitVerdict, GpuPlan
from specdeck.core.vram.plan import VramPlan, largest_bpw, largest_context, ntk_rope_alpha, plan
from specdeck.core.vram.request import DEFAULT_AUTOSPLIT_RESERVE_MB, PlanRequest
from specdeck.core.vram.weights import (
    DEFAULT_HEAD_BITS,
    ModelWeights,
    ModuleKind,
    ModuleWeights,
    model_weights,
    weights_from_bpw,
    weights_from_files,
)

__all__ = [
    "CACHE_MODES", "CONTEXT_STEP", "DEFAULT_AUTOSPLIT_RESERVE_MB", "DEFAULT_CHUNK_SIZE",
    "DEFAULT_HEAD_BITS", "DEFAULT_OVERHEADS", "GiB", "GpuPlan", "GpuSpec", "KV_BYTES_PER_ELEMENT",
    "MiB", "ModelWeights", "ModuleKind", "ModuleWeights", "OVERHEAD_LABELS", "OVERHEAD_PARTS",
    "Overheads", "PlanInputs", "PlanRequest", "FitVerdict", "VramPlan", "build_request",
    "check_cache_mode", "format_bytes", "gpus_from_frame", "inputs_from_tabby_config",
    "kv_bytes_per_token_layer", "kv_cache_bytes", "largest_bpw", "largest_context",
    "model_weights", "ntk_rope_alpha", "parse_gpu_sizes", "parse_reserve_mb", "parse_split",
    "plan", "plan_from_inputs", "round_context", "weights_from_bpw", "weights_from_files",
]
