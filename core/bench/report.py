"""A/B reports on disk: complete JSON, CSV, Markdown, an SVG chart, the plan, and a history.

``write_report(run, summary, folder)`` writes

- ``report.json``: versioned and complete (plan, environment, every run with its tokens and
  statistics, the summary), enough to recompute every number;
- ``runs.csv``: one row per run (warm-ups and stopped runs included, marked);
- ``summary.md``: the verdicts and tables a person reads;
- ``chart.svg``: speed-ups with their spread (SVG drawn by chart.py: no Qt in core);
- ``plan.json``: the plan alone, so ``specdeck bench --plan folder/plan.json`` repeats it.

``write_table_report(folder, name, result, table, runs)`` does it for a sweep, a grid or the
tuner: the table, the whole result as JSON, and each A/B run behind it in ``runs/NN/``.

``save_to_history`` writes the same into a new folder under the app data dir, and
``list_history()`` lists past runs from a small ``entry.json`` per folder (the GUI's list
does not parse big reports).
"""

from __future__ import annotations

import csv
import datetime as _dt
import io
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specdeck.core import appdirs
from specdeck.core.atomic import atomic_write_bytes
from specdeck.core.bench import stats
from specdeck.core.bench.lossless import compare_pair
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import BenchRun, RunRecord
from specdeck.core.bench.summary import NOT_REPORTED, BenchSummary, pairs, summarize
from specdeck.core.bench.winner import best_arm, drafting_doubt
from specdeck.core.engines.base import OF_REACHED, SHARE_OF_DRAFTS, DrafterKind
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.jsonout import dumps, to_jsonable
from specdeck.core.units import MiB, format_bandwidth, format_bytes
from specdeck.core.userpath import expand_user

REPORT_FORMAT = "specdeck-bench-report"
REPORT_VERSION = 1
REPORT_JSON = "report.json"
RUNS_CSV = "runs.csv"
SUMMARY_MD = "summary.md"
CHART_SVG = "chart.svg"
PLAN_JSON = "plan.json"
ENTRY_JSON = "entry.json"


@dataclass(frozen=True)
class ReportPaths:
    folder: Path
    json: Path
    csv: Path
    markdown: Path
    plan: Path
    chart: Path


# JSON ---------------------------------------------------------------------------------------
def report_data(run: BenchRun, summary: BenchSummary) -> dict[str, Any]:
    """The complete, versioned report as plain JSON data."""
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "created": _dt.datetime.fromtimestamp(run.finished_at, _dt.timezone.utc).isoformat(
            timespec="seconds"),
        "plan": run.plan.to_json(),
        "environment": run.environment,
        "loaded": to_jsonable(run.loaded),
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "cancelled": run.cancelled,
        "prompts": [{"id": p.id, "suite": p.suite, "tags": list(p.tags), "text": p.text,
                     "token_ids": list(run.prompt_ids.get(p.id, ()))} for p in run.prompts],
        "runs": [_run_json(r) for r in run.records],
        "summary": summary.to_json(),
    }


def _run_json(record: RunRecord) -> dict[str, Any]:
    result = record.result
    return {
        "index": record.slot.index,
        "arm": record.arm,
        "prompt_id": record.prompt_id,
        "repeat": record.slot.repeat,
        "warmup": record.slot.warmup,
        "counted": record.counted,
        "started_at": record.started_at,
        "drafter": to_jsonable(result.drafter),
        "sampling": to_jsonable(result.sampling),
        "stats": to_jsonable(result.stats),
        "text": result.text,
        "token_ids": list(result.token_ids),
        "from_draft": list(result.from_draft),
        "server": None if result.server is None else to_jsonable(result.server),
        "error": record.error,
    }


MAX_REPORT_BYTES = 256 * MiB
"""What SpecDeck reads at most of a report.json: each run keeps its text and token ids, so a
long sweep's reaches tens of MiB (1,920 runs of 1,024 tokens: about 30 MiB); a file of
gigabytes is no report SpecDeck wrote."""


def _read_json(path: Path, what: str, limit: int, hint: str) -> Any:
    """The JSON in ``path``, read with bounds (core.files: a FIFO, a device or a folder is
    refused, not waited on or read without end)."""
    from specdeck.core.files import read_text_bounded

    text = read_text_bounded(path, what, limit, hint=hint)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidInputError(f"{path} is not a readable {what}: {exc}.", hint) from None


def load_report(path: str | Path) -> dict[str, Any]:
    """A report.json (or the folder holding one), checked for format and version."""
    path = expand_user(path)
    if path.is_dir():
        path = path / REPORT_JSON
    data = _read_json(path, "A/B report", MAX_REPORT_BYTES,
                      "Give a report folder written with --report DIR, or its report.json.")
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise InvalidInputError(f"{path} is not a SpecDeck A/B report.")
    if data.get("version") != REPORT_VERSION:
        raise InvalidInputError(
            f"{path} is report version {data.get('version')}; this SpecDeck reads "
            f"version {REPORT_VERSION}.", "Update SpecDeck to read it.")
    return data


# CSV ----------------------------------------------------------------------------------------
CSV_COLUMNS = (
    "index", "arm", "drafter", "k", "adaptive", "prompt_id", "tags", "repeat", "warmup",
    "counted", "stop_reason", "prompt_tokens", "new_tokens", "prefill_s", "decode_s",
    "tokens_per_second", "time_to_first_token_s", "steps", "drafted", "accepted",
    "acceptance_rate", "mean_acceptance_length", "per_position_acceptance",
    "peak_memory_bytes", "memory_kind", "speedup_vs_reference", "same_tokens_as_reference",
)


def runs_csv(run: BenchRun) -> str:
    """One row per run; paired columns are empty for the reference arm and warm-ups."""
    tags = {p.id: p.tags for p in run.prompts}
    paired: dict[int, tuple[RunRecord, RunRecord]] = {}
    for arm in run.plan.arms[1:]:
        for reference, candidate in pairs(run, arm.name):
            paired[candidate.slot.index] = (reference, candidate)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in run.records:
        s, d = record.result.stats, record.result.drafter
        speedup = same = ""
        if record.slot.index in paired:
            reference = paired[record.slot.index][0]
            a = reference.result.stats.tokens_per_second
            ratio = stats.speedup(a, s.tokens_per_second)
            speedup = "" if ratio is None else _num(ratio)
            compared = compare_pair(reference, record) if run.plan.sampling.greedy else ""
            if not isinstance(compared, str):  # "": sampled; else what a run lost
                same = compared[0].lossless
        writer.writerow([
            record.slot.index, record.arm, d.kind.value,
            d.num_draft_tokens if d.kind is not DrafterKind.NONE else "",
            d.adaptive if d.kind is not DrafterKind.NONE else "", record.prompt_id,
            " ".join(tags.get(record.prompt_id, ())), record.slot.repeat, record.slot.warmup,
            record.counted, s.stop_reason.value, s.prompt_tokens, s.new_tokens,
            _num(s.prefill_s), _num(s.decode_s), _num(s.tokens_per_second),
            _num(s.time_to_first_token_s), s.steps, s.drafted, s.accepted,
            _num(s.acceptance_rate), _num(s.mean_acceptance_length),
            " ".join("" if v is None else _num(v) for v in s.per_position_acceptance),
            s.peak_memory_bytes or "", s.memory_kind, speedup, same,
        ])
    return out.getvalue()


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.6g}"


# Markdown -----------------------------------------------------------------------------------
def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def markdown_summary(run: BenchRun, summary: BenchSummary) -> str:
    plan = run.plan
    env = run.environment
    lines = [
        f"# A/B run: {run.loaded.model_path.name}",
        "",
        f"Engine {env.get('engine', plan.engine)} on {env.get('device', '?')} "
        f"({env.get('dtype', '?')}); {summary.sampling}; {_count(len(run.prompts), 'prompt')} "
        f"({', '.join(dict.fromkeys(p.suite for p in run.prompts)) or 'none'}) x "
        f"{_count(plan.repeats, 'repeat')}, up to {plan.max_new_tokens} new "
        f"tokens; {summary.counted_runs} measured runs. SpecDeck {env.get('specdeck', '?')}, "
        f"torch {env.get('torch', '-')}, transformers {env.get('transformers', '-')}.",
        "",
        "## Verdict",
        "",
    ]
    for c in summary.comparisons:
        lines.append(f"- {c.verdict} Losslessness: {c.lossless.verdict}.")
        lines.extend(f"  - likely cause: {cause}" for cause in c.causes)
    failing = [a for a in summary.arms if a.failed_runs or a.not_usable]
    if failing:
        lines += ["", "## Failed runs and unusable readings", ""]
        for a in failing:
            if a.failed_runs:
                lines.append(f"- {a.name}: {a.failed_runs} of {a.failed_runs + a.runs} measured "
                             "runs FAILED" + (" (every one: this arm measured nothing)"
                                              if a.all_failed else "") + ":")
                lines.extend(f"  - {error}" for error in a.errors[:5])
            lines.extend(f"- {a.name}: not usable: {why}" for why in a.not_usable)
    lines += ["", "## Arms", "",
              "| arm | tok/s (median) | TTFT (median) | acceptance | mean accepted length | "
              f"per position ({SHARE_OF_DRAFTS}) | peak memory | weights read |",
              "|---|---|---|---|---|---|---|---|"]
    for a in summary.arms:
        per_pos = " ".join("-" if v is None else f"{v:.0%}" for v in a.per_position_acceptance)
        memory = f"{format_bytes(a.peak_memory_bytes)} {a.memory_kind}" \
            if a.peak_memory_bytes else "-"
        lines.append(
            f"| {a.label} | {_fmt(a.tokens_per_second, '.1f')} | "
            f"{_fmt(a.time_to_first_token_s and a.time_to_first_token_s * 1000, '.0f', ' ms')} | "
            f"{_fmt(a.acceptance_rate and a.acceptance_rate * 100, '.0f', '%')} | "
            f"{_fmt(a.mean_acceptance_length, '.2f')} | {per_pos or '-'} | {memory} | "
            f"{bandwidth_text(a.weight_read_rate, a.roofline_share)} |")
    server_arms = [a for a in summary.arms if a.server_tokens_per_second is not None
                   or a.acceptance_source]
    if server_arms:
        lines += ["", "Server arms: tok/s is the client's clock (first to last token's arrival, "
                  "prefill excluded); the server's own figure and where acceptance comes from:",
                  ""]
        lines += [f"- {a.name}: server-reported {_fmt(a.server_tokens_per_second, '.1f')} tok/s; "
                  f"acceptance: {a.acceptance_source or _no_source(a)}" for a in summary.arms]
        lines += [f"- {note}" for note in run.loaded.notes]
    lines += position_tables(summary)
    peak = env.get("memory_bandwidth_peak")
    lines += ["", "Weights read: bytes of model weights read per second of decoding (target once "
              "per verify step, draft once per drafted token)" + (
                  f"; the share is of the GPU's peak memory bandwidth, {bandwidth_text(peak, None)} "
                  "(NVML: max memory clock x bus width x 2)." if peak else "; no GPU peak to compare (not on a GPU).")]
    lines += ["", "## Speed-up by prompt tag (median of paired ratios)", ""]
    tags = sorted({t for c in summary.comparisons for t in c.by_tag})
    if tags:
        lines += ["| arm | " + " | ".join(tags) + " |", "|---" * (len(tags) + 1) + "|"]
        for c in summary.comparisons:
            cells = [_fmt(c.by_tag[t].median, ".2f", "x") if t in c.by_tag else "-" for t in tags]
            lines.append(f"| {c.arm} | " + " | ".join(cells) + " |")
    lines += ["", "## Theory (Leviathan et al.) vs measurement", "",
              "| arm | k | draft cost c | predicted | measured | best k (predicted) | "
              "step cost ideal / measured |", "|---|---|---|---|---|---|---|"]
    for c in summary.comparisons:
        t = c.theory
        if t is None:
            continue
        cost = "-" if t.cost_ratio.value is None else f"{t.cost_ratio.value:.3f}"
        best = "-" if t.best_k is None else ("no draft" if t.best_k == 0 else
                                              f"{t.best_k} ({t.best_speedup:.2f}x)")
        lines.append(
            f"| {c.arm} | {t.k} | {cost} | {_fmt(t.predicted_speedup, '.2f', 'x')} | "
            f"{_fmt(c.speedup and c.speedup.median, '.2f', 'x')} | {best} | "
            f"{_fmt(t.ideal_step_cost, '.2f')} / {_fmt(t.measured_step_cost, '.2f')} |")
    sources = sorted({c.theory.cost_ratio.source for c in summary.comparisons if c.theory})
    lines += [""] + [f"- draft cost: {s}" for s in sources]
    divergences = [(c.arm, d) for c in summary.comparisons for d in c.lossless.divergences]
    if divergences:
        lines += ["", "## Divergences", ""]
        for arm, d in divergences:
            kind = "float tie" if d.tie else "DIVERGED"
            where = f"- {arm}, prompt {d.prompt_id}, repeat {d.repeat + 1}, {d.unit} {d.position}"
            if d.ended:
                lines.append(f"{where}: {kind}: after {d.context!r} {d.ended}")
                continue
            lines.append(f"{where}: {kind}: after {d.context!r} the reference has "
                         f"{d.reference_text!r}, this arm {d.candidate_text!r}")
    lines += [""] + [f"Note: {n}" for n in summary.notes]
    return "\n".join(lines).rstrip() + "\n"


def position_tables(summary: BenchSummary) -> list[str]:
    """"Acceptance by draft position": a table per drafting arm (the drafts that kept each
    position, the share of all drafts, and where the source counts them, the drafts that
    reached it and the share of those), its mean acceptance length and where the counts
    come from; "not reported by the server" where a server gave none, never zeros."""
    drafting = [a for a in summary.arms if a.positions is not None]
    if not drafting:
        return []
    lines = ["", "## Acceptance by draft position", "",
             f"Position i is kept only when every earlier one was. \"{SHARE_OF_DRAFTS}\": "
             "kept at i over every draft (it never rises with i; vLLM's and llama.cpp's "
             f"per-position rate). \"{OF_REACHED}\": kept at i over the drafts that had a "
             "token at i; a server's counters do not count those unless every draft was k "
             "long. Mean acceptance length = 1 + accepted / drafts, the formula vLLM, SGLang "
             "and llama.cpp use."]
    for arm in drafting:
        p = arm.positions
        lines += ["", f"### {arm.label}", ""]
        if not p.reported:
            lines.append(f"Acceptance by position: {NOT_REPORTED} ({p.of_runs} runs).")
            continue
        lines.append(f"Source: {p.label}; {p.drafts} drafts, {p.accepted_tokens} draft tokens "
                     f"kept; mean acceptance length {_fmt(arm.mean_acceptance_length, '.2f')}.")
        if not p.drafts or not p.accepted:
            lines.append(f"No draft token was kept: position 1 kept 0 of {p.drafts} drafts."
                         if p.drafts else "No draft was proposed: no position to show.")
            continue
        reached = p.reached or ("not counted",) * len(p.accepted)
        of_reached = p.of_reached or (None,) * len(p.accepted)
        lines += ["", f"| position | kept | {SHARE_OF_DRAFTS} | drafts reaching it | "
                  f"{OF_REACHED} |", "|---|---|---|---|---|"]
        lines += [f"| {i + 1} | {a} | {_percent(share)} | {d} | {_percent(rate)} |"
                  for i, (a, share, d, rate) in enumerate(zip(p.accepted, p.shares, reached,
                                                               of_reached))]
    return lines


def _percent(share: float | None) -> str:
    return _fmt(None if share is None else share * 100, ".1f", "%")


def _no_source(arm) -> str:
    if arm.drafter == DrafterKind.NONE:
        return "no drafting"
    return "no run finished" if not arm.runs else "not reported"


def bandwidth_text(rate: float | None, share: float | None) -> str:
    """"1.31 TB/s (39% of peak)": weights read per second, and the roofline share on a GPU."""
    if rate is None:
        return "-"
    text = format_bandwidth(rate)
    return text + (f" ({share:.0%} of peak)" if share is not None else "")


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


# Writing ------------------------------------------------------------------------------------
def write_report(run: BenchRun, summary: BenchSummary, folder: str | Path) -> ReportPaths:
    """Write every report file into ``folder`` (created if needed); each file atomically."""
    folder = _report_folder(folder)
    paths = ReportPaths(folder, folder / REPORT_JSON, folder / RUNS_CSV, folder / SUMMARY_MD,
                        folder / PLAN_JSON, folder / CHART_SVG)
    from specdeck.core.bench.chart import render_chart

    _write_text(paths.json, dumps(report_data(run, summary)) + "\n")
    _write_text(paths.csv, runs_csv(run))
    _write_text(paths.markdown, markdown_summary(run, summary))
    _write_text(paths.plan, dumps(run.plan.to_json()) + "\n")
    _write_text(paths.chart, render_chart(summary))
    return paths


def write_table_report(folder: str | Path, name: str, result: Any, table: str,
                       runs: Sequence[BenchRun]) -> Path:
    """A sweep's, grid's or tuner's report: ``{name}.md`` (its table), ``{name}.json`` (the
    whole result) and every A/B run behind it as a full report in ``runs/NN/``."""
    folder = _report_folder(folder)
    _write_text(folder / f"{name}.md", table)
    _write_text(folder / f"{name}.json", dumps(result) + "\n")
    for index, run in enumerate(runs, 1):
        write_report(run, summarize(run), folder / "runs" / f"{index:02d}")
    return folder


def _report_folder(folder: str | Path) -> Path:
    folder = expand_user(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"Cannot create the report folder {folder}: {exc.strerror or exc}.",
                                "Pick a folder you can write to.") from exc
    return folder


def _write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def load_plan(path: str | Path) -> BenchPlan:
    """A plan.json (or a report folder holding one)."""
    from specdeck.core.files import SMALL_FILE

    path = expand_user(path)
    if path.is_dir():
        path = path / PLAN_JSON
    data = _read_json(path, "A/B plan", SMALL_FILE,
                      "Give a plan.json written with a report (--report DIR).")
    return BenchPlan.from_json(data)


# History ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HistoryEntry:
    folder: Path
    created: str
    """ISO 8601, UTC."""
    engine: str
    model: str
    arms: tuple[str, ...]
    """Arm labels, reference first."""
    speedups: dict[str, float | None]
    """Median speed-up by drafting arm."""
    lossless: dict[str, str]
    """Losslessness verdict by drafting arm."""
    counted_runs: int
    cancelled: bool
    best: str | None = None
    """The winning drafting arm (core.bench.winner.best_arm); None: no draft won."""
    not_drafting: dict[str, str] = field(default_factory=dict)
    """Drafting arm -> why it is not a drafting result (it drafted nothing, or nobody can
    tell whether it did): its speed-up is kept as measured, never as the best."""


def history_dir() -> Path:
    return appdirs.data_dir() / "bench" / "history"


def save_to_history(run: BenchRun, summary: BenchSummary, root: Path | None = None) -> ReportPaths:
    """Write the report into a new folder of the history and index it."""
    root = root or history_dir()
    stamp = _dt.datetime.fromtimestamp(run.finished_at, _dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", run.loaded.model_path.name).strip("-") or "model"
    folder = root / f"{stamp}-{slug}"
    n = 1
    while folder.exists():
        n += 1
        folder = root / f"{stamp}-{slug}-{n}"
    paths = write_report(run, summary, folder)
    entry = HistoryEntry(
        folder=folder,
        created=_dt.datetime.fromtimestamp(run.finished_at, _dt.timezone.utc).isoformat(
            timespec="seconds"),
        engine=run.plan.engine,
        model=str(run.plan.model),
        arms=tuple(a.label for a in run.plan.arms),
        speedups={c.arm: (c.speedup.median if c.speedup else None) for c in summary.comparisons},
        lossless={c.arm: c.lossless.verdict for c in summary.comparisons},
        counted_runs=summary.counted_runs,
        cancelled=summary.cancelled,
        best=best_arm(summary),
        not_drafting={c.arm: why for c in summary.comparisons
                      if (why := drafting_doubt(c.not_drafting, c.drafting_unknown))},
    )
    data = to_jsonable(entry)
    data["folder"] = folder.name  # relative: the history can move with the data dir
    _write_text(folder / ENTRY_JSON, json.dumps(data, indent=2) + "\n")
    return paths


def list_history(root: Path | None = None) -> list[HistoryEntry]:
    """Past runs, newest first; folders without a readable entry.json are skipped."""
    root = root or history_dir()
    if not root.is_dir():
        return []
    from specdeck.core.files import read_bounded

    entries = []
    for folder in root.iterdir():
        try:  # a FIFO or a file of gigabytes put there is skipped, not waited on or read
            data = json.loads(read_bounded(folder / ENTRY_JSON, "history entry"))
            entries.append(HistoryEntry(
                folder=folder,
                created=str(data["created"]),
                engine=str(data["engine"]),
                model=str(data["model"]),
                arms=tuple(data["arms"]),
                speedups=dict(data["speedups"]),
                lossless=dict(data["lossless"]),
                counted_runs=int(data["counted_runs"]),
                cancelled=bool(data["cancelled"]),
                best=str(data["best"]) if data.get("best") else None,
                not_drafting={str(k): str(v) for k, v in
                              (data.get("not_drafting") or {}).items()},
            ))
        except (SpecDeckError, ValueError, KeyError, TypeError, RecursionError):
            continue
    return sorted(entries, key=lambda e: (e.created, e.folder.name), reverse=True)
