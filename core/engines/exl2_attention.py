"""Causal attention for exllamav2's unpaged mode, restored where 0.2.9-0.3.2 dropped it.

The fault (exllamav2 commit 2e630ae, 2025-02-13, first released in 0.2.9 and unchanged in 0.3.2,
the last release): ``ExLlamaV2Attention._attn_torch`` (attn.py 869-937) takes its SDPA mask
from ``Params.get_block_diag_mask`` whenever ``causal`` is set, and that returns None for any
forward without ``cu_seqlens`` (attn_params.py 233-243), which is every unpaged forward. torch
SDPA then runs with no mask: each row of a prompt chunk and of a draft verification attends
to the rows after it. 0.2.8 chose ``causal_lower_right(q_len, k_len)`` there. Unpaged mode is
what ExLlamaV2 runs without flash-attn >= 2.5.7 or on a GPU older than Ampere (SpecDeck's
engine, TabbyAPI's exl2 backend, the GPU kit's bare loop).

The fix chosen, and why: SpecDeck wraps ``_attn_torch`` so that exactly the forwards the
library leaves unmasked (causal, several rows or a padding mask, no ``cu_seqlens``, a layer
that is not block-diagonal, SDPA available and not switched off, no logit soft-capping) run
SDPA with torch's lower-right causal bias over the keys actually passed, after the library's
own sliding-window cut, as 0.2.8 did. Every other forward goes to the library's code as it is.
The alternative, ``config.no_sdpa``, selects the library's matmul branch, which is masked but:
- materialises the fp16 scores, heads x chunk x (cached + chunk), twice at its peak (the sum
  with the mask, then the softmax), bounded by nothing the dynamic generator sets: a 32-head
  model prefilling a 2048-token chunk at 30k context needs about 8 GiB more than flash-attn
  or SDPA would (``core.exl2_facts.matmul_scores_bytes``);
- computes q x k in fp16 before scaling and the softmax in fp16, the overflow that made
  exllamav2 move to SDPA (exllamav2#493, Qwen2-7B);
- trips the tensor-parallel forward's assertion (attn.py 1281: TP without flash-attn must use
  SDPA).
With a ``CausalBias`` torch's SDPA runs flash or memory-efficient kernels on CUDA, which
never hold the scores; the plan then needs nothing beyond what ExLlamaV2 reserves. Where the
wrapper cannot be installed (a library whose ``_attn_torch`` is not the one read here),
SpecDeck falls back to ``no_sdpa`` and the VRAM plan counts the scores.
"""

from __future__ import annotations

import inspect
from typing import Any

SDPA_UNMASKED_SINCE = (0, 2, 9)
"""The first release with the unmasked SDPA branch (commit 2e630ae; 0.3.2, the last release,
still has it)."""

WRAPPED_SIGNATURE = ("self", "batch_size", "q_len", "q_states", "k_states", "v_states",
                     "attn_params", "cfg", "causal")
"""``_attn_torch``'s parameters in 0.2.9-0.3.2; any other signature is left alone."""

_MARK = "_specdeck_causal_sdpa"


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def sdpa_runs_unmasked(x: Any, config: Any, paged: bool) -> bool:
    """Would this exllamav2 run an unpaged forward of several rows through torch SDPA with
    no causal mask? Paged mode uses flash-attn's own causal kernels; xformers, when present
    and on, takes the unpaged path before SDPA (attn.py 1143-1148); ``no_sdpa`` selects the
    matmul branch; soft-capping models (Gemma 2) always take the matmul branch."""
    if paged or getattr(config, "no_sdpa", False) or getattr(config, "attn_logit_softcapping", None):
        return False
    attn = x.attn
    if getattr(attn, "has_xformers", False) and not getattr(config, "no_xformers", False):
        return False
    if not getattr(attn, "has_lower_right_sdpa", False):
        return False
    return _version(str(getattr(x, "version", "0"))) >= SDPA_UNMASKED_SINCE


def is_restored(attention_class: Any) -> bool:
    """Has SpecDeck's causal SDPA wrapper been installed on this attention class?"""
    return getattr(getattr(attention_class, "_attn_torch", None), _MARK, False)


def restore_causal_sdpa(attention_class: Any) -> bool:
    """Install the causal SDPA wrapper on ``attention_class._attn_torch`` (once; a second call
    changes nothing). False, with nothing changed, where the method is not the one this
    module was written against."""
    original = getattr(attention_class, "_attn_torch", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True
    try:
        names = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return False
    if names != WRAPPED_SIGNATURE:
        return False
    attention_class._attn_torch = _causal_wrapper(original)
    return True


def remove_causal_sdpa(attention_class: Any) -> None:
    """Put the library's own ``_attn_torch`` back (the GPU probe measures both)."""
    method = getattr(attention_class, "_attn_torch", None)
    if getattr(method, _MARK, False):
        attention_class._attn_torch = method.__wrapped__


def _needs_own_mask(module: Any, q_len: int, attn_params: Any, cfg: Any, causal: bool) -> bool:
    """The forwards exllamav2 0.2.9-0.3.2 sends to SDPA without the mask they need."""
    if not causal or getattr(cfg, "no_sdpa", False) or getattr(cfg, "attn_logit_softcapping", None):
        return False
    if getattr(attn_params, "cu_seqlens", None) is not None:
        return False  # a packed batch: the library's block-diagonal mask is right
    if module.layer_idx in getattr(attn_params, "block_diag_layers", ()):
        return False
    # One row with no padding mask attends to every key: no mask is the right mask.
    return q_len > 1 or not attn_params.is_causal()


def _causal_wrapper(original: Any) -> Any:
    def _attn_torch(self, batch_size, q_len, q_states, k_states, v_states, attn_params, cfg,
                    causal=True):
        if not _needs_own_mask(self, q_len, attn_params, cfg, causal):
            return original(self, batch_size, q_len, q_states, k_states, v_states, attn_params,
                            cfg, causal)
        return causal_sdpa(self, batch_size, q_len, q_states, k_states, v_states, attn_params)

    _attn_torch.__wrapped__ = original
    _attn_torch.__doc__ = "exllamav2's _attn_torch with the causal mask 0.2.9 dropped restored."
    setattr(_attn_torch, _MARK, True)
    return _attn_torch


def causal_sdpa(module: Any, batch_size: int, q_len: int, q_states: Any, k_states: Any,
                v_states: Any, attn_params: Any) -> Any:
    """SDPA over the keys exllamav2 passes, each query row seeing the keys up to its own
    position: the last ``q_len`` keys are the rows themselves (``causal_lower_right``). The
    tensors come as (batch, length, heads, head_dim), as ``_attn_torch`` receives them."""
    import torch.nn.functional as F
    from torch.nn.attention.bias import causal_lower_right

    heads, head_dim = q_states.shape[2], q_states.shape[3]
    q = q_states.transpose(1, 2)
    k = module.repeat_kv(k_states.transpose(1, 2), module.num_key_value_groups)
    v = module.repeat_kv(v_states.transpose(1, 2), module.num_key_value_groups)
    window = module.sliding_window
    if window and k.shape[2] >= window:  # the library's own cut, in both of its branches
        k, v = k[:, :, -window:, :], v[:, :, -window:, :]
    if attn_params.is_causal():
        mask = causal_lower_right(q_len, k.shape[2])
    else:  # a padding mask: the library's causal-and-padding mask, over the keys kept
        mask = attn_params.get_attn_mask(q.device)[..., -k.shape[2]:]
    out = F.scaled_dot_product_attention(q, k, v, mask, scale=module.scaling)
    return out.transpose(1, 2).reshape((batch_size, q_len, heads * head_dim))


def unpaged_attention_note(x: Any) -> str:
    return (f"exllamav2 {x.version} without flash-attn runs torch SDPA with no causal mask "
            "(its attn.py since 0.2.9): SpecDeck restores the causal lower-right mask that "
            "0.2.8 used, so attention stays on SDPA's kernels")


def fallback_note(x: Any) -> str:
    return (f"exllamav2 {x.version} without flash-attn runs torch SDPA with no causal mask, "
            "and its attention is not the one SpecDeck can correct: SpecDeck sets no_sdpa, so "
            "attention runs as a masked matmul that holds the scores of a whole chunk (the "
            "VRAM plan counts them)")


def mask_unpaged_attention(x: Any, config: Any, paged: bool) -> str | None:
    """Make an unpaged exllamav2 attend causally; the note that says how, or None where it
    already does. The wrapper where it installs; ``no_sdpa`` otherwise. Every model SpecDeck
    loads (target and draft) and the GPU kit's bare loop go through it."""
    if not sdpa_runs_unmasked(x, config, paged):
        return None
    attention_class = getattr(x.attn, "ExLlamaV2Attention", None)
    if attention_class is not None and restore_causal_sdpa(attention_class):
        return unpaged_attention_note(x)
    config.no_sdpa = True
    return fallback_note(x)
