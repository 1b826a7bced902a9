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
        from specdeck.gui.app import run_gui

        return run_gui(args[1:])
    from specdeck.core.cli import main as cli_main

    return cli_main(args, open_gui=_open_gui)


def _open_gui() -> int:
    from specdeck.gui.app import run_gui

    return run_gui([])
