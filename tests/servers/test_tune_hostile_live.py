"""Round 4 of the hostile sweep (issue 41) against the real pinned llama-server: a user's
command line that carries secrets is tuned (the servers SpecDeck launches get their key) and
no output holds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow
SECRET = "sk-SECRET-4242"
TOKEN = "hf_TOKEN_abcdef"


def test_a_cmd_with_an_api_key_and_a_hub_token_is_tuned_and_neither_is_ever_shown(
        llama_bin, demo_gguf, tmp_path, specdeck_home):
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "specdeck", "tune", "--demo", "--llama-server", str(llama_bin),
         "--budget", "10s", "--per-suite", "2", "--max-new", "8", "--download-budget", "0",
         "--json", str(tmp_path / "tune.json"), "--report", str(report),
         "--", "-t", "2", "-c", "1024", "--api-key", SECRET, "-hft", TOKEN],
        capture_output=True, text=True, timeout=600,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert done.returncode in (0, 1), done.stderr
    data = json.loads((tmp_path / "tune.json").read_text())
    # The servers SpecDeck launched with the user's --api-key were sent that key: measured.
    assert any(t["measured"] is not None for t in data["tried"]), done.stdout
    assert "--api-key ***" in done.stderr  # the progress lines name the flag, not its value
    outputs = [done.stdout, done.stderr, (tmp_path / "tune.json").read_text(),
               *(p.read_text(errors="replace") for p in report.rglob("*") if p.is_file())]
    assert (report / "runs" / "01" / "plan.json").is_file()
    for text in outputs:
        assert SECRET not in text and TOKEN not in text
