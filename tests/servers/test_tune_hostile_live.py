"""Round 4 of the hostile sweep (issue 41) against the real pinned llama-server, in one tune
(each costs a search): a --help that lists spec types named like shell syntax, llama-swap
macros and flags, and a user's command line that carries an API key and a Hub token. None
of those names is launched, the servers SpecDeck launches get the key, and no output holds
either secret."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow
SECRET = "sk-SECRET-4242"
TOKEN = "hf_TOKEN_abcdef"


def test_a_hostile_help_and_a_cmd_with_secrets_are_tuned_without_either_leaking(
        llama_bin, demo_gguf, tmp_path, specdeck_home):
    from help_samples import hostile_help

    help_text = tmp_path / "hostile-help.txt"
    help_text.write_text(hostile_help())
    calls = tmp_path / "calls.log"
    binary = tmp_path / "bin" / "llama-server"
    binary.parent.mkdir()
    binary.write_text(f'#!/bin/sh\n[ "$1" = --help ] && cat "{help_text}" && exit 0\n'
                      f'printf "%s\\n" "$*" >> "{calls}"\nexec "{llama_bin}" "$@"\n')
    binary.chmod(0o755)
    report = tmp_path / "report"
    done = subprocess.run(
        [sys.executable, "-m", "specdeck", "tune", "--llama-server", str(binary), "--gguf",
         str(demo_gguf), "--budget", "10s", "--per-suite", "2", "--max-new", "8",
         "--download-budget", "0", "--json", str(tmp_path / "tune.json"), "--report",
         str(report), "--", "-t", "1", "-c", "1024", "--api-key", SECRET, "-hft", TOKEN],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert done.returncode in (0, 1), done.stderr
    data = json.loads((tmp_path / "tune.json").read_text())

    # The spec types that are not names were read, listed as not tried, and never launched.
    launched = calls.read_text().splitlines()
    assert any("--spec-type ngram-" in line for line in launched), launched
    for line in launched:
        assert "$(" not in line and "`" not in line and "${" not in line and ";" not in line
        assert "--model=" not in line and " -hf " not in line and "MOD" not in line
    assert not list(tmp_path.rglob("PWNED"))
    refused = {n["what"]: n["why"] for n in data["not_tried"]}
    assert "shell syntax" in refused["$(touch${IFS}PWNED)"] and "macro" in refused["${PORT}x"]

    # The servers SpecDeck launched with the user's --api-key were sent that key: measured.
    assert any(t["measured"] is not None for t in data["tried"]), done.stdout
    assert "--api-key ***" in done.stderr  # the progress lines name the flag, not its value
    assert (report / "runs" / "01" / "plan.json").is_file()
    outputs = [done.stdout, done.stderr, (tmp_path / "tune.json").read_text(),
               *(p.read_text(errors="replace") for p in report.rglob("*") if p.is_file())]
    for text in outputs:
        assert SECRET not in text and TOKEN not in text
