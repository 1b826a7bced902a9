"""`specdeck config ...` as a user runs it: a real process, real files, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import TABBY


def specdeck(*args: str, home, stdin: str | None = None):
    env = dict(os.environ, SPECDECK_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, env=env, input=stdin, timeout=60)


@pytest.fixture
def cfg(tmp_path):
    path = tmp_path / "config.yml"
    path.write_bytes((TABBY / "config_sample.exl2-checkpoint.yml").read_bytes())
    return path


def test_show_json_has_every_draft_key(cfg, specdeck_home):
    result = specdeck("config", "show", "--config", str(cfg), "--json", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["layout"] == "draft_model"
    assert set(info["draft_model"]) >= {"draft_model_dir", "draft_model_name", "draft_rope_alpha",
                                        "draft_cache_mode", "draft_gpu_split", "draft_num_tokens"}
    assert info["draft_model"]["draft_cache_mode"]["value"] == "FP16"
    assert info["draft_model"]["draft_num_tokens"]["backends"] == ["exllamav3"]


def test_set_draft_saves_and_an_explicit_config_is_not_remembered(cfg, specdeck_home):
    before = cfg.read_text()
    result = specdeck("config", "set-draft", "--config", str(cfg), "--name", "TinyLlama-exl2",
                      "--cache-mode", "q4", "--rope-alpha", "auto", "--gpu-split", "8,0", "--yes",
                      home=specdeck_home)
    assert result.returncode == 0, result.stderr
    assert "+  draft_model_name: TinyLlama-exl2" in result.stdout
    assert f"Saved {cfg}" in result.stdout
    assert (cfg.parent / "config.yml.bak").read_text() == before
    # A script's --config is not what the GUI should open next time.
    assert not (specdeck_home / "config" / "settings.json").exists() or \
        str(cfg) not in (specdeck_home / "config" / "settings.json").read_text()
    unremembered = specdeck("config", "show", "--json", home=specdeck_home)
    assert unremembered.returncode == 2 and "--config" in unremembered.stderr
    shown = json.loads(specdeck("config", "show", "--config", str(cfg), "--json",
                                home=specdeck_home).stdout)
    assert shown["draft_model"]["draft_model_name"]["value"] == "TinyLlama-exl2"
    assert shown["draft_model"]["draft_gpu_split"]["value"] == [8.0, 0.0]
    assert shown["draft_model"]["draft_rope_alpha"]["value"] is None


def test_remember_flag_makes_it_the_default(cfg, specdeck_home):
    result = specdeck("config", "show", "--config", str(cfg), "--remember", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    shown = json.loads(specdeck("config", "show", "--json", home=specdeck_home).stdout)
    assert shown["path"] == str(cfg)


def test_a_vanished_remembered_config_does_not_trouble_other_commands(cfg, specdeck_home):
    specdeck("config", "show", "--config", str(cfg), "--remember", home=specdeck_home)
    cfg.unlink()
    result = specdeck("suggest", str(cfg.parent), "--no-hub", "--json", home=specdeck_home)
    assert str(cfg) not in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_concurrent_set_draft_runs_never_lose_an_edit(cfg, specdeck_home):
    """Two scripts setting different keys of one file at once: both edits end up in it."""
    env = dict(os.environ, SPECDECK_HOME=str(specdeck_home))
    for trial in range(3):
        cfg.write_bytes((TABBY / "config_sample.exl2-checkpoint.yml").read_bytes())
        runs = [
            subprocess.Popen([sys.executable, "-m", "specdeck", "config", "set-draft", "--config",
                              str(cfg), flag, value, "--yes"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for flag, value in (("--name", f"Draft-{trial}"), ("--cache-mode", "Q6"))
        ]
        results = [(r.wait(timeout=60), *r.communicate()) for r in runs]
        for code, out, err in results:
            assert code == 0, err
        shown = json.loads(specdeck("config", "show", "--config", str(cfg), "--json",
                                    home=specdeck_home).stdout)
        assert shown["draft_model"]["draft_model_name"]["value"] == f"Draft-{trial}"
        assert shown["draft_model"]["draft_cache_mode"]["value"] == "Q6"


def test_set_draft_without_yes_writes_nothing(cfg, specdeck_home):
    before = cfg.read_bytes()
    result = specdeck("config", "set-draft", "--config", str(cfg), "--name", "X", home=specdeck_home,
                      stdin="")
    assert result.returncode == 2
    assert "--yes" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert cfg.read_bytes() == before
    dry = specdeck("config", "set-draft", "--config", str(cfg), "--name", "X", "--dry-run",
                   home=specdeck_home)
    assert dry.returncode == 0 and "+  draft_model_name: X" in dry.stdout
    assert cfg.read_bytes() == before


def test_invalid_value_is_one_line_and_exit_2(cfg, specdeck_home):
    before = cfg.read_bytes()
    result = specdeck("config", "set-draft", "--config", str(cfg), "--cache-mode", "Q5", "--yes",
                      home=specdeck_home)
    assert result.returncode == 2
    assert result.stderr.startswith("specdeck: error: draft_model.draft_cache_mode = 'Q5' is not valid")
    assert len(result.stderr.strip().splitlines()) == 1
    assert cfg.read_bytes() == before


def test_validate_and_migrate_legacy(tmp_path, specdeck_home):
    legacy = tmp_path / "config.yml"
    legacy.write_bytes((TABBY / "config_sample.581e1fc.yml").read_bytes())
    result = specdeck("config", "validate", "--config", str(legacy), home=specdeck_home)
    assert result.returncode == 0 and "Legacy layout" in result.stdout
    assert "`specdeck config migrate`" in result.stdout  # the command, not only the app's button
    migrated = specdeck("config", "migrate", "--config", str(legacy), "--yes", home=specdeck_home)
    assert migrated.returncode == 0, migrated.stderr
    assert "model.draft -> draft_model" in migrated.stdout
    again = specdeck("config", "show", "--config", str(legacy), "--json", home=specdeck_home)
    assert json.loads(again.stdout)["layout"] == "draft_model"


def test_validate_reports_errors_with_exit_1(tmp_path, specdeck_home):
    path = tmp_path / "config.yml"
    path.write_text("model:\n  cache_mode: q4\n  max_seq_len: 8192\n  cache_size: 4096\n")
    result = specdeck("config", "validate", "--config", str(path), "--json", home=specdeck_home)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["valid"] is False
    assert {p["key"] for p in report["problems"] if p["severity"] == "error"} == {
        "model.cache_mode", "model.cache_size"}


def test_missing_config_and_bad_yaml(tmp_path, specdeck_home):
    result = specdeck("config", "show", home=specdeck_home)
    assert result.returncode == 2 and "--config PATH" in result.stderr
    result = specdeck("config", "show", "--config", str(tmp_path / "none.yml"),
                      home=specdeck_home)
    assert result.returncode == 2 and "`specdeck config init PATH`" in result.stderr
    bad = tmp_path / "config.yml"
    bad.write_text("model:\n  model_name: [unclosed\n")
    result = specdeck("config", "show", "--config", str(bad), home=specdeck_home)
    assert result.returncode == 2 and "line 3" in result.stderr


def test_init_creates_a_valid_config(tmp_path, specdeck_home):
    path = tmp_path / "new" / "config.yml"
    path.parent.mkdir()
    assert specdeck("config", "init", str(path), home=specdeck_home).returncode == 0
    assert specdeck("config", "validate", "--config", str(path), home=specdeck_home).returncode == 0
    assert specdeck("config", "init", str(path), home=specdeck_home).returncode == 2
