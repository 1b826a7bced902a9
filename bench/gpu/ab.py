"""The A/B runs: baseline, draft model at several k, n-gram; greedy; several repeats.

:func:`run_arms` is the one function that talks to SpecDeck: it runs the arms through
SpecDeck's A/B runner (``core.bench.run_plan``, the code behind ``specdeck bench``) and
flattens its records into :class:`RunRecord`. Arms run interleaved per prompt, in alternating
order, so slow drift of clocks or temperature hits all arms alike.
Every run asks for exactly ``max_new_tokens`` (no stop on EOS): arms compare equal lengths.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Arm:
    name: str
    kind: str
    """"none", "model" or "ngram" (DrafterKind values)."""
    k: int = 0

    def drafter(self, draft_dir: Path | None):
        from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec

        if self.kind == "none":
            return NO_DRAFT
        kind = DrafterKind(self.kind)
        return DrafterSpec(kind, Path(draft_dir) if kind is DrafterKind.MODEL else None,
                           num_draft_tokens=self.k, adaptive=False)


BASELINE = "baseline"


def default_arms(draft_ks: tuple[int, ...], ngram_k: int) -> list[Arm]:
    arms = [Arm(BASELINE, "none")]
    arms += [Arm(f"draft k={k}", "model", k) for k in draft_ks]
    arms.append(Arm(f"n-gram k={ngram_k}", "ngram", ngram_k))
    return arms


@dataclass(frozen=True)
class PromptCase:
    id: str
    text: str


def select_prompts(suites: tuple[str, ...], per_suite: int) -> list[PromptCase]:
    from specdeck.core.bench.suites import builtin_suites

    found = builtin_suites()
    cases = []
    for name in suites:
        for prompt in found[name].prompts[:per_suite]:
            cases.append(PromptCase(f"{name}/{prompt.id}", prompt.text))
    return cases


@dataclass(frozen=True)
class RunRecord:
    arm: str
    prompt: str
    repeat: int
    new_tokens: int
    decode_s: float
    tokens_per_second: float
    steps: int
    drafted: int
    accepted: int
    token_ids: tuple[int, ...]
    roofline_share: float | None = None
    """Weights read per second over the GPU's peak memory bandwidth (core.bench.summary)."""

    @classmethod
    def from_result(cls, arm: str, prompt: str, repeat: int, result: Any,
                    peak_bandwidth: float | None = None) -> RunRecord:
        s = result.stats
        rate = s.weight_read_rate
        return cls(arm, prompt, repeat, s.new_tokens, s.decode_s, s.tokens_per_second,
                   s.steps, s.drafted, s.accepted, tuple(result.token_ids),
                   rate / peak_bandwidth if rate is not None and peak_bandwidth else None)


def run_arms(
    engine_name: str,
    target: Path,
    draft: Path | None,
    arms: list[Arm],
    prompts: list[PromptCase],
    repeats: int,
    max_new_tokens: int,
    context: int | None = None,
    cache_mode: str = "FP16",
    log: Callable[[str], None] = print,
) -> list[RunRecord]:
    """Every arm x prompt x repeat through SpecDeck's own A/B runner (core.bench.run_plan):
    one loaded target, drafters switched, arms interleaved per prompt in alternating order."""
    from specdeck.core.bench import plan as bench_plan
    from specdeck.core.bench.runner import RunFinished, run_plan
    from specdeck.core.engines.base import LoadSpec

    by_id = {case.id.split("/", 1)[1]: case.id for case in prompts}
    plan = bench_plan.BenchPlan(
        engine=engine_name,
        model=str(target),
        arms=tuple(bench_plan.Arm(arm.name, arm.drafter(draft)) for arm in arms),
        suites=tuple(dict.fromkeys(case.id.split("/", 1)[0] for case in prompts)),
        prompt_ids=tuple(by_id),
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        warmup=0,
        apply_chat_template=False,
        stop_on_eos=False,
        load=LoadSpec(Path(target), max_seq_len=context, cache_mode=cache_mode,
                      draft_cache_mode=cache_mode),
    )

    def progress(event: object) -> None:
        if isinstance(event, RunFinished):
            record = event.record
            log(f"   repeat {record.slot.repeat + 1}, {record.arm}, {record.prompt_id}: "
                f"{record.result.stats.tokens_per_second:.1f} tok/s")

    run = run_plan(plan, on_event=progress)
    peak = run.environment.get("memory_bandwidth_peak")
    return [RunRecord.from_result(r.arm, by_id[r.prompt_id], r.slot.repeat, r.result, peak)
            for r in run.counted()]


# Summaries -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ArmSummary:
    arm: str
    runs: int
    median_tokens_per_second: float
    acceptance_rate: float | None
    mean_acceptance_length: float | None
    speedup_median: float | None
    speedup_ci: tuple[float, float] | None
    """95% bootstrap interval of the median paired speed-up (same prompt and repeat)."""
    identical_to_baseline: int
    """Runs whose tokens equal the baseline's for the same prompt."""
    first_divergence: int | None
    """Earliest differing token index among the runs that differ."""
    roofline_share: float | None = None
    """Median share of the GPU's peak memory bandwidth spent reading weights."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(records: list[RunRecord]) -> list[ArmSummary]:
    from specdeck.core.bench.stats import first_divergence, summarize_ratios

    arms = list(dict.fromkeys(r.arm for r in records))
    baseline = {(r.prompt, r.repeat): r for r in records if r.arm == BASELINE}
    reference = {}
    for r in records:
        if r.arm == BASELINE:
            reference.setdefault(r.prompt, r.token_ids)
    summaries = []
    for arm in arms:
        runs = [r for r in records if r.arm == arm]
        drafted = sum(r.drafted for r in runs)
        accepted = sum(r.accepted for r in runs)
        steps = sum(r.steps for r in runs)
        ratios = [r.tokens_per_second / baseline[(r.prompt, r.repeat)].tokens_per_second
                  for r in runs if (r.prompt, r.repeat) in baseline
                  and baseline[(r.prompt, r.repeat)].tokens_per_second > 0]
        speedup = summarize_ratios(ratios) if ratios and arm != BASELINE else None
        divergences = [first_divergence(reference[r.prompt], r.token_ids)
                       for r in runs if r.prompt in reference]
        differing = [d.position for d in divergences if d is not None]
        summaries.append(ArmSummary(
            arm=arm,
            runs=len(runs),
            median_tokens_per_second=statistics.median(r.tokens_per_second for r in runs),
            acceptance_rate=accepted / drafted if drafted else None,
            mean_acceptance_length=1 + accepted / steps if drafted and steps else None,
            speedup_median=speedup.median if speedup else None,
            speedup_ci=(speedup.ci_low, speedup.ci_high) if speedup else None,
            identical_to_baseline=sum(d is None for d in divergences),
            first_divergence=min(differing) if differing else None,
            roofline_share=_median_or_none([r.roofline_share for r in runs]),
        ))
    return summaries


def _median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


@dataclass(frozen=True)
class Overhead:
    specdeck_median: float
    bare_median: float
    ratio: float
    """SpecDeck baseline tok/s / bare exllamav2 loop tok/s (medians)."""
    paired_ratio_ci: tuple[float, float]
    goal: float = 0.98

    @property
    def met(self) -> bool:
        return self.ratio >= self.goal

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "met": self.met}


def overhead(specdeck_tps: list[float], bare_tps: list[float]) -> Overhead:
    """Runs were interleaved pairwise (SpecDeck, bare, SpecDeck, bare, ...)."""
    from specdeck.core.bench.stats import paired_ratios, summarize_ratios

    paired = summarize_ratios(paired_ratios(bare_tps, specdeck_tps))
    s, b = statistics.median(specdeck_tps), statistics.median(bare_tps)
    return Overhead(s, b, s / b if b else 0.0, (paired.ci_low, paired.ci_high))
