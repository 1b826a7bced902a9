"""A tune's report: what was decided and why, before and after, every setting tried, every
prediction next to its measurement, the time of each phase. Markdown for people, JSON for
scripts, and every A/B run behind it in ``runs/`` (core.bench.report's format)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from specdeck.core.bench.grid import grid_table
from specdeck.core.jsonout import dumps, to_jsonable
from specdeck.core.tune.run import CURRENT, REFERENCE, WINNER, TuneResult
from specdeck.core.units import format_bytes

NAMES = {REFERENCE: "no drafting", CURRENT: "your current setting", WINNER: "the winner"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def markdown(result: TuneResult) -> str:
    setup, decision = result.setup, result.decision
    facts = setup.facts
    lines = [f"# Tuning {setup.where}", "",
             f"Target {facts.name}: {facts.architecture}, {facts.layers} layers, "
             f"{format_bytes(facts.weight_bytes)} of weights. Server: {setup.binary}. "
             f"Drafting now: {shlex.join(setup.drafting) or 'none'}.", "",
             "## Result", "", decision.why, ""]
    applied = result.applied
    if applied is not None:
        if applied.written:
            lines.append(f"Written to {applied.path} (previous version: {applied.backup}). "
                         f"{applied.relaunch}")
        if applied.rolled_back:
            lines.append(applied.why or f"Rolled back: {applied.relaunch}")
        if not applied.written and applied.why:
            lines.append(applied.why)
        if applied.flags:
            lines += ["", f"The winner's flags: `{applied.flags}`"]
        if applied.diff:
            lines += ["", "```diff", applied.diff.rstrip(), "```"]
        lines.append("")
    verification = result.verification
    if verification is not None:
        lines += ["## Before and after (held-out prompts)", "",
                  "| setting | decode tok/s (median) | against no drafting | output |",
                  "|---|---|---|---|"]
        summary = verification.summary
        for arm in summary.arms:
            ratio = None if arm.name == REFERENCE else summary.comparison(arm.name).speedup
            check = None if arm.name == REFERENCE else summary.comparison(arm.name).lossless
            against = "1.00x" if ratio is None and arm.name == REFERENCE else (
                "-" if ratio is None else f"{ratio.median:.2f}x ({ratio.interval_text()})")
            output = "reference" if check is None else check.verdict
            rate = "-" if arm.tokens_per_second is None else f"{arm.tokens_per_second:.1f}"
            lines.append(f"| {NAMES.get(arm.name, arm.name)}: {arm.label} | {rate} | {against} "
                         f"| {output} |")
        if verification.winner_vs_current is not None:
            r = verification.winner_vs_current
            lines += ["", f"The winner against your current setting: {r.median:.2f}x "
                          f"({r.interval_text()})."]
        lines.append("")
    if result.search is not None:
        lines += ["## Every setting tried (tuning prompts)", "", grid_table(result.search), ""]
    lines += ["## Candidates: predicted and measured", "",
              "| candidate | predicted (range) | from | measured (best setting) | error |",
              "|---|---|---|---|---|"]
    for t in result.tried:
        p = t.prediction
        measured = "-" if t.measured is None else f"{t.measured:.2f}x ({t.best_setting})"
        lines.append(f"| {t.candidate.label} | {p.speedup:.2f}x ({p.low:.2f}-{p.high:.2f}) | "
                     f"{p.source} | {measured} | {_pct(t.error)} |")
    if result.not_tried:
        lines += ["", "Not tried:", *(f"- {n.what}: {n.why}" for n in result.not_tried)]
    lines += ["", "## Time", "", *(f"- {name}: {seconds:.1f} s"
                                     for name, seconds in result.phase_s.items())]
    if result.notes:
        lines += ["", *(f"Note: {n}" for n in result.notes)]
    return "\n".join(lines) + "\n"


def to_json(result: TuneResult) -> dict[str, Any]:
    verification = result.verification
    return {
        "setup": to_jsonable(result.setup),
        "decision": to_jsonable(result.decision),
        "applied": to_jsonable(result.applied),
        "tried": [{"candidate": t.candidate.label, "predicted": to_jsonable(t.prediction),
                   "measured": t.measured, "best_setting": t.best_setting, "error": t.error}
                  for t in result.tried],
        "not_tried": to_jsonable(result.not_tried),
        "search": None if result.search is None else result.search.to_json(),
        "verification": None if verification is None else {
            "summary": verification.summary.to_json(),
            "winner_vs_none": to_jsonable(verification.winner_vs_none),
            "winner_vs_current": to_jsonable(verification.winner_vs_current),
            "current_vs_none": to_jsonable(verification.current_vs_none),
            "lossless": verification.lossless},
        "phase_s": result.phase_s,
        "cancelled": result.cancelled,
        "notes": list(result.notes),
    }


def write(result: TuneResult, folder: str | Path) -> Path:
    """tune.md, tune.json, and each A/B run of the search and the verification in runs/."""
    from specdeck.core.bench.report import write_table_report

    runs = list(result.search.runs if result.search is not None else ())
    if result.verification is not None:
        runs.append(result.verification.run)
    folder = write_table_report(folder, "tune", to_json(result), markdown(result), runs)
    return folder


def shown_json(result: TuneResult) -> str:
    return dumps(to_json(result))
