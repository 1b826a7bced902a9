"""SGLang as an arm: what it is, how it drafts, and what it says about acceptance.

Read from SGLang 0.5.23 (PyPI wheel; its _version.py names no commit) and, for the metric
names, sgl-project/sglang 00ae9c15 python/sglang/srt/metrics/collector.py (the same names
are in 0.5.23's observability/metrics_collector.py):

- ``GET /v1/models`` lists ModelCards with ``owned_by: "sglang"`` (entrypoints/openai/
  protocol.py): that is how it is told from other OpenAI-compatible servers; SGLang has no
  ``/version`` (vLLM's), ``/props`` (llama-server's) or ``/v1/model`` (TabbyAPI's).
- ``GET /server_info`` (``/get_server_info`` before it, deprecated but still served) is the
  resolved server arguments, flat, plus ``version`` and ``internal_states``
  (entrypoints/http_server.py, utils/common.py build_server_info): ``speculative_algorithm``
  (None, or EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM, DFLASH, DSPARK, UNO or a registered
  name; arg_groups/fields/spec.py), ``speculative_num_steps``, ``speculative_eagle_topk``,
  ``speculative_num_draft_tokens`` (the verify window: drafts per step + 1),
  ``speculative_draft_model_path``, ``enable_metrics``.
- A request with ``return_spec_tokens_details: true`` gets, in a stream, a chunk with
  ``choices: []`` and ``sglext.spec_tokens_details`` = SpecTokensDetails: spec_accept_rate,
  spec_accept_length (completion tokens / verify steps), spec_num_correct_drafts,
  spec_num_proposed_drafts (verify steps x (num_draft_tokens - 1)), spec_verify_ct,
  spec_correct_drafts_histogram (entry j: the steps that kept j drafts), before the usage
  chunk (serving_chat.py, managers/tokenizer_manager.py). Without speculative decoding the
  chunk is not sent. core.servers.readings reads it.
- ``/metrics`` (``--enable-metrics``): ``sglang:spec_accept_length`` and
  ``sglang:spec_accept_rate`` are Gauges (multiprocess_mode "mostrecent", labels model_name,
  engine_type, tp_rank, pp_rank, moe_ep_rank), set from the scheduler's last logged decode
  batches: not counters, so no difference around a run means anything. SpecDeck reads them
  after each run and labels them the server's recent average, never the run's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from specdeck.core.servers.counters import fetch_metrics, parse_series
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.transport import Base, ServerError

ACCEPT_LENGTH = "sglang:spec_accept_length"
ACCEPT_RATE = "sglang:spec_accept_rate"
GAUGE_MEANING = ("a gauge read after the run: the server's recent average over its last "
                 "logged decode batches, not this run's")


def probe_sglang(ask) -> Any:
    """ServerInfo for an SGLang at ``ask``'s URL, or None when it is another kind
    (``ask`` is core.servers.probe's asker: ``get`` answers None for a route not served)."""
    from specdeck.core.servers.probe import ServerInfo, has_metrics

    models = ask.get("/v1/models")
    cards = models.get("data") if isinstance(models, dict) else None
    if not isinstance(cards, list) or not cards or not all(
            isinstance(c, dict) and c.get("owned_by") == "sglang" for c in cards):
        return None
    ids = tuple(str(c["id"])[:200] for c in cards if isinstance(c.get("id"), str) and c["id"])
    info = ask.get("/server_info")
    if not isinstance(info, dict):
        info = ask.get("/get_server_info")
    info = info if isinstance(info, dict) else {}
    algorithm = info.get("speculative_algorithm")
    algorithm = str(algorithm)[:40] if isinstance(algorithm, str) and algorithm else None
    metrics = has_metrics(ask, "sglang:")
    notes = []
    if not info:
        notes.append("SGLang's /server_info did not answer: whether it drafts is unknown.")
    elif algorithm and not metrics:
        notes.append("Started without --enable-metrics: the sglang:spec_accept_length gauge "
                     "is not there to read (each request's own counts still are).")
    if algorithm == "NGRAM":
        notes.append(f"{REMEMBERS}: a prompt run again is drafted from its earlier answer, so "
                     "repeats flatter it; one repeat is the honest measurement.")
    version = info.get("version")
    return ServerInfo(
        ask.base.shown, ServerKind.SGLANG, model=ids[0] if ids else None, models=ids,
        draft=describe_drafting(info) if algorithm else None,
        speculative=(algorithm is not None) if info else None,
        version=str(version)[:40] if isinstance(version, (str, int, float)) else None,
        metrics=metrics, detected_by="/v1/models (owned_by sglang)", notes=tuple(notes))


REMEMBERS = (
    "NGRAM: its n-gram cache lives as long as the server (SGLang's "
    "speculative/ngram_worker.py: _update_ngram_cache puts every request's tokens into the "
    "worker's ngram_cache; read from SGLang's source, not checked on a running SGLang)")
"""As llama.cpp's ngram-mod (``core.llama_flags.REMEMBERS_ACROSS_REQUESTS``)."""


def describe_drafting(info: dict) -> str:
    """--speculative-algorithm and its sizes, as /server_info gives them."""
    parts = [str(info.get("speculative_algorithm"))[:40]]
    window = info.get("speculative_num_draft_tokens")
    if isinstance(window, int) and not isinstance(window, bool) and window > 1:
        parts.append(f"{window - 1} drafts per step")
    draft = info.get("speculative_draft_model_path")
    if isinstance(draft, str) and draft:
        parts.append(f"draft {draft[:200]}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Gauges:
    """SGLang's acceptance gauges as read after a run; each None when absent or not usable."""

    accept_length: float | None = None
    accept_rate: float | None = None
    problem: str = ""
    """Why a gauge the server sent is not used ("" when both are, or none was sent)."""

    def to_json(self) -> dict[str, Any]:
        return {"spec_accept_length": self.accept_length, "spec_accept_rate": self.accept_rate,
                "meaning": GAUGE_MEANING, "problem": self.problem}


def read_gauges(base: Base, api_key: str | None) -> Gauges:
    """The two gauges from ``/metrics``, checked: finite, a length of at least 1 and a rate
    from 0 to 1; 0 reads as "nothing logged yet" (SGLang's SchedulerStats start at 0.0);
    several series that disagree (ranks) give no one figure."""
    try:
        text = fetch_metrics(base, api_key)
    except ServerError:
        return Gauges()
    return parse_gauges(text)


def parse_gauges(text: str) -> Gauges:
    """The gauges' series in Prometheus text (read as every server's counters are:
    core.servers.counters.parse_series), one value per series (a rank's), checked."""
    values: dict[str, list[float]] = {}
    for name, _labels, value in parse_series(text):
        if name in (ACCEPT_LENGTH, ACCEPT_RATE):  # a value that is no number is not finite
            values.setdefault(name, []).append(math.nan if value is None else value)
    problems = []
    out = {}
    for name, low, high in ((ACCEPT_LENGTH, 1.0, 1000.0), (ACCEPT_RATE, 0.0, 1.0)):
        series = values.get(name, [])
        if not series:
            continue
        if any(not math.isfinite(v) for v in series):
            problems.append(f"/metrics {name} is {series[0]!r}: not a finite number")
            continue
        if len(set(series)) > 1:
            problems.append(f"/metrics {name} has {len(series)} series that disagree "
                            f"({', '.join(f'{v:g}' for v in series[:4])}): no one figure")
            continue
        value = series[0]
        if value == 0.0:
            continue  # not set yet: SGLang logs it after decode batches that drafted
        if not low <= value <= high:
            problems.append(f"/metrics {name} is {value:g}: outside {low:g} to {high:g}")
            continue
        out[name] = value
    return Gauges(out.get(ACCEPT_LENGTH), out.get(ACCEPT_RATE), "; ".join(problems))
