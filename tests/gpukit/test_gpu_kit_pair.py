"""The kit's target/draft pair, made for real on CPU at toy sizes, then used by SpecDeck:
the PyTorch engine runs it with the draft model (lossless, drafts accepted), `specdeck
check` says the pair is compatible, and the driver/report record the agreement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kit_paths  # noqa: F401
import pytest
from conftest import MODELS

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def kit_run(tmp_path_factory):
    """install-free steps of the kit (env, pair, check) through the real driver."""
    from gpukit.config import TINY
    from gpukit.driver import run_steps
    from gpukit.state import KitState
    from gpukit.steps import steps_by_name

    state = KitState(tmp_path_factory.mktemp("kit-work"))
    steps = [steps_by_name()[name] for name in ("env", "pair", "check")]
    lines: list[str] = []
    outcome = run_steps(steps, state, TINY, budget_s=600, log=lines.append)
    return state, outcome, lines


def test_driver_ran_the_cpu_steps(kit_run):
    state, outcome, _ = kit_run
    assert outcome.ran == ["env", "pair", "check"]
    assert outcome.failed is None and outcome.next_step is None
    assert all(state.is_done(name) for name in outcome.ran)


def test_training_raises_greedy_agreement_and_it_is_reported(kit_run):
    state, _, _ = kit_run
    pair = state.read_json("pair")
    before, after = pair["agreement_before"], pair["agreement_after"]
    assert after["positions"] == before["positions"] > 0
    assert after["rate"] == pytest.approx(after["agreed"] / after["positions"])
    # Random initialisations agree by chance only; the trained pair agrees far more often.
    assert after["rate"] >= 0.15 > before["rate"]
    assert pair["draft_params"] < pair["target_params"]
    assert state.record("pair").summary["agreement"] == pytest.approx(after["rate"], abs=1e-4)


def test_saved_pair_is_a_hugging_face_llama_with_the_real_tokenizer(kit_run):
    state, _, _ = kit_run
    for role in ("target", "draft"):
        folder = state.root / "pair" / role
        config = json.loads((folder / "config.json").read_text())
        assert config["architectures"] == ["LlamaForCausalLM"]
        assert list(folder.glob("*.safetensors"))
        assert (folder / "tokenizer.json").read_bytes() == (
            MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.json").read_bytes()
    assert not list((state.root / "pair").glob(".*partial"))


def test_specdeck_check_says_the_pair_is_compatible(kit_run):
    state, _, _ = kit_run
    check = state.read_json("check")
    assert check["hf"]["exit"] == 0
    assert check["hf"]["report"]["verdict"].startswith("compatible")


def test_torch_engine_speculates_with_the_trained_draft(kit_run):
    """The A/B loop the GPU run uses, on SpecDeck's PyTorch engine: the draft-model arm
    reproduces the baseline token for token and some drafts are accepted."""
    from specdeck.core.bench.summary import summarize

    from gpukit import ab

    state, _, _ = kit_run
    target, draft = state.root / "pair" / "target", state.root / "pair" / "draft"
    arms = ab.default_arms(draft, (3,), 3)
    prompts = ab.select_prompts(("grounded", "prose"), 1)
    run = ab.run_arms("torch", target, arms, prompts, repeats=1, max_new_tokens=24,
                      log=lambda line: None)
    records = run.counted()
    assert {r.arm for r in records} == {"baseline", "draft k=3", "n-gram k=3"}
    assert all(r.result.stats.new_tokens == 24 for r in records)
    summary = summarize(run)
    rows = {row["arm"]: row for row in ab.arm_rows(summary)}
    drafted = rows["draft k=3"]
    # The kit's rows are core's summary, not a second computation of it.
    final = summary.comparison("draft k=3")
    assert drafted["speedup_median"] == final.speedup.median
    assert drafted["identical_to_baseline"] == final.lossless.identical == drafted["runs"] == 2
    assert drafted["lossless"].startswith("lossless")
    assert drafted["acceptance_rate"] == summary.arm("draft k=3").acceptance_rate > 0
    assert drafted["mean_acceptance_length"] > 1.0
    assert rows["baseline"]["speedup_median"] is None and rows["baseline"]["lossless"] == "reference"
    row = ab.run_row(records[0].arm, records[0].prompt_id, 0, records[0].result)
    assert row["tokens_per_second"] == records[0].result.stats.tokens_per_second


def test_report_shows_agreement_and_parses(kit_run, tmp_path):
    from gpukit.report import write_report
    from gpukit.steps import STEPS

    state, _, _ = kit_run
    md, js = write_report(state, STEPS, "tiny", tmp_path)
    data = json.loads(js.read_text())
    assert data["steps"]["pair"]["status"] == "done"
    assert data["steps"]["build"] == {"status": "not run"}
    rate = data["results"]["pair"]["agreement_after"]["rate"]
    text = md.read_text()
    assert f"**{100 * rate:.1f}%**" in text
    assert md.name == f"gpu-{data['date']}.md"


def test_link_install_makes_the_tree_importable_as_specdeck(tmp_path):
    """The device has no setuptools we can trust: SpecDeck is linked into the site folder."""
    from conftest import REPO_ROOT

    from gpukit.install import link_specdeck

    site = tmp_path / "site"
    link_specdeck(site, REPO_ROOT)
    link_specdeck(site, REPO_ROOT)  # a second run (warm machine) changes nothing
    code = ("import specdeck, specdeck.core.vram, specdeck.resources; "
            "print(specdeck.__file__); print(specdeck.core.vram.__file__)")
    # -S hides site-packages (and this checkout's editable install): only the links count.
    done = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                          env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    package, vram = done.stdout.split()
    assert Path(package) == site / "specdeck" / "__init__.py"
    assert Path(vram).resolve() == REPO_ROOT / "core" / "vram" / "__init__.py"


def test_the_gpu_probe_rehearses_on_cpu(tmp_path):
    """`bash gpukit/probe.sh --cpu`, the exact script the device runs: it makes its two
    random models (which SpecDeck's ExLlamaV2 engine would accept as a pair) and reports every
    GPU section as skipped, so no device second goes to a typo in what runs before them."""
    from specdeck.core.engines import common
    from specdeck.core.engines.exllamav2 import check_model_folder

    root = Path(__file__).resolve().parents[2]
    env = {**__import__("os").environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "out"),
           "SPECDECK_GPU_WORK": str(tmp_path / "work")}
    done = subprocess.run(["bash", str(root / "gpukit" / "probe.sh"), "--cpu"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "probe.json").read_text())
    assert report["models"]["status"] == "done"
    for name in ("memory", "attention", "engine_masked", "engine_unmasked"):
        assert report[name] == {"status": "skipped", "why": "CPU rehearsal"}
    target, draft = Path(report["models"]["target"]), Path(report["models"]["draft"])
    assert check_model_folder(target, "target").quant.label == "unquantized"
    assert common.require_compatible_draft(target, draft, 1024) == ()
