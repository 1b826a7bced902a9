"""What things cost on a GPU: the KV cache, ExLlamaV2's buffers, and the fixed overheads.

Every number that is not a model's weights lives here, each with where it comes from:
the KV cache layout of ExLlamaV2's cache classes (cache.py), the per-model buffers its
modules ask for (attn.py, mlp.py, linear.py, device.py), and :class:`Overheads`, the costs
that do not depend on the model.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeck.core.errors import InvalidInputError
from specdeck.core.exl2_facts import (
    AUTOSPLIT_LOAD_RESERVE,
    CACHE_LAYOUT,
    CACHE_MODES,
    CACHE_STEP,
    SCALE_GROUP,
    check_cache_mode,
    kv_bytes_per_element,
    matmul_scores_bytes,
    quantized_cache,
    round_up_to_cache_step,
)
from specdeck.core.models import Architecture
from specdeck.core.units import MiB

CONTEXT_STEP = CACHE_STEP
"""TabbyAPI rounds cache_size up to a multiple of 256; ExLlamaV2's paged cache needs it."""
KV_BYTES_PER_ELEMENT = {mode: kv_bytes_per_element(mode) for mode in CACHE_MODES}
"""Bytes per token per layer per unit of E (when head_dim is a multiple of 32)."""
TENSOR_PAD = 128
"""ExLlamaV2 sizes every scratch tensor 128 bytes larger than its elements (the ``+ 128`` in
attn.py/mlp.py ``temp_*_size``)."""
FLASH_ATTN_DIVISOR = 190
"""With flash-attn, ExLlamaV2 shrinks the attention temporary by sqrt(max_attention_size) / 190,
its own estimate of flash-attn's saving (attn.py ``temp_attn_size``). TabbyAPI sets
max_attention_size = chunk_size², so the divisor is chunk_size / 190."""


@dataclass(frozen=True)
class Overheads:
    """Every cost beyond weights and KV cache, in one place, with where it comes from.

    The defaults describe TabbyAPI (exl2-checkpoint) on ExLlamaV2 0.3.2 with flash-attn on
    an Ampere-or-newer GPU. The GPU-proof kit measures the real numbers on a lent GPU and
    docs/vram.md records the comparison; change a default only with a measurement.
    """

    cuda_context: int = 400 * MiB
    """A bare CUDA context per GPU a process touches, with PyTorch's lazily loaded kernels:
    ~400 MB with CUDA >= 11.7 and lazy module loading (PyTorch's default),
    pytorch/pytorch#109888. Not yet measured on a GPU older than Hopper."""
    cuda_context_hopper: int = 650_969_088
    """The same on an H100/H200: measured 651 MB on an H200 (driver 580, CUDA 13, torch
    2.11; docs/benchmarks/gpu-probe-2026-11-26.md, NVML before and after the first tensor)."""
    cublas_handle: int = 69_206_016
    """cuBLAS's handle state, outside PyTorch's pool: NVML rose 69 MB more than PyTorch's
    reserved memory at the first half matmul (the same H200 probe)."""
    kernel_images: int = 92_274_688
    """Kernels loaded on first use once a model runs (exllamav2's extension and more of
    PyTorch's): 92 MB more outside PyTorch's pool by the time a model had loaded and warmed
    up (the same H200 probe; the extension itself is a 43 MB file)."""
    blas_workspace: int = 8_519_680
    """cuBLAS workspace per (handle, stream), inside PyTorch's pool (it counts as
    allocated): 4096 KiB x 2 + 16 KiB x 8 before Hopper (PyTorch's CublasHandlePool.cpp,
    getChosenWorkspaceSize)."""
    blas_workspace_hopper: int = 32 * MiB
    """32 MiB on Hopper: after every model was unloaded, 67,108,864 bytes stayed allocated
    on the H200, two workspaces."""
    blas_streams: int = 2
    """The default stream and exllamav2's own (model.py 545 and 593: the first load's
    forward passes run on the default stream, the warm-up and jobs on exllamav2's)."""
    load_reserve: int = AUTOSPLIT_LOAD_RESERVE
    """What ExLlamaV2's autosplit holds free while loading (core.exl2_facts)."""
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


    def process_bytes(self, gpu_name: str) -> int:
        """What a PyTorch process holds on a GPU outside PyTorch's pool: the context, cuBLAS's
        handle and the kernel images (the plan's "cuda_context" part)."""
        context = self.cuda_context_hopper if is_hopper(gpu_name) else self.cuda_context
        return context + self.cublas_handle + self.kernel_images

    def workspace_bytes(self, gpu_name: str) -> int:
        """cuBLAS workspaces inside PyTorch's pool on a GPU where models run."""
        each = self.blas_workspace_hopper if is_hopper(gpu_name) else self.blas_workspace
        return self.blas_streams * each


HOPPER_NAMES = ("H100", "H200", "H800", "H20", "GH200")


def is_hopper(gpu_name: str) -> bool:
    """An NVIDIA Hopper GPU by its NVML name ("NVIDIA H200", "NVIDIA H100 80GB HBM3"); a
    GPU typed by size has no name and is planned as an older one."""
    words = gpu_name.upper().replace("-", " ").split()
    return any(word in HOPPER_NAMES for word in words)


DEFAULT_OVERHEADS = Overheads()


# KV cache ------------------------------------------------------------------------------------
def round_context(tokens: int) -> int:
    """The cache length TabbyAPI allocates for ``tokens``: the next multiple of 256."""
    if tokens < 1:
        raise InvalidInputError(f"Context {tokens} must be at least 1 token.")
    return round_up_to_cache_step(tokens)


def kv_bytes_per_token_layer(arch: Architecture, mode: str) -> int:
    """Exact bytes of K+V (and scales) per token per layer, as ExLlamaV2 shapes them."""
    k_per_unit, v_per_unit, unit_bytes, scales = CACHE_LAYOUT[check_cache_mode(mode)]
    heads, head_dim = arch.num_kv_heads, arch.head_dim
    size = heads * (head_dim // k_per_unit) * unit_bytes + heads * (head_dim // v_per_unit) * unit_bytes
    if scales:  # a float16 scale per 32 elements, for K and for V
        size += 2 * heads * (head_dim // SCALE_GROUP) * 2
    return size


def kv_cache_bytes(arch: Architecture, mode: str, tokens: int) -> int:
    """The whole cache: every layer, ``tokens`` long."""
    return kv_bytes_per_token_layer(arch, mode) * arch.num_layers * tokens


# costs that scale with the model ---------------------------------------------------------------
@dataclass(frozen=True)
class ModelCosts:
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


def unpaged_attention_bytes(arch: Architecture, chunk: int, tokens: int,
                            attention_temp: int) -> int:
    """What one unpaged forward's attention holds beyond q/k/v. SDPA (with the causal mask
    SpecDeck restores, core.engines.exl2_attention) holds no scores; ExLlamaV2's own
    chunk x chunk reserve stands for it. A soft-capping model (Gemma 2) takes the matmul
    branch, which holds heads x chunk x keys fp16 scores twice, keys up to the whole cache."""
    if not arch.softcaps_attention:
        return attention_temp
    return max(attention_temp, matmul_scores_bytes(arch.num_heads, min(chunk, tokens), tokens))


def _dq(features_in: int, features_out: int, overheads: Overheads) -> int:
    return 2 * min(features_in * features_out, overheads.max_dq_elements)


def model_costs(arch: Architecture, mode: str, tokens: int, chunk: int,
                overheads: Overheads) -> ModelCosts:
    """Buffer sizes as ExLlamaV2's attn.py / mlp.py / linear.py / device.py compute them."""
    h, q_width, kv_width = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width
    inter, vocab = arch.intermediate_size, arch.vocab_size
    attention_state = chunk * max(q_width, h) * 2 + TENSOR_PAD
    attention_dq = max(_dq(h, q_width, overheads), _dq(h, kv_width, overheads),
                       _dq(q_width, h, overheads))
    mlp_scratch = (chunk * h * 2 + TENSOR_PAD) + 2 * (chunk * max(h, inter) * 2 + TENSOR_PAD) + max(
        _dq(h, inter, overheads), _dq(inter, h, overheads))
    head_scratch = _dq(h, vocab, overheads)
    temp_kv = 0 if arch.num_kv_heads == arch.num_heads else 2 * tokens * q_width * 2 + TENSOR_PAD
    attention_scratch = (attention_state + (chunk * q_width * 2 + TENSOR_PAD)
                         + 2 * (chunk * kv_width * 2 + TENSOR_PAD) + attention_dq + temp_kv)
    att_max = min(chunk * chunk, tokens * tokens)
    if overheads.flash_attention:
        att_max = int(att_max // (chunk / FLASH_ATTN_DIVISOR))
    attention_temp = 2 * att_max * arch.num_heads * 2 + TENSOR_PAD
    rope = 4 * arch.head_dim * tokens  # sin and cos, float16, max_seq_len x head_dim
    # Live during a chunk's forward pass and then kept by PyTorch's allocator: hidden
    # states in and out, q/k/v and the attention output, the logits rows, and without
    # flash-attn the attention's own temporaries: ExLlamaV2's chunk x chunk estimate where
    # SDPA runs (its kernels hold no scores), the whole scores where the matmul branch runs.
    activations = (chunk * 2 * (2 * h + 2 * q_width + 2 * kv_width)
                   + overheads.max_output_len * vocab * 4 * 2
                   + (0 if overheads.flash_attention else unpaged_attention_bytes(
                       arch, chunk, tokens, attention_temp)))
    return ModelCosts(
        cache_per_layer=kv_bytes_per_token_layer(arch, mode) * tokens,
        cache_staging=4 * kv_width * tokens if quantized_cache(mode) else 0,
        scratch_fixed=max(attention_state + attention_dq, mlp_scratch, head_scratch),
        rope_tables=rope,
        activations=activations,
        attention_scratch=attention_scratch,
        mlp_scratch=mlp_scratch,
        head_scratch=head_scratch,
        attention_temp=attention_temp,
        split_constant=rope + h * chunk * 2 + chunk * chunk * 2,
    )
