"""The benchmark report (benchmarks/report.py): a long benchmark leaves what it measured
when stopped, without touching the last finished report."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.report import Report  # noqa: E402


def test_a_checkpoint_is_a_partial_file_beside_the_finished_report(tmp_path):
    finished = Report("demo", "A demo", out_dir=tmp_path)
    finished.record("figure", 1.0)
    finished.write(tmp_path)
    before = (tmp_path / "demo.md").read_text()

    again = Report("demo", "A demo", out_dir=tmp_path)
    again.record("figure", 2.0)
    again.text("suite one measured")
    again.checkpoint("1 of 3 suites measured")
    assert (tmp_path / "demo.md").read_text() == before  # the last finished report stands
    partial = json.loads((tmp_path / "demo.partial.json").read_text())
    assert partial["partial"] == "1 of 3 suites measured" and partial["results"]["figure"] == 2.0
    assert "**Partial: 1 of 3 suites measured.**" in (tmp_path / "demo.partial.md").read_text()

    again.write(tmp_path)
    assert not (tmp_path / "demo.partial.md").exists()
    assert not (tmp_path / "demo.partial.json").exists()
    done = json.loads((tmp_path / "demo.json").read_text())
    assert "partial" not in done and done["results"]["figure"] == 2.0


def test_without_an_output_folder_a_checkpoint_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Report("demo", "A demo").checkpoint("halfway")
    assert list(tmp_path.iterdir()) == []
