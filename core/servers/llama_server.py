"""llama-servers that SpecDeck starts itself, one per arm: a launch profile, checked against
the binary's own ``--help``, started on a free local port, health-checked, stopped.

Current llama.cpp removed ``--draft-max/--draft-min`` (``--spec-draft-n-max/-n-min`` now): a
profile written from last year's guides is refused up front with the replacement named,
instead of a server that exits. A draft model without ``--spec-type`` starts but does not draft
(unless its GGUF is an MTP, DFlash or DSpark draft): the probe says so before the run
(``core.servers.probe.launched_drafting``) and the summary after it. The binary is the
authority: its ``--help`` lists what it knows, each spec type's flags and what it has
removed, so the advice follows the version the user runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from specdeck.core import llama_flags
from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.servers.process import ManagedProcess, start_tied
from specdeck.core.units import MiB, format_bytes

HEALTH_TIMEOUT_S = 300.0
"""A large model on a slow disk can take minutes to load."""
STOP_TIMEOUT_S = 10.0

@dataclass(frozen=True)
class HelpInfo:
    """What a llama-server binary says about its flags."""

    flags: frozenset[str]
    removed: dict[str, str]
    """Removed flag -> the binary's own advice ("use --spec-draft-n-max or ...")."""
    spec_types: tuple[str, ...]
    takes_value: frozenset[str]
    methods: tuple[llama_flags.SpecMethod, ...] = ()
    """Each spec type with its flags, k flag and k default (``llama_flags.methods_from_help``)."""
    source: str = "its --help"
    """Where this came from (``llama_flags.FALLBACK_SOURCE`` for the fallback)."""

    @property
    def fallback(self) -> bool:
        return self.source == llama_flags.FALLBACK_SOURCE

    def method(self, name: str | None) -> llama_flags.SpecMethod | None:
        return next((m for m in self.methods if m.name == name), None)

    @property
    def implied_draft(self) -> llama_flags.SpecMethod | None:
        """How this build drafts with ``-md`` alone (no ``--spec-type``), when it does
        (``llama_flags.implied_draft``: llama.cpp before 2026, ik_llama.cpp)."""
        return next((m for m in self.methods if m.implied), None)

    def drafter_of(self, args: tuple[str, ...]) -> llama_flags.SpecMethod | None:
        """The method these flags select in this build: their ``--spec-type``, or a draft
        model alone where this build drafts with one (None: no drafting method)."""
        kind = spec_type(args)
        if kind is not None:
            return self.method(kind)
        if self.implied_draft is not None and flag_value(args, *llama_flags.DRAFT_MODEL):
            return self.implied_draft
        return None

    @property
    def build(self) -> str:
        """Which build's rules these are, in words."""
        return "llama.cpp 11434's rules (SpecDeck's pinned build)" if self.fallback \
            else self.source


@dataclass(frozen=True)
class HelpEntry:
    """One option of a ``--help``: its names, the value it takes ("" for a switch), and its
    description (continuation lines joined)."""

    names: tuple[str, ...]
    value: str
    description: str


_NAMES = re.compile(r"-{1,2}[A-Za-z0-9][\w.-]*(?:,\s*-{1,2}[A-Za-z0-9][\w.-]*)*")
OPTION_INDENT = 16
"""An option line starts within this many blanks; a description's continuation lines are
indented further (mainline pads them to 40, ik_llama.cpp and 2025 builds to 34)."""


def help_entries(text: str) -> list[HelpEntry]:
    """Every option of a llama-server ``--help``, whatever the build's layout: mainline's
    (common/arg.cpp: names at the margin, ``--flag VALUE``, the description padded to column
    40 or on the lines below) and the one of llama.cpp before 2025-01 and of forks such as
    ik_llama.cpp (common/common.cpp ``gpt_params_print_usage``: two blanks, ``-md,   --model-
    draft FNAME`` padded to 32, continuation lines at 34; values such as ``(auto|on|off)`` or
    ``Name [none | ngram - cache | ...]``)."""
    entries: list[tuple[tuple[str, ...], str, list[str]]] = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        indent = len(line) - len(body)
        found = _NAMES.match(body) if indent < OPTION_INDENT else None
        if found and (found.end() == len(body) or body[found.end()] in " \t"):
            names = tuple(n.strip() for n in found.group(0).split(","))
            value, description = _value_and_description(body[found.end():])
            entries.append((names, value, [description] if description else []))
        elif entries and body and indent >= 2:
            entries[-1][2].append(body.strip())
        elif not body.strip() or body.endswith(":") or body.startswith("-----"):
            continue  # a blank line or a group's title ends nothing: continuation lines do
        else:
            entries.append(((), "", []))  # prose: what follows belongs to no option
    return [HelpEntry(n, v, " ".join(d)) for n, v, d in entries if n]


def _value_and_description(rest: str) -> tuple[str, str]:
    """What follows an option's names: its value (up to two blanks outside brackets; a
    single blank joins its words) and the description after it."""
    if not rest or rest.startswith(("  ", "\t")):
        return "", rest.strip()
    depth, i = 0, 1
    while i < len(rest):
        c = rest[i]
        if c in "[({<":
            depth += 1
        elif c in "])}>":
            depth = max(0, depth - 1)
        elif depth == 0 and rest.startswith("  ", i):
            break
        i += 1
    return rest[1:i].strip(), rest[i:].strip()


def spec_types_of(value: str) -> tuple[str, ...]:
    """The ``--spec-type`` values its help lists: mainline's comma list (``none,draft-simple,
    ngram-simple``), or ik_llama.cpp's ``Name [none | ngram - cache | ngram - simple]`` (its
    help writes each dash between blanks). Every value is kept as the help wrote it, names or
    not: which of them may become an argument is decided once, by
    ``llama_flags.name_problem`` (a value that is shell syntax or a flag is then listed as
    not tried, with why)."""
    inside = re.search(r"\[(.*)\]", value)
    if inside:
        parts = [re.sub(r"\s*-\s*", "-", p).strip() for p in inside.group(1).split("|")]
    else:
        parts = [p.strip() for p in value.split(",")]
    return tuple(p for p in parts if p)


def parse_help(text: str, source: str = "its --help") -> HelpInfo:
    """Flags, removed flags, spec types and each type's flags from ``llama-server --help``,
    in any build's layout (:func:`help_entries`)."""
    flags: set[str] = set()
    takes_value: set[str] = set()
    removed: dict[str, str] = {}
    spec_types: tuple[str, ...] = ()
    entries = help_entries(text)
    for entry in entries:
        flags.update(entry.names)
        if entry.value:
            takes_value.update(entry.names)
        if llama_flags.SPEC_TYPE in entry.names and entry.value:
            spec_types = spec_types_of(entry.value)
        if "has been removed" in entry.description:
            advice = entry.description.split("has been removed.", 1)[-1]
            advice = re.sub(r"\(env: [^)]*\)", "", advice).strip()
            for flag in entry.names:
                removed[flag] = advice
    methods = llama_flags.methods_from_help(
        spec_types, [(e.names, e.description) for e in entries])
    return HelpInfo(frozenset(flags), removed, spec_types, frozenset(takes_value), methods,
                    source)


@lru_cache(maxsize=1)
def fallback_help() -> HelpInfo:
    """The spec types and their flags when no binary can be read (``llama_flags.FALLBACK_HELP``:
    never used to judge which flags a binary knows)."""
    return parse_help(llama_flags.FALLBACK_HELP, llama_flags.FALLBACK_SOURCE)


def methods_of(info: HelpInfo | None) -> HelpInfo:
    """``info`` when it lists spec types, else the fallback (which says it is one)."""
    return info if info is not None and info.methods else fallback_help()


HELP_TIMEOUT_S = 30.0
"""How long a binary's --help (or --list-devices) may take: the pinned build answers in well
under a second; a program that does not is not a llama-server that can be read."""
HELP_LIMIT = 4 * MiB
"""The most a --help may print (the pinned build's is 59 KiB)."""


def run_bounded(argv: list[str], timeout: float, limit: int = HELP_LIMIT, *,
                stderr: bool = True) -> tuple[str | None, str]:
    """What ``argv`` prints (stdout, and stderr with it unless ``stderr`` is False; UTF-8)
    and "", or None and what went
    wrong: it could not be run, did not finish within ``timeout`` seconds (a child it left
    behind holding the output counts), printed more than ``limit`` bytes, or not UTF-8 text.
    The one runner of a binary SpecDeck reads (its --help, its --list-devices): whatever it
    does, it ends in ``timeout`` with its whole process group killed, and its output is held
    in at most ``limit`` bytes."""
    import selectors
    import signal
    import time

    try:
        process = start_tied(argv, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT if stderr else subprocess.DEVNULL,
                             stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        return None, f"could not be run ({exc.strerror or exc})"
    data = bytearray()
    problem = ""
    deadline = time.monotonic() + timeout
    stream = process.stdout
    try:
        os.set_blocking(stream.fileno(), False)
        with selectors.DefaultSelector() as waiting:
            waiting.register(stream, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    problem = f"did not finish within {timeout:g} s"
                    break
                if not waiting.select(left):
                    continue
                try:
                    chunk = os.read(stream.fileno(), 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    break  # every writer closed its end
                data += chunk
                if len(data) > limit:
                    problem = f"printed more than {format_bytes(limit)}"
                    break
        if not problem:
            try:
                process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                problem = f"did not finish within {timeout:g} s"
    finally:
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)  # it, and whatever it left running
        stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
    if problem:
        return None, problem
    try:
        return bytes(data).decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return None, (f"printed what is not UTF-8 text (byte {exc.start} is "
                      f"0x{data[exc.start]:02x})")


@lru_cache(maxsize=8)
def _help_read(binary: str, mtime: float) -> tuple[HelpInfo | None, str]:
    text, problem = run_bounded([binary, "--help"], HELP_TIMEOUT_S)
    if text is None:
        return None, f"its --help {problem}"
    info = parse_help(text, f"the --help of {binary}")
    return (info, "") if info.flags else (None, "its --help names no flags")


def _help_cached(binary: str, mtime: float) -> HelpInfo | None:
    return _help_read(binary, mtime)[0]


def binary_help(binary: str | Path) -> HelpInfo | None:
    """The binary's --help, parsed (cached per binary and modification time); None if it
    cannot be run or says nothing recognisable (:func:`help_problem` says which)."""
    return _per_build(_help_cached, binary)


def help_problem(binary: str | Path) -> str:
    """Why :func:`binary_help` is None for ``binary`` ("its --help did not finish within
    30 s", "... printed what is not UTF-8 text", ...); "" when it is not."""
    found = _per_build(_help_read, binary)
    return "it does not exist" if found is None else found[1]


def _per_build(cached, binary: str | Path):
    """``cached(path, mtime)`` for the binary as it is now (a rebuilt binary is asked
    again); None when there is no such file."""
    path = str(binary)
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return cached(path, mtime)


@dataclass(frozen=True)
class Judge:
    """Whose rules a llama-server command line is judged by: the ``--help`` of the binary it
    names, when that can be run here, else SpecDeck's fallback (the pinned build's rules),
    hedged."""

    program: str
    """The binary as the command names it."""
    info: HelpInfo | None
    """Its ``--help``, parsed; None when it cannot be run here."""
    why_not: str = ""
    """Why it cannot be run ("" when it was)."""

    @property
    def hedged(self) -> bool:
        return self.info is None

    @property
    def by(self) -> str:
        """Which build's rules, in words."""
        if self.info is not None:
            return self.info.source
        return (f"{fallback_help().build}, not your build's: {self.program} {self.why_not}; "
                "your build may differ")

    def to_json(self) -> dict:
        return {"program": self.program, "judged_by": self.by, "hedged": self.hedged}


def judge_of(program: str, given: HelpInfo | None = None) -> Judge:
    """The judge of a command that runs ``program``: ``given`` (the binary the user named,
    e.g. ``--llama-server``), else ``program``'s own ``--help`` (a path, ``~`` expanded, or a
    name found on PATH as a shell finds it), cached per path and modification time."""
    if given is not None:
        return Judge(program, given)
    import shutil

    from specdeck.core.userpath import expand_user

    if not program:
        return Judge(program, None, "is not named")
    path = str(expand_user(program)) if "/" in program else shutil.which(program)
    if path is None or not os.path.isfile(path):
        return Judge(program, None, "is not on this machine" if "/" in program
                     else "is not on this machine's PATH")
    if not os.access(path, os.X_OK):
        return Judge(program, None, "is not executable here")
    info = binary_help(path)
    if info is None:
        return Judge(program, None, "did not answer --help as a llama-server does")
    return Judge(program, info)


DEVICE_LINE = re.compile(r"^\s+(\S+):")
"""One device of ``llama-server --list-devices`` (llama.cpp 11434 common/arg.cpp,
``--list-devices``: "Available devices:", then "  NAME: DESCRIPTION (TOTAL MiB, FREE MiB
free)" for every GPU or iGPU backend device, or "  (none)" in a CPU-only build)."""


@lru_cache(maxsize=8)
def _devices_cached(binary: str, mtime: float) -> tuple[str, ...] | None:
    text, _problem = run_bounded([binary, "--list-devices"], HELP_TIMEOUT_S, stderr=False)
    if text is None:
        return None
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("Available devices")),
                 None)
    if start is None:
        return None
    return tuple(match.group(1) for line in lines[start + 1:]
                 if (match := DEVICE_LINE.match(line)) and match.group(1) != "(none)")


def offload_devices(binary: str | Path) -> tuple[str, ...] | None:
    """The devices this llama-server build can hold layers on, as its ``--list-devices``
    names them ("CUDA0", "Vulkan0", ...; none in a CPU-only build); None when the binary
    cannot say (it cannot be run, or predates the flag). Cached per binary and mtime."""
    return _per_build(_devices_cached, binary)


def runs_on_gpu(binary: str | Path, args: tuple[str, ...]) -> bool:
    """Whether a llama-server of ``binary`` launched with ``args`` holds its model on a GPU:
    the one rule for it (what the predictions assume a verify costs, whose free memory the
    servers and drafts must fit in). Its build must list a device to offload to, and the
    flags must not keep every layer off it (``-ngl 0``, ``--device none``); llama-server's
    default is ``-ngl auto``. A binary that cannot list its devices counts as on a GPU when
    NVML sees one, as before this rule."""
    from specdeck.core.vram.gguf import LlamaFlags

    try:
        flags = LlamaFlags.from_args(args)
    except SpecDeckError:
        return False  # the launch itself will refuse these flags, with the reason
    if flags.n_gpu_layers == 0 or [d.lower() for d in flags.devices] == ["none"]:
        return False
    devices = offload_devices(binary)
    if devices is None:
        return bool(_free_memory()[1])
    return bool(devices)


def _flags_in(args: tuple[str, ...]) -> list[str]:
    """The flags of a command line, each named as llama-server matches it
    (``llama_flags.canonical``: ``--api_key`` is ``--api-key``)."""
    return [llama_flags.canonical(a.split("=", 1)[0]) for a in args
            if a.startswith("-") and not _is_number(a)]


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def flash_needs_value(info: HelpInfo | None) -> bool:
    """Whether ``--flash-attn`` takes on/off/auto in this build (by default, as in current
    llama.cpp): in llama.cpp before 2025-09 it was a switch, and a value after it is a stray
    argument."""
    return info is None or "--flash-attn" not in info.flags or "--flash-attn" in info.takes_value


def check_args(args: tuple[str, ...], info: HelpInfo | None) -> None:
    """Refuse a command line that this llama-server would reject or misread, saying what to
    write instead. Raises InvalidInputError with every problem found."""
    problems = problems_of(args, info)
    if problems:
        raise InvalidInputError("This llama-server command line would not work: "
                                + "; ".join(problems) + ".",
                                "Fix these flags; `llama-server --help` lists what your "
                                "build knows.")


def check_launch(args: tuple[str, ...], binary: str | Path) -> str:
    """Refuse (InvalidInputError, :func:`check_args`) a launch of ``binary`` with ``args``
    that its own --help says it would reject. Where that help cannot be read, nothing is
    refused on another build's word: the binary starts and has the last word, and what is
    returned ("" when nothing) says, hedged, what the pinned build's rules would object to,
    for the message of a launch that then fails."""
    info = binary_help(binary)
    if info is not None:
        check_args(args, info)
        return ""
    problems = problems_of(args, None)
    if not problems:
        return ""
    return (f"Its --help could not be read ({help_problem(binary) or 'no answer'}), so its "
            f"flags were not checked; by {fallback_help().build}: {'; '.join(problems)} "
            "(your build may differ).")


def problems_of(args: tuple[str, ...], info: HelpInfo | None) -> list[str]:
    """What this llama-server (``info``: its help; None: current llama.cpp's rules) would
    reject or misread in a command line, each with what to write instead. Flags are named as
    llama-server matches them (``--flash_attn`` is ``--flash-attn``). A flag its help does
    not list is a problem only when it sets up drafting (what SpecDeck writes, and reads from
    that help): a build accepts flags its help leaves out (ik_llama.cpp's ``-ngl`` on a CPU
    build), so any other is left to the binary and named by :func:`unlisted_flags`."""
    problems: list[str] = []
    args = llama_flags.canonical_argv(args)
    flags = _flags_in(args)
    removed = info.removed if info is not None else llama_flags.REMOVED
    for flag in flags:
        if flag in removed:
            advice = removed[flag]
            advice = advice if advice.startswith("use ") else f"use {advice}"
            problems.append(f"{flag} was removed from llama-server: {advice}")
    problems += [f"this llama-server does not know {flag}"
                 for flag in unknown_drafting_flags(args, info)]
    for i, arg in enumerate(args):
        if arg == llama_flags.SPEC_TYPE and i + 1 < len(args) and info is not None and info.spec_types:
            unknown = [t for t in args[i + 1].split(",") if t not in info.spec_types]
            if unknown:
                problems.append(f"--spec-type {args[i + 1]}: this llama-server knows "
                                f"{', '.join(info.spec_types)}")
        if arg in llama_flags.FLASH and flash_needs_value(info) and (
                i + 1 >= len(args) or args[i + 1] not in llama_flags.FLASH_VALUES):
            problems.append(f"{arg} needs a value in current llama.cpp: {arg} on (or off, auto)")
    if problems and any(f in llama_flags.DRAFT_MODEL for f in flags) \
            and llama_flags.SPEC_TYPE not in flags \
            and (info is None or info.implied_draft is None):
        # Alone it starts (and is said not to draft: core.servers.probe); with a fix to make
        # anyway, the whole fix is named at once.
        problems.append("a draft model (-md) without --spec-type drafts only if llama-server "
                        "infers a type from its GGUF: add --spec-type draft-simple")
    return problems


def unknown_drafting_flags(args: tuple[str, ...], info: HelpInfo | None) -> list[str]:
    """The drafting flags of a command line that ``info`` (a binary's help) does not list
    and has not removed: llama-server refuses them at its start, and SpecDeck reads what
    drafting flags a build takes from its help, so these are refused, never passed on."""
    if info is None:
        return []
    removed = set(info.removed)
    return list(dict.fromkeys(f for f in _flags_in(llama_flags.canonical_argv(args))
                              if f not in info.flags and f not in removed
                              and llama_flags.is_drafting_flag(f)))


def unlisted_flags(args: tuple[str, ...], info: HelpInfo | None) -> list[str]:
    """The flags of a command line that ``info`` (a binary's help) does not list and that
    :func:`problems_of` leaves to the binary (none of them sets up drafting): a build may
    take flags its help omits (ik_llama.cpp's CPU build lists no ``-ngl`` and takes it), so
    they are said with a hedge, never refused."""
    if info is None:
        return []
    removed = set(info.removed)
    return list(dict.fromkeys(f for f in _flags_in(args) if f not in info.flags
                              and f not in removed and not llama_flags.is_drafting_flag(f)))


def unlisted_note(args: tuple[str, ...], info: HelpInfo | None) -> str:
    """:func:`unlisted_flags` in words ("": none), for whoever shows a command line's check."""
    found = unlisted_flags(args, info)
    if not found:
        return ""
    return (f"{', '.join(found)} {'is' if len(found) == 1 else 'are'} not in {info.source}; "
            "a build can take flags its help leaves out, so SpecDeck passes "
            f"{'it' if len(found) == 1 else 'them'} on (llama-server refuses at its start "
            "what it does not know, and its log says so)")


def shown_command(argv: list[str]) -> str:
    """The command line as it may be shown: secrets masked (core.urls.shown_args)."""
    from specdeck.core.urls import shown_args

    return shlex.join(shown_args(argv))


@dataclass(frozen=True)
class LaunchProfile:
    """How to start one arm's llama-server."""

    binary: str
    model: str
    """The target GGUF (-m)."""
    args: tuple[str, ...] = ()
    """This arm's flags: --spec-type, -md, --spec-draft-n-max, devices, threads, ..."""
    host: str = "127.0.0.1"
    port: int = 0
    """0 = a free port."""

    def argv(self, port: int) -> list[str]:
        return [self.binary, llama_flags.TARGET_MODEL[0], self.model, llama_flags.HOST,
                self.host, llama_flags.PORT, str(port), llama_flags.METRICS, *self.args]

    def api_key(self) -> str | None:
        """The key this server is launched with (its first ``--api-key``: llama-server takes
        a comma list; else the first line of its ``--api-key-file``, which llama-server reads
        a key a line), which every request to it must carry; None when it takes none."""
        value = flag_value(tuple(self.args), llama_flags.API_KEY)
        if value:
            return value.split(",")[0].strip() or None
        path = flag_value(tuple(self.args), llama_flags.API_KEY_FILE)
        if not path:
            return None
        from specdeck.core.files import KEY_FILE, read_bounded

        try:  # a FIFO is not waited on, nor /dev/zero read without end
            lines = read_bounded(path, "API key file", KEY_FILE).decode(
                "utf-8", errors="replace").split("\n")
        except SpecDeckError:
            return None  # llama-server refuses to start then, and says why
        return next((line for line in lines if line), None)

    def to_json(self) -> dict:
        """As saved in plans and run files: secrets masked (core.urls.shown_args); a plan
        read back from one launches without them."""
        from specdeck.core.urls import shown_args

        return {"binary": self.binary, "model": self.model, "args": list(shown_args(self.args)),
                "host": self.host, "port": self.port}

    @classmethod
    def from_json(cls, data: dict) -> LaunchProfile:
        return cls(str(data["binary"]), str(data["model"]),
                   tuple(str(a) for a in data.get("args", ())),
                   str(data.get("host", "127.0.0.1")), int(data.get("port", 0)))


SERVER_OVERHEAD = 512 * MiB
"""Beyond its weights, what one llama-server holds when its GGUF files cannot be read for a
better figure (:func:`launch_bytes`): KV cache and compute buffers, a rough allowance."""


def launch_bytes(launch: LaunchProfile) -> int:
    """What one llama-server of ``launch`` holds: by the GGUF plan (core.vram.gguf) its target's
    and its -md draft's weights and KV cache at the launch's context and cache types, and the
    compute buffers' allowance (a GPU's CUDA context comes on top: :func:`servers_that_fit`).
    Files that cannot be read: their sizes and ``SERVER_OVERHEAD``."""
    from specdeck.core.llama_flags import DRAFT_MODEL
    from specdeck.core.vram.gguf import DEFAULT_RESERVE_MB, LlamaFlags, plan_gguf, read_gguf_model

    draft = flag_value(tuple(launch.args), *DRAFT_MODEL)
    try:
        models = [read_gguf_model(launch.model), read_gguf_model(draft) if draft else None]
        plan = plan_gguf(models[0], models[1], LlamaFlags.from_args(launch.args), gpus=())
        return plan.host_bytes + DEFAULT_RESERVE_MB * MiB  # sizes, not where they go
    except (SpecDeckError, OSError, ValueError):
        try:
            return sum(Path(f).stat().st_size for f in (launch.model, draft) if f) + SERVER_OVERHEAD
        except OSError:
            return SERVER_OVERHEAD


def servers_that_fit(server_bytes: int, on_gpu: bool | None = None) -> int:
    """How many servers of this size (:func:`launch_bytes`) to keep up at once while switching
    arms: as many as fit in nine tenths of the free memory they would use (the GPUs' when
    they run on one, :func:`runs_on_gpu`, each server then holding a CUDA context and
    cuBLAS's state too, core.vram.costs; else the machine's), at least 1 (then every switch
    restarts: slower, never out of memory). ``on_gpu`` None: on the GPUs when NVML sees any."""
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS, is_hopper

    free, gpus = _free_memory(on_gpu)
    if gpus:
        o = DEFAULT_OVERHEADS
        hopper = any(is_hopper(g.name or "") for g in gpus)
        server_bytes += (o.cuda_context_hopper if hopper else o.cuda_context) + o.cublas_handle
    return max(1, int(0.9 * free // max(server_bytes, 1)))


def free_memory(on_gpu: bool | None = None) -> int:
    """The memory llama-servers would load into, free now: the GPUs' when they run on one
    (:func:`runs_on_gpu`; None: when NVML sees any), else the machine's available RAM."""
    return _free_memory(on_gpu)[0]


def _free_memory(on_gpu: bool | None = None) -> tuple[int, tuple]:
    """:func:`free_memory` and the GPUs NVML sees (empty: the machine's RAM), in one read. On
    a GPU that NVML cannot see (another vendor's), the machine's RAM: the only figure there."""
    import psutil
    from specdeck.core.gpu import read_once

    frame = read_once() if on_gpu is not False else None
    if frame is not None and frame.has_gpus:
        return sum(g.memory_free or 0 for g in frame.gpus), tuple(frame.gpus)
    return psutil.virtual_memory().available, ()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class ManagedServer(ManagedProcess):
    """One running llama-server that SpecDeck started; ``stop()`` ends it."""

    profile: LaunchProfile
    log_path: Path
    process: subprocess.Popen | None = None
    url: str = ""
    _log: object = field(default=None, repr=False)
    name = "llama-server"
    stop_timeout_s = STOP_TIMEOUT_S

    def start(self, cancel: threading.Event | None = None,
              timeout: float = HEALTH_TIMEOUT_S) -> str:
        profile = self.profile
        if not Path(profile.binary).is_file() or not os.access(profile.binary, os.X_OK):
            raise NotFoundError(f"{profile.binary} is not an executable llama-server.",
                                "Give the path of your llama-server binary (--llama-server).")
        if not Path(profile.model).is_file():
            raise NotFoundError(f"The model {profile.model} does not exist.",
                                "Give the path of a .gguf file.")
        hedge = check_launch(tuple(profile.args), profile.binary)
        port = profile.port or free_port(profile.host)
        argv = profile.argv(port)
        self._spawn(argv)
        self.url = f"http://{profile.host}:{port}"
        try:
            self._wait_healthy([self.url],
                               lambda h: isinstance(h, dict) and h.get("status") == "ok",
                               timeout, cancel, 0.1,
                               f"Command: {shown_command(argv)}. Its whole log: {self.log_path}."
                               + (f" {hedge}" if hedge else ""))
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        self._end()

    def log_tail(self, lines: int = 3) -> str:
        """The log's last lines, with the secrets of its command line masked (a server may
        echo them)."""
        from specdeck.core.urls import args_secrets, mask_secrets

        return mask_secrets(super().log_tail(lines), args_secrets(self.profile.args))


def flag_value(args: tuple[str, ...], *names: str) -> str | None:
    """The value of the last of ``names`` in ``args`` ("--flag value" or "--flag=value"),
    any spelling llama-server matches (``--api_key`` is ``--api-key``)."""
    found = None
    wanted = {llama_flags.canonical(n) for n in names}
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if llama_flags.canonical(name) in wanted:
            found = value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return found


def with_flag(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """``args`` with ``flag`` set to ``value`` (replaced where present, else appended)."""
    out: list[str] = []
    skip = False
    replaced = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name, eq, _ = arg.partition("=")
        if llama_flags.canonical(name) == llama_flags.canonical(flag):
            out.extend([flag, value])
            replaced = True
            skip = not eq
            continue
        out.append(arg)
    if not replaced:
        out.extend([flag, value])
    return tuple(out)


def spec_types_given(args: tuple[str, ...]) -> list[str]:
    """Every --spec-type given, in the order of its comma list; [] for none."""
    value = flag_value(args, llama_flags.SPEC_TYPE)
    return [t.strip() for t in value.split(",") if t.strip()] if value else []


def spec_type(args: tuple[str, ...]) -> str | None:
    """The first --spec-type given (llama-server tries them in order), or None."""
    value = flag_value(args, llama_flags.SPEC_TYPE)
    if not value:
        return None
    first = value.split(",")[0].strip()
    return None if first == llama_flags.SPEC_NONE else first


def remembers(args: tuple[str, ...]) -> str:
    """How a llama-server with these flags drafts from earlier requests' text (any of its
    --spec-type values in ``llama_flags.REMEMBERS_ACROSS_REQUESTS``); "" when it does not."""
    value = flag_value(args, llama_flags.SPEC_TYPE) or ""
    return next((f"{kind}: {why}" for kind in (v.strip() for v in value.split(","))
                 if (why := llama_flags.REMEMBERS_ACROSS_REQUESTS.get(kind))), "")


def k_flag(args: tuple[str, ...], info: HelpInfo | None = None) -> str | None:
    """The flag that sets k for these flags' --spec-type, as ``info`` (a binary's help; by
    default the fallback) says."""
    method = methods_of(info).drafter_of(args)
    return method.k_flag if method else None


def drafting_flags(args: tuple[str, ...]) -> tuple[str, ...]:
    """Only the flags (with their values) that set up drafting: what makes arms of one model
    differ. A router's child command line also carries --host, --port, --model, ..."""
    out: list[str] = []
    keep_value = False
    for arg in args:
        if keep_value and not arg.startswith("-"):
            out.append(arg)
            keep_value = False
            continue
        keep_value = False
        name = llama_flags.canonical(arg.partition("=")[0])
        if not name.startswith("-"):
            continue  # another flag's value (--alias draft)
        if llama_flags.is_drafting_flag(name):
            out.append(arg)
            keep_value = "=" not in arg
    return tuple(out)


def drafter_from_flags(args: tuple[str, ...], info: HelpInfo | None = None):
    """The DrafterSpec a llama-server with these flags amounts to (for labels and theory;
    ``info``: its binary's help, by default the fallback). Without --spec-type that is no
    drafting (a draft GGUF that llama-server infers a type from aside:
    ``core.servers.probe.launched_drafting`` tells)."""
    from specdeck.core.draft_kind import DRAFT_MODEL, NGRAM, draft_kind
    from specdeck.core.engines.base import (
        MAX_SERVER_DRAFT_TOKENS,
        NO_DRAFT,
        DrafterKind,
        DrafterSpec,
    )

    model = flag_value(args, *llama_flags.DRAFT_MODEL)
    method = methods_of(info).drafter_of(args)
    kind = method.name if method is not None and method.implied else spec_type(args)
    if kind is None:
        return NO_DRAFT
    flag = method.k_flag if method else None
    raw = flag_value(args, flag) if flag else None
    default = method.k_default if method and method.k_default is not None \
        else llama_flags.K_UNSAID
    try:
        k = int(raw) if raw is not None else default
    except ValueError:
        k = default
    k = max(1, min(k, MAX_SERVER_DRAFT_TOKENS))
    fields = dict(num_draft_tokens=k, adaptive=False, server_type=kind,
                  k_from_server=method is not None and flag is None)
    drafts_with = draft_kind(kind, bool(model))
    if drafts_with == DRAFT_MODEL and model:
        return DrafterSpec(DrafterKind.MODEL, Path(model), **fields)
    if drafts_with == NGRAM:
        return DrafterSpec(DrafterKind.NGRAM, **fields)
    return DrafterSpec(DrafterKind.SERVER, **fields)  # MTP, or a draft the server names


# Grid sweeps over llama-server flags ----------------------------------------------------------
@dataclass(frozen=True)
class SweepAxis:
    """One flag and the values a grid tries for it."""

    flag: str
    values: tuple[str, ...]

    def short(self, info: HelpInfo | None = None) -> str:
        """The flag as the table's column of settings shows it: --spec-draft-p-min -> p-min,
        its spec type or family taken off as ``info`` (the binary's help) names them."""
        name = self.flag.lstrip("-")
        methods = methods_of(info).methods
        names = [m.name for m in methods] + [m.family for m in methods]
        prefix = max((f"spec-{n}-" for n in names if name.startswith(f"spec-{n}-")), key=len,
                     default="spec-")
        return name.removeprefix(prefix)


def parse_axis(text: str) -> SweepAxis:
    """"spec-draft-p-min=0.5,0.75" (dashes optional, as in llama-server's presets) or
    "spec-draft-n-min=0-2" (a whole-number range)."""
    name, eq, raw = text.partition("=")
    name = name.strip()
    if not eq or not name or not raw.strip():
        raise InvalidInputError(f"--sweep {text!r}: write FLAG=VALUES, e.g. "
                                "spec-draft-p-min=0.5,0.75 or spec-draft-n-max=4-16.")
    flag = name if name.startswith("-") else f"--{name}"
    values: list[str] = []
    for part in (p.strip() for p in raw.split(",")):
        low, dash, high = part.partition("-")
        if dash and low.isdigit() and high.isdigit():
            if int(high) < int(low) or int(high) - int(low) > 64:
                raise InvalidInputError(f"--sweep {text!r}: the range {part} is empty or over "
                                        "65 values.")
            values.extend(str(v) for v in range(int(low), int(high) + 1))
        elif part:
            values.append(part)
    if not values:
        raise InvalidInputError(f"--sweep {text!r} gives no values.")
    return SweepAxis(flag, tuple(dict.fromkeys(values)))


def flag_applies(flag: str, kind: str | None, info: HelpInfo | None = None) -> bool:
    """Whether a flag changes anything for a --spec-type, as the binary's help groups its
    flags (a draft-model flag means nothing to an n-gram arm, so a grid does not multiply its
    cells by it); a flag no spec type owns applies to every arm."""
    methods = methods_of(info)
    if not any(flag in m.flags for m in methods.methods):
        return True
    method = methods.method(kind)
    return method is not None and flag in method.flags


def grid_cells(families: list[tuple[str, LaunchProfile]], axes: list[SweepAxis],
               ks: tuple[int, ...] = ()):
    """Every combination of the axes' values (and of k, through each family's own k flag)
    for each drafting family, as grid cells named FAMILY1, FAMILY2, ..."""
    import itertools

    from specdeck.core.bench.grid import Cell
    from specdeck.core.bench.plan import Arm

    cells = []
    helps = {binary: binary_help(binary) for binary in {p.binary for _, p in families}}
    for name, profile in families:
        kind = spec_type(profile.args)
        info = helps[profile.binary]
        own_axes = []
        if ks:
            flag = k_flag(profile.args, info)
            if flag is None:
                known = [m.name for m in methods_of(info).methods if m.k_flag]
                what = (f"--spec-type {kind} has no flag that sets its draft length in "
                        f"{methods_of(info).source}" if kind else "no --spec-type")
                raise InvalidInputError(f"Arm {name} has {what}: no k to sweep.",
                                        f"Use a spec type with one: {', '.join(known)}.")
            own_axes.append((SweepAxis(flag, tuple(str(k) for k in ks)), "k"))
        own_axes += [(a, a.short(info)) for a in axes if flag_applies(a.flag, kind, info)]
        if not own_axes:
            cells.append(Cell(Arm(name, drafter_from_flags(profile.args, info),
                                  _server_arm(profile)), name))
            continue
        combos = list(itertools.product(*(axis.values for axis, _ in own_axes)))
        for i, combo in enumerate(combos, start=1):
            args = profile.args
            for (axis, _), value in zip(own_axes, combo):
                args = with_flag(args, axis.flag, value)
            launch = LaunchProfile(profile.binary, profile.model, args)
            settings = tuple((short, value) for (_, short), value in zip(own_axes, combo))
            label = f"{name} " + " ".join(f"{s}={v}" for s, v in settings)
            cells.append(Cell(Arm(f"{name}{i}", drafter_from_flags(args, info),
                                  _server_arm(launch)), label, settings))
    for axis in axes:
        if not any(flag_applies(axis.flag, spec_type(p.args), helps[p.binary])
                   for _, p in families):
            kinds = ", ".join(sorted({spec_type(p.args) or llama_flags.SPEC_NONE for _, p in families}))
            raise InvalidInputError(f"--sweep {axis.flag} changes nothing for the drafting arms' "
                                    f"spec types ({kinds}).",
                                    "Sweep a flag of their --spec-type, or add an arm that uses it.")
    return cells


def _server_arm(launch: LaunchProfile):
    from specdeck.core.servers.arms import ServerArm

    return ServerArm(launch=launch)
