"""The A/B runs: baseline, draft model at several k, n-gram; greedy; several repeats.

Everything here is SpecDeck's own A/B: :func:`run_arms` builds a ``core.bench`` plan (the
code behind ``specdeck bench``) and runs it; :func:`arm_rows` flattens ``core.bench.summary``
(paired speed-ups with bootstrap intervals, pooled acceptance, losslessness with float ties
told from real divergences) into the kit's JSON. The kit keeps no data model or statistics of
its own. Arms run interleaved per prompt, in alternating order, so slow drift of clocks or
temperature hits all arms alike. Every run asks for exactly ``max_new_tokens`` (no stop on
EOS): arms compare equal lengths.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BASELINE = "baseline"


def default_arms(draft_dir: Path | None, draft_ks: tuple[int, ...], ngram_k: int) -> tuple:
    """core.bench Arms: the baseline, the draft model at each k, n-gram at ``ngram_k``; fixed k
    (ExLlamaV2 always drafts exactly k)."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec

    arms = [Arm(BASELINE, NO_DRAFT)]
    if draft_dir is not None:
        arms += [Arm(f"draft k={k}", DrafterSpec(DrafterKind.MODEL, Path(draft_dir),
                                                 num_draft_tokens=k, adaptive=False))
                 for k in draft_ks]
    arms.append(Arm(f"n-gram k={ngram_k}", DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=ngram_k,
                                                       adaptive=False)))
    return tuple(arms)


def select_prompts(suites: tuple[str, ...], per_suite: int) -> list:
    """The first ``per_suite`` prompts of each named built-in suite (core.bench's Prompt)."""
    from specdeck.core.bench.suites import first_prompts

    return first_prompts(suites, per_suite)


def run_arms(
    engine_name: str,
    target: Path,
    arms: tuple,
    prompts: list,
    repeats: int,
    max_new_tokens: int,
    context: int | None = None,
    cache_mode: str = "FP16",
    log: Callable[[str], None] = print,
    warmup: int = 0,
):
    """Every arm x prompt x repeat through SpecDeck's own A/B runner (core.bench.run_plan):
    one loaded target, drafters switched, arms interleaved per prompt in alternating order.
    Returns the core BenchRun."""
    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.runner import RunFinished, run_plan
    from specdeck.core.engines.base import LoadSpec

    plan = BenchPlan(
        engine=engine_name,
        model=str(target),
        arms=arms,
        suites=tuple(dict.fromkeys(prompt.suite for prompt in prompts)),
        prompt_ids=tuple(prompt.id for prompt in prompts),
        max_new_tokens=max_new_tokens,
        repeats=repeats,
        warmup=warmup,
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

    return run_plan(plan, on_event=progress)


def arm_rows(summary) -> list[dict[str, Any]]:
    """One JSON row per arm of a ``core.bench.summary.BenchSummary``, as the kit reports it."""
    rows = []
    for arm in summary.arms:
        comparison = None if arm.name == summary.reference else summary.comparison(arm.name)
        speedup = comparison.speedup if comparison else None
        check = comparison.lossless if comparison else None
        first = min((d.position for d in check.divergences), default=None) if check else None
        rows.append({
            "arm": arm.name,
            "runs": arm.runs,
            "median_tokens_per_second": arm.tokens_per_second,
            "acceptance_rate": arm.acceptance_rate,
            "mean_acceptance_length": arm.mean_acceptance_length,
            "speedup_median": speedup.median if speedup else None,
            "speedup_ci": (speedup.ci_low, speedup.ci_high) if speedup else None,
            "identical_to_baseline": check.identical if check else arm.runs,
            "ties": check.ties if check else 0,
            "diverged": check.diverged if check else 0,
            "lossless": check.verdict if check else "reference",
            "first_divergence": first,
            # the target's top-1 minus top-2 logit where each run parted (the engine reports
            # it for greedy runs): ~0 is a float tie, a clear gap is a divergence to explain
            "divergence_gaps": [d.gap for d in check.divergences] if check else [],
            "roofline_share": arm.roofline_share,
        })
    return rows


def run_row(arm: str, prompt: str, repeat: int, result: Any) -> dict[str, Any]:
    """One run's figures for the kit's JSON (no token ids)."""
    s = result.stats
    return {"arm": arm, "prompt": prompt, "repeat": repeat, "new_tokens": s.new_tokens,
            "decode_s": s.decode_s, "tokens_per_second": s.tokens_per_second, "steps": s.steps,
            "drafted": s.drafted, "accepted": s.accepted}


@dataclass(frozen=True)
class Overhead:
    specdeck_median: float
    bare_median: float
    ratio: float
    """Median of the paired ratios SpecDeck baseline tok/s / bare exllamav2 loop tok/s (runs
    made side by side), the statistic every speed-up in SpecDeck is (core.bench.stats)."""
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
    return Overhead(s, b, paired.median, (paired.ci_low, paired.ci_high))
