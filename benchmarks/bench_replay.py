"""Replay is exact: replayed n-gram drafts against llama-server's own counters, three suites

Issue 46: with greedy verification what an n-gram drafter gets accepted is a function of the
target's own output, so one plain run replayed through llama-server's algorithms
(core.tune.replay) should give, for every setting, exactly the drafts, verifications and
accepted tokens by position that the server counts. This benchmark holds it to that on the
real pinned llama-server and the demo target (SmolLM2-135M-Instruct Q4_1): one plain run of
every prompt of the grounded, code and structured suites (chat template, greedy, 96 tokens),
then for each setting a fresh llama-server sent the same requests in the same order (so the
state ngram-map, ngram-mod and ngram-cache keep between requests and slots is exercised),
its /metrics differences (``spec_decode_num_drafts_total``, ``..._draft_tokens_total``,
``..._accepted_tokens_per_pos_total{position}``) against the replay of the plain run. Each
drafting server's own outputs are replayed too, so that a difference could be told apart: a
replay that drafts otherwise, or an output that changed with the batch shape. A last pass
stops at the end of generation (the open end a replay cannot see past).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from benchmarks.report import Report

SUITES = ("grounded", "code", "structured")
MAX_NEW = 96
FLAGS = ("-t", "1", "-c", "4096")
"""One thread: on this shared 2-core machine two threads spin against each other (a 135M
model decoded at 9 tok/s with -t 2 against 81 with -t 1 under load 6)."""


def _settings():
    from specdeck.core.llama_flags import (
        NGRAM_CACHE,
        NGRAM_MAP_K,
        NGRAM_MAP_K4V,
        NGRAM_MOD,
        NGRAM_SIMPLE,
    )
    from specdeck.core.tune.replay.session import Setting

    out = [Setting.of(NGRAM_SIMPLE)]
    out += [Setting.of(NGRAM_SIMPLE, size_n=n, size_m=m) for n, m in ((2, 4), (3, 8), (4, 16))]
    out += [Setting.of(NGRAM_MAP_K, size_m=m) for m in (4, 8, 16)]
    out += [Setting.of(NGRAM_MAP_K, size_n=n, size_m=m) for n, m in ((2, 8), (3, 16))]
    out += [Setting.of(NGRAM_MAP_K4V, size_m=m) for m in (4, 8, 16)]
    out += [Setting.of(NGRAM_MAP_K4V, size_n=2, size_m=8, min_hits=h) for h in (1, 2)]
    out += [Setting.of(NGRAM_MOD, n_max=m) for m in (4, 8, 16)]
    out += [Setting.of(NGRAM_MOD, n_match=n, n_max=m, n_min=1) for n, m in ((4, 8), (8, 16))]
    out += [Setting.of(NGRAM_MOD)]
    out += [Setting.of(NGRAM_CACHE)]
    return out


def _server(binary: Path, target: Path, flags, log: Path):
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    server = ManagedServer(LaunchProfile(str(binary), str(target), (*FLAGS, *flags)), log)
    server.start()
    return server


def run(report: Report) -> None:
    from specdeck.core.bench.suites import builtin_suites
    from specdeck.core.servers.transport import Base
    from specdeck.core.tune.replay.capture import capture
    from specdeck.core.tune.replay.proof import Counted, run_on_server
    from specdeck.core.tune.replay.session import replay

    from tools.llama_server_build import build

    binary = build()
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.llama_flags import NGRAM_MOD

    target = find_gguf()
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_replay_logs"
    logs.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()
    suites = builtin_suites()
    prompts = [(f"{s}/{p.id}", p.text) for s in SUITES for p in suites[s].prompts]
    report.record("load_at_start", load)
    report.text(f"Load average at the start: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
                f"(1/5/15 min). llama-server {' '.join(FLAGS)}; {len(prompts)} prompts "
                f"({', '.join(SUITES)}), {MAX_NEW} new tokens each, sent in that order.")
    report.text()

    started = time.perf_counter()
    plain = _server(binary, target, (), logs / "plain.log")
    try:
        runs = capture(Base.parse(plain.url), prompts, MAX_NEW)
        ended_runs = capture(Base.parse(plain.url), prompts, MAX_NEW, stop_on_eos=True)
    finally:
        plain.stop()
    requests = [r.request for r in runs]
    capture_s = time.perf_counter() - started
    report.record("prompt_tokens", [len(r.prompt) for r in requests])

    rows, results, exact, own_exact = [], [], 0, 0
    replay_s = 0.0
    for setting in _settings():
        server = _server(binary, target, setting.flags(), logs / f"{setting.kinds[0]}.log")
        try:
            done = run_on_server(Base.parse(server.url), requests)
            counted, own = done.counted, done.own
        finally:
            server.stop()
        t0 = time.perf_counter()
        total, _ = replay(setting, requests, n_ctx=4096)
        replay_s += time.perf_counter() - t0
        own_total, _ = replay(setting, own, n_ctx=4096)
        replayed = Counted.of(total)
        same_output = sum(o.output == r.output for o, r in zip(own, requests, strict=True))
        ok, own_ok = replayed == counted, Counted.of(own_total) == counted
        exact += ok
        own_exact += own_ok
        results.append({"setting": setting.label, "flags": list(setting.flags()),
                        "server": counted.to_json(), "replay": replayed.to_json(),
                        "replay_of_own_output": Counted.of(own_total).to_json(),
                        "outputs_unchanged": same_output, "exact": ok})
        rows.append([setting.label, f"{counted.drafts} / {replayed.drafts}",
                     f"{counted.drafted} / {replayed.drafted}",
                     f"{counted.accepted} / {replayed.accepted}",
                     " ".join(map(str, counted.per_pos[:8])) + (" …" if len(counted.per_pos) > 8
                                                                else ""),
                     "yes" if ok else "**no**", f"{same_output}/{len(requests)}"])
        report.checkpoint(setting.label)

    # The open end: requests that stop at the end of generation.
    ended = [r.request for r in ended_runs]
    open_rows = []
    for setting in _settings()[:1] + [s for s in _settings() if s.kinds[0] == NGRAM_MOD][:1]:
        server = _server(binary, target, setting.flags(), logs / "ended.log")
        try:
            counted = run_on_server(Base.parse(server.url), ended).counted
        finally:
            server.stop()
        total, _ = replay(setting, ended, n_ctx=4096)
        open_rows.append([setting.label, sum(r.ended for r in ended), total.open_ended,
                          "yes" if Counted.of(total) == counted else "no"])
        results.append({"setting": setting.label, "stop_on_eos": True,
                        "server": counted.to_json(), "replay": Counted.of(total).to_json(),
                        "open_ended": total.open_ended})

    report.record("settings", results)
    report.record("exact", exact)
    report.record("exact_on_own_output", own_exact)
    report.record("capture_s", round(capture_s, 1))
    report.record("replay_s_all_settings", round(replay_s, 3))
    n = len(_settings())
    report.text(f"**{exact} of {n} settings replayed exactly** (every counter and every "
                f"position equal to the server's), {own_exact} of {n} when each drafting "
                f"server's own output is replayed. The plain runs took {capture_s:.0f} s; "
                f"replaying all {n} settings took {replay_s:.2f} s in Python.")
    report.text()
    report.table(["setting", "verifications (server / replay)", "draft tokens",
                  "accepted", "server's accepted by position", "exact", "outputs unchanged"],
                 rows)
    report.text("Stopping at the end of generation (chat answers that end before 96 tokens): "
                "llama-server's verification stops at a matched end-of-generation token that "
                "is not the draft's last, without counting it, so no draft needs what the "
                "target would have said after it.")
    report.text()
    report.table(["setting", "requests that ended", "open ends in the replay", "exact"],
                 open_rows)
    requests_by_len = [len(r.output) for r in ended]
    report.record("ended_lengths", requests_by_len)
