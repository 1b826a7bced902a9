"""The live A/B reducer (core.bench.live) on real runs of tiny real Llama models.

What the A/B page and the CLI's progress show while a plan runs must be what the finished
summary says once it ends: the same pairs, the same median, the same pooled acceptance, the
same losslessness counts. These tests run real plans, feed every event to the reducer, and
compare its figures with ``summarize`` of the same run.
"""

from __future__ import annotations

import io
import statistics
from dataclasses import replace
from pathlib import Path

import pytest
from specdeck.core.bench.live import RATE_WINDOW_S, LivePlan
from specdeck.core.bench.plan import default_arms
from specdeck.core.bench.runner import BenchRun, RunFinished, RunStarted, RunStep, run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.engines import create_engine
from specdeck.core.engines.base import SamplingSpec
from tiny_models import ab_models, tiny_plan


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return ab_models(tmp_path_factory.mktemp("live-models"))


@pytest.fixture(scope="module")
def engine():
    engine = create_engine("torch")
    yield engine
    engine.unload()


def _run_with_live(plan, engine, clock=None):
    live = LivePlan(plan) if clock is None else LivePlan(plan, clock=clock)
    changes = []
    run = run_plan(plan, engine, on_event=lambda e: changes.append((e, live.apply(e))))
    return run, live, changes


def test_live_figures_equal_the_finished_summary(models, engine):
    plan = tiny_plan(models["cycle"], default_arms(models["draft"], ngram=True, k=3),
                     max_prompts=3, repeats=2)
    run, live, _ = _run_with_live(plan, engine)
    summary = summarize(run)

    assert live.total == len(run.records) and live.done == live.total and live.current is None
    assert [r.record for r in live.rows] == run.counted()
    for name in ("B", "C"):
        arm, final = live.arm_so_far(name), summary.comparison(name)
        assert arm.pairs == final.speedup.n == final.lossless.compared == 3 * 2
        assert arm.median_speedup == pytest.approx(final.speedup.median)
        assert (arm.min_speedup, arm.max_speedup) == pytest.approx(
            (final.speedup.minimum, final.speedup.maximum))
        assert arm.acceptance_rate == pytest.approx(summary.arm(name).acceptance_rate)
        assert (arm.identical, arm.ties) == (final.lossless.identical, final.lossless.ties)
        assert arm.drafted_nothing is bool(final.not_drafting) is False  # both drafted
    # Every drafting row's ratio is its run over the reference's run of that prompt and repeat.
    for row in live.rows:
        reference = live.reference_of(row.key)
        if row.record.arm == "A":
            assert row.speedup is None and row.output is None
            continue
        expected = row.record.result.stats.tokens_per_second / reference.result.stats.tokens_per_second
        assert row.speedup == pytest.approx(expected)
        assert row.output.text == "identical" and not row.output.differs


def test_a_reference_that_finishes_after_its_partners_fills_their_rows(models, engine):
    plan = tiny_plan(models["target"], default_arms(ngram=True, k=2), max_prompts=1, repeats=2,
                     warmup=0)
    _, live, changes = _run_with_live(plan, engine)
    finished = [(e.record, changed) for e, changed in changes if isinstance(e, RunFinished)]
    # The schedule runs A B, then B A: the second A pairs the B that ran before it.
    assert [r.arm for r, _ in finished] == ["A", "B", "B", "A"]
    b_first, a_second = finished[2], finished[3]
    assert b_first[1] == [2] and live.rows[2].speedup is not None  # final state: paired
    assert a_second[1] == [3, 2]  # the reference's own row, then its partner's, refreshed
    # Until its reference came, the B row had no ratio: the event stream shows it unpaired.
    replay = LivePlan(plan)
    upto = next(i for i, (e, _) in enumerate(changes)
                if isinstance(e, RunFinished) and e.record is b_first[0])
    for event, _ in changes[: upto + 1]:
        replay.apply(event)
    assert replay.rows[2].speedup is None and replay.rows[2].output is None
    assert replay.arm_so_far("B").pairs == 1  # only the first repeat's pair so far


def test_sampled_plans_are_not_checkable_and_a_diverging_arm_is_flagged(models, engine):
    greedy = tiny_plan(models["target"], default_arms(ngram=True), max_new_tokens=8, max_prompts=1)
    sampled = replace(greedy, sampling=SamplingSpec(temperature=1.5, seed=3))
    _, live, _ = _run_with_live(sampled, engine)
    assert {r.output.text for r in live.rows if r.output} == {"sampled"}
    assert not live.arm_so_far("B").checkable

    # Arm B's runs drawn with sampling inside a greedy plan: every pair must differ.
    greedy_run = run_plan(greedy, engine)
    sampled_run = run_plan(sampled, engine)
    mixed = LivePlan(greedy)
    for record in greedy_run.records:
        source = record if record.arm == "A" else next(
            r for r in sampled_run.records if r.slot == record.slot)
        mixed.apply(RunFinished(source, len(greedy_run.records)))
    diverged = [r for r in mixed.rows if r.output is not None]
    assert diverged and all(r.output.differs and r.output.text.startswith("differs at token")
                            for r in diverged)
    figures = mixed.arm_so_far("B")
    assert figures.identical == 0 and figures.pairs == len(diverged)
    mixed_run = BenchRun(**{**greedy_run.__dict__, "records": tuple(mixed.records)})
    assert summarize(mixed_run).comparison("B").lossless.diverged == len(diverged)


def test_stopped_and_warm_up_runs_are_kept_out_of_the_figures(models, engine):
    plan = tiny_plan(models["target"], default_arms(ngram=True), warmup=1)
    run, live, _ = _run_with_live(plan, engine)
    warmups = [r for r in run.records if r.slot.warmup]
    assert warmups and all(r in live.records for r in warmups)
    assert all(not r.record.slot.warmup for r in live.rows)
    stopped = replace(run.records[-1], result=replace(
        run.records[-1].result, stats=replace(run.records[-1].result.stats,
                                              stop_reason=type(run.records[-1].result.stats.stop_reason).CANCELLED)))
    again = LivePlan(plan)
    for record in run.records[:-1]:
        again.apply(RunFinished(record, len(run.records)))
    before = len(again.rows)
    assert again.apply(RunFinished(stopped, len(run.records))) == []
    assert len(again.rows) == before and again.done == len(run.records)


def test_live_rate_points_cover_a_window_of_decode_time(models, engine):
    plan = tiny_plan(models["cycle"], default_arms(ngram=True, k=4), max_new_tokens=48,
                     max_prompts=1, repeats=1, warmup=0)
    run, live, changes = _run_with_live(plan, engine)
    points = live.take_points()
    assert live.take_points() == []  # taken once
    for arm in ("A", "B"):
        finished = [p for p in points if p.series == "finished" and p.arm == arm]
        assert [p.value for p in finished] == [r.result.stats.tokens_per_second
                                                for r in run.counted(arm)]

    # The real events of arm B's run, replayed with 0.1 s of decode time per step: a point
    # every 0.3 s (the first step at or past RATE_WINDOW_S after the last point).
    ticks = iter(range(10**6))
    replay = LivePlan(plan, clock=lambda: float(next(ticks)))
    started = next(e for e, _ in changes if isinstance(e, RunStarted) and e.slot.arm.name == "B")
    replay.apply(started)
    steps = [e for e, _ in changes if isinstance(e, RunStep) and e.slot == started.slot]
    assert len(steps) >= 6
    timed = [replace(s, event=replace(s.event, elapsed_s=0.1 * (i + 1))) for i, s in enumerate(steps)]
    for step in timed:
        replay.apply(step)
    speed = [p for p in replay.take_points() if p.series == "speed"]
    marks = [0.0] + [timed[i].event.elapsed_s for i in range(2, len(timed), 3)]
    tokens = [0] + [timed[i].event.new_tokens for i in range(2, len(timed), 3)]
    assert len(speed) == len(marks) - 1 and RATE_WINDOW_S == 0.25
    for point, t0, t1, n0, n1 in zip(speed, marks, marks[1:], tokens, tokens[1:]):
        assert point.arm == "B" and point.value == pytest.approx((n1 - n0) / (t1 - t0))
    current = replay.current
    assert current.new_tokens == timed[-1].event.new_tokens
    assert current.acceptance_rate == pytest.approx(
        timed[-1].event.total_accepted / timed[-1].event.total_drafted)


def test_the_cli_progress_prints_the_reducers_running_figures(models, engine):
    from specdeck.core.cli.bench_cmd import ProgressPrinter

    plan = tiny_plan(models["cycle"], default_arms(ngram=True, k=3), max_prompts=2, repeats=1)
    stream = io.StringIO()
    printer = ProgressPrinter(stream)
    run = run_plan(plan, engine, on_event=printer)
    lines = [line for line in stream.getvalue().splitlines() if "tok/s" in line]
    assert len(lines) == len(run.records)
    figures = printer.plan_state.arm_so_far("B")
    ratios = [b.result.stats.tokens_per_second / a.result.stats.tokens_per_second
              for a in run.counted("A") for b in run.counted("B") if a.prompt_id == b.prompt_id]
    assert figures.median_speedup == pytest.approx(statistics.median(ratios))
    assert lines[-1].endswith(figures.to_text("A"))
    assert f"{figures.median_speedup:.2f}x vs A so far (median of 2 paired" in lines[-1]


def _server_plan_events(counted: dict[str, tuple[bool, ...]]):
    """A server plan of reference A and the drafting arms named in ``counted`` (each with
    whether its run of every repeat carried draft counts, from /metrics), one prompt: every
    run finished with 20 tokens and nothing drafted. The events, and the finished BenchRun."""
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import PlanStarted, RunRecord, RunSlot
    from specdeck.core.bench.suites import Prompt
    from specdeck.core.engines.base import (
        NO_DRAFT,
        DrafterKind,
        DrafterSpec,
        GenerationResult,
        GenerationStats,
        LoadedModel,
    )
    from specdeck.core.servers.engine import ServerRun
    from specdeck.core.servers.readings import ServerReport

    arms = (Arm("A"), *(Arm(name, DrafterSpec(DrafterKind.SERVER)) for name in counted))
    repeats = max(len(flags) for flags in counted.values())
    plan = BenchPlan(engine="server", model="server", arms=arms, repeats=repeats)
    prompt = Prompt("p", "x", (), "s")
    slots = tuple(RunSlot(len(arms) * repeat + i, arm, prompt, repeat)
                  for repeat in range(repeats) for i, arm in enumerate(arms))
    loaded = LoadedModel(engine="server", model_path=Path("server"), device="server",
                         dtype="as served", drafter=NO_DRAFT, max_seq_len=0, vocab_size=0)
    records = []
    for slot in slots:
        metrics = slot.arm.name in counted and counted[slot.arm.name][slot.repeat]
        seconds = 1.0 + 0.1 * slot.repeat + (0.05 if slot.arm.name == "A" else 0.0)
        stats = GenerationStats(prompt_tokens=10, new_tokens=20, prefill_s=0.1,
                                decode_s=seconds, steps=20, draft_steps=0, drafted=0,
                                accepted=0)
        server = ServerRun(report=ServerReport("llama-server"), client_tokens_per_second=20.0,
                           time_to_first_token_s=0.1, chunks=20, url="http://127.0.0.1:1",
                           metrics_drafted=0 if metrics else None,
                           metrics_accepted=0 if metrics else None)
        result = GenerationResult("x" * 20, (), (), stats, slot.arm.drafter, plan.sampling,
                                  "server", server=server)
        records.append(RunRecord(slot, result, float(slot.index)))
    events = [PlanStarted(plan, (prompt,), slots, loaded),
              *(RunFinished(r, len(slots)) for r in records)]
    run = BenchRun(plan, (prompt,), tuple(records), loaded, {}, 0.0, float(len(slots)))
    return events, run


def _live(events) -> LivePlan:
    live = LivePlan(events[0].plan)
    for event in events:
        live.apply(event)
    return live


def test_a_server_that_counted_no_drafts_reported_them():
    """Issue 44 (labels that contradict each other): on the Tune page a llama-server whose
    counters said it drafted nothing was "drafted nothing" in the table while the acceptance
    plot said "not reported by these servers". Counted zero is reported; only a server that
    gives no counts is not."""
    live = _live(_server_plan_events({"B": (True,), "C": (False,)})[0])
    assert live.acceptance_reported == {"B"} and live.acceptance_unreported == {"C"}
    assert live.arm_so_far("B").drafted_nothing and not live.arm_so_far("B").drafting_unknown
    assert live.arm_so_far("C").drafting_unknown


@pytest.mark.parametrize("counted", [(True, False, False), (False, True), (True, True),
                                     (False, False)])
def test_live_and_summary_say_alike_whether_an_arm_drafted(counted):
    """Issue 45 (one definition per rule): the live view worked out "drafted nothing" and
    "unknown" itself (every run counted / none counted), the summary from whether any run
    carried counts. With some runs counted and none drafted, the live view called the arm a
    drafting result (the Tune page's best so far could offer it) while the summary said it
    drafted nothing. Both now read core.bench.summary.drafting_seen."""
    from specdeck.core.bench.winner import comparison_standing

    events, run = _server_plan_events({"B": counted})
    live = _live(events)
    so_far, final = live.arm_so_far("B"), summarize(run).comparison("B")
    assert so_far.pairs == len(counted)
    assert so_far.drafted_nothing is bool(final.not_drafting) is any(counted)
    assert so_far.drafting_unknown is bool(final.drafting_unknown) is not any(counted)
    live_standing, final_standing = so_far.standing(), comparison_standing(final)
    assert live_standing.excluded_because is not None
    assert bool(live_standing.not_drafting) and bool(final_standing.not_drafting)
