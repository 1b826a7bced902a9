"""Packaging: the wheel installs as one import name; the PyInstaller app builds and runs."""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest
from conftest import REPO_ROOT, TABBY

pytestmark = [pytest.mark.packaging, pytest.mark.slow]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO_ROOT)],
        check=True, capture_output=True, timeout=300,
    )
    (found,) = out.glob("specdeck-*.whl")
    return found


def test_wheel_has_only_the_specdeck_top_level(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.startswith("specdeck-")}
    assert top == {"specdeck"}
    assert "specdeck/core/config/schema.py" in names
    assert "specdeck/resources/icons/specdeck.svg" in names
    assert not any(n.startswith(("core/", "gui/", "tests/", "bench/", "tools/")) for n in names)


def test_wheel_imports_as_specdeck_in_a_fresh_venv(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    code = (
        "import importlib.util, specdeck, specdeck.core, specdeck.gui, specdeck.resources\n"
        "assert all(importlib.util.find_spec(n) is None for n in ('core', 'gui', 'resources'))\n"
        "print(specdeck.__file__)\n"
    )
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert str(env_dir) in result.stdout
    # The console script works with nothing but the standard library: every CLI command
    # module keeps its heavy imports inside its handlers.
    version = subprocess.run([str(env_dir / "bin" / "specdeck"), "--version"],
                             capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip().startswith("specdeck ")


def test_desktop_entry_is_well_formed():
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str
    parser.read(REPO_ROOT / "packaging" / "specdeck.desktop")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Exec"] == "specdeck" and entry["Icon"] == "specdeck"
    assert entry["Categories"].endswith(";")
    assert (REPO_ROOT / "packaging" / "specdeck.svg").read_text().startswith("<svg")


def test_pyinstaller_app_builds_and_runs(tmp_path):
    pytest.importorskip("PyInstaller", reason="the 'package' extra is not installed")
    dist, work = tmp_path / "dist", tmp_path / "work"
    build = subprocess.run(
        [sys.executable, "-m", "PyInstaller", "--noconfirm", "--distpath", str(dist),
         "--workpath", str(work), str(REPO_ROOT / "packaging" / "specdeck.spec")],
        capture_output=True, text=True, timeout=900,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    app = dist / "specdeck" / "specdeck"
    env = dict(os.environ, SPECDECK_HOME=str(tmp_path / "home"), QT_QPA_PLATFORM="offscreen")
    version = subprocess.run([str(app), "--version"], capture_output=True, text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("specdeck ")
    shown = subprocess.run([str(app), "config", "show", "--json", "--config",
                            str(TABBY / "config_sample.exl2-checkpoint.yml")],
                           capture_output=True, text=True, env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert '"layout": "draft_model"' in shown.stdout
    probe = tmp_path / "painted"
    gui = subprocess.run([str(app)], capture_output=True, text=True, timeout=120,
                         env=dict(env, SPECDECK_STARTUP_PROBE=str(probe)))
    assert gui.returncode == 0, gui.stderr[-2000:]
    assert float(probe.read_text()) > 0
