"""The A/B page and `specdeck bench --apply` name and write the same winner
(core.bench.winner), on a run where the fastest setting's output changed."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from bench_sessions import InProcessSession
from conftest import TABBY
from specdeck.core.bench.summary import summarize
from tiny_models import changed_fastest, cycling_llama, parameter_clock

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def cycle(tmp_path_factory) -> Path:
    return cycling_llama(tmp_path_factory.mktemp("apply-winner") / "cycle")


class ChangedFastestSession(InProcessSession):
    """Reports the page's plan with its fastest arm's output changed (``changed_fastest``)."""

    def finish(self, run):
        run, self.changed_arm, self.expected = changed_fastest(run)
        self.finished = run
        return run


def test_the_cli_and_the_page_apply_the_same_winner(cycle, tmp_path, monkeypatch, qtbot,
                                                     configured_qapp):
    """A sweep run by the A/B page, its fastest k's output changed: the page's Apply and
    `specdeck bench --plan --apply` on the same run both write the next-best k into
    config.yml, never the faster k whose output changed."""
    from specdeck.core import config
    from specdeck.core.bench import runner
    from specdeck.core.cli import main
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.bench import BenchPage
    from specdeck.gui.widgets import config_dialog

    parameter_clock(monkeypatch)
    sample = (TABBY / "config_sample.exl2-checkpoint.yml").read_text()
    original = sample.replace("  backend:\n", "  backend: exllamav3\n", 1)

    session = ChangedFastestSession()
    page = BenchPage(AppContext(), session_factory=lambda: session)
    qtbot.addWidget(page)
    try:
        from specdeck.core.bench.fields import DEFAULT_KS
        from specdeck.core.bench.sweep import sweep_arms
        from specdeck.core.engines.base import DrafterKind, DrafterSpec

        from specdeck.core.bench.suites import first_prompts

        form = page.form.plan()
        page.form.set_plan(replace(
            form, model=str(cycle), suites=("code",), max_new_tokens=30, repeats=1, warmup=0,
            prompt_ids=tuple(p.id for p in first_prompts(("code",), 2)),
            arms=sweep_arms((replace(form.arms[-1].drafter, kind=DrafterKind.NGRAM)
                             if len(form.arms) > 1 else DrafterSpec(DrafterKind.NGRAM),),
                            DEFAULT_KS)))
        page.start()
        qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
        run = session.finished
        assert run.plan.arms[1].name == "k1" and len(run.plan.arms) == 9
        assert summarize(run).comparison(session.changed_arm).lossless.diverged
        assert page.best_setting.arm == session.expected != session.changed_arm
        page_config = tmp_path / "page" / "config.yml"
        page_config.parent.mkdir()
        page_config.write_text(original)
        page.context.set_config_path(page_config)
        monkeypatch.setattr(config_dialog.ConfirmChangeDialog, "exec",
                            lambda dialog: config_dialog.QDialog.DialogCode.Accepted)
        with qtbot.waitSignal(page.context.file_changed, timeout=30_000):
            page.apply_button.click()
    finally:
        page.shutdown()

    # The CLI, given the page's plan as plan.json, and the same run.
    plan_json = tmp_path / "plan.json"
    plan_json.write_text(json.dumps(run.plan.to_json()))
    cli_config = tmp_path / "cli" / "config.yml"
    cli_config.parent.mkdir()
    cli_config.write_text(original)
    monkeypatch.setattr(runner, "run_plan", lambda plan, *a, **k: replace(run, plan=plan))
    # Exit 1: an arm's output changed, which the command reports as a negative answer.
    assert main(["bench", "--plan", str(plan_json), "--apply", "--yes", "--config",
                 str(cli_config), "--no-history"]) == 1

    expected_k = run.plan.arm(session.expected).drafter.num_draft_tokens
    for written in (page_config, cli_config):
        draft = config.load(written).data["draft_model"]
        assert draft["draft_mode"] == "ngram" and draft["draft_num_tokens"] == expected_k
    assert page_config.read_text() == cli_config.read_text()
