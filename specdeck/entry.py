"""The `specdeck` command: no arguments opens the app, anything else is a CLI command.

This module imports neither Qt nor the CLI's commands until it knows which one it needs,
so `specdeck --version` and the GUI's cold start both stay fast.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--cuda-device-probe"]:  # core.gpu.cuda_order.PROBE_FLAG, in a child process
        from specdeck.core.gpu.cuda_order import print_driver_bus_ids

        return print_driver_bus_ids()
    if not args or args[0] == "gui":
        if any(a in ("-h", "--help") for a in args[1:]):
            print(GUI_USAGE)
            return 0
        return _open_gui(args[1:])
    from specdeck.core.cli import main as cli_main

    return cli_main(args, open_gui=_open_gui)


GUI_USAGE = """usage: specdeck [gui] [Qt options]

Opens the SpecDeck desktop app (Qt options such as -platform pass through to Qt).
`specdeck --help` lists the command-line commands."""


def no_display(qt_args: Sequence[str] = ()) -> str | None:
    """Why the app cannot open a window here, or None. On Linux without DISPLAY or
    WAYLAND_DISPLAY (an ssh session, a container) Qt aborts the process, core dump and all,
    with a hint about a missing xcb library that is not the cause."""
    import os

    if not sys.platform.startswith("linux") or os.environ.get("QT_QPA_PLATFORM") \
            or "-platform" in qt_args:
        return None
    if os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"):
        return None
    return ("specdeck: error: no display to open the app on (neither DISPLAY nor "
            "WAYLAND_DISPLAY is set). Run it in a desktop session or over `ssh -X`; every "
            "page's work is also a command: `specdeck --help`.")


def _open_gui(qt_args: Sequence[str] = ()) -> int:
    problem = no_display(qt_args)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from specdeck.gui.app import run_gui

    return run_gui(list(qt_args))
