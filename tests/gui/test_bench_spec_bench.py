"""Spec-Bench on the A/B page: the whole shipped benchmark, one shipped category or the
user's own question.jsonl is one choice beside the built-in suites; the categories that are
not shipped are listed, disabled, with core's reason; plans round-trip through the form; a
run on a tiny real model ends in a result per Spec-Bench category."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt
from specdeck.core.bench.plan import BenchPlan, default_arms
from specdeck.core.bench.suites import (
    first_prompts,
    public_suites,
    spec_bench_categories,
)
from specdeck.core.errors import SpecDeckError
from specdeck.gui import bench_form
from specdeck.gui.bench_form import QUESTION_FILE, BenchForm
from specdeck.resources import path

SHIPPED = ("mt_bench", "qa", "math_reasoning")
NOT_SHIPPED = ("translation", "summarization", "rag")


@pytest.fixture
def form(bench_form):
    return bench_form


@pytest.fixture
def question_file(tmp_path) -> Path:
    """Spec-Bench's question format with a category SpecDeck does not ship (translation,
    written here) among shipped lines."""
    lines = []
    for category in SHIPPED:
        text = path("prompts", "spec_bench", f"{category}.jsonl").read_text(encoding="utf-8")
        lines += [json.loads(line) for line in text.splitlines()[:2]]
    lines.append({"question_id": 161, "category": "translation",
                  "turns": ["Translate German to English: Der Hund schläft."]})
    file = tmp_path / "question.jsonl"
    file.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return file


def plan(suites, per_suite=1, **fields) -> BenchPlan:
    values = dict(engine="torch", model="demo", arms=default_arms(ngram=True), suites=suites,
                  prompt_ids=tuple(p.id for p in first_prompts(suites, per_suite)))
    values.update(fields)
    return BenchPlan(**values)


def choose(form: BenchForm, name: str) -> None:
    """Pick the Spec-Bench choice ``name`` as a user does (select it; it is activated)."""
    index = form.spec_bench.findData(name)
    assert index >= 0 and form.spec_bench.model().item(index).isEnabled(), name
    form.spec_bench.setCurrentIndex(index)
    form.spec_bench.activated.emit(index)


def untick_builtins(form: BenchForm) -> None:
    for button in form.suite_buttons.values():
        button.setChecked(False)


def test_the_choice_lists_spec_bench_in_its_tables_order(form):
    items = [form.spec_bench.itemData(i) for i in range(form.spec_bench.count())]
    assert items == ["", "spec-bench", *(f"spec-bench/{c.name}" for c in spec_bench_categories()),
                     QUESTION_FILE]
    assert [c.name for c in spec_bench_categories()] == [
        "mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
    assert form.spec_bench.currentData() == ""  # the built-in defaults stay the default
    assert form.plan().suites == ("code", "grounded")


@pytest.mark.parametrize("name", NOT_SHIPPED)
def test_a_category_not_shipped_is_disabled_with_cores_reason(form, name):
    category = next(c for c in spec_bench_categories() if c.name == name)
    index = form.spec_bench.findData(f"spec-bench/{name}")
    assert not form.spec_bench.model().item(index).isEnabled()
    tip = form.spec_bench.itemData(index, Qt.ItemDataRole.ToolTipRole)
    assert category.not_shipped in tip and "question.jsonl" in tip
    assert category.label in form.spec_bench.itemText(index)
    assert "not shipped" in form.spec_bench.itemText(index)


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_category_is_enabled_with_its_dataset(form, name):
    category = next(c for c in spec_bench_categories() if c.name == name)
    index = form.spec_bench.findData(f"spec-bench/{name}")
    assert form.spec_bench.model().item(index).isEnabled()
    assert form.spec_bench.itemData(index, Qt.ItemDataRole.ToolTipRole) == (
        f"{category.dataset} ({category.license})")


def test_choosing_a_category_puts_it_in_the_plan(form):
    untick_builtins(form)
    choose(form, "spec-bench/qa")
    assert form.plan().suites == ("spec-bench/qa",)
    assert form.plan().prompt_ids == ("spec-bench-321",)
    form.suite_buttons["code"].setChecked(True)  # with the built-ins, after them
    form.per_suite.setValue(2)
    made = form.plan()
    assert made.suites == ("code", "spec-bench/qa")
    assert made.prompt_ids[-2:] == ("spec-bench-321", "spec-bench-322")


def test_choosing_the_whole_benchmark_takes_the_first_of_each_category(form):
    untick_builtins(form)
    choose(form, "spec-bench")
    form.per_suite.setValue(2)
    made = form.plan()
    assert made.suites == ("spec-bench",)
    assert made.prompt_ids == ("spec-bench-81", "spec-bench-321", "spec-bench-401",
                               "spec-bench-91", "spec-bench-322", "spec-bench-402")
    # Per category the spin box reaches every question (80 each), not the built-ins' 4.
    assert form.per_suite.maximum() == len(public_suites()["spec-bench"].prompts)
    choose(form, "")
    assert form.per_suite.maximum() == max(len(s.prompts) for s in form._suites.values())


def test_the_users_question_file_is_chosen_through_the_file_dialog(qtbot, form, question_file,
                                                                   monkeypatch):
    import threading

    from specdeck.core.bench import suites

    readers, real = [], suites.load_suite

    def watched(*args, **kwargs):
        readers.append(threading.current_thread())
        return real(*args, **kwargs)

    monkeypatch.setattr(suites, "load_suite", watched)
    monkeypatch.setattr(bench_form.QFileDialog, "getOpenFileName",
                        staticmethod(lambda *args, **kwargs: (str(question_file), "")))
    untick_builtins(form)
    choose(form, QUESTION_FILE)
    qtbot.waitUntil(lambda: form.spec_bench.currentData() == str(question_file), timeout=10_000)
    assert "question.jsonl" in form.spec_bench.currentText()
    made = form.plan()
    assert made.suites == (str(question_file),)
    # Every category of the file, the unshipped translation among them.
    assert made.prompt_ids == ("spec-bench-81", "spec-bench-321", "spec-bench-401",
                               "spec-bench-161")
    # Cancelling the dialog keeps the choice as it was.
    monkeypatch.setattr(bench_form.QFileDialog, "getOpenFileName",
                        staticmethod(lambda *args, **kwargs: ("", "")))
    choose(form, QUESTION_FILE)
    assert form.spec_bench.currentData() == str(question_file)
    # Read once, in a worker (issue 45): choosing, counting and planning never read it on the
    # GUI thread.
    assert readers and threading.main_thread() not in readers


def test_cancelling_the_file_dialog_keeps_a_plans_choice(form, monkeypatch):
    monkeypatch.setattr(bench_form.QFileDialog, "getOpenFileName",
                        staticmethod(lambda *args, **kwargs: ("", "")))
    wanted = plan(("spec-bench/mt_bench",), per_suite=2)
    form.set_plan(wanted)
    choose(form, QUESTION_FILE)
    assert form.plan() == wanted


def test_a_file_that_is_not_spec_benchs_is_refused_and_the_choice_kept(qtbot, form, tmp_path):
    choose(form, "spec-bench/math_reasoning")
    plain = tmp_path / "mine.jsonl"
    plain.write_text('{"prompt": "Say hello."}\n', encoding="utf-8")
    with qtbot.waitSignal(form.refused) as refused:
        assert not form.set_question_file(str(plain))
    assert isinstance(refused.args[0], SpecDeckError)
    assert "not a Spec-Bench question file" in str(refused.args[0])
    assert form.spec_bench.currentData() == "spec-bench/math_reasoning"


def test_a_refused_file_shows_in_the_pages_banner(qtbot, configured_qapp, tmp_path):
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.bench import BenchPage

    page = BenchPage(AppContext())
    qtbot.addWidget(page)
    page.show()
    try:
        page.form.set_question_file(str(tmp_path / "missing.jsonl"))  # read in a worker
        qtbot.waitUntil(lambda: page.banner.isVisible(), timeout=10_000)
        assert "missing.jsonl" in page.banner.label.text()
    finally:
        page.shutdown()


def expressible(question_file: Path) -> dict[str, BenchPlan]:
    return {
        "the whole benchmark, 3 per category": plan(("spec-bench",), per_suite=3),
        "one category": plan(("spec-bench/math_reasoning",)),
        "built-ins, then a category, 7 each": plan(("code", "prose", "spec-bench/mt_bench"),
                                                   per_suite=7, repeats=2),
        "the user's question file": plan((str(question_file),), per_suite=2),
    }


@pytest.mark.parametrize("name", ["the whole benchmark, 3 per category", "one category",
                                  "built-ins, then a category, 7 each",
                                  "the user's question file"])
def test_set_plan_then_plan_gives_a_spec_bench_plan_back(form, show_plan, question_file, name):
    wanted = expressible(question_file)[name]
    show_plan(wanted)
    assert form.plan() == wanted
    form.set_plan(plan(("chat",)))
    assert form.spec_bench.currentData() == ""
    assert form.set_plan(wanted)  # read once: shown at once
    assert form.plan() == wanted
    assert form.spec_bench.currentData() == wanted.suites[-1]


NOT_EXPRESSIBLE = {
    "two Spec-Bench choices": (("spec-bench/qa", "spec-bench/mt_bench"), "one Spec-Bench choice"),
    "Spec-Bench before a built-in": (("spec-bench/qa", "code"), "after them"),
    "a category not shipped": (("spec-bench/rag",), "not shipped"),
    "a suite file of other prompts": (("mine.jsonl",), "mine.jsonl"),
}


@pytest.mark.parametrize("name", list(NOT_EXPRESSIBLE))
def test_a_spec_bench_plan_the_form_cannot_show_is_refused(form, show_plan, tmp_path, monkeypatch,
                                                           name):
    suites, what = NOT_EXPRESSIBLE[name]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.jsonl").write_text('{"prompt": "Say hello."}\n', encoding="utf-8")
    bad = BenchPlan(engine="torch", model="demo", arms=default_arms(ngram=True), suites=suites,
                    prompt_ids=("spec-bench-321",))
    choose(form, "spec-bench/qa")
    before = form.choices()
    with pytest.raises(SpecDeckError) as refused:
        show_plan(bad)
    assert "cannot show this plan" in str(refused.value) and what in str(refused.value)
    assert form.choices() == before


def test_a_plans_question_file_is_read_in_a_worker(qtbot, form, question_file, monkeypatch):
    """Issue 45: a plan naming the user's question.jsonl had it read on the GUI thread. It is
    read in a worker (held here, as a slow disk would hold it): the form is unchanged until
    then, and shows the plan once it is read."""
    import threading

    from specdeck.core.bench import suites

    wanted = plan((str(question_file),), per_suite=2)  # read here, by the test
    readers, disk, real = [], threading.Event(), suites.load_suite

    def slow(source, *args, **kwargs):
        if str(source) == str(question_file):
            readers.append(threading.current_thread())
            disk.wait(10)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(suites, "load_suite", slow)
    before = form.plan()
    assert form.set_plan(wanted) is False
    assert form.plan() == before  # nothing shown until it is read
    disk.set()
    qtbot.waitUntil(lambda: form.plan() == wanted, timeout=10_000)
    assert readers and threading.main_thread() not in readers


def test_the_choice_is_kept_between_sessions(qtbot, form, show_plan, question_file):
    show_plan(plan((str(question_file),), per_suite=2))
    form.save()
    assert json.loads(QSettings().value("bench/suites"))[-1] == str(question_file)
    again = BenchForm()
    qtbot.addWidget(again)
    again.restore()  # the file shown at once, read in a worker
    assert again.spec_bench.currentData() == str(question_file)
    qtbot.waitUntil(lambda: not again.tasks.running("spec-bench"), timeout=10_000)
    assert again.plan() == form.plan()
    choose(again, "spec-bench")
    again.save()
    third = BenchForm()
    qtbot.addWidget(third)
    third.restore()
    assert third.spec_bench.currentData() == "spec-bench"


@pytest.mark.slow
def test_a_spec_bench_category_runs_to_a_result_per_category(qtbot, configured_qapp,
                                                            tmp_path_factory):
    """The QA category on the cycling tiny model, no draft vs n-gram: the summary names the
    category with its speed-up (core's by-tag ratio), and so does the report."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.bench import BenchPage
    from tiny_models import cycling_llama

    model = cycling_llama(tmp_path_factory.mktemp("spec-bench-page") / "cycle")
    page = BenchPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1280, 760)
    page.show()
    try:
        wanted = BenchPlan(engine="torch", model=str(model), arms=default_arms(ngram=True, k=4),
                           suites=("spec-bench/qa",), prompt_ids=("spec-bench-321",),
                           max_new_tokens=16, repeats=2, warmup=0)
        page.form.set_plan(wanted)
        assert page.form.spec_bench.currentData() == "spec-bench/qa"
        page.start()
        qtbot.waitUntil(lambda: page.last_report is not None, timeout=120_000)
        assert {row["Prompt"] for row in page.table.rows()} == {"spec-bench-321"}
        by_tag = page.last_summary.comparison("B").by_tag
        assert set(by_tag) == {"spec-bench/qa"}
        shown = f"Spec-Bench by category: Question Answering {by_tag['spec-bench/qa'].median:.2f}×"
        assert shown in page.summary.text()
        report = page.last_report.markdown.read_text(encoding="utf-8")
        assert "spec-bench/qa" in report.split("## Speed-up by prompt tag")[1]
    finally:
        page.shutdown()
