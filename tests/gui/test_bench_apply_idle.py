"""The A/B page's Apply never offers a setting that drafted nothing, and says why (issue 45).

An n-gram arm that drafted nothing runs as fast as no drafting, so by noise alone it can
measure above 1.0x, even fastest of a sweep: `specdeck bench --apply` refuses it
(core.bench.winner), and so must the page, saying why beside the figure it shows. The runs
are real (a tiny real Llama on the parameter clock, where longer n-gram drafts are faster);
then the fastest arm's runs are made to have drafted nothing, as such an arm's would be.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from bench_sessions import InProcessSession
from conftest import TABBY
from specdeck.core.bench.runner import run_plan
from tiny_models import cycling_llama, parameter_clock

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def cycle(tmp_path_factory) -> Path:
    return cycling_llama(tmp_path_factory.mktemp("apply-idle") / "cycle")


def drafted_nothing(run, arms):
    """``run`` with every run of ``arms`` drafting nothing (its speed as measured)."""
    def idle(record):
        if record.arm not in arms:
            return record
        stats = replace(record.result.stats, drafted=0, accepted=0, draft_steps=0,
                        per_position_drafted=(), per_position_accepted=())
        return replace(record, result=replace(record.result, stats=stats,
                                              from_draft=(False,) * len(record.result.token_ids)))

    return replace(run, records=tuple(idle(r) for r in run.records))


class IdleArmsSession(InProcessSession):
    """Runs the page's plan once, then reports it with ``idle``'s arms made to have drafted
    nothing."""

    def __init__(self):
        super().__init__()
        self.measured = None
        self.idle: tuple[str, ...] = ()

    def measure(self, plan):
        if self.measured is None:
            self.measured = run_plan(plan)
        return self.measured

    def finish(self, run):
        return drafted_nothing(run, self.idle)


def test_apply_passes_over_an_arm_that_drafted_nothing_and_says_why(
        cycle, tmp_path, monkeypatch, qtbot, configured_qapp):
    from specdeck.core import config
    from specdeck.core.bench.fields import DEFAULT_KS
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.bench.sweep import sweep_arms
    from specdeck.core.engines.base import DrafterKind, DrafterSpec
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.bench import BenchPage
    from specdeck.gui.widgets import config_dialog

    parameter_clock(monkeypatch)
    sample = (TABBY / "config_sample.exl2-checkpoint.yml").read_text()
    path = tmp_path / "config.yml"
    path.write_text(sample.replace("  backend:\n", "  backend: exllamav3\n", 1))

    session = IdleArmsSession()
    page = BenchPage(AppContext(), session_factory=lambda: session)
    qtbot.addWidget(page)
    try:
        form = page.form.plan()
        page.form.set_plan(replace(
            form, model=str(cycle), suites=("code",), max_new_tokens=30, repeats=1, warmup=0,
            prompt_ids=tuple(p.id for p in first_prompts(("code",), 2)),
            arms=sweep_arms((replace(form.arms[-1].drafter, kind=DrafterKind.NGRAM)
                             if len(form.arms) > 1 else DrafterSpec(DrafterKind.NGRAM),),
                            DEFAULT_KS)))

        page.start()  # every k drafted: the fastest is offered
        qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
        speedups = {c.arm: c.speedup.median for c in page.last_summary.comparisons}
        fastest, second = sorted(speedups, key=speedups.get, reverse=True)[:2]
        assert page.best_setting.arm == fastest and speedups[second] > 1.0
        k, next_k = (page.last_run.plan.arm(a).drafter.num_draft_tokens for a in (fastest, second))

        # The fastest k drafted nothing: the next fastest is offered, and the page says why
        # the faster one is not.
        session.idle = (fastest,)
        page.start()
        qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
        assert page.last_summary.comparison(fastest).not_drafting
        assert page.last_summary.comparison(fastest).speedup.median == speedups[fastest]
        assert page.best_setting.arm == second
        assert page.apply_button.isEnabled()
        assert page.apply_button.text() == f"Apply n-gram k={next_k}…"
        why = (f"n-gram k={k} measured {speedups[fastest]:.2f}x but cannot be the best: it "
               "did not draft")
        assert why in page.apply_button.toolTip()
        assert why in page.summary.text()
        page.context.set_config_path(path)
        said = []
        monkeypatch.setattr(config_dialog.ConfirmChangeDialog, "exec",
                            lambda dialog: said.append(dialog.findChildren(
                                config_dialog.QLabel)) or config_dialog.QDialog.DialogCode.Accepted)
        with qtbot.waitSignal(page.context.file_changed, timeout=30_000):
            page.apply_button.click()
        draft = config.load(path).data["draft_model"]
        assert draft["draft_mode"] == "ngram" and draft["draft_num_tokens"] == next_k
        assert any(why in label.text() for label in said[0])

        # No k drafted: drafting is switched off, with why beside the 1.xx× on screen.
        session.idle = tuple(speedups)
        page.start()
        qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
        assert page.best_setting is None
        assert page.apply_button.text() == "Switch drafting off…"
        assert why in page.apply_button.toolTip() and why in page.summary.text()
    finally:
        page.shutdown()
