"""Starting TabbyAPI for an arm (core.servers.tabby_launch) against a stand-in of TabbyAPI's
start-up (tests/tabby_app.py, which follows its source): the arm's settings take effect over
the user's config.yml, which is never written, the no-draft arm really does not draft on
either branch, a busy port, a legacy file TabbyAPI would rewrite, and a start-up that fails."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.servers.tabby_launch import ManagedTabby, TabbyLaunch, arm_config, no_draft
from specdeck.core.servers.transport import Base, ServerError, request_json
from tabby_app import make_install as tabby_install


@pytest.fixture
def started():
    servers = []

    def start(launch: TabbyLaunch, log: Path) -> ManagedTabby:
        server = ManagedTabby(launch, log)
        servers.append(server)
        server.start(timeout=60)
        return server

    yield start
    for server in servers:
        server.stop()


def _loaded_line(server: ManagedTabby) -> str:
    return next(ln for ln in server.log_path.read_text().splitlines() if ln.startswith("Loaded"))


def _card(url: str) -> dict:
    return request_json(Base.parse(url), "GET", "/v1/model", api_key="tabby-api-key")


@pytest.mark.parametrize("branch", ["main", "exl2-checkpoint"])
def test_the_no_draft_arm_does_not_draft_although_config_yml_names_a_draft(tmp_path, started,
                                                                          branch):
    folder = tabby_install(tmp_path / "tabbyAPI", branch)
    before = (folder / "config.yml").read_bytes()
    server = started(TabbyLaunch(str(folder), sys.executable, no_draft(branch == "main")),
                     tmp_path / "a.log")
    assert _loaded_line(server) == "Loaded Qwen2.5-7B-exl3 with none"
    assert _card(server.url)["id"] == "Qwen2.5-7B-exl3"
    assert (folder / "config.yml").read_bytes() == before


def test_an_arm_drafts_as_its_settings_say_and_leaves_no_copy_behind(tmp_path, started):
    folder = tabby_install(tmp_path / "tabbyAPI", "main", draft=None)
    before = (folder / "config.yml").read_bytes()
    server = started(TabbyLaunch(str(folder), sys.executable,
                                 (("draft_mode", "ngram"), ("draft_num_tokens", 4))),
                     tmp_path / "b.log")
    assert _loaded_line(server) == "Loaded Qwen2.5-7B-exl3 with ngram:2:4"
    copy = server._dir
    assert copy is not None and (copy / "config.yml").is_file()
    server.stop()
    assert not copy.exists()
    assert (folder / "config.yml").read_bytes() == before


def test_a_draft_model_arm_loads_the_draft(tmp_path, started):
    folder = tabby_install(tmp_path / "tabbyAPI", "main", draft=None)
    server = started(TabbyLaunch(str(folder), sys.executable,
                                 (("draft_mode", "model"),
                                  ("draft_model_name", "Qwen2.5-0.5B-exl3"),
                                  ("draft_num_tokens", 3))), tmp_path / "c.log")
    assert _loaded_line(server) == "Loaded Qwen2.5-7B-exl3 with model:Qwen2.5-0.5B-exl3:3"


def _busy_port_with_a_free_next() -> socket.socket:
    """A listening socket on a port P whose P + 1 is free, both below the kernel's ephemeral
    range: a port the OS picked (bind to 0) had its neighbour taken, now and then, by another
    test worker's server or client before the stand-in bound it."""
    import random

    for _ in range(200):
        port = random.randrange(20000, 30000)
        busy, probe = socket.socket(), socket.socket()
        try:
            busy.bind(("127.0.0.1", port))
            probe.bind(("127.0.0.1", port + 1))
        except OSError:
            busy.close()
            continue
        finally:
            probe.close()
        busy.listen()
        return busy
    raise RuntimeError("no free pair of ports in 20000-30000")


def test_a_busy_port_is_followed_to_the_next_one_as_tabbyapi_does(tmp_path, started):
    folder = tabby_install(tmp_path / "tabbyAPI")
    with _busy_port_with_a_free_next() as busy:
        port = busy.getsockname()[1]
        server = started(TabbyLaunch(str(folder), sys.executable, no_draft(True), port=port),
                         tmp_path / "d.log")
        assert server.url == f"http://127.0.0.1:{port + 1}"
        assert "Switching to" in server.log_path.read_text()


def test_a_legacy_config_that_tabbyapi_would_rewrite_is_refused_untouched(tmp_path):
    folder = tabby_install(tmp_path / "tabbyAPI", "exl2-checkpoint", legacy=True)
    before = (folder / "config.yml").read_bytes()
    server = ManagedTabby(TabbyLaunch(str(folder), sys.executable, no_draft(False)),
                          tmp_path / "e.log")
    with pytest.raises(InvalidInputError, match="legacy layout") as caught:
        server.start(timeout=30)
    assert "specdeck config migrate" in caught.value.fix
    assert (folder / "config.yml").read_bytes() == before
    assert not (folder / "config.yml.bak").exists()


def test_a_start_up_that_fails_says_what_tabbyapi_said(tmp_path):
    folder = tabby_install(tmp_path / "tabbyAPI")
    server = ManagedTabby(TabbyLaunch(str(folder), sys.executable, (("draft_mode", "eagle"),)),
                          tmp_path / "f.log")
    with pytest.raises(ServerError, match="Unknown exllamav3 draft mode: eagle"):
        server.start(timeout=60)
    assert server.process is None and server._dir is None


def test_what_is_not_tabbyapi_is_refused_before_anything_starts(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="no main.py"):
        ManagedTabby(TabbyLaunch(str(tmp_path / "empty"), sys.executable), tmp_path / "g.log"
                     ).start()


def test_the_copy_keeps_the_users_values_and_sets_only_the_arms(tmp_path):
    from ruamel.yaml import YAML

    folder = tabby_install(tmp_path / "tabbyAPI")
    user = YAML(typ="safe").load((folder / "config.yml").read_text())
    copy = YAML(typ="safe").load(arm_config(TabbyLaunch(str(folder), sys.executable,
                                                        (("draft_num_tokens", 6),)), 5123))
    assert copy["network"]["port"] == 5123 and copy["network"]["host"] == "127.0.0.1"
    assert copy["draft_model"]["draft_num_tokens"] == 6
    for section in user:
        for key, value in (user[section] or {}).items():
            if (section, key) not in {("network", "port"), ("network", "host"),
                                      ("draft_model", "draft_num_tokens")}:
                assert copy[section][key] == value, (section, key)


def test_the_draft_model_an_arm_loads_follows_config_ymls_draft_mode_under_its_settings(
        tmp_path):
    """An arm that sets only k over a config.yml drafting by n-gram loads no draft model,
    although config.yml names one: its memory (which decides which arms run side by side),
    its draft and its start-up check all read one rule (core.config.schema
    ``loads_draft_model``); the memory once ignored config.yml's draft_mode."""
    from specdeck.core.servers.tabby_launch import check_folder, draft_model_of, memory_needed

    folder = tabby_install(tmp_path / "tabbyAPI", "main")
    config = folder / "config.yml"
    config.write_text(config.read_text().replace("  draft_mode: model\n",
                                                 "  draft_mode: ngram\n", 1))
    for name, size in (("Qwen2.5-7B-exl3", 7000), ("Qwen2.5-0.5B-exl3", 500)):
        (folder / "models" / name / "model.safetensors").write_bytes(b"\0" * size)
    k_only = TabbyLaunch(str(folder), sys.executable, (("draft_num_tokens", 4),))
    assert draft_model_of(k_only) is None
    assert memory_needed(k_only) == 7000
    model = TabbyLaunch(str(folder), sys.executable, (("draft_mode", "model"),))
    assert draft_model_of(model) == "Qwen2.5-0.5B-exl3"
    assert memory_needed(model) == 7500
    (folder / "models" / "Qwen2.5-0.5B-exl3" / "model.safetensors").unlink()
    (folder / "models" / "Qwen2.5-0.5B-exl3" / "config.json").unlink()
    (folder / "models" / "Qwen2.5-0.5B-exl3").rmdir()
    check_folder(k_only)  # n-gram needs no draft folder
    with pytest.raises(NotFoundError, match="draft model folder"):
        check_folder(model)


def test_an_ab_of_draft_modes_on_tabbyapis_it_starts(tmp_path, monkeypatch):
    """TabbyAPI main's draft modes side by side (issue 29): SpecDeck starts one TabbyAPI per
    arm from the user's folder, each with its own draft settings; the stand-in's speeds are
    the test's choice (n-gram twice as fast), what is checked is that each arm ran with its
    settings, the figures come out of the runs, and the user's file is untouched."""
    import json

    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.summary import summarize
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.kinds import ServerKind

    folder = tabby_install(tmp_path / "tabbyAPI", "main")
    (folder / "api_tokens.yml").write_text("api_key: tabby-api-key\nadmin_key: tabby-admin-key\n")
    before = (folder / "config.yml").read_bytes()
    monkeypatch.setenv("SPECDECK_STANDIN_STEPS", json.dumps({"none": 0.012,
                                                             "ngram:2:4": 0.004}))
    monkeypatch.setenv("SPECDECK_STANDIN_ACCEPT", json.dumps({"ngram:2:4": 0.75}))

    def arm(name, draft, drafter):
        return Arm(name, drafter, ServerArm(kind=ServerKind.TABBYAPI, tabby_launch=TabbyLaunch(
            str(folder), sys.executable, draft)))

    plan = BenchPlan(engine="server", model="tabby", suites=("code",), max_prompts=2, repeats=2,
                     warmup=0, max_new_tokens=24, stop_on_eos=False,
                     arms=(arm("A", no_draft(True), NO_DRAFT),
                           arm("B", (("draft_mode", "ngram"), ("draft_num_tokens", 4)),
                               DrafterSpec(DrafterKind.SERVER, num_draft_tokens=4,
                                           adaptive=False))))
    engine = ServerEngine(log_dir=tmp_path / "logs")
    try:
        # What the plan says before any TabbyAPI is started names TabbyAPI, not llama-server.
        notes = engine.prepare_arms(plan.arms).notes
        assert all("TabbyAPI" in n for n in notes if n.startswith(("A: ", "B: ")) and " at " in n)
        assert not any("llama-server" in n for n in notes), notes
        run = run_plan(plan, engine)
        assert len(engine.running()) == 2  # both TabbyAPIs up while the plan runs
    finally:
        engine.unload()
    assert engine.running() == {}
    summary = summarize(run)
    comparison = summary.comparison("B")
    assert comparison.speedup is not None and comparison.speedup.median > 1.3
    assert comparison.lossless.diverged == 0
    # Issue 44: TabbyAPI returns no draft counts, but logs them per request; SpecDeck started
    # it, so it reads them there (the line matched by the request's id), and says so.
    from specdeck.core.servers.tabby_launch import LOG_SOURCE

    for record in run.counted("B"):
        server = record.result.server
        assert server.draft_source == LOG_SOURCE and not server.acceptance_problem
        assert (record.result.stats.drafted, record.result.stats.accepted) == (24, 18)
    assert all(r.result.server.draft_source == "" for r in run.counted("A"))  # no Draft part
    b = summary.arm("B")
    assert b.acceptance_source == LOG_SOURCE and b.acceptance_rate == 0.75
    assert not comparison.drafting_unknown and not comparison.not_drafting
    logs = sorted((tmp_path / "logs").glob("*.log"))
    assert {_line for p in logs for _line in p.read_text().splitlines()
            if _line.startswith("Loaded")} == {"Loaded Qwen2.5-7B-exl3 with none",
                                                 "Loaded Qwen2.5-7B-exl3 with ngram:2:4"}
    assert (folder / "config.yml").read_bytes() == before


def test_tabbyapis_log_lines_are_read_by_request_id_and_checked():
    """common/gen_logging.py's metrics line (main e632af41), as TabbyAPI's console prints it."""
    from specdeck.core.servers.tabby_launch import LoggedDraft, logged_draft

    line = ("2026-11-28 10:00:00.123 INFO:     Metrics (ID: {id}): 24 tokens generated in "
            "0.5 seconds (Queue: 0.0 s, Process: 0 cached tokens and 30 new tokens at 600.0 "
            "T/s, Generate: 48.0 T/s, Context: 30 tokens{draft}) \n")
    log = (line.format(id="aa11", draft=", Draft: 10 / 16 tokens accepted (62.50%)")
           + line.format(id="bb22", draft=""))
    assert logged_draft(log, "aa11") == LoggedDraft(10, 16)
    assert logged_draft(log, "bb22") == LoggedDraft(None, None)  # no drafter: no Draft part
    assert logged_draft(log, "cc33") is None


@pytest.mark.parametrize("branch, share", [("main", 1.5), ("exl2-checkpoint", 0.5)])
def test_what_a_launched_tabbyapis_log_cannot_give_is_said(tmp_path, monkeypatch, branch,
                                                           share):
    """A log whose counts fail their checks (more accepted than drafted) is not used; the
    exl2-checkpoint branch logs no Draft part at all: its draft model still drafts at every
    step (ExLlamaV2 drafts with a loaded draft), so the arm is a drafting result, without an
    acceptance figure and with why."""
    import json

    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.summary import summarize
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.kinds import ServerKind

    folder = tabby_install(tmp_path / "tabbyAPI", branch)
    (folder / "api_tokens.yml").write_text("api_key: tabby-api-key\nadmin_key: tabby-admin-key\n")
    monkeypatch.setenv("SPECDECK_STANDIN_ACCEPT", json.dumps({"default": share}))

    def arm(name, draft, drafter):
        return Arm(name, drafter, ServerArm(kind=ServerKind.TABBYAPI, tabby_launch=TabbyLaunch(
            str(folder), sys.executable, draft)))

    plan = BenchPlan(engine="server", model="tabby", suites=("code",), max_prompts=1, repeats=1,
                     warmup=0, max_new_tokens=8, stop_on_eos=False,
                     arms=(arm("A", no_draft(branch == "main"), NO_DRAFT),
                           arm("B", (("draft_num_tokens", 4),) if branch == "main" else
                               (("draft_model_name", "Qwen2.5-0.5B-exl3"),),
                               DrafterSpec(DrafterKind.SERVER, num_draft_tokens=4,
                                           adaptive=False))))
    engine = ServerEngine(log_dir=tmp_path / "logs")
    try:
        summary = summarize(run_plan(plan, engine))
    finally:
        engine.unload()
    b, comparison = summary.arm("B"), summary.comparison("B")
    assert b.acceptance_rate is None
    if branch == "main":
        assert b.acceptance_source.startswith("not usable: TabbyAPI's log")
        assert "more than drafted" in b.acceptance_source
    else:
        assert b.acceptance_source.startswith("not reported by this server (TabbyAPI's log")
        assert not comparison.drafting_unknown  # a loaded draft model drafts at every step


def _bench(folder: Path, *arms: str, extra=(), env=None):
    import os
    import subprocess

    cmd = [sys.executable, "-m", "specdeck", "bench", "--tabby-folder", str(folder),
           "--tabby-python", sys.executable, *(a for arm in arms for a in ("--tabby-arm", arm)),
           "--suite", "code", "--max-prompts", "2", "--repeats", "2", "--warmup", "0",
           "--max-new", "24", "--no-history", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def test_bench_compares_draft_modes_and_applies_the_winner_into_config_yml(tmp_path,
                                                                          specdeck_home):
    """`specdeck bench --tabby-folder` end to end: the n-gram arm (made faster by the test)
    wins, and --apply writes its two settings, and nothing else, into config.yml."""
    import difflib
    import json

    folder = tabby_install(tmp_path / "tabbyAPI", "main", draft=None)
    (folder / "api_tokens.yml").write_text("api_key: tabby-api-key\nadmin_key: tabby-admin-key\n")
    before = (folder / "config.yml").read_text()
    done = _bench(folder, "B=draft_mode=ngram draft_num_tokens=4",
                  "C=draft_model_name=Qwen2.5-0.5B-exl3 draft_num_tokens=3",
                  extra=("--apply", "--yes", "--json", "-"),
                  env={"SPECDECK_STANDIN_STEPS": json.dumps({
                      "none": 0.012, "ngram:2:4": 0.004, "model:Qwen2.5-0.5B-exl3:3": 0.008}),
                       "SPECDECK_HOME": str(specdeck_home)})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    speedups = {c["arm"]: c["speedup"]["median"] for c in data["summary"]["comparisons"]}
    assert speedups["B"] > speedups["C"] > 1.1  # no draft vs n-gram vs a draft model
    after = (folder / "config.yml").read_text()
    changed = [ln for ln in difflib.unified_diff(before.splitlines(), after.splitlines(),
                                                 lineterm="", n=0)
               if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert sorted(changed) == sorted(["-  draft_mode: model", "+  draft_mode: ngram",
                                      "-  draft_num_tokens:", "+  draft_num_tokens: 4"]), changed
    assert (folder / "config.yml.bak").read_text() == before
    assert "tabby-api-key" not in done.stdout + done.stderr


@pytest.mark.parametrize(("arm", "says"), [
    ("B=draft_mode=eagle", "draft_mode"),
    ("B=draft_tokens=4", "not key=value with a draft_model key"),
    ("B=", "sets nothing"),
    ("B", "neither NAME= nor a draft setting"),
])
def test_bench_refuses_arms_tabbyapi_would_refuse_before_starting_anything(tmp_path, arm, says,
                                                                         specdeck_home):
    folder = tabby_install(tmp_path / "tabbyAPI", "main")
    done = _bench(folder, arm, env={"SPECDECK_HOME": str(specdeck_home)})
    assert done.returncode == 2
    assert says in done.stderr
    assert not any((tmp_path / "tabbyAPI").glob("*.log"))
