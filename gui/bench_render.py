"""What the A/B page shows, as text and HTML, from core's live state and summaries. No Qt.

Every figure comes from the core (``core.bench.live`` while a plan runs, ``core.bench.summary``
once it ends, ``core.bench.sweep`` for the settings to apply); this module only words them,
so it is tested without a QApplication (tests/gui/test_bench_render.py) and the page's
widgets only take the strings.
"""

from __future__ import annotations

import colorsys
import html
from collections.abc import Sequence

from specdeck.core.bench.winner import clearly_slower
from specdeck.core.engines.base import SHARE_OF_DRAFTS

ARM_COLOURS = ("#64748b", "#2563eb", "#d97706", "#16a34a", "#9333ea")
"""A (the no-draft reference) in slate grey, then one colour per drafted arm."""

RESULT_COLUMNS = ("Arm", "Prompt", "Rep", "Tokens", "tok/s", "vs A", "TTFT ms", "Accepted",
                  "Mean accept len", "Output vs A")
ARM, PROMPT, REPEAT, TOKENS, RATE, RATIO, TTFT, ACCEPTED, MEAN_LENGTH, OUTPUT = range(
    len(RESULT_COLUMNS))
SLOWER = "#b91c1c"
BEST_CELL = "#bbf7d0"


def arm_colour_name(index: int) -> str:
    """A fixed colour per arm, as #rrggbb; past the palette (a sweep's many arms), hues 137.5°
    apart (saturation 190 and value 200 of 255, as Qt's QColor.fromHsv takes them)."""
    if index < len(ARM_COLOURS):
        return ARM_COLOURS[index]
    red, green, blue = colorsys.hsv_to_rgb((int(index * 137.5) % 360) / 360, 190 / 255, 200 / 255)
    return "#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in (red, green, blue)))


# the run in progress and finished runs ------------------------------------------------------
def rate(tokens_per_second: float | None) -> str:
    return "–" if tokens_per_second is None else f"{tokens_per_second:.1f} tok/s"


def percent(value: float | None, source: str = "") -> str:
    """An acceptance rate; without one, why: nothing drafted, or (``source``, an arm's
    acceptance_source) the server reported none or what it reported was not usable."""
    if value is not None:
        return f"{100 * value:.0f}%"
    if source.startswith("not reported"):
        return "not reported by the server"
    if source.startswith("not usable"):
        return "not usable"
    return "no drafts"


def run_heading(slot, prompt_tokens: int) -> str:
    """The pane's line over a run that starts: prompt, warm-up or repeat, prompt size."""
    what = "warm-up" if slot.warmup else f"repeat {slot.repeat + 1}"
    tokens = f"{prompt_tokens} prompt tokens" if prompt_tokens else "prompt tokenized by the server"
    return f"{slot.prompt.id} · {what} · {tokens}"


def live_metrics(current) -> str:
    """The pane's figures for the run in progress (core.bench.live.CurrentRun)."""
    speed, accept = current.tokens_per_second, current.acceptance_rate
    parts = [rate(speed) if speed is not None else "",
             f"{100 * accept:.0f}% of drafts accepted" if accept is not None else "",
             f"{current.new_tokens} tokens"]
    return " · ".join(p for p in parts if p)


def run_metrics(record) -> str:
    """The pane's figures for a finished run (core.bench.runner.RunRecord)."""
    stats = record.result.stats
    parts = [f"{stats.tokens_per_second:.1f} tok/s", f"{stats.new_tokens} tokens"]
    if stats.acceptance_rate is not None:
        parts.insert(1, f"{100 * stats.acceptance_rate:.0f}% accepted")
    if not record.complete:
        parts.append("stopped")
    return " · ".join(parts)


def row_cells(row) -> list[str]:
    """The results table's cells (RESULT_COLUMNS) for a finished run (core.bench.live.RunRow);
    ``ratio`` and ``output`` stay empty until the reference's run of the pair has finished."""
    record, stats = row.record, row.record.result.stats
    return [
        record.arm, record.prompt_id, str(record.slot.repeat + 1), str(stats.new_tokens),
        f"{stats.tokens_per_second:.1f}", ratio_cell(row),
        "" if stats.time_to_first_token_s is None else f"{1000 * stats.time_to_first_token_s:.0f}",
        "" if stats.acceptance_rate is None else f"{100 * stats.acceptance_rate:.0f}%",
        "" if stats.mean_acceptance_length is None else f"{stats.mean_acceptance_length:.2f}",
        output_cell(row),
    ]


def ratio_cell(row) -> str:
    return "" if row.speedup is None else f"{row.speedup:.2f}×"


def output_cell(row) -> str:
    return "" if row.output is None else row.output.text


def output_differs(row) -> bool:
    return row.output is not None and row.output.differs


def running_stage(slot, done: int, total: int) -> str:
    """The stage while a run goes on: which of the plan's runs it is (the engine's last load
    message, "Ready", had stayed there for the whole plan)."""
    what = "warm-up" if slot.warmup else f"repeat {slot.repeat + 1}"
    return f"Run {done + 1} of {total}: {slot.arm.label} · {slot.prompt.id} · {what}"


WAITING_FOR_PAIRS = ("Running: the figures come once a drafting arm's run has the "
                     "reference's run of the same prompt beside it.")
"""The summary once runs stream and before the first pair (it had said "Loading…")."""


def finished_stage(run) -> str:
    stopped = " (stopped early)" if run.cancelled else ""
    return (f"Finished{stopped}: {len(run.counted())} measured runs in "
            f"{run.finished_at - run.started_at:.1f} s")


def error_html(error: BaseException) -> str:
    """A failure for the banner: what happened, then what to do (a SpecDeckError's fix)."""
    fix = getattr(error, "fix", "")
    return html.escape(str(error)) + (f"<br>{html.escape(fix)}" if fix and fix not in str(error) else "")


# plots ---------------------------------------------------------------------------------------
POSITIONS_TITLE = "Acceptance by draft position"
POSITIONS_AXIS = "% kept"
POSITIONS_TIP = (f"At each draft position i: the {SHARE_OF_DRAFTS} whose first i tokens the "
                 "target kept (it never rises with i; every source reports it).")
"""The chart shows core.engines.base.SHARE_OF_DRAFTS for every arm. A title saying so
wrapped at the A/B page's width and an axis saying so was cut ("% of draft"): the title and
the plot say it on hover, the title keeps its room for where the counts come from."""
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


def positions_title(entries) -> str:
    """The position chart's title: what it shows and, per drafting arm, where its numbers
    come from (``entries``: (arm name, core.bench.summary.DraftPositions or None while no
    run has finished)). Arms with the same source share a clause; a server that reports
    no positions is named, never drawn as zeros."""
    if not entries:
        return POSITIONS_TITLE
    clauses: dict[str, list[str]] = {}
    for name, positions in entries:
        if positions is None:
            why = "no finished run yet"
        elif positions.reported and not positions.drafts:
            why = f"no drafts ({positions.label})"
        else:
            why = positions.label
        clauses.setdefault(why, []).append(name)
    if len(clauses) == 1:  # the source kept whole: a narrow plot breaks the line before "("
        source = next(iter(clauses)).replace(" ", "\u00a0")
        return f"{POSITIONS_TITLE} ({source})"
    return f"{POSITIONS_TITLE}: " + "; ".join(f"{', '.join(names)} {why}"
                                               for why, names in clauses.items())


def memory_title(kind: str, unit: str = "") -> str:
    """The memory plot's title: whose memory it shows ("gpu": every GPU NVML reads, the
    engine's or the server's among the rest; "rss": the engine process; "server-hidden":
    nothing, because the server's memory cannot be read from here)."""
    return {"gpu": "GPU memory used (all processes, NVML)",
            "rss": "Engine process memory (RSS)",
            "server-hidden": "Memory: the server's memory is not visible "
                             "(no GPU that NVML reads on this machine)",
            "server-remote": "Memory: the server's memory is not visible (it runs on "
                             "another machine)"}.get(kind, "Memory")


def servers_are_local(arms) -> bool:
    """Every server arm runs on this machine (launched by SpecDeck, or at a loopback
    address): only then is this machine's GPU memory the servers'."""
    from urllib.parse import urlsplit

    for arm in arms:
        server = arm.server
        if server is None or server.launch is not None:
            continue
        if (urlsplit(server.url).hostname or "") not in LOCAL_HOSTS:
            return False
    return True


def mean_length_text(arm) -> str:
    """The summary's mean acceptance length, with where it comes from (core.bench.summary:
    1 + accepted / drafts)."""
    positions = arm.positions
    if positions is None:
        return ""
    if not positions.reported:
        return f"mean acceptance length {positions.label}"
    if arm.mean_acceptance_length is None:
        return f"mean acceptance length: no drafts ({positions.label})"
    return f"mean acceptance length {arm.mean_acceptance_length:.2f} ({positions.label})"


def spec_bench_text(comparison) -> str:
    """A drafting arm's speed-up per Spec-Bench category, in Spec-Bench's table order (core's
    median of paired ratios per prompt tag, ``Comparison.by_tag``); "" when no prompt had a
    Spec-Bench category."""
    from specdeck.core.bench.suites import SPEC_BENCH, spec_bench_categories

    cells = [f"{c.label} {ratio.median:.2f}× (n={ratio.n})" for c in spec_bench_categories()
             if (ratio := comparison.by_tag.get(f"{SPEC_BENCH}/{c.name}")) is not None]
    return "Spec-Bench by category: " + "; ".join(cells) if cells else ""


# the summary pane ---------------------------------------------------------------------------
def arm_head(label: str, index: int) -> str:
    return f"<b style='color:{arm_colour_name(index)}'>{html.escape(label)}</b>"


def _speedup(median: float, n: int, low: float, high: float, base: str,
             drafting_result: bool = True) -> str:
    """The headline; the caller closes the parenthesis (after the interval, when known). A
    figure that is not a drafting result (it did not draft, or nobody can tell) is not bold."""
    figure = f"<b>{median:.2f}×</b>" if drafting_result else f"{median:.2f}×"
    return (f"<span style='font-size:15pt'>{figure}</span> vs {base} "
            f"(median of {n} paired runs; min {low:.2f}×, max {high:.2f}×")


def _identical(checkable: bool, identical: int, compared: int, base: str) -> str:
    if not checkable:
        return "sampled: losslessness not checkable"
    return f"{identical}/{compared} outputs identical to {base}"


def so_far_html(live) -> str:
    """The running figures of a plan in progress (core.bench.live.LivePlan); the bootstrap
    interval, theory and causes come from the summary once the plan ends."""
    base = live.reference
    lines = []
    for arm in live.figures():
        head = arm_head(arm.label, live.arms.index(arm.name))
        if arm.median_speedup is None:
            lines.append(f"<p>{head}: waiting for paired runs</p>")
            continue
        drafted = not arm.standing().not_drafting  # known to have drafted so far
        speedup = _speedup(arm.median_speedup, arm.pairs, arm.min_speedup, arm.max_speedup,
                           base, drafted)
        accept = percent(arm.acceptance_rate, "not reported" if arm.drafting_unknown else "")
        doubt = ("<br>did it draft? not reported by the server" if arm.drafting_unknown
                 else "<br>drafted nothing so far" if arm.drafted_nothing else "")
        lines.append(
            f"<p>{head}<br>{speedup})<br>acceptance {accept} · "
            f"{_identical(arm.checkable, arm.identical, arm.pairs, base)}{doubt}</p>"
        )
    return "<b>So far</b>" + "".join(lines)


def final_html(summary, arms: Sequence[str], only: str | None = None) -> str:
    """The finished plan, all from ``core.bench.summary`` (``arms``: the plan's arm names, in
    order, for their colours; a sweep shows ``only`` its best arm, every arm being in the
    table and the report)."""
    from specdeck.core.bench.report import bandwidth_text
    from specdeck.core.bench.winner import comparison_standing

    arms = list(arms)
    base = summary.reference
    reference = summary.arm(base)
    lines = [f"<p>{arm_head(reference.label, 0)}: {rate(reference.tokens_per_second)}"
             + (f" · weights read at {bandwidth_text(reference.weight_read_rate, reference.roofline_share)}"
                if reference.weight_read_rate else "") + "</p>"]
    for comparison in summary.comparisons:
        if only is not None and comparison.arm != only:
            continue
        head = arm_head(comparison.label, arms.index(comparison.arm))
        ratio, check = comparison.speedup, comparison.lossless
        if ratio is None:  # never a 0.00x: why there is no speed-up (core.bench.summary)
            why = html.escape(comparison.not_usable or "no paired runs")
            lines.append(f"<p>{head}: not usable: {why}</p>")
            continue
        verdict = ratio.verdict
        if clearly_slower(ratio):
            verdict = f"<b style='color:{SLOWER}'>{verdict}</b>"
        measured = summary.arm(comparison.arm)
        drafted = not comparison_standing(comparison).not_drafting  # known to have drafted
        parts = [
            f"{_speedup(ratio.median, ratio.n, ratio.minimum, ratio.maximum, base, drafted)}; "
            f"{html.escape(ratio.interval_text('–'))}): {verdict}",
            f"acceptance {percent(measured.acceptance_rate, measured.acceptance_source)} · "
            + _identical(check.checkable, check.identical, check.compared, base),
        ]
        categories = spec_bench_text(comparison)  # a Spec-Bench plan's point: right under it
        if categories:
            parts.insert(1, html.escape(categories))
        length = mean_length_text(summary.arm(comparison.arm))
        if length:
            parts.append(html.escape(length))
        if comparison.not_drafting:  # measured as it ran, but not a drafting result
            parts.insert(0, f"<b style='color:{SLOWER}'>did not draft</b>: "
                            f"{html.escape(comparison.not_drafting)}")
        elif comparison.drafting_unknown:  # nobody can tell: not a drafting result either
            parts.insert(0, f"<b style='color:{SLOWER}'>did it draft? SpecDeck cannot tell"
                            f"</b>: {html.escape(comparison.drafting_unknown)}; the speed-up "
                            "below is not counted as a drafting result")
        parts += [f"likely cause: {html.escape(c)}" for c in comparison.causes]
        arm = summary.arm(comparison.arm)
        if arm.weight_read_rate:
            parts.append(f"{rate(arm.tokens_per_second)} · weights read at "
                         f"{bandwidth_text(arm.weight_read_rate, arm.roofline_share)}")
        theory = comparison.theory
        if theory is not None and theory.predicted_speedup is not None:
            best = (f"; best predicted k = {theory.best_k} ({theory.best_speedup:.2f}×)"
                    if theory.best_k else "; no k is predicted to beat no drafting")
            parts.append(f"theory (Leviathan, cost ratio {html.escape(theory.cost_ratio.source)}): "
                         f"{theory.predicted_speedup:.2f}× at k = {theory.k}{best}")
        parts.append(html.escape(check.verdict))
        lines.append(f"<p>{head}<br>" + "<br>".join(parts) + "</p>")
    return "<b>Result</b>" + "".join(lines)


def sweep_html(rows, best, summary, passed=()) -> str:
    """Drafters down, k across: tok/s and median paired speed-up, the best cell marked; then
    why faster settings were not the best (``passed``: core.bench.winner.passed_over) and
    one line on losslessness over every arm (``rows``: core.bench.sweep.SweepRow)."""
    from specdeck.core.bench.sweep import sweep_grid

    ks, grid = sweep_grid(rows)
    head = "".join(f"<th>k={k}</th>" for k in ks)
    body = []
    for candidate, row_per_k in grid:
        tds = []
        for row in row_per_k:
            if row is None or row.tokens_per_second is None:
                tds.append("<td>–</td>")
                continue
            text = f"{row.tokens_per_second:.0f}" + (f"<br>{row.speedup.median:.2f}×" if row.speedup else "")
            style = f" style='background:{BEST_CELL}'" if row is best else ""
            tds.append(f"<td align='right'{style}>{'<b>' + text + '</b>' if row is best else text}</td>")
        body.append(f"<tr><td>{html.escape(candidate)}</td>{''.join(tds)}</tr>")
    verdict = ("no setting beat no drafting" if best is None
               else f"best: {html.escape(best.candidate)}, k={best.k} ({best.score:.2f}×)")
    check = summary.lossless_overall()
    lossless = html.escape(check.verdict)
    if check.diverged:
        lossless = f"<b style='color:{SLOWER}'>{lossless}</b>"
    passed_over = f"<p>{html.escape(passed_text(passed))}</p>" if passed else ""
    return (f"<b>Sweep</b> (tok/s, speed-up; {verdict})<table cellspacing='0' cellpadding='3' border='1'>"
            f"<tr><th></th>{head}</tr>{''.join(body)}</table>{passed_over}<p>{lossless}</p>")


def result_html(rows, best, summary, arms: Sequence[str], passed=()) -> str:
    """The summary pane once the plan has ended: a sweep's table and its best arm, or every
    arm's result (each of which says when it did not draft or its output changed)."""
    swept = len(rows) > len({r.candidate for r in rows})
    if swept:
        return sweep_html(rows, best, summary, passed) + (
            final_html(summary, arms, only=best.arm) if best else "")
    return final_html(summary, arms)


# apply and history --------------------------------------------------------------------------
def passed_text(passed) -> str:
    """Why settings measured faster than the best are not it (``passed``: (SweepRow, why)
    pairs from core.bench.winner.passed_over), in one sentence, as the CLI and the sweep's
    table say it (core.bench.sweep.passed_over_text); "" for none."""
    from specdeck.core.bench.sweep import passed_over_text

    return passed_over_text(passed)


def apply_offer(best, passed=()) -> tuple[str, str]:
    """The Apply button's text and tooltip for the winning setting (None: no draft won), with
    why faster settings are not offered (``passed``: core.bench.winner.passed_over)."""
    if best is None:
        text, why = "Switch drafting off…", "No setting beat decoding without a draft"
    else:
        text = f"Apply {best.candidate} k={best.k}…"
        why = f"The best setting: {best.candidate}, k={best.k}, {best.score:.2f}× (median paired)"
    why = f"{why}. {passed_text(passed)}" if passed else f"{why}."
    return text, (f"{why} Writes TabbyAPI's config.yml through the config editor; you see the "
                  "change first.")


def apply_intro(best, notes: Sequence[str], passed=()) -> str:
    """What the config editor's confirmation says before it shows the diff."""
    what = ("switch the draft model off" if best is None
            else f"use <b>{html.escape(best.candidate)}</b> (k={best.k}, {best.score:.2f}× here)")
    extra = "".join(f"<br>{html.escape(n)}" for n in [*notes, passed_text(passed)] if n)
    return (f"Make TabbyAPI {what}. SpecDeck will change config.yml like this (the previous "
            f"version is kept as config.yml.bak):{extra}")


def history_item(entry) -> tuple[str, str]:
    """A past run's line in the History list and its tooltip (core.bench.report's entry)."""
    from pathlib import Path

    speedups = ", ".join(f"{arm} {value:.2f}×" + (" (not a drafting result)"
                                                    if arm in entry.not_drafting else "")
                         for arm, value in entry.speedups.items() if value is not None)
    best = f" · best: {entry.best}" if entry.best else (" · best: no draft" if speedups else "")
    text = (f"{entry.created[:16].replace('T', ' ')} · {Path(entry.model).name} · "
            f"{speedups or 'no result'}{best}")
    return text, "\n".join([*entry.arms, *entry.lossless.values(),
                            *(f"{arm}: {why}" for arm, why in entry.not_drafting.items())])
