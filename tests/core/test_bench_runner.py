"""The A/B runner on tiny real Llama models: plan, schedule, interleaving, records, cancel."""

from __future__ import annotations

import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from specdeck.core.bench.plan import Arm, BenchPlan, default_arms
from specdeck.core.bench.runner import (
    PlanStarted,
    RunFinished,
    RunStarted,
    RunStep,
    build_schedule,
    choose_prompts,
    run_plan,
)
from specdeck.core.engines.base import DrafterKind, DrafterSpec, SamplingSpec
from specdeck.core.errors import CancelledError, InvalidInputError, NotFoundError
from tiny_models import ab_models, tiny_plan

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return ab_models(tmp_path_factory.mktemp("bench-models"))


def test_plan_rejects_a_drafted_reference_and_repeated_names():
    ngram = DrafterSpec(DrafterKind.NGRAM)
    with pytest.raises(InvalidInputError, match="first arm"):
        BenchPlan(arms=(Arm("A", ngram), Arm("B")))
    with pytest.raises(InvalidInputError, match="repeat"):
        BenchPlan(arms=(Arm("A"), Arm("A", ngram)))
    with pytest.raises(InvalidInputError, match="repeats is 0"):
        BenchPlan(repeats=0)


def test_a_plan_with_the_reference_alone_is_valid_but_not_a_comparison():
    """A sweep's base plan holds the reference alone; running it as an A/B is refused with
    the fix its caller words (the CLI's flags, a plan.json, the A/B page)."""
    alone = BenchPlan(arms=(Arm("A"),))
    with pytest.raises(InvalidInputError, match="Nothing to compare") as refused:
        alone.require_comparison("Tick N-gram.")
    assert refused.value.fix == "Tick N-gram."
    BenchPlan(arms=(Arm("A"), Arm("B", DrafterSpec(DrafterKind.NGRAM)))).require_comparison("-")


def test_plan_round_trips_through_json(tmp_path):
    plan = tiny_plan(tmp_path / "m", default_arms(tmp_path / "d", ngram=True, k=3),
                     sampling=SamplingSpec(temperature=0.7, top_p=0.9, seed=5), stop_on_eos=False)
    again = BenchPlan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    assert [a.name for a in again.arms] == ["A", "B", "C"]
    assert again.arms[1].drafter.model_path == tmp_path / "d"
    with pytest.raises(InvalidInputError, match="version 99"):
        BenchPlan.from_json({**plan.to_json(), "version": 99})
    # A launched llama-server arm keeps its own spec type and k, above the engines' 32 (the
    # A/B page saves its server arms this way; 48 once failed the check and lost them).
    from specdeck.core.bench.plan import arm_from_json, arm_to_json
    from specdeck.core.servers.arms import launched_arm

    server = launched_arm("B", "/opt/llama-server", "/m/t.gguf", ("--spec-type", "ngram-simple"))
    assert server.drafter.num_draft_tokens == 48
    assert arm_from_json(json.loads(json.dumps(arm_to_json(server)))) == server
    bad = arm_to_json(server)
    bad["drafter"]["num_draft_tokens"] = 5000
    with pytest.raises(InvalidInputError, match="a server drafter's k is 5000"):
        arm_from_json(bad)


def test_schedule_interleaves_arms_and_alternates_their_order(tmp_path):
    plan = tiny_plan(tmp_path, default_arms(tmp_path / "d", ngram=True), max_prompts=3, repeats=2)
    prompts = choose_prompts(plan)
    slots = build_schedule(plan, prompts)
    warm = [s for s in slots if s.warmup]
    measured = [s for s in slots if not s.warmup]
    assert [s.arm.name for s in warm] == ["A", "B", "C"]
    assert len(measured) == 3 * 3 * 2
    groups = [measured[i:i + 3] for i in range(0, len(measured), 3)]
    for group in groups:  # every arm once per (repeat, prompt), on the same prompt
        assert sorted(s.arm.name for s in group) == ["A", "B", "C"]
        assert len({(s.prompt.id, s.repeat) for s in group}) == 1
    firsts = Counter(g[0].arm.name for g in groups)
    assert firsts == {"A": 3, "C": 3}  # order reverses every group
    assert [s.index for s in slots] == list(range(len(slots)))


def test_unknown_prompt_ids_are_named(tmp_path):
    plan = tiny_plan(tmp_path, (Arm("A"),), prompt_ids=("code-1", "nope"))
    with pytest.raises(NotFoundError, match="nope"):
        choose_prompts(plan)


def test_run_plan_end_to_end_records_every_slot_with_shared_prompt_ids(models):
    plan = tiny_plan(models["target"], default_arms(models["draft"], ngram=True, k=3))
    events = []
    run = run_plan(plan, on_event=events.append)
    started = [e for e in events if isinstance(e, PlanStarted)]
    assert len(started) == 1 and started[0].loaded.model_path == models["target"]
    schedule = started[0].schedule
    assert [r.slot for r in run.records] == list(schedule)
    assert [e.slot for e in events if isinstance(e, RunStarted)] == list(schedule)
    assert [e.record for e in events if isinstance(e, RunFinished)] == list(run.records)
    assert any(isinstance(e, RunStep) for e in events)
    for record in run.records:
        assert record.result.prompt_ids == run.prompt_ids[record.prompt_id]
        assert record.result.drafter == record.slot.arm.drafter
        expected = plan.warmup_tokens if record.slot.warmup else plan.max_new_tokens
        assert record.result.stats.new_tokens <= expected
    counted = run.counted()
    assert len(counted) == 3 * 2 * 2 and not run.cancelled
    # Greedy: a drafter never changes a token (float32 on CPU).
    by_key = {(r.prompt_id, r.slot.repeat, r.arm): r.result.token_ids for r in counted}
    for (prompt, repeat, arm), tokens in by_key.items():
        assert tokens == by_key[(prompt, repeat, "A")]
    assert run.environment["engine"] == "torch" and "torch" in run.environment


def test_ngram_arm_accepts_drafts_on_a_repeating_model(models):
    plan = tiny_plan(models["cycle"], default_arms(ngram=True, k=4), warmup=0, repeats=1)
    run = run_plan(plan)
    ngram = run.counted("B")
    assert ngram and all(r.result.stats.accepted > 0 for r in ngram)
    assert all(r.result.stats.drafted == 0 for r in run.counted("A"))


def test_cancel_before_measuring_raises_and_later_cancel_keeps_finished_runs(models):
    plan = tiny_plan(models["target"], default_arms(ngram=True), warmup=0)
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        run_plan(plan, cancel=cancel)

    cancel = threading.Event()

    def stop_after_three(event):
        if isinstance(event, RunFinished) and event.record.slot.index == 2:
            cancel.set()

    run = run_plan(plan, on_event=stop_after_three, cancel=cancel)
    assert run.cancelled and len(run.records) == 3


def test_prompt_longer_than_the_context_is_refused_before_any_run(models):
    plan = tiny_plan(models["target"], (Arm("A"),), max_new_tokens=600)
    refused = r"The prompt \S+ \(\d+ tokens\) plus max_new_tokens \(600\).* than the \d+-token context"
    with pytest.raises(InvalidInputError, match=refused):
        run_plan(plan)
