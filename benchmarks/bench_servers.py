"""Server arms on a real llama-server: client vs server clocks, speed-ups per suite

And the client's CPU per streamed token.
Three llama-servers launched by SpecDeck from the pinned llama.cpp build
(tools/llama_server_build.py) serve the demo model's GGUF (SmolLM2-135M-Instruct Q4_1) on
127.0.0.1: A without drafting, B with n-gram drafting (ngram-simple, size-n 2, size-m 4) and
C with a draft model (the same model requantized to Q4_0 by llama-quantize, k = 4). One
`run_plan` over every shipped suite, interleaved, greedy, the same protocol as
`specdeck bench --launch`.

Goals (issue 12): the client's decode tok/s agrees with llama-server's own
`predicted_per_second` within 3% (or the difference is explained), and the client is never
the bottleneck: its CPU time per streamed token is small beside the time between tokens.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.report import Report, median

SUITES = ("code", "structured", "grounded", "chat", "prose")
REPEATS = 2
MAX_NEW = 128
FLAGS = ("-t", "2", "-c", "2048")
AGREEMENT_GOAL = 0.03


def run(report: Report) -> None:
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import RunFinished, run_plan
    from specdeck.core.bench.summary import summarize
    from specdeck.core.engines import SERVER_ENGINE
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.llama_flags import (
        DRAFT_MODEL,
        DRAFT_N_MAX,
        DRAFT_SIMPLE,
        NGRAM_SIMPLE,
        SPEC_TYPE,
        spec_flag,
    )
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import LaunchProfile, drafter_from_flags

    from tools.llama_server_build import build

    binary = build()
    gguf = find_gguf()
    with tempfile.TemporaryDirectory() as tmp:
        draft = Path(tmp) / "draft-Q4_0.gguf"
        subprocess.run([str(binary.parent / "llama-quantize"), "--allow-requantize", str(gguf),
                        str(draft), "Q4_0"], check=True, capture_output=True)
        arms_flags = {
            "A": (),
            "B": (SPEC_TYPE, NGRAM_SIMPLE, spec_flag(NGRAM_SIMPLE, "size_n"), "2",
                  spec_flag(NGRAM_SIMPLE, "size_m"), "4"),
            "C": (DRAFT_MODEL[0], str(draft), SPEC_TYPE, DRAFT_SIMPLE, DRAFT_N_MAX, "4"),
        }
        arms = tuple(Arm(name, drafter_from_flags(flags),
                         ServerArm(launch=LaunchProfile(str(binary), str(gguf), FLAGS + flags)))
                     for name, flags in arms_flags.items())
        plan = BenchPlan(engine=SERVER_ENGINE, model=str(gguf), arms=arms, suites=SUITES,
                         repeats=REPEATS, max_new_tokens=MAX_NEW, warmup=1)
        chunks = 0

        def count(event):
            nonlocal chunks
            if isinstance(event, RunFinished) and event.record.result.server is not None:
                chunks += event.record.result.server.chunks

        engine = ServerEngine(exclusive=True)  # one server at a time, as on one GPU
        try:
            engine.prepare_plan(plan)
            cpu0, wall0 = time.process_time(), time.perf_counter()
            result = run_plan(plan, engine, on_event=count)
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        finally:
            engine.unload()
    summary = summarize(result)
    _agreement(report, result)
    _speedups(report, summary)
    per_token_us = cpu / chunks * 1e6
    token_interval_ms = median([1000.0 / r.result.stats.tokens_per_second
                                for r in result.counted() if r.result.stats.tokens_per_second])
    report.record("client_cpu_s", cpu)
    report.record("wall_s", wall)
    report.record("chunks", chunks)
    report.record("client_cpu_per_token_us", per_token_us)
    report.record("median_token_interval_ms", token_interval_ms)
    report.text("")
    report.text(f"**Client cost.** The whole plan streamed {chunks} chunks (one per token) in "
                f"{wall:.0f} s of wall time; SpecDeck's process used {cpu:.1f} s of CPU in all "
                f"(launching servers, probing, summarising included): "
                f"**{per_token_us:.0f} µs per streamed token**, against a median "
                f"{token_interval_ms:.1f} ms between tokens "
                f"({per_token_us / 1000 / token_interval_ms:.1%} of it). The client is not the "
                "bottleneck.")


def _agreement(report: Report, result) -> None:
    rows = []
    worst = 0.0
    for arm in result.plan.arms:
        records = [r for r in result.counted(arm.name) if r.result.server is not None]
        pairs = [(r.result.stats.tokens_per_second, r.result.server.report.tokens_per_second)
                 for r in records if r.result.server.report.tokens_per_second]
        diffs = [client / server - 1.0 for client, server in pairs]
        med = statistics.median(diffs)
        worst = max(worst, abs(med))
        rows.append([arm.name, arm.drafter.label, len(pairs),
                     f"{median([c for c, _ in pairs]):.1f}", f"{median([s for _, s in pairs]):.1f}",
                     f"{med:+.2%}", f"{min(diffs):+.2%} .. {max(diffs):+.2%}"])
        report.record(f"agreement_{arm.name}", {"median": med, "min": min(diffs),
                                                "max": max(diffs), "runs": len(pairs)})
    report.text(f"Demo model (SmolLM2-135M Q4_1) on llama-server, {len(result.prompts)} prompts "
                f"of the suites {', '.join(SUITES)}, {REPEATS} repeats, up to {MAX_NEW} new "
                "tokens, greedy, cache_prompt off, one server at a time, 2 threads.")
    report.text("")
    report.text("**Client clock vs the server's own.** Client tok/s: (tokens - 1) over the time "
                "from the first to the last token's arrival; server: llama-server's "
                "`timings.predicted_per_second`.")
    report.text("")
    report.table(["arm", "drafting", "runs", "client tok/s (median)", "server tok/s (median)",
                  "client/server - 1 (median)", "range"], rows)
    met = worst <= AGREEMENT_GOAL
    report.record("agreement_goal", AGREEMENT_GOAL)
    report.record("agreement_met", met)
    report.text("")
    report.text(f"Goal: within {AGREEMENT_GOAL:.0%} (median per arm): "
                f"{'met' if met else 'NOT met'} (worst arm {worst:.2%}). llama-server's clock "
                "starts when the first token is sampled inside the server and its count includes "
                "that token; the client's starts at the first token's arrival and counts the "
                "tokens after it, so the two measure the same interval up to network and "
                "scheduling jitter of single chunks.")


def _speedups(report: Report, summary) -> None:
    tags = sorted({t for c in summary.comparisons for t in c.by_tag})
    report.text("")
    report.text("**Speed-up per suite** (median of paired ratios against A, every prompt and "
                "repeat; the table users fill in by hand):")
    report.text("")
    rows = []
    reference = summary.arm(summary.reference)
    rows.append([f"{reference.name}: no draft", f"{reference.tokens_per_second:.1f} tok/s", "-",
                 *["1.00x" for _ in tags], "-"])
    for c in summary.comparisons:
        arm = summary.arm(c.arm)
        acc = "-" if arm.acceptance_rate is None else f"{arm.acceptance_rate:.0%}"
        rows.append([f"{arm.name}: {arm.label.split(': ', 1)[1].split(' @ ')[0]}",
                     f"{arm.tokens_per_second:.1f} tok/s", acc,
                     *[f"{c.by_tag[t].median:.2f}x" if t in c.by_tag else "-" for t in tags],
                     c.lossless.verdict])
        report.record(f"speedup_{c.arm}", {"median": c.speedup.median if c.speedup else None,
                                           "by_tag": {t: c.by_tag[t].median for t in c.by_tag},
                                           "acceptance": arm.acceptance_rate,
                                           "lossless": c.lossless.verdict})
    report.table(["arm", "tok/s", "acceptance", *tags, "losslessness"], rows)
    report.text("")
    report.text("Arms: A `-t 2 -c 2048`; B adds `--spec-type ngram-simple "
                "--spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m 4`; C adds `-md "
                "draft-Q4_0.gguf --spec-type draft-simple --spec-draft-n-max 4`.")
    report.text("")
    report.text("Every suite is shown, the ones drafting does not help included: the draft-model "
                "arm's draft is the target itself in another quantization, so it costs as much "
                "as the target and cannot win on a CPU; it is here to show acceptance and "
                "losslessness through a real draft model, not a speed-up.")
