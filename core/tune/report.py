"""A tune's report: what was decided and why, before and after, every setting tried, every
prediction next to its measurement, the time of each phase. Markdown for people, JSON for
scripts, and every A/B run behind it in ``runs/`` (core.bench.report's format). Drafts from
the Hub are candidates like the others (predicted and measured in the same table, with their
download size), and what was downloaded, or not and why, has its own table."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from specdeck.core.bench.tables import grid_table
from specdeck.core.bench.winner import NO_DRAFT_SPEEDUP
from specdeck.core.jsonout import dumps, to_jsonable
from specdeck.core.servers.kinds import TRAITS, ServerKind
from specdeck.core.tune.request import TABBYAPI
from specdeck.core.tune.run import CURRENT, REFERENCE, WINNER, TuneResult
from specdeck.core.units import format_bytes
from specdeck.core.urls import shown_args

NAMES = {REFERENCE: "no drafting", CURRENT: "your current setting", WINNER: "the search's pick"}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.0%}"


def _origin(candidate) -> str:
    if candidate.hub is not None:
        return f"the Hub, {candidate.hub.spec} ({format_bytes(candidate.hub.size)})"
    return "-" if candidate.draft is None else "disk"


def _download_result(download) -> str:
    if not download.ok:
        return f"{download.status}: {download.why}"
    if download.status == "downloaded" and download.downloaded_bytes < download.bytes:
        return (f"downloaded ({format_bytes(download.downloaded_bytes)} fetched, the rest "
                "resumed)")
    return download.status


def markdown(result: TuneResult) -> str:
    setup, decision = result.setup, result.decision
    facts = setup.facts
    lines = [f"# Tuning {setup.where}", "",
             f"Target {facts.name}: {facts.architecture}, {facts.layers} layers, "
             f"{format_bytes(facts.weight_bytes)} of weights. Server: {setup.server_text}. "
             f"Drafting now: {shlex.join(shown_args(setup.drafting)) or 'none'}"
             + (" (as migrated: the cmd's own flags are out of date for this llama-server: "
                + "; ".join(getattr(setup, "migration", ())) + ")"
                if getattr(setup, "migration", ()) else "") + ".", "",
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
        lines += [f"## Before and after ({verification.where.removeprefix('on ')})", "",
                  "| setting | decode tok/s (median of its runs) | speed-up over no drafting "
                  "(median of paired ratios) | output |",
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
        for comparison in summary.comparisons:
            if comparison.not_drafting:
                lines += ["", f"{NAMES.get(comparison.arm, comparison.arm)} drafted nothing "
                              f"here: {comparison.not_drafting}."]
        if _disagree(summary):
            lines += ["", "Here the tok/s medians and the speed-ups order the settings "
                      "differently: a tok/s median mixes prompts of different speed (and any "
                      "run another program slowed), while a speed-up compares each run with "
                      "the no-drafting run of the same prompt beside it. The speed-up is what "
                      "is decided on."]
        if verification.winner_vs_current is not None:
            r = verification.winner_vs_current
            lines += ["", f"The search's pick against your current setting: {r.median:.2f}x "
                          f"({r.interval_text()})."]
        lines.append("")
    if result.forecast is not None:
        lines += forecast_lines(result.forecast)
    if result.search is not None:
        lines += ["## Every setting tried (tuning prompts)", "", grid_table(result.search), ""]
    if result.tried:
        lines += ["## Candidates: predicted and measured", "",
                  "| candidate | draft from | predicted (range) | from | measured (best "
                  "setting) | error (predicted against measured) |", "|---|---|---|---|---|---|"]
    for t in result.tried:
        p = t.prediction
        measured = "-" if t.measured is None else (
            f"{t.measured:.2f}x ({t.best_setting}"
            + (f"; {t.not_a_result}: not learned from" if t.not_a_result else "")
            + ("; refuted by verification, not learned from" if t.refuted else "") + ")")
        lines.append(f"| {t.candidate.label} | {_origin(t.candidate)} | {p.speedup:.2f}x "
                     f"({p.low:.2f}-{p.high:.2f}) | {p.source} | {measured} | "
                     f"{_pct(t.error)} |")
    from_hub = [t.candidate for t in result.tried if t.candidate.hub is not None]
    if from_hub:
        lines += ["", "Drafts from the Hub, the file chosen and why:",
                  *(f"- {c.label}: {'; '.join(c.notes)}" for c in from_hub)]
    noted = [t.candidate for t in result.tried if t.candidate.hub is None and t.candidate.notes]
    if noted:
        lines += ["", "How candidates were searched:",
                  *(f"- {c.label}: {'; '.join(c.notes)}" for c in noted)]
    if result.downloads:
        lines += ["", "## Downloads", "", "| candidate | repository | size | time | result |",
                  "|---|---|---|---|---|"]
        lines += [f"| {d.candidate} | {d.repo_id} | {format_bytes(d.bytes)} | "
                  f"{f'{d.seconds:.1f} s' if d.seconds else '-'} | {_download_result(d)} |"
                  for d in result.downloads]
    if result.not_tried:
        lines += ["", "Not tried:", *(f"- {n.what}: {n.why}" for n in result.not_tried)]
    # What the tune cost, under its own heading even without phase times (the servers line
    # hung under the section before it).
    spent = [f"- {name}: {seconds:.1f} s" for name, seconds in result.phase_s.items()]
    started = servers_text(result)
    if started:
        spent.append(f"- {started}")
    budgeted = sum(result.phase_s.get(name, 0.0) for name in ("search", "verify"))
    if budgeted > result.options.budget_s * 1.05:
        spent.append(f"- over the budget of {result.options.budget_s / 60:g} min by "
                     f"{(budgeted - result.options.budget_s) / 60:.1f} min (search and "
                     "verification; the notes say why)")
    if spent:
        lines += ["", "## Time", "", *spent]
    if result.notes:
        lines += ["", *(f"Note: {n}" for n in result.notes)]
    return "\n".join(lines) + "\n"


FORECAST_ROWS = 12
"""Settings the report lists from the replay's predictions (the best first; tune.json keeps
all)."""


def forecast_lines(forecast) -> list[str]:
    """Why the search measured what it did: each setting's accepted length by position on
    the user's prompts, against what a step of it costs here."""
    costs = forecast.costs
    lines = ["## Predicted from one plain run (tuning prompts)", "",
             f"{len(forecast.settings)} settings predicted by replaying llama-server's own "
             f"drafters over one run without drafting of {forecast.requests} prompts "
             f"({forecast.seconds:.0f} s, {forecast.servers_started} llama-servers). A step "
             f"verifying d drafted tokens costs 1 + {costs.verify_share:.2f} + "
             f"{costs.row_share:.2f} x d plain steps here"
             + (f" (+ {costs.row2_share:.3f} x d^2)" if costs.row2_share else "")
             + (" (calibrated on this server" + (
                 ", whose counts equal the replay's)" if forecast.calibration_exact else ")")
                if forecast.calibrated else " (no calibration: the prior)") + ".", "",
             "| setting | predicted (interval) | verifications | mean accepted length | "
             "accepted by position | cost of a full step |", "|---|---|---|---|---|---|"]
    for item in forecast.settings[:FORECAST_ROWS]:
        p = item.predicted
        positions = " ".join(f"{a:.0%}" for a in p.per_pos_acceptance[:8]) + (
            " ..." if len(p.per_pos_acceptance) > 8 else "") or "-"
        lines.append(f"| {item.candidate}: {item.label} | {p.speedup:.2f}x "
                     f"({p.low:.2f}-{p.high:.2f}) | {item.replayed.drafts} | "
                     f"{p.mean_accepted_length:.2f} | {positions} | "
                     f"{costs.step(item.k):.1f} |")
    if forecast.not_replayed:
        lines += ["", "Measured instead of predicted:",
                  *(f"- {what}: {why}" for what, why in forecast.not_replayed)]
    return lines + [""]


def _disagree(summary) -> bool:
    """Whether some setting's tok/s median is on the other side of no drafting's from its
    paired speed-up (faster by one, slower by the other)."""
    reference = next((a.tokens_per_second for a in summary.arms if a.name == REFERENCE), None)
    if not reference:
        return False
    for arm in summary.arms:
        ratio = None if arm.name == REFERENCE else summary.comparison(arm.name).speedup
        if ratio is None or arm.tokens_per_second is None:
            continue
        if (arm.tokens_per_second - reference) * (ratio.median - NO_DRAFT_SPEEDUP) < 0:
            return True
    return False


def servers_text(result: TuneResult) -> str:
    """The servers the tune started, and those its proof of the written file started ("":
    none)."""
    proof = getattr(result.applied, "servers_started", 0)
    if not result.servers_started and not proof:
        return ""
    # A llama-swap setup is tuned on llama-servers SpecDeck starts from its cmd.
    kind = ServerKind.TABBYAPI if result.setup.kind == TABBYAPI else ServerKind.LLAMA_SERVER
    return (f"Servers started ({TRAITS[kind].title}): {result.servers_started}"
            + (f", and {proof} to prove the file as written" if proof else ""))


def to_json(result: TuneResult) -> dict[str, Any]:
    verification = result.verification
    return {
        "setup": {"kind": result.setup.kind, **to_jsonable(result.setup)},
        "decision": to_jsonable(result.decision),
        "applied": to_jsonable(result.applied),
        "tried": [{"candidate": t.candidate.label, "predicted": to_jsonable(t.prediction),
                   "measured": t.measured, "best_setting": t.best_setting, "error": t.error,
                   "pairs": t.pairs, "disturbed": t.disturbed, "not_drafting": t.not_drafting,
                   "not_a_result": t.not_a_result or None, "refuted": t.refuted,
                   "draft_bytes": t.candidate.draft_bytes,
                   "download_bytes": t.candidate.download_bytes,
                   "hub": to_jsonable(t.candidate.hub), "notes": list(t.candidate.notes)}
                  for t in result.tried],
        "downloads": to_jsonable(result.downloads),
        "not_tried": to_jsonable(result.not_tried),
        "search": None if result.search is None else result.search.to_json(),
        "verification": None if verification is None else {
            "summary": verification.summary.to_json(),
            "winner_vs_none": to_jsonable(verification.winner_vs_none),
            "winner_vs_current": to_jsonable(verification.winner_vs_current),
            "current_vs_none": to_jsonable(verification.current_vs_none),
            "lossless": verification.lossless},
        "options": {"suites": list(result.options.suites),
                    "prompts_per_suite": result.options.prompts_per_suite,
                    "max_new_tokens": result.options.max_new_tokens,
                    "budget_s": result.options.budget_s},
        "phase_s": result.phase_s,
        "servers_started": result.servers_started,
        "servers_started_to_prove": getattr(result.applied, "servers_started", 0),
        "forecast": None if result.forecast is None else result.forecast.to_json(),
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
