"""Tuning a running TabbyAPI (core.tune.tabby) against the TabbyAPI stand-in
(tests/tabby_standin.py, which follows TabbyAPI's source) and a TabbyAPI folder built from
the real config_sample.yml files and real tokenizer fixtures: what it reads, which drafts it
tries and which it refuses, and why."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from specdeck.core.tune import tabby
from tabby_app import DRAFT, OTHER_FAMILY, TARGET, standin_main, tabby_folder
from tabby_standin import start_tabby


@pytest.fixture
def tabby_server():
    servers = []

    def start(**attrs):
        server, url = start_tabby(**attrs)
        servers.append(server)
        return url, server.RequestHandlerClass

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture(autouse=True)
def keys(monkeypatch):
    monkeypatch.setenv("SPECDECK_SERVER_API_KEY", "tabby-api-key")
    monkeypatch.setenv("SPECDECK_TABBY_ADMIN_KEY", "tabby-admin-key")


@pytest.mark.parametrize("branch", ["exl2-checkpoint", "main"])
def test_reads_what_tabbyapi_holds_and_where_its_drafts_are(tmp_path, tabby_server, branch):
    config = tabby_folder(tmp_path / "tabbyAPI", branch, draft=DRAFT)
    url, _ = tabby_server(branch=branch, model_name=TARGET, models=(TARGET, DRAFT))
    setup = tabby.read_setup(url, config)
    assert setup.model_name == TARGET
    assert setup.model_folder == tmp_path / "tabbyAPI" / "models" / TARGET
    assert setup.draft_dir == tmp_path / "tabbyAPI" / "models"
    assert setup.current_draft == DRAFT
    assert setup.main_branch is (branch == "main")
    assert setup.fingerprint is not None


@pytest.mark.parametrize("branch", ["exl2-checkpoint", "main"])
def test_candidates_are_the_drafts_this_branch_loads_and_that_share_the_tokenizer(
        tmp_path, tabby_server, branch):
    config = tabby_folder(tmp_path / "tabbyAPI", branch)
    url, _ = tabby_server(branch=branch, model_name=TARGET)
    usable, refused = tabby.draft_candidates(tabby.read_setup(url, config))
    assert [d.name for d in usable] == [DRAFT]
    assert usable[0].weight_bytes > 400_000_000
    why = {n.what: n.why for n in refused}
    assert OTHER_FAMILY in " ".join(why)  # another tokenizer: refused with the check's words
    wrong_format = next(w for what, w in why.items() if "Llama" not in what)
    assert ("EXL2 weights" if branch == "main" else "EXL3 weights") in wrong_format
    assert ("main loads EXL3" if branch == "main" else "exl2-checkpoint loads EXL2") \
        in wrong_format
    assert TARGET not in " ".join(why)  # the target is not its own draft


def test_a_model_it_does_not_hold_and_a_file_that_names_none_is_refused(tmp_path,
                                                                       tabby_server):
    config = tabby_folder(tmp_path / "tabbyAPI", "exl2-checkpoint")
    config.write_text(config.read_text().replace(f"model_name: {TARGET}", "model_name:"))
    url, _ = tabby_server(branch="exl2-checkpoint", model_name="")
    with pytest.raises(Exception, match="holds no model") as caught:
        tabby.read_setup(url, config)
    assert "model_name" in caught.value.fix


def test_a_draft_folder_that_is_missing_says_which_setting_to_fix(tmp_path, tabby_server):
    config = tabby_folder(tmp_path / "tabbyAPI", "exl2-checkpoint")
    shutil.rmtree(tmp_path / "tabbyAPI" / "models" / DRAFT)
    config.write_text(config.read_text().replace("  draft_model_dir: models",
                                                 "  draft_model_dir: no-such-dir"))
    url, _ = tabby_server(branch="exl2-checkpoint", model_name=TARGET)
    with pytest.raises(Exception, match="no-such-dir") as caught:
        tabby.draft_candidates(tabby.read_setup(url, config))
    assert "draft_model_dir" in caught.value.fix


def _managed(tmp_path, branch: str, draft: str | None = None):
    import sys

    config = tabby_folder(tmp_path / "tabbyAPI", branch, draft=draft)
    (config.parent / "main.py").write_text("# TabbyAPI\n")
    return tabby.read_install(config.parent, sys.executable)


def test_a_tabbyapi_it_starts_searches_draft_modes_and_k_on_main(tmp_path):
    setup = _managed(tmp_path, "main")
    assert setup.managed and setup.main_branch and setup.drafting == ()
    found = tabby.find(setup)
    assert [c.label for c in found.found] == [f"model {DRAFT}", "ngram"]
    assert any(n.what == "mtp" and "no MTP layers" in n.why for n in found.not_tried)
    cells = tabby.cells(setup, found.found[0], "m-")
    assert [c.label for c in cells] == [f"model {DRAFT} k={k}" for k in tabby.K_VALUES]
    assert cells[1].arm.server.tabby_launch.draft == (
        ("draft_mode", "model"), ("draft_model_name", DRAFT), ("draft_num_tokens", 4))
    assert cells[1].arm.drafter.num_draft_tokens == 4
    reference = tabby.reference_arm(setup)
    assert reference.server.tabby_launch.draft == (("draft_mode", "disabled"),)
    assert reference.drafter.kind.value == "none"


def test_a_running_tabbyapi_searches_its_drafts_and_says_why_not_the_modes(tmp_path,
                                                                          tabby_server):
    config = tabby_folder(tmp_path / "tabbyAPI", "main", draft=DRAFT)
    url, _ = tabby_server(branch="main", model_name=TARGET, models=(TARGET, DRAFT))
    setup = tabby.read_setup(url, config)
    assert setup.drafting == (f"draft_model_name={DRAFT}",)
    found = tabby.find(setup)
    assert [c.label for c in found.found] == [f"model {DRAFT}"]
    assert "--tabby-folder" in next(n.why for n in found.not_tried if n.what == "ngram")
    (cell,) = tabby.cells(setup, found.found[0], "m-")
    assert cell.arm.server.tabby.draft_model_name == DRAFT and cell.arm.server.url == url
    assert tabby.current_arm(setup, "C").server.tabby.draft_model_name == DRAFT


def test_exl2_checkpoint_drafts_four_so_k_is_not_searched(tmp_path):
    setup = _managed(tmp_path, "exl2-checkpoint", draft=DRAFT)
    found = tabby.find(setup)
    assert [c.label for c in found.found] == [f"model {DRAFT}"]
    (cell,) = tabby.cells(setup, found.found[0], "m-")
    assert cell.arm.server.tabby_launch.draft == (("draft_model_name", DRAFT),)
    assert tabby.reference_arm(setup).server.tabby_launch.draft == (("draft_model_name", ""),)
    assert tabby.current_arm(setup, "C").server.tabby_launch.draft == ()


def _tune(config: Path, *extra, steps: dict, home: Path):
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "specdeck", "tune", "--tabby-folder", str(config.parent),
         "--tabby-python", sys.executable, "--budget", "120s", "--per-suite", "2",
         "--max-new", "16", "--json", "-", *extra],
        capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        env={**os.environ, "SPECDECK_HOME": str(home),
             "SPECDECK_STANDIN_STEPS": json.dumps(steps)})


def test_tune_a_tabbyapi_it_starts_searches_modes_and_k_and_writes_the_winner(tmp_path,
                                                                             specdeck_home):
    """`specdeck tune --tabby-folder` end to end against the stand-in of TabbyAPI main's
    start-up: every draft mode and k it can run is a setting, the fastest on the tuning
    prompts (n-gram at k=4: the speeds are the test's choice) is verified on the held-out
    ones, written into config.yml (only its keys), and TabbyAPI then answers from the file."""
    import difflib

    config = tabby_folder(tmp_path / "tabbyAPI", "main")
    standin_main(config.parent, "main")
    before = config.read_text()
    steps = {"none": 0.012, "ngram:2:4": 0.003, "ngram:2:2": 0.008, "ngram:2:8": 0.008,
             **{f"model:{DRAFT}:{k}": 0.010 for k in tabby.K_VALUES}}
    done = _tune(config, "--yes", steps=steps, home=specdeck_home)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    labels = {t["candidate"] for t in data["tried"]}
    assert labels == {f"model {DRAFT}", "ngram"}
    assert data["decision"]["apply"] and data["decision"]["flags"] == [
        "draft_mode=ngram", "draft_num_tokens=4"]
    assert data["verification"]["lossless"] is True
    assert "answered" in data["applied"]["relaunch"] and not data["applied"]["rolled_back"]
    # proved on one TabbyAPI started from the file (none without the draft beside it), counted
    assert data["applied"]["servers_started"] == data["servers_started_to_prove"] == 1
    changed = sorted(ln for ln in difflib.unified_diff(before.splitlines(),
                                                       config.read_text().splitlines(),
                                                       lineterm="", n=0)
                     if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    assert changed == sorted(["-  draft_mode: model", "+  draft_mode: ngram",
                              "-  draft_num_tokens:", "+  draft_num_tokens: 4"])
    assert (config.parent / "config.yml.bak").read_text() == before
    # What it wrote can be rolled back (the page's Roll back): the fingerprint it recorded
    # is the file's as written, and the backup's bytes come back.
    from specdeck.core.tune.apply import Applied, roll_back

    written = data["applied"]
    assert written["written_fingerprint"]
    back = roll_back(Applied(config, written["flags"], written["diff"], written=True,
                             backup=Path(written["backup"]),
                             written_fingerprint=written["written_fingerprint"],
                             backup_fingerprint=written["backup_fingerprint"]))
    assert back.rolled_back and config.read_text() == before


def test_tune_a_tabbyapi_writes_nothing_when_no_setting_is_faster(tmp_path, specdeck_home):
    config = tabby_folder(tmp_path / "tabbyAPI", "main")
    standin_main(config.parent, "main")
    before = config.read_bytes()
    done = _tune(config, "--yes", steps={"none": 0.002, "default": 0.008}, home=specdeck_home)
    assert done.returncode == 1, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert not data["decision"]["apply"] and "nothing was written" in data["decision"]["why"]
    assert config.read_bytes() == before and not (config.parent / "config.yml.bak").exists()


def _saved_tabby(setup, flags) -> dict:
    """A saved tune of ``setup`` (what its tune.json keeps) whose winner is ``flags``."""
    from specdeck.core.tune import report
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult

    result = TuneResult(setup, TuneOptions(), (), (), None, None,
                        Decided(Candidate("ngram"), tuple(flags), True, "verified"))
    return json.loads(report.shown_json(result))


def test_a_saved_tabby_tune_is_read_again_trusting_none_of_its_file(tmp_path, tabby_server,
                                                                      monkeypatch):
    """--apply-saved of a TabbyAPI tune: the Python that runs it is the install's own (or the
    command line's), never the file's; a running one's URL must be the one its config.yml
    serves on (the admin key goes there); a draft model must be a folder of its draft
    directory; every winner's key is a draft setting."""
    import sys

    from specdeck.core.errors import SpecDeckError
    from specdeck.core.tune.apply import _setup_now
    from specdeck.core.tune.tabby import checked_saved_settings

    setup = _managed(tmp_path, "main")
    saved = _saved_tabby(setup, ["draft_mode=ngram"])["setup"]
    saved["python"] = str(tmp_path / "planted-python")
    (tmp_path / "tabbyAPI" / "venv" / "bin").mkdir(parents=True)
    venv_python = tmp_path / "tabbyAPI" / "venv" / "bin" / "python"
    venv_python.symlink_to(sys.executable)
    now = _setup_now(saved, "tabbyapi")
    assert now.python == str(venv_python) and now.fingerprint == setup.fingerprint
    assert _setup_now(saved, "tabbyapi", python=sys.executable).python == sys.executable

    for flags, words in ((["draft_model_name=../../../etc"], "is not a folder in"),
                         (["draft_model_name=nowhere"], "is not a folder in"),
                         (["draft_mode=ngram", "model_name=evil"], "not a draft_model setting"),
                         (["evil=draft_mode=ngram"], "not a draft_model setting"),
                         (["draft_num_tokens=8;rm"], "draft_num_tokens")):
        with pytest.raises(SpecDeckError, match=words):
            checked_saved_settings(now, flags)
    assert checked_saved_settings(now, [f"draft_model_name={DRAFT}", "draft_num_tokens=4"])

    config = tabby_folder(tmp_path / "running", "main")
    url, _ = tabby_server(branch="main", model_name=TARGET)
    running = tabby.read_setup(url, config)
    config.write_text(config.read_text().replace("  port: 5000\n",
                                                 f"  port: {url.rsplit(':', 1)[1]}\n", 1))
    saved = _saved_tabby(running, ["draft_mode=ngram"])["setup"]
    assert _setup_now(saved, "tabbyapi").url == url
    saved["url"] = "http://attacker.example:5000"
    with pytest.raises(SpecDeckError, match="sends its keys only there"):
        _setup_now(saved, "tabbyapi")
    saved["url"], saved["api_key_env"] = url, "AWS_SECRET_ACCESS_KEY"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-for-tabbyapi")
    assert _setup_now(saved, "tabbyapi").api_key_env is None  # the file's name is not used


@pytest.mark.parametrize("verdict", ["compatible", "compatible_with_warnings", "incompatible",
                                     "inconclusive"])
def test_a_draft_is_tried_by_one_rule_whichever_server_runs_it(tmp_path, tabby_server,
                                                                monkeypatch, verdict):
    """TabbyAPI's draft folders and llama-server's draft GGUFs are refused alike: what the
    compatibility check does not clear (incompatible, or undecided), in its words."""
    from types import SimpleNamespace

    from specdeck.core import compat
    from specdeck.core.compat.report import CompatVerdict
    from specdeck.core.tune import candidates

    said = CompatVerdict(verdict)
    monkeypatch.setattr(compat, "check", lambda *a, **k: SimpleNamespace(
        verdict=said, summary=f"the check says {verdict}"))
    config = tabby_folder(tmp_path / "tabbyAPI", "exl2-checkpoint")
    url, _ = tabby_server(branch="exl2-checkpoint", model_name=TARGET)
    usable, refused = tabby.draft_candidates(tabby.read_setup(url, config))
    by_tabby = {n.what: n.why for n in refused}.get(f"draft {DRAFT}")
    gguf = Path(__file__).parent.parent / "data" / "tune" / "SmolLM2-135M-Instruct-header.gguf"
    setup = SimpleNamespace(target=tmp_path / "target.gguf",
                            facts=SimpleNamespace(weight_bytes=1 << 40))
    on_disk, not_tried = candidates._draft_models(setup, [gguf], None)
    by_llama = {n.what: n.why for n in not_tried}.get(f"draft-simple {gguf.name}")
    expected = None if said in (CompatVerdict.COMPATIBLE, CompatVerdict.WARNINGS) \
        else f"the check says {verdict}"
    assert by_tabby == by_llama == expected
    assert (DRAFT in [d.name for d in usable]) == bool(on_disk) == (expected is None)


def test_the_servers_a_tune_started_are_counted_under_their_kinds_title(tmp_path, llama_bin):
    """The report and the Tune page count the servers a tune started by their kind's title
    (core.servers.kinds.TRAITS): TabbyAPI for a TabbyAPI setup, llama-server for the others
    (a llama-swap model is tuned on llama-servers started from its cmd)."""
    from specdeck.core.tune.apply import Applied
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.live import result_lines
    from specdeck.core.tune.report import markdown
    from specdeck.core.tune.run import Decided, TuneOptions, TuneResult
    from specdeck.core.tune.setup import demo, from_swap

    llama = demo(llama_bin)
    swap = tmp_path / "config.yaml"
    swap.write_text(f"models:\n  smol:\n    cmd: {llama_bin} --port ${{PORT}} -m {llama.target}"
                    " -t 1\n", encoding="utf-8")
    for setup, title in ((_managed(tmp_path, "main"), "TabbyAPI"),
                         (llama, "llama.cpp llama-server"),
                         (from_swap(swap, "smol"), "llama.cpp llama-server")):
        result = TuneResult(setup, TuneOptions(), (), (), None, None,
                            Decided(Candidate("ngram"), (), False, "nothing was faster"),
                            applied=Applied(None, "", servers_started=1), servers_started=3)
        what, count = f"Servers started ({title})", "3, and 1 to prove the file as written"
        # under the Time heading even when no phase was timed (it hung under Result)
        assert f"\n## Time\n\n- {what}: {count}\n" in markdown(result)
        assert (what, count) in result_lines(result)
