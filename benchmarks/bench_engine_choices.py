"""Why the PyTorch engine's CPU defaults: oneDNN pre-packed linears and short n-gram matches

Two of the engine's defaults rest on measurements; this benchmark makes them, so the figures
docs/engines.md and the code quote come from `make bench`, not from a run by hand.

1. Pre-packed linear layers (core/engines/cpu_linear.py, on for float32 CPU runs): the cost
   of one target forward over n new rows (a verify step checks k drafts in k + 1 rows), n =
   1..9, with the weights pre-packed for oneDNN and with plain ``F.linear``, on the demo
   model after a 200-token prefill (the cache is cropped back after every forward, so each
   one sees the same context). Median of FORWARD_REPEATS forwards per row count.
2. Short n-gram matches (core/engines/ngram.py, ``DrafterSpec.ngram_short``, default 2): the
   A/B protocol itself (core.bench: interleaved, paired) with the no-draft reference and the
   n-gram drafter at k = 4 with short matches drafting nothing (0) and up to 2 tokens, on
   every shipped suite; the figure is the median of the paired ratios short = 2 over
   short = 0 (same prompt, same repeat), with its 95% bootstrap interval.
"""

from __future__ import annotations

from dataclasses import replace

from benchmarks.report import Report, median

FORWARD_REPEATS = 9
ROWS = tuple(range(1, 10))
PREFILL = 200
SUITES = ("grounded", "code", "structured", "chat", "prose")
MAX_NEW = 64
REPEATS = 2
K = 4


def run(report: Report) -> None:
    from specdeck.core.engines.demo import ensure_demo_model

    model_dir = ensure_demo_model()  # converts on first use; raises if it cannot run here
    forwards = {packed: _forward_costs(model_dir, packed) for packed in (True, False)}
    short = _short_matches(model_dir)
    report.record("forward_ms", {("packed" if p else "unpacked"): v for p, v in forwards.items()})
    report.record("short_matches", short)
    _write(report, forwards, short)


def _forward_costs(model_dir, packed: bool) -> dict[int, float]:
    """Milliseconds per target forward of n new rows after the prefill."""
    import time

    import torch
    from specdeck.core.engines.base import LoadSpec
    from specdeck.core.engines.speculative import cache_argument
    from specdeck.core.engines.torch_ref import TorchEngine
    from transformers import DynamicCache

    torch.set_num_threads(2)
    engine = TorchEngine(prepack=packed)
    engine.load(LoadSpec(model_dir, device="cpu", dtype="float32"))
    try:
        model, _ = engine.model_objects()
        key = cache_argument(model)
        context = torch.arange(1000, 1000 + PREFILL).unsqueeze(0)
        rows = torch.arange(2000, 2000 + max(ROWS)).unsqueeze(0)
        costs = {}
        with torch.inference_mode():
            cache = DynamicCache(config=model.config)
            model(context, use_cache=True, **{key: cache})
            for n in ROWS:
                times = []
                for _ in range(FORWARD_REPEATS + 1):  # the first of each size is a warm-up
                    started = time.perf_counter()
                    model(rows[:, :n], use_cache=True, **{key: cache})
                    times.append(time.perf_counter() - started)
                    cache.crop(-n)  # back to the prefill: every forward sees the same context
                costs[n] = median(times[1:]) * 1000
        return costs
    finally:
        engine.unload()


def _short_matches(model_dir) -> dict:
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.stats import speedup, summarize_ratios
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.base import DrafterKind, DrafterSpec, LoadSpec

    ngram = DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=K, adaptive=False)
    arms = (Arm("A"), Arm("none", replace(ngram, ngram_short=0)),
            Arm("short2", replace(ngram, ngram_short=2)))
    engine = create_engine("torch")
    per_suite = {}
    try:
        for suite in SUITES:
            plan = BenchPlan(engine="torch", model="demo", arms=arms, suites=(suite,),
                             max_new_tokens=MAX_NEW, repeats=REPEATS, warmup=1,
                             load=LoadSpec(model_dir, device="cpu", dtype="float32"))
            run = run_plan(plan, engine)
            tps = {(r.arm, r.pair_key): r.result.stats.tokens_per_second for r in run.counted()}
            keys = sorted({key for arm, key in tps if arm == "none"}
                          & {key for arm, key in tps if arm == "short2"})
            ratios = [speedup(tps[("none", key)], tps[("short2", key)]) for key in keys]
            over_a = {arm: [speedup(tps[("A", key)], tps[(arm, key)]) for key in keys
                            if ("A", key) in tps] for arm in ("none", "short2")}
            summary = summarize_ratios([r for r in ratios if r is not None])
            per_suite[suite] = {
                "pairs": summary.n, "median": summary.median, "ci": [summary.ci_low, summary.ci_high],
                "over_no_draft": {arm: summarize_ratios([r for r in v if r is not None]).median
                                  for arm, v in over_a.items()}}
    finally:
        engine.unload()
    return per_suite


def _write(report: Report, forwards: dict[bool, dict[int, float]], short: dict) -> None:
    packed, plain = forwards[True], forwards[False]
    report.text(f"Demo model (SmolLM2-135M-Instruct), float32, CPU, 2 threads. One target forward "
                f"over n new rows after a {PREFILL}-token prefill, median of {FORWARD_REPEATS} "
                "(a verify step of k drafts is k + 1 rows):")
    report.text("")
    report.table(["rows", *map(str, ROWS)], [
        ["pre-packed (ms)", *(f"{packed[n]:.1f}" for n in ROWS)],
        ["F.linear (ms)", *(f"{plain[n]:.1f}" for n in ROWS)],
        ["pre-packed, n rows / 1 row", *(f"{packed[n] / packed[1]:.2f}x" for n in ROWS)],
        ["F.linear, n rows / 1 row", *(f"{plain[n] / plain[1]:.2f}x" for n in ROWS)],
    ])
    report.text(f"Pre-packed: 5 rows cost {packed[5] / packed[1]:.2f}x one row "
                f"({packed[1]:.1f} -> {packed[5]:.1f} ms); with F.linear "
                f"{plain[5] / plain[1]:.2f}x ({plain[1]:.1f} -> {plain[5]:.1f} ms). One row "
                f"pre-packed costs {packed[1] / plain[1]:.2f}x one row with F.linear.")
    report.text("")
    report.text(f"Short n-gram matches: the A/B protocol (interleaved, paired), k = {K} fixed, "
                f"{MAX_NEW} new tokens, every prompt of each suite x {REPEATS} repeats; short "
                "matches drafting up to 2 tokens (the default) against drafting nothing:")
    report.text("")
    report.table(["suite", "short = 2 / short = 0 (95% interval)", "short = 0 / no draft",
                  "short = 2 / no draft", "pairs"],
                 [[suite, f"**{v['median']:.2f}x** ({v['ci'][0]:.2f}-{v['ci'][1]:.2f})",
                   f"{v['over_no_draft']['none']:.2f}x", f"{v['over_no_draft']['short2']:.2f}x",
                   v["pairs"]] for suite, v in short.items()])
