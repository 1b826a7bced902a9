"""From what a user types (CLI flags, the GUI form, a TabbyAPI config.yml) to a plan."""

from __future__ import annotations

from dataclasses import dataclass, replace

from specdeck.core.config.schema import (
    DRAFT,
    DRAFT_MODE_MTP,
    MODEL,
    draft_mode_of,
    loads_draft_model,
)
from specdeck.core.errors import InvalidInputError
from specdeck.core.exl2_facts import (
    DEFAULT_AUTOSPLIT_RESERVE_TEXT,
    DEFAULT_CACHE_MODE,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_SEQ_LEN,
)
from specdeck.core.models import MAX_CONTEXT
from specdeck.core.vram.costs import DEFAULT_OVERHEADS, Overheads
from specdeck.core.vram.gpus import (
    GpuSpec,
    gpus_from_frame,
    parse_gpu_sizes,
    parse_reserve_mb,
    parse_split,
)
from specdeck.core.vram.plan import VramPlan, plan
from specdeck.core.vram.request import PlanRequest
from specdeck.core.vram.weights import model_weights

NATIVE_CONTEXT = -1
"""A context that says: the target's own (TabbyAPI's max_seq_len: -1)."""
CONTEXT_RANGE = (NATIVE_CONTEXT, MAX_CONTEXT)
"""The context a plan takes (``PlanInputs.context``, ``vram --ctx``, the GPUs page): -1 the
target's native context, 0 TabbyAPI's default, else tokens (config.yml's max_seq_len takes
the same, core.config.schema)."""


@dataclass(frozen=True)
class PlanInputs:
    """A plan as a user gives it (CLI flags, the GUI form, a config.yml): folders, numbers,
    and TabbyAPI-style lists as text. :func:`plan_from_inputs` turns it into a plan."""

    model: str
    draft: str | None = None
    context: int | None = None
    """Tokens of cache; None: TabbyAPI's default, min(native context, 4096); -1: the
    target's native context (TabbyAPI's max_seq_len: -1)."""
    cache_mode: str = DEFAULT_CACHE_MODE
    draft_cache_mode: str = DEFAULT_CACHE_MODE
    gpus: str | None = None
    """Typed sizes in GB ("32,24"); None: this machine's GPUs."""
    bpw: float | None = None
    draft_bpw: float | None = None
    head_bits: int | None = None
    draft_head_bits: int | None = None
    gpu_split: str | None = None
    draft_gpu_split: str | None = None
    autosplit: bool = True
    autosplit_reserve_mb: str = DEFAULT_AUTOSPLIT_RESERVE_TEXT
    chunk_size: int = DEFAULT_CHUNK_SIZE
    count_in_use: bool = False
    flash_attention: bool = True
    """False for GPUs older than Ampere, where TabbyAPI runs without flash-attn."""
    mtp: bool = False
    """Draft with the target's own MTP layers (TabbyAPI main's draft_mode: mtp) instead of
    a draft folder."""


def build_request(inputs: PlanInputs, frame=None, overheads: Overheads = DEFAULT_OVERHEADS) -> PlanRequest:
    """Read the model folders and resolve the GPUs (``frame``: live telemetry, read now if
    None and no sizes were typed). Raises SpecDeckError with a fix for anything wrong."""
    if not inputs.model or not str(inputs.model).strip():
        raise InvalidInputError("No target model folder given.", "Pick the folder that holds config.json.")
    target = model_weights(inputs.model, inputs.bpw, inputs.head_bits)
    draft = None
    if inputs.mtp:
        if inputs.draft and str(inputs.draft).strip():
            raise InvalidInputError("A draft folder and MTP drafting were both asked for.",
                                    "TabbyAPI main drafts with one: drop --draft or --mtp.")
        from specdeck.core.models import read_model
        from specdeck.core.vram.exl3 import mtp_weights

        info = read_model(inputs.model)
        if info.quant.method != "exl3":
            raise InvalidInputError(f"{info.name} is not an EXL3 model; MTP drafting is "
                                    "TabbyAPI main's (ExLlamaV3) draft_mode: mtp.",
                                    "Plan an EXL3 quant of the target.")
        draft = mtp_weights(info)
    elif inputs.draft and str(inputs.draft).strip():
        draft = model_weights(inputs.draft, inputs.draft_bpw, inputs.draft_head_bits,
                              bpw_flag="--draft-bpw")
    return PlanRequest(
        target=target,
        gpus=resolve_gpus(inputs, frame, overheads),
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
    if context == NATIVE_CONTEXT:
        return native
    if context is None or context == 0:
        return min(native, DEFAULT_MAX_SEQ_LEN)
    low, high = CONTEXT_RANGE
    if not low <= context <= high:
        raise InvalidInputError(f"Context {context} is not a number of tokens a plan takes.",
                                f"Use 1 to {high:,}, 0 for TabbyAPI's default or -1 for the "
                                "model's own context.")
    return context


def resolve_gpus(inputs: PlanInputs, frame, overheads: Overheads) -> tuple[GpuSpec, ...]:
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
    ``draft_model_path()``): what the file leaves unset is the config schema's default, the
    one place TabbyAPI's defaults are written. GPU sizes are left to the caller (live or
    typed)."""
    target = doc.target_model_path()
    if target is None:
        raise InvalidInputError(
            "This config.yml names no model (model.model_name is empty).",
            "Set model_name, or pick the target folder by hand.",
        )
    drafting = doc.section_values(DRAFT)
    draft = doc.draft_model_path() if loads_draft_model(drafting) else None
    # On Ampere and newer (paged mode) TabbyAPI allocates cache_size tokens, which defaults
    # to max_seq_len; max_seq_len -1 means the model's own context.
    context = doc.value(MODEL, "cache_size") or doc.value(MODEL, "max_seq_len")
    return PlanInputs(
        model=str(target),
        draft=str(draft) if draft is not None else None,
        context=int(context) if context else None,
        cache_mode=str(doc.value(MODEL, "cache_mode")),
        draft_cache_mode=str(doc.value(DRAFT, "draft_cache_mode")),
        gpu_split=_split_text(doc.value(MODEL, "gpu_split")),
        draft_gpu_split=_split_text(doc.value(DRAFT, "draft_gpu_split")),
        autosplit=bool(doc.value(MODEL, "gpu_split_auto")),
        autosplit_reserve_mb=_split_text(doc.value(MODEL, "autosplit_reserve"))
        or DEFAULT_AUTOSPLIT_RESERVE_TEXT,
        chunk_size=int(doc.value(MODEL, "chunk_size")),
        mtp=draft_mode_of(drafting) == DRAFT_MODE_MTP,
    )
