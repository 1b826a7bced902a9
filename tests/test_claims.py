"""The prose quotes what `make bench` measured: every speed-up ratio ("1.87x", "1.00-1.01x")
in a paragraph of README.md or docs/*.md that cites docs/benchmarks/NAME.md must appear in
that benchmark's report, and every cited report must exist. Re-running a benchmark whose
numbers moved fails this test until the prose that quotes them is updated. It is a presence
check (the number is somewhere in the report, not necessarily in the cell the prose means),
so it catches stale and invented figures, not misattributed ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "docs" / "benchmarks"
CITATION = re.compile(r"docs/benchmarks/(\w+)\.md")
RATIO = re.compile(r"(?<![\d.])(\d+\.\d+)(?:x\b|(?=-\d+\.\d+x\b))")
"""A ratio, or the low end of a range of ratios; the high end matches as a ratio."""


def prose() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def paragraphs_citing_reports() -> list[tuple[str, str, list[str]]]:
    found = []
    for path in prose():
        for paragraph in re.split(r"\n\s*\n", path.read_text(encoding="utf-8")):
            names = sorted(set(CITATION.findall(paragraph)))
            if names:
                found.append((path.name, paragraph, names))
    return found


def test_every_cited_benchmark_report_exists():
    missing = [(where, name) for where, _, names in paragraphs_citing_reports()
               for name in names if not (REPORTS / f"{name}.md").is_file()]
    assert not missing


def test_every_quoted_ratio_is_in_the_report_it_cites():
    checked, stale = 0, []
    for where, paragraph, names in paragraphs_citing_reports():
        reports = "".join((REPORTS / f"{n}.md").read_text(encoding="utf-8") for n in names
                          if (REPORTS / f"{n}.md").is_file())
        for ratio in RATIO.findall(paragraph):
            checked += 1
            if not re.search(rf"(?<![\d.]){re.escape(ratio)}(?!\d)", reports):
                stale.append(f"{where}: {ratio}x is in none of {', '.join(names)}")
    assert not stale, "\n".join(stale)
    assert checked >= 10  # the README's measured-results paragraph alone quotes more


def test_the_check_catches_a_ratio_the_report_does_not_hold():
    report = (REPORTS / "peers.md").read_text(encoding="utf-8")
    assert "1.04-1.12x" in report  # a range the README quotes
    assert RATIO.findall("n-gram at 1.04-1.12x (docs/benchmarks/peers.md)") == ["1.04", "1.12"]
    assert "9.87" not in report and RATIO.findall("gains 9.87x") == ["9.87"]
