"""`specdeck tune` against the real pinned llama-server and the demo GGUF: the whole loop,
a draft found on the local test Hub (tests/hubserver.py), downloaded within the budget and
measured, writing a winner into a llama-swap config and proving it from the file, rolling
back a winner that does not run from the file, and leaving the user's file alone when
cancelled.

Which setting wins on a shared 2-core machine is a question of its load, so these tests check
what must hold whatever wins: every candidate the binary offers is tried or said why not,
every figure comes with its prediction, nothing is written unless verified, and what is
written runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hubserver import memory_keyring  # noqa: F401 - a fixture
from processes import running
from swap_samples import tune_config

pytestmark = pytest.mark.slow


def test_tune_runs_the_whole_loop_on_the_demo(llama_bin, demo_gguf, tmp_path, specdeck_home):
    from specdeck.core.servers.llama_server import binary_help

    done = subprocess.run(
        [sys.executable, "-m", "specdeck", "tune", "--demo", "--llama-server", str(llama_bin),
         "--budget", "90s", "--per-suite", "2", "--max-new", "16", "--json", "-",
         "--download-budget", "0",
         "--report", str(tmp_path / "report"), "--", "-t", "1", "-c", "1024"],
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert done.returncode in (0, 1), done.stderr  # 1: nothing verified better, nothing written
    data = json.loads(done.stdout)
    offered = [t for t in binary_help(llama_bin).spec_types if t != "none"]
    named = {t["candidate"].split()[0] for t in data["tried"]} | {n["what"].split()[0]
                                                                  for n in data["not_tried"]}
    assert set(offered) <= named  # every drafting method the binary lists: tried, or why not
    assert all(t["predicted"]["low"] <= t["predicted"]["speedup"] <= t["predicted"]["high"]
               for t in data["tried"])
    assert any(t["measured"] is not None for t in data["tried"])
    assert data["decision"]["why"] and data["phase_s"]["search"] > 0
    if data["verification"] is not None:  # the winner was checked on the held-out prompts
        assert data["verification"]["summary"]["reference"] == "A"
    report = tmp_path / "report"
    assert "## Candidates: predicted and measured" in (report / "tune.md").read_text()
    assert json.loads((report / "tune.json").read_text())["decision"] == data["decision"]
    assert (report / "runs" / "01" / "report.json").is_file()
    assert data["applied"] is None or data["applied"]["path"] is None  # the demo owns no file


HUB_REPO = "testorg/SmolLM2-135M-Instruct-GGUF"
HUB_FILE = "SmolLM2-135M-Instruct-Q4_0.gguf"


@pytest.fixture(scope="module")
def hub_draft(llama_bin, demo_gguf, tmp_path_factory) -> bytes:
    """The demo model requantized to Q4_0 by the pinned llama-quantize: the demo's tokenizer,
    a runnable draft, 92 MB against the target's 97 MB of weights."""
    out = tmp_path_factory.mktemp("hub-draft") / HUB_FILE
    subprocess.run([str(llama_bin.parent / "llama-quantize"), "--allow-requantize",
                    str(demo_gguf), str(out), "Q4_0"], check=True, capture_output=True,
                   timeout=300)
    return out.read_bytes()


def test_tune_downloads_a_hub_draft_within_the_budget_and_measures_it(
        llama_bin, demo_gguf, hub_draft, tmp_path, specdeck_home, memory_keyring):  # noqa: F811
    from hubserver import FakeHub, FakeRepo

    # An earlier tune on this machine measured this draft (then it was deleted): the history
    # ranks it first, so the short budget measures it before the n-gram settings (the search
    # that measures every candidate, --no-replay: with the replay, the downloaded draft is
    # predicted from its teacher-forced pass and measured only if it is a finalist). Without a
    # history, a draft nearly as large as its target is predicted slower than no drafting
    # on a CPU and is not downloaded (tests/core/test_tune.py checks that rule).
    label = f"draft-simple {HUB_FILE}"
    history = specdeck_home / "data" / "tune-history.jsonl"
    history.parent.mkdir(parents=True, exist_ok=True)
    history.write_text(json.dumps({"target": demo_gguf.name, "candidate": label,
                                   "speedup": 1.2, "pairs": 12}) + "\n")
    library = tmp_path / "library"
    repo = FakeRepo(HUB_REPO, {"main": {"README.md": b"# SmolLM2 GGUF\n", HUB_FILE: hub_draft}},
                    tags=("gguf", "llama"))
    with FakeHub([repo]) as hub:
        done = subprocess.run(
            [sys.executable, "-m", "specdeck", "tune", "--demo", "--llama-server", str(llama_bin),
             "--budget", "40s", "--per-suite", "2", "--max-new", "16", "--json", "-",
             "--download-budget", "0.5", "--endpoint", hub.url, "--download-dir", str(library),
             "--yes", "--no-replay", "--", "-t", "1", "-c", "1024"],
            capture_output=True, text=True, timeout=900,
            env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
        whole_gets = [r for r in hub.file_requests("GET") if not r.range and r.origin == "cdn"]
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    [download] = data["downloads"]
    assert download["status"] == "downloaded", download
    assert download["bytes"] == download["downloaded_bytes"] == len(hub_draft)
    installed = library / "SmolLM2-135M-Instruct-GGUF-Q4_0" / HUB_FILE
    assert download["path"] == str(installed) and installed.read_bytes() == hub_draft
    assert len(whole_gets) == 1  # the header was range-read first, the file fetched once
    [tried] = [t for t in data["tried"] if t["candidate"] == label]
    assert tried["hub"]["repo_id"] == HUB_REPO and tried["download_bytes"] == len(hub_draft)
    assert tried["predicted"]["source"].startswith("history")
    assert tried["measured"] is not None  # measured by the real llama-server with -md
    # What it measured is kept for the next prediction of a similar pair: the device, the
    # target's family, and the share of drafts llama-server reported accepted at that k.
    entries = [json.loads(line) for line in history.read_text().splitlines()[1:]]
    mine = [e for e in entries if e["candidate"] == label]
    # A figure that is not this draft's result is shown, never learned from: the output
    # changed, or no run's output could be checked (a busy machine lost data), or the
    # verification refuted it. The report says which; the history must not hold it.
    why_not = tried["not_a_result"] or tried["refuted"] or tried["not_drafting"]
    if why_not:
        assert mine == [], why_not
        if tried["not_a_result"] or tried["refuted"]:
            assert "not learned from" in done.stderr
        return
    [mine] = mine
    assert (mine["device"], mine["kind"], mine["family"]) == ("cpu", "draft", "smollm2")
    assert 0 < mine["acceptance"] <= 1 and mine["k"] in (4, 8, 16)
    assert mine["speedup"] == pytest.approx(tried["measured"], abs=1e-4)
    # Whether another program disturbed the runs is the machine's business (the suite runs
    # on two workers): the history keeps what the search judged.
    assert mine["pairs"] == tried["pairs"] > 0 and mine["disturbed"] is tried["disturbed"]
    assert data["phase_s"]["download"] > 0 and data["phase_s"]["search"] > 0
    assert "## Downloads" in done.stderr and f"| {label} | {HUB_REPO} |" in done.stderr


def _verified(setup, flags) -> object:
    """A tune result whose verification said apply ``flags`` (what decide() returns for a
    winner verified faster with its output unchanged; decide itself is tested in
    tests/core/test_tune.py)."""
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult

    options = TuneOptions(suites=("grounded",), prompts_per_suite=2, max_new_tokens=48)
    return TuneResult(setup, options, (), (), None, None,
                      Decided(Candidate("ngram-simple"), flags, True, "verified"))


def test_a_verified_winner_is_written_and_runs_from_the_file(llama_bin, demo_gguf, tmp_path):
    """...proved on the server as the file says, alone: one llama-server of the target up at
    a time (on a GPU a second copy beside it may not fit, and the winner would be rolled
    back for it), and the start counted in what the tune reports."""
    from specdeck.core.tune.apply import apply
    from specdeck.core.tune.report import servers_text
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    original = config.read_text()
    flags = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2")
    verified = _verified(from_swap(config, "smol"), flags)
    up: list[int] = []  # llama-servers of the target running, while the file is proved
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            up.append(len(running(lambda cmd: str(demo_gguf) in cmd)))
            done.wait(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        applied = apply(verified)
    finally:
        done.set()
        watcher.join()
    assert applied.written and not applied.rolled_back, applied.why
    assert "answered and drafted" in applied.relaunch
    assert max(up) == 1 and applied.servers_started == 1
    assert servers_text(verified.with_applied(applied)) == \
        "Servers started (llama.cpp llama-server): 0, and 1 to prove the file as written"
    text = config.read_text()
    assert "--spec-type ngram-simple --spec-ngram-simple-size-n 2" in text
    assert text.startswith("# my llama-swap setup\n")  # only the flags changed
    assert (tmp_path / "config.yaml.bak").read_text() == original


def test_an_earlier_tunes_winner_is_applied_from_its_saved_report(llama_bin, demo_gguf,
                                                                   tmp_path, specdeck_home):
    """`tune --apply-saved`: the winner a tune verified (and the user declined, or ran with
    --dry-run) is written later without tuning again, proved from the file by the real
    llama-server; refused when the config changed since that tune read it, and when that
    tune verified nothing."""
    from dataclasses import replace

    from specdeck.core.tune import report
    from specdeck.core.tune.run import Decided
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    flags = ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2")
    verified = _verified(from_swap(config, "smol"), flags)
    saved = tmp_path / "saved"
    report.write(verified, saved)
    refused = tmp_path / "refused.json"
    refused.write_text(json.dumps(report.to_json(replace(verified, decision=Decided(
        None, flags, False, "ngram-simple was not clearly faster than no drafting")))))

    def apply_saved(target, *more):
        return subprocess.run([sys.executable, "-m", "specdeck", "tune", "--apply-saved",
                               str(target), *more], capture_output=True, text=True,
                              timeout=300, env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))

    original = config.read_bytes()
    done = apply_saved(refused, "--yes")
    assert done.returncode == 2 and "verified no winner" in done.stderr
    assert "not clearly faster" in done.stderr and config.read_bytes() == original
    done = apply_saved(saved, "--dry-run")
    assert done.returncode == 1 and "+" in done.stderr and config.read_bytes() == original
    assert "--dry-run: nothing was written." in done.stdout  # the report says why, too
    assert "## Candidates" not in done.stdout and "## Time" not in done.stdout

    config.write_bytes(original + b"# edited since the tune\n")
    done = apply_saved(saved, "--yes")
    assert done.returncode == 2 and "changed on disk since SpecDeck's tune read it" in done.stderr
    assert config.read_bytes() == original + b"# edited since the tune\n"

    config.write_bytes(original)
    done = apply_saved(saved / "tune.json", "--yes")
    assert done.returncode == 0, done.stderr
    assert "Verified by the tune saved in" in done.stderr
    assert "answered and drafted" in done.stdout
    assert "--spec-type ngram-simple --spec-ngram-simple-size-n 2" in config.read_text()
    assert (tmp_path / "config.yaml.bak").read_bytes() == original
    assert "answered and drafted" in done.stderr  # said where the user looks, not only stdout
    written = config.read_bytes()
    done = apply_saved(saved, "--yes")  # again: already there, not "changed on disk"
    assert done.returncode == 1 and "already has these flags" in done.stderr, done.stderr
    assert config.read_bytes() == written


def test_a_winner_that_does_not_run_from_the_file_is_rolled_back(llama_bin, demo_gguf, tmp_path):
    from specdeck.core.tune.apply import apply
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    original = config.read_bytes()
    missing = tmp_path / "no-such-draft.gguf"
    applied = apply(_verified(from_swap(config, "smol"),
                              ("--spec-type", "draft-simple", "-md", str(missing))))
    assert applied.written and applied.rolled_back
    assert "did not run from the saved file" in applied.relaunch
    assert config.read_bytes() == original


def test_cancel_during_the_search_leaves_the_users_file_as_it_was(llama_bin, demo_gguf, tmp_path):
    from specdeck.core.bench.runner import RunFinished
    from specdeck.core.tune.run import TuneOptions, tune
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf, "--spec-type ngram-mod")
    original = config.read_bytes()
    cancel = threading.Event()

    def on_event(event):
        if isinstance(event, RunFinished):
            cancel.set()

    result = tune(from_swap(config, "smol"), TuneOptions(budget_s=120, prompts_per_suite=2,
                                                        max_new_tokens=16),
                  on_event=on_event, cancel=cancel)
    assert result.cancelled and not result.decision.apply
    assert "Cancelled" in result.decision.why
    assert any(n.startswith("Cancelled in round 1 of the ") for n in result.search.notes)
    assert config.read_bytes() == original and not (tmp_path / "config.yaml.bak").exists()


def test_cancel_while_the_candidates_are_read_starts_nothing(llama_bin, demo_gguf, tmp_path):
    """Cancel pressed in the first phase (reading the binary's --help and the draft
    folders): no server starts, no download, nothing is written, and the answer says when."""
    from specdeck.core.tune.run import Phase, TuneOptions, tune
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf, "--spec-type ngram-mod")
    original = config.read_bytes()
    before = _llama_servers(demo_gguf)
    cancel = threading.Event()
    phases = []

    def on_event(event):
        if isinstance(event, Phase):
            phases.append(event.name)
            cancel.set()

    result = tune(from_swap(config, "smol"), TuneOptions(budget_s=60, prompts_per_suite=2,
                                                        max_new_tokens=16),
                  on_event=on_event, cancel=cancel)
    assert result.cancelled and not result.decision.apply
    assert result.decision.why == "Cancelled while reading the candidates: nothing was written."
    assert phases == ["candidates"] and result.search is None and not result.downloads
    assert len(_llama_servers(demo_gguf)) <= len(before)
    assert config.read_bytes() == original and not (tmp_path / "config.yaml.bak").exists()


def test_cancel_during_a_download_stops_the_tune_and_leaves_everything_as_it_was(
        llama_bin, demo_gguf, tmp_path, specdeck_home, memory_keyring):  # noqa: F811
    """The real binary's --help lists draft-simple; the local Hub serves the demo's header as
    a draft (tests/data/tune): it is found, checked, and cancelled mid-download, before any
    server starts."""
    from hubserver import FakeHub, FakeRepo
    from specdeck.core.hub.install import find_partial_installs
    from specdeck.core.tune.hub import library_folders
    from specdeck.core.tune.run import Phase, TuneOptions, tune
    from specdeck.core.tune.setup import from_swap

    header = (Path(__file__).parent.parent / "data" / "tune"
              / "SmolLM2-135M-Instruct-header.gguf").read_bytes()
    config = tune_config(tmp_path, llama_bin, demo_gguf, "--spec-type ngram-mod")
    original = config.read_bytes()
    library = tmp_path / "library"
    cancel = threading.Event()
    stalls = []
    name = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
    repo = FakeRepo(HUB_REPO, {"main": {name: header}}, tags=("gguf",))

    def on_event(event):
        if isinstance(event, Phase) and event.name == "download":
            # From here on the Hub holds the file half-sent (the check before read its header
            # whole) until the tune is cancelled there: Cancel lands mid-download however
            # fast the machine is.
            stall = hub.stall(name, at=len(header) // 2)
            stalls.append(stall)
            threading.Thread(target=lambda: stall.reached.wait(60) and cancel.set(),
                             daemon=True).start()

    with FakeHub([repo]) as hub:
        try:
            result = tune(from_swap(config, "smol"),
                          TuneOptions(budget_s=60, prompts_per_suite=2, max_new_tokens=16,
                                      download_budget=1 << 30, hub_endpoint=hub.url,
                                      download_dir=library, memory_bytes=8 << 30),
                          on_event=on_event, cancel=cancel)
            held = [stall.reached.is_set() for stall in stalls]
        finally:
            for stall in stalls:
                stall.reached.set()  # its waiter ends, whatever happened
                stall.release()
    assert held == [True]  # the download was cut where the Hub held it
    assert result.cancelled and not result.decision.apply and result.search is None
    assert result.decision.why == "Cancelled during the downloads: nothing was written."
    [download] = result.downloads
    assert download.status == "cancelled" and "resumes" in download.why
    assert library_folders(library) == []  # no half model that looks installed
    assert [p.repo_id for p in find_partial_installs(library)] == [HUB_REPO]
    assert config.read_bytes() == original and not (tmp_path / "config.yaml.bak").exists()


def _llama_servers(gguf: Path) -> list:
    return running(lambda cmdline: "llama-server" in os.path.basename(cmdline[0])
                   and str(gguf) in cmdline)


def test_a_server_that_dies_mid_search_is_noted_and_the_others_go_on(llama_bin, demo_gguf,
                                                                     tmp_path):
    """The first drafting setting's llama-server is killed in its first run: that setting is
    noted as not measured, with why; the search goes on with the others; the user's file is
    untouched unless a winner was verified; no llama-server is left running."""
    from specdeck.core.bench.runner import RunStarted
    from specdeck.core.tune.run import TuneOptions, tune
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf)
    original = config.read_bytes()
    before = {p.pid for p in _llama_servers(demo_gguf)}
    killed: list[str] = []

    def on_event(event):
        if killed or not isinstance(event, RunStarted) or event.slot.arm.name == "A":
            return
        for process in _llama_servers(demo_gguf):
            if process.pid not in before and "--spec-type" in process.cmdline():
                killed.append(event.slot.arm.name)
                process.kill()
                return

    result = tune(from_swap(config, "smol"), TuneOptions(budget_s=90, prompts_per_suite=2,
                                                        max_new_tokens=16, replay=False),
                  on_event=on_event)
    assert killed, "no drafting server was running to kill"
    notes = " ".join(result.search.notes)
    assert "could not be measured" in notes  # the killed setting, said so
    measured = {r.cell.arm.name for r in result.search.rows}
    assert measured - set(killed)  # the other settings were measured
    assert result.decision.why
    if not result.decision.apply:
        assert config.read_bytes() == original
    assert {p.pid for p in _llama_servers(demo_gguf)} <= before


def test_a_budget_that_runs_out_mid_round_decides_from_what_was_measured(llama_bin, demo_gguf,
                                                                         tmp_path, monkeypatch):
    """A budget of seconds: the search stops starting settings once it is spent and says so
    (no plan of the search starts after its deadline has been seen passed); what it measured
    by then goes to the verification on held-out prompts (the only judge of what is
    written), or the decision says why nothing was; and the file is written only when a
    winner was verified."""
    from specdeck.core.bench import grid
    from specdeck.core.bench.runner import PlanStarted
    from specdeck.core.tune.llama_server import candidate_cells
    from specdeck.core.tune.run import Phase, TuneOptions, tune
    from specdeck.core.tune.setup import from_swap

    seen: list[str] = []
    """In order: "plan" for each plan started, "out of time" each time the search saw its
    deadline passed, "verify" when the verification began."""
    real_stop = grid._stop

    def stop(cancel, deadline):
        stopped = real_stop(cancel, deadline)
        if stopped and not cancel.is_set():
            seen.append("out of time")
        return stopped

    def on_event(event):
        if isinstance(event, PlanStarted):
            seen.append("plan")
        elif isinstance(event, Phase) and event.name == "verify":
            seen.append("verify")

    monkeypatch.setattr(grid, "_stop", stop)
    config = tune_config(tmp_path, llama_bin, demo_gguf, "--spec-type ngram-mod")
    original = config.read_bytes()
    result = tune(from_swap(config, "smol"), TuneOptions(budget_s=4, prompts_per_suite=2,
                                                        max_new_tokens=16, replay=False),
                  on_event=on_event)
    assert any(n.startswith("The time budget ran out in round 1 of ")
               for n in result.search.notes), result.search.notes
    search = seen[:seen.index("verify")] if "verify" in seen else seen
    assert "out of time" in search  # the deadline stopped the search ...
    assert "plan" not in search[search.index("out of time"):]  # ... and nothing started after
    cells = [c for t in result.tried for c in candidate_cells(result.setup, t.candidate)]
    assert 0 < len(result.search.rows) < len(cells)  # some measured, the rest never started
    # the settings never started are named, so they do not look as if never candidates
    never = next(n for n in result.search.notes if n.startswith("Not measured"))
    measured = {r.cell.arm.name for r in result.search.rows}
    assert all(c.label in never for c in cells if c.arm.name not in measured)
    if result.search.best is None:
        assert result.verification is None and "budget ran out" in result.decision.why
    else:  # the best of what was measured, judged on the held-out prompts
        assert result.verification is not None and "verify" in seen
    if not result.decision.apply:
        assert config.read_bytes() == original and not (tmp_path / "config.yaml.bak").exists()


def test_the_live_view_follows_rounds_run_one_setting_or_all_side_by_side(llama_bin):
    """The Tune page's reducer (core.tune.live) on the plans run_grid starts: round 1 runs a
    plan per setting, a later round may run every setting left in one plan beside the
    reference. Each setting counts its rounds either way, and the round line says which."""
    from specdeck.core.bench.grid import RoundStarted
    from specdeck.core.bench.plan import BenchPlan
    from specdeck.core.bench.runner import PlanStarted, build_schedule, choose_prompts
    from specdeck.core.tune import setup as tune_setup
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.live import SetupRead, TuneLive
    from specdeck.core.tune.llama_server import candidate_cells, reference_arm
    from specdeck.core.tune.predict import Prediction
    from specdeck.core.tune.run import CandidatesFound, Phase

    setup = tune_setup.demo(llama_bin, ("-t", "1"))
    candidate = Candidate("ngram-mod")
    cells = candidate_cells(setup, candidate)
    live = TuneLive()
    for event in (SetupRead(setup), CandidatesFound(
            ((candidate, Prediction(1.1, 0.9, 1.4, "theory")),), ()),
                  Phase("search", "16 settings")):
        live.apply(event)

    def started(*arms) -> None:
        plan = BenchPlan(engine="server", model=str(setup.target),
                         arms=(reference_arm(setup), *arms), suites=("code",), max_prompts=1,
                         repeats=1, warmup=0)
        prompts = choose_prompts(plan)
        live.apply(PlanStarted(plan, prompts, build_schedule(plan, prompts), None))

    names = tuple(c.arm.name for c in cells)
    live.apply(RoundStarted(1, 2, names))
    for cell in cells:
        started(cell.arm)
    assert live.round_text().startswith(f"Round 1: setting {len(cells)} of this round, "
                                        f"{cells[-1].label}")
    started(cells[0].arm)  # a disturbed pair run again: still round 1, still 3 settings
    assert live.round_text().startswith(f"Round 1: setting {len(cells)} of this round")
    live.apply(RoundStarted(2, 2, names[:2]))
    started(*(c.arm for c in cells[:2]))
    assert live.round_text().startswith("Round 2: the 2 settings left, side by side")
    assert [live.cells[c.arm.name].rounds for c in cells] == [2, 2, 1]


LAST_YEAR = "-md {gguf} --draft-max 8 --flash-attn"
"""The seed's own llama-swap config's style: a draft model alone, --draft-max, a bare -fa."""


def test_last_years_flags_are_tuned_as_migrated_and_the_migration_is_written(
        llama_bin, demo_gguf, tmp_path, specdeck_home):
    """Issue 43: such a cmd ended the tune in a second ("No setting could be measured ...
    Fix the arm's flags" for every setting). The migration is part of the tune: every setting
    and the current one are measured as migrated, the report says so, and --yes writes it."""
    from specdeck.core.tune.setup import from_swap

    config = tune_config(tmp_path, llama_bin, demo_gguf, LAST_YEAR.format(gguf=demo_gguf))
    setup = from_swap(config, "smol")
    assert any(m.startswith("--draft-max was removed") for m in setup.migration)
    assert "--flash-attn" in setup.flags and setup.flags[setup.flags.index("--flash-attn") + 1] \
        == "on"
    assert ("--spec-type", "draft-simple") == tuple(setup.drafting[-2:])
    done = subprocess.run(
        [sys.executable, "-m", "specdeck", "tune", "--swap-config", str(config), "--model",
         "smol", "--budget", "40s", "--per-suite", "2", "--max-new", "16", "--json", "-",
         "--download-budget", "0", "--yes"],
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    assert data["setup"]["migration"] == list(setup.migration)
    assert any("measured as migrated" in n for n in data["notes"])
    assert any(t["measured"] is not None for t in data["tried"])  # settings were measured
    assert not any("could not be measured" in n for n in data["search"]["notes"])
    assert not re.search(r"\barms?\b", done.stderr, re.IGNORECASE)  # SpecDeck's word, not theirs
    text = config.read_text()
    assert "--draft-max" not in text and "--flash-attn on" in text  # written with --yes
    assert data["applied"]["written"] and "--flash-attn on" in data["applied"]["diff"]
