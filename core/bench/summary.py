"""Turn a finished A/B run into the numbers a user can trust, and a plain verdict.

``summarize(run)`` pairs every run of a drafting arm with the reference arm's run of the same
prompt in the same repeat (the runner interleaves them, so drift hits both) and reports:

- per arm: median decode tok/s and time to first token, pooled acceptance (accepted /
  drafted over every run, not a mean of rates), mean acceptance length (1 + accepted /
  drafts, as vLLM, SGLang and llama.cpp compute it), pooled acceptance by draft position
  (``draft_positions``, with where it came from: the engine's count or the server's
  counters, or that the server reports none), peak memory;
- per drafting arm: the speed-up as the median of paired tok/s ratios (with min/max and a
  bootstrap interval), overall and by prompt tag; whether it drafted (``not_drafting``,
  ``drafting_unknown``); losslessness (core.bench.lossless); the theory beside the
  measurement (core.bench.theory); and its verdict, with the likely causes when drafting
  made things slower (core.bench.slowdown).

Nothing here imports torch; a tokenizer is read only to show the text around a divergence.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specdeck.core.bench import stats
from specdeck.core.bench.lossless import Decoder, LazyDecoder, LosslessCheck, check_lossless
from specdeck.core.bench.noise import disturbed_runs, noise
from specdeck.core.bench.plan import Arm
from specdeck.core.bench.runner import BenchRun, RunRecord
from specdeck.core.bench.slowdown import verdict_of
from specdeck.core.bench.theory import Theory, theory_of
from specdeck.core.engines.base import (
    DrafterKind,
    acceptance_rate,
    count_at,
    mean_acceptance_length,
    position_rates,
    position_shares,
)

ENGINE_COUNT = "engine count"
"""Where an in-process engine's acceptance comes from: it counts every draft token."""
SERVER_COUNTERS = "server counters"
"""Where a server arm's positions come from: its /metrics counters' growth around each run
(core.servers.counters.CountedDraft)."""
NOT_REPORTED = "not reported by the server"


@dataclass(frozen=True)
class DraftPositions:
    """Acceptance by draft position for one drafting arm, pooled over its runs.

    Position i (0-based here, shown 1-based) is kept only when every earlier one was. Two
    figures, defined in core.engines.base: the share of all drafts whose first i+1 tokens
    were kept (``shares``, SHARE_OF_DRAFTS: what the chart shows, for every source; it never
    rises with i), and the share of the drafts that reached position i that kept it
    (``of_reached``, OF_REACHED: engines count the drafts reaching each position; a
    server's counters do not, unless every draft was k long)."""

    reached: tuple[int, ...]
    """Index i: drafts that reached position i; () where the source does not say."""
    accepted: tuple[int, ...]
    """Index i: drafts whose token at position i was kept (a server: every position its
    counters report, zeros included)."""
    drafts: int
    """Verify steps that carried a draft, over the counted runs."""
    accepted_tokens: int
    """Draft tokens kept over the counted runs (the sum over positions, when reported)."""
    source: str
    """ENGINE_COUNT, SERVER_COUNTERS, or NOT_REPORTED (then no figure below is known)."""
    runs: int
    """Runs whose positions are counted here."""
    of_runs: int
    """The arm's counted runs (a server run whose counters failed their checks is left out)."""

    @property
    def reported(self) -> bool:
        return self.source != NOT_REPORTED

    @property
    def shares(self) -> tuple[float | None, ...]:
        """SHARE_OF_DRAFTS per position: accepted_i / drafts (None without a draft)."""
        return position_shares(self.accepted, self.drafts)

    @property
    def of_reached(self) -> tuple[float | None, ...]:
        """OF_REACHED per position: accepted_i / reached_i; () where reached is not known."""
        return position_rates(self.accepted, self.reached)

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts (engines.base.mean_acceptance_length)."""
        return mean_acceptance_length(self.accepted_tokens, self.drafts) if self.reported else None

    @property
    def label(self) -> str:
        """Where the figures come from, as a legend and a report say it."""
        if not self.reported:
            return NOT_REPORTED
        runs = "" if self.runs == self.of_runs else f", {self.runs} of {self.of_runs} runs"
        return f"{self.source}{runs}"

    def to_json(self) -> dict[str, Any]:
        """The counts, and the figures and length derived from them, so readers need not
        recompute them; "reported": false says the server gave none (never zeros);
        "reached": null says the source does not count the drafts reaching each position."""
        return {"source": self.source, "reported": self.reported, "label": self.label,
                "drafts": self.drafts, "accepted_tokens": self.accepted_tokens,
                "reached": list(self.reached) if self.reached or not self.reported
                or not self.drafts else None,
                "accepted": list(self.accepted),
                "share_of_all_drafts": list(self.shares),
                "of_drafts_that_reached": list(self.of_reached) if self.reached else None,
                "mean_acceptance_length": self.mean_acceptance_length,
                "runs": self.runs, "of_runs": self.of_runs}


def draft_positions(records: Sequence[RunRecord]) -> DraftPositions:
    """One arm's acceptance by draft position, from its runs' records: the one pooling the
    A/B page's chart, the reports and the summary use.

    A server run counts when its counters were read and passed their checks
    (``metrics_drafted`` set, and positions whenever it drafted); one that drafted nothing
    counts with zero drafts. Where no run's server reported positions the result says
    NOT_REPORTED and holds no figure: nothing is filled in. Counts are summed position by
    position, a run's missing positions counting zero (it had no draft, or kept no token,
    there); the drafts reaching each position are known only when every run that drafted
    says them."""
    counted, server = [], False
    for record in records:
        stats, reading = record.result.stats, record.result.server
        if reading is None:
            counted.append(stats)
            continue
        server = True
        # A run that drafted counts only with its verify steps and positions: counted with
        # none, it made "no drafts" stand beside the tokens it had accepted.
        if reading.metrics_drafted is not None and (
                (stats.per_position_accepted and stats.draft_steps) or stats.drafted == 0):
            counted.append(stats)
    if server and not counted:
        return DraftPositions((), (), 0, 0, NOT_REPORTED, 0, len(records))
    width = max((max(len(s.per_position_drafted), len(s.per_position_accepted))
                 for s in counted), default=0)
    known = all(s.per_position_drafted or not s.draft_steps for s in counted)
    reached = tuple(sum(count_at(s.per_position_drafted, i) for s in counted)
                    for i in range(width)) if known else ()
    accepted = tuple(sum(count_at(s.per_position_accepted, i) for s in counted)
                     for i in range(width))
    return DraftPositions(reached, accepted, sum(s.draft_steps for s in counted),
                          sum(s.accepted for s in counted),
                          SERVER_COUNTERS if server else ENGINE_COUNT, len(counted), len(records))


@dataclass(frozen=True)
class ArmSummary:
    """What one arm measured over its counted runs."""

    name: str
    label: str
    drafter: str
    """none / model / ngram."""
    k: int | None
    """Draft tokens per step (the most per step when adaptive); None without a drafter."""
    adaptive: bool
    runs: int
    tokens_per_second: float | None
    """Median decode tok/s."""
    time_to_first_token_s: float | None
    """Median."""
    acceptance_rate: float | None
    """Pooled: accepted / drafted over all runs."""
    mean_acceptance_length: float | None
    """Pooled: 1 + accepted / drafts (engines.base.mean_acceptance_length), over the runs
    ``positions`` counts; where it comes from is ``positions.label``."""
    per_position_acceptance: tuple[float | None, ...]
    """Pooled per draft position: ``positions.shares`` (SHARE_OF_DRAFTS: of all drafts, the
    share whose first i+1 tokens were kept)."""
    step_time_s: float | None
    """Median decode seconds per verify step (per token for the reference)."""
    peak_memory_bytes: int | None
    memory_kind: str
    drafted: int
    accepted: int
    steps: int
    new_tokens: int
    weight_read_rate: float | None = None
    """Median bytes of weights read per second of decoding (engine-counted; see
    base.weights_read): bytes per generated token over time per generated token."""
    roofline_share: float | None = None
    """weight_read_rate over the GPU's peak memory bandwidth (NVML); None off a GPU."""
    server_tokens_per_second: float | None = None
    """Server arms: the median of the server's own decode rate, beside the client's."""
    acceptance_source: str = ""
    """Server arms: which reported field the acceptance comes from, that the server
    reports none, or "not usable: why" when what it reported failed its checks (then
    acceptance_rate is None: never a made-up number)."""
    failed_runs: int = 0
    """Measured runs that failed (kept in the records with their error when the plan skips
    failed runs); they are in no statistic."""
    errors: tuple[str, ...] = ()
    """The failed runs' distinct errors, in order."""
    not_usable: tuple[str, ...] = ()
    """Why some of this arm's runs gave no usable figure (a speed or a reading that failed
    its checks), distinct, in order; those figures are in no statistic."""
    positions: DraftPositions | None = None
    """Acceptance by draft position (draft_positions); None for an arm without a drafter."""

    @property
    def all_failed(self) -> bool:
        """Every measured run failed: the arm measured nothing."""
        return self.failed_runs > 0 and self.runs == 0


@dataclass(frozen=True)
class Comparison:
    """A drafting arm against the reference arm."""

    arm: str
    label: str
    speedup: stats.RatioSummary | None
    by_tag: dict[str, stats.RatioSummary]
    lossless: LosslessCheck
    theory: Theory | None
    verdict: str
    """One line: faster / slower / no clear difference, with the numbers."""
    causes: tuple[str, ...] = ()
    """When slower: the likely causes, most likely first."""
    not_usable: str = ""
    """Why this arm has no speed-up ("" when it has one): every run failed, no run's speed
    (or the reference's) passed its checks. Such an arm is never ranked or called slower."""

    not_drafting: str = ""
    """Why this drafting arm is not a drafting result ("" when it drafted): it drafted
    nothing in any run, as counted by its engine or reported by its server (a server started
    without --spec-type, a draft that failed to load, nothing in the prompts to copy). Its
    speed-up is shown as measured, but it never wins and is not called a drafting speed-up."""
    drafting_unknown: str = ""
    """Why SpecDeck cannot tell whether this drafting arm drafted at all, and how to make it
    tellable ("" when it can): no run carried a draft count and nothing makes it draft at
    every step. Like ``not_drafting``, its speed-up is shown as measured, never wins and is
    kept out of History's best."""

    @property
    def usable(self) -> bool:
        """A speed-up was measured: the arm can be ranked (see also lossless.diverged)."""
        return self.speedup is not None and not self.not_usable

    def to_json(self) -> dict[str, Any]:
        def ratio(r: stats.RatioSummary | None) -> dict[str, Any] | None:
            if r is None:
                return None
            return {"n": r.n, "median": r.median, "min": r.minimum, "max": r.maximum,
                    "ci_low": r.ci_low, "ci_high": r.ci_high, "verdict": r.verdict}

        return {
            "arm": self.arm, "label": self.label, "speedup": ratio(self.speedup),
            "by_tag": {tag: ratio(r) for tag, r in self.by_tag.items()},
            "lossless": self.lossless, "theory": self.theory, "verdict": self.verdict,
            "causes": list(self.causes), "usable": self.usable, "not_usable": self.not_usable,
            "not_drafting": self.not_drafting, "drafting_unknown": self.drafting_unknown,
        }


@dataclass(frozen=True)
class BenchSummary:
    reference: str
    arms: tuple[ArmSummary, ...]
    comparisons: tuple[Comparison, ...]
    sampling: str
    counted_runs: int
    cancelled: bool
    notes: tuple[str, ...] = field(default=())

    def arm(self, name: str) -> ArmSummary:
        return next(a for a in self.arms if a.name == name)

    def comparison(self, name: str) -> Comparison:
        return next(c for c in self.comparisons if c.arm == name)

    def lossless_overall(self) -> LosslessCheck:
        """Every drafting arm's losslessness check pooled into one (a sweep's one line)."""
        checks = [c.lossless for c in self.comparisons]
        unchecked = next((c for c in checks if not c.checkable), None)
        if unchecked is not None:
            return unchecked
        return LosslessCheck(True, "", sum(c.compared for c in checks),
                             sum(c.identical for c in checks), sum(c.ties for c in checks),
                             tuple(d for c in checks for d in c.divergences),
                             sum(c.not_compared for c in checks),
                             tuple(w for c in checks for w in c.not_compared_why))

    @property
    def failed_arms(self) -> tuple[str, ...]:
        """Arms every measured run of which failed (a command that ran them must not exit 0)."""
        return tuple(a.name for a in self.arms if a.all_failed)

    def to_json(self) -> dict[str, Any]:
        from specdeck.core.jsonout import to_jsonable

        return {
            "reference": self.reference,
            "arms": to_jsonable(self.arms),
            "comparisons": to_jsonable(self.comparisons),
            "sampling": self.sampling,
            "counted_runs": self.counted_runs,
            "cancelled": self.cancelled,
            "notes": list(self.notes),
        }


# Summary ------------------------------------------------------------------------------------
def summarize(run: BenchRun, decode: Decoder | None = None) -> BenchSummary:
    """Every number of a finished (or stopped) run. ``decode`` turns token ids into text for
    divergence reports; by default the target's tokenizer.json is read when one is needed."""
    plan = run.plan
    reference = plan.baseline.name
    peak = run.environment.get("memory_bandwidth_peak")
    arms = tuple(_arm_summary(arm, run.counted(arm.name), peak, _failed(run, arm.name))
                 for arm in plan.arms)
    decoder = LazyDecoder(decode, run.loaded.model_path)
    busy = _disturbance(run)
    comparisons = tuple(
        _compare(run, arm, arms[0], arms[i], decoder, busy)
        for i, arm in enumerate(plan.arms) if i > 0
    )
    notes = []
    if busy is not None:
        notes.append(busy.note("this A/B's", advice="Run it again on a quiet machine."))
    if run.cancelled:
        notes.append("The run was stopped early: only the finished runs are counted.")
    if any(a.adaptive for a in arms[1:]):
        notes.append("Adaptive arms draft up to k tokens per step; the theory assumes exactly k.")
    return BenchSummary(
        reference=reference,
        arms=arms,
        comparisons=comparisons,
        sampling=plan.sampling.label,
        counted_runs=len(run.counted()),
        cancelled=run.cancelled,
        notes=tuple(notes),
    )


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def _failed(run: BenchRun, arm: str) -> list[RunRecord]:
    """The measured runs of ``arm`` that failed (the plan skipped them and went on)."""
    return [r for r in run.records if r.arm == arm and r.error and not r.slot.warmup]


def _server_problems(records: list[RunRecord]) -> tuple[list[str], list[str]]:
    """(why a run's speed is not usable, why its acceptance is not), distinct, per arm."""
    speed, acceptance = [], []
    for record in records:
        server = record.result.server
        for found, into in ((getattr(server, "speed_problem", ""), speed),
                            (getattr(server, "acceptance_problem", ""), acceptance)):
            if found and found not in into:
                into.append(found)
    return speed, acceptance


def _arm_summary(arm: Arm, records: list[RunRecord], peak_bandwidth: float | None = None,
                 failed: list[RunRecord] = ()) -> ArmSummary:
    all_stats = [r.result.stats for r in records]
    drafted = sum(s.drafted for s in all_stats)
    accepted = sum(s.accepted for s in all_stats)
    steps = sum(s.steps for s in all_stats)
    positions = draft_positions(records) if arm.drafter.kind is not DrafterKind.NONE else None
    memories = [s.peak_memory_bytes for s in all_stats if s.peak_memory_bytes]
    kinds = {s.memory_kind for s in all_stats if s.memory_kind}
    has_drafter = arm.drafter.kind is not DrafterKind.NONE
    rate = _median([s.weight_read_rate for s in all_stats if s.weight_read_rate is not None])
    server_runs = [r.result.server for r in records if r.result.server is not None]
    server_rate = _median([s.report.tokens_per_second for s in server_runs
                           if s.report.tokens_per_second is not None])
    source = ""
    speed_problems, acceptance_problems = _server_problems(records)
    acceptance_known = not acceptance_problems
    if server_runs and has_drafter:
        sources = {s.report.acceptance_source or ("Prometheus counters" if s.metrics_drafted
                                                   is not None else s.draft_source)
                   for s in server_runs}
        sources.discard("")
        source = ", ".join(sorted(sources)) or _not_reported(arm)
        acceptance_known = bool(sources) and not acceptance_problems
        if acceptance_problems:  # one garbled reading makes the server's counts suspect
            source = f"not usable: {acceptance_problems[0]}"
    not_usable = [f"{sum(1 for r in records if getattr(r.result.server, 'speed_problem', ''))} "
                  f"of {len(records)} runs have no usable speed ({speed_problems[0]})"] \
        if speed_problems else []
    if acceptance_problems:
        not_usable.append(f"acceptance: {acceptance_problems[0]}")
    measured = [s for s in all_stats if s.decode_s > 0]
    return ArmSummary(
        name=arm.name,
        label=arm.label,
        drafter=arm.drafter.kind.value,
        k=arm.drafter.num_draft_tokens if has_drafter else None,
        adaptive=has_drafter and arm.drafter.adaptive,
        runs=len(records),
        tokens_per_second=_median([s.tokens_per_second for s in measured]),
        time_to_first_token_s=_median(
            [s.time_to_first_token_s for s in all_stats if s.time_to_first_token_s is not None]
        ),
        acceptance_rate=acceptance_rate(accepted, drafted) if acceptance_known else None,
        mean_acceptance_length=positions.mean_acceptance_length
        if positions is not None and acceptance_known else None,
        per_position_acceptance=positions.shares if positions is not None else (),
        step_time_s=_median([s.decode_s / s.steps for s in measured if s.steps]),
        peak_memory_bytes=max(memories) if memories else None,
        memory_kind=kinds.pop() if len(kinds) == 1 else ",".join(sorted(kinds)),
        drafted=drafted,
        accepted=accepted,
        steps=steps,
        new_tokens=sum(s.new_tokens for s in all_stats),
        weight_read_rate=rate,
        roofline_share=rate / peak_bandwidth if rate is not None and peak_bandwidth else None,
        server_tokens_per_second=server_rate,
        acceptance_source=source,
        failed_runs=len(failed),
        errors=tuple(dict.fromkeys(r.error for r in failed)),
        not_usable=tuple(not_usable),
        positions=positions,
    )


def pairs(run: BenchRun, arm: str, reference: str | None = None
          ) -> list[tuple[RunRecord, RunRecord]]:
    """(reference run, arm run) for every prompt and repeat both finished; the reference is
    the plan's baseline unless named."""
    against = {r.pair_key: r for r in run.counted(reference or run.plan.baseline.name)}
    return [(against[r.pair_key], r) for r in run.counted(arm) if r.pair_key in against]


def _speeds(matched: list[tuple[RunRecord, RunRecord]]) -> list[tuple[float, RunRecord]]:
    """Each pair's speed-up (core.bench.stats.speedup), with the arm's run; a pair without
    both speeds is left out."""
    return [(ratio, b) for a, b in matched
            if (ratio := stats.speedup(a.result.stats.tokens_per_second,
                                       b.result.stats.tokens_per_second)) is not None]


def paired_speedup(run: BenchRun, reference: str, arm: str) -> stats.RatioSummary | None:
    """``arm``'s speed over ``reference``'s, paired by prompt and repeat as every A/B pairs
    its arms (the median of the pairs' ratios, with its interval); None when no pair has
    both speeds. For two arms neither of which is the baseline (the tune's verification:
    its winner against the current setting)."""
    speed = _speeds(pairs(run, arm, reference))
    return stats.summarize_ratios([ratio for ratio, _ in speed]) if speed else None


def _disturbance(run: BenchRun):
    """The runs another program disturbed (core.bench.noise.disturbed_runs, the one rule the
    tuner uses too), judged against this plan's own noise; None when none was."""
    return disturbed_runs(run, noise([run], run.plan.baseline.name))


def _compare(run: BenchRun, arm: Arm, ref: ArmSummary, summary: ArmSummary,
             decoder: LazyDecoder, busy=None) -> Comparison:
    matched = pairs(run, arm.name)
    speed = _speeds(matched)
    speedup = stats.summarize_ratios([ratio for ratio, _ in speed]) if speed else None
    tags = {p.id: p.tags for p in run.prompts}
    by_tag: dict[str, list[float]] = {}
    for ratio, record in speed:
        for tag in tags.get(record.prompt_id, ()):
            by_tag.setdefault(tag, []).append(ratio)
    lossless = check_lossless(run, matched, decoder)
    theory = theory_of(run, arm.drafter, summary, matched)
    not_usable = "" if speedup is not None else _why_no_speedup(ref, summary, matched)
    records = run.counted(arm.name)
    not_drafting = _why_not_drafting(arm, summary, records)
    unknown = "" if not_drafting else _why_drafting_unknown(arm, summary, records)
    verdict, causes = verdict_of(arm, speedup, summary, theory, matched, not_usable)
    strayed = 0 if busy is None else busy.strayed.get(arm.name, 0) + \
        busy.strayed.get(ref.name, 0)
    if causes and strayed:  # the machine first: it moves every figure the others rest on
        causes = (f"another program probably took the cores: {strayed} of the runs of "
                  f"{arm.name} and {ref.name} ran more than {busy.limit:.0%} away from the "
                  "other repeats of their prompt, so these timings mix a busy machine with "
                  "drafting's own cost; run it again on a quiet machine",
                  *(c for c in causes if not c.startswith("no single cause")))
    if not_drafting and speedup is not None:
        verdict = f"{arm.name} did not draft: {not_drafting}. Measured as it ran: {verdict}"
    elif unknown and speedup is not None:
        verdict = (f"{arm.name}: SpecDeck cannot tell whether it drafted ({unknown}). "
                   f"Measured as it ran, not counted as a drafting result: {verdict}")
    return Comparison(
        arm=arm.name,
        label=arm.label,
        speedup=speedup,
        by_tag={tag: stats.summarize_ratios(v) for tag, v in sorted(by_tag.items())},
        lossless=lossless,
        theory=theory,
        verdict=verdict,
        causes=causes,
        not_usable=not_usable,
        not_drafting=not_drafting,
        drafting_unknown=unknown,
    )


DRAFTED_NOTHING = "drafted nothing"
DRAFTING_UNKNOWN = "drafting unknown"


def drafting_seen(arm: Arm, records: Sequence[RunRecord]) -> str:
    """What a drafting arm's runs ``records`` show of whether it drafted, the one reading
    the finished summary (``Comparison.not_drafting``, ``drafting_unknown``) and the live view
    (core.bench.live's ``ArmSoFar``) both make: ``DRAFTED_NOTHING`` when a run counted its
    drafts (``drafts_counted``), none drafted any and no count failed its checks;
    ``DRAFTING_UNKNOWN`` when no run carried a count and nothing drafts at every step by
    construction; "" otherwise (it drafted, it drafts no way, nothing ran, or a count failed
    its checks: a garbled count shows neither)."""
    if arm.drafter.kind is DrafterKind.NONE or not records or \
            any(r.result.stats.drafted for r in records):
        return ""
    readings = [r.result.server for r in records]
    if any(drafts_counted(s) for s in readings):
        if any(getattr(s, "acceptance_problem", "") for s in readings):
            return ""
        return DRAFTED_NOTHING
    if any(s.drafts_by_construction for s in readings):
        return ""
    return DRAFTING_UNKNOWN


def _why_not_drafting(arm: Arm, summary: ArmSummary, records: Sequence[RunRecord]) -> str:
    """Why a drafting arm is not drafting ("" when it drafted, or when nobody reported
    whether it did: a server that reports no acceptance is unknown, not idle)."""
    if arm.drafter.kind is DrafterKind.NONE or not summary.runs or summary.drafted:
        return ""
    before = _said_before(arm)
    if drafting_seen(arm, records) != DRAFTED_NOTHING:
        return before
    where = (f", by {summary.acceptance_source}" if summary.acceptance_source else "")
    runs = f"it drafted nothing in {summary.runs} run{'s' if summary.runs != 1 else ''}{where}"
    if before:
        return f"{before}; {runs}"
    return (f"{runs} (a server started without --spec-type, a draft that did not load, or "
            "prompts with nothing its drafter could propose)")


def _not_reported(arm: Arm) -> str:
    """A drafting server arm's acceptance source where no run carried counts, with why where
    SpecDeck knows it (TabbyAPI: none over HTTP; its log, when SpecDeck started it)."""
    from specdeck.core.servers.kinds import ServerKind
    from specdeck.core.servers.tabby_launch import NO_HTTP_COUNTS

    server = arm.server
    if server is not None and server.tabby_launch is not None:
        return f"not reported by this server ({_tabby_log_empty()})"
    if server is not None and (server.tabby is not None
                               or server.kind is ServerKind.TABBYAPI):
        return (f"not reported by this server ({NO_HTTP_COUNTS}; SpecDeck reads them from "
                "TabbyAPI's log only when it starts TabbyAPI itself)")
    return "not reported by this server"


def _tabby_log_empty() -> str:
    from specdeck.core.servers.tabby_launch import EXL2_LOGS_NONE

    return f"TabbyAPI's log had no draft counts for these requests: {EXL2_LOGS_NONE}"


def _why_drafting_unknown(arm: Arm, summary: ArmSummary, records: Sequence[RunRecord]) -> str:
    """Why nobody can tell whether a drafting server arm drafted, with how to make it
    tellable ("" when it can be told): no run carried a draft count (none in the responses,
    no counters around the runs, nothing in a log SpecDeck read), and the arm does not
    draft at every step by construction. llama-server's timings leave ``draft_n`` out of a
    request that drafted nothing, so without /metrics a server that never drafted looks
    like one that reports nothing."""
    from specdeck.core.servers.kinds import TRAITS, ServerKind

    if drafting_seen(arm, records) != DRAFTING_UNKNOWN:
        return ""
    readings = [r.result.server for r in records]
    if arm.server is not None and arm.server.tabby_launch is not None:
        return _tabby_log_empty()
    try:
        kind = ServerKind(readings[0].report.kind)
    except ValueError:
        kind = ServerKind.OPENAI
    return TRAITS[kind].tellable


def drafts_counted(server) -> bool:
    """Whether a run's drafted count is a count: an engine's own (no ``server`` reading), or
    a server's that reported one (in its response, counted by /metrics around the run, or
    read from its log), a reported one that failed its checks included. A drafting arm none
    of whose runs has one cannot be told from one that never drafted (the summary's
    ``drafting_unknown``; the live view's, core.bench.live, asks the same)."""
    return server is None or bool(server.report.acceptance_source) or \
        server.metrics_drafted is not None or bool(server.draft_source)


def _said_before(arm: Arm) -> str:
    """Why a launched llama-server arm was not going to draft, as its flags, its binary's
    --help and its draft's GGUF said before the run ("" when it was, or cannot be told)."""
    if arm.server is None or arm.server.launch is None:
        return ""
    from specdeck.core.servers.probe import launched_drafting

    said = launched_drafting(arm.server.launch)
    return f"{said.why} (said before the run)" if said.drafts is False else ""


def _why_no_speedup(ref: ArmSummary, arm: ArmSummary,
                    matched: list[tuple[RunRecord, RunRecord]]) -> str:
    """Why an arm has no speed-up, said for what happened (never a 0.00x)."""
    for side, who in ((arm, f"arm {arm.name}"), (ref, f"the reference {ref.name}")):
        if side.all_failed:
            return (f"every measured run of {who} failed ({side.failed_runs} of "
                    f"{side.failed_runs}: {side.errors[0]})")
    for side, who in ((arm, f"arm {arm.name}"), (ref, f"the reference {ref.name}")):
        if side.runs and side.tokens_per_second is None:
            why = side.not_usable[0] if side.not_usable else "nothing was measured"
            return f"no run of {who} has a usable speed ({why})"
    if not matched:
        return "no run of this arm has a finished reference run of the same prompt beside it"
    problems = [*arm.not_usable, *ref.not_usable]
    return "no pair of runs has a usable speed on both sides" + (
        f" ({problems[0]})" if problems else "")


