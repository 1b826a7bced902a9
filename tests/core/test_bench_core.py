"""A/B summary, reports, sweeps, the tuner, apply-best and `specdeck bench`, on tiny real
Llama models (tests/tiny_models.py) and real TabbyAPI config samples.

Where a test depends on which setting is fastest, the engine's clock is a deterministic
cost-model clock (``virtual_clock``): every forward of a model advances time by that model's
parameter count, as memory-bound decoding on a GPU does (a forward reads every weight once,
however many tokens it verifies). Everything else, tokens, drafts, acceptance, is real.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import TABBY
from specdeck.core.bench.plan import Arm, BenchPlan, default_arms
from specdeck.core.bench.report import (
    list_history,
    load_plan,
    load_report,
    markdown_summary,
    save_to_history,
    write_report,
)
from specdeck.core.bench.runner import BenchRun, run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.bench.sweep import (
    SweepSpec,
    apply_best,
    plan_apply_best,
    plan_apply_setting,
    run_sweep,
    sweep_table,
)
from specdeck.core.bench.tuner import tune_k
from specdeck.core.cli import main
from specdeck.core.cli.bench_cmd import parse_k_range
from specdeck.core.engines import create_engine
from specdeck.core.engines.base import DrafterKind, DrafterSpec, SamplingSpec
from specdeck.core.errors import InvalidInputError
from tiny_models import ab_models, cycling_llama, forward_clock, parameter_clock
from tiny_models import tiny_plan as shared_tiny_plan

pytest.importorskip("torch")
pytest.importorskip("transformers")

NGRAM = DrafterSpec(DrafterKind.NGRAM)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    return ab_models(tmp_path_factory.mktemp("bench-core-models"))


def tiny_plan(model: Path, arms, **overrides) -> BenchPlan:
    values = dict(max_prompts=1, max_new_tokens=10, warmup=0)
    return shared_tiny_plan(model, arms, **{**values, **overrides})


@pytest.fixture
def virtual_clock(monkeypatch):
    """A forward costs 1 ns per parameter of the model (tiny_models.parameter_clock)."""
    return parameter_clock(monkeypatch)


# Summary and reports -------------------------------------------------------------------------
def test_summary_and_every_report_file(models, tmp_path):
    plan = tiny_plan(models["target"], default_arms(models["draft"], ngram=True, k=3),
                     suites=("code", "chat"), max_prompts=2, repeats=1)
    run = run_plan(plan)
    summary = summarize(run)
    assert [a.name for a in summary.arms] == ["A", "B", "C"]
    assert summary.counted_runs == 3 * 2
    draft = summary.comparison("B")
    assert draft.speedup is not None and draft.speedup.n == 2
    assert set(draft.by_tag) == {"code"}  # max_prompts=2 takes code's first two prompts
    assert draft.lossless.checkable and draft.lossless.identical == 2 and not draft.lossless.divergences
    b = summary.arm("B")
    assert b.drafted > 0 and b.acceptance_rate == pytest.approx(b.accepted / b.drafted)
    runs_b = [r.result.stats for r in run.counted("B")]
    drafts = sum(s.draft_steps for s in runs_b)
    assert 0 < drafts <= b.steps  # the formula's drafts are verify steps that carried a draft
    assert b.mean_acceptance_length == pytest.approx(1 + b.accepted / drafts)
    assert b.positions.source == "engine count" and b.positions.runs == len(runs_b)
    for i, share in enumerate(b.per_position_acceptance):  # pooled counts, not a mean of rates
        kept = sum(s.per_position_accepted[i] for s in runs_b if i < len(s.per_position_accepted))
        reached = sum(s.per_position_drafted[i] for s in runs_b if i < len(s.per_position_drafted))
        assert share == pytest.approx(kept / drafts)  # the share of all drafts
        assert b.positions.of_reached[i] == pytest.approx(kept / reached)
    assert len(b.per_position_acceptance) == 3  # k = 3: a model draft reaches every position
    assert b.new_tokens == b.steps + b.accepted  # nothing was cut short by EOS here
    theory = draft.theory
    assert theory.cost_ratio.estimate and 0 < theory.cost_ratio.value < 1
    assert "weight bytes" in theory.cost_ratio.source
    assert theory.measured_step_cost is not None and len(theory.curve) == 8
    assert summary.comparison("C").theory.cost_ratio.value == 0.0
    if draft.speedup.verdict == "slower":
        assert "SLOWER" in draft.verdict and draft.causes
    elif draft.speedup.median < 0.95:  # an interval reaching 1.0 is not called SLOWER
        assert "looks slower" in draft.verdict and "not clearly" in draft.verdict
        assert "SLOWER" not in draft.verdict and draft.causes

    paths = write_report(run, summary, tmp_path / "report")
    # the suites the prompts came from, not every suite asked for (max_prompts took code's)
    assert "; 2 prompts (code) x 1 repeat, up to" in (paths.folder / "summary.md").read_text()
    data = load_report(paths.folder)
    assert data["version"] == 1 and len(data["runs"]) == len(run.records)
    assert data["runs"][0]["token_ids"] == list(run.records[0].result.token_ids)
    assert data["summary"]["comparisons"][0]["lossless"]["identical"] == 2
    rows = list(csv.DictReader(io.StringIO(paths.csv.read_text())))
    assert len(rows) == len(run.records)
    assert {r["same_tokens_as_reference"] for r in rows if r["arm"] != "A"} == {"True"}
    markdown = paths.markdown.read_text()
    assert "## Verdict" in markdown
    assert load_plan(paths.plan) == plan
    # The position table per drafting arm: its counts are the records' sums, row by row.
    section = markdown.split("## Acceptance by draft position", 1)[1]
    for name in ("B", "C"):
        arm = summary.arm(name)
        stats_ = [r.result.stats for r in run.counted(name)]
        block = section.split(f"### {arm.label}\n", 1)[1].split("###", 1)[0]
        assert f"Source: engine count; {sum(s.draft_steps for s in stats_)} drafts" in block
        rows_ = [line.split(" | ") for line in block.splitlines() if line.startswith("| ") and
                 line[2].isdigit()]
        assert len(rows_) == len(arm.positions.reached) > 0
        for i, cells in enumerate(rows_):
            reached = sum(s.per_position_drafted[i] for s in stats_ if i < len(s.per_position_drafted))
            kept = sum(s.per_position_accepted[i] for s in stats_ if i < len(s.per_position_accepted))
            assert [cells[1], cells[3]] == [str(kept), str(reached)]
    json_b = data["summary"]["arms"][1]["positions"]
    assert json_b["source"] == "engine count" and json_b["reported"] is True
    assert json_b["share_of_all_drafts"] == \
        pytest.approx(list(summary.arm("B").per_position_acceptance))
    assert json_b["of_drafts_that_reached"] == \
        pytest.approx(list(summary.arm("B").positions.of_reached))
    assert data["summary"]["arms"][0]["positions"] is None  # the reference drafts nothing

    import xml.etree.ElementTree as ET

    from PySide6.QtCore import QByteArray
    from PySide6.QtSvg import QSvgRenderer

    svg = paths.chart.read_text()
    root = ET.fromstring(svg)  # well-formed XML
    assert root.tag.endswith("svg") and int(root.get("width")) > 200
    texts = [t.text for t in root.iter() if t.tag.endswith("text")]
    assert f"{draft.speedup.median:.2f}x" in texts and "1.0x" in texts
    assert QSvgRenderer(QByteArray(svg.encode())).isValid()  # a real renderer draws it

    saved = save_to_history(run, summary)
    history = list_history()
    assert [h.folder for h in history] == [saved.folder]
    assert history[0].speedups["B"] == pytest.approx(draft.speedup.median)
    (saved.folder.parent / "junk").mkdir()  # a folder without entry.json is skipped
    assert len(list_history()) == 1


def test_a_sampled_arm_is_flagged_as_diverging_and_a_sampled_plan_is_not_checkable(models):
    greedy = tiny_plan(models["target"], default_arms(ngram=True), max_new_tokens=8)
    sampled = replace(greedy, sampling=SamplingSpec(temperature=1.5, seed=3))
    engine = create_engine("torch")
    greedy_run = run_plan(greedy, engine)
    sampled_run = run_plan(sampled, engine)
    engine.unload()
    assert not summarize(sampled_run).comparison("B").lossless.checkable
    assert "not checkable: sampled" in summarize(sampled_run).comparison("B").lossless.verdict
    # Arm B drew its tokens with sampling, arm A greedily: the check must catch it.
    mixed = BenchRun(**{**greedy_run.__dict__, "records": tuple(
        r for r in greedy_run.records if r.arm == "A") + tuple(
        r for r in sampled_run.records if r.arm == "B")})
    check = summarize(mixed).comparison("B").lossless
    assert check.diverged == 2 and check.identical == 0
    first = check.divergences[0]
    a = next(r for r in mixed.records if r.arm == "A" and r.slot.repeat == first.repeat)
    b = next(r for r in mixed.records if r.arm == "B" and r.slot.repeat == first.repeat)
    assert a.result.token_ids[:first.position] == b.result.token_ids[:first.position]
    assert a.result.token_ids[first.position] != b.result.token_ids[first.position]
    assert first.reference_token == a.result.token_ids[first.position]
    assert first.reference_text and "NOT lossless" in check.verdict


# Sweeps and the tuner ------------------------------------------------------------------------
def test_sweep_picks_the_largest_k_when_drafts_are_always_right(models, virtual_clock):
    base = tiny_plan(models["cycle"], (Arm("A"),), repeats=1, max_new_tokens=30)
    # Matches of 2+ tokens only: a one-token guess before the cycle has repeated can miss.
    strict = DrafterSpec(DrafterKind.NGRAM, ngram_short=0)
    result = run_sweep(SweepSpec(base, (strict,), ks=(1, 2, 4, 8)))
    lengths = [result.row("n-gram", k).mean_acceptance_length for k in (1, 2, 4, 8)]
    assert lengths == sorted(lengths) and lengths[-1] >= 2.5
    assert all(result.row("n-gram", k).acceptance_rate > 0.9 for k in (1, 2, 4, 8))
    assert result.best is not None and result.best.k == 8
    table = sweep_table(result)
    assert "**" in table and "Best: n-gram, k=8" in table


def test_sweep_with_a_useless_draft_says_no_draft(models, virtual_clock):
    base = tiny_plan(models["target"], (Arm("A"),), repeats=1, max_new_tokens=8)
    draft = DrafterSpec(DrafterKind.MODEL, models["draft"])
    result = run_sweep(SweepSpec(base, (draft,), ks=(1, 3)))
    assert all(r.acceptance_rate == 0.0 for r in result.rows)
    assert all(r.speedup.median < 1 for r in result.rows)
    assert result.best is None and "Best: no draft" in sweep_table(result)
    slow = result.summaries[0].comparison("k1")
    # one pair each (repeats=1): no interval, so it looks slower, not clearly SLOWER
    assert "looks slower" in slow.verdict and "not without an interval" in slow.verdict
    assert any("low acceptance" in c for c in slow.causes)
    # The same runs with an interval that still reaches 1.0 (as on a noisy machine), or with
    # too few pairs for one: named as looking slower, with its causes, not called SLOWER.
    from dataclasses import replace

    from specdeck.core.bench.slowdown import verdict_of
    from specdeck.core.bench.summary import pairs

    summary, run = result.summaries[0], result.runs[0]
    arm = next(a for a in run.plan.arms if a.name == "k1")
    for speedup, why in ((replace(slow.speedup, median=0.89, n=9, ci_low=0.56, ci_high=1.01),
                          "its interval still reaches 1.0"),
                         (replace(slow.speedup, median=0.89, n=2), "without an interval"),
                         (replace(slow.speedup, median=0.89, n=9, ci_low=0.8, ci_high=0.97),
                          "SLOWER")):
        text, causes = verdict_of(arm, speedup, summary.arm("k1"), slow.theory,
                                pairs(run, "k1"))
        assert why in text and ("looks slower" in text) is (why != "SLOWER")
        assert any("low acceptance" in c for c in causes)
        assert any("the draft model does not predict this target" in c for c in causes)
    # The same figures from an n-gram drafter: no "draft model", no "draft too slow".
    ngram = replace(summary.arm("k1"), drafter="ngram")
    _, causes = verdict_of(arm, replace(slow.speedup, median=0.89, n=2), ngram, slow.theory,
                         pairs(run, "k1"))
    assert any("the drafter's guesses do not match this target" in c for c in causes)
    assert not any("draft model" in c or "draft too slow" in c for c in causes)


@pytest.mark.slow
def test_tuner_finds_the_sweeps_best_k_in_a_third_of_its_time(models, virtual_clock):
    base = tiny_plan(models["cycle"], (Arm("A"),), repeats=3, max_new_tokens=20)
    engine = create_engine("torch")
    sweep = run_sweep(SweepSpec(base, (NGRAM,)), engine)
    tuned = tune_k(base, NGRAM, k_max=8, engine=engine)
    engine.unload()
    assert tuned.best_k >= 1
    best_rate = max(r.tokens_per_second for r in sweep.rows)
    assert sweep.row("n-gram", tuned.best_k).tokens_per_second >= 0.97 * best_rate
    assert tuned.spent_s <= sweep.spent_s / 3
    assert tuned.cost.draft_token_s < tuned.cost.step_s  # n-gram drafts cost ~nothing
    assert [f.k for f in tuned.forecast] == list(range(1, 9))


@pytest.fixture
def superlinear_clock(monkeypatch):
    """A clock on which a forward of n tokens costs 1 + 0.05 n^2 units: verifying k + 1
    tokens grows faster than the tokens it can accept, so on the cycling model (every n-gram
    draft right) tok/s = (k + 1) / (1 + 0.05 (k + 1)^2) peaks at k = 3-4, not at the tuner's
    first probe (k_max = 8), and a tuner that always answers k_max is 20% off."""
    return forward_clock(monkeypatch, lambda model, ids: 1e-3 * (1 + 0.05 * len(ids) ** 2))


def test_tuner_finds_a_best_k_between_its_probes_when_verifying_grows_dear(models, superlinear_clock):
    base = tiny_plan(models["cycle"], (Arm("A"),), repeats=1, max_new_tokens=48)
    engine = create_engine("torch")
    sweep = run_sweep(SweepSpec(base, (NGRAM,)), engine)
    tuned = tune_k(base, NGRAM, k_max=8, engine=engine)
    engine.unload()
    rates = {k: sweep.row("n-gram", k).tokens_per_second for k in range(1, 9)}
    best = max(rates, key=rates.get)
    assert best in (3, 4) and rates[8] < 0.9 * rates[best]  # "always 8" would fail below
    assert rates[tuned.best_k] >= 0.97 * rates[best]
    assert tuned.cost.draft_token2_s > 0  # the fit saw the verify cost grow
    assert tuned.predicted_best_k in (3, 4, 5)
    assert len(tuned.runs) == 2 and sum(len(r.plan.arms) for r in tuned.runs) <= 6
    saved = tuned.to_json()  # what --json and the benchmark write
    assert saved["cost"]["draft_token2_s"] == tuned.cost.draft_token2_s > 0
    assert saved["best_k"] == tuned.best_k and len(saved["forecast"]) == 8


@pytest.fixture(scope="module")
def noisy_draft(tmp_path_factory) -> Path:
    """The cycling model with its attention put back weakly: as the cycle's draft it leaves
    the cycle at some positions, so acceptance falls with the draft position and stops
    growing past k = 4 (2.6 tokens per step)."""
    return cycling_llama(tmp_path_factory.mktemp("noisy-draft") / "draft", noise=3.0, seed=3)


def test_tuner_finds_a_middle_k_when_acceptance_saturates_and_verifying_grows_dear(
        models, noisy_draft, monkeypatch):
    # A target forward of n tokens costs 1 + 0.01 n^2 units, a draft forward 0.1: drafting is
    # cheap, verifying k + 1 tokens grows dear, and past k = 4 a longer draft buys nothing.
    def cost(model, ids):
        if Path(str(model.config._name_or_path)) == noisy_draft:
            return 1e-4
        return 1e-3 * (1 + 0.01 * len(ids) ** 2)

    forward_clock(monkeypatch, cost)
    base = tiny_plan(models["cycle"], (Arm("A"),), repeats=3, max_prompts=3, max_new_tokens=64)
    drafter = DrafterSpec(DrafterKind.MODEL, noisy_draft)
    engine = create_engine("torch")
    sweep = run_sweep(SweepSpec(base, (drafter,)), engine)
    tuned = tune_k(base, drafter, k_max=8, engine=engine)
    engine.unload()
    rows = {k: sweep.row("draft", k) for k in range(1, 9)}
    lengths = {k: row.mean_acceptance_length for k, row in rows.items()}
    assert lengths[1] < lengths[3] < lengths[4] and lengths[8] == pytest.approx(lengths[4])
    rates = {k: row.tokens_per_second for k, row in rows.items()}
    best = max(rates, key=rates.get)
    # The best k is neither probe, and answering either probe ("always 4", "always 8") misses.
    assert best not in (4, 8) and max(rates[4], rates[8]) < 0.97 * rates[best]
    assert rates[tuned.best_k] >= 0.97 * rates[best]
    assert tuned.spent_s <= sweep.spent_s / 3


def test_tuner_turns_drafting_off_when_nothing_is_accepted(models, virtual_clock):
    base = tiny_plan(models["target"], (Arm("A"),), repeats=1, max_new_tokens=8)
    tuned = tune_k(base, DrafterSpec(DrafterKind.MODEL, models["draft"]), k_max=4)
    assert tuned.best_k == 0 and tuned.predicted_best_k == 0
    assert len(tuned.runs) == 1  # nothing worth confirming


# Apply ---------------------------------------------------------------------------------------
def test_apply_writes_the_draft_through_the_config_editor(tmp_path, models):
    config = tmp_path / "config.yml"
    config.write_text((TABBY / "config_sample.exl2-checkpoint.yml").read_text())
    original = config.read_text()
    drafter = DrafterSpec(DrafterKind.MODEL, models["draft"], num_draft_tokens=3)
    planned = plan_apply_setting(drafter, config)
    assert "draft_model_name" in planned.diff and models["draft"].name in planned.diff
    assert any("draft_num_tokens" in n for n in planned.notes)  # ExLlamaV2: k not written
    assert config.read_text() == original  # nothing written before apply
    saved = apply_best(planned)
    assert saved.backup is not None and saved.backup.read_text() == original
    from specdeck.core import config as cfg

    doc = cfg.load(config)
    assert doc.draft_model_path().resolve() == models["draft"].resolve()
    with pytest.raises(InvalidInputError, match="n-gram"):
        plan_apply_setting(NGRAM, config)
    before = config.read_text()
    with pytest.raises(InvalidInputError, match="embedded demo model"):
        plan_apply_setting(DrafterSpec(DrafterKind.MODEL, Path("demo")), config)
    assert config.read_text() == before
    off = plan_apply_best(None, config)
    assert "draft_model_name" in off.diff and off.notes


# CLI -----------------------------------------------------------------------------------------
def test_cli_bench_json_report_and_plan_repeat(models, tmp_path, capsys):
    args = ["bench", "--model", str(models["cycle"]), "--ngram", "--no-chat", "--device", "cpu",
            "--max-prompts", "1", "--repeats", "1", "--warmup", "0", "--max-new", "12",
            "--report", str(tmp_path / "r"), "--json", "-"]
    assert main(args) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["format"] == "specdeck-bench-report" and len(data["runs"]) == 2
    assert data["summary"]["comparisons"][0]["lossless"]["identical"] == 1
    assert "[2/2] B: n-gram" in captured.err and "acceptance" in captured.err
    assert (tmp_path / "r" / "chart.svg").read_text().startswith("<svg")
    assert main(["bench", "--plan", str(tmp_path / "r" / "plan.json"), "--no-history"]) == 0
    assert "## Verdict" in capsys.readouterr().out


@pytest.mark.parametrize("mode", ["--sweep-k", "--tune"])
def test_cli_sweep_and_tune_write_their_report_and_keep_the_table_beside_json(
        models, tmp_path, capsys, mode):
    args = ["bench", "--model", str(models["cycle"]), "--ngram", "--no-chat", "--device", "cpu",
            "--max-prompts", "1", "--repeats", "1", "--warmup", "0", "--max-new", "12",
            mode, *(["1,2"] if mode == "--sweep-k" else []),
            "--report", str(tmp_path / "r"), "--json", "-"]
    assert main(args) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout holds the JSON alone...
    assert "Best:" in captured.err  # ...and the table goes to stderr
    name = "sweep" if mode == "--sweep-k" else "tune"
    report = tmp_path / "r"
    assert json.loads((report / f"{name}.json").read_text()) == data
    assert "Best:" in (report / f"{name}.md").read_text()
    runs = sorted((report / "runs").iterdir())
    assert runs and all((r / "report.json").is_file() and (r / "chart.svg").is_file()
                        for r in runs)


def test_cli_bench_errors_exit_2(capsys, tmp_path):
    assert main(["bench", "--ngram"]) == 2
    assert "needs a model" in capsys.readouterr().err
    assert main(["bench", "--demo", "--apply"]) == 2
    assert "--config" in capsys.readouterr().err
    assert main(["bench", "--plan", str(tmp_path / "missing.json")]) == 2


def test_k_ranges():
    assert parse_k_range("1-8") == tuple(range(1, 9))
    assert parse_k_range("1,2,4-5,8") == (1, 2, 4, 5, 8)
    for bad in ("", "0-3", "a", "4-x", "40"):
        with pytest.raises(InvalidInputError):
            parse_k_range(bad)


# Memory-bandwidth roofline ----------------------------------------------------------------
@pytest.mark.parametrize("clock_mhz, bus_bits, published", [
    (2619, 5120, 3.35e12),   # H100 SXM5, HBM3
    (1215, 5120, 1.555e12),  # A100 40 GB, HBM2
    (10501, 384, 1.008e12),  # RTX 4090, GDDR6X
    (9751, 384, 936e9),      # RTX 3090, GDDR6X
])
def test_peak_bandwidth_from_nvml_clock_and_bus_width_matches_published_specs(clock_mhz, bus_bits, published):
    from specdeck.core.gpu.telemetry import peak_bandwidth

    assert peak_bandwidth(clock_mhz, bus_bits) == pytest.approx(published, rel=0.005)
    assert peak_bandwidth(None, bus_bits) is None and peak_bandwidth(clock_mhz, 0) is None


def test_gpu_environment_takes_the_slowest_visible_gpus_peak_from_telemetry():
    from conftest import REPO_ROOT
    from specdeck.core.bench.runner import gpu_environment
    from specdeck.core.gpu.replay import ReplaySource, load_trace

    trace = load_trace(REPO_ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl")
    env = gpu_environment(ReplaySource(trace))
    assert {g["name"]: g["memory_bandwidth_peak"] for g in env["gpus"]} == {
        "NVIDIA GeForce RTX 4090": pytest.approx(1.008e12, rel=1e-3),
        "NVIDIA GeForce RTX 5090": pytest.approx(1.792e12, rel=1e-3)}
    assert env["memory_bandwidth_peak"] == pytest.approx(1.008e12, rel=1e-3)


def _forward_bytes(folder: Path) -> int:
    """Every weight but the input embedding, straight from the safetensors file."""
    from safetensors import safe_open

    total = 0
    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        for name in f.keys():
            if name != "model.embed_tokens.weight":
                tensor = f.get_tensor(name)
                total += tensor.numel() * tensor.element_size()
    return total


def test_weights_read_count_the_target_per_step_and_the_draft_per_drafted_token(models):
    plan = tiny_plan(models["target"], default_arms(models["draft"], ngram=True, k=3, adaptive=False),
                     max_new_tokens=12)
    run = run_plan(plan)
    target, draft = _forward_bytes(models["target"]), _forward_bytes(models["draft"])
    drafted_any = False
    for record in run.counted():
        s = record.result.stats
        draft_bytes = s.drafted * draft if record.arm == "B" else 0  # n-gram reads no weights
        assert s.weight_bytes_read == s.steps * target + draft_bytes, record.arm
        drafted_any |= record.arm == "B" and s.drafted > 0
    assert drafted_any
    # On a GPU the share of the peak is reported; here the share is of a given peak.
    peak = 50e9
    on_gpu = replace(run, environment={**run.environment, "memory_bandwidth_peak": peak})
    summary = summarize(on_gpu)
    arm = summary.arm("A")
    import statistics

    assert arm.weight_read_rate == pytest.approx(statistics.median(
        r.result.stats.weight_bytes_read / r.result.stats.decode_s for r in run.counted("A")))
    assert arm.roofline_share == pytest.approx(arm.weight_read_rate / peak)
    assert summarize(run).arm("A").roofline_share is None  # CPU: no peak, no share
    md = markdown_summary(on_gpu, summary)
    assert "of peak" in md and "50.0 GB/s" in md


def test_an_ngram_winner_applies_to_tabbyapi_mains_own_config_sample(tmp_path):
    """TabbyAPI main's config has draft_mode: it is ExLlamaV3 only, which drafts n-grams."""
    from conftest import TABBY
    from specdeck.core import config
    from specdeck.core.bench.sweep import plan_apply_setting
    from specdeck.core.engines.base import DrafterKind, DrafterSpec

    path = tmp_path / "config.yml"
    path.write_bytes((TABBY / "config_sample.f1f2c85.yml").read_bytes())
    planned = plan_apply_setting(DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=6, ngram_min=2,
                                             adaptive=False), path)
    assert planned.change.values[("draft_model", "draft_mode")] == "ngram"
    assert planned.change.values[("draft_model", "draft_num_tokens")] == 6
    assert "+  draft_mode: ngram" in planned.change.diff()
    assert config.load(path).backend_hint() == "exllamav3"
    # The exl2-checkpoint sample (no draft_mode) stays ExLlamaV2: n-gram is refused there.
    old = tmp_path / "old.yml"
    old.write_bytes((TABBY / "config_sample.exl2-checkpoint.yml").read_bytes())
    import pytest

    with pytest.raises(Exception, match="ExLlamaV2 backend cannot"):
        plan_apply_setting(DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=6), old)


def test_a_busy_machine_is_named_before_drafting_is_blamed(models, virtual_clock):
    """Issue 44: on a loaded machine the A/B said "low acceptance" and "steps too dear" with
    no word of other programs. The runs are real (n-gram on the cycling model, the parameter
    clock); then, as another program taking the cores would, two of B's three repeats of each
    prompt run at an eighth of the speed. The one rule (core.bench.noise.disturbed_runs, the
    tuner's too) finds them, and every report names the machine as the likely cause first."""
    from specdeck.core.bench.noise import disturbed_runs
    from specdeck.gui import bench_render

    strict = DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=4, ngram_short=0)
    plan = tiny_plan(models["cycle"], (Arm("A"), Arm("B", strict)), max_prompts=2,
                     repeats=3, max_new_tokens=20)
    run = run_plan(plan)
    quiet = summarize(run)
    assert quiet.comparison("B").speedup.median > 1
    assert disturbed_runs(run, 0.0) is None
    assert not any("another program" in n for n in quiet.notes)

    def slowed(record):
        if record.arm != "B" or record.slot.repeat == 2 or record.slot.warmup:
            return record
        stats = record.result.stats
        return replace(record, result=replace(record.result, stats=replace(
            stats, decode_s=stats.decode_s * 8)))

    busy = replace(run, records=tuple(slowed(r) for r in run.records))
    summary = summarize(busy)
    comparison = summary.comparison("B")
    assert comparison.speedup.median < 0.95 and comparison.causes
    assert comparison.causes[0].startswith("another program probably took the cores: 2 of "
                                           "the runs of B and A ran more than 30% away")
    assert any(n.startswith("2 of this A/B's 12 repeated runs") for n in summary.notes)
    assert "likely cause: another program probably took the cores" in \
        markdown_summary(busy, summary)  # the CLI's report
    assert "likely cause: another program probably took the cores" in \
        bench_render.final_html(summary, ["A", "B"])  # the A/B page
