"""The A/B plan's fields, in one table: ranges, defaults and meaning; the default suites and
the k range of sweeps and the tuner.

The CLI's flags (``specdeck bench --k/--repeats/...``), the A/B page's spin boxes, the GPU
kit and the checks a plan (or a plan.json someone edited) passes before anything runs all
read this module, so a value one of them accepts the others accept too, and a default changed
here changes everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdeck.core.engines.base import (
    DEFAULT_DRAFT_TOKENS,
    DEFAULT_MAX_NEW_TOKENS,
    MAX_DRAFT_TOKENS,
)


@dataclass(frozen=True)
class PlanField:
    name: str
    """The BenchPlan attribute (``k``: each drafter's num_draft_tokens)."""
    flag: str
    """The CLI flag."""
    low: int
    high: int
    default: int | None
    """The CLI's and a plan's default (None: no limit)."""
    quick: int | None
    """Where the A/B page starts: a first look in a minute or two rather than the full run
    the CLI defaults to (the range is the same)."""
    help: str

    def describe(self) -> str:
        """The flag's help text, with its default."""
        return self.help if self.default is None else f"{self.help} (default {self.default})"


PLAN_FIELDS: dict[str, PlanField] = {f.name: f for f in (
    PlanField("k", "--k", 1, MAX_DRAFT_TOKENS, DEFAULT_DRAFT_TOKENS, DEFAULT_DRAFT_TOKENS,
              "draft tokens per step"),
    PlanField("repeats", "--repeats", 1, 1000, 3, 2, "measured runs per prompt"),
    PlanField("warmup", "--warmup", 0, 100, 1, 1, "warm-up runs per arm"),
    PlanField("max_new_tokens", "--max-new", 1, 131_072, DEFAULT_MAX_NEW_TOKENS, 128,
              "max new tokens"),
    PlanField("max_prompts", "--max-prompts", 1, 10_000, None, None, "use at most N prompts"),
    PlanField("warmup_tokens", "--warmup-tokens", 1, 131_072, 32, 32,
              "tokens per warm-up run (enough to touch every kernel path)"),
)}


DEFAULT_SUITES: tuple[str, ...] = ("code",)
"""The suites of a plan that names none (the CLI's --suite, a plan.json without "suites")."""
QUICK_SUITES: tuple[str, ...] = ("code", "grounded")
"""Where the A/B page starts: one suite with something to copy, one without much."""
DEFAULT_K_MAX = 8
"""The largest k a sweep tries and the tuner probes, unless told."""
DEFAULT_KS: tuple[int, ...] = tuple(range(1, DEFAULT_K_MAX + 1))
"""A sweep's k values, unless told."""


def out_of_range(name: str, value: object) -> str | None:
    """What is wrong with ``value`` for field ``name`` (None: nothing)."""
    field = PLAN_FIELDS[name]
    if isinstance(value, bool) or not isinstance(value, int) or not field.low <= value <= field.high:
        return f"{name} is {value!r}; it must be a whole number from {field.low} to {field.high:,}"
    return None
