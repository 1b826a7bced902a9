"""The prose quotes what `make bench` measured: every speed-up ratio ("1.87x", "1.00-1.01x"),
duration ("143 ms", "205-255 ms", "0.22 s", "186 µs") and percentage ("24-26%") in a
paragraph of README.md or docs/*.md that cites docs/benchmarks/NAME.md must appear in that
benchmark's report, and every cited report must exist. Re-running a benchmark whose
numbers moved fails this test until the prose that quotes them is updated. It is a presence
check (the number is somewhere in the report, not necessarily in the cell the prose means),
so it catches stale and invented figures, not misattributed ones."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "docs" / "benchmarks"
CITATION = re.compile(r"docs/benchmarks/([\w-]+)\.md")
RATIO = re.compile(r"(?<![\d.])(\d+\.\d+)(?:x\b|(?=-\d+\.\d+x\b))")
"""A ratio, or the low end of a range of ratios; the high end matches as a ratio."""
QUANTITY = re.compile(r"(?<![\d.\w])(\d+(?:\.\d+)?)(?=(?:-\d+(?:\.\d+)?)?\s?(?:%|ms\b|µs\b|s\b))")
"""A duration or percentage, or the low end of a range of them."""


def prose() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def claims(text: str) -> list[str]:
    """The units a citation covers: a paragraph, or one row of a Markdown table (a row's
    figures must be in the report that row cites)."""
    units = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = paragraph.strip().splitlines()
        if lines and all(line.lstrip().startswith("|") for line in lines):
            units.extend(lines)
        else:
            units.append(paragraph)
    return units


def paragraphs_citing_reports() -> list[tuple[str, str, list[str]]]:
    found = []
    for path in prose():
        for paragraph in claims(path.read_text(encoding="utf-8")):
            names = sorted(set(CITATION.findall(paragraph)))
            if names:
                found.append((path.name, paragraph, names))
    return found


def test_every_cited_benchmark_report_exists():
    missing = [(where, name) for where, _, names in paragraphs_citing_reports()
               for name in names if not (REPORTS / f"{name}.md").is_file()]
    assert not missing


def stale_ratios(paragraph: str, reports: str, pattern: re.Pattern = RATIO) -> list[str]:
    """The figures ``pattern`` finds in ``paragraph`` that appear nowhere in ``reports``."""
    return [figure for figure in pattern.findall(paragraph)
            if not re.search(rf"(?<![\d.]){re.escape(figure)}(?![\d]|\.\d)", reports)]


def cited_reports(names: list[str]) -> str:
    return "".join((REPORTS / f"{n}.md").read_text(encoding="utf-8") for n in names
                   if (REPORTS / f"{n}.md").is_file())


def test_every_quoted_ratio_is_in_the_report_it_cites():
    checked, stale = 0, []
    for where, paragraph, names in paragraphs_citing_reports():
        checked += len(RATIO.findall(paragraph))
        stale += [f"{where}: {ratio}x is in none of {', '.join(names)}"
                  for ratio in stale_ratios(paragraph, cited_reports(names))]
    assert not stale, "\n".join(stale)
    assert checked >= 10  # the README's measured-results paragraph alone quotes more


def test_every_quoted_duration_and_percentage_is_in_the_report_it_cites():
    checked, stale = 0, []
    for where, paragraph, names in paragraphs_citing_reports():
        checked += len(QUANTITY.findall(paragraph))
        stale += [f"{where}: {figure} is in none of {', '.join(names)}"
                  for figure in stale_ratios(paragraph, cited_reports(names), QUANTITY)]
    assert not stale, "\n".join(stale)
    assert checked >= 10


def test_the_check_catches_a_ratio_the_report_does_not_hold():
    """Mutate one quoted figure of the README's measured results (both ends of a range
    count): the check must name exactly that figure."""
    readme = [found for found in paragraphs_citing_reports() if found[0] == "README.md"]
    where, paragraph, names = next(found for found in readme
                                   if re.search(r"\d+\.\d+-\d+\.\d+x", found[1]))
    reports = cited_reports(names)
    assert stale_ratios(paragraph, reports) == []
    low, high = re.search(r"(\d+\.\d+)-(\d+\.\d+)x", paragraph).groups()
    assert {low, high} <= set(RATIO.findall(paragraph))
    invented = next(f"{9 + n / 100:.2f}" for n in range(100) if f"{9 + n / 100:.2f}" not in reports)
    for quoted in (low, high):
        mutated = paragraph.replace(quoted, invented, 1)
        assert stale_ratios(mutated, reports) == [invented], (where, quoted)
    # and a duration or percentage
    where, paragraph, names = next(found for found in readme if QUANTITY.findall(found[1]))
    reports = cited_reports(names)
    quantity = QUANTITY.findall(paragraph)[0]
    invented = next(f"{9 + n / 100:.2f}" for n in range(100) if f"{9 + n / 100:.2f}" not in reports)
    mutated = re.sub(rf"(?<![\d.]){re.escape(quantity)}(?![\d]|\.\d)", invented, paragraph, count=1)
    assert stale_ratios(mutated, reports, QUANTITY) == [invented], (where, quantity)
