"""The shape of the project: one import name, fast entry points, lazy heavy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdeck import __version__

REPO = Path(__file__).resolve().parents[1]


def run_specdeck(*args: str, timeout: float = 60, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "specdeck", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_version_from_python_m():
    result = run_specdeck("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"specdeck {__version__}"


def test_help_lists_commands():
    result = run_specdeck("--help")
    assert result.returncode == 0
    assert "gui" in result.stdout
    assert "config" in result.stdout


def test_unknown_command_fails_cleanly():
    result = run_specdeck("no-such-command")
    assert result.returncode != 0
    assert "invalid choice" in result.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="DISPLAY is X11/Wayland's")
@pytest.mark.parametrize("args", [(), ("gui",)])
def test_without_a_display_the_app_says_so_instead_of_aborting(args):
    """Over ssh, `make run` had Qt abort the process (core dump, exit 134) with a hint about
    a missing xcb library; it is the display that is missing."""
    import os

    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    result = run_specdeck(*args, env=env)
    assert result.returncode == 2
    assert "no display to open the app on" in result.stderr
    assert "specdeck --help" in result.stderr


def test_gui_help_prints_help_and_opens_nothing():
    """`specdeck gui --help` opened the app (Qt took --help as its own)."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    result = run_specdeck("gui", "--help", env={**env, "QT_QPA_PLATFORM": "offscreen"},
                          timeout=20)
    assert result.returncode == 0
    assert result.stdout.startswith("usage: specdeck [gui]")


def test_cli_start_imports_no_heavy_modules():
    """Listing commands must never import torch, exllamav2, Qt, or initialise NVML."""
    code = (
        "import sys, json\n"
        "from specdeck.core.cli import build_parser\n"
        "build_parser()\n"
        "heavy = [m for m in ('torch', 'exllamav2', 'transformers', 'PySide6', 'pynvml',"
        " 'pyqtgraph', 'huggingface_hub') if m in sys.modules]\n"
        "print(json.dumps(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


def test_core_never_imports_qt():
    """core/ is pure Python: importing every core module leaves Qt unloaded."""
    code = (
        "import sys, pkgutil, importlib, json\n"
        "import specdeck.core as core\n"
        "for info in pkgutil.walk_packages(core.__path__, 'specdeck.core.'):\n"
        "    try:\n"
        "        importlib.import_module(info.name)\n"
        "    except ImportError as exc:\n"
        "        if 'exllamav2' not in str(exc): raise\n"
        "print(json.dumps([m for m in sys.modules if m.startswith(('PySide6', 'pyqtgraph'))]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []


QT_MODULES = ("PySide6", "shiboken6", "pyqtgraph", "specdeck.gui", "gui")


def test_no_core_module_imports_qt_anywhere_in_its_code():
    """Not even inside a function, where importing every module (above) cannot see it."""
    import ast

    offenders = []
    for path in sorted((REPO / "core").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if any(name == m or name.startswith(m + ".") for m in QT_MODULES):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {name}")
    assert offenders == []


def test_no_generic_top_level_packages_installed():
    """The install maps core/, gui/ and resources/ under ``specdeck.`` only. Asked from a
    Python that sees what is installed and not the checkout (-I: no current folder, no
    PYTHONPATH), as a user's would; the checkout's own folder may be named anything."""
    import subprocess
    import sys

    probe = ("import importlib.util, json; print(json.dumps({n: getattr(importlib.util."
             "find_spec(n), 'origin', None) for n in ('core', 'gui', 'resources', "
             "'specdeck.core')}))")
    done = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True,
                          cwd="/", check=True, timeout=60)
    found = json.loads(done.stdout)
    assert found["specdeck.core"]  # the probe sees the install
    assert {n: o for n, o in found.items() if n != "specdeck.core" and o} == {}


def test_resources_path_points_at_real_files():
    from specdeck.resources import path

    icon = path("icons", "specdeck.svg")
    assert icon.is_file()
    assert icon.read_text().startswith("<svg")


@pytest.mark.parametrize("module", ["specdeck.core", "specdeck.gui", "specdeck.resources"])
def test_subpackages_import(module):
    __import__(module)
