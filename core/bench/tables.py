"""Result tables as text: markdown for reports, aligned plain text for a terminal; the grid's
table (``grid_table``: settings down, suites across, as users make them by hand)."""

from __future__ import annotations

from collections.abc import Sequence

from specdeck.core.bench import winner
from specdeck.core.bench.grid import ALL, GridResult


def text_table(header: Sequence[str], body: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    """The table's lines: a markdown table, or columns padded to their widest cell."""
    if markdown:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(cells) + " |" for cells in body)]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *body)]
    return ["  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
            for cells in (header, *body)]


NO_PAIR = "no pair"
NO_PAIR_NOTE = ("\"no pair\": none of the setting's runs there has a no-draft run of the "
                "same prompt beside it with a decode rate (the round was cancelled or cut short "
                "before its reference ran, or those runs failed), so its tok/s has no "
                "speed-up.")


def rate_cell(tokens_per_second: float | None, speedup, best: bool, markdown: bool) -> str:
    """"tok/s (speed-up)", the way every sweep table shows a setting; the best one marked
    (bold in markdown, a leading * in plain text). A rate with no speed-up says so ("no
    pair", NO_PAIR_NOTE), so a cell is never read as a speed-up that was left out."""
    text = "-" if tokens_per_second is None else f"{tokens_per_second:.1f}"
    if speedup is not None:
        text += f" ({speedup.median:.2f}x)"
    elif tokens_per_second is not None:
        text += f" ({NO_PAIR})"
    if best:
        text = f"**{text}**" if markdown else f"*{text}"
    return text


def _no_best(result: GridResult) -> str:
    """Why a grid names no best setting, as it happened: none of its settings could be
    measured (each failed: the notes say why), or some could not and the others did not beat
    decoding without a draft, or none that could win did (and which faster ones could not,
    and why: core.bench.winner.passed_over)."""
    rows = result.rows
    measured = [r for r in rows if r.speedup_known]
    if not measured:
        return ("Best: none: no setting could be measured (each failed: the notes say why), so "
                "nothing was compared with decoding without a draft")
    failed = len(rows) - len(measured)
    passed = result.passed_over(None)
    if failed:
        which = "was measured and could win" if passed else "was measured"
        return (f"Best: no draft: no setting that {which} beat decoding without one ({failed} "
                f"of {len(rows)} could not be measured: the notes say why)"
                + (f". {passed}" if passed else ""))
    if passed:
        return f"Best: no draft (no setting that could win beat decoding without one). {passed}"
    return "Best: no draft (no setting beat decoding without one)"


def grid_table(result: GridResult, markdown: bool = True) -> str:
    """Settings down, suites across ("all" last), a baseline row first; each cell
    "tok/s (speed-up)", the best of each column marked (bold, or * in plain text)."""
    columns = [*result.suites, ALL] if len(result.suites) > 1 else [ALL]
    best_in = {}
    for suite in columns:  # each column's winner, by the one rule (core.bench.winner)
        top = winner.pick(result.rows, lambda r, suite=suite: r.standing(suite))
        if top is not None:
            best_in[suite] = top.cell.arm.name

    header = ["setting", *columns, "accepted", "lossless"]
    body = [["no draft (baseline)",
             *("-" if result.baseline.get(s) is None else f"{result.baseline[s]:.1f}"
               for s in columns), "", ""]]
    for row in result.rows:
        dropped = f"dropped, round {row.dropped_in_round}" + (
            f": {row.dropped_why}" if row.dropped_why else "")
        cells = [row.cell.label + (f" ({dropped})" if row.dropped_in_round else "")]
        for suite in columns:
            figure = row.by_suite.get(suite)
            cells.append("-" if figure is None else rate_cell(
                figure.tokens_per_second, figure.speedup,
                best_in.get(suite) == row.cell.arm.name, markdown))
        overall = row.by_suite.get(ALL)
        rate = overall.acceptance_rate if overall else None
        cells.append("drafted nothing" if row.not_drafting else
                     "-" if rate is None else f"{rate:.0%}")
        cells.append(row.lossless.split(":")[0] if row.lossless else "-")
        body.append(cells)
    lines = text_table(header, body, markdown)
    lines.append("")
    lines.append("Each cell: the setting's median decode tok/s over the prompts it ran, and "
                 "(in brackets) its speed-up: the median of its runs' ratios to the no-draft "
                 "run of the same prompt beside it, the figure every choice is made on. "
                 "Accepted: the share of drafted tokens the server kept (\"-\": it reported "
                 "no counts; \"drafted nothing\": it drafted no token on these prompts, so its "
                 "speed-up is noise and it cannot be the best).")
    if any(f"({NO_PAIR})" in cell for row in body for cell in row):
        lines.append(NO_PAIR_NOTE)
    best = result.best
    if best is None:
        lines.append(_no_best(result))
    else:
        speedup = best.by_suite[ALL].speedup
        lines.append(f"Best: {best.cell.label}: {best.score:.2f}x over all prompts "
                     f"({speedup.verdict}: {speedup.interval_text()})")
        passed = result.passed_over(best)
        if passed:
            lines.append(f"Not the best although as fast: {passed}")
    lines.extend(f"Note: {n}" for n in result.notes)
    return "\n".join(lines) + "\n"
