"""Server arms against the TabbyAPI stand-in (tests/tabby_standin.py, which follows
TabbyAPI's source at two commits): detection, the draft it reports, keys, usage read from
the stream, and acceptance shown as not reported."""

from __future__ import annotations

import pytest
from tabby_standin import start_tabby

from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.servers.arms import arms_from_urls
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.probe import probe
from specdeck.core.servers.transport import ServerError


@pytest.fixture
def tabby():
    servers = []

    def start(**attrs):
        server, url = start_tabby(**attrs)
        servers.append(server)
        return url, server.RequestHandlerClass

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_probe_knows_tabbyapi_and_its_draft(tabby):
    url, _ = tabby(branch="exl2-checkpoint", draft_name="Qwen2.5-0.5B-exl2-4.0bpw")
    info = probe(url, "tabby-api-key")
    assert info.kind is ServerKind.TABBYAPI and info.detected_by == "/v1/model"
    assert info.model == "Qwen2.5-32B-Instruct-exl2-4.0bpw"
    assert info.draft == "Qwen2.5-0.5B-exl2-4.0bpw" and info.speculative is True
    assert "not reported" in info.acceptance
    plain, _ = tabby(branch="main")
    assert probe(plain, "tabby-api-key").speculative is False
    from specdeck.core.servers.probe import server_drafting

    said = server_drafting(info)
    assert (said.drafts, said.method) == (True, "Qwen2.5-0.5B-exl2-4.0bpw")
    main = server_drafting(probe(plain, "tabby-api-key"))  # main never names its draft
    assert main.drafts is None and "main branch" in main.why


@pytest.mark.parametrize(("key", "detail"), [(None, "Please provide an API key"),
                                             ("wrong", "Invalid API key")])
def test_tabbyapi_keys_are_asked_for_clearly(tabby, key, detail):
    url, _ = tabby()
    with pytest.raises(ServerError) as caught:
        _get_model(url, key)
    assert f"refused the request (401): {detail}" in caught.value.what
    assert "API key" in caught.value.fix


def test_probing_without_the_key_says_so_not_unknown_server(tabby):
    url, _ = tabby()
    with pytest.raises(ServerError, match="refused the request \\(401\\): Please provide an API key"):
        probe(url, None)


def _get_model(url, key):
    from specdeck.core.servers.transport import Base, request_json

    return request_json(Base.parse(url), "GET", "/v1/model", api_key=key)


@pytest.mark.parametrize("branch", ["main", "exl2-checkpoint"])
def test_an_ab_of_two_tabbyapis_reads_usage_and_reports_no_acceptance(tabby, branch,
                                                                       monkeypatch):
    monkeypatch.setenv("SPECDECK_SERVER_API_KEY", "tabby-api-key")
    plain, handler_a = tabby(branch=branch)
    drafting, handler_b = tabby(branch=branch, draft_name="Qwen2.5-0.5B-exl2-4.0bpw")
    plan = BenchPlan(engine="server", model="server", arms=arms_from_urls([plain, drafting]),
                     suites=("code",), max_prompts=2, repeats=1, warmup=0, max_new_tokens=24)
    run = run_plan(plan, ServerEngine())
    records = run.counted("B")
    assert len(records) == 2
    report = records[0].result.server.report
    assert report.completion_tokens == 24 and report.finish_reason == "length"
    assert "usage.completion_tokens_per_sec" in report.fields
    sent = handler_b.usage_seen[0]["completion_tokens_per_sec"]
    if isinstance(sent, float):
        assert report.tokens_per_second == pytest.approx(sent)
    else:  # "Indeterminate": read as no number, never as zero
        assert report.tokens_per_second is None
    assert report.drafted is None and report.acceptance_source == ""
    summary = summarize(run)
    arm_b = summary.arm("B")
    assert arm_b.acceptance_rate is None
    assert arm_b.acceptance_source == "not reported by this server"
    assert summary.comparisons[0].lossless.verdict == "lossless: 2 of 2 runs identical"
    assert any(note.startswith("B: TabbyAPI at") for note in run.loaded.notes)
    assert any(note.startswith("B: ") and "cannot turn off" in note for note in run.loaded.notes)


# -- arms that reload one TabbyAPI through its admin API ---------------------------------------
def _cli(*args, env):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, **env))


KEYS = {"SPECDECK_SERVER_API_KEY": "tabby-api-key", "SPECDECK_TABBY_ADMIN_KEY": "tabby-admin-key"}
SMALL = ("--suite", "code", "--max-prompts", "1", "--repeats", "1", "--warmup", "0",
         "--max-new", "16", "--no-history")


@pytest.mark.parametrize("branch", ["main", "exl2-checkpoint"])
def test_one_tabbyapi_is_reloaded_per_arm_and_restored(tabby, branch, specdeck_home):
    import json

    url, handler = tabby(branch=branch, draft_name="Qwen2.5-1.5B-exl2-4.0bpw")
    result = _cli("bench", "--tabby", url, "--tabby-draft", "B=Qwen2.5-0.5B-exl2-4.0bpw", *SMALL,
                  "--json", "-", env={**KEYS, "SPECDECK_HOME": str(specdeck_home)})
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert [a["name"] for a in data["summary"]["arms"]] == ["A", "B"]
    assert "reloaded" in data["summary"]["arms"][1]["label"]
    loads = [c for c in handler.admin_calls if c[0] == "load"]
    model = "Qwen2.5-32B-Instruct-exl2-4.0bpw"
    # A (no draft), B (its draft), then what was there before. Main's model card does not
    # show the draft, so there SpecDeck can only restore the model itself (documented).
    assert loads[0] == ("load", model, None)
    assert loads[1] == ("load", model, "Qwen2.5-0.5B-exl2-4.0bpw")
    restored = "Qwen2.5-1.5B-exl2-4.0bpw" if branch == "exl2-checkpoint" else None
    assert loads[-1] == ("load", model, restored)
    assert (handler.model_name, handler.draft_name) == (model, restored)
    assert data["summary"]["comparisons"][0]["lossless"]["verdict"].startswith("lossless")
    assert "tabby-admin-key" not in result.stdout + result.stderr


def test_without_the_admin_key_nothing_is_reloaded(tabby, specdeck_home):
    url, handler = tabby()
    result = _cli("bench", "--tabby", url, "--tabby-draft", "Qwen2.5-0.5B-exl2-4.0bpw", *SMALL,
                  env={"SPECDECK_SERVER_API_KEY": "tabby-api-key",
                       "SPECDECK_HOME": str(specdeck_home)})
    assert result.returncode == 2
    assert "needs its admin key" in result.stderr and "SPECDECK_TABBY_ADMIN_KEY" in result.stderr
    assert handler.admin_calls == []


def test_a_failed_load_stops_the_plan_and_restores_the_model(tabby, specdeck_home):
    url, handler = tabby(branch="exl2-checkpoint")
    result = _cli("bench", "--tabby", url, "--tabby-draft", "B=Qwen2.5-0.5B-exl2-4.0bpw",
                  "--tabby-draft", "C=No-Such-Draft", *SMALL,
                  env={**KEYS, "SPECDECK_HOME": str(specdeck_home)})
    assert result.returncode == 2
    assert "Could not find the model path for load" in result.stderr
    assert (handler.model_name, handler.draft_name) == ("Qwen2.5-32B-Instruct-exl2-4.0bpw", None)


@pytest.mark.parametrize("draft_step_s, expected", [(0.001, "Qwen2.5-0.5B-exl2-4.0bpw"),
                                                    (0.012, "")])
def test_apply_writes_the_winning_tabby_draft_into_config_yml(tabby, specdeck_home, tmp_path,
                                                             draft_step_s, expected):
    """--tabby --apply: the winner's draft name goes into config.yml through the editor (a
    diff, a backup, only draft_model_name changes); when the draft loses, the draft is
    switched off. The stand-in's speed with the draft is the test's choice, both ways."""
    from conftest import FIXTURES

    from specdeck.core import config

    cfg = tmp_path / "config.yml"
    cfg.write_bytes((FIXTURES / "tabbyapi" / "config_sample.exl2-checkpoint.yml").read_bytes())
    doc = config.load(cfg)
    config.save(config.plan_change(doc, {("draft_model", "draft_model_name"): "Old-Draft"}))
    original = cfg.read_text()
    url, _handler = tabby(branch="exl2-checkpoint",
                          step_by_draft={"Qwen2.5-0.5B-exl2-4.0bpw": draft_step_s})
    result = _cli("bench", "--tabby", url, "--tabby-draft", "B=Qwen2.5-0.5B-exl2-4.0bpw",
                  "--suite", "code", "--max-prompts", "2", "--repeats", "2", "--warmup", "0",
                  "--max-new", "24", "--no-history", "--apply", "--config", str(cfg), "--yes",
                  env={**KEYS, "SPECDECK_HOME": str(specdeck_home)})
    assert result.returncode == 0, result.stderr
    assert "-  draft_model_name: Old-Draft" in result.stderr  # the diff was shown
    assert (config.load(cfg).value("draft_model", "draft_model_name") or "") == expected
    changed = [(a, b) for a, b in zip(original.splitlines(), cfg.read_text().splitlines()) if a != b]
    assert len(changed) == 1 and "draft_model_name" in changed[0][1]
    assert (tmp_path / "config.yml.bak").read_text() == original


def test_apply_with_tabby_needs_the_config_first(tabby, specdeck_home):
    url, handler = tabby()
    result = _cli("bench", "--tabby", url, "--tabby-draft", "B=Qwen2.5-0.5B-exl2-4.0bpw",
                  *SMALL, "--apply", env={**KEYS, "SPECDECK_HOME": str(specdeck_home)})
    assert result.returncode == 2 and "--config" in result.stderr
    assert handler.admin_calls == []  # refused before anything was reloaded
