"""The answer: the plan, the largest context that fits, and what to change if it does not."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from specdeck.core.exl2_facts import ntk_rope_alpha
from specdeck.core.units import GiB, format_bytes
from specdeck.core.vram.costs import (
    CACHE_MODES,
    CONTEXT_STEP,
    DEFAULT_OVERHEADS,
    Overheads,
    model_costs,
    round_context,
)
from specdeck.core.vram.placement import FitVerdict, GpuPlan, evaluate, fits_with_margin
from specdeck.core.vram.request import PlanRequest
from specdeck.core.vram.weights import ModuleKind, estimate_weights


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
    verdict: FitVerdict
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
        return self.verdict is not FitVerdict.NO_FIT

    def gpu(self, index: int) -> GpuPlan:
        return self.gpus[index]

    def to_json(self) -> dict:
        from dataclasses import fields

        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["fits"] = self.fits
        return data


def largest_context(request: PlanRequest, limit: int,
                    overheads: Overheads = DEFAULT_OVERHEADS) -> int | None:
    """The largest multiple of 256 up to ``limit`` that fits (with margin), or None."""
    low, high = 0, max(1, limit // CONTEXT_STEP)
    if not fits_with_margin(replace(request, context=CONTEXT_STEP), overheads):
        return None
    low = 1
    while low < high:  # invariant: low fits; find the last step that fits
        middle = (low + high + 1) // 2
        if fits_with_margin(replace(request, context=middle * CONTEXT_STEP), overheads):
            low = middle
        else:
            high = middle - 1
    return low * CONTEXT_STEP


def plan(request: PlanRequest, overheads: Overheads = DEFAULT_OVERHEADS) -> VramPlan:
    """Place the models, judge the fit, and work out the largest context and the fixes."""
    request = request.checked()
    outcome = evaluate(request, overheads)
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
    if verdict is not FitVerdict.FITS:
        result = replace(result, suggestions=tuple(_suggestions(request, result, overheads)))
    return result


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
                         f"{model.bpw:g} bpw; an {model.quant_format.upper()} folder on disk "
                         "gives exact sizes.")
    if request.is_exl3:
        notes.append("Planned as TabbyAPI main loads EXL3 with ExLlamaV3 (exllamav3 1.6.5's sources, "
                     "docs/vram.md); its buffers are not yet measured on a GPU.")
    return notes


def largest_bpw(request: PlanRequest, overheads: Overheads = DEFAULT_OVERHEADS) -> float | None:
    """For a target estimated from config.json: the largest bpw (in 0.05 steps, at least
    2.0) at which the request fits, or None."""
    target = request.target
    if target.source != "bpw" or target.bpw is None:
        return None
    steps = int(round((target.bpw - 2.0) / 0.05))

    def fits(step: int) -> bool:
        bits = estimate_weights(target, 2.0 + step * 0.05)
        return fits_with_margin(replace(request, target=bits), overheads)

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
        outcome = evaluate(candidate, overheads)
        return outcome.headroom if outcome.verdict is FitVerdict.FITS else None

    modes, smallest = _smaller_cache_modes(request)
    for mode in modes:
        headroom = works(replace(request, cache_mode=mode))
        if headroom is not None:
            tips.append(f"Use cache_mode: {mode} for the target (fits with "
                        f"{format_bytes(headroom)} of headroom).")
            break
    if request.draft is not None and request.draft_cache_mode != smallest:
        headroom = works(replace(request, draft_cache_mode=smallest))
        if headroom is not None:
            tips.append(f"Use draft_cache_mode: {smallest} (fits with {format_bytes(headroom)} of headroom).")
    if result.max_context is not None and result.max_context < request.cache_tokens:
        tips.append(f"Lower max_seq_len (cache_size) to {result.max_context}: the largest "
                    "context that fits" + (" with the draft." if request.draft else "."))
    # TabbyAPI main loads a draft_gpu_split only beside a gpu_split (PlanRequest.checked).
    split_ok = not request.is_exl3 or request.gpu_split is not None
    if request.draft is not None and len(request.gpus) > 1 and request.draft_gpu_split is None and split_ok:
        for gpu in range(len(request.gpus) - 1, 0, -1):
            split = _draft_split_on(request, gpu, overheads)
            if works(replace(request, draft_gpu_split=split)) is not None:
                tips.append(f"Put the draft on {request.gpus[gpu].in_words}: draft_gpu_split: "
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


def _smaller_cache_modes(request: PlanRequest) -> tuple[tuple[str, ...], str]:
    """The target's cache modes smaller than its own, and the draft mode to suggest: the
    ExLlamaV2 modes, or for EXL3 the k,v pairs of exllamav3's quantized cache."""
    if not request.is_exl3:
        return CACHE_MODES[CACHE_MODES.index(request.cache_mode) + 1:], "Q4"
    from specdeck.core.vram import exl3

    own = exl3.kv_bytes_per_token_layer(request.target.arch, request.cache_mode)
    smaller = tuple(m for m in exl3.SMALLER_CACHE_MODES
                    if exl3.kv_bytes_per_token_layer(request.target.arch, m) < own)
    return smaller, "4,4"


def _draft_split_on(request: PlanRequest, gpu: int, overheads: Overheads) -> tuple[float, ...]:
    """A draft_gpu_split that puts the whole draft on ``gpu`` (with room for its buffers)."""
    draft = request.draft
    assert draft is not None
    if request.is_exl3:  # use_per_device caps everything PyTorch holds: weights, cache, buffers
        from specdeck.core.vram import exl3

        costs = exl3.model_costs(draft.arch, request.draft_cache_mode, request.cache_tokens,
                                 request.chunk_for(True), overheads)
        layers = sum(1 for m in draft.modules if m.kind == ModuleKind.ATTENTION)
        need = (draft.gpu_bytes + layers * costs.cache_per_layer + costs.scratch_fixed
                + costs.cache_staging + costs.activations)
        need = int(need * (1 + overheads.allocator_slack))
        gb = math.ceil(need / GiB * 10) / 10 + 0.1
        return tuple(0.0 for _ in range(gpu)) + (gb,)
    costs = model_costs(draft.arch, request.draft_cache_mode, request.cache_tokens,
                        request.chunk_size, overheads)
    need = draft.gpu_bytes + costs.split_constant + costs.attention_scratch + costs.attention_temp
    gb = math.ceil(need / GiB * 10) / 10 + 0.1
    return tuple(0.0 for _ in range(gpu)) + (gb,)
