"""What a decode step costs on this server and model, and every setting's predicted speed-up.

A replay says exactly which steps a setting would take: plain steps (one row through the
target) and verifications of ``d`` drafted tokens (``d + 1`` rows). What a verification costs
against a plain step is measured, not assumed (on a GPU a few more rows are nearly free; on
this project's CPU a step that verifies anything costs about two plain steps and each row
most of one more), by a short calibration:

- one drafting server of a setting the replay says drafts on most steps, with drafts of many
  lengths (ngram-simple with a one-token lookup), is sent the tuning prompts, each right
  after the plain server (so both see the machine as it is that second);
- both are streamed: llama-server sends each token as soon as its step has verified it, so
  the tokens of one step arrive together and the time from one step's last token to the
  next's is that step's cost; the replay says which tokens each step emitted and how many
  it drafted (only where the drafting run's output is the plain run's, which greedy
  verification gives);
- each step's cost over the mean step of the same prompt's plain run gives points
  (d, cost in plain steps); per d their mean (a step slower than ``OUTLIER`` times the
  median left out: preempted, not computed), and least squares over those means (weighted
  by how many steps each rests on) gives

      a step verifying d drafted tokens = 1 + verify_share + row_share * d (+ row2_share * d^2)

  (``row2_share`` only where the data bear out a cost per row that grows with the batch).

A draft model adds its own work per step, in decodes of the draft (``draft_share``: one
decode of the draft in plain target steps: the forced pass's requests, each of which decodes
one token, against a short plain run of the target timed right after each prompt's pass):
llama-server's draft-simple
(``common_speculative_impl_draft_simple``) runs the verified batch through the draft
(``process``: d + 1 rows) and decodes ``id_last`` and each drafted token but the last, on
every step.

A setting's speed-up on a request is the plain run's N - 1 steps over the cost of its own
steps (the statistic SpecDeck measures: decode tok/s between the first and the last token,
paired per prompt: ``core.bench.stats.speedup``); over requests, their median. Its interval
adds, in quadrature, the fit's uncertainty (1.96 standard errors of each share, times the
steps that carry it) and the noise of a measured median: the calibration's relative residual
per request (how far a request's measured span ratio strays from the model's: this machine's
run-to-run noise and what the model misses), taken at the upper end of its own 95% interval
(six requests measure it roughly, in the minute the calibration ran), over the pairs a
measurement rests on.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from specdeck.core.tune.replay.session import Replayed

Z95 = 1.96
MEDIAN_SE = 1.2533
"""The standard error of a median of n normal values is this times sigma / sqrt(n)."""
MIN_HALF_WIDTH = 0.02
"""The narrowest interval, either side (a share of the speed-up): what no calibration of a
few requests can rule out (a server's allocator, the machine's clock)."""
MAX_HALF_WIDTH = math.log(10.0)
"""The widest interval, either side, on the log scale: a tenth to ten times the speed-up. A
calibration noisier than that says nothing a wider interval would add (and exp() of its
width can overflow)."""
IMPOSSIBLE_STEP = 0.5
"""A fitted verifying step cheaper than this share of a plain step is refused (the prior is
used): no server verifies a draft in less than half the forward a plain step runs."""
MAX_NOISE_FACTOR = 3.0
"""The noise's upper bound is at most this many times its figure (two or three requests
bound it only loosely: the chi-square bound would be 5 to 16 times)."""
OUTLIER = 6.0
"""A step slower than this many times its d's median was preempted, not computed."""


@dataclass(frozen=True)
class StepCosts:
    """A generation's steps on one server and model, in plain steps."""

    verify_share: float
    """What a step that verifies anything costs beyond a plain step, whatever d."""
    row_share: float
    """Each drafted token verified."""
    row2_share: float = 0.0
    """Times the square of the step's drafted tokens."""
    verify_se: float = 0.0
    row_se: float = 0.0
    noise: float = 0.0
    """The calibration's relative residual per request (standard deviation of a ratio)."""
    steps: int = 0
    """Drafting steps the fit rests on."""
    requests: int = 0
    """Requests the noise was measured on."""
    draft_share: float = 0.0
    """One decode of the draft model (0: no draft model calibrated)."""
    plain_s: float = 0.0
    """One plain step, in seconds (shown; the model is in plain steps)."""

    def step(self, drafted: int) -> float:
        if drafted <= 0:
            return 1.0
        return 1.0 + self.verify_share + self.row_share * drafted \
            + self.row2_share * drafted * drafted

    @property
    def noise_bound(self) -> float:
        """The upper end of the noise's 95% interval: a handful of requests measures the
        noise itself only roughly (from six, the true value may be twice the figure), and a
        measurement later under a busier machine sees more of it."""
        n = self.requests
        if n < 2:
            return self.noise * MAX_NOISE_FACTOR
        k = n - 1
        # the chi-square distribution's 5% quantile (Wilson and Hilferty's approximation)
        low = k * (1 - 2 / (9 * k) - 1.645 * math.sqrt(2 / (9 * k))) ** 3
        return self.noise * min(MAX_NOISE_FACTOR, math.sqrt(k / max(low, 1e-9)))

    def with_draft(self, draft_share: float) -> StepCosts:
        return replace(self, draft_share=draft_share)

    def to_json(self) -> dict:
        return {"verify_share": self.verify_share, "row_share": self.row_share,
                "row2_share": self.row2_share, "verify_se": self.verify_se,
                "row_se": self.row_se, "noise": self.noise, "steps": self.steps,
                "requests": self.requests, "noise_bound": self.noise_bound,
                "draft_share": self.draft_share, "plain_s": self.plain_s}


def step_seconds(arrivals: tuple[float, ...], replayed: Replayed) -> list[tuple[int, float]]:
    """(drafted, seconds) of each step after the first token of a streamed run whose steps
    ``replayed`` gives: from the previous step's last token to this one's."""
    out = []
    last = 0  # the first token's index
    for step in replayed.sequence:
        end = last + step.accepted + 1
        if end >= len(arrivals):
            break
        out.append((step.drafted, arrivals[end] - arrivals[last]))
        last = end
    return out


def _trimmed_mean(values: list[float]) -> float:
    """The mean without the values over ``OUTLIER`` times the median (a step the scheduler
    took the core from for longer than a step lasts)."""
    if not values:
        return 0.0
    limit = OUTLIER * statistics.median(values)
    kept = [v for v in values if v <= limit]
    return statistics.fmean(kept or values)


def plain_step_s(arrivals: tuple[float, ...]) -> float:
    """The mean time between two tokens of a plain run (without preempted steps)."""
    return _trimmed_mean([b - a for a, b in zip(arrivals, arrivals[1:])])


def _weighted_least_squares(rows: list[list[float]], ys: list[float], weights: list[float]
                            ) -> tuple[list[float], list[float]] | None:
    """Least squares with each row weighted (a weight in proportion to its precision); the
    coefficients and their standard errors, None when singular or with no residual left."""
    n, m = len(rows), len(rows[0])
    if n <= m:
        return None
    xtwx = [[sum(w * r[i] * r[j] for r, w in zip(rows, weights, strict=True))
             for j in range(m)] for i in range(m)]
    xtwy = [sum(w * r[i] * y for r, y, w in zip(rows, ys, weights, strict=True))
            for i in range(m)]
    inv = _inverse(xtwx)
    if inv is None:
        return None
    coef = [sum(inv[i][j] * xtwy[j] for j in range(m)) for i in range(m)]
    sigma2 = sum(w * (sum(c * v for c, v in zip(coef, r, strict=True)) - y) ** 2
                 for r, y, w in zip(rows, ys, weights, strict=True)) / (n - m)
    return coef, [math.sqrt(max(sigma2 * inv[i][i], 0.0)) for i in range(m)]


def _inverse(a: list[list[float]]) -> list[list[float]] | None:
    n = len(a)
    m = [row[:] + [float(i == j) for j in range(n)] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        p = m[col][col]
        m[col] = [v / p for v in m[col]]
        for r in range(n):
            if r != col:
                f = m[r][col]
                m[r] = [v - f * w for v, w in zip(m[r], m[col], strict=True)]
    return [row[n:] for row in m]


@dataclass(frozen=True)
class CalibrationRun:
    """One request run plain and then at the calibrating setting, both streamed."""

    plain: tuple[float, ...]
    """The plain run's token arrivals."""
    drafted: tuple[float, ...]
    """The calibrating setting's token arrivals (its output the plain run's)."""
    replayed: Replayed
    """That request's replay at the calibrating setting."""


def fit_costs(runs: list[CalibrationRun]) -> StepCosts:
    """The step costs from the calibration's runs (see the module's docstring)."""
    by_d: dict[int, list[float]] = {}
    plain_seconds = []
    for run in runs:
        c1 = plain_step_s(run.plain)
        if c1 <= 0:
            continue
        plain_seconds.append(c1)
        for drafted, seconds in step_seconds(run.drafted, run.replayed):
            if drafted > 0:
                by_d.setdefault(drafted, []).append(seconds / c1)
    # means, as a measured span adds up every step, the usual waits for a core included
    points = [(d, _trimmed_mean(v), len(v)) for d, v in sorted(by_d.items())]
    if len(points) < 3:
        raise ValueError("the calibration drafted too few different lengths to fit a step's "
                         "cost")
    rows = [[1.0, float(d)] for d, _, _ in points]
    ys = [m - 1.0 for _, m, _ in points]
    weights = [float(n) for _, _, n in points]
    linear = _weighted_least_squares(rows, ys, weights)
    if linear is None:
        raise ValueError("the calibration cannot tell a verification's cost from a row's")
    (verify, row), (verify_se, row_se) = linear
    row2 = 0.0
    quadratic = _weighted_least_squares([[1.0, float(d), float(d * d)] for d, _, _ in points],
                                        ys, weights)
    if quadratic is not None:
        (q_verify, q_row, q_row2), (q_verify_se, q_row_se, q_row2_se) = quadratic
        if q_row2 > 2 * q_row2_se and q_row2 > 0:
            verify, row, row2, verify_se, row_se = q_verify, q_row, q_row2, q_verify_se, \
                q_row_se
    cheapest = min(1.0 + verify + max(row, 0.0) * d + row2 * d * d for d, _, _ in points)
    if not all(math.isfinite(v) for v in (verify, row, row2, verify_se, row_se)) \
            or cheapest < IMPOSSIBLE_STEP:
        # A step that verifies a draft runs at least the forward a plain step runs: a fit
        # that says it costs half of one measured the machine's load, not the server (a
        # little under one is noise, and the interval carries it).
        raise ValueError("the timings fit a verifying step cheaper than a plain one (another "
                         "program moved them)")
    costs = StepCosts(verify, max(row, 0.0), row2, verify_se, row_se, 0.0,
                      sum(len(v) for v in by_d.values()),
                      plain_s=statistics.median(plain_seconds) if plain_seconds else 0.0)
    errors: list[float] = []
    for run in runs:
        plain_span = run.plain[-1] - run.plain[0] if len(run.plain) > 1 else 0.0
        drafted_span = run.drafted[-1] - run.drafted[0] if len(run.drafted) > 1 else 0.0
        if plain_span > 0 and drafted_span > 0 and run.replayed.tokens > 1:
            model = _cost(costs, run.replayed) / (run.replayed.tokens - 1)
            errors.append(model / (drafted_span / plain_span) - 1)
    return replace(costs, noise=statistics.pstdev(errors) if len(errors) > 1 else 0.0,
                   requests=len(errors))


def _cost(costs: StepCosts, replayed: Replayed, draft_model: bool = False) -> float:
    """A request's generation after its first token, with ``replayed``'s steps, in plain
    steps."""
    plain_steps = replayed.plain_steps - 1
    total = plain_steps + sum(costs.step(s.drafted) for s in replayed.steps)
    if draft_model and costs.draft_share > 0:
        share = costs.row_share
        total += costs.draft_share * (2 * plain_steps + sum(2 + (1 + share) * s.drafted
                                                           for s in replayed.steps))
    return total


@dataclass(frozen=True)
class Predicted:
    """A setting's predicted speed-up over no drafting, with its interval."""

    speedup: float
    """The median over requests (what SpecDeck's measurement reports)."""
    low: float
    high: float
    per_request: tuple[float, ...]
    mean: float = 1.0
    """The geometric mean over requests: what ranks settings (a median of a handful of
    prompts is 1.00 for every setting that drafts on fewer than half of them)."""
    mean_accepted_length: float = 1.0
    per_pos_acceptance: tuple[float, ...] = ()
    """Accepted at position i over verifications (llama.cpp's per-position rate)."""
    drafted_share: float = 0.0
    """Steps that verified a draft, of all steps."""

    def to_json(self) -> dict:
        return {"speedup": self.speedup, "low": self.low, "high": self.high,
                "mean": self.mean, "per_request": list(self.per_request),
                "mean_accepted_length": self.mean_accepted_length,
                "per_pos_acceptance": list(self.per_pos_acceptance),
                "drafted_share": self.drafted_share}


def predict_speedup(costs: StepCosts, each: list[Replayed], draft_model: bool = False,
                    pairs: int | None = None) -> Predicted:
    """The speed-up of a setting whose replay per request is ``each``, as SpecDeck measures
    it; ``pairs``: how many paired runs the measurement it is compared with rests on
    (default: one per request)."""
    ratios, spread = [], []
    for r in each:
        if r.tokens <= 1:
            continue
        mine = _cost(costs, r, draft_model)
        ratios.append((r.tokens - 1) / mine)
        drafted = sum(s.drafted for s in r.steps)
        spread.append(math.hypot(r.drafts * costs.verify_se, drafted * costs.row_se) / mine)
    if not ratios:
        return Predicted(1.0, 1.0, 1.0, ())
    mid = statistics.median(ratios)
    param = Z95 * statistics.median(spread)
    n = max(1, pairs if pairs is not None else len(ratios))
    measured = Z95 * costs.noise_bound * MEDIAN_SE / math.sqrt(n)
    half = math.hypot(param, measured)
    half = MAX_HALF_WIDTH if not math.isfinite(half) else min(MAX_HALF_WIDTH,
                                                              max(MIN_HALF_WIDTH, half))
    total = Replayed(0)
    for r in each:
        total.add(r)
    steps = total.plain_steps + total.drafts
    per_pos = tuple(n / total.drafts for n in total.per_pos) if total.drafts else ()
    mean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    # on a log scale: a ratio's noise is relative, and an interval never reaches 0
    return Predicted(mid, mid * math.exp(-half), mid * math.exp(half), tuple(ratios), mean,
                     total.mean_accepted_length, per_pos,
                     total.drafts / steps if steps else 0.0)
