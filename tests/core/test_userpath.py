"""A path with ``~user`` for a user that does not exist is a missing folder, shown as
written, never a crash (Path.expanduser raises RuntimeError for it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TABBY
from specdeck.core.config import ConfigDocument
from specdeck.core.userpath import expand_user


def test_unknown_users_stay_as_written():
    assert expand_user("~0") == Path("~0")
    assert expand_user("~nosuchuser/models") == Path("~nosuchuser/models")
    assert expand_user("~/models") == Path.home() / "models"
    assert expand_user(Path("/abs/~0")) == Path("/abs/~0")


def test_a_config_with_an_unknown_users_folder_resolves_to_a_missing_folder(tmp_path):
    text = (TABBY / "config_sample.exl2-checkpoint.yml").read_text()
    text = text.replace("  model_dir: models", "  model_dir: ~0", 1)
    text = text.replace("  model_name:", "  model_name: m #", 1)
    config = tmp_path / "config.yml"
    config.write_text(text)
    doc = ConfigDocument(text, path=config)
    assert doc.target_model_path() == tmp_path / "~0" / "m"  # TabbyAPI: relative to its folder
    assert not doc.target_model_path().exists()


@pytest.mark.parametrize("args", [
    ["check", "~0/target", "~0/draft"],
    ["vram", "--model", "~nosuchuser/model"],
    ["bench", "--model", "~0/model", "--ngram"],
    ["swap", "show", "--config", "~0/config.yaml"],
    ["config", "show", "--config", "~nosuchuser/config.yml"],
])
def test_commands_report_such_a_path_as_missing(args, specdeck_home):
    done = subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, timeout=120,
                          env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "RuntimeError" not in done.stderr
    assert "~" in done.stderr and ("does not exist" in done.stderr or "not found" in done.stderr)
