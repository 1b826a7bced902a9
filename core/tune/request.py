"""What to tune, as `specdeck tune`'s flags and the Tune page's form both say it: a
:class:`TuneRequest`, read into a tune setup by one function (:func:`read_setup`) with the same
rules for both, and the budget's duration (:func:`parse_duration`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import InvalidInputError

SWAP, GGUF, DEMO = "llama-swap", "llama-server", "demo"
TABBY_FOLDER, TABBY = "tabby-folder", "tabby"
KINDS = ((SWAP, "A llama-swap model"), (GGUF, "A llama-server binary and GGUF"),
         (DEMO, "The demo model (SmolLM2-135M, on the CPU)"),
         (TABBY_FOLDER, "A TabbyAPI folder (SpecDeck starts it)"),
         (TABBY, "A running TabbyAPI"))
"""Each kind of setup, and its name on the page."""
TABBY_KINDS = (TABBY_FOLDER, TABBY)

MAX_NEW_TOKENS, MAX_NEW_TOKENS_RANGE = 96, (8, 4096)
"""Tokens a tune generates per run, and the range ``--max-new``, the Tune page and a saved
tune take."""
PROMPTS_PER_SUITE, PROMPTS_PER_SUITE_RANGE = 4, (2, 64)
"""Prompts per suite a tune takes (half tune, half verify), and the range ``--per-suite``, the
Tune page and a saved tune take."""

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
SHORTEST_S, LONGEST_S = 10, 7 * 24 * 3600


def parse_duration(text: str) -> float:
    """"90", "90s", "10m", "1.5h" -> seconds (10 s to 7 days)."""
    match = DURATION.match(text)
    if not match:
        raise InvalidInputError(f"{text!r} is not a duration (e.g. 10m, 90s, 1h)",
                                "Give a duration such as 90s, 10m or 1h.")
    seconds = float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]
    if not SHORTEST_S <= seconds <= LONGEST_S:
        raise InvalidInputError(f"{text!r}: give 10 s to 7 days",
                                "Give a duration such as 90s, 10m or 1h.")
    return seconds


@dataclass(frozen=True)
class TuneRequest:
    """What to tune; :func:`read_setup` reads it (GGUF headers, config files: in a worker)."""

    kind: str
    binary: str = ""
    swap_config: str = ""
    model: str = ""
    gguf: str = ""
    flags: tuple[str, ...] = ()
    """llama-server flags of a GGUF or the demo (a llama-swap cmd or TabbyAPI has its own)."""
    tabby_folder: str = ""
    tabby_python: str = ""
    tabby_url: str = ""
    tabby_config: str = ""
    api_key_env: str = ""
    """TabbyAPI: the names of the variables holding its keys, never a key."""
    admin_key_env: str = ""

    def describe(self) -> str:
        """The setup in a few words, as the page names the one a result belongs to."""
        what = dict(KINDS)[self.kind]
        if self.kind == SWAP:
            return f"{what} {self.model or '?'} in {self.swap_config}"
        if self.kind == GGUF:
            return f"{what}: {Path(self.gguf).name or '?'}"
        if self.kind == TABBY_FOLDER:
            return f"{what}: {self.tabby_folder or '?'}"
        if self.kind == TABBY:
            return f"{what} at {self.tabby_url or '?'}"
        return what


def read_setup(request: TuneRequest):
    """The tune setup ``request`` names (core.tune.setup.Setup, or a TabbySetup), read from
    its files; a SpecDeckError says what is missing or wrong."""
    from specdeck.core.tune import setup

    kind = request.kind
    if kind in TABBY_KINDS:
        from specdeck.core.tune.tabby import read_tabby

        if request.flags:
            raise InvalidInputError("TabbyAPI takes its settings from config.yml; give no "
                                    "llama-server flags.")
        folder = kind == TABBY_FOLDER
        return read_tabby(request.tabby_folder if folder else None,
                          request.tabby_python or None,
                          None if folder else request.tabby_url,
                          None if folder else request.tabby_config,
                          request.api_key_env or None, request.admin_key_env or None)
    if kind == SWAP:
        if not request.model:
            raise InvalidInputError("Say which model of the llama-swap config.yaml to tune.",
                                    "Name the model (--model NAME).")
        if request.flags:
            raise InvalidInputError("A llama-swap model's flags come from its cmd; give no "
                                    "llama-server flags.")
        return setup.from_swap(request.swap_config, request.model,
                               binary=request.binary or None)
    if kind == GGUF:
        if not request.binary:
            raise InvalidInputError("A GGUF is tuned on a llama-server: say which binary.",
                                    "Give the llama-server binary (--llama-server BINARY).")
        return setup.from_llama_server(request.binary, request.gguf, request.flags)
    if kind == DEMO:
        return setup.demo(request.binary or None, request.flags)
    raise InvalidInputError(f"{kind!r} is not a kind of setup to tune.",
                            f"Give one of: {', '.join(k for k, _ in KINDS)}.")
