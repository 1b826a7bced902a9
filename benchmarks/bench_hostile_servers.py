"""Hostile servers: how long SpecDeck's client takes to give up, and how much memory it holds

Issue 26: a server that trickles a byte every few seconds, keeps a stream alive with comments
for ever, ignores max_tokens, floods 64 KiB chunks (4 GB in 20 s before the bounds) or sends
one 50 MiB event must not hold a run or grow the client without end. Each case runs the
client in its own process against a server from tests/hostile_servers.py on 127.0.0.1
(served from this process, so the server's own buffers are not counted) and records the
wall time until the client stopped and its peak RSS (``VmHWM``), worst of REPEATS
runs; the baseline is the same process reading a well-behaved 2,048-token stream.

Deadlines: the probe runs with its shipped limits (PROBE_TIMEOUT_S per request); the
streams run with a 2 s total deadline given to ``stream_sse`` (a generation's own is
GENERATION_TIMEOUT_S + GENERATION_S_PER_TOKEN x max new tokens, minutes: the mechanism is
the same), so the table shows how closely a deadline is kept. Byte, event and token bounds
are the shipped ones.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from specdeck.core.units import KiB, MiB, format_bytes

from benchmarks.report import Report

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 3
STREAM_DEADLINE_S = 2.0
MAX_NEW = 2048
TEXT_EVENT = (b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"x" * (64 * KiB)
              + b'"}, "finish_reason": null}]}\n\n')
GOAL_OVERSHOOT_S = 0.5
"""A deadline is kept when the client stops within this much after it."""

CLIENT = r"""
import json, resource, sys, time
case = json.loads(sys.argv[1])
from specdeck.core.servers.transport import Base, stream_sse
from specdeck.core.servers.readings import StreamReading
from specdeck.core.servers.probe import probe

started = time.monotonic()
error = ""
events = 0
try:
    if case["what"] == "probe":
        probe(case["url"])
    else:
        kwargs = {"timeout": case["deadline"]} if case.get("deadline") else {}
        reading = StreamReading("llama-server", time.perf_counter(), max_tokens=case["max_new"])
        for event in stream_sse(Base.parse(case["url"]), "/v1/chat/completions",
                                {"max_tokens": case["max_new"], "stream": True}, **kwargs):
            reading.add(event)
            events += 1
            if reading.overran:
                error = "stopped at max tokens"
                break
except Exception as exc:
    error = exc.what if hasattr(exc, "what") else f"{type(exc).__name__}: {exc}"
elapsed = time.monotonic() - started
# VmHWM: this process's peak since exec (ru_maxrss would count the parent's pages it
# shared between fork and exec).
try:
    with open("/proc/self/status") as status:
        peak = next(int(l.split()[1]) for l in status if l.startswith("VmHWM:"))
except (OSError, StopIteration):
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"elapsed_s": elapsed, "events": events, "error": error, "peak_rss_kb": peak}))
"""


def _client(case: dict) -> dict:
    result = subprocess.run([sys.executable, "-c", CLIENT, json.dumps(case)], capture_output=True,
                            text=True, timeout=300, cwd=ROOT)
    if result.returncode != 0:
        raise RuntimeError(result.stderr)
    return json.loads(result.stdout.strip().splitlines()[-1])


def _cut(text: str, most: int = 100) -> str:
    return text if len(text) <= most else text[:most].rsplit(" ", 1)[0] + " …"


def run(report: Report) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    import hostile_servers as hs  # noqa: E402 - the tests' hostile servers
    from specdeck.core.servers import probe as probe_module
    from specdeck.core.servers import transport

    cases = [
        ("baseline: a well-behaved 2,048-token stream", hs.Llm, {"step_s": 0.0},
         {"what": "stream", "max_new": MAX_NEW}, None),
        ("probe of a server trickling a byte every 50 ms", hs.Trickle, {},
         {"what": "probe"}, probe_module.PROBE_TIMEOUT_S),
        ("stream trickling a byte every 50 ms (status line first)", hs.Trickle, {"gets": False},
         {"what": "stream", "max_new": 16, "deadline": STREAM_DEADLINE_S}, STREAM_DEADLINE_S),
        ("stream of `: keep-alive` comments for ever", hs.KeepAlive, {},
         {"what": "stream", "max_new": 16, "deadline": STREAM_DEADLINE_S}, STREAM_DEADLINE_S),
        ("endless stream ignoring max_tokens (2,048 asked)", hs.Endless, {"step_s": 0.0},
         {"what": "stream", "max_new": MAX_NEW}, None),
        ("probe of a server whose every answer is endless JSON", hs.Flood, {},
         {"what": "probe"}, None),
        ("flood of 64 KiB lines, no token", hs.Flood, {},
         {"what": "stream", "max_new": MAX_NEW}, None),
        ("flood of 64 KiB text events (each a 'token')", hs.Flood, {"line": TEXT_EVENT},
         {"what": "stream", "max_new": MAX_NEW}, None),
        ("one 50 MiB event", hs.HugeEvent, {"size": 50 * MiB},
         {"what": "stream", "max_new": MAX_NEW}, None),
    ]
    rows = []
    results = {}
    for title, server_class, attrs, case, deadline in cases:
        runs = []
        for _ in range(REPEATS):
            with hs.serving(server_class, **attrs) as (url, _):
                runs.append(_client({**case, "url": url}))
        worst = max(r["elapsed_s"] for r in runs)
        peak = max(r["peak_rss_kb"] for r in runs) * KiB  # ru_maxrss: KiB on Linux
        kept = None if deadline is None else worst <= deadline + GOAL_OVERSHOOT_S
        results[title] = {"worst_s": worst, "peak_rss_mib": peak / MiB, "deadline_s": deadline,
                          "deadline_kept": kept, "stopped_by": runs[0]["error"] or "its end",
                          "events": runs[0]["events"], "runs": runs}
        rows.append([title, "-" if deadline is None else f"{deadline:g} s", f"{worst:.2f} s",
                     format_bytes(peak), _cut(runs[0]["error"]) or "(finished)"])
    baseline = results[cases[0][0]]["peak_rss_mib"]
    for title in results:
        results[title]["rss_above_baseline_mib"] = results[title]["peak_rss_mib"] - baseline
    report.record("cases", results)
    report.record("bounds", {"max_stream_bytes": transport.MAX_STREAM_BYTES,
                             "max_event_bytes": transport.MAX_EVENT_BYTES,
                             "max_json_bytes": transport.MAX_JSON_BYTES,
                             "probe_timeout_s": probe_module.PROBE_TIMEOUT_S,
                             "probe_total_s": probe_module.PROBE_TOTAL_S,
                             "stream_deadline_s": STREAM_DEADLINE_S, "repeats": REPEATS})
    report.text(f"Worst of {REPEATS} runs per case; each client a fresh process (its peak RSS "
                "includes Python and SpecDeck's imports).")
    report.text("")
    report.table(["case", "deadline", "worst time to stop", "client peak RSS", "stopped by"], rows)
    kept = [r for r in results.values() if r["deadline_kept"] is not None]
    worst_rss = max(r["rss_above_baseline_mib"] for r in results.values())
    report.text(f"Goal: every deadline kept within {GOAL_OVERSHOOT_S:g} s: "
                f"{'met' if all(r['deadline_kept'] for r in kept) else 'MISSED'} "
                f"({sum(r['deadline_kept'] for r in kept)} of {len(kept)} cases). "
                f"The bounded cases hold at most {format_bytes(worst_rss * MiB)} more than the baseline "
                f"(stream bound {format_bytes(transport.MAX_STREAM_BYTES)}, one event at most "
                f"{format_bytes(transport.MAX_EVENT_BYTES)}).")
