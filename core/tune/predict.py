"""A speed-up for each candidate before it runs, with a range, and the record that makes the
next prediction better.

Where this machine has tuned the same target with the same candidate before (the tune history
SpecDeck keeps, one line per candidate measured), the prediction is what was measured then: the
median of the earlier tunes weighted by the pairs each rests on, its range (the weighted 10th
to 90th percentile) widened by a tenth, and at least as wide as the earlier measurements' own
95% intervals. Tunes on the same prompts (``prompts``: the tuning
prompts' digest, core.tune.run.prompt_set) are the only ones used where there are any: the
text decides much of a speed-up (the same draft model measured 0.59x on grounded prompts and
0.38x on code, tune_search 2026-11-27), and only a measurement on all of them (a setting
the search dropped after an early round ran on part of them: ``complete``); otherwise the
source says the tunes were on other prompts (or part of these), and the range is wider
(``OTHER_PROMPTS_WIDEN``). Only a measurement worth learning from counts
(``usable``): one resting on at least three pairs, from no disturbed run, and no faster than
drafting k tokens a step can be (k + 1 times); one disturbed pair once entered the history of
a user's tune as 62.88x and widened every later prediction to nonsense. Where it has tuned a
similar pair on the same device, what
that measured stands in for the prior (``similar``): an n-gram type's speed-up on other targets
(it depends on the text and the verify cost more than on the model), or, for a draft model or
MTP layers, the per-token acceptance measured with targets of the same family, put into the
formula below with this pair's own cost. Otherwise it is Leviathan et al.'s speed-up
(core.bench.stats.theoretical_speedup) at the best of the searched k, over a range of
acceptance that fits the kind of drafter:

- a draft model that passed the compatibility check (same tokenizer, usually the same family):
  acceptance 0.45-0.80, a draft forward costing its share of the target's weights (decoding is
  memory-bound: a forward reads every weight once);
- an n-gram type: drafts cost nothing. llama.cpp's ngram-* types draft only where the lookup
  finds a match (on 0-10% of steps, ``MATCH_RATE``): a step without one is a plain decode
  step, so their speed-up cannot fall far below 1 however dear verifying is; and a draft
  copied from a match is mostly right (``ACCEPTANCE_ON_MATCH``). ExLlamaV2's n-gram drafter
  (TabbyAPI's ``ngram``) drafts k tokens on every step, match or not: acceptance 0.10-0.60
  (it depends on how much the output repeats the prompt);
- MTP layers: acceptance 0.55-0.85, a draft costing one layer of the target.

Verifying k + 1 tokens costs one target forward on a GPU, and more on a CPU, where a forward
over a few rows is dearer than over one (``VERIFY_COST_PER_TOKEN``). The report puts every
prediction next to what was measured, so its error is visible, not assumed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

from specdeck.core import appdirs
from specdeck.core.bench.stats import (
    MIN_PAIRS_FOR_INTERVAL,
    iid_cumulative,
    theoretical_speedup,
)
from specdeck.core.draft_kind import DRAFT_MODEL, MTP, NGRAM, draft_kind
from specdeck.core.engines.base import MAX_SERVER_DRAFT_TOKENS
from specdeck.core.llama_flags import NGRAM_CACHE, NGRAM_FAMILY, family_of
from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.setup import Setup
from specdeck.core.units import format_bytes

ACCEPTANCE = {DRAFT_MODEL: (0.45, 0.80), NGRAM: (0.10, 0.60), MTP: (0.55, 0.85)}
ACCEPTANCE_ON_MATCH = (0.85, 0.98)
"""Per-token acceptance of a llama.cpp lookup type's draft, given that it drafted (it copies
what followed an earlier occurrence of the last n-gram). Fitted to llama-server's own counts
(draft_n_accepted over draft_n) in the exhaustive grid of tune_e2e (2026-11-27): 54-97% of
drafted tokens accepted at k = 4-16, which an iid acceptance of 0.92-0.996 per token gives
(ngram-simple lowest). ``ACCEPTANCE[NGRAM]``, per token on every step, predicted these types
0.69x where they measured 0.95-1.01x."""
VERIFY_COST_PER_TOKEN = {"gpu": (0.02, 0.02), "cpu": (0.06, 0.6)}
"""Extra target-forward cost per verified token beyond the first, (cheapest, typical): a GPU
verifies a few rows for the price of one. On a CPU it depends on the model: llama-server on
this project's 2-core CPU pays about 0.6 of a forward more per row for a 135M model (0.5-0.7,
fitted to the 462 n-gram runs of the tune_search benchmark of 2026-11-26 from its
llama-server logs: eval time against rows per step, where drafting costs nothing), the
prediction's middle; a larger model is more bound by memory, where extra rows cost less, and
the PyTorch engine's linears measured 0.06 (docs/benchmarks/engine_choices.md), the top of
the range."""
ACCEPTANCE_ON_MATCH_BY_TYPE = {NGRAM_CACHE: (0.15, 0.5)}
"""Lookup types whose drafts are guesses, not copies: ngram-cache drafts the likeliest next
tokens by n-gram statistics (its context, dynamic and static caches), not what followed an
exact earlier occurrence, and llama-server counted 0-29% of its drafted tokens accepted
(tune_search 2026-11-26: 14% and 0%; tune_e2e 2026-11-27: 29%; a user test 2026-11-27: 24%),
where the copying types kept 54-97%. ``ACCEPTANCE_ON_MATCH`` predicted it 1.04x where it
measured 0.85x on grounded prompts."""
MATCH_RATE = (0.0, 0.1)
"""Share of decode steps on which a drafter that drafts only on a match finds one. In the
tune_search benchmark (2026-11-26, llama-server, 32-token answers to the shipped suites) the
ngram-* types drafted on 0-10.6% of steps, most on none (their llama-server logs); every one
measured 0.98-1.07x, where drafting on every step predicted 0.77x."""
HISTORY_FILE = "tune-history.jsonl"
HISTORY_WIDEN = 0.10
HISTORY_MIN_PAIRS = MIN_PAIRS_FOR_INTERVAL
"""A measurement on fewer pairs than this is too thin to predict from (entries written before
the history recorded its pairs count as one)."""
OTHER_PROMPTS_WIDEN = 0.30
"""How much wider (as a share of the median) a prediction is from tunes on other prompts, or
on part of these (a setting the search dropped after an early round), than from tunes on
these: the text moves a draft model's speed-up by about that much either side. The same
draft measured 0.34-0.59x across three suites (tune_search, 2026-11-27), and 0.78x on the
search's first grounded prompts against 0.55x on all of them (a run of that benchmark not
kept, the machine busy); its per-token acceptance
spread 0.68-0.90 across five suites (acceptance.md)."""
SIMILAR_WIDEN = 0.25
"""How much wider (as a share of the median) a prediction from similar pairs is than one from
the same pair: another target or draft is a weaker witness."""
SIMILAR_ACCEPTANCE_SPREAD = 0.05
"""Per-token acceptance either side of what similar pairs measured (their range, at least
this wide)."""


@dataclass(frozen=True)
class Prediction:
    speedup: float
    low: float
    high: float
    source: str
    """"history (N runs)" or "theory (acceptance A-B, cost ratio C)"."""

    def error(self, measured: float | None) -> float | None:
        """(predicted - measured) / measured; None when nothing was measured."""
        if measured is None or measured <= 0:
            return None
        return (self.speedup - measured) / measured


def _kind(candidate: Candidate) -> str:
    """``draft_kind.MTP``, ``DRAFT_MODEL`` or ``NGRAM`` (core.draft_kind, the one reading of
    llama-server's spec types and TabbyAPI's draft modes alike; the history keeps it)."""
    return draft_kind(candidate.spec_type, candidate.draft is not None)


def _cost_ratio(candidate: Candidate, setup: Setup) -> float:
    kind = _kind(candidate)
    if kind == NGRAM:
        return 0.0
    if kind == MTP:
        return 1.0 / max(setup.facts.layers, 1)
    return candidate.draft_bytes / max(setup.facts.weight_bytes, 1)


def drafts_on_match_only(candidate: Candidate) -> bool:
    """llama.cpp's lookup types (ngram-simple, -map-k, -map-k4v, -mod, -cache) draft nothing
    on a step whose context has no match; TabbyAPI's ``ngram`` (ExLlamaV2) always drafts k."""
    return _kind(candidate) == NGRAM and family_of(candidate.spec_type) == NGRAM_FAMILY


def theory(candidate: Candidate, setup: Setup, device: str,
           acceptance: tuple[float, float] | None = None) -> Prediction:
    """Leviathan et al.'s speed-up over ``acceptance`` (per token; default: the range for
    this kind of drafter) with this pair's draft cost and ``device``'s verify cost."""
    on_match = drafts_on_match_only(candidate)
    on_match_acceptance = ACCEPTANCE_ON_MATCH_BY_TYPE.get(candidate.spec_type,
                                                          ACCEPTANCE_ON_MATCH)
    low_a, high_a = acceptance or (on_match_acceptance if on_match
                                   else ACCEPTANCE[_kind(candidate)])
    cost = _cost_ratio(candidate, setup)
    cheap, typical = VERIFY_COST_PER_TOKEN[device]
    low_m, high_m = MATCH_RATE if on_match else (1.0, 1.0)

    def best(alpha: float, match: float, per_token: float = typical) -> float:
        def at(k: int) -> float:
            drafted = theoretical_speedup(iid_cumulative(alpha, k), k, cost,
                                          lambda k: 1.0 + per_token * k)
            # per step: a drafted one yields drafted x its cost in tokens; a plain one, 1 for 1
            step_cost = k * cost + 1.0 + per_token * k
            return ((1 - match) + match * drafted * step_cost) / ((1 - match) + match * step_cost)
        return max(at(int(k)) for k in candidate.k_values)

    middle = best((low_a + high_a) / 2, (low_m + high_m) / 2)
    # every corner of acceptance x match rate x verify cost: no match at all (1.0) can be
    # the high end where verifying is dear, or the low end where it is cheap
    corners = [best(a, m, v) for a in (low_a, high_a) for m in (low_m, high_m)
               for v in (cheap, typical)]
    low, high = min(corners), max(corners)
    matched = "" if low_m == high_m == 1.0 else f", drafting on {low_m:.0%}-{high_m:.0%} of steps"
    return Prediction(middle, min(low, middle), max(high, middle),
                      f"theory (acceptance {low_a:.2f}-{high_a:.2f}, draft cost ratio "
                      f"{cost:.3f}{matched}, {device})")


def history_path() -> Path:
    return appdirs.data_dir() / HISTORY_FILE


MAX_SPEEDUP = MAX_SERVER_DRAFT_TOKENS + 1.0
"""No drafter yields more than k + 1 tokens a target forward, and no server drafts more than
MAX_SERVER_DRAFT_TOKENS: a figure above this is made up."""
_TEXT_FIELDS = ("target", "candidate", "spec_type", "kind", "family", "device", "prompts")


def history_problem(path: Path | None = None) -> str:
    """Why the tune history cannot be read or added to ("" when it can, or is not there
    yet): it is a folder, a FIFO, a device, or over ``core.files.SMALL_FILE``."""
    from specdeck.core.errors import NotFoundError, SpecDeckError
    from specdeck.core.files import SMALL_FILE, not_a_file

    path = path or history_path()
    problem = not_a_file(path, "tune history")
    if isinstance(problem, NotFoundError):
        return ""
    if problem is None:
        try:
            if path.stat().st_size > SMALL_FILE:
                return (f"The tune history {path} is over {format_bytes(SMALL_FILE)}, more "
                        "than SpecDeck reads")
        except OSError as exc:
            return f"The tune history {path} cannot be read: {exc.strerror or exc}"
        return ""
    return problem.what if isinstance(problem, SpecDeckError) else str(problem)


def history_note(path: Path | None = None) -> str | None:
    """What a tune's report says when its history cannot be used (None: it can)."""
    problem = history_problem(path)
    return (f"{problem.rstrip('.')}: the predictions use no history, and this tune's "
            "measurements are not added to it.") if problem else None


def read_history(path: Path | None = None) -> list[dict]:
    """The history's entries that are records SpecDeck could have written (checked_entry);
    none when the file is not one it can read (history_problem says why)."""
    from specdeck.core.errors import SpecDeckError
    from specdeck.core.files import read_bounded

    path = path or history_path()
    if history_problem(path):
        return []
    try:
        text = read_bounded(path, "tune history").decode("utf-8", errors="replace")
    except SpecDeckError:
        return []
    entries = []
    for line in text.splitlines():
        try:
            entry = checked_entry(json.loads(line))
        except (ValueError, RecursionError):
            continue  # a line cut short by a crash: the others still count
        if entry is not None:
            entries.append(entry)
    return entries


def _real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


def checked_entry(entry) -> dict | None:
    """A history line as a record, checked before it becomes a figure (None: not a record
    SpecDeck could have written): a finite speed-up above 0 and at most ``MAX_SPEEDUP``;
    pairs and k whole numbers in range; an acceptance share from 0 to 1; an interval of
    finite bounds above 0 that holds the speed-up and is no faster than k + 1 (0.00-1000x
    is no interval); text fields short text. An interval or acceptance that fails is
    dropped from the entry; the rest refuses it."""
    if not isinstance(entry, dict):
        return None
    speedup = entry.get("speedup")
    if not _real(speedup) or not 0 < speedup <= MAX_SPEEDUP:
        return None
    for name in _TEXT_FIELDS:
        value = entry.get(name)
        if value is not None and (not isinstance(value, str) or len(value) > 1000):
            return None
    pairs, k = entry.get("pairs", 0), entry.get("k")
    if isinstance(pairs, bool) or not isinstance(pairs, int) or not 0 <= pairs <= 10**6:
        return None
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 0 < k <= MAX_SERVER_DRAFT_TOKENS):
        return None
    for name in ("disturbed", "complete"):
        if name in entry and not isinstance(entry[name], bool):
            return None
    checked = {key: entry[key] for key in (*_TEXT_FIELDS, "speedup", "pairs", "k", "disturbed",
                                           "complete") if key in entry}
    acceptance = entry.get("acceptance")
    if _real(acceptance) and 0 <= acceptance <= 1:
        checked["acceptance"] = acceptance
    low, high = entry.get("low"), entry.get("high")
    ceiling = k + 1 if k is not None else MAX_SPEEDUP
    if _real(low) and _real(high) and 0 < low <= speedup <= high <= ceiling:
        # an interval that holds its own speed-up, above 0 and no faster than k + 1
        checked["low"], checked["high"] = low, high
    return checked


def record(setup: Setup, candidate: Candidate, speedup: float, path: Path | None = None, *,
           device: str | None = None, acceptance: float | None = None,
           k: int | None = None, pairs: int = 0, disturbed: bool = False,
           prompts: str | None = None, interval: tuple[float, float] | None = None,
           complete: bool = True) -> None:
    """Remember what ``candidate`` measured on this machine for this target: its speed-up,
    the ``pairs`` it rests on and whether a run behind it was ``disturbed`` (so a later
    prediction weighs it, or leaves it out: ``usable``), and, for a later prediction of a
    similar pair, what it was (spec type, kind, the target's family, ``device``) and, where
    the server reported it, the share of drafted tokens accepted at its best setting's
    ``k``; ``prompts``: what it was measured on (core.tune.run.prompt_set); ``interval``:
    the 95% interval of ``speedup`` (a prediction from it is no narrower); ``complete``:
    False when it rests on part of those prompts only (a setting the search dropped early)."""
    path = path or history_path()
    if not _real(speedup) or not 0 < speedup <= MAX_SPEEDUP or history_problem(path):
        return  # a figure no record may hold, or a history that is not a file (noted)
    entry = {"target": setup.facts.name, "candidate": candidate.label,
             "speedup": round(speedup, 4), "spec_type": candidate.spec_type,
             "kind": _kind(candidate), "family": setup.facts.family.lower(),
             "device": device,
             "acceptance": None if acceptance is None else round(acceptance, 4), "k": k,
             "pairs": pairs, "disturbed": disturbed, "prompts": prompts}
    if interval is not None:
        entry["low"], entry["high"] = (round(v, 4) for v in interval)
    if not complete:
        entry["complete"] = False
    if acceptance is not None and not (_real(acceptance) and 0 <= acceptance <= 1):
        entry["acceptance"] = None
    if interval is not None and not all(_real(v) for v in interval):
        entry.pop("low", None), entry.pop("high", None)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry, allow_nan=False) + "\n")
    except (OSError, ValueError):
        return  # the measurement is in the report; the history only misses it


def _pairs(entry: dict) -> int:
    pairs = entry.get("pairs")
    return pairs if isinstance(pairs, int) and pairs > 0 else 1


def unusable(entry: dict, most_k: int | None = None) -> str | None:
    """Why a history entry is not worth predicting from (None: it is): measured on fewer
    than ``HISTORY_MIN_PAIRS`` pairs, from a disturbed run, or impossible (a drafter that
    drafts k tokens a step yields at most k + 1 per target forward; above that, the
    reference run was slowed). An entry that does not say its k is held to ``most_k``, the
    largest k its candidate is searched at."""
    k = entry.get("k")
    k = k if isinstance(k, int) and k > 0 else most_k
    ceiling = k + 1 if isinstance(k, int) and k > 0 else None
    if entry.get("disturbed"):
        return "disturbed"
    if _pairs(entry) < HISTORY_MIN_PAIRS:
        return f"on fewer than {HISTORY_MIN_PAIRS} pairs"
    if entry["speedup"] <= 0 or (ceiling is not None and entry["speedup"] > ceiling):
        return "faster than k + 1 tokens a step"
    return None


def _most_k(candidate: Candidate) -> int | None:
    """The largest k ``candidate`` is searched at (None: its type's own, unknown)."""
    return max((int(k) for k in candidate.k_values if str(k).isdigit()), default=None)


def usable(entry: dict, most_k: int | None = None) -> bool:
    return unusable(entry, most_k) is None


def weighted_quantile(values: list[tuple[float, int]], q: float) -> float:
    """The ``q`` quantile of (value, weight) pairs: the value at which the running weight
    reaches q of the total (the mean of the two values either side where it lands exactly
    between them, so two equal weights give their midpoint as the median)."""
    ordered = sorted(values)
    total = sum(w for _v, w in ordered)
    target = q * total
    running = 0
    for index, (value, weight) in enumerate(ordered):
        running += weight
        if running > target:
            return value
        if running == target:
            return (value + ordered[min(index + 1, len(ordered) - 1)][0]) / 2
    return ordered[-1][0]


def _interval(entry: dict) -> tuple[float, float] | None:
    low, high = entry.get("low"), entry.get("high")
    if isinstance(low, (int, float)) and isinstance(high, (int, float)) and low <= high:
        return float(low), float(high)
    return None


def _from_measured(entries: list[dict], widen_share: float) -> tuple[float, float, float]:
    """(middle, low, high) of the entries' speed-ups, weighted by their pairs: the weighted
    median, and the 10th-90th percentile widened by ``widen_share`` of the middle (at least
    the whole range for two entries or fewer, where percentiles are the extremes), and never
    narrower than the entries' own 95% intervals (their weighted 10th percentile of lows to
    90th of highs): one measurement on a few pairs is not known to within a tenth. In the
    tune_search benchmark (2026-11-27) a draft model's 0.70x on the search's 3 pairs was the
    whole history, and the grid measured 0.56x on 12."""
    weighted = [(e["speedup"], _pairs(e)) for e in entries]
    middle = weighted_quantile(weighted, 0.5)
    widen = widen_share * middle
    low = weighted_quantile(weighted, 0.1) - widen
    high = weighted_quantile(weighted, 0.9) + widen
    intervals = [(_interval(e), _pairs(e)) for e in entries if _interval(e) is not None]
    if intervals:
        low = min(low, weighted_quantile([(i[0], w) for i, w in intervals], 0.1))
        high = max(high, weighted_quantile([(i[1], w) for i, w in intervals], 0.9))
    return middle, max(0.0, min(low, middle)), max(high, middle)


def _left_out(entries: list[dict], most_k: int | None = None) -> str:
    """"; left out: 1 disturbed, 2 on fewer than 3 pairs" ("" when none were)."""
    reasons: dict[str, int] = {}
    for entry in entries:
        why = unusable(entry, most_k)
        if why is not None:
            reasons[why] = reasons.get(why, 0) + 1
    return ("; left out: " + ", ".join(f"{n} {why}" for why, n in reasons.items())
            if reasons else "")


def alpha_from_rate(rate: float, k: int) -> float:
    """The per-token acceptance that, drafting ``k`` tokens a step and stopping at the first
    rejection, accepts ``rate`` of the drafted tokens: (a + a^2 + ... + a^k) / k = rate,
    solved by bisection (the left side grows with a)."""
    rate = min(max(rate, 0.0), 1.0)
    low, high = 0.0, 1.0
    for _ in range(50):
        middle = (low + high) / 2
        if sum(iid_cumulative(middle, k)) / k < rate:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def similar(candidate: Candidate, setup: Setup, device: str, history: list[dict]
            ) -> Prediction | None:
    """A prediction from pairs like this one measured on this machine's ``device`` (see the
    module docstring); None when there are none."""
    kind = _kind(candidate)
    others = [e for e in history if e.get("device") == device and e.get("kind") == kind
              and e.get("target") != setup.facts.name and usable(e, _most_k(candidate))]
    if kind == NGRAM:
        seen = [e for e in others if e.get("spec_type") == candidate.spec_type]
        if not seen:
            return None
        middle, low, high = _from_measured(seen, SIMILAR_WIDEN)
        return Prediction(middle, low, high,
                          f"similar pairs ({candidate.spec_type} on {len(seen)} other "
                          f"target{'s' if len(seen) > 1 else ''}, {device})")
    family = setup.facts.family.lower()
    measured = [(alpha_from_rate(e["acceptance"], e["k"]), _pairs(e)) for e in others
                if e.get("family") == family and isinstance(e.get("acceptance"), (int, float))
                and isinstance(e.get("k"), int) and e["k"] > 0]
    if not measured:
        return None
    low = max(0.0, weighted_quantile(measured, 0.1) - SIMILAR_ACCEPTANCE_SPREAD)
    high = min(0.99, weighted_quantile(measured, 0.9) + SIMILAR_ACCEPTANCE_SPREAD)
    fitted = theory(candidate, setup, device, (low, high))
    return replace(fitted, source=fitted.source.replace(
        "theory (acceptance", f"similar pairs ({len(measured)} {family} pair"
        f"{'s' if len(measured) > 1 else ''} measured: acceptance", 1))


def predict(candidate: Candidate, setup: Setup, device: str,
            history: list[dict] | None = None, prompts: str | None = None) -> Prediction:
    """``prompts``: the digest of what this tune measures on (core.tune.run.prompt_set);
    earlier tunes on the same prompts, where there are any, are the only ones used."""
    history = read_history() if history is None else history
    most_k = _most_k(candidate)
    same = [e for e in history
            if e.get("target") == setup.facts.name and e.get("candidate") == candidate.label]
    seen = [e for e in same if usable(e, most_k)]
    ours = [e for e in seen if prompts is not None and e.get("prompts") == prompts]
    these = [e for e in ours if e.get("complete", True)]
    if these:
        same = [e for e in same if e.get("prompts") == prompts and e.get("complete", True)]
    where = (" on these prompts" if these else
             " on part of these prompts" if ours and len(ours) == len(seen) else
             " on other prompts" if prompts is not None else "")
    seen = these or seen
    if seen:
        widen = HISTORY_WIDEN if these or prompts is None else OTHER_PROMPTS_WIDEN
        middle, low, high = _from_measured(seen, widen)
        return Prediction(middle, low, high,
                          f"history ({len(seen)} earlier tune{'s' if len(seen) > 1 else ''}"
                          f"{where}, {sum(map(_pairs, seen))} pairs{_left_out(same, most_k)})")
    fallback = similar(candidate, setup, device, history) or theory(candidate, setup, device)
    if same:  # earlier tunes of this pair, none worth learning from: say so
        fallback = replace(fallback, source=f"{fallback.source}; {len(same)} earlier "
                           f"measurement{'s' if len(same) > 1 else ''} of this pair"
                           f"{_left_out(same, most_k)}")
    return fallback
