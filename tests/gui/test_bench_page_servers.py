"""The A/B page with server arms: the Servers engine swaps the target/drafter controls for a
server list, Probe says what each server is, and Start runs the plan in the engine process
against real HTTP servers (replaying a real llama-server capture) to a filled results table.
Nothing here needs torch."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_server import replay  # noqa: F401 - a fixture

from specdeck.gui.pages.bench import BenchPage

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"


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
    page.engine.setCurrentIndex(page.engine.findData("server"))
    assert page.servers.isVisible() and not page.model.isVisible()
    assert not page.use_ngram.isVisible() and page.target_label.text() == "Servers"
    page.servers.setText(f"http://127.0.0.1:{a.port}, B=http://127.0.0.1:{b.port}")
    assert [pane.title.full_text() for pane in page.panes][:2] == [
        f"A: no draft @ http://127.0.0.1:{a.port}",
        f"B: server-side drafting @ http://127.0.0.1:{b.port}"]
    page.probe_button.click()
    qtbot.waitUntil(lambda: "Probing" not in page.server_info.text(), timeout=30_000)
    assert page.server_info.text() == "A: openai, drafting unknown · B: openai, drafting unknown"
    for name, button in page.suite_buttons.items():
        button.setChecked(name == "code")
    page.per_suite.setValue(1)
    page.repeats.setValue(1)
    page.warmup.setValue(0)
    plan = page.plan_from_controls()
    assert plan.engine == "server" and [a.server.url for a in plan.arms] == [
        f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}"]
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=120_000)
    run = page.last_run
    assert len(run.counted()) == 2
    assert page.table.rowCount() == 2
    row_b = [page.table.item(1, c).text() for c in range(page.table.columnCount())]
    assert row_b[0] == "B" and row_b[9] == "identical"
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=60_000)
    assert not page.apply_button.isEnabled()  # a running server's settings are not ours
    assert page.panes[0].plain_text == run.counted("A")[0].result.text
    assert "prompt tokenized by the server" in page.panes[0].prompt_label.full_text()
    if page.plots is not None:
        title = page.plots.accept_plot.getPlotItem().titleLabel.text
        assert "per run, in the table" in title


def test_servers_engine_needs_two_servers(qtbot, page):
    page.engine.setCurrentIndex(page.engine.findData("server"))
    page.servers.setText("http://127.0.0.1:9")
    page.start()
    assert page.banner.isVisible() and "two servers" in page.banner.label.text()
