"""Facts about TabbyAPI and ExLlamaV2 that several layers rely on, written once.

- The cache is allocated in steps of 256 tokens: TabbyAPI rounds cache_size up to a multiple
  of 256, and ExLlamaV2's dynamic generator asserts it (exllamav2 0.3.2
  generator/dynamic.py: PAGED_PAGE_SIZE = 256, line 389).
- A draft whose native context is shorter than the target's is stretched with NTK-aware
  RoPE scaling: alpha = -0.13436 + 0.80541 r + 0.28833 r^2 for r = wanted / native > 1
  (TabbyAPI common/utils.py ``calculate_rope_alpha``, fitted to perplexity measurements).

- ExLlamaV2's cache modes, as TabbyAPI names them (cache_mode / draft_cache_mode): FP16,
  Q8, Q6, Q4, each one of exllamav2's cache classes (cache.py). ExLlamaV2Cache_8bit is not
  offered: the dynamic generator asserts against it.
- TabbyAPI's defaults: max_seq_len 4096 and chunk_size 2048 (common/config_models.py,
  commit 004e837); its ExLlamaV2 backend clamps chunk_size to 256..max_seq_len and rounds it
  up to a multiple of 256 before it becomes max_input_len (backends/exllamav2/model.py,
  commit 02a8d68); the config only asks for chunk_size > 0.

The config editor (the cache_size rule, the cache modes), the VRAM planner (context steps,
cache bytes, the automatic alpha it notes), the compatibility rules (the alpha a draft
needs), the ExLlamaV2 engine (cache classes and lengths, the alpha it loads a draft with),
the GPUs page and the CLI's help all take them from here.
"""

from __future__ import annotations

from specdeck.core.errors import InvalidInputError
from specdeck.core.units import MiB

CACHE_STEP = 256
"""Tokens per step of the KV cache (TabbyAPI's rounding; ExLlamaV2's page size)."""

CACHE_CLASSES = {
    "FP16": "ExLlamaV2Cache",
    "Q8": "ExLlamaV2Cache_Q8",
    "Q6": "ExLlamaV2Cache_Q6",
    "Q4": "ExLlamaV2Cache_Q4",
}
"""TabbyAPI's ExLlamaV2 cache modes, largest first, and the exllamav2 class of each."""
CACHE_MODES = tuple(CACHE_CLASSES)
CACHE_MODES_TEXT = "FP16, Q8, Q6 or Q4"
"""The modes as the help texts and error messages name them."""
assert CACHE_MODES_TEXT == ", ".join(CACHE_MODES[:-1]) + f" or {CACHE_MODES[-1]}"


def check_cache_mode(mode: str) -> str:
    """A cache mode as written in config.yml or a flag ("q4", " FP16"), as TabbyAPI names it;
    anything else is an error naming the modes."""
    normal = str(mode).strip().upper()
    if normal not in CACHE_MODES:
        raise InvalidInputError(f"Cache mode {mode!r} is not one ExLlamaV2 knows.",
                                f"Use {CACHE_MODES_TEXT}.")
    return normal


NATIVE_CONTEXT_DEFAULT = 2048
"""A model's native context when its config.json names none: exllamav2's
``ExLlamaV2Config.prepare`` (config.py, 0.3.2) reads max_sequence_length, model_max_length,
max_position_embeddings, max_seq_len, n_positions in that order, with 2048 as the default."""
DEFAULT_MAX_SEQ_LEN = 4096
"""TabbyAPI's max_seq_len when config.yml leaves it blank."""
DEFAULT_CHUNK_SIZE = 2048
"""TabbyAPI's chunk_size default: becomes ExLlamaV2's max_input_len (sizes every buffer)."""
DEFAULT_CACHE_MODE = "FP16"
"""TabbyAPI's cache_mode and draft_cache_mode default."""
DEFAULT_AUTOSPLIT_RESERVE_MB = (96.0,)
"""TabbyAPI's autosplit_reserve default: 96 MB kept free on GPU 0, nothing on the others."""
DEFAULT_AUTOSPLIT_RESERVE_TEXT = ",".join(f"{mb:g}" for mb in DEFAULT_AUTOSPLIT_RESERVE_MB)
"""The same as a form or flag writes it ("96")."""

CACHE_LAYOUT = {
    "FP16": (1, 1, 2, False),
    "Q8": (1, 1, 1, True),
    "Q6": (1, 2, 1, True),
    "Q4": (2, 2, 1, True),
}
"""Per cache mode: (key elements per storage unit, value elements per unit, bytes per unit,
has scales), as ExLlamaV2's cache classes shape their tensors (cache.py): FP16 stores K and
V as float16; Q8/Q6/Q4 store uint8 with 1 or 2 elements per byte and add float16 scales, one
per 32 elements of each of K and V."""
SCALE_GROUP = 32
"""Elements per float16 scale in the quantized caches."""
assert tuple(CACHE_LAYOUT) == CACHE_MODES


def quantized_cache(mode: str) -> bool:
    """Whether a cache mode stores K and V quantized (Q8/Q6/Q4: uint8 with scales, which
    dequantize through FP16 tensors as long as the cache); FP16 stores them as they are."""
    return CACHE_LAYOUT[check_cache_mode(mode)][3]


AUTOSPLIT_LOAD_RESERVE = 256 * MiB
"""ExLlamaV2's autosplit holds 256 MB free on the GPU it is filling (model.py
load_autosplit_gen, minimum_reserve_vram); released after loading."""


def kv_bytes_per_element(mode: str) -> float:
    """Bytes of K + V (and scales) per element of one head's dimension, per token and layer
    (when head_dim is a multiple of 32): FP16 4, Q8 2.125, Q6 1.625, Q4 1.125."""
    k_per_unit, v_per_unit, unit_bytes, scales = CACHE_LAYOUT[mode]
    size = unit_bytes / k_per_unit + unit_bytes / v_per_unit
    return size + (2 * 2 / SCALE_GROUP if scales else 0.0)


def tabby_chunk_size(chunk_size: int, max_seq_len: int) -> int:
    """The max_input_len TabbyAPI's ExLlamaV2 backend loads with for config.yml's chunk_size:
    clamped to 256..max_seq_len, then rounded up to a multiple of 256."""
    return round_up_to_cache_step(sorted((CACHE_STEP, int(chunk_size), int(max_seq_len)))[1])


def round_up_to_cache_step(tokens: int, step: int = CACHE_STEP) -> int:
    """The cache length allocated for ``tokens``: the next multiple of the step."""
    if tokens <= 0:
        return step
    return -(-int(tokens) // step) * step


def ntk_rope_alpha(ratio: float) -> float:
    """The RoPE alpha that stretches a model to ``ratio`` x its native context (1 at or
    below it)."""
    if ratio <= 1.0:
        return 1.0
    return -0.13436 + 0.80541 * ratio + 0.28833 * ratio**2


def matmul_scores_bytes(num_heads: int, chunk: int, max_seq_len: int) -> int:
    """The peak of exllamav2's matmul attention branch (``no_sdpa`` or soft-capping) for one
    forward: fp16 scores of heads x chunk x keys, two alive at once (the scores with the mask
    added, then the softmax), at the longest key length the cache allows."""
    return 2 * num_heads * chunk * max_seq_len * 2
