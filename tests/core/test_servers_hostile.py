"""Hostile servers on 127.0.0.1 (tests/hostile_servers.py), one class of fault at a time
(issue 26): no hang, no made-up number, no false "identical", no failure that vanishes, no
traceback, no leaked key, and messages that say what the server did.

Deadlines are given small (about 1 s) so that a regression fails by its pytest timeout
instead of hanging; no test asserts how long anything took."""

from __future__ import annotations

import json
import re
import threading

import hostile_servers as hs
import pytest
from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize
from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec, StopReason
from specdeck.core.errors import CancelledError
from specdeck.core.servers import engine as engine_module
from specdeck.core.servers import probe as probe_module
from specdeck.core.servers import transport as transport_module
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.engine import ServerEngine
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.probe import probe
from specdeck.core.servers.readings import StreamReading
from specdeck.core.servers.transport import (
    MAX_EVENT_BYTES,
    MAX_JSON_BYTES,
    MAX_STREAM_BYTES,
    Base,
    ServerError,
    StreamEvent,
    request_json,
    request_text,
    stream_sse,
)
from specdeck.core.units import format_bytes

SECRET = "sk-hostile-0123456789"


def ab(url_a: str, url_b: str, kind=ServerKind.LLAMA_SERVER, max_new: int = 16,
       prompts: int = 1, on_error: str = "stop"):
    """An A/B of two servers (A the reference), run to its summary."""
    arms = (Arm("A", NO_DRAFT, ServerArm(url=url_a, kind=kind)),
            Arm("B", DrafterSpec(DrafterKind.SERVER, adaptive=False),
                ServerArm(url=url_b, kind=kind)))
    plan = BenchPlan(engine="server", model="server", arms=arms, suites=("code",),
                     max_prompts=prompts, repeats=1, warmup=0, max_new_tokens=max_new,
                     on_error=on_error)
    run = run_plan(plan, ServerEngine())
    return run, summarize(run)


@pytest.fixture
def good():
    with hs.serving(hs.Llm, drafting=False) as (url, _):
        yield url


# -- hangs: every request has a total deadline ---------------------------------------------------
HTTP_VERSIONS = pytest.mark.parametrize("http10", [False, True], ids=["HTTP/1.1", "HTTP/1.0"])


@pytest.mark.timeout(30)
@HTTP_VERSIONS
@pytest.mark.parametrize("from_status", [True, False], ids=["status-line", "body"])
def test_a_trickled_answer_ends_at_the_request_deadline(from_status, http10):
    with hs.serving(hs.Trickle, from_status=from_status, http10=http10) as (url, _):
        with pytest.raises(ServerError, match=r"/props did not finish answering within 1 s"):
            request_json(Base.parse(url), "GET", "/props", timeout=1.0)
        with pytest.raises(ServerError, match=r"/metrics did not finish answering within 1 s"):
            request_text(Base.parse(url), "/metrics", timeout=1.0)


@pytest.mark.timeout(30)
@HTTP_VERSIONS
@pytest.mark.parametrize(("per_request", "total"), [(1.0, 30.0), (5.0, 1.0)])
def test_a_probe_of_a_trickling_server_ends_at_its_deadline(monkeypatch, per_request, total,
                                                             http10):
    monkeypatch.setattr(probe_module, "PROBE_TIMEOUT_S", per_request)
    monkeypatch.setattr(probe_module, "PROBE_TOTAL_S", total)
    # the body trickles (issue 43: /props a byte every 3 s held a probe for 9 minutes)
    with hs.serving(hs.Trickle, from_status=False, http10=http10) as (url, _):
        with pytest.raises(ServerError, match="did not finish answering (SpecDeck's probe )?"
                                              "within 1 s"):
            probe(url)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("server", [hs.Trickle, hs.KeepAlive], ids=["trickle", "keep-alive"])
def test_a_stream_that_never_finishes_ends_at_its_deadline(server):
    with hs.serving(server, http10=True) as (url, _):
        with pytest.raises(ServerError, match="did not finish answering within 1 s") as caught:
            list(stream_sse(Base.parse(url), "/v1/chat/completions", {"max_tokens": 16},
                            timeout=1.0))
    assert "keep-alives" in caught.value.fix


@pytest.mark.timeout(60)
@pytest.mark.parametrize("server", [hs.Trickle, hs.KeepAlive], ids=["trickle", "keep-alive"])
def test_a_generation_has_a_deadline_from_the_tokens_asked_for(monkeypatch, good, server):
    monkeypatch.setattr(engine_module, "GENERATION_TIMEOUT_S", 1.0)
    monkeypatch.setattr(engine_module, "GENERATION_S_PER_TOKEN", 0.0)
    with hs.serving(server, gets=False) as (url, _):
        run, summary = ab(good, url, on_error="skip")
    failed = [r for r in run.records if r.error]
    assert [r.arm for r in failed] == ["B"]
    assert "did not finish answering within 1 s" in failed[0].error
    assert summary.arm("B").all_failed and summary.failed_arms == ("B",)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bytewise", [False, True], ids=["keep-alive lines", "trickled comment"])
@pytest.mark.parametrize("tokens", [0, 1], ids=["before any token", "after the first token"])
def test_comments_are_not_progress_a_stream_without_a_token_ends_at_the_read_timeout(
        monkeypatch, tokens, bytewise):
    """Issue 43: keep-alives after the first chunk held a run for its whole deadline; only an
    event restarts READ_TIMEOUT_S, whatever arrives between (lines or single bytes)."""
    monkeypatch.setattr(transport_module, "READ_TIMEOUT_S", 0.5)
    with hs.serving(hs.KeepAlive, tokens=tokens, bytewise=bytewise, gap_s=0.05) as (url, _):
        events = []
        with pytest.raises(ServerError, match=r"sent no token for 0\.5 s "
                           + ("mid-stream" if tokens else "after the request")) as caught:
            for event in stream_sse(Base.parse(url), "/v1/chat/completions", {}, timeout=8.0):
                events.append(event)
    assert len(events) == tokens
    assert "keep-alive comments" in caught.value.what


EMPTY_EVENTS = [
    {"choices": [{"index": 0, "delta": {}}]},  # the reviewer's: an empty delta every second
    {"choices": [{"index": 0, "delta": {"role": "assistant"}}]},
    {"choices": [{"index": 0, "delta": {"content": ""}}]},
    {"choices": [], "usage": {"completion_tokens": 1}},
    {"content": "", "tokens": []},  # llama.cpp /completion's shape, empty
]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("empty", EMPTY_EVENTS, ids=["empty delta", "role", "empty content",
                                                     "usage only", "completion"])
def test_events_without_a_token_are_not_progress_either(monkeypatch, empty):
    """An event with no token in it every 50 ms after the first token held a stream past its
    4 s read timeout until the whole deadline (round 5 of issue 43): the read deadline is "no
    token for READ_TIMEOUT_S"."""
    monkeypatch.setattr(transport_module, "READ_TIMEOUT_S", 0.5)
    with hs.serving(hs.KeepAlive, tokens=1, empty=empty, gap_s=0.05) as (url, _):
        events = []
        with pytest.raises(ServerError, match=r"sent no token for 0\.5 s mid-stream"):
            for event in stream_sse(Base.parse(url), "/v1/chat/completions", {}, timeout=8.0):
                events.append(event)
    assert len(events) > 1  # the empty events were read, and did not count


@pytest.mark.timeout(30)
def test_tokens_spread_past_the_read_timeout_each_restart_it(monkeypatch):
    monkeypatch.setattr(transport_module, "READ_TIMEOUT_S", 0.5)
    with hs.serving(hs.Llm, step_s=0.05) as (url, _):
        events = list(stream_sse(Base.parse(url), "/v1/chat/completions",
                                 {"max_tokens": 30}, timeout=20.0))
    assert len(events) == 31  # 30 tokens over about 1.5 s, and the final chunk


@pytest.mark.parametrize(("data", "token"), [
    ({"choices": [{"delta": {"content": "a"}}]}, True),
    ({"choices": [{"delta": {"reasoning_content": "a"}}]}, True),
    ({"choices": [{"text": "a"}]}, True),  # /v1/completions
    ({"choices": [{"delta": {}, "finish_reason": "stop"}]}, True),
    ({"content": "a", "tokens": [5]}, True),  # llama.cpp /completion
    ({"content": "", "tokens": [], "stop": True}, True),
    ({"response": "a", "done": False}, True),  # Ollama
    ({"message": {"content": "a"}, "done": False}, True),
    *((e, False) for e in EMPTY_EVENTS),
    ({"response": "", "done": False}, False),
    ("data", False), (None, False),
])
def test_what_carries_a_token(data, token):
    assert transport_module.carries_token(data) is token


@pytest.mark.timeout(30)
def test_a_run_whose_server_only_keeps_alive_after_its_first_token_fails_with_a_clear_message(
        monkeypatch, good):
    monkeypatch.setattr(transport_module, "READ_TIMEOUT_S", 0.5)
    monkeypatch.setattr(engine_module, "GENERATION_TIMEOUT_S", 8.0)
    with hs.serving(hs.KeepAlive, tokens=1, gets=False) as (url, _):
        run, summary = ab(good, url, on_error="skip")
    failed = [r for r in run.records if r.error]
    assert [r.arm for r in failed] == ["B"]
    assert "sent no token for 0.5 s mid-stream" in failed[0].error
    assert summary.arm("B").all_failed


@pytest.mark.timeout(30)
def test_cancel_ends_a_silent_stream_without_waiting_for_a_deadline():
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with hs.serving(hs.KeepAlive, gap_s=5.0) as (url, _):
        with pytest.raises(CancelledError):
            list(stream_sse(Base.parse(url), "/v1/completions", {}, cancel=cancel, timeout=60))


@pytest.mark.timeout(60)
def test_an_endless_stream_is_read_up_to_max_tokens_with_a_note(good):
    with hs.serving(hs.Endless) as (url, _):
        run, summary = ab(good, url, max_new=16)
    b = run.counted("B")[0]
    assert b.result.server.chunks == 16 and b.result.stats.new_tokens == 16
    assert b.result.stats.stop_reason is StopReason.MAX_NEW_TOKENS
    assert any("kept streaming past the 16 tokens asked for" in p
               for p in b.result.server.problems)


@pytest.mark.timeout(60)
def test_a_flood_of_64_kb_lines_stops_at_the_stream_byte_bound(good):
    with hs.serving(hs.Flood) as (url, _):
        with pytest.raises(ServerError, match="sent more than 2.0 MiB without finishing"):
            list(stream_sse(Base.parse(url), "/v1/completions", {}, max_bytes=2 << 20))
        run, summary = ab(good, url, on_error="skip")  # the engine's own bound
    assert f"sent more than {format_bytes(MAX_STREAM_BYTES)}" in run.records[-1].error or \
        f"sent more than {format_bytes(MAX_STREAM_BYTES)}" in run.records[0].error


@pytest.mark.timeout(60)
def test_an_endless_json_answer_stops_at_the_answer_byte_bound():
    with hs.serving(hs.Flood) as (url, _):
        with pytest.raises(ServerError, match=f"/props answered more than "
                                              f"{format_bytes(MAX_JSON_BYTES)}") as caught:
            probe(url)  # every route floods: the first one is what the server said
    assert "not an answer an LLM server gives" in caught.value.fix


@pytest.mark.timeout(60)
def test_one_huge_event_fails_the_run_rather_than_vanishing(good):
    with hs.serving(hs.HugeEvent) as (url, _):
        with pytest.raises(ServerError,
                           match=f"one event of more than {format_bytes(MAX_EVENT_BYTES)}"):
            ab(good, url)


# -- made-up numbers: what a server reports is checked ---------------------------------------------
def _reading(timings: dict | str, chunks: int = 16, max_tokens: int = 16, usage=None):
    reading = StreamReading("llama-server", 0.0, max_tokens=max_tokens)
    for i, word in enumerate(hs.words(chunks)):
        reading.add(StreamEvent(0.01 * (i + 1), {"choices": [{"delta": {"content": word}}]}))
    data = {"choices": [{"delta": {}, "finish_reason": "length"}]}
    data["timings"] = json.loads(timings) if isinstance(timings, str) else timings
    if usage is not None:
        data["usage"] = usage
    reading.add(StreamEvent(1.0, data))
    return reading.report()


@pytest.mark.parametrize(("timings", "figure", "says"), [
    ('{"predicted_n": 16, "draft_n": 10, "draft_n_accepted": -20}', "accepted", "not a count"),
    ('{"predicted_n": 16, "draft_n": 10, "draft_n_accepted": 1000}', "accepted",
     "1000 accepted of 10 drafted"),
    ('{"predicted_n": 16, "draft_n": NaN, "draft_n_accepted": 5}', "drafted", "not a count"),
    ('{"predicted_n": 16, "draft_n": 1e30, "draft_n_accepted": 5}', "drafted", "not a count"),
    ('{"predicted_n": 16, "draft_n": 40, "draft_n_accepted": 30}', "accepted",
     "30 accepted draft tokens, but the run made 16 tokens"),
    ('{"predicted_n": 16, "draft_n": 1' + "0" * 400 + ', "draft_n_accepted": 5}', "drafted",
     "not a count"),
    ('{"predicted_n": 1e30}', "completion_tokens", "implausibly large"),
    ('{"predicted_n": 1' + "0" * 400 + "}", "completion_tokens", "implausibly large"),
    ('{"predicted_n": 1e400}', "completion_tokens", "not a finite number"),
    ('{"predicted_n": 134144}', "completion_tokens", "more than the 16 asked for"),
    ('{"predicted_n": 2}', "completion_tokens", "but 16 chunks of text arrived"),
    ('{"predicted_n": 15.5}', "completion_tokens", "a count is a whole number"),
    ('{"predicted_n": "16"}', "completion_tokens", "not a number"),
    ('{"predicted_per_second": Infinity}', "tokens_per_second", "not a finite number"),
    ('{"predicted_per_second": -3}', "tokens_per_second", "negative"),
    ('{"predicted_ms": -Infinity}', "decode_ms", "not a finite number"),
    ('{"prompt_n": -3}', "prompt_tokens", "negative"),
    ('{"prompt_n": 10, "cache_n": 50}', "cached_prompt_tokens", "more than the prompt"),
])
def test_a_reported_figure_that_fails_its_checks_is_not_used(timings, figure, says):
    report = _reading(timings)
    assert getattr(report, figure) is None
    assert any(says in problem for problem in report.problems), report.problems


def test_usage_that_disagrees_with_the_streamed_tokens_is_not_used():
    report = _reading({}, usage={"completion_tokens": 8384 * 16, "prompt_tokens": 30})
    assert report.completion_tokens is None
    assert "usage.completion_tokens is 134144, more than the 16 asked for" in \
        report.completion_problem


def test_sound_figures_pass_their_checks():
    report = _reading({"predicted_n": 16, "draft_n": 12, "draft_n_accepted": 9,
                       "predicted_per_second": 41.5, "prompt_n": 30, "cache_n": 0})
    assert report.problems == ()
    assert (report.completion_tokens, report.drafted, report.accepted) == (16, 12, 9)


@pytest.mark.timeout(60)
def test_an_arm_whose_speed_is_unknown_is_not_usable_never_0x(good):
    # predicted_n 1e30: the server's count fails its check, so the arm's speed is unknown.
    with hs.serving(hs.Reports, timings_json='{"predicted_n": 1e30, "draft_n": 10, '
                    '"draft_n_accepted": -20}') as (url, _):
        run, summary = ab(good, url)
    b = summary.arm("B")
    comparison = summary.comparison("B")
    assert b.tokens_per_second is None and b.acceptance_rate is None
    assert b.acceptance_source.startswith("not usable: timings.draft_n")
    assert comparison.speedup is None and not comparison.usable
    assert comparison.verdict.startswith("B: not usable: no run of arm B has a usable speed")
    assert "0.00x" not in comparison.verdict and "hurts" not in comparison.verdict
    assert "implausibly large" in comparison.verdict
    # The live figures and the CLI's progress lines follow the same rule.
    import io

    from specdeck.core.bench.live import LivePlan
    from specdeck.core.bench.runner import RunFinished
    from specdeck.core.cli.bench_cmd import ProgressPrinter

    live = LivePlan(run.plan)
    out = io.StringIO()
    printer = ProgressPrinter(out)
    for record in run.records:
        live.apply(RunFinished(record, len(run.records)))
        printer(RunFinished(record, len(run.records)))
    assert live.arm_so_far("B").to_text("A") == "B: no usable speed in 1 paired runs so far"
    assert [p.arm for p in live.take_points() if p.series == "finished"] == ["A"]
    line = next(line for line in out.getvalue().splitlines() if "B: server" in line)
    assert "speed not usable: the server's token count is not usable (timings.predicted_n is " \
        "1e+30: implausibly large)" in line
    assert "acceptance not usable: timings.draft_n: accepted count -20.0 is not a count" in line


@pytest.mark.timeout(60)
def test_prometheus_counters_that_go_down_give_no_acceptance(good):
    with hs.serving(hs.Counters) as (url, _):
        arms = (Arm("A", NO_DRAFT, ServerArm(url=good, kind=ServerKind.LLAMA_SERVER)),
                Arm("B", DrafterSpec(DrafterKind.SERVER, adaptive=False), ServerArm(url=url)))
        plan = BenchPlan(engine="server", model="server", arms=arms, suites=("code",),
                         max_prompts=1, repeats=1, warmup=0, max_new_tokens=16)
        run = run_plan(plan, ServerEngine())
    server = run.counted("B")[0].result.server
    assert re.search(r"spec_decode_num_draft_tokens_total went down from \d+ to \d+ \(the "
                     "server restarted", server.acceptance_problem)
    assert run.counted("B")[0].result.stats.drafted == 0
    arm = summarize(run).arm("B")
    assert arm.acceptance_rate is None and arm.acceptance_source.startswith("not usable")


@pytest.mark.parametrize("values", [("nan", "nan"), ("0", "+Inf"), ("1e400", "1e400")])
def test_counters_that_are_not_finite_give_a_problem_not_a_traceback(values):
    from specdeck.core.servers.counters import counted_draft, parse_counters

    before = parse_counters(f"vllm:spec_decode_num_draft_tokens_total {values[0]}\n"
                            f"vllm:spec_decode_num_accepted_tokens_total {values[0]}\n")
    after = parse_counters(f"vllm:spec_decode_num_draft_tokens_total {values[1]}\n"
                           f"vllm:spec_decode_num_accepted_tokens_total {values[1]}\n")
    counted = counted_draft(before, after, 16)
    assert (counted.drafted, counted.accepted) == (None, None)
    assert "not a counter's value" in counted.problem


# -- tracebacks: deep JSON ---------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_deeply_nested_json_is_refused_not_a_recursion_error(good):
    with hs.serving(hs.DeepJson) as (url, _):
        with pytest.raises(ServerError, match="not as an LLM server SpecDeck knows"):
            probe(url)
        run, summary = ab(good, url, kind=ServerKind.LLAMA_SERVER)
    b = run.counted("B")[0]
    assert any("nested more than 64 levels" in lost for lost in b.result.server.lost)
    check = summary.comparison("B").lossless
    assert check.compared == 0 and check.not_compared == 1
    assert check.verdict.startswith("not checked: every paired run lost data")


# -- false "identical" ----------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize("tokens", [3, 0])
def test_an_output_that_ends_early_or_is_empty_is_not_identical(good, tokens):
    with hs.serving(hs.Short, tokens=tokens) as (url, _):
        run, summary = ab(good, url)
    check = summary.comparison("B").lossless
    assert check.identical == 0 and check.diverged == 1
    assert check.verdict == "NOT lossless: 1 of 1 runs diverged"
    reference_chars = len(run.counted("A")[0].result.text)
    shown = len("".join(hs.words(16)[:tokens]))
    assert check.divergences[0].ended == (f"this arm's output ends here ({shown} of the "
                                          f"reference's {reference_chars})")


@pytest.mark.timeout(60)
def test_a_run_that_lost_an_event_is_marked_and_not_compared(good):
    with hs.serving(hs.NotJsonEvent) as (url, _):
        run, summary = ab(good, url, prompts=2)
    check = summary.comparison("B").lossless
    assert (check.compared, check.identical, check.not_compared) == (0, 0, 2)
    assert "not JSON" in check.not_compared_why[0] or "not usable JSON" in check.not_compared_why[0]
    from specdeck.core.bench.live import check_output

    output = check_output(run.counted("A")[0], run.counted("B")[0], greedy=True)
    assert output.text == "not compared: lost data" and not output.differs


# -- failures that vanish -------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_an_arm_whose_runs_all_failed_is_counted_and_named(good):
    with hs.serving(hs.Status, status=500, body={"error": {"message": "model crashed"}}) \
            as (url, _):
        run, summary = ab(good, url, prompts=2, on_error="skip")
    b = summary.arm("B")
    assert (b.runs, b.failed_runs, b.all_failed) == (0, 2, True)
    assert "answered 500: model crashed" in b.errors[0]
    assert summary.failed_arms == ("B",)
    comparison = summary.comparison("B")
    assert not comparison.usable and "every measured run of arm B failed" in comparison.not_usable
    from specdeck.core.bench.report import markdown_summary

    text = markdown_summary(run, summary)
    assert "2 of 2 measured runs FAILED (every one: this arm measured nothing)" in text


# -- keys -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "hidden"), [
    ("http://h:1/v1?api-key=K1&x=1", "K1"),
    ("http://h:1/v1?apiKey=K2", "K2"),
    ("http://h:1/?x-api-key=K3", "K3"),
    ("http://h:1/?hf_token=K4", "K4"),
    ("http://h:1/?client_secret=K5", "K5"),
    ("http://h:1/?Authorization=K6", "K6"),
    ("alice:K7@h:1/v1", "K7"),
    ("http://alice:p%40ssK8@h:1", "K8"),
])
def test_secret_looking_query_values_and_passwords_are_never_shown(url, hidden):
    from specdeck.core.urls import redact_text, redact_url

    assert hidden not in redact_url(url)
    assert hidden not in Base.parse(url).shown
    assert hidden not in redact_text(f"Cannot reach {url if '://' in url else 'http://' + url}.")
    assert "x=1" in redact_url("http://h:1/v1?api-key=K1&x=1")


@pytest.mark.timeout(30)
def test_a_percent_encoded_password_is_sent_decoded_and_an_echo_of_it_is_masked():
    with hs.serving(hs.Echo) as (url, handler):
        base = Base.parse(url.replace("http://", "http://alice:p%40ss%20w0rd@"))
        with pytest.raises(ServerError) as caught:
            request_json(base, "GET", "/v1/models")
    import base64

    sent = handler.seen[-1][2]["Authorization"]
    assert base64.b64decode(sent.split()[1]).decode() == "alice:p@ss w0rd"
    said = str(caught.value)
    assert "refused the request (401)" in said
    for secret in (sent, sent.split()[1], "p@ss w0rd", "p%40ss%20w0rd"):
        assert secret not in said
    assert "***" in said


@pytest.mark.timeout(30)
def test_a_key_the_server_echoes_is_masked_in_errors_and_mid_stream():
    with hs.serving(hs.Echo, status=500) as (url, _):
        with pytest.raises(ServerError) as caught:
            request_json(Base.parse(url + "/?api-key=" + SECRET), "GET", "/v1/models",
                         api_key=SECRET)
    assert SECRET not in str(caught.value) and "answered 500" in str(caught.value)
    with hs.serving(hs.EchoStream) as (url, _):
        with pytest.raises(ServerError, match="reported an error mid-stream") as caught:
            list(stream_sse(Base.parse(url), "/v1/completions", {}, api_key=SECRET))
    assert SECRET not in str(caught.value)


# -- messages -------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("attrs", "says", "fix"), [
    ({"status": 503, "body": hs.LOADING}, r"/props answered 503 \(unavailable\): Loading model",
     "still loading its model"),
    ({"status": 500, "body": {"error": {"message": "CUDA error: out of memory"}}},
     r"/props answered 500: CUDA error: out of memory", "its own log"),
    ({"status": 502, "body": b"<html>Bad Gateway</html>"}, r"answered 502: <html>Bad Gateway",
     "its own log"),
    ({"status": 301, "body": b"", "extra_headers": {
        "Location": f"https://elsewhere.example:8443/v1?api-key={SECRET}"}},
     r"/props redirects \(301\) to https://elsewhere.example:8443/v1\?api-key=\*\*\*",
     "does not follow redirects"),
    ({"status": 302, "body": b""}, r"answered 302 \(a redirect\) without saying where",
     "not the LLM server's own address"),
])
def test_a_server_that_answers_an_error_everywhere_is_described_by_what_it_said(attrs, says, fix):
    with hs.serving(hs.Status, **attrs) as (url, _):
        with pytest.raises(ServerError, match=says) as caught:
            probe(url)
    assert fix in caught.value.fix
    assert SECRET not in str(caught.value)


@pytest.mark.timeout(30)
def test_300_response_headers_are_an_unreadable_answer_not_an_unknown_server():
    with hs.serving(hs.ManyHeaders) as (url, _):
        with pytest.raises(ServerError, match=r"cannot read \(got more than 100 headers\)"):
            probe(url)


@pytest.mark.timeout(30)
def test_a_server_that_needs_a_key_still_says_so(monkeypatch):
    with hs.serving(hs.Echo) as (url, _):
        with pytest.raises(ServerError, match="refused the request") as caught:
            probe(url, SECRET)
    assert SECRET not in str(caught.value) and "API key" in caught.value.fix
