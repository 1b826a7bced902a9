"""SpecDeck's PyTorch engine against transformers' own generate() (baseline parity and peers)

Goals (issue 13), on every shipped suite, same model, prompt, dtype, threads and k:
- the no-draft arm decodes at >= 1.0x `model.generate()` greedy (it is the anchor every
  speed-up is divided by);
- the n-gram arm at >= 1.0x transformers' prompt lookup, `generate(prompt_lookup_num_tokens=k)`;
- the draft-model arm at >= 1.0x transformers' assisted generation,
  `generate(assistant_model=...)`, with k fixed on both sides;
- and, inherited from the engine benchmark it replaces (issue 6), n-gram drafting costs at
  most 5% where there is nothing to copy (chat, prose: n-gram / no draft >= 0.95x).

Setup: the embedded demo model (SmolLM2-135M-Instruct, float32, CPU), loaded once by SpecDeck's
engine; generate() runs on that same model object (the same weights, and the same linear
layers: pre-packed for oneDNN or plain, whichever the engine found faster for plain decoding
on this CPU), so only the decoding loops differ. Each prompt of each
suite (chat template), a fixed 64 new tokens (no stop on EOS: equal lengths), time = wall
clock of the whole generation (prefill + decode) for both sides. The runs of a prompt are
interleaved, their order reversed between repeats; a figure is the median of the per-prompt,
per-repeat ratios of runs made side by side, with its 95% bootstrap interval, from
core.bench.stats (the A/B feature's own pairing and statistics).

Two draft-model pairs, since no trained pair of two sizes sharing a tokenizer can be had
offline here (a draft cut from the demo model's own layers accepts under 4% of its tokens):
self-drafting (the draft is the target: every draft accepted) and a perturbed copy (the
target with Gaussian noise, 0.2 x each weight's spread, added to its attention output
projections: about 70% of drafts accepted, so rejections and cache rollbacks run too). Either
draft costs what the target costs, so both sides run slower than plain decoding; the pairs
compare the loops' overhead (drafting, verifying, cache bookkeeping), not a draft's quality.
They run on the first DRAFT_PROMPTS prompts of each suite.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from benchmarks.report import Report, median

MAX_NEW = 64
K = 4
REPEATS = 2
DRAFT_PROMPTS = 3
SUITES = ("grounded", "code", "structured", "chat", "prose")
NOTHING_TO_COPY = ("chat", "prose")
GOAL_NOTHING_TO_COPY = 0.95

NOISE = 0.2
"""The perturbed draft's noise, in units of each attention output weight's standard deviation."""

PAIRS = {  # pair -> (SpecDeck's arm, transformers' arm)
    "no draft": ("engine, no draft", "generate()"),
    "n-gram": (f"engine, n-gram k={K}", f"generate(prompt_lookup_num_tokens={K})"),
    "self-draft": (f"engine, self-draft k={K}", f"generate(assistant_model=target), {K} tokens"),
    "perturbed draft": (f"engine, perturbed draft k={K}",
                        f"generate(assistant_model=perturbed), {K} tokens"),
}
DRAFT_PAIRS = ("self-draft", "perturbed draft")


def run(report: Report) -> None:
    import torch
    from specdeck.core.bench.suites import builtin_suites
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.base import (
        NO_DRAFT,
        DrafterKind,
        DrafterSpec,
        GenerationRequest,
        LoadSpec,
    )
    from specdeck.core.engines.demo import ensure_demo_model

    model_dir = ensure_demo_model()  # converts on first use; raises if it cannot run here
    torch.set_num_threads(2)
    engine = create_engine("torch")
    engine.load(LoadSpec(model_dir, device="cpu", dtype="float32"))
    model, _ = engine.model_objects()  # the engine's own model: same weights for both loops
    ngram = DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=K, adaptive=False)
    scratch = tempfile.TemporaryDirectory(prefix="specdeck-peers-")
    drafts = {"self-draft": model_dir,
              "perturbed draft": _perturbed_copy(model_dir, Path(scratch.name) / "perturbed")}
    drafters = {pair: DrafterSpec(DrafterKind.MODEL, model_path=path, num_draft_tokens=K,
                                  adaptive=False) for pair, path in drafts.items()}
    # transformers' assistant reads its settings from its own generation config: k fixed
    # (no schedule, no confidence cut-off) like the engine's arm.
    assistant = {"num_assistant_tokens": K, "num_assistant_tokens_schedule": "constant",
                 "assistant_confidence_threshold": 0.0}
    saved = {key: getattr(model.generation_config, key, None) for key in assistant}

    def ours(ids: list[int], drafter) -> tuple[float, tuple[int, ...], float | None]:
        engine.set_drafter(drafter)
        started = time.perf_counter()
        result = engine.generate(GenerationRequest(prompt_ids=tuple(ids), max_new_tokens=MAX_NEW,
                                                   stop_on_eos=False))
        return (len(result.token_ids) / (time.perf_counter() - started), result.token_ids,
                result.stats.acceptance_rate)

    def theirs(ids: list[int], **extra) -> tuple[float, tuple[int, ...], None]:
        inputs = torch.tensor([ids])
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(inputs, attention_mask=torch.ones_like(inputs), do_sample=False,
                                 max_new_tokens=MAX_NEW, min_new_tokens=MAX_NEW, **extra)
        new = tuple(int(t) for t in out[0, len(ids):])
        return len(new) / (time.perf_counter() - started), new, None

    def assisted(ids: list[int], pair: str) -> tuple[float, tuple[int, ...], None]:
        engine.set_drafter(drafters[pair])  # the engine's draft object: the same weights
        _, draft = engine.model_objects()
        draft.generation_config.update(**assistant)
        return theirs(ids, assistant_model=draft)

    runs = {
        PAIRS["no draft"][0]: lambda ids: ours(ids, NO_DRAFT),
        PAIRS["no draft"][1]: lambda ids: theirs(ids),
        PAIRS["n-gram"][0]: lambda ids: ours(ids, ngram),
        PAIRS["n-gram"][1]: lambda ids: theirs(ids, prompt_lookup_num_tokens=K),
    }
    for pair in DRAFT_PAIRS:
        runs[PAIRS[pair][0]] = lambda ids, pair=pair: ours(ids, drafters[pair])
        runs[PAIRS[pair][1]] = lambda ids, pair=pair: assisted(ids, pair)
    names = list(runs)
    draft_arms = {arm for pair in DRAFT_PAIRS for arm in PAIRS[pair]}
    suites = builtin_suites()
    per_suite = {}
    try:
        ids0 = engine.tokenize(suites["chat"].prompts[0].text, apply_chat_template=True)
        for name in names:  # warm-up: first calls pay for allocation and kernel choice
            runs[name](ids0)
        for suite in SUITES:
            per_suite[suite] = _run_suite(engine, suites[suite].prompts, runs, names, draft_arms)
    finally:
        model.generation_config.update(**saved)  # self-drafting set the target's
        engine.unload()
        scratch.cleanup()
    _write(report, per_suite)


def _perturbed_copy(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """The demo model with Gaussian noise (NOISE x each weight's standard deviation) added to
    every attention output projection, saved with its tokenizer: a draft that agrees with
    the target on most tokens, not all."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    noise = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in model.model.layers:
            weight = layer.self_attn.o_proj.weight
            weight.add_(torch.randn(weight.shape, generator=noise) * weight.std() * NOISE)
    model.save_pretrained(out)
    for path in model_dir.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "vocab", "merges")):
            shutil.copy(path, out / path.name)
    return out


def _run_suite(engine, prompts, runs, names, draft_arms) -> dict:
    from specdeck.core.bench.stats import speedup

    rates = {name: [] for name in names}
    ratios = {pair: [] for pair in PAIRS}
    acceptance = {pair: [] for pair in PAIRS}
    gains, same, control = [], 0, []
    for index, prompt in enumerate(prompts):
        ids = engine.tokenize(prompt.text, apply_chat_template=True)
        arms = [n for n in names if index < DRAFT_PROMPTS or n not in draft_arms]
        first = None
        for repeat in range(REPEATS):
            order = arms if repeat % 2 == 0 else arms[::-1]
            got = {name: runs[name](ids) for name in order}
            peer = got[PAIRS["no draft"][1]][0]
            if first is None:
                first = peer
            else:  # the same generate() call, same prompt, run again: the run's noise
                control.append(speedup(first, peer))
            plain = got[PAIRS["no draft"][0]][1]
            for name in arms:
                rates[name].append(got[name][0])
                if name.startswith("engine") and got[name][1] != plain:
                    raise AssertionError(f"{prompt.id}: {name} changed the greedy output")
            for pair, (mine, peer) in PAIRS.items():
                if mine in got:
                    ratios[pair].append(speedup(got[peer][0], got[mine][0]))
                    if got[mine][2] is not None:
                        acceptance[pair].append(got[mine][2])
            gains.append(speedup(got[PAIRS["no draft"][0]][0], got[PAIRS["n-gram"][0]][0]))
            same += plain == got[PAIRS["no draft"][1]][1]
    return {"rates": rates, "ratios": ratios, "acceptance": acceptance, "speedup": gains,
            "identical_baselines": same, "control": control}


def _write(report: Report, per_suite: dict) -> None:
    from specdeck.core.bench.stats import summarize_ratios

    def paired(ratios: list[float]) -> str:
        summary = summarize_ratios(ratios)
        return f"**{summary.median:.2f}x** ({summary.ci_low:.2f}-{summary.ci_high:.2f})"

    def middle(ratios: list[float]) -> float:
        return summarize_ratios(ratios).median

    report.record("suites", per_suite)
    for pair in PAIRS:
        report.record(f"{pair} median", summarize_ratios([r for s in per_suite.values()
                                                          for r in s["ratios"][pair]]).median)
    report.text(f"Demo model, float32, 2 threads, {MAX_NEW} new tokens, k = {K} fixed on both "
                f"sides, every prompt of each suite x {REPEATS} repeats (the draft-model pairs: "
                f"the first {DRAFT_PROMPTS} prompts), runs interleaved; tok/s = new tokens / "
                "wall time of the generation (prefill included), median per arm; a ratio is "
                "the median of ratios of runs made side by side, with its 95% bootstrap "
                "interval (core.bench.stats); acceptance is SpecDeck's "
                "(transformers' greedy verification keeps the same tokens).")
    report.text("")
    rows = []
    for suite, figures in per_suite.items():
        for pair, (mine, peer) in PAIRS.items():
            accepted = figures["acceptance"][pair]
            rows.append([suite, pair, f"{median(figures['rates'][mine]):.1f}",
                         f"{median(figures['rates'][peer]):.1f}",
                         paired(figures["ratios"][pair]),
                         f"{median(accepted):.0%}" if accepted else "-",
                         len(figures["ratios"][pair])])
    report.table(["suite", "decoding", "SpecDeck tok/s", "transformers tok/s",
                  "SpecDeck / transformers (95% interval)", "drafts accepted", "pairs"], rows)
    report.table(["suite", "n-gram / no draft (SpecDeck)", "no-draft tokens = generate()'s",
                  "generate() / itself, run again (noise)"],
                 [[suite, paired(f["speedup"]).replace("**", ""),
                   f"{f['identical_baselines']}/{len(f['ratios']['no draft'])}",
                   f"{middle(f['control']):.2f}x"]
                  for suite, f in per_suite.items()])
    noise = [middle(f["control"]) for f in per_suite.values()]
    noise_band = f"{min(noise):.2f}-{max(noise):.2f}x"
    report.text(f"The last column is how far this machine drifts: the same generate() call on "
                f"the same prompt, its second run (minutes later) over its first ({noise_band} "
                "per suite). The SpecDeck / transformers ratios pair runs made back to back, so "
                "drift touches them less, but a difference of a percent or two is parity, not "
                "a lead.")
    report.text("")
    goals = [(pair, f"{pair} vs transformers (goal >= 1.00x on every suite)", 1.0, SUITES)
             for pair in PAIRS]
    goals.append(("speedup", (f"n-gram / no draft where there is nothing to copy (goal >= "
                              f"{GOAL_NOTHING_TO_COPY:.2f}x on {', '.join(NOTHING_TO_COPY)})"),
                  GOAL_NOTHING_TO_COPY, NOTHING_TO_COPY))
    met_all = {}
    for key, label, goal, suites in goals:
        values = {s: middle(per_suite[s]["ratios"][key] if key in PAIRS
                            else per_suite[s][key]) for s in suites}
        misses = [f"{s} {v:.3f}x" for s, v in values.items() if v < goal]
        met_all[key] = not misses
        verdict = "met." if not misses else f"NOT met ({', '.join(misses)})"
        if misses and key in PAIRS:
            pooled = middle([r for s in suites for r in per_suite[s]["ratios"][key]])
            inside = 1 - min(values.values()) <= max(abs(1 - n) for n in noise)
            verdict += (f"; all suites pooled {pooled:.3f}x; "
                        + ("the gap is inside this run's noise." if inside
                           else "the gap is larger than this run's noise."))
        report.text(f"- {label}: {min(values.values()):.2f}-{max(values.values()):.2f}x; "
                    + verdict)
    report.record("goals met", met_all)
    report.text("")
    report.text("The draft-model pairs use drafts that cost what the target costs (the target "
                "itself; the target with noise in its attention outputs), so both sides run "
                "slower than plain decoding: they compare the loops' overhead with every draft "
                "accepted and with rejections, not a draft's quality. No trained pair of two "
                "sizes sharing a tokenizer can be had offline here.")
    report.text("")
    report.text("Where the no-draft tokens differ from generate()'s, the answer ended early: "
                "generate(min_new_tokens) masks the end-of-sequence token until the length is "
                "reached and picks the next best, while the engine (stop_on_eos=False) emits it "
                "and goes on; the runs are then equal in length but not in text.")
