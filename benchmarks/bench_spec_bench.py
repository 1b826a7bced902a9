"""Spec-Bench's categories: n-gram drafting on the demo model beside the paper's PLD column

Which Spec-Bench categories does prompt lookup speed up, and does SpecDeck's n-gram drafter
follow the same pattern as the Spec-Bench authors' PLD measurement? One A/B plan (the
protocol of core.bench: interleaved, paired, greedy, chat template, one warm-up per arm) on
the demo model (SmolLM2-135M-Instruct, float32, CPU) with the no-draft reference A and
SpecDeck's n-gram drafter B at its defaults (k <= 4 adaptive, 2..4-gram matches, short
matches draft up to 2), over the first PROMPTS questions of each category in the suite's
round-robin order (so MT-bench's first questions span its kinds). Every figure comes from
core.bench.summary: per category the median of paired decode-speed ratios B / A with its 95%
bootstrap interval, the mean acceptance length (1 + accepted / verify steps, Spec-Bench's
"#Mean accepted tokens") and the losslessness check, each from the plan's runs of that
category; overall, from all of them.

The shipped suite holds three categories (resources/prompts/spec_bench/README.md says why
not the other three). With SPEC_BENCH_QUESTIONS=<Spec-Bench's data/spec_bench/question.jsonl>
the prompts come from that file instead (it must be the one suite.json names, by sha256), so
all six are measured; the report says which. SPEC_BENCH_PROMPTS, SPEC_BENCH_REPEATS and
SPEC_BENCH_MAX_NEW change the sizes (the report states the sizes it ran with).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.report import Report

PROMPTS = 3
REPEATS = 2
MAX_NEW = 64


CAVEATS = (
    "Not the same experiment, so compare the pattern, not the numbers: a 135M model on a CPU "
    "against Vicuna 7B-33B on a GPU (a verify step of k + 1 tokens costs a CPU more than a "
    "GPU, so the same acceptance buys less); SpecDeck's drafter (2..4-gram, most recent "
    "match, k <= 4 adaptive) against PLD's (1..3-gram, first match, 10 tokens); decode tok/s "
    "(prefill excluded), median of paired ratios, against Spec-Bench's mean tok/s over whole "
    "generations (prefill included) over 1024 new tokens at most; a few questions per "
    "category against 80; first turns only against MT-bench's two-turn conversations; the "
    "model's own chat template against Vicuna's. A small model copies differently from a "
    "7B one: how much of an answer repeats its prompt depends on the model.")


@dataclass(frozen=True)
class Sizes:
    prompts: int
    repeats: int
    max_new: int


def _sizes() -> Sizes:
    def read(name: str, default: int) -> int:
        value = os.environ.get(f"SPEC_BENCH_{name}", "").strip()
        return int(value) if value else default

    return Sizes(read("PROMPTS", PROMPTS), read("REPEATS", REPEATS), read("MAX_NEW", MAX_NEW))


def run(report: Report) -> None:
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.suites import spec_bench_categories, spec_bench_info
    from specdeck.core.bench.summary import summarize
    from specdeck.core.engines.base import DrafterKind, DrafterSpec, LoadSpec
    from specdeck.core.engines.demo import ensure_demo_model

    sizes = _sizes()
    info = spec_bench_info()
    suite, source = _suite(info)
    chosen = _first_per_category(suite, sizes.prompts)
    load_before = os.getloadavg()
    model_dir = ensure_demo_model()  # converts on first use; raises if it cannot run here
    plan = BenchPlan(engine="torch", model=str(model_dir), suites=(suite,),
                     prompt_ids=tuple(pid for ids in chosen.values() for pid in ids),
                     arms=(Arm("A"), Arm("B", DrafterSpec(DrafterKind.NGRAM))),
                     max_new_tokens=sizes.max_new, repeats=sizes.repeats, warmup=1,
                     load=LoadSpec(model_dir, device="cpu", dtype="float32"))
    bench = run_plan(plan, on_event=_progress)
    load_after = os.getloadavg()
    overall = summarize(bench)
    labels = {c.name: c.label for c in spec_bench_categories()}
    per_category = {}
    for category in (c.name for c in spec_bench_categories()):
        if f"spec-bench/{category}" in chosen:
            per_category[category] = _category(summarize(_only(bench, category)), labels[category])
    results = {
        "source": source, "sizes": vars(sizes), "drafter": plan.arms[1].drafter.label,
        "load_average": {"before": list(load_before), "after": list(load_after)},
        "cpu_count": os.cpu_count(), "prompt_ids": chosen, "per_category": per_category,
        "overall": _category(overall, "Overall"), "reference": info["reference"],
        "environment": bench.environment,
    }
    report.record("spec_bench", results)
    _write(report, results)


def _progress(event) -> None:
    """One line per finished run: on a loaded machine a plan can take a long time."""
    from specdeck.core.bench.runner import RunFinished

    if isinstance(event, RunFinished):
        record = event.record
        print(f"   run {record.slot.index + 1}/{event.total}: {record.arm} {record.prompt_id}"
              f"{' (warm-up)' if record.slot.warmup else ''}", flush=True)


def _suite(info: dict) -> tuple[str, dict]:
    """The suite to run and where its prompts came from."""
    upstream = os.environ.get("SPEC_BENCH_QUESTIONS", "").strip()
    if not upstream:
        return "spec-bench", {"kind": "shipped", "path": "resources/prompts/spec_bench",
                              "commit": info["source"]["commit"]}
    path = Path(upstream).expanduser()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != info["source"]["sha256"]:
        raise SystemExit(f"{path} is not Spec-Bench's question.jsonl at "
                         f"{info['source']['commit']} (sha256 {digest}).")
    return str(path), {"kind": "upstream file", "path": path.name, "sha256": digest,
                       "commit": info["source"]["commit"]}


def _first_per_category(suite: str, per_category: int) -> dict[str, list[str]]:
    """core.bench.suites.first_prompts's choice (the A/B page's), by category."""
    from specdeck.core.bench.suites import first_prompts

    chosen: dict[str, list[str]] = {}
    for prompt in first_prompts([suite], per_category):
        chosen.setdefault(prompt.suite, []).append(prompt.id)
    return chosen


def _only(bench, category: str):
    """The plan's runs of one category, as a run of its own for core.bench.summary."""
    suite = f"spec-bench/{category}"
    prompts = tuple(p for p in bench.prompts if p.suite == suite)
    ids = {p.id for p in prompts}
    return replace(bench, prompts=prompts,
                   records=tuple(r for r in bench.records if r.prompt_id in ids),
                   prompt_ids={k: v for k, v in bench.prompt_ids.items() if k in ids})


def _category(summary, label: str) -> dict:
    comparison = summary.comparison("B")
    ngram, reference = summary.arm("B"), summary.arm("A")
    ratio = comparison.speedup
    return {
        "label": label,
        "pairs": ratio.n if ratio else 0,
        "speedup": ratio.median if ratio else None,
        "ci": [ratio.ci_low, ratio.ci_high] if ratio and ratio.has_interval else None,
        "verdict": comparison.verdict,
        "mean_acceptance_length": ngram.mean_acceptance_length,
        "acceptance_rate": ngram.acceptance_rate,
        "reference_tokens_per_second": reference.tokens_per_second,
        "ngram_tokens_per_second": ngram.tokens_per_second,
        "lossless": comparison.lossless.verdict,
        "not_drafting": comparison.not_drafting,
    }


def _cell(row: dict) -> str:
    if row["speedup"] is None:
        return "-"
    interval = f" ({row['ci'][0]:.2f}-{row['ci'][1]:.2f})" if row["ci"] else " (no interval)"
    return f"**{row['speedup']:.2f}x**{interval}"


def _ranks(values: dict[str, float]) -> list[str]:
    return [name for name, _ in sorted(values.items(), key=lambda item: -item[1])]


def _write(report: Report, results: dict) -> None:
    sizes, source = results["sizes"], results["source"]
    rows = results["per_category"]
    reference = results["reference"]
    papers = reference["rows"]
    load = results["load_average"]
    where = ("the three shipped categories (resources/prompts/spec_bench)"
             if source["kind"] == "shipped" else
             f"Spec-Bench's own question.jsonl (sha256 {source['sha256'][:12]}..., commit "
             f"{source['commit'][:8]}), all six categories; translation, summarization and RAG "
             "are measured from that file, not shipped")
    report.text(f"Demo model (SmolLM2-135M-Instruct), float32, CPU, greedy, chat template; A/B "
                f"protocol (interleaved, paired, one warm-up per arm): no draft (A) against "
                f"SpecDeck's {results['drafter']} (B). Prompts: {where}; the first "
                f"{sizes['prompts']} of each category x {sizes['repeats']} repeats, up to "
                f"{sizes['max_new']} new tokens, first turns only. Load average (1, 5, 15 min) "
                f"{_load(load['before'])} before and {_load(load['after'])} after, on "
                f"{results['cpu_count']} cores: " + (
                    "a shared machine under heavy load; the paired ratios cancel slow drift, "
                    "absolute tok/s do not." if max(load["before"][0], load["after"][0])
                    > results["cpu_count"] else "a quiet machine."))
    report.text("")
    headers = ["Spec-Bench column", "n-gram / no draft, median (95% interval)", "pairs",
               "mean acceptance length", "no draft tok/s", "lossless"]
    headers += [f"paper PLD, {p['model'].split('-v')[0]}, {_gpu(p['hardware'])}" for p in papers]
    table = []
    for category, row in [*rows.items(), ("overall", results["overall"])]:
        table.append([row["label"], _cell(row), row["pairs"],
                      _num(row["mean_acceptance_length"]), _num(row["reference_tokens_per_second"], ".1f"),
                      row["lossless"]]
                     + [f"{(p['speedup'].get(category) if category != 'overall' else p['overall']):.2f}x"
                        for p in papers])
    for category in papers[0]["speedup"]:
        if category not in rows:
            table.append([f"{_label(category)} (not measured)", "-", 0, "-", "-", "-"]
                         + [f"{p['speedup'][category]:.2f}x" for p in papers])
    report.table(headers, table)
    report.text(f"Paper column: {reference['method']}; {reference['note']} Source: "
                f"{reference['source']}. Mean accepted tokens there (all categories): "
                + ", ".join(f"{p['mean_accepted_tokens']:.2f} ({p['model']}, {_gpu(p['hardware'])})"
                            for p in papers) + ".")
    report.text("")
    measured = {c: r["speedup"] for c, r in rows.items() if r["speedup"] is not None}
    paper = {c: papers[0]["speedup"][c] for c in measured}
    report.text("Order, most speed-up first: SpecDeck here "
                + " > ".join(rows[c]["label"] for c in _ranks(measured))
                + f"; paper PLD ({papers[0]['model']}, {_gpu(papers[0]['hardware'])}) on the same "
                "categories " + " > ".join(rows[c]["label"] for c in _ranks(paper)) + ".")
    report.text("")
    for category, row in rows.items():
        report.text(f"- {row['label']}: here {row['verdict']}; the paper's PLD "
                    + ", ".join(f"{p['speedup'][category]:.2f}x" for p in papers) + ".")
    report.text("")
    report.text(CAVEATS)


def _label(category: str) -> str:
    from specdeck.core.bench.suites import spec_bench_categories

    return next(c.label for c in spec_bench_categories() if c.name == category)


def _gpu(hardware: str) -> str:
    return hardware.split(" (")[0].removeprefix("1x NVIDIA ").removeprefix("GeForce ")


def _load(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def _num(value, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)
