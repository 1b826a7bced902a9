"""The demo's draft-model arm: finding a larger model on disk that shares its tokenizer.

Tiny random Llama models with real tokenizers from tests/data/fixtures stand in for the demo
and for the models a user may have downloaded (Mistral's tokenizer plays the demo's family,
TinyLlama's another one; the fixtures hold no SmolLM2 tokenizer); the real compatibility
checker decides which one can run with the demo as its draft.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import MODELS
from specdeck.core.engines.demo import find_demo_partner

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import random_llama  # noqa: E402 - needs torch

FAMILY = MODELS / "Mistral-7B-v0.1"


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    root = tmp_path_factory.mktemp("partner-library")
    demo = random_llama(root / "cache" / "demo", seed=0, hidden=32, layers=1,
                        tokenizer_from=FAMILY)
    models = root / "models"
    # Smaller than the demo, then another tokenizer, then two that qualify.
    random_llama(models / "SmolLM2-tiny", seed=1, hidden=16, layers=1, tokenizer_from=FAMILY)
    random_llama(models / "Llama-other", seed=2, hidden=64, layers=2)
    random_llama(models / "SmolLM2-bigger", seed=3, hidden=64, layers=2,
                 tokenizer_from=FAMILY)
    random_llama(models / "SmolLM2-biggest", seed=4, hidden=96, layers=2,
                 tokenizer_from=FAMILY)
    return demo, models


def test_the_smallest_larger_model_with_the_demo_tokenizer_is_the_partner(library):
    demo, models = library
    partner = find_demo_partner(demo, model_dirs=(models,))
    assert partner is not None and partner.name == "SmolLM2-bigger"


def test_no_partner_without_a_compatible_larger_model(library, tmp_path):
    demo, models = library
    only = tmp_path / "models"
    for name in ("SmolLM2-tiny", "Llama-other"):
        shutil.copytree(models / name, only / name)
    assert find_demo_partner(demo, model_dirs=(only,)) is None
    assert find_demo_partner(demo, model_dirs=(tmp_path / "missing",)) is None


def test_bench_demo_runs_the_partner_with_the_demo_as_its_draft(library, monkeypatch, capsys):
    import json

    from specdeck.core.cli import main
    from specdeck.core.engines import demo as demo_module

    demo, models = library
    monkeypatch.setattr(demo_module, "ensure_demo_model", lambda *args, **kwargs: demo)
    common = ["bench", "--demo", "--models-dir", str(models), "--no-chat", "--device", "cpu",
              "--max-prompts", "1", "--repeats", "1", "--warmup", "0", "--max-new", "6",
              "--no-history", "--json", "-"]
    assert main(common) == 0
    captured = capsys.readouterr()
    assert "SmolLM2-bigger" in captured.err and "as its draft" in captured.err
    data = json.loads(captured.out)
    arms = {a["name"]: a for a in data["plan"]["arms"]}
    assert data["plan"]["model"] == str(models / "SmolLM2-bigger")
    assert arms["B"]["drafter"]["kind"] == "model" and arms["B"]["drafter"]["model_path"] == str(demo)
    assert arms["C"]["drafter"]["kind"] == "ngram"
    assert len(data["runs"]) == 3

    # --demo-alone keeps the demo by itself: no draft vs n-gram.
    monkeypatch.setattr(demo_module, "find_demo_partner", lambda *a, **k: pytest.fail("searched"))
    import argparse

    from specdeck.core.cli.bench_cmd import build_plan, register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    plan = build_plan(parser.parse_args([*common[:2], "--demo-alone"]))
    assert plan.model == "demo" and [a.drafter.kind.value for a in plan.arms[1:]] == ["ngram"]


def test_a_plan_can_name_the_demo_model_as_its_draft(library, monkeypatch):
    # What the A/B page sends when its draft field says "demo".
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.engines import demo as demo_module
    from specdeck.core.engines.base import DrafterKind, DrafterSpec, LoadSpec

    demo, models = library
    monkeypatch.setattr(demo_module, "ensure_demo_model", lambda *args, **kwargs: demo)
    plan = BenchPlan(engine="torch", model=str(models / "SmolLM2-bigger"),
                     arms=(Arm("A"), Arm("B", DrafterSpec(DrafterKind.MODEL, Path(demo_module.DEMO_ALIAS)))),
                     suites=("code",), max_prompts=1, max_new_tokens=6, repeats=1, warmup=0,
                     apply_chat_template=False, load=LoadSpec(models, device="cpu"))
    run = run_plan(plan)
    drafted = [r for r in run.records if r.arm == "B"]
    assert drafted and drafted[0].result.drafter.model_path == demo
    assert drafted[0].result.stats.drafted > 0
