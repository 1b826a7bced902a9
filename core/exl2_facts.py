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

The config editor (the cache_size rule, the cache modes), the VRAM planner (context steps,
cache bytes, the automatic alpha it notes), the compatibility rules (the alpha a draft
needs), the ExLlamaV2 engine (cache classes and lengths, the alpha it loads a draft with),
the GPUs page and the CLI's help all take them from here.
"""

from __future__ import annotations

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
