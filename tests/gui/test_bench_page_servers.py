"""The A/B page with server arms: the Servers engine swaps the target/drafter controls for a
server list, Probe says what each server is, and Start runs the plan in the engine process
against real HTTP servers (replaying a real llama-server capture) to a filled results table.
Nothing here needs torch."""

from __future__ import annotations

from pathlib import Path

import pytest
from processes import running
from replay_server import replay  # noqa: F401 - a fixture

from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.suites import first_prompts
from specdeck.core.servers.arms import arms_from_urls
from specdeck.gui.pages.bench import BenchPage

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"


def server_plan(arms, suites=("code",), per_suite=1, **sizes) -> BenchPlan:
    """A server plan of the kind the page runs: the first prompts of each suite."""
    sizes = {"repeats": 1, "warmup": 0, **sizes}
    return BenchPlan(engine="server", model="server", arms=tuple(arms), suites=suites,
                     prompt_ids=tuple(p.id for p in first_prompts(suites, per_suite)), **sizes)


@pytest.fixture
def page(qtbot, configured_qapp):
    from specdeck.gui.context import AppContext

    page = BenchPage(AppContext())
    qtbot.addWidget(page)
    page.resize(1280, 760)
    page.show()
    yield page
    page.shutdown()


def test_servers_engine_runs_a_server_plan_to_the_results(qtbot, page, replay):
    body = (DATA / "llama-server-plain-stream.sse").read_bytes()
    models = {"/v1/models": (200, "application/json",
                             b'{"object": "list", "data": [{"id": "SmolLM2-135M"}]}')}
    a, _ = replay(body=body, routes=models)  # an OpenAI-compatible server
    b, _ = replay(body=body, routes=models)
    form = page.form
    form.engine.setCurrentIndex(form.engine.findData("server"))  # as a user picks it
    assert form.servers.isVisible() and not form.model.isVisible()
    assert not form.use_ngram.isVisible() and form.target_label.text() == "Servers"
    form.servers.setText(f"http://127.0.0.1:{a.port}, B=http://127.0.0.1:{b.port}")
    assert [pane.title.full_text() for pane in page.panes][:2] == [
        f"A: no draft @ http://127.0.0.1:{a.port}",
        f"B: server-side drafting @ http://127.0.0.1:{b.port}"]
    form.probe_button.click()
    qtbot.waitUntil(lambda: "Probing" not in form.server_info.text(), timeout=30_000)
    assert form.server_info.text() == ("A: openai, drafting unknown until a run · B: openai, "
                                       "drafting unknown until a run")
    plan = server_plan(form.plan().arms)
    form.set_plan(plan)
    assert form.plan() == plan and [a.server.url for a in plan.arms] == [
        f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}"]
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=120_000)
    run = page.last_run
    assert len(run.counted()) == 2
    rows = page.table.rows()
    assert len(rows) == 2
    assert rows[1]["Arm"] == "B" and rows[1]["Output vs A"] == "identical"
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
    assert not page.apply_button.isEnabled()  # a running server's settings are not ours
    assert page.panes[0].plain_text == run.counted("A")[0].result.text
    assert "prompt tokenized by the server" in page.panes[0].prompt_label.full_text()
    if page.plots is not None:  # an OpenAI-compatible server reports no acceptance
        title = page.plots.title("accept")
        assert "not reported by these servers" in title
        assert len(page.plots.accept_done["B"].x) == 0


def test_server_acceptance_is_plotted_per_finished_run(qtbot, page, replay):
    """A llama-server that drafts reports its counts per request: one point per run."""
    plain = (DATA / "llama-server-plain-stream.sse").read_bytes()
    ngram = (DATA / "llama-server-ngram-stream.sse").read_bytes()
    models = {"/v1/models": (200, "application/json",
                             b'{"object": "list", "data": [{"id": "SmolLM2-135M"}]}')}
    a, _ = replay(body=plain, routes=models)
    b, _ = replay(body=ngram, routes=models)
    page.form.set_plan(server_plan(
        arms_from_urls([f"http://127.0.0.1:{a.port}", f"B=http://127.0.0.1:{b.port}"]),
        per_suite=2))
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=120_000)
    assert page.plots is not None
    title = page.plots.title("accept")
    assert "per finished run (server counts)" in title
    runs_b = page.last_run.counted("B")
    assert len(page.plots.accept_done["B"].y) == len(runs_b) == 2
    assert page.plots.accept_done["B"].y[0] == pytest.approx(
        100 * runs_b[0].result.stats.acceptance_rate)


def test_servers_engine_needs_two_servers(qtbot, page):
    """The page's server plan passes the same comparison check as the CLI's (core's
    BenchPlan.require_comparison), worded for the page; nothing starts."""
    form = page.form
    form.engine.setCurrentIndex(form.engine.findData("server"))
    form.servers.setText("")
    page.start()
    assert page.banner.isVisible() and "No server is given" in page.banner.label.text()
    form.set_plan(server_plan(arms_from_urls(["http://127.0.0.1:9"])))  # shown, not run
    page.start()
    text = page.banner.label.text()
    assert "Nothing to compare" in text and "drafting server(s)" in text
    assert page.session is None


@pytest.mark.slow
def test_arms_dialog_runs_launched_llama_servers_one_at_a_time(qtbot, page, tmp_path):
    """Arms… edits rows of launched llama-servers (the real pinned build, the demo GGUF),
    Check reads the binary's --help, Start runs them, and the worker stops every server it
    launched when the plan ends; the arms survive a restart of the page."""
    from specdeck.core.engines.demo import find_gguf
    from specdeck.gui.context import AppContext
    from specdeck.gui.widgets.server_arms_dialog import FOUND, LAUNCH, SOURCE, WHERE
    from tools.llama_server_build import build

    binary, gguf = build(), find_gguf()
    form = page.form
    form.engine.setCurrentIndex(form.engine.findData("server"))
    assert form.arms_button.isVisible()
    form.arms_button.click()
    dialog = form.arms_dialog
    assert dialog.table.rowCount() == 2 and not dialog.launch_box.isEnabled()
    dialog.table.cellWidget(0, SOURCE).setCurrentText(LAUNCH)
    dialog.table.cellWidget(1, SOURCE).setCurrentText(LAUNCH)
    assert dialog.launch_box.isEnabled()
    dialog.table.item(1, WHERE).setText("-md old.gguf --draft-max 8")
    dialog.binary.setText(str(binary))
    dialog.gguf.setText(str(gguf))
    dialog.common.setText("-t 1 -c 2048")
    dialog.one_at_a_time.setChecked(True)
    dialog.check_button.click()
    qtbot.waitUntil(lambda: dialog.table.item(1, FOUND).text() != "", timeout=30_000)
    assert "flags accepted" in dialog.table.item(0, FOUND).text()
    assert "--draft-max was removed" in dialog.table.item(1, FOUND).text()
    dialog.table.item(1, WHERE).setText("--spec-type ngram-simple --spec-ngram-simple-size-n 2")
    dialog.ok_button.click()
    assert form.choices().server_arms is not None and form.servers.isReadOnly()
    assert "launched" in form.servers.toolTip() or "Arms…" in form.servers.toolTip()
    plan = server_plan(form.plan().arms, suites=("grounded",), max_new_tokens=32,
                       one_server_at_a_time=True)
    form.set_plan(plan)
    assert form.plan() == plan and plan.one_server_at_a_time
    assert [a.server.launch.args for a in plan.arms] == [
        ("-t", "1", "-c", "2048"),
        ("-t", "1", "-c", "2048", "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2")]
    assert plan.arms[1].drafter.kind.value == "ngram"
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=180_000)
    assert len(page.last_run.counted()) == 2 and len(page.table.rows()) == 2

    def ours():
        return running(lambda cmdline: str(gguf) in cmdline
                       and "--spec-ngram-simple-size-n" in cmdline)

    qtbot.waitUntil(lambda: not ours(), timeout=30_000)  # stopped when the plan ended
    page.form.save()
    again = BenchPage(AppContext())
    qtbot.addWidget(again)
    try:
        assert again.form.plan().arms == plan.arms  # kept as plan.json arms
        assert again.form.choices().one_at_a_time and again.form.servers.isReadOnly()
    finally:
        again.shutdown()


def test_arms_dialog_gives_an_lm_studio_arm_its_draft(qtbot, page):
    from specdeck.gui.widgets.server_arms_dialog import DRAFT, MODEL, WHERE

    form = page.form
    form.set_plan(server_plan(arms_from_urls(["http://127.0.0.1:1234#qwen2.5-7b-instruct",
                                              "B=http://127.0.0.1:1234#qwen2.5-7b-instruct"])))
    form.arms_button.click()
    dialog = form.arms_dialog
    assert [dialog.table.item(r, MODEL).text() for r in range(2)] == ["qwen2.5-7b-instruct"] * 2
    assert dialog.table.item(1, WHERE).text() == "http://127.0.0.1:1234"
    dialog.table.item(0, DRAFT).setText("qwen2.5-0.5b-instruct")
    dialog.ok_button.click()  # the reference cannot draft: refused, the dialog stays open
    assert "reference" in dialog.message.text() and dialog.isVisible()
    dialog.table.item(0, DRAFT).setText("")
    dialog.table.item(1, DRAFT).setText("qwen2.5-0.5b-instruct")
    dialog.ok_button.click()
    arms = form.plan().arms
    assert [a.server.draft_model for a in arms] == [None, "qwen2.5-0.5b-instruct"]
    assert form.servers.isReadOnly() and "+ draft qwen2.5-0.5b-instruct" in form.servers.text()


def test_a_draft_model_without_spec_type_is_said_not_to_draft_before_and_after_the_run(
        qtbot, page, tmp_path):
    """Issue 28 on the A/B page, with the real pinned llama-server: Check says before the run
    that an arm launched with -md and no --spec-type will not draft (its draft, the demo GGUF,
    is a plain model: llama-server infers no type from it), and the results say it did not
    draft, measured as it ran."""
    from specdeck.core.engines.demo import find_gguf
    from specdeck.gui.widgets.server_arms_dialog import FOUND, LAUNCH, SOURCE, WHERE
    from tools.llama_server_build import build

    binary, gguf = build(), find_gguf()
    form = page.form
    form.engine.setCurrentIndex(form.engine.findData("server"))
    form.arms_button.click()
    dialog = form.arms_dialog
    for row in (0, 1):
        dialog.table.cellWidget(row, SOURCE).setCurrentText(LAUNCH)
    dialog.table.item(1, WHERE).setText(f"-md {gguf}")
    dialog.binary.setText(str(binary))
    dialog.gguf.setText(str(gguf))
    dialog.common.setText("-t 1 -c 1024")
    dialog.check_button.click()
    qtbot.waitUntil(lambda: dialog.table.item(1, FOUND).text() != "", timeout=30_000)
    assert dialog.table.item(0, FOUND).text().endswith(
        "will not draft: no --spec-type (llama-server's default is none)")
    said = dialog.table.item(1, FOUND).text()
    assert "flags accepted; will not draft: a draft model (-md) without --spec-type" in said
    assert f"{gguf.name} is a plain llama" in said
    dialog.grab().save(str(tmp_path / "arms-check.png"))
    dialog.ok_button.click()
    plan = server_plan(form.plan().arms, suites=("code",), max_new_tokens=16)
    assert plan.arms[1].drafter.kind.value == "model"  # judged as the drafting arm it asks for
    form.set_plan(plan)
    page.start()
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=180_000)  # the final one
    text = page.summary.text()
    assert "did not draft</b>: a draft model (-md) without --spec-type" in text
    assert "(said before the run); it drafted nothing in 1 run" in text
    page.grab().save(str(tmp_path / "ab-not-drafting.png"))
