"""Server arms against vLLM and Ollama stand-ins (tests/server_standins.py, which follows
their sources): detection, where acceptance comes from (vLLM's per-request metrics, else
its Prometheus counters around each run; Ollama: none), and Ollama's model name."""

from __future__ import annotations

import pytest
from server_standins import OllamaHandler, VllmHandler, serve_standins
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.arms import arms_from_urls
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.probe import probe


@pytest.fixture
def standins():
    yield from serve_standins()


def _plan(urls):
    return BenchPlan(engine="server", model="server", arms=arms_from_urls(urls), suites=("code",),
                     max_prompts=2, repeats=1, warmup=0, max_new_tokens=24)


def test_vllm_is_detected_with_its_metrics(standins):
    """vLLM registers its spec_decode counters only with a speculative config: their presence
    says before a run that it drafts; without them, nothing can be told until a run."""
    from specdeck.core.servers.probe import server_drafting

    url, _ = standins(VllmHandler, speculative=True)
    info = probe(url)
    assert (info.kind, info.version, info.metrics) == (ServerKind.VLLM, "0.33.0", True)
    assert info.model == "Qwen/Qwen2.5-32B-Instruct"
    assert server_drafting(info).drafts is True
    plain = probe(standins(VllmHandler)[0])
    assert not plain.metrics and server_drafting(plain).line == "drafting unknown until a run"


@pytest.mark.parametrize(("per_request", "source"), [
    (True, "metrics.speculative_decoding.num_draft_tokens"),
    (False, "Prometheus counters"),
])
def test_vllm_acceptance_comes_from_the_request_or_the_counters(standins, per_request, source):
    plain, _ = standins(VllmHandler)
    drafting, handler = standins(VllmHandler, speculative=True, per_request_metrics=per_request)
    run = run_plan(_plan([plain, drafting]), ServerEngine())
    arm_b = summarize(run).arm("B")
    assert arm_b.acceptance_source == source
    assert (arm_b.drafted, arm_b.accepted) == (2 * (3 * 24 // 4), 2 * (24 // 2))
    assert arm_b.acceptance_rate == pytest.approx(12 / 18)
    sent = handler.seen[-1][1]
    assert sent["temperature"] == 0.0 and sent["top_k"] == 1
    assert sent["stream_options"] == {"include_usage": True}
    report = run.counted("B")[0].result.server.report
    assert report.completion_tokens == 24 and report.finish_reason == "length"


def test_ollama_is_read_from_its_ndjson_stream_with_no_acceptance(standins):
    a, _ = standins(OllamaHandler)
    b, handler = standins(OllamaHandler)
    info = probe(a)
    assert info.kind is ServerKind.OLLAMA and info.model == "qwen2.5:32b"
    run = run_plan(_plan([a, b]), ServerEngine())
    records = run.counted("B")
    report = records[0].result.server.report
    assert report.completion_tokens == 24 and report.finish_reason == "length"
    assert report.tokens_per_second is not None and report.tokens_per_second > 0
    assert "eval_duration" in report.fields
    summary = summarize(run)
    assert summary.arm("B").acceptance_source == "not reported by this server"
    assert summary.comparisons[0].lossless.verdict == "lossless: 2 of 2 runs identical"
    route, body = handler.seen[-1]
    assert route == "/api/chat" and body["model"] == "qwen2.5:32b"
    assert body["options"]["num_predict"] == 24 and body["options"]["top_k"] == 1


def test_ollama_without_a_loaded_model_asks_for_its_name(standins):
    one, _ = standins(OllamaHandler, loaded=False, model="one:1b")
    assert probe(one).model == "one:1b"  # the only model it has
    several, _ = standins(OllamaHandler, loaded=False, extra_models=("other:7b",))
    info = probe(several)
    assert info.model is None and "URL#MODEL" in info.notes[0]
    with pytest.raises(InvalidInputError, match="Ollama needs the model's name"):
        run_plan(_plan([several, several]), ServerEngine())
    named = f"{several}#qwen2.5:32b"
    run = run_plan(_plan([named, f"B={named}"]), ServerEngine())
    assert len(run.counted("B")) == 2


# LM Studio ------------------------------------------------------------------------------------
@pytest.mark.parametrize("api_version", ["v0", "v1"])
def test_lm_studio_is_detected_by_its_own_model_lists(standins, api_version):
    from server_standins import LmStudioHandler

    url, _ = standins(LmStudioHandler, api_version=api_version)
    info = probe(url)
    assert info.kind is ServerKind.LMSTUDIO and info.model == "qwen2.5-7b-instruct"
    assert info.detected_by == f"/api/{api_version}/models"
    assert "qwen2.5-0.5b-instruct" in info.models and "--server-draft" in info.notes[0]


@pytest.mark.parametrize("stats_in_stream", [False, True])
def test_lm_studio_arms_differ_by_the_draft_their_requests_name(standins, stats_in_stream,
                                                               specdeck_home):
    """One LM Studio serves both arms: B's requests carry draft_model. Acceptance comes from
    `stats` only where the stream carries it (LM Studio's docs do not say it does)."""
    import json
    import os
    import subprocess
    import sys

    from server_standins import LmStudioHandler

    url, handler = standins(LmStudioHandler, stats_in_stream=stats_in_stream)
    model = "qwen2.5-7b-instruct"
    result = subprocess.run(
        [sys.executable, "-m", "specdeck", "bench", "--server", f"A={url}#{model}",
         "--server", f"B={url}#{model}", "--server-draft", "B=qwen2.5-0.5b-instruct",
         "--suite", "code", "--max-prompts", "2", "--repeats", "1", "--warmup", "0",
         "--max-new", "24", "--no-history", "--json", "-"],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert result.returncode == 0, result.stderr
    sent = {(route, body.get("draft_model")) for route, body in handler.seen}
    assert sent == {("/v1/chat/completions", None),
                    ("/v1/chat/completions", "qwen2.5-0.5b-instruct")}
    assert all(body["stream_options"] == {"include_usage": True} for _, body in handler.seen)
    data = json.loads(result.stdout)
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert "+ draft qwen2.5-0.5b-instruct" in arm_b["label"]
    runs_b = [r for r in data["runs"] if r["arm"] == "B"]
    assert all(r["server"]["report"]["completion_tokens"] == 24 for r in runs_b)
    if stats_in_stream:
        assert arm_b["acceptance_source"] == "stats.total_draft_tokens_count"
        assert arm_b["acceptance_rate"] == pytest.approx(18 / 24)
    else:
        assert arm_b["acceptance_rate"] is None  # never a made-up number
        assert arm_b["acceptance_source"] == "not reported by this server"


def test_lm_studio_token_and_draft_rules_are_clear(standins, specdeck_home):
    from server_standins import LmStudioHandler

    url, _ = standins(LmStudioHandler, api_token="lms-secret")
    with pytest.raises(Exception) as caught:
        probe(url)
    assert "refused the request (401)" in str(caught.value) and "lms-secret" not in str(caught.value)
    vllm, _ = standins(VllmHandler)
    arms = arms_from_urls([vllm, f"B={vllm}"], drafts={"B": "some-draft"})
    with pytest.raises(InvalidInputError, match="only LM Studio takes"):
        run_plan(_plan_from(arms), ServerEngine())
    with pytest.raises(InvalidInputError, match="names no arm called C"):
        arms_from_urls([vllm, f"B={vllm}"], drafts={"C": "x"})


def _plan_from(arms):
    return BenchPlan(engine="server", model="server", arms=arms, suites=("code",),
                     max_prompts=1, repeats=1, warmup=0, max_new_tokens=8)
