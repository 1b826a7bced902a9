"""`specdeck <command>`: the same core as the app, headless, with JSON output.

Every module in this package whose name ends in ``_cmd`` contributes commands through a
``register(subparsers)`` function; each command's handler takes the parsed arguments and
returns an exit code. Command modules import heavy libraries inside their handlers only.

Exit codes: 0 success, 1 a negative answer the command was asked for (e.g. an
incompatible pair), 2 an error (printed on one line to stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Callable, Sequence

from specdeck.core.errors import CancelledError, SpecDeckError

from specdeck import SUMMARY, __version__

EXIT_OK = 0
EXIT_NEGATIVE = 1
EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE, as `yes | head` leaves `yes`: the reader closed the pipe first."""


def _command_modules():
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda i: i.name):
        if info.name.endswith("_cmd"):
            yield importlib.import_module(f"{__name__}.{info.name}")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line (what is wrong, where to read more), not a
    usage block; subcommands inherit it. It starts as every other error does ("specdeck:
    error: "), so that one pattern finds them all; the help it points to is the command's."""

    def error(self, message: str):
        self.exit(EXIT_ERROR, f"specdeck: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="specdeck",
        description=(
            f"SpecDeck: {SUMMARY[0].lower()}{SUMMARY[1:]}. "
            "Run without arguments to open the desktop app."
        ),
    )
    parser.add_argument("--version", action="version", version=f"specdeck {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    gui = subparsers.add_parser("gui", help="open the desktop app (the default)")
    gui.set_defaults(handler=None)
    for module in _command_modules():
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, open_gui: Callable[[], int] | None = None) -> int:
    """Run one command; ``open_gui`` opens the desktop app for ``specdeck gui`` (core never
    imports Qt: the ``specdeck`` entry point passes it)."""
    # Names, paths and server messages come from files and servers SpecDeck does not control:
    # whatever the CLI prints has its control characters escaped (an ESC in a model name must
    # not clear the user's screen).
    from specdeck.core.printable import SafeTextStream

    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeTextStream(sys.stdout), SafeTextStream(sys.stderr)
    try:
        code = _run(argv, open_gui)
        sys.stdout.flush()  # a closed pipe shows here, not in Python's flush at exit
        return code
    except BrokenPipeError:
        # `specdeck check ... | head`: the reader has what it wanted and closed the pipe. No
        # traceback, and none at exit when Python flushes stdout: it goes to /dev/null.
        import os

        sys.stdout, sys.stderr = streams
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    finally:
        sys.stdout, sys.stderr = streams


def _run(argv: Sequence[str] | None, open_gui: Callable[[], int] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    from specdeck.core.urls import redact_log_records

    redact_log_records()
    handler = getattr(args, "handler", None)
    if handler is None:
        if args.command == "gui" and open_gui is not None:
            return open_gui()
        parser.print_help()
        return EXIT_ERROR
    try:
        return int(handler(args) or 0)
    except CancelledError as exc:
        # Ctrl-C reached a step that stops by raising (a download, a check, a run before
        # its first result): the same exit as a command that stopped between steps.
        print(f"specdeck: interrupted: {exc.what}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SpecDeckError as exc:
        from specdeck.core.urls import redact_text

        print(f"specdeck: error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("specdeck: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
