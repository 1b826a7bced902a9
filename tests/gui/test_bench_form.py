"""The A/B page's form: set_plan(plan) then plan() gives the plan back exactly, for every kind
of plan the controls can express; any other plan is refused with what the form cannot hold,
and the form is left as it was. Server arms are kept between sessions in plan.json's own arm
format, and the older saved format is read and migrated. Nothing here runs a plan."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings
from specdeck.core.bench.plan import Arm, BenchPlan, arm_to_json, default_arms
from specdeck.core.bench.suites import first_prompts
from specdeck.core.bench.sweep import sweep_arms
from specdeck.core.engines.base import DrafterKind, DrafterSpec, LoadSpec, SamplingSpec
from specdeck.core.errors import SpecDeckError
from specdeck.core.servers.arms import ServerArm, arms_from_urls, launched_arm, url_arm
from specdeck.gui.bench_form import ARMS_KEY, LEGACY_ARMS_KEY, BenchForm, plan_from_choices


@pytest.fixture
def form(bench_form):
    return bench_form


def plan(suites=("code",), per_suite=1, **fields) -> BenchPlan:
    values = dict(engine="torch", model="demo", arms=default_arms(ngram=True), suites=suites,
                  prompt_ids=tuple(p.id for p in first_prompts(suites, per_suite)))
    values.update(fields)
    return BenchPlan(**values)


def shown(form: BenchForm) -> BenchPlan:
    """The plan the form shows, the reference alone allowed (Start refuses that one)."""
    return plan_from_choices(form.choices(), comparison=False)


LAUNCHED = (launched_arm("A", "/opt/llama-server", "/m/target.gguf", (), ("-t", "1")),
            launched_arm("B", "/opt/llama-server", "/m/target.gguf",
                         ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2"),
                         ("-t", "1")))

EXPRESSIBLE = {
    "n-gram": plan(),
    "draft model and n-gram, k=6, fixed": plan(
        arms=default_arms("/models/draft", ngram=True, k=6, adaptive=False),
        suites=("chat", "code", "prose"), per_suite=3, max_new_tokens=77, repeats=3, warmup=0),
    "draft model only": plan(arms=default_arms("/models/draft", k=2), model="/models/target",
                             engine="exllamav2"),
    "a sweep of both": plan(arms=sweep_arms([DrafterSpec(DrafterKind.MODEL, Path("/models/draft")),
                                             DrafterSpec(DrafterKind.NGRAM)])),
    "the reference alone": plan(arms=default_arms()),
    "servers on one line": plan(engine="server", model="server", arms=arms_from_urls(
        ["http://127.0.0.1:8080#qwen", "fast=http://127.0.0.1:8081"])),
    "a key variable": plan(engine="server", model="server", arms=(
        url_arm("A", "http://127.0.0.1:8080", reference=True),
        url_arm("B", "http://127.0.0.1:8081", api_key_env="B_KEY"))),
    "launched llama-servers, one at a time": plan(engine="server", model="server", arms=LAUNCHED,
                                                  one_server_at_a_time=True),
}


@pytest.mark.parametrize("name", list(EXPRESSIBLE))
def test_set_plan_then_plan_gives_the_plan_back(form, name):
    wanted = EXPRESSIBLE[name]
    form.set_plan(wanted)
    assert shown(form) == wanted
    if len(wanted.arms) > 1:
        assert form.plan() == wanted
    # Showing it again from another plan lands on the same controls.
    form.set_plan(EXPRESSIBLE["draft model and n-gram, k=6, fixed"])
    form.set_plan(wanted)
    assert shown(form) == wanted


def test_the_controls_follow_the_plan(form):
    form.set_plan(EXPRESSIBLE["draft model and n-gram, k=6, fixed"])
    assert form.use_draft.isChecked() and form.draft.text() == "/models/draft"
    assert form.use_ngram.isChecked() and form.k.value() == 6 and not form.adaptive.isChecked()
    assert [n for n, b in form.suite_buttons.items() if b.isChecked()] == ["chat", "code", "prose"]
    assert (form.per_suite.value(), form.max_new.value(), form.repeats.value(),
            form.warmup.value()) == (3, 77, 3, 0)
    form.set_plan(EXPRESSIBLE["a sweep of both"])
    assert form.sweep.isChecked() and not form.k.isEnabled()
    assert form.k.value() == 6  # a sweep leaves k open: the form keeps the user's
    form.set_plan(EXPRESSIBLE["servers on one line"])
    assert form.servers.isVisible() and not form.model.isVisible()
    assert form.servers.text() == "http://127.0.0.1:8080#qwen, fast=http://127.0.0.1:8081"
    assert not form.servers.isReadOnly()
    form.set_plan(EXPRESSIBLE["launched llama-servers, one at a time"])
    assert form.servers.isReadOnly() and "llama-server" in form.servers.text()


def test_arms_changed_is_emitted_once_per_plan(qtbot, form):
    seen = []
    form.arms_changed.connect(lambda: seen.append(1))
    form.set_plan(EXPRESSIBLE["a sweep of both"])
    assert seen == [1]


NOT_EXPRESSIBLE = {
    "sampled": (replace(plan(), sampling=SamplingSpec(temperature=0.7, seed=1)), "sampling"),
    "load options": (replace(plan(), load=LoadSpec(".", device="cpu")), "load"),
    "chat template off": (replace(plan(), apply_chat_template=False), "apply_chat_template"),
    "a capped prompt count": (replace(plan(), max_prompts=1), "max_prompts"),
    "a suite file": (replace(plan(), suites=("mine.json",)), "mine.json"),
    "suites out of order": (plan(suites=("code", "chat")), "order"),
    "prompts not the first of each suite": (
        replace(plan(suites=("code",), per_suite=2), prompt_ids=("rename-variable",)), "prompts"),
    "every prompt": (replace(plan(), prompt_ids=()), "prompts"),
    "an engine it does not offer": (replace(plan(), engine="vllm-local"), "vllm-local"),
    "arms named otherwise": (replace(plan(), arms=(Arm("ref"), Arm("ngram", DrafterSpec(
        DrafterKind.NGRAM)))), "arms"),
    "two ks in one plan": (replace(plan(), arms=(
        Arm("A"), Arm("B", DrafterSpec(DrafterKind.MODEL, "/d", num_draft_tokens=2)),
        Arm("C", DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=5)))), "arms"),
    "a server arm in a local plan": (replace(plan(), arms=arms_from_urls(
        ["http://127.0.0.1:1", "http://127.0.0.1:2"])), "arms"),
    "a server plan's model": (replace(EXPRESSIBLE["servers on one line"], model="qwen"),
                              "its model"),
}


@pytest.mark.parametrize("name", list(NOT_EXPRESSIBLE))
def test_a_plan_the_form_cannot_express_is_refused_and_nothing_changes(form, show_plan, name):
    bad, what = NOT_EXPRESSIBLE[name]
    form.set_plan(EXPRESSIBLE["draft model and n-gram, k=6, fixed"])
    before = form.choices()
    with pytest.raises(SpecDeckError) as refused:
        show_plan(bad)  # a suite file is read in a worker first
    assert "cannot show this plan" in str(refused.value) and what in str(refused.value)
    assert "specdeck bench --plan" in refused.value.fix
    assert form.choices() == before


def test_server_arms_are_kept_in_plan_json_format(qtbot, form):
    form.set_plan(EXPRESSIBLE["launched llama-servers, one at a time"])
    form.save()
    saved = json.loads(QSettings().value(ARMS_KEY))
    assert saved == [arm_to_json(a) for a in LAUNCHED]
    assert all({"name", "drafter", "server"} <= set(item) for item in saved)
    again = BenchForm()
    qtbot.addWidget(again)
    again.restore()
    assert again.plan().arms == LAUNCHED and again.choices().one_at_a_time


def test_arms_saved_in_the_older_format_are_read_and_migrated(qtbot, configured_qapp):
    """Before, the page saved ServerArm JSON with the arm's name; the drafters were derived
    (the reference: none; a launched arm: from its flags; a running server: its own)."""
    older = [a.server.to_json() | {"name": a.name} for a in LAUNCHED]
    older.append(ServerArm(url="http://127.0.0.1:8082", api_key_env="C_KEY").to_json()
                 | {"name": "C"})
    settings = QSettings()
    settings.setValue(LEGACY_ARMS_KEY, json.dumps(older))
    settings.setValue("bench/engine", "server")
    form = BenchForm()
    qtbot.addWidget(form)
    form.restore()
    arms = form.plan().arms
    assert arms[:2] == LAUNCHED
    assert arms[2] == Arm("C", DrafterSpec(DrafterKind.SERVER, adaptive=False),
                          ServerArm(url="http://127.0.0.1:8082", api_key_env="C_KEY"))
    form.save()
    assert QSettings().value(LEGACY_ARMS_KEY) is None
    assert json.loads(QSettings().value(ARMS_KEY)) == [arm_to_json(a) for a in arms]


def test_a_saved_value_that_is_not_arms_is_ignored(qtbot, configured_qapp):
    QSettings().setValue(ARMS_KEY, "{not json")
    form = BenchForm()
    qtbot.addWidget(form)
    form.restore()
    assert form.choices().server_arms is None and not form.servers.isReadOnly()


def test_arm_colours_are_qts(configured_qapp):
    """The summary's HTML colours (Qt-free) are the panes' and plots' (QColor) colours."""
    from PySide6.QtGui import QColor
    from specdeck.gui.bench_render import ARM_COLOURS, arm_colour_name
    from specdeck.gui.bench_view import arm_colour

    assert [arm_colour(i).name() for i in range(len(ARM_COLOURS))] == list(ARM_COLOURS)
    for index in range(len(ARM_COLOURS), 80):
        qt = QColor.fromHsv(int(index * 137.5) % 360, 190, 200).name()
        assert arm_colour_name(index) == arm_colour(index).name() == qt, index


class _RecordingSession:
    """Stands in for the engine process: records the plans it is asked to run."""

    alive = True
    worker_pid = None

    def __init__(self):
        self.plans = []

    def start(self, plan):
        self.plans.append(plan)

    def drain(self):
        return []

    def stop(self):
        pass

    def shutdown(self):
        pass


def test_the_pages_requests_go_through_the_form(qtbot, configured_qapp):
    """The Start page's "demo" runs the demo A/B (no draft vs n-gram, the form's prompts and
    sizes); a server URL becomes a server arm. Both through the form's plans."""
    from specdeck.gui.context import AppContext
    from specdeck.gui.pages.bench import BenchPage

    session = _RecordingSession()
    page = BenchPage(AppContext(), session_factory=lambda: session)
    qtbot.addWidget(page)
    try:
        page.form.set_plan(EXPRESSIBLE["draft model and n-gram, k=6, fixed"])
        page.handle_request("demo")
        (started,) = session.plans
        assert started == plan(arms=default_arms(ngram=True, k=6, adaptive=False),
                               suites=("chat", "code", "prose"), per_suite=3, max_new_tokens=77,
                               repeats=3, warmup=0)
        assert page.form.plan() == started
        page.timer.stop()  # the stand-in never finishes the plan: as if it had
        page.handle_request("http://127.0.0.1:9/v1")
        shown = plan_from_choices(page.form.choices(), comparison=False)
        assert shown.engine == "server" and shown.arms[-1].server.url == "http://127.0.0.1:9/v1"
        assert page.form.server_info.text() == "Probing…"
    finally:
        page.shutdown()
