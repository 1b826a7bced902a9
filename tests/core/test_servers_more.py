"""More servers as arms (issue 28), each against its stand-in (tests/server_standins.py, which
follows the server's source field for field): SGLang (detection, --speculative-algorithm,
per-request sglext.spec_tokens_details, its gauges read after a run), Ollama's
draft_num_predict as an A/B of drafting on and off, LM Studio's four draft counters, vLLM's
per-request metrics.speculative_decoding preferred over and checked against its counters;
hostile readings end as "not usable: why"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TUNE_DATA = __import__('pathlib').Path(__file__).resolve().parents[1] / 'data' / 'tune'
from server_standins import (
    LmStudioHandler,
    OllamaHandler,
    SglangHandler,
    VllmHandler,
    serve_standins,
)
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.arms import arms_from_urls
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.probe import probe

MAX_NEW = 24


@pytest.fixture
def standins():
    yield from serve_standins()


def _plan(arms, prompts=2):
    return BenchPlan(engine="server", model="server", arms=tuple(arms), suites=("code",),
                     max_prompts=prompts, repeats=1, warmup=0, max_new_tokens=MAX_NEW)


def _bench_cli(args, home) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "specdeck", "bench", *args, "--suite", "code", "--max-prompts",
         "2", "--repeats", "1", "--warmup", "0", "--max-new", str(MAX_NEW), "--no-history",
         "--json", "-"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, SPECDECK_HOME=str(home)))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _positions(kept: list[int], width: int) -> list[int]:
    """Accepted at position i: the steps that kept more than i drafts."""
    return [sum(1 for k in kept if k > i) for i in range(width)]


# SGLang ---------------------------------------------------------------------------------------
def test_sglang_is_told_by_its_model_list_and_says_how_it_drafts(standins):
    plain, _ = standins(SglangHandler)
    eagle, _ = standins(SglangHandler, algorithm="EAGLE3")
    ngram, _ = standins(SglangHandler, algorithm="NGRAM", enable_metrics=False)
    info = probe(plain)
    assert (info.kind, info.speculative, info.draft, info.version) == (
        ServerKind.SGLANG, False, None, "0.5.23")
    assert info.model == "Qwen/Qwen2.5-7B-Instruct" and info.metrics
    info = probe(eagle)
    assert info.speculative and info.draft == "EAGLE3, 3 drafts per step, draft " \
        "lmsys/EAGLE3-Qwen2.5-7B"
    info = probe(ngram)
    assert info.draft == "NGRAM, 3 drafts per step" and not info.metrics
    assert "--enable-metrics" in info.notes[0]
    assert "n-gram cache lives as long as the server" in info.notes[1]  # repeats replay
    assert not any("n-gram cache" in n for n in probe(eagle).notes)
    # A vLLM, with its own /version, is still vLLM.
    vllm, _ = standins(VllmHandler)
    assert probe(vllm).kind is ServerKind.VLLM


def test_sglang_arm_end_to_end_with_its_per_request_counts(standins, specdeck_home):
    """`specdeck bench --server` against two SGLangs: B's drafted / accepted / verify steps /
    positions are its requests' own sglext.spec_tokens_details; the gauges are recorded
    beside them, labelled as the server's recent average."""
    plain, _ = standins(SglangHandler)
    eagle, handler = standins(SglangHandler, algorithm="EAGLE3")
    data = _bench_cli(["--server", plain, "--server", f"B={eagle}"], specdeck_home)
    kept = SglangHandler._steps(handler, MAX_NEW)  # what the server's steps kept, in order
    runs = [r for r in data["runs"] if r["arm"] == "B"]
    assert len(runs) == 2
    for run in runs:
        stats, server = run["stats"], run["server"]
        assert (stats["drafted"], stats["accepted"], stats["draft_steps"]) == (
            3 * len(kept), sum(kept), len(kept))
        assert list(stats["per_position_accepted"]) == _positions(kept, 3)
        assert list(stats["per_position_drafted"]) == [len(kept)] * 3
        assert server["draft_source"] == "sglext.spec_tokens_details.spec_num_proposed_drafts"
        assert server["mean_acceptance_length"] == pytest.approx(MAX_NEW / len(kept))
        assert "this request" in server["mean_acceptance_source"]
        gauges = server["gauges"]
        assert gauges["spec_accept_length"] == pytest.approx(
            1 + sum(handler.state["recent"]) / len(handler.state["recent"]))
        assert "not this run's" in gauges["meaning"]
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert arm_b["acceptance_source"] == "sglext.spec_tokens_details.spec_num_proposed_drafts"
    assert arm_b["acceptance_rate"] == pytest.approx(sum(kept) / (3 * len(kept)))
    sent = [body for route, body in handler.seen if route.startswith("/v1/")]
    assert all(b["return_spec_tokens_details"] and b["top_k"] == 1 for b in sent)
    # The reference drafts nothing, and no gauge is read for it.
    runs_a = [r for r in data["runs"] if r["arm"] == "A"]
    assert all(r["server"]["gauges"] is None for r in runs_a)


def test_sglang_reference_that_drafts_is_refused(standins):
    eagle, _ = standins(SglangHandler, algorithm="EAGLE3")
    plain, _ = standins(SglangHandler)
    with pytest.raises(InvalidInputError, match=r"reference, but .* drafts \(EAGLE3"):
        run_plan(_plan(arms_from_urls([eagle, plain])), ServerEngine())


@pytest.mark.parametrize(("gauge_text", "why"), [
    ('sglang:spec_accept_length{tp_rank="0"} NaN\nsglang:spec_accept_rate{tp_rank="0"} 0.5\n',
     "sglang:spec_accept_length is nan: not a finite number"),
    ('sglang:spec_accept_length{tp_rank="0"} 2.5\nsglang:spec_accept_length{tp_rank="1"} 3.1\n',
     "sglang:spec_accept_length has 2 series that disagree"),
    ('sglang:spec_accept_rate{tp_rank="0"} 1.7\n', "sglang:spec_accept_rate is 1.7: outside"),
])
def test_sglang_hostile_gauges_are_not_used_and_say_why(standins, gauge_text, why):
    plain, _ = standins(SglangHandler)
    eagle, handler = standins(SglangHandler, algorithm="EAGLE3", gauge_text=gauge_text)
    run = run_plan(_plan(arms_from_urls([plain, eagle])), ServerEngine())
    server = run.counted("B")[0].result.server
    assert why in server.gauges.problem and any(why in p for p in server.problems)
    assert server.gauges.accept_length is None or "length" not in why
    # The request's own counts do not depend on the gauges: still this run's acceptance.
    kept = SglangHandler._steps(handler, MAX_NEW)
    assert summarize(run).arm("B").acceptance_rate == pytest.approx(sum(kept) / (3 * len(kept)))


@pytest.mark.parametrize(("override", "why"), [
    ({"spec_correct_drafts_histogram": [0, 0, 0, 9]}, "does not count the 9 steps"),
    ({"spec_verify_ct": 500}, "more verify steps than the 24 tokens"),
    ({"spec_num_correct_drafts": 40}, "40 accepted of 27 drafted"),
])
def test_sglang_per_request_counts_that_disagree_are_not_usable(standins, override, why):
    plain, _ = standins(SglangHandler)
    eagle, _ = standins(SglangHandler, algorithm="EAGLE3", details_override=override)
    run = run_plan(_plan(arms_from_urls([plain, eagle])), ServerEngine())
    arm = summarize(run).arm("B")
    assert arm.acceptance_source.startswith("not usable: ") and why in arm.acceptance_source
    assert arm.acceptance_rate is None
    stats = run.counted("B")[0].result.stats
    assert (stats.drafted, stats.draft_steps, stats.per_position_accepted) == (0, 0, ())


# vLLM per request -----------------------------------------------------------------------------
def test_vllm_per_request_positions_are_exact_and_cross_checked(standins):
    """--per-request-spec-decode-metrics detailed: per-step lists give each position's
    drafts and acceptances exactly; the counters' growth around the run agrees."""
    plain, _ = standins(VllmHandler)
    drafting, _ = standins(VllmHandler, speculative=True, per_request_metrics="detailed")
    run = run_plan(_plan(arms_from_urls([plain, drafting])), ServerEngine())
    drafted, accepted = 3 * MAX_NEW // 4, MAX_NEW // 2
    proposed = [4] * (drafted // 4) + [drafted % 4]  # the stand-in's steps
    kept = []
    for d in proposed:
        kept.append(min(d, accepted - sum(kept)))
    for record in run.counted("B"):
        stats, server = record.result.stats, record.result.server
        assert (stats.drafted, stats.accepted, stats.draft_steps) == (drafted, accepted,
                                                                       len(proposed))
        assert list(stats.per_position_accepted) == _positions(kept, 4)
        assert list(stats.per_position_drafted) == _positions(proposed, 4)
        assert server.draft_source == "metrics.speculative_decoding.num_draft_tokens"
        assert server.cross_check == "agrees with the Prometheus counters' growth around the run"
        assert server.mean_acceptance_length == pytest.approx(1 + accepted / len(proposed))


def test_vllm_per_request_counts_win_over_counters_other_traffic_skewed(standins):
    plain, _ = standins(VllmHandler)
    drafting, _ = standins(VllmHandler, speculative=True, per_request_metrics=True, skew=(8, 3))
    run = run_plan(_plan(arms_from_urls([plain, drafting])), ServerEngine())
    server = run.counted("B")[0].result.server
    assert server.cross_check.startswith("differs from the Prometheus counters' growth")
    assert "26 drafted, 15 accepted, 8 steps" in server.cross_check  # 18 + 8, 12 + 3, 5 + 3
    stats = run.counted("B")[0].result.stats
    assert (stats.drafted, stats.accepted) == (18, 12)  # the request's own
    # The summary histogram alone cannot say how many drafts each position had (the last
    # step drafted 2 of 4), so positions are left out, not guessed.
    assert stats.draft_steps == 5 and stats.per_position_accepted == ()


def test_vllm_histogram_that_does_not_add_up_is_not_usable(standins):
    plain, _ = standins(VllmHandler)
    drafting, _ = standins(VllmHandler, speculative=True, per_request_metrics=True,
                           metrics_override={"acceptance_histogram": [0, 0, 0, 0, 9]})
    run = run_plan(_plan(arms_from_urls([plain, drafting])), ServerEngine())
    arm = summarize(run).arm("B")
    assert arm.acceptance_source.startswith(
        "not usable: metrics.speculative_decoding.acceptance_histogram [0, 0, 0, 0, 9] does "
        "not count the 5 steps and 12 accepted drafts")
    assert arm.acceptance_rate is None


# LM Studio's four counters ---------------------------------------------------------------------
def test_lm_studio_four_counters_are_read_and_checked(standins):
    url, _ = standins(LmStudioHandler, stats_in_stream=True)
    model = "qwen2.5-7b-instruct"
    arms = arms_from_urls([f"{url}#{model}", f"B={url}#{model}"],
                          drafts={"B": "qwen2.5-0.5b-instruct"})
    run = run_plan(_plan(arms), ServerEngine())
    report = run.counted("B")[0].result.server.report
    assert (report.drafted, report.accepted, report.rejected, report.ignored) == (24, 18, 5, 1)
    assert report.draft_model == "qwen2.5-0.5b-instruct"


@pytest.mark.parametrize(("override", "why"), [
    ({"ignored_draft_tokens_count": 4}, "stats: 18 accepted + 5 rejected + 4 ignored draft "
                                        "tokens = 27, not the 24 of total_draft_tokens_count"),
    ({"draft_model": "qwen2.5-1.5b-instruct"}, "stats.draft_model is 'qwen2.5-1.5b-instruct', "
                                               "not the 'qwen2.5-0.5b-instruct' this arm's "
                                               "requests name"),
])
def test_lm_studio_counters_that_do_not_fit_are_not_usable(standins, override, why):
    url, _ = standins(LmStudioHandler, stats_in_stream=True, stats_override=override)
    model = "qwen2.5-7b-instruct"
    arms = arms_from_urls([f"{url}#{model}", f"B={url}#{model}"],
                          drafts={"B": "qwen2.5-0.5b-instruct"})
    run = run_plan(_plan(arms), ServerEngine())
    arm = summarize(run).arm("B")
    assert arm.acceptance_source == f"not usable: {why}"
    assert arm.acceptance_rate is None


# Ollama's draft_num_predict -------------------------------------------------------------------
def test_ollama_drafting_on_and_off_on_one_model(standins, specdeck_home):
    """A = the model with draft_num_predict 0, B = the same model with 4: each arm's setting
    is loaded before its runs (a changed Runner option reloads the model), every request
    carries its arm's setting, and acceptance is 'not reported' (Ollama sends no counts)."""
    url, handler = standins(OllamaHandler, draft_layer=True)
    model = OllamaHandler.model
    data = _bench_cli(["--server", f"A={url}#{model}", "--server", f"B={url}#{model}",
                       "--server-draft", "B=4"], specdeck_home)
    chats = [body["options"]["draft_num_predict"] for route, body in handler.seen
             if route == "/api/chat"]
    assert sorted(set(chats)) == [0, 4] and len(chats) == 4
    loads = handler.runner["loads"]
    assert loads and all(route == "/api/generate" for route, _ in loads)  # never a measured run
    assert {options["draft_num_predict"] for _, options in loads} == {0, 4}
    runs_b = [r for r in data["runs"] if r["arm"] == "B"]
    assert all(r["server"]["options"] == [["draft_num_predict", 4]] for r in runs_b)
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert arm_b["acceptance_source"] == "not reported by this server"
    assert arm_b["acceptance_rate"] is None and arm_b["tokens_per_second"] > 0
    assert any(note.startswith("B: Ollama model qwen2.5:32b: DRAFT layer, no "
                               "draft_num_predict in its parameters; its requests carry "
                               "draft_num_predict 4") for note in data["loaded"]["notes"])


def test_ollama_model_default_and_mtp_layers_are_read_from_show(standins):
    from specdeck.core.servers import ollama
    from specdeck.core.servers.transport import Base

    url, _ = standins(OllamaHandler, mtp_layers=1, params={"draft_num_predict": 2})
    drafting = ollama.model_drafting(Base.parse(url), OllamaHandler.model, None)
    assert (drafting.draft, drafting.default_n, drafting.drafts_by_default) == (
        "MTP layers (nextn_predict_layers 1)", 2, True)
    url, _ = standins(OllamaHandler, mtp_layers=1)
    assert ollama.model_drafting(Base.parse(url), OllamaHandler.model,
                                 None).drafts_by_default is False  # MTP needs the option set


def test_ollama_draft_rules_are_clear(standins):
    url, _ = standins(OllamaHandler)  # no DRAFT layer, no MTP layers
    model = OllamaHandler.model
    arms = arms_from_urls([f"{url}#{model}", f"B={url}#{model}"], drafts={"B": "4"})
    with pytest.raises(InvalidInputError, match=r"asks Ollama to draft .* has no draft"):
        run_plan(_plan(arms), ServerEngine())
    url, _ = standins(OllamaHandler, draft_layer=True)
    arms = arms_from_urls([f"{url}#{model}", f"B={url}#{model}"], drafts={"B": "many"})
    with pytest.raises(InvalidInputError, match="draft_num_predict, a whole number"):
        run_plan(_plan(arms), ServerEngine())


def test_an_sglang_ngram_arm_is_said_to_flatter_its_repeats(standins, specdeck_home):
    """SGLang's NGRAM cache outlives a request (as llama.cpp's ngram-mod): SpecDeck cannot
    restart a server it did not start, so the plan's notes say its repeats flatter it."""
    plain, _ = standins(SglangHandler)
    ngram, _ = standins(SglangHandler, algorithm="NGRAM")
    data = _bench_cli(["--server", plain, "--server", f"B={ngram}"], specdeck_home)
    notes = " ".join(data["loaded"]["notes"])
    assert "B: NGRAM: its n-gram cache lives as long as the server" in notes
    assert "cannot restart a server it did not start" in notes
    assert "A: NGRAM" not in notes


def test_the_servers_kept_up_are_sized_with_their_draft_models(tmp_path, monkeypatch):
    """A bench engine keeps as many launched servers as fit; a server with -md holds the draft
    beside the target, so the size each server needs counts both files."""
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.cli.bench_cmd import _servers_that_fit
    from specdeck.core.servers import llama_server
    from specdeck.core.servers.arms import ServerArm

    target, draft = tmp_path / "t.gguf", tmp_path / "d.gguf"
    target.write_bytes(b"\0" * 3000)
    draft.write_bytes(b"\0" * 1000)
    monkeypatch.setattr(llama_server, "servers_that_fit", lambda size, on_gpu=None: size)
    # (files that are not GGUF: their sizes and the flat allowance)

    def arm(name, *args):
        return Arm(name, server=ServerArm(launch=llama_server.LaunchProfile(
            "llama-server", str(target), args)))

    plan = BenchPlan(engine="server", model=str(target), arms=(
        arm("A"), arm("B", "-md", str(draft), "--spec-type", "draft-simple")))
    assert _servers_that_fit(plan) == 4000 + llama_server.SERVER_OVERHEAD
    plan = BenchPlan(engine="server", model=str(target), arms=(arm("A"), arm("B", "-md",
                                                                              str(draft) + "x")))
    assert _servers_that_fit(plan) is None  # a missing file: the launch says so


def test_a_servers_size_comes_from_its_gguf_plan():
    """Weights and KV cache at the launch's context and cache types, a draft beside it, the
    compute buffers' allowance (read from the GGUF headers; no GPU here, so no CUDA context)."""
    from specdeck.core.servers.llama_server import SERVER_OVERHEAD, LaunchProfile, launch_bytes
    from specdeck.core.vram.gguf import DEFAULT_RESERVE_MB, read_gguf_model

    gguf = str(TUNE_DATA / "SmolLM2-135M-Instruct-header.gguf")
    model = read_gguf_model(gguf)

    def size(*args):
        return launch_bytes(LaunchProfile("llama-server", gguf, args))

    short, long = size("-c", "512"), size("-c", "4096")
    assert short > model.weight_bytes + DEFAULT_RESERVE_MB * 2**20
    per_token = (long - short) / (4096 - 512)
    # K and V in f16, every layer
    assert per_token == model.n_layer * model.head_count_kv * (model.key_length + model.value_length) * 2
    assert size("-c", "4096", "-ctk", "q8_0", "-ctv", "q8_0") < long  # a quantized cache
    with_draft = size("-c", "4096", "-md", gguf)
    assert with_draft - long == model.weight_bytes + 4096 * per_token
    assert launch_bytes(LaunchProfile("llama-server", "/nonexistent.gguf", ())) == SERVER_OVERHEAD


def test_on_a_gpu_each_kept_server_also_holds_a_cuda_context(monkeypatch):
    """NVML's free memory is what servers share there, and each process takes its own context
    and cuBLAS state (the Hopper figures on an H200)."""
    import specdeck.core.gpu as gpu
    from specdeck.core.gpu.telemetry import GpuReading, TelemetryFrame, TelemetryState
    from specdeck.core.servers.llama_server import servers_that_fit
    from specdeck.core.vram.costs import DEFAULT_OVERHEADS as o

    free = 100 * 2**30
    frame = TelemetryFrame(0.0, TelemetryState.OK, (GpuReading(0, "NVIDIA H200", memory_free=free),))
    monkeypatch.setattr(gpu, "read_once", lambda: frame)
    each = 10 * 2**30
    assert servers_that_fit(each) == int(0.9 * free // (each + o.cuda_context_hopper + o.cublas_handle))
    assert servers_that_fit(each) < int(0.9 * free // each)
