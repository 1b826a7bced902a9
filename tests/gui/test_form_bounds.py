"""A page's widget takes what the command line takes (issue 45): each range and default below
is one definition in core, read by the CLI's flag and by the page's widget alike. Checked on
the real widgets and the real argument parser: the widget's bounds against the bounds the
flag's parser was built with, and the page's words at the bottom of a range ("files",
"target's native context") one step below the CLI's lowest number."""

from __future__ import annotations

import argparse

from specdeck.core.cli import build_parser
from specdeck.gui.context import AppContext


def flag(command: tuple[str, ...], option: str) -> argparse.Action:
    """The action of ``option`` under the (sub)command ``command`` of `specdeck`'s parser."""
    parser = build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    return next(a for a in parser._actions if option in a.option_strings)


def bounds(command: tuple[str, ...], option: str) -> tuple:
    return flag(command, option).type.bounds


def test_the_vram_plan_form_takes_what_vram_takes(qtbot, configured_qapp):
    from specdeck.gui.pages.gpus import PlanForm

    form = PlanForm()
    qtbot.addWidget(form)
    low, high = bounds(("vram",), "--ctx")
    assert (form.context.minimum(), form.context.maximum()) == (low, high)
    assert form.context.specialValueText() == "target's native context"  # -1, as --ctx -1
    assert form.context.textFromValue(0).startswith("TabbyAPI's default")
    for option, box in (("--bpw", form.target.bpw), ("--draft-bpw", form.draft.bpw)):
        low, high = bounds(("vram",), option)
        assert box.maximum() == high
        assert box.minimum() == 0 and box.specialValueText() == "bpw: files"
        box.setValue(0)
        box.stepBy(1)  # from "files" up: the lowest bpw the CLI takes, never below
        assert box.value() == low
        box.stepBy(-1)
        assert box.value() == 0
    assert bounds(("suggest",), "--bpw") == bounds(("vram",), "--bpw")


def test_the_compatibility_page_takes_what_check_takes(qtbot, configured_qapp):
    from specdeck.gui.pages.compatibility import CompatibilityPage

    page = CompatibilityPage(AppContext())
    qtbot.addWidget(page)
    box = page.context_len
    low, high = bounds(("check",), "--max-seq-len")
    assert bounds(("suggest",), "--max-seq-len") == (low, high)
    assert box.maximum() == high
    assert box.minimum() == low - 1 and box.specialValueText() == "target's native context"
    page.shutdown()


def test_the_tune_page_takes_what_tune_takes(qtbot, configured_qapp):
    from specdeck.core.tune.request import TuneForm, parse_duration
    from specdeck.gui.pages.tune import TunePage

    page = TunePage(AppContext())
    qtbot.addWidget(page)
    assert (page.downloads.minimum(), page.downloads.maximum()) == \
        bounds(("tune",), "--download-budget")
    assert parse_duration(page.budget.text()) == flag(("tune",), "--budget").default
    assert parse_duration(TuneForm().budget) == flag(("tune",), "--budget").default
    assert page.form().options().budget_s == flag(("tune",), "--budget").default
