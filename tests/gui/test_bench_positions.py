"""Acceptance by draft position on the A/B page (issue 28), driven through the real page:
an in-process plan on tiny real torch models (the engine counts every draft), and a server
plan with real llama-servers (the pinned build; n-gram drafting read from its /metrics
counters) beside a server that reports no positions. The chart's bars, its title, the
summary's mean acceptance length, the report's table and the memory plot are checked
against the run records the page received."""

from __future__ import annotations

from pathlib import Path

import pytest
from replay_server import replay  # noqa: F401 - a fixture
from specdeck.core.bench.plan import BenchPlan, default_arms
from specdeck.core.bench.suites import first_prompts
from test_bench_page_servers import page  # noqa: F401 - the page at 1280x760, a fixture

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"
MiB = 1024**2


def pooled(run, arm: str) -> tuple[list[int], list[int]]:
    """The arm's records' per-position counts, summed run by run, position by position."""
    stats = [r.result.stats for r in run.counted(arm)]
    width = max(max(len(s.per_position_drafted), len(s.per_position_accepted)) for s in stats)
    drafted = [sum(s.per_position_drafted[i] for s in stats if i < len(s.per_position_drafted))
               for i in range(width)]
    accepted = [sum(s.per_position_accepted[i] for s in stats
                    if i < len(s.per_position_accepted)) for i in range(width)]
    return drafted, accepted


def bars(page, arm: str) -> list[float]:
    return [float(h) for h in page.plots.position_bars[arm].opts["height"]]


def run_to_the_end(qtbot, page, plan: BenchPlan):
    page.form.set_plan(plan)
    page.start()
    qtbot.waitUntil(lambda: page.last_run is not None, timeout=300_000)
    qtbot.waitUntil(lambda: page.last_summary is not None, timeout=120_000)
    return page.last_run, page.last_summary


def report_section(folder: Path, label: str) -> str:
    """The Markdown report's "Acceptance by draft position" block of one arm."""
    text = (folder / "summary.md").read_text()
    section = text.split("## Acceptance by draft position", 1)[1]
    return section.split(f"### {label}\n", 1)[1].split("\n#", 1)[0]


def table_rows(block: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in block.splitlines()
            if line.startswith("| ") and line[2].isdigit()]


def test_engine_arms_chart_summary_and_report_agree_with_the_records(qtbot, page, tmp_path):
    pytest.importorskip("torch")
    from tiny_models import ab_models

    models = ab_models(tmp_path / "models")
    suites = ("grounded",)
    plan = BenchPlan(engine="torch", model=str(models["cycle"]),
                     arms=default_arms(models["draft"], ngram=True, k=4), suites=suites,
                     prompt_ids=tuple(p.id for p in first_prompts(suites, 2)),
                     max_new_tokens=24, repeats=1, warmup=0)
    run, summary = run_to_the_end(qtbot, page, plan)
    plots = page.plots
    assert set(plots.position_bars) == {"B", "C"}  # the reference drafts nothing
    for arm in ("B", "C"):
        drafted, accepted = pooled(run, arm)
        assert len(drafted) == 4  # k = 4: the model drafts every position
        drafts = sum(r.result.stats.draft_steps for r in run.counted(arm))
        # The chart shows the share of all drafts (it never rises with the position).
        assert bars(page, arm) == pytest.approx([100 * a / drafts for a in accepted])
        length = 1 + sum(r.result.stats.accepted for r in run.counted(arm)) / drafts
        assert f"mean acceptance length {length:.2f} (engine count)" in page.summary.text()
    # The cycling model repeats itself: n-gram keeps far more than a random draft model.
    assert bars(page, "C")[0] > bars(page, "B")[0]
    assert plots.title("positions").replace("\xa0", " ") == \
        "Acceptance by draft position (engine count)"
    assert "share of all drafts" in plots.titles["positions"].toolTip()
    # The engine runs on the CPU here: its process's RSS, in the unit that fits it.
    largest = max(max(s.y) for s in plots.memory.values())
    unit = "MiB" if largest < 1024 * MiB else "GiB"
    assert plots.memory_plot.getAxis("left").labelText == unit
    assert plots.title("memory") == "Engine process memory (RSS)"

    page.export_to(tmp_path / "report")
    qtbot.waitUntil(lambda: (tmp_path / "report" / "summary.md").exists(), timeout=30_000)
    for arm in ("B", "C"):
        label = next(a.label for a in plan.arms if a.name == arm)
        drafted, accepted = pooled(run, arm)
        rows = table_rows(report_section(tmp_path / "report", label))
        drafts = sum(r.result.stats.draft_steps for r in run.counted(arm))
        assert [(int(r[3]), int(r[1])) for r in rows] == list(zip(drafted, accepted))
        assert [r[2] for r in rows] == [f"{100 * a / drafts:.1f}%" for a in accepted]
        assert [r[4] for r in rows] == [f"{100 * a / d:.1f}%" for a, d in zip(accepted, drafted)]


def test_memory_axis_picks_the_unit_that_fits(qtbot, configured_qapp):
    """A 36 MB client process reads in MiB (it read "GiB (x0.001)"); a 20 GiB GPU in GiB."""
    from specdeck.gui.bench_view import BenchPlots

    plots = BenchPlots()
    qtbot.addWidget(plots)
    plots.reset(["A", "B"])
    plots.add_memory("engine process RSS", 0.0, 36_000_000)
    plots.add_memory("engine process RSS", 1.0, 37_000_000)
    plots.redraw()
    axis = plots.memory_plot.getAxis("left")
    assert axis.labelText == "MiB" and not axis.autoSIPrefix
    _, y = plots._curves[("memory", "engine process RSS")].getData()
    assert list(y) == pytest.approx([36_000_000 / MiB, 37_000_000 / MiB])
    plots.add_memory("engine process RSS", 2.0, 20 * 1024**3)
    plots.redraw()
    _, y = plots._curves[("memory", "engine process RSS")].getData()
    assert axis.labelText == "GiB" and list(y) == pytest.approx(
        [36_000_000 / 1024**3, 37_000_000 / 1024**3, 20.0])  # earlier points rescaled too


@pytest.mark.slow
def test_server_arms_chart_the_servers_counters_and_say_what_is_not_reported(
        qtbot, page, replay, tmp_path):
    """A and B are llama-servers SpecDeck launches (B with --spec-type ngram-simple, so its
    /metrics has per-position counters); C replays a real llama-server stream from a server
    without /metrics: it reports acceptance totals, but no positions."""
    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.servers.arms import launched_arm, url_arm

    from tools.llama_server_build import build

    binary, gguf = str(build()), str(find_gguf())
    common = ("-t", "1", "-c", "2048")
    ngram = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
             "--spec-ngram-simple-size-m", "4")
    models = {"/v1/models": (200, "application/json",
                             b'{"object": "list", "data": [{"id": "SmolLM2-135M"}]}')}
    c, _ = replay(body=(DATA / "llama-server-ngram-stream.sse").read_bytes(), routes=models)
    arms = (launched_arm("A", binary, gguf, (), common),
            launched_arm("B", binary, gguf, ngram, common),
            url_arm("C", f"http://127.0.0.1:{c.port}"))
    plan = BenchPlan(engine="server", model="server", arms=arms, suites=("grounded",),
                     prompt_ids=tuple(p.id for p in first_prompts(("grounded",), 2)),
                     max_new_tokens=48, repeats=1, warmup=0)
    run, summary = run_to_the_end(qtbot, page, plan)
    _, accepted = pooled(run, "B")
    assert len(accepted) == 4 and accepted[0] > 0  # the server's k positions, from its counters
    drafts = sum(r.result.stats.draft_steps for r in run.counted("B"))
    assert bars(page, "B") == pytest.approx([100 * a / drafts for a in accepted])
    assert "C" not in page.plots.position_bars  # nothing is drawn for what was not reported
    title = page.plots.title("positions")
    assert "B server counters" in title and "C not reported by the server" in title
    text = page.summary.text()
    length = 1 + sum(r.result.stats.accepted for r in run.counted("B")) / drafts
    assert f"mean acceptance length {length:.2f} (server counters)" in text
    assert "mean acceptance length not reported by the server" in text
    # No GPU that NVML reads here: the servers' memory is not visible, and the client's
    # memory is not plotted in its place.
    qtbot.waitUntil(lambda: "not visible" in page.plots.title("memory"), timeout=10_000)
    assert not page.plots.memory

    page.export_to(tmp_path / "report")
    qtbot.waitUntil(lambda: (tmp_path / "report" / "summary.md").exists(), timeout=30_000)
    rows = table_rows(report_section(tmp_path / "report", arms[1].label))
    assert [int(r[1]) for r in rows] == accepted
    assert [r[2] for r in rows] == [f"{100 * a / drafts:.1f}%" for a in accepted]
    block = report_section(tmp_path / "report", arms[2].label)
    assert "not reported by the server" in block and not table_rows(block)
