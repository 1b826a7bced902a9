"""Sweeps: every k (1..8) for every draft candidate, a results table, and "apply the best".

A sweep runs one A/B plan per candidate drafter (a draft model, or n-gram lookup) on one
loaded target: the reference arm A (no draft), then one arm per k. Each candidate gets its
own plan so a draft model is loaded once per candidate, not once per prompt. Arms draft
exactly k tokens per step by default (``adaptive=False``): a sweep over k means "k drafts per
step", as llama.cpp's --draft-max tables do.

The best setting is ``core.bench.winner``'s (the rule every A/B, grid and the tuner share):
the highest median paired speed-up among settings whose output did not change; when none
beats no drafting, the best setting is "no draft" (``SweepResult.best is None``).
``setting_rows`` turns the drafted arms of any A/B run into rows the same way, so a plain
A/B's winner can be applied too.

``sweep_plan`` puts every candidate's arms into one plan instead, interleaved per prompt
(the GUI's sweep): right for one draft model plus n-gram, since the engines keep one draft
model loaded while other arms run; with several draft models it would reload them per
prompt, which is why ``run_sweep`` keeps one plan per candidate.

``plan_apply_best`` turns the winner into a planned change of TabbyAPI's config.yml through
the config editor (draft_model_name / draft_model_dir; draft_num_tokens only where the
backend reads it: TabbyAPI's ExLlamaV2 backend has no such key and always drafts 4), so
the GUI can show the diff; ``apply_best`` saves it (conflict check, .bak, atomic replace).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdeck.core.bench import winner
from specdeck.core.bench.fields import DEFAULT_KS, PLAN_FIELDS
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import BenchRun, EventSink, run_plan
from specdeck.core.bench.stats import RatioSummary
from specdeck.core.bench.summary import BenchSummary, summarize
from specdeck.core.bench.tables import NO_PAIR, NO_PAIR_NOTE, rate_cell, text_table
from specdeck.core.engines import SERVER_ENGINE
from specdeck.core.engines.base import DrafterKind, DrafterSpec, Engine
from specdeck.core.errors import CancelledError, InvalidInputError
from specdeck.core.userpath import expand_user


@dataclass(frozen=True)
class SweepSpec:
    base: BenchPlan
    """Engine, model, prompts, repeats, sampling, load options; its arms are ignored."""
    candidates: tuple[DrafterSpec, ...]
    """Drafters to try (each k is replaced by the swept k)."""
    ks: tuple[int, ...] = DEFAULT_KS
    adaptive: bool = False

    def __post_init__(self) -> None:
        if not self.candidates or any(c.kind is DrafterKind.NONE for c in self.candidates):
            raise InvalidInputError("A sweep needs at least one drafter (a draft model or n-gram).",
                                    "Pass --draft FOLDER and/or --ngram.")
        k = PLAN_FIELDS["k"]
        if not self.ks or any(not k.low <= v <= k.high for v in self.ks):
            raise InvalidInputError(f"Sweep k values {list(self.ks)} must be {k.low} to {k.high}.",
                                    "Use a range such as --sweep-k 1-8.")


def candidate_label(drafter: DrafterSpec) -> str:
    if drafter.kind is DrafterKind.NGRAM:
        return "n-gram"
    return drafter.model_path.name if drafter.model_path else "draft"


def arm_name(k: int) -> str:
    return f"k{k}"


def sweep_arms(candidates: Sequence[DrafterSpec], ks: Sequence[int] = DEFAULT_KS,
               adaptive: bool = False) -> tuple[Arm, ...]:
    """A (no draft), then one arm per candidate and k: named k1.. for one candidate, d-k1..
    and n-k1.. for a draft model and n-gram lookup (the GUI's sweep: one plan, interleaved)."""
    prefixes = [""] if len(candidates) == 1 else [
        "d-" if c.kind is DrafterKind.MODEL else "n-" for c in candidates]
    if len(set(prefixes)) != len(prefixes):
        raise InvalidInputError(
            "One sweep plan holds at most one draft model and n-gram lookup.",
            "Sweep several draft models with run_sweep (specdeck bench --sweep-k), one plan each.")
    arms = [Arm("A")]
    for prefix, candidate in zip(prefixes, candidates):
        arms += [Arm(prefix + arm_name(k), replace(candidate, num_draft_tokens=k, adaptive=adaptive))
                 for k in ks]
    return tuple(arms)


def candidate_plans(spec: SweepSpec) -> list[BenchPlan]:
    """One plan per candidate: A (no draft), then k = each swept value."""
    return [replace(spec.base, arms=sweep_arms((c,), spec.ks, spec.adaptive)) for c in spec.candidates]


def sweep_plan(spec: SweepSpec) -> BenchPlan:
    """Every candidate's k arms in one plan after A (see :func:`sweep_arms`)."""
    return replace(spec.base, arms=sweep_arms(spec.candidates, spec.ks, spec.adaptive))


@dataclass(frozen=True)
class SweepRow(winner.Facts):
    """One swept setting, with the facts the winner's rule reads of it (``winner.Facts``:
    output changed or never checked, drafted nothing or nobody can tell, sampled, usable)."""

    candidate: str
    drafter: DrafterSpec
    k: int
    tokens_per_second: float | None
    speedup: RatioSummary | None
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    lossless: str
    arm: str = ""
    """The arm of the plan that measured it."""

    @property
    def score(self) -> float:
        return self.speedup.median if self.speedup else 0.0

    def standing(self) -> winner.Standing:
        """What ``core.bench.winner`` reads of this row (an A/B measures every arm on every
        prompt)."""
        return self.judged(self.speedup, complete=True)

    @property
    def name(self) -> str:
        """The setting as the sweep's table, the CLI and the A/B page name it."""
        return f"{self.candidate} k={self.k}"


@dataclass(frozen=True)
class SweepResult:
    spec: SweepSpec
    runs: tuple[BenchRun, ...]
    summaries: tuple[BenchSummary, ...]
    rows: tuple[SweepRow, ...]
    baseline_tokens_per_second: float | None
    """Median of the candidates' reference arms."""
    spent_s: float
    """Generation time of every run (warm-ups included): prefill + decode."""
    cancelled: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> SweepRow | None:
        """The row with the highest median speed-up; None when nothing beats no draft."""
        return best_row(self.rows)

    def row(self, candidate: str, k: int) -> SweepRow:
        return next(r for r in self.rows if r.candidate == candidate and r.k == k)

    def to_json(self) -> dict[str, Any]:
        from specdeck.core.jsonout import to_jsonable

        best = self.best
        return {
            "ks": list(self.spec.ks),
            "candidates": [candidate_label(c) for c in self.spec.candidates],
            "adaptive": self.spec.adaptive,
            "baseline_tokens_per_second": self.baseline_tokens_per_second,
            "rows": [dict(to_jsonable(r), score=r.score) for r in self.rows],
            "best": None if best is None else {"candidate": best.candidate, "k": best.k,
                                               "speedup": best.score},
            "spent_s": self.spent_s,
            "cancelled": self.cancelled,
            "summaries": [s.to_json() for s in self.summaries],
            "notes": list(self.notes),
        }


def generation_seconds(runs: Sequence[BenchRun]) -> float:
    """Seconds spent generating (prefill + decode) over every record, warm-ups included."""
    return sum(r.result.stats.prefill_s + r.result.stats.decode_s for run in runs for r in run.records)


def run_sweep(
    spec: SweepSpec,
    engine: Engine | None = None,
    on_event: EventSink | None = None,
    cancel: threading.Event | None = None,
) -> SweepResult:
    """Run every candidate's plan on one engine; stops between plans when cancelled."""
    cancel = cancel or threading.Event()
    owned = engine is None
    if engine is None:
        from specdeck.core.engines import create_engine

        engine = create_engine(spec.base.engine)
    runs: list[BenchRun] = []
    try:
        for plan in candidate_plans(spec):
            if cancel.is_set():
                break
            try:
                runs.append(run_plan(plan, engine, on_event, cancel))
            except CancelledError:
                if not runs:
                    raise
                break
    finally:
        if owned:
            engine.unload()
    return sweep_result(spec, runs)


def setting_rows(run: BenchRun, summary: BenchSummary) -> list[SweepRow]:
    """Every drafted arm of ``run`` as a candidate setting, with its paired speed-up."""
    rows = []
    for comparison in summary.comparisons:
        arm = summary.arm(comparison.arm)
        drafter = run.plan.arm(comparison.arm).drafter
        rows.append(SweepRow(
            candidate=candidate_label(drafter),
            drafter=drafter,
            k=drafter.num_draft_tokens,
            tokens_per_second=arm.tokens_per_second,
            speedup=comparison.speedup,
            acceptance_rate=arm.acceptance_rate,
            mean_acceptance_length=arm.mean_acceptance_length,
            lossless=comparison.lossless.verdict,
            arm=comparison.arm,
            **winner.facts(comparison).keywords(),
        ))
    return rows


def best_row(rows: Sequence[SweepRow]) -> SweepRow | None:
    """The winning row by ``core.bench.winner``'s rule; None when none beats no draft."""
    return winner.pick(rows, SweepRow.standing)


def sweep_result(spec: SweepSpec, runs: Sequence[BenchRun],
                 summaries: Sequence[BenchSummary] | None = None) -> SweepResult:
    """The table of a finished (or partly finished) sweep: one run per candidate
    (``run_sweep``) or one run of ``sweep_plan``."""
    summaries = list(summaries) if summaries is not None else [summarize(run) for run in runs]
    rows = [row for run, summary in zip(runs, summaries) for row in setting_rows(run, summary)]
    baselines = sorted(s.arm(s.reference).tokens_per_second for s in summaries
                       if s.arm(s.reference).tokens_per_second is not None)
    expected = len(spec.candidates) * len(spec.ks)
    return SweepResult(
        spec=spec,
        runs=tuple(runs),
        summaries=tuple(summaries),
        rows=tuple(rows),
        baseline_tokens_per_second=baselines[len(baselines) // 2] if baselines else None,
        spent_s=generation_seconds(runs),
        cancelled=any(r.cancelled for r in runs) or len(rows) < expected,
    )


def sweep_grid(rows: Sequence[SweepRow], ks: Sequence[int] | None = None
               ) -> tuple[list[int], list[tuple[str, list[SweepRow | None]]]]:
    """Candidates down, k across: (ks, [(candidate, its row per k or None)]), in row order."""
    ks = sorted({r.k for r in rows}) if ks is None else list(ks)
    cells = {(r.candidate, r.k): r for r in rows}
    candidates = dict.fromkeys(r.candidate for r in rows)
    return ks, [(c, [cells.get((c, k)) for k in ks]) for c in candidates]


def sweep_table(result: SweepResult, markdown: bool = True) -> str:
    """Candidates down, k across, like the public draft-max tables: "tok/s (speed-up)" per
    cell, the best cell in bold (or starred in plain text)."""
    best = result.best
    ks, grid = sweep_grid(result.rows, result.spec.ks)
    header = ["draft \\ k"] + [str(k) for k in ks]
    body = []
    for candidate, row_per_k in grid:
        cells = [candidate]
        cells += ["-" if row is None else
                  rate_cell(row.tokens_per_second, row.speedup, row is best, markdown)
                  for row in row_per_k]
        body.append(cells)
    baseline = result.baseline_tokens_per_second
    lines = text_table(header, body, markdown)
    lines.append("")
    if any(f"({NO_PAIR})" in cell for row in body for cell in row):
        lines.append(NO_PAIR_NOTE)
    if baseline is not None:
        lines.append(f"No draft: {baseline:.1f} tok/s (median of the reference arms).")
    passed = passed_over_text(winner.passed_over(result.rows, SweepRow.standing, best))
    could = " that could win" if passed else ""
    lines.append("Best: " + (f"no draft (no setting{could} beat decoding without one)"
                             if best is None else
                             f"{best.candidate}, k={best.k}: {best.score:.2f}x"))
    if passed:
        lines.append(f"Not the best although as fast: {passed}")
    return "\n".join(lines) + "\n"


def passed_over_text(passed) -> str:
    """Swept settings that cannot be the best although as fast (``passed``: (SweepRow, why)
    pairs from core.bench.winner.passed_over), in core.bench.winner's words: the table, the
    CLI's --apply and the A/B page say them alike; "" for none."""
    return winner.passed_over_text(passed, SweepRow.standing, lambda row: row.name)


# Apply --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class BestSettingChange:
    """A planned config.yml edit for the sweep's winner; nothing is written yet."""

    change: Any
    """core.config.ConfigChange."""
    notes: tuple[str, ...]

    @property
    def diff(self) -> str:
        return self.change.diff()

    @property
    def is_noop(self) -> bool:
        return self.change.is_noop


def plan_apply_best(best: SweepRow | None, config_path: str | Path,
                    draft_folder: str | Path | None = None) -> BestSettingChange:
    """Plan writing the sweep's ``best`` row (None = no draft) into ``config_path``."""
    return plan_apply_setting(None if best is None else best.drafter, config_path, draft_folder)


def why_not_applicable(plan) -> str:
    """Why a plan's best setting has no TabbyAPI config.yml to go into ("" when it has): the
    embedded demo runs inside SpecDeck, served by no one (the A/B page's Apply and `bench
    --apply` both refuse it); a running server's settings are not SpecDeck's to write from
    the page (the CLI's --apply writes a llama-swap cmd or a TabbyAPI config from server arms
    by their own rules, so it asks this of its other plans only)."""
    from specdeck.core.engines.demo import is_demo_alias

    if plan.engine == SERVER_ENGINE:
        return ("These arms are servers: their settings are written by the llama-swap and "
                "Tune pages (or specdeck bench --apply), not from here.")
    if is_demo_alias(plan.model):
        return ("The demo model runs inside SpecDeck, served by no one: there is no config "
                "to write. Its best setting is in the A/B's result.")
    return ""


def plan_apply_setting(drafter: DrafterSpec | None, config_path: str | Path,
                       draft_folder: str | Path | None = None) -> BestSettingChange:
    """Plan writing ``drafter`` (its kind, folder and k; None = no draft) into the config.yml
    at ``config_path``.

    ``draft_folder``: the folder TabbyAPI should load, when it differs from the folder the
    benchmark ran (e.g. the EXL2 quant of the same draft); default the benchmarked folder.
    """
    from specdeck.core import config
    from specdeck.core.config.schema import DRAFT, DRAFT_MODE_NGRAM, EXLLAMAV3

    doc = config.load(expand_user(config_path))
    backend = doc.backend_hint()
    changes: dict[tuple[str, str], Any] = {}
    notes: list[str] = []
    if drafter is None or drafter.kind is DrafterKind.NONE:
        changes[(DRAFT, "draft_model_name")] = ""
        notes.append("No setting beat decoding without a draft: the draft model is switched off.")
    elif drafter.kind is DrafterKind.NGRAM:
        if backend != EXLLAMAV3:
            raise InvalidInputError(
                "The best setting is n-gram drafting, which TabbyAPI's ExLlamaV2 backend cannot "
                "be configured for in config.yml.",
                "Use n-gram drafting with the ExLlamaV3 backend, or apply the best draft model.")
        changes[(DRAFT, "draft_mode")] = DRAFT_MODE_NGRAM
        changes[(DRAFT, "draft_num_tokens")] = drafter.num_draft_tokens
        changes[(DRAFT, "ngram_match_min")] = drafter.ngram_min
    else:
        from specdeck.core.engines.demo import is_demo_alias

        if draft_folder is None and is_demo_alias(drafter.model_path):
            raise InvalidInputError(
                "The best draft is SpecDeck's embedded demo model, which lives in SpecDeck's "
                "cache, not in a folder TabbyAPI loads from.",
                "Download the same model (SmolLM2-135M-Instruct) into TabbyAPI's draft model "
                "folder and apply that, or apply another setting.")
        folder = expand_user(draft_folder or drafter.model_path).resolve()
        changes[(DRAFT, "draft_model_name")] = folder.name
        if doc.resolve_dir(DRAFT, "draft_model_dir").resolve() != folder.parent:
            changes[(DRAFT, "draft_model_dir")] = str(folder.parent)
        if backend == EXLLAMAV3:
            changes[(DRAFT, "draft_num_tokens")] = drafter.num_draft_tokens
        else:
            notes.append(f"k={drafter.num_draft_tokens} is not written: TabbyAPI's "
                         f"{backend or 'ExLlamaV2'} backend has no draft_num_tokens key "
                         "(ExLlamaV2 always drafts 4 tokens per step).")
    return BestSettingChange(config.plan_change(doc, changes), tuple(notes))


def plan_apply_draft_name(draft_name: str | None, config_path: str | Path) -> BestSettingChange:
    """Plan writing the winning TabbyAPI arm's draft (a folder name in the draft_model_dir
    TabbyAPI loaded it from; None = no draft won) into config.yml: only draft_model_name
    changes, since the arms differed in nothing else."""
    from specdeck.core import config
    from specdeck.core.config.schema import DRAFT

    doc = config.load(expand_user(config_path))
    notes = [] if draft_name else [
        "No draft beat decoding without one: the draft model is switched off."]
    return BestSettingChange(config.plan_change(doc, {(DRAFT, "draft_model_name"): draft_name or ""}),
                             tuple(notes))


def apply_best(planned: BestSettingChange, force: bool = False, backup: bool = True):
    """Save a planned change (after the user confirmed its diff); returns core.config.SaveResult."""
    from specdeck.core import config

    return config.save(planned.change, force=force, backup=backup)
