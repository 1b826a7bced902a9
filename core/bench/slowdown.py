"""Why drafting made an arm slower: the verdict an A/B says of a drafting arm, and when it
looks slower, the likely causes (low acceptance, a speculative step dearer than what it
yields, a long context), each from the arm's own measurements.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from specdeck.core.bench import stats, winner
from specdeck.core.bench.plan import Arm
from specdeck.core.bench.runner import RunRecord
from specdeck.core.bench.theory import Theory
from specdeck.core.engines.base import DrafterKind

if TYPE_CHECKING:
    from specdeck.core.bench.summary import ArmSummary


LOW_ACCEPTANCE = 0.5
"""Below this pooled acceptance rate, low acceptance is named as a cause of a slow-down."""


LONG_CONTEXT_TOKENS = 2048
"""Prompt + output above this many tokens: attention starts to weigh on every verify step."""


CLEARLY_SLOWER = 0.95
"""A median below this is named as looking slower, with the likely causes, even where the
interval still reaches 1.0; only an interval below 1.0 is called SLOWER."""


DEAR_STEP = 1.15
"""A speculative step costing more target forwards than this is named as a cost."""


def verdict_of(arm: Arm, speedup: stats.RatioSummary | None, summary: ArmSummary,
               theory: Theory | None, matched: list[tuple[RunRecord, RunRecord]],
               not_usable: str = "") -> tuple[str, tuple[str, ...]]:
    """A drafting arm's verdict in words, and when it looks slower the likely causes."""
    if speedup is None:
        return f"{arm.name}: not usable: {not_usable}; no speed-up to report.", ()
    span = (f"{speedup.median:.2f}x (min {speedup.minimum:.2f}, max {speedup.maximum:.2f}, "
            f"{speedup.interval_text()})")
    clearly = winner.clearly_slower(speedup)
    if not clearly and speedup.median >= CLEARLY_SLOWER:
        return f"{arm.name} ({arm.drafter.label}): {span}: {speedup.verdict}.", ()
    causes = slowdown_causes(summary, theory, matched)
    if clearly:
        text = (f"{arm.name} ({arm.drafter.label}) is SLOWER than no drafting: {span}. "
                "Drafting hurts here; turn it off or change the drafter.")
    else:  # a median below CLEARLY_SLOWER whose interval still reaches 1.0 (or has none)
        why = ("its interval still reaches 1.0. Run more repeats to tell before turning it "
               "off." if speedup.has_interval else "not without an interval.")
        text = (f"{arm.name} ({arm.drafter.label}) looks slower than no drafting: {span}; "
                f"not clearly slower: {why}")
    return text, causes


def slowdown_causes(summary: ArmSummary, theory: Theory | None,
                    matched: list[tuple[RunRecord, RunRecord]]) -> tuple[str, ...]:
    """Why drafting likely made an arm slower: its acceptance, a step's cost against what it
    yields, a long context; said as plain causes, the unknown said as unknown."""
    causes = []
    rate = summary.acceptance_rate
    unknown = rate is None and bool(summary.acceptance_source)
    if unknown:  # a server arm that reports none (or nothing usable): unknown, not "nothing"
        causes.append(f"acceptance unknown ({summary.acceptance_source})")
    elif rate is None or summary.drafted == 0:
        causes.append("nothing was drafted: the drafter found nothing to propose, so every "
                      "step paid for drafting without a chance of a gain")
    elif rate < LOW_ACCEPTANCE:
        length = summary.mean_acceptance_length  # None where the server counts no drafts
        mean = "" if length is None else f" (mean acceptance length {length:.2f})"
        who = ("the draft model does not predict this target" if summary.drafter == DrafterKind.MODEL
               else "the drafter's guesses do not match this target")
        causes.append(f"low acceptance: only {rate:.0%} of draft tokens were kept{mean}; "
                      f"{who} on these prompts")
    if theory is not None and theory.measured_step_cost is not None and not unknown:
        # (without the accepted counts a step's yield is unknown: no cost is made up)
        ideal = theory.ideal_step_cost
        mean_length = summary.mean_acceptance_length or 1.0
        cost = theory.measured_step_cost
        if cost > DEAR_STEP and (cost >= mean_length or (ideal and cost > 1.5 * ideal)):
            expected = f" (ideal {ideal:.2f})" if ideal else ""
            # A draft model's forwards are the step's usual extra cost; an n-gram lookup
            # costs next to nothing, so there the dear part is the wider verify step.
            what = ("draft too slow" if summary.drafter == DrafterKind.MODEL
                    else "speculative steps too dear (the lookup is nearly free: the wider "
                    "verify step costs)")
            causes.append(f"{what}: a speculative step costs "
                          f"{theory.measured_step_cost:.2f} target forwards{expected} but "
                          f"yields {mean_length:.2f} tokens")
    contexts = [r.result.stats.prompt_tokens + r.result.stats.new_tokens for _, r in matched]
    if contexts and max(contexts) > LONG_CONTEXT_TOKENS:
        causes.append(f"long context: up to {max(contexts)} tokens; attention over the "
                      "context makes each wider verify step dearer")
    if not causes:
        causes.append("no single cause stands out; run more repeats to rule out noise")
    return tuple(causes)
