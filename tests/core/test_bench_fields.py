"""One table for the A/B plan's numbers: the CLI's flags and plan.json accept the same ranges."""

from __future__ import annotations

import pytest
from specdeck.core.bench.fields import PLAN_FIELDS
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.cli import build_parser
from specdeck.core.engines.base import MAX_DRAFT_TOKENS
from specdeck.core.errors import InvalidInputError


def _bench_args(*argv: str):
    return build_parser().parse_args(["bench", *argv])


@pytest.mark.parametrize("name", ["k", "repeats", "warmup", "max_new_tokens", "max_prompts"])
def test_cli_flags_take_exactly_the_tables_range(name, capsys):
    field = PLAN_FIELDS[name]
    dest = field.flag.lstrip("-").replace("-", "_")
    for value in (field.low, field.high):
        assert getattr(_bench_args(field.flag, str(value)), dest) == value
    for value in (field.low - 1, field.high + 1):
        with pytest.raises(SystemExit):
            _bench_args(field.flag, str(value))
        assert f"use {field.low} to {field.high:,}" in capsys.readouterr().err
    assert getattr(_bench_args(), dest) == field.default


def test_k_reaches_the_engines_limit_everywhere():
    assert PLAN_FIELDS["k"].high == MAX_DRAFT_TOKENS
    plan = BenchPlan().to_json()
    arm = {"name": "B", "drafter": {"kind": "ngram", "num_draft_tokens": MAX_DRAFT_TOKENS}}
    again = BenchPlan.from_json({**plan, "arms": [*plan["arms"], arm]})
    assert again.arms[1].drafter.num_draft_tokens == MAX_DRAFT_TOKENS
    for bad in (MAX_DRAFT_TOKENS + 1, 0, 4.7, "4", True):
        with pytest.raises(InvalidInputError, match="k is"):
            BenchPlan.from_json({**plan, "arms": [*plan["arms"], {**arm, "drafter": {
                "kind": "ngram", "num_draft_tokens": bad}}]})


@pytest.mark.parametrize("name", ["repeats", "warmup", "max_new_tokens", "warmup_tokens"])
def test_plan_json_counts_are_checked_against_the_table_not_coerced(name):
    field = PLAN_FIELDS[name]
    plan = BenchPlan().to_json()
    assert getattr(BenchPlan.from_json({**plan, name: field.high}), name) == field.high
    for bad in (field.high + 1, field.low - 1, float(field.low) + 0.5, str(field.low)):
        with pytest.raises(InvalidInputError, match=f"{name} is .*from {field.low} to {field.high:,}"):
            BenchPlan.from_json({**plan, name: bad})
