"""What a draft model's acceptance follows: the prompts, the draft, and the target's confidence

Issue 27 asks the tuner to predict each candidate's speed-up before it runs, within 15%. For
n-gram types it does; for a draft model one figure missed on one suite of three
(tune_search.md): the same draft measured 0.34x on code and 0.56x on grounded prompts. This
benchmark measures where that spread comes from, on the real llama-server and the demo target
(SmolLM2-135M-Instruct Q4_1), with drafts of known quality: the same model requantized by
llama-quantize (Q8_0 close to the target, Q4_0 the tune benchmarks' draft, Q3_K_S further).

Per suite of the shipped prompts (greedy, chat template, fixed length): the target's mean
top-1 probability over the tokens it writes (llama-server's logprobs with top_logprobs=2), and
each draft's acceptance at k=4 from llama-server's own counts (draft_n_accepted / draft_n),
with the per-token acceptance that gives (core.tune.predict.alpha_from_rate).

It then asks what a prediction could know. (a) One draft's per-token acceptance across the
suites: a prediction that ignores the prompts can be right on at most part of that spread.
(b) Across drafts on the same prompts: what the draft is decides as much, and a prediction
made before the draft ever ran does not know it. (c) A draft measured on one suite, predicted
on another: its acceptance as measured, against its miss rate scaled by the target's
uncertainty (1 - top-1 probability) on each suite, both against what it then measured.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import tempfile
import urllib.request
from pathlib import Path

from benchmarks.report import Report

SUITES = ("grounded", "code", "structured", "chat", "prose")
DRAFTS = ("Q8_0", "Q4_0", "Q3_K_S")
K = 4
MAX_NEW = 64
FLAGS = ("-t", "2", "-c", "2048")


def _ask(url: str, prompt: str, logprobs: bool) -> dict:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": MAX_NEW,
            "temperature": 0, "seed": 1}
    if logprobs:
        body.update(logprobs=True, top_logprobs=2)
    request = urllib.request.Request(f"{url}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.load(response)


def _served(binary: Path, target: Path, args: tuple[str, ...], log: Path, prompts, work):
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    server = ManagedServer(LaunchProfile(str(binary), str(target), (*FLAGS, *args)), log)
    url = server.start()
    try:
        return [work(url, suite, prompt) for suite, prompt in prompts]
    finally:
        server.stop()


def _confidence(answer: dict) -> list[float]:
    """The target's top-1 probability at each token it wrote."""
    return [math.exp(t["top_logprobs"][0]["logprob"])
            for t in answer["choices"][0]["logprobs"]["content"] if t["top_logprobs"]]


def run(report: Report) -> None:
    from specdeck.core.bench.suites import builtin_suites
    from specdeck.core.engines.base import acceptance_rate
    from specdeck.core.llama_flags import DRAFT_MODEL, DRAFT_N_MAX, DRAFT_SIMPLE, SPEC_TYPE
    from specdeck.core.servers.readings import answer_timings
    from specdeck.core.tune import setup as tune_setup
    from specdeck.core.tune.predict import ACCEPTANCE, alpha_from_rate

    from tools.llama_server_build import build

    binary = build()
    target = Path(tune_setup.demo(binary, FLAGS).target)
    suites = builtin_suites()
    prompts = [(suite, p.text) for suite in SUITES for p in suites[suite].prompts]
    with tempfile.TemporaryDirectory() as tmp:
        drafts, digests = {}, {}
        for quant in DRAFTS:
            path = Path(tmp) / f"draft-{quant}.gguf"
            subprocess.run([str(binary.parent / "llama-quantize"), "--allow-requantize",
                            str(target), str(path), quant], check=True, capture_output=True,
                           timeout=300)
            with path.open("rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            if digest in digests:  # llama-quantize fell back to a type already measured
                report.text(f"{quant}: the same file as {digests[digest]} (llama-quantize's "
                            f"fallback for this model's shapes); not measured twice.")
                continue
            digests[digest], drafts[quant] = quant, path

        answers = _served(binary, target, (), Path(tmp) / "target.log", prompts,
                          lambda url, suite, prompt: (suite, _ask(url, prompt, True)))
        confidence = {s: statistics.mean(p for suite, a in answers if suite == s
                                         for p in _confidence(a)) for s in SUITES}
        texts = [a["choices"][0]["message"]["content"] for _, a in answers]

        counts: dict[str, dict[str, list[int]]] = {}
        unchanged: dict[str, int] = {}
        for quant, path in drafts.items():
            runs = _served(binary, target, (DRAFT_MODEL[0], str(path), SPEC_TYPE, DRAFT_SIMPLE,
                                            DRAFT_N_MAX, str(K)),
                           Path(tmp) / f"{quant}.log", prompts,
                           lambda url, suite, prompt: (suite, _ask(url, prompt, False)))
            per_suite = counts.setdefault(quant, {s: [0, 0] for s in SUITES})
            for suite, answer in runs:
                timings = answer_timings(answer)  # checked; a reading that failed counts none
                per_suite[suite][0] += timings.accepted or 0
                per_suite[suite][1] += timings.drafted or 0
            unchanged[quant] = sum(a["choices"][0]["message"]["content"] == t
                                   for (_, a), t in zip(runs, texts, strict=True))

    rates = {q: {s: acceptance_rate(a, n) for s, (a, n) in c.items()} for q, c in counts.items()}
    alpha = {q: {s: alpha_from_rate(r, K) if r is not None else None for s, r in c.items()}
             for q, c in rates.items()}
    report.record("confidence", confidence)
    report.record("counts", counts)
    report.record("alpha", alpha)
    report.record("unchanged", unchanged)
    report.text(f"Target: {target.name} on the pinned llama-server ({' '.join(FLAGS)}); "
                f"{len(prompts)} prompts of {len(SUITES)} suites, {MAX_NEW} new tokens, greedy; "
                f"drafts at k={K} (draft-simple). Every drafted answer equal to the target's "
                "alone: " + ", ".join(f"{q} {n}/{len(prompts)}" for q, n in unchanged.items())
                + ".")
    report.text()
    report.text("### Acceptance by suite and draft")
    report.text()
    report.text("Each cell: drafted tokens accepted (llama-server's counts), then the per-token "
                "acceptance that gives at k=4.")
    report.text()
    report.table(["suite", "target's mean top-1 probability",
                  *(f"draft {q}" for q in alpha)],
                 [[s, f"{confidence[s]:.2f}",
                   *(f"{counts[q][s][0] / counts[q][s][1]:.0%} ({alpha[q][s]:.2f})"
                     if counts[q][s][1] else "no drafts" for q in alpha)] for s in SUITES])

    spread = {q: (min(v for v in a.values() if v is not None),
                  max(v for v in a.values() if v is not None)) for q, a in alpha.items()}
    report.record("spread", spread)
    report.text()
    report.text("(a) One draft across the suites: per-token acceptance "
                + "; ".join(f"{q} {lo:.2f}-{hi:.2f}" for q, (lo, hi) in spread.items())
                + ". (b) Across drafts on the same suite: "
                + "; ".join(f"{s} {min(alpha[q][s] for q in alpha):.2f}-"
                            f"{max(alpha[q][s] for q in alpha):.2f}" for s in SUITES) + ".")

    # (c) Carrying one suite's measurement to another.
    as_is, scaled = [], []
    for q, a in alpha.items():
        for source in SUITES:
            for other in SUITES:
                if other == source or a[source] is None or a[other] is None:
                    continue
                miss = (1 - a[source]) * (1 - confidence[other]) / max(1 - confidence[source],
                                                                      1e-6)
                as_is.append(abs(a[source] - a[other]))
                scaled.append(abs(1 - min(miss, 1.0) - a[other]))
    result = {"pairs": len(as_is), "as_is_median": statistics.median(as_is),
              "as_is_max": max(as_is), "scaled_median": statistics.median(scaled),
              "scaled_max": max(scaled)}
    report.record("carried", result)
    report.text()
    report.text(f"(c) A draft measured on one suite and predicted on another ({result['pairs']} "
                f"ordered pairs of suites over the drafts), error in per-token acceptance: as "
                f"measured, median {result['as_is_median']:.3f} (worst {result['as_is_max']:.3f});"
                f" its miss rate scaled by the target's uncertainty on each suite, median "
                f"{result['scaled_median']:.3f} (worst {result['scaled_max']:.3f}).")
    low, high = ACCEPTANCE["draft"]
    measured = [v for a in alpha.values() for v in a.values() if v is not None]
    report.text()
    report.text("### What the tuner can know before a draft runs")
    report.text()
    report.text(f"A first tune predicts a draft model over a per-token acceptance of {low:.2f}-"
                f"{high:.2f} (core.tune.predict.ACCEPTANCE); these drafts, requantized copies of "
                f"the target itself, measured {min(measured):.2f}-{max(measured):.2f}. Neither the prompts' effect (a) nor "
                "the draft's own (b) is known before the draft has run, so a first prediction "
                "for a draft model is a range, and its middle can miss a given suite by more "
                "than 15% (tune_search.md: the Q4_0 draft measured 0.34x-0.56x across three "
                "suites). A later tune on the same prompts predicts from what the search "
                "measured. On other prompts, the target's confidence on them carries a "
                "measurement over better than the figure as measured (c); the tuner does not "
                "do that yet: it would need the target's logprobs on the new prompts before "
                "it predicts.")
