"""The TabbyAPI settings SpecDeck edits: one table drives the form, validation and CLI help.

Each :class:`Setting` carries the key's type, TabbyAPI's default, the values TabbyAPI
accepts (its pydantic rules in ``common/config_models.py``, branches ``exl2-checkpoint``
and ``main``), its help text, and which backends read it. TabbyAPI's ExLlamaV2 backend
drafts with exllamav2's default of 4 tokens and ignores ``draft_num_tokens``,
``draft_mode``, ``ngram_match_min`` and ``dynamic_draft``; those are ExLlamaV3 settings.
"""

from __future__ import annotations

import contextlib
import enum
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specdeck.core.errors import InvalidInputError
from specdeck.core.exl2_facts import (
    CACHE_MODES,
    CACHE_STEP,
    DEFAULT_AUTOSPLIT_RESERVE_MB,
    DEFAULT_AUTOSPLIT_RESERVE_TEXT,
    DEFAULT_CACHE_MODE,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_SEQ_LEN,
)
from specdeck.core.models import MAX_CONTEXT
from specdeck.core.units import GiB, MiB

EXLLAMAV2 = "exllamav2"
EXLLAMAV3 = "exllamav3"
BOTH = (EXLLAMAV2, EXLLAMAV3)

DRAFT = "draft_model"
MODEL = "model"

DRAFT_MODE_MODEL = "model"
"""draft_mode's default: drafts with draft_model_name's model (none named: no drafting)."""
DRAFT_MODE_DISABLED = "disabled"
DRAFT_MODE_MTP = "mtp"
"""Drafts with the target's own MTP layers."""
DRAFT_MODE_NGRAM = "ngram"
"""Drafts by n-gram lookup (exllamav3's; ``ngram_match_min`` its shortest match)."""
DRAFT_MODES = (DRAFT_MODE_MODEL, DRAFT_MODE_DISABLED, DRAFT_MODE_MTP, DRAFT_MODE_NGRAM)
"""TabbyAPI's ``draft_mode`` values, the ExLlamaV3 backend's (theroyallab/tabbyAPI main
004e8374, common/config_models.py ``DraftModelConfig.draft_mode``: a Literal of these four,
default "model"); exl2-checkpoint has no draft_mode. Every module that reads or writes one
names it here."""
MODELLESS_DRAFT_MODES = (DRAFT_MODE_NGRAM, DRAFT_MODE_MTP)
"""The modes that draft with no draft model."""


def draft_mode_of(values: Mapping[str, Any]) -> str:
    """The draft_mode that draft_model values give (an arm's settings, config.yml's section,
    or the one laid over the other): theirs as TabbyAPI reads it, its default
    (:data:`DRAFT_MODE_MODEL`) when unset or blank."""
    mode = values.get("draft_mode")
    if isinstance(mode, str) and mode.strip():
        return mode.strip().lower()
    return DRAFT_MODE_MODEL if mode is None or isinstance(mode, str) else str(mode)


def loads_draft_model(values: Mapping[str, Any]) -> bool:
    """Whether TabbyAPI with these draft_model values loads a draft model: one is named and
    the mode is :data:`DRAFT_MODE_MODEL` (the others ignore it)."""
    return bool(values.get("draft_model_name")) and draft_mode_of(values) == DRAFT_MODE_MODEL

EXL2_CACHE_MODES = CACHE_MODES
CACHE_GRANULARITY = CACHE_STEP


class Kind(str, enum.Enum):
    TEXT = "text"
    PATH = "path"
    FLOAT = "float"
    INT = "int"
    BOOL = "bool"
    CHOICE = "choice"
    FLOAT_LIST = "float_list"
    CACHE_MODE = "cache_mode"
    """FP16/Q8/Q6/Q4, or for ExLlamaV3 "k_bits,v_bits" with each from 2 to 8."""


MAX_GPUS = 64
"""The most GPUs a per-GPU list holds (gpu_split, autosplit_reserve, a VRAM plan's GPUs)."""
MAX_GPU_GB = 16384.0
"""16 TiB: far above any GPU (an H200 has 141 GB); a larger number is a typo. config.yml's
per-GPU sizes and the VRAM plan's GPUs (core.vram.gpus) share it."""
MAX_RESERVE_MB = MAX_GPU_GB * GiB / MiB
"""The same bound in MB (autosplit_reserve's unit)."""


@dataclass(frozen=True)
class Setting:
    section: str
    key: str
    kind: Kind
    default: Any
    label: str
    help: str
    backends: tuple[str, ...] = BOTH
    choices: tuple[str, ...] = ()
    blank_means: str | None = None
    """What leaving the value blank does. TabbyAPI drops blank (null) values before it
    validates, so blank always means "use the default"; None here derives the wording."""
    minimum: float | None = None
    maximum: float | None = None
    """SpecDeck's sanity bound (far above any real value): a typo such as 1e23 is refused
    instead of being written into config.yml as a 23-digit number."""
    multiple_of: int | None = None
    cli_flag: str | None = None

    @property
    def path(self) -> tuple[str, str]:
        return (self.section, self.key)

    @property
    def dotted(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def exl3_only(self) -> bool:
        return self.backends == (EXLLAMAV3,)

    @property
    def blank_meaning(self) -> str:
        if self.blank_means:
            return self.blank_means
        if self.default in (None, ()):
            return "unset"
        shown = ", ".join(f"{v:g}" for v in self.default) if isinstance(self.default, tuple) else self.default
        return f"default, {shown}"

    def rule(self) -> str:
        """TabbyAPI's rule for this key, in words."""
        blank = f", or blank ({self.blank_meaning})"
        if self.kind is Kind.CHOICE:
            return f"one of {', '.join(self.choices)}{blank}"
        if self.kind is Kind.CACHE_MODE:
            modes = ", ".join(self.choices or EXL2_CACHE_MODES)
            if EXLLAMAV3 in self.backends and self.section == MODEL:
                from specdeck.core.vram.exl3 import CACHE_BITS_TEXT

                return (f"one of {modes} (ExLlamaV2), or a pair k_bits,v_bits "
                        f"{CACHE_BITS_TEXT} such as 8,8 (ExLlamaV3){blank}")
            return f"one of {modes}{blank}"
        if self.kind is Kind.FLOAT_LIST:
            return f"a list of numbers, one per GPU (e.g. 20,24), or empty ({self.blank_meaning})"
        if self.kind is Kind.INT:
            parts = ["a whole number"]
            if self.minimum is not None:
                parts.append(f"at least {self.minimum:g}")
            if self.maximum is not None:
                parts.append(f"at most {self.maximum:,.0f}")
            if self.multiple_of:
                parts.append(f"a multiple of {self.multiple_of}")
            return ", ".join(parts) + blank
        if self.kind is Kind.FLOAT:
            low = f" of at least {self.minimum:g}" if self.minimum is not None else ""
            high = f" and at most {self.maximum:g}" if self.maximum is not None else ""
            return f"a number{low}{high}{blank}"
        if self.kind is Kind.BOOL:
            return f"true or false{blank}"
        return f"text{blank}"


def _s(section: str, key: str, kind: Kind, default: Any, label: str, help: str, **extra) -> Setting:
    return Setting(section=section, key=key, kind=kind, default=default, label=label, help=help, **extra)


SETTINGS: tuple[Setting, ...] = (
    # -- draft model: both backends ----------------------------------------------------
    _s(DRAFT, "draft_model_dir", Kind.PATH, "models", "Draft model folder",
       "Directory that holds draft models (default: models). Relative paths are resolved "
       "from TabbyAPI's folder.", cli_flag="--dir"),
    _s(DRAFT, "draft_model_name", Kind.TEXT, None, "Draft model",
       "The draft model to load at start-up: a folder name inside the draft model folder. "
       "Blank disables speculative decoding.", blank_means="no draft model",
       cli_flag="--name"),
    _s(DRAFT, "draft_rope_scale", Kind.FLOAT, 1.0, "Draft rope scale",
       "Rope scale for the draft model (default: 1.0), same as compress_pos_emb. Use it if "
       "the draft model was trained on long context with rope.", maximum=1000.0, minimum=0.0,
       blank_means="1.0", cli_flag="--rope-scale"),
    _s(DRAFT, "draft_rope_alpha", Kind.FLOAT, None, "Draft rope alpha",
       "NTK rope alpha for the draft model, same as alpha_value. Blank lets TabbyAPI pull it "
       "from the model or compute it from the context length (recommended when the draft's "
       "native context is shorter than the target's).", maximum=1000.0, minimum=0.0,
       blank_means="automatic", cli_flag="--rope-alpha"),
    _s(DRAFT, "draft_cache_mode", Kind.CACHE_MODE, DEFAULT_CACHE_MODE, "Draft cache mode",
       f"Cache precision for the draft model (default: {DEFAULT_CACHE_MODE}). Q8/Q6/Q4 save "
       "VRAM; the draft cache is as long as the main cache.", choices=EXL2_CACHE_MODES,
       cli_flag="--cache-mode"),
    _s(DRAFT, "draft_gpu_split", Kind.FLOAT_LIST, (), "Draft GPU split (GB)",
       "GB of VRAM per GPU for the draft model, e.g. 8,0. Empty = autosplit.",
       maximum=MAX_GPU_GB, minimum=0.0, blank_means="autosplit", cli_flag="--gpu-split"),
    # -- draft model: ExLlamaV3 backend only -------------------------------------------
    _s(DRAFT, "draft_mode", Kind.CHOICE, DRAFT_MODE_MODEL, "Drafting mode",
       f"ExLlamaV3 backend: {DRAFT_MODE_MODEL} (a draft model; off without draft_model_name), "
       f"{DRAFT_MODE_DISABLED}, {DRAFT_MODE_MTP}, or {DRAFT_MODE_NGRAM}.", backends=(EXLLAMAV3,),
       choices=DRAFT_MODES, cli_flag="--mode"),
    _s(DRAFT, "draft_num_tokens", Kind.INT, None, "Draft tokens per step",
       "ExLlamaV3 backend: tokens to draft per iteration (blank: the draft model's default). "
       "The ExLlamaV2 backend always drafts 4.", backends=(EXLLAMAV3,), maximum=64, minimum=1,
       blank_means="the draft model's default", cli_flag="--num-tokens"),
    _s(DRAFT, "ngram_match_min", Kind.INT, 2, "N-gram minimum match",
       "ExLlamaV3 backend: minimum match length for n-gram drafting (default: 2). Used only "
       f"when draft_mode is {DRAFT_MODE_NGRAM}.", backends=(EXLLAMAV3,), maximum=64, minimum=1,
       blank_means="2", cli_flag="--ngram-match-min"),
    _s(DRAFT, "dynamic_draft", Kind.BOOL, False, "Dynamic draft length",
       "ExLlamaV3 backend (TabbyAPI main): adjust the number of draft tokens to the observed "
       "acceptance, up to draft_num_tokens.", backends=(EXLLAMAV3,), blank_means="false",
       cli_flag="--dynamic-draft"),
    # -- main model: what matters for speculation and VRAM ---------------------------------
    _s(MODEL, "model_dir", Kind.PATH, "models", "Model folder",
       "Directory that holds models (default: models)."),
    _s(MODEL, "model_name", Kind.TEXT, None, "Target model",
       "The model to load at start-up: a folder name inside the model folder.",
       blank_means="none loaded at start-up"),
    _s(MODEL, "backend", Kind.CHOICE, None, "Backend",
       "exllamav2 or exllamav3; blank detects it from the model's files.",
       choices=(EXLLAMAV2, EXLLAMAV3), blank_means="detected from the model"),
    _s(MODEL, "max_seq_len", Kind.INT, None, "Context length",
       "Maximum context length in tokens; -1 reads it from the model's config.json. The "
       "draft cache gets the same length.", maximum=MAX_CONTEXT, minimum=-1,
       blank_means=str(DEFAULT_MAX_SEQ_LEN)),
    _s(MODEL, "cache_size", Kind.INT, None, "Cache size",
       f"Tokens of KV cache to allocate (default: max_seq_len); a multiple of {CACHE_STEP}, not "
       "less than max_seq_len.", maximum=MAX_CONTEXT, minimum=1, multiple_of=CACHE_GRANULARITY,
       blank_means="max_seq_len"),
    _s(MODEL, "cache_mode", Kind.CACHE_MODE, DEFAULT_CACHE_MODE, "Cache mode",
       f"KV cache precision (default: {DEFAULT_CACHE_MODE}); FP16, Q8, Q6, Q4 for ExLlamaV2, "
       "or a pair k_bits,v_bits such as 8,8 for ExLlamaV3.", choices=EXL2_CACHE_MODES),
    _s(MODEL, "gpu_split_auto", Kind.BOOL, True, "Autosplit",
       "Spread the model over the GPUs automatically (default: true).", blank_means="true"),
    _s(MODEL, "gpu_split", Kind.FLOAT_LIST, (), "GPU split (GB)",
       "GB of VRAM per GPU for the model when autosplit is off (or with tensor parallel).",
       maximum=MAX_GPU_GB, minimum=0.0, blank_means="none"),
    _s(MODEL, "autosplit_reserve", Kind.FLOAT_LIST, DEFAULT_AUTOSPLIT_RESERVE_MB,
       "Autosplit reserve (MB)",
       "MB of VRAM to keep free per GPU when autosplitting (default: "
       f"{DEFAULT_AUTOSPLIT_RESERVE_TEXT} on GPU 0).",
       maximum=MAX_RESERVE_MB, minimum=0.0,
       blank_means=f"{DEFAULT_AUTOSPLIT_RESERVE_TEXT} MB on GPU 0"),
    _s(MODEL, "chunk_size", Kind.INT, DEFAULT_CHUNK_SIZE, "Chunk size",
       f"Tokens per prompt-ingestion chunk (default: {DEFAULT_CHUNK_SIZE}). It sizes ExLlamaV2's "
       f"scratch buffers: lower saves VRAM, ingests slower; 512 to 4096 is the useful range, "
       f"and TabbyAPI raises it to at least {CACHE_STEP} and to a multiple of {CACHE_STEP}.",
       maximum=1 << 20, minimum=1),
    _s(MODEL, "tensor_parallel", Kind.BOOL, False, "Tensor parallel",
       "Load the model with tensor parallelism (default: false).", blank_means="false"),
)

BY_PATH: dict[tuple[str, str], Setting] = {s.path: s for s in SETTINGS}
DRAFT_SETTINGS = tuple(s for s in SETTINGS if s.section == DRAFT)
MODEL_SETTINGS = tuple(s for s in SETTINGS if s.section == MODEL)


def setting(section: str, key: str) -> Setting:
    try:
        return BY_PATH[(section, key)]
    except KeyError:
        raise InvalidInputError(
            f"SpecDeck does not edit {section}.{key}.",
            "Edit that key in a text editor; SpecDeck keeps it as it is.",
        ) from None


# -- validation ------------------------------------------------------------------------


def _refuse(s: Setting, value: Any, why: str = "") -> InvalidInputError:
    shown = "blank" if value is None else repr(value)
    reason = f" ({why})" if why else ""
    return InvalidInputError(
        f"{s.dotted} = {shown} is not valid{reason}: TabbyAPI expects {s.rule()}.",
        "Change the value and try again.",
    )


def _number(s: Setting, value: Any, integer: bool) -> float | int:
    if isinstance(value, bool):
        raise _refuse(s, value)
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text) if integer else float(text)
        except ValueError:
            if integer:
                try:
                    as_float = float(text)
                except ValueError:
                    raise _refuse(s, text) from None
                if as_float.is_integer():
                    value = int(as_float)
                else:
                    raise _refuse(s, text) from None
            else:
                raise _refuse(s, text) from None
    if integer:
        if isinstance(value, float):
            if not value.is_integer():
                raise _refuse(s, value)
            value = int(value)
        if not isinstance(value, int):
            raise _refuse(s, value)
    else:
        if not isinstance(value, (int, float)):
            raise _refuse(s, value)
        value = float(value)
        if not math.isfinite(value):
            raise _refuse(s, value)
    if s.minimum is not None and value < s.minimum:
        raise _refuse(s, value, f"below {s.minimum:g}")
    if s.maximum is not None and value > s.maximum:
        raise _refuse(s, value, f"above {s.maximum:g}")
    if s.multiple_of and value % s.multiple_of:
        raise _refuse(s, value, f"not a multiple of {s.multiple_of}")
    return value


def _float_list(s: Setting, value: Any) -> tuple[float, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        text = value.strip().strip("[]")
        items: Sequence[Any] = [p for p in re.split(r"[,\s]+", text) if p]
    elif isinstance(value, (list, tuple)):
        items = value
    else:
        raise _refuse(s, value)
    out = []
    for item in items:
        if isinstance(item, bool):
            raise _refuse(s, value)
        try:
            number = float(item)
        except (TypeError, ValueError):
            raise _refuse(s, value, f"{item!r} is not a number") from None
        if not math.isfinite(number) or (s.minimum is not None and number < s.minimum) \
                or (s.maximum is not None and number > s.maximum):
            raise _refuse(s, value, f"{item!r} is out of range")
        out.append(number)
    if len(out) > MAX_GPUS:
        raise _refuse(s, value, f"{len(out)} entries; at most one per GPU ({MAX_GPUS})")
    return tuple(out)


def _cache_mode(s: Setting, value: Any, backend: str | None) -> str:
    if not isinstance(value, str):
        raise _refuse(s, value)
    text = value.strip()
    if text.upper() in EXL2_CACHE_MODES:
        return text.upper()
    allow_pair = s.section == MODEL and backend != EXLLAMAV2
    if allow_pair:
        # ExLlamaV3's own reading of a bit pair (core.vram.exl3; imported here, since the
        # VRAM planner reads config.yml through this module).
        from specdeck.core.vram.exl3 import check_cache_mode as exl3_cache_mode

        with contextlib.suppress(InvalidInputError):
            return exl3_cache_mode(text)
    raise _refuse(s, value)


def _bool(s: Setting, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false", "yes", "no", "on", "off"):
        return value.strip().lower() in ("true", "yes", "on")
    raise _refuse(s, value)


def normalize(s: Setting, value: Any, backend: str | None = None) -> Any:
    """``value`` as TabbyAPI would read it, or InvalidInputError stating the rule.

    Accepts what a user types (strings such as "8,0" or "q4") as well as parsed YAML values;
    returns ``None`` for blank where blank is allowed.
    """
    if isinstance(value, str) and not value.strip() and s.kind is not Kind.FLOAT_LIST:
        value = None
    if value is None:
        return None
    if s.kind in (Kind.TEXT, Kind.PATH):
        if isinstance(value, (dict, list, tuple, bool)):
            raise _refuse(s, value)
        return str(value)
    if s.kind is Kind.FLOAT:
        return _number(s, value, integer=False)
    if s.kind is Kind.INT:
        return _number(s, value, integer=True)
    if s.kind is Kind.BOOL:
        return _bool(s, value)
    if s.kind is Kind.CHOICE:
        if isinstance(value, str) and value.strip().lower() in s.choices:
            return value.strip().lower()
        raise _refuse(s, value)
    if s.kind is Kind.CACHE_MODE:
        return _cache_mode(s, value, backend)
    if s.kind is Kind.FLOAT_LIST:
        return _float_list(s, value)
    raise AssertionError(s.kind)


def file_value_problem(s: Setting, raw: Any, backend: str | None = None) -> str | None:
    """Why TabbyAPI would refuse ``raw`` as read from config.yml (None when it is fine).

    Stricter than :func:`normalize`, which forgives what a user types: in the file TabbyAPI
    takes cache modes case-sensitively and lists only as lists.
    """
    try:
        value = normalize(s, raw, backend)
    except InvalidInputError as exc:
        return exc.what
    if s.kind is Kind.CACHE_MODE and isinstance(raw, str) and raw.strip() != value:
        return f"{s.dotted} = {raw!r} is not valid: TabbyAPI expects {s.rule()} (upper case)."
    if s.kind is Kind.FLOAT_LIST and raw is not None and not isinstance(raw, list):
        return f"{s.dotted} = {raw!r} is not valid: TabbyAPI expects a list such as [20, 24]."
    if s.kind is Kind.CHOICE and isinstance(raw, str) and raw != value:
        return f"{s.dotted} = {raw!r} is not valid: TabbyAPI expects {s.rule()} (lower case)."
    return None
