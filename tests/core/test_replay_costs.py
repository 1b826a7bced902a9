"""The cost model of a replay (core.tune.replay.costs): a streamed run cut into its steps by
the replay, the calibration's fit, and a setting's predicted speed-up with its interval.
Real replays of real token sequences; the arrival times are made by a known cost, so the
fit must find it (the live calibration is benchmarks/bench_replay_predict.py)."""

from __future__ import annotations

import math
import random

import pytest
from specdeck.core.tune.replay.costs import (
    MAX_HALF_WIDTH,
    MIN_HALF_WIDTH,
    CalibrationRun,
    StepCosts,
    fit_costs,
    plain_step_s,
    predict_speedup,
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
        at = times[-1] + plain_s * cost.step(step.drafted) * (1 + rng.uniform(-jitter, jitter))
        times += [at] * (step.accepted + 1)
    return tuple(times[:replayed.tokens])


def test_a_streamed_run_is_cut_into_the_replays_steps():
    replayed = Replayed(4, sequence=[Step(0, 0), Step(3, 2), Step(0, 0)], tokens=6)
    arrivals = (0.0, 1.0, 4.0, 4.0, 4.0, 5.0)
    assert step_seconds(arrivals, replayed) == [(0, 1.0), (3, 3.0), (0, 1.0)]
    # the mean gap, a preempted one (over 6 times the median) left out
    assert plain_step_s((0.0, 1.0, 2.0, 4.0)) == pytest.approx(4 / 3)
    assert plain_step_s((0.0, 1.0, 2.0, 3.0, 10.0)) == 1.0


def test_the_calibration_finds_the_cost_of_a_verification_and_of_a_row():
    truth = StepCosts(verify_share=1.0, row_share=0.75)
    setting = Setting.of("ngram-simple", size_n=1, size_m=8)
    requests = [_request(seed) for seed in range(6)]
    _, each = replay(setting, requests)
    rng = random.Random(1)
    runs = []
    for r, replayed in zip(requests, each, strict=True):
        plain = [0.5]
        for _ in r.output[1:]:
            plain.append(plain[-1] + 0.02 * (1 + rng.uniform(-0.05, 0.05)))
        plain = tuple(plain)
        runs.append(CalibrationRun(plain, _arrivals(replayed, truth, 0.02, rng, 0.05),
                                   replayed))
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
    # dearer verification, slower; more pairs behind a measurement, a narrower interval
    dear = predict_speedup(StepCosts(verify_share=1.0, row_share=0.8, noise=0.02), copying)
    assert dear.speedup < fast.speedup
    noisy = StepCosts(verify_share=0.1, row_share=0.05, noise=0.3)
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
