"""What to tune, as `specdeck tune`'s flags and the Tune page's form both say it: a
:class:`TuneRequest`, read into a tune setup by one function (:func:`read_setup`) with the same
rules for both, and the budget's duration (:func:`parse_duration`). The page's form as typed
is a :class:`TuneForm` (its field table: what the page keeps between sessions), which makes
the request and the options the CLI's flags make."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.forms import form_field

SWAP, GGUF, DEMO = "llama-swap", "llama-server", "demo"
TABBY_FOLDER, TABBY = "tabby-folder", "tabby"
KINDS = ((SWAP, "A llama-swap model"), (GGUF, "A llama-server binary and GGUF"),
         (DEMO, "The demo model (SmolLM2-135M, on the CPU)"),
         (TABBY_FOLDER, "A TabbyAPI folder (SpecDeck starts it)"),
         (TABBY, "A running TabbyAPI"))
"""Each kind of setup, and its name on the page."""
TABBY_KINDS = (TABBY_FOLDER, TABBY)
TABBYAPI = "tabbyapi"
"""A tune setup's kind (``Setup.kind``, ``TabbySetup.kind``): a TabbyAPI's, asked for as
either of TABBY_KINDS; the others' is the kind they were asked for as (SWAP, GGUF, DEMO)."""

MAX_NEW_TOKENS, MAX_NEW_TOKENS_RANGE = 96, (8, 4096)
"""Tokens a tune generates per run, and the range ``--max-new``, the Tune page and a saved
tune take."""
PROMPTS_PER_SUITE, PROMPTS_PER_SUITE_RANGE = 4, (2, 64)
"""Prompts per suite a tune takes (half tune, half verify), and the range ``--per-suite``, the
Tune page and a saved tune take."""

DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*$")
SHORTEST_S, LONGEST_S = 10, 7 * 24 * 3600
BUDGET = "10m"
"""A tune's budget when nobody says (``--budget``, the Tune page; ``DEFAULT_BUDGET_S`` is the
same in seconds)."""
DOWNLOAD_GIB_RANGE = (0.0, 1024.0)
"""GiB of Hub drafts a tune may download (``--download-budget``, the Tune page): 0, none (the
Hub is not asked), to 1 TiB."""


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


DEFAULT_BUDGET_S = parse_duration(BUDGET)


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


def kept_flags(text: str) -> str:
    """llama-server flags as the page keeps them: their secrets masked (core.urls.shown_args:
    an --api-key typed into them is never saved); an unclosed quote is not kept at all, in
    case it hides one."""
    from specdeck.core.urls import shown_args

    try:
        return shlex.join(shown_args(shlex.split(text)))
    except ValueError:
        return ""


@dataclass(frozen=True)
class TuneForm:
    """The Tune page's form as typed. Kept between sessions: paths, a URL, variable names,
    the budget; never a key (the form has no field for one), nor the download budget (setting
    it is the user's yes for this session), nor the model (the config's list says which)."""

    kind: str = form_field(DEMO, choices=[k for k, _ in KINDS])
    binary: str = form_field("")
    swap_config: str = form_field("")
    model: str = form_field("", kept=False)
    gguf: str = form_field("")
    flags: str = form_field("", to_text=kept_flags)
    tabby_folder: str = form_field("")
    tabby_python: str = form_field("")
    tabby_url: str = form_field("")
    tabby_config: str = form_field("")
    api_key_env: str = form_field("")
    admin_key_env: str = form_field("")
    budget: str = form_field(BUDGET, check=lambda text: _is_duration(text))
    max_new: int = form_field(MAX_NEW_TOKENS, low=MAX_NEW_TOKENS_RANGE[0],
                              high=MAX_NEW_TOKENS_RANGE[1], kept=False)
    prompts: str = form_field("")
    downloads_gib: float = form_field(0.0, low=DOWNLOAD_GIB_RANGE[0], high=DOWNLOAD_GIB_RANGE[1],
                                      kept=False)

    def request(self, found_binary=None) -> TuneRequest:
        """The form as a request; a SpecDeckError says what is missing. ``found_binary``: the
        llama-server the demo uses when none is given (a callable; default: the first
        core.tune.setup finds)."""
        kind = self.kind
        try:
            flags = tuple(shlex.split(self.flags))
        except ValueError as exc:
            raise SpecDeckError(f"The llama-server flags cannot be read: {exc}.",
                                "Close the quote, or remove it.") from exc
        binary = self.binary.strip()
        if kind in TABBY_KINDS:  # core.tune.tabby.read_tabby says what is missing, in the worker
            return TuneRequest(kind, tabby_folder=self.tabby_folder.strip(),
                               tabby_python=self.tabby_python.strip(),
                               tabby_url=self.tabby_url.strip(),
                               tabby_config=self.tabby_config.strip(),
                               api_key_env=self.api_key_env.strip(),
                               admin_key_env=self.admin_key_env.strip())
        if kind == SWAP:
            if not self.swap_config.strip() or not self.model:
                raise SpecDeckError("Say which llama-swap model to tune.",
                                    "Open its config.yaml and pick the model.")
            return TuneRequest(kind, binary, self.swap_config.strip(), self.model)
        if kind == GGUF and not (binary and self.gguf.strip()):
            raise SpecDeckError("Say which llama-server and GGUF to tune.",
                                "Give the binary and the target .gguf it loads.")
        if kind == DEMO and not binary:
            binary = str((found_binary or found_llama_server)() or "")
            if not binary:
                raise SpecDeckError(
                    "Tuning the demo needs a llama-server, and none was found (on PATH, or in "
                    "llama.cpp's usual build folders).",
                    "Choose your llama-server binary with the Browse… button beside "
                    "“llama-server” above.")
        return TuneRequest(kind, binary, gguf=self.gguf.strip(), flags=flags)

    def options(self):
        """core.tune.run.TuneOptions the form gives (the CLI's --budget rule and words)."""
        from specdeck.core.tune.run import TuneOptions
        from specdeck.core.units import GiB

        try:
            budget = parse_duration(self.budget)
        except SpecDeckError as exc:
            raise SpecDeckError(f"Budget: {exc.what}.", exc.fix) from exc
        prompts = self.prompts.strip()
        return TuneOptions(budget_s=budget, max_new_tokens=self.max_new,
                           suites=(prompts,) if prompts else TuneOptions().suites,
                           download_budget=int(self.downloads_gib * GiB))


def _is_duration(text: str) -> bool:
    try:
        parse_duration(text)
    except InvalidInputError:
        return False
    return True


def found_llama_server():
    """The llama-server SpecDeck finds without being told (core.tune.setup), or None."""
    from specdeck.core.tune.setup import llama_server_candidates

    found = llama_server_candidates()
    return found[0] if found else None
