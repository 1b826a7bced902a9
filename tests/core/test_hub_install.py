"""Installing EXL2 variants from the fake Hub: progress, resume, cancel, verification, safety.

Every test talks HTTP to a real server on 127.0.0.1 (tests/hubserver.py) serving real
safetensors files and the real tokenizer/config fixtures, and checks the installed bytes
against the served bytes.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
import time

import pytest
from hubserver import (  # noqa: F401 - fake_hub and memory_keyring are fixtures
    CODE_REPO,
    EVIL_REPO,
    SOLO_REPO,
    TINY_REPO,
    exl2_branch,
    fake_hub,
    memory_keyring,
)
from conftest import MODELS

from specdeck.core.errors import CancelledError
from specdeck.core.hub import (
    HubConnectionError,
    HubError,
    InstallBusyError,
    InstallConflictError,
    InsufficientSpaceError,
    IntegrityError,
    RetryPolicy,
    RevisionNotFoundError,
    UnsafeRepoError,
    discard_partial,
    find_partial_installs,
    install,
    plan_install,
    read_marker,
    verify_installed,
)
from specdeck.core.models import scan_models

FAST = RetryPolicy(first_delay_s=0.01, max_delay_s=0.05)
WEIGHTS = "output.safetensors"


def served(hub, repo=TINY_REPO, branch="4.0bpw") -> dict[str, bytes]:
    return hub.repos[repo].branches[branch]


def assert_same_files(folder, expected: dict[str, bytes]) -> None:
    for path, data in expected.items():
        assert (folder / path).read_bytes() == data, path


def visible(dest) -> list[str]:
    return sorted(p.name for p in dest.iterdir() if not p.name.startswith("."))


def part_bytes(dest) -> int:
    return sum(p.stat().st_size for p in dest.glob(".*.specdeck-staging/parts/*.part"))


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def run_in_thread(fn, *args, **kwargs):
    outcome: dict = {}

    def target():
        try:
            outcome["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    return thread, outcome


# ---------------------------------------------------------------------------------------
class Ticking:
    """A clock that moves a quarter of a second at every reading: which snapshots an install
    reports, and the rate and time left they give, depend on its chunks, never on the
    machine's pace (the Hub was throttled for this once; a loaded machine then saw no
    snapshot mid-file)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.25
        return self.now


def test_install_reports_progress_and_lands_verified_files(fake_hub, tmp_path, monkeypatch):
    import importlib
    from functools import partial

    from specdeck.core.hub.progress import ProgressTracker

    module = importlib.import_module("specdeck.core.hub.install")
    monkeypatch.setattr(module, "ProgressTracker", partial(ProgressTracker, clock=Ticking()))
    events = []
    result = install(TINY_REPO, "8.0bpw", tmp_path, endpoint=fake_hub.url, progress=events.append)

    data = served(fake_hub, branch="8.0bpw")
    target = tmp_path / "TinyLlama-1.1B-Chat-v1.0-exl2-8.0bpw"
    assert result.status == "installed"
    assert result.path == target
    assert visible(tmp_path) == [target.name]
    assert not any(tmp_path.glob(".*"))  # no staging or lock left behind
    assert_same_files(target, data)
    assert result.total_bytes == sum(len(d) for d in data.values())
    assert result.downloaded_bytes == result.total_bytes and result.resumed_bytes == 0

    downloading = [e for e in events if e.phase == "downloading"]
    done = [e.done for e in events]
    assert done == sorted(done), "progress never goes backwards"
    assert {e.file for e in downloading} == set(data)
    assert events[-1].phase == "done" and events[-1].done == events[-1].total == result.total_bytes
    assert events[-1].files_done == events[-1].files_total == len(data)
    mid_file = [e for e in downloading if e.file == "output-00001-of-00002.safetensors" and 0 < e.file_done < e.file_size]
    assert mid_file and all(e.rate and e.eta_s is not None for e in mid_file[1:])

    # The model reads back as the EXL2 variant it is.
    model = result.model
    assert model is not None and model.is_exl2
    assert (model.quant.bits, model.quant.head_bits) == (8.0, 8)
    assert model.arch.vocab_size == 32000 and model.context_length == 2048
    marker = read_marker(target)
    assert (marker.repo_id, marker.revision) == (TINY_REPO, "8.0bpw")
    assert marker.commit == fake_hub.repos[TINY_REPO].commit("8.0bpw")
    assert verify_installed(target) == []


def test_second_install_of_the_same_variant_is_a_no_op(fake_hub, tmp_path):
    first = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    before = len(fake_hub.file_requests())
    mtime = (first.path / WEIGHTS).stat().st_mtime_ns
    again = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert again.status == "already installed"
    assert again.path == first.path
    again_fetched = {r.file for r in fake_hub.file_requests()[before:]}
    assert again_fetched == {"config.json"}, "only config.json is read again, to name the folder"
    assert (first.path / WEIGHTS).stat().st_mtime_ns == mtime


def test_an_existing_folder_is_never_overwritten(fake_hub, tmp_path):
    mine = tmp_path / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own work")
    with pytest.raises(InstallConflictError) as info:
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw-2" in str(info.value)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert (mine / "notes.txt").read_text() == "my own work"
    assert fake_hub.files_downloaded() == {"config.json"}  # only read to name the folder
    # Installing under another name works and leaves the user's folder alone.
    result = install(TINY_REPO, "4.0bpw", tmp_path, name="tiny-4.0", endpoint=fake_hub.url)
    assert result.path == tmp_path / "tiny-4.0"
    assert (mine / "notes.txt").read_text() == "my own work"


def test_another_version_of_the_variant_is_not_replaced(fake_hub, tmp_path):
    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    marker_path = result.path / ".specdeck-install.json"
    marker = json.loads(marker_path.read_text())
    marker["commit"] = "0" * 40
    marker_path.write_text(json.dumps(marker))
    with pytest.raises(InstallConflictError, match="another version"):
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)


def test_cancel_then_resume_with_a_range_request(fake_hub, tmp_path):
    size = len(served(fake_hub)[WEIGHTS])
    stall = fake_hub.stall(WEIGHTS, at=size // 2)
    cancel = threading.Event()
    events = []
    thread, outcome = run_in_thread(install, TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url,
                                    cancel=cancel, progress=events.append)
    assert stall.reached.wait(20), "the download never reached the stall point"
    wait_for(lambda: part_bytes(tmp_path) > 0)
    cancel.set()  # while the server is silent mid-file
    thread.join(10)
    stall.release()
    assert not thread.is_alive(), "cancel did not interrupt a blocked download"
    assert isinstance(outcome.get("error"), CancelledError)
    assert "resumes" in str(outcome["error"])
    assert visible(tmp_path) == [], "a cancelled install never looks installed"
    assert scan_models([tmp_path])[0] == []

    (partial,) = find_partial_installs(tmp_path)
    assert partial.repo_id == TINY_REPO and partial.revision == "4.0bpw"
    kept = part_bytes(tmp_path)
    assert 0 < kept <= size // 2
    small = len(served(fake_hub)["config.json"]) + len(served(fake_hub)["generation_config.json"])
    assert partial.bytes_done == small + kept

    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert result.status == "installed"
    assert result.resumed_bytes == partial.bytes_done
    assert_same_files(result.path, served(fake_hub))
    ranges = [r.range for r in fake_hub.file_requests() if r.file == WEIGHTS and r.origin == "cdn"]
    assert ranges == [None, f"bytes={kept}-"]
    assert find_partial_installs(tmp_path) == []


def test_a_dropped_connection_resumes_mid_file(fake_hub, tmp_path):
    size = len(served(fake_hub)[WEIGHTS])
    fake_hub.drop_connection(WEIGHTS, at=size // 3)
    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, retry=FAST)
    assert_same_files(result.path, served(fake_hub))
    ranges = [r.range for r in fake_hub.file_requests() if r.file == WEIGHTS and r.origin == "cdn"]
    assert ranges == [None, f"bytes={size // 3}-"]


def test_a_network_that_keeps_failing_gives_up_then_resumes_later(fake_hub, tmp_path):
    plan = plan_install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    fake_hub.fail_next(503, count=1000)
    with pytest.raises(HubConnectionError, match="install again to resume"):
        install(TINY_REPO, plan=plan, endpoint=fake_hub.url, retry=RetryPolicy(attempts=2, first_delay_s=0.01))
    assert visible(tmp_path) == []
    fake_hub.clear_faults()
    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, retry=FAST)
    assert_same_files(result.path, served(fake_hub))


def test_a_server_error_mid_install_is_retried(fake_hub, tmp_path):
    plan = plan_install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    fake_hub.fail_next(503, count=2)
    result = install(TINY_REPO, plan=plan, endpoint=fake_hub.url, retry=FAST)
    assert_same_files(result.path, served(fake_hub))


def test_a_corrupted_byte_is_caught_and_nothing_is_installed(fake_hub, tmp_path):
    fake_hub.corrupt(WEIGHTS, at=12345)  # on every download of the file
    with pytest.raises(IntegrityError) as info:
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert "sha256" in str(info.value) and "Nothing was installed" in str(info.value)
    assert visible(tmp_path) == []
    assert scan_models([tmp_path])[0] == []
    assert not list(tmp_path.rglob("*.part")), "the damaged bytes were removed"
    gets = [r for r in fake_hub.file_requests() if r.file == WEIGHTS and r.origin == "cdn"]
    assert len(gets) == 2, "downloaded once more before giving up"


def test_a_byte_corrupted_once_is_downloaded_again(fake_hub, tmp_path):
    fake_hub.corrupt(WEIGHTS, at=7, times=1)
    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert_same_files(result.path, served(fake_hub))


def test_small_files_are_checked_against_their_git_blob_id(fake_hub, tmp_path):
    fake_hub.corrupt("generation_config.json", at=3, times=2)
    with pytest.raises(IntegrityError, match="git blob id"):
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert visible(tmp_path) == []


def test_the_config_read_for_planning_is_verified_too(fake_hub, tmp_path):
    fake_hub.corrupt("config.json", at=3, times=1)
    with pytest.raises(IntegrityError, match="config.json"):
        plan_install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)


@pytest.mark.parametrize("branch", ["dotdot", "nested", "absolute", "backslash"])
def test_file_names_that_escape_are_refused(fake_hub, tmp_path, branch):
    dest = tmp_path / "models"
    with pytest.raises(UnsafeRepoError, match="outside the destination"):
        install(EVIL_REPO, branch, dest, endpoint=fake_hub.url)
    assert fake_hub.files_downloaded() == set(), "refused before downloading anything"
    assert not (tmp_path / "escape.txt").exists()
    assert not dest.exists() or visible(dest) == []


def test_code_and_pickles_are_never_installed(fake_hub, tmp_path):
    result = install(CODE_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert {s.path for s in result.skipped} == {"modeling_custom.py", "pytorch_model.bin"}
    assert not (result.path / "modeling_custom.py").exists()
    assert not (result.path / "pytorch_model.bin").exists()
    assert "modeling_custom.py" not in fake_hub.files_downloaded()
    assert "pytorch_model.bin" not in fake_hub.files_downloaded()


def test_free_disk_space_is_checked_before_downloading(fake_hub, tmp_path):
    fake_hub.report_size(WEIGHTS, 10**15)  # the listing claims a petabyte
    with pytest.raises(InsufficientSpaceError, match="free"):
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert fake_hub.files_downloaded() == {"config.json"}
    assert visible(tmp_path) == []


def test_main_without_a_model_names_the_branches_to_use(fake_hub, tmp_path):
    with pytest.raises(HubError) as info:
        install(TINY_REPO, None, tmp_path, endpoint=fake_hub.url)
    message = str(info.value)
    assert "no installable model" in message and "4.0bpw" in message and "6_5" in message


def test_unknown_revision_lists_the_branches(fake_hub, tmp_path):
    with pytest.raises(RevisionNotFoundError) as info:
        install(TINY_REPO, "3.0bpw", tmp_path, endpoint=fake_hub.url)
    assert "3.0bpw" in str(info.value) and "8.0bpw" in str(info.value)


def test_single_variant_repo_on_main_keeps_its_name(fake_hub, tmp_path):
    result = install(SOLO_REPO, None, tmp_path, endpoint=fake_hub.url)
    assert result.path.name == "TinyLlama-1.1B-Chat-v1.0-4.0bpw-h6-exl2"


def test_a_second_install_of_the_same_variant_at_once_is_refused(fake_hub, tmp_path):
    stall = fake_hub.stall(WEIGHTS, at=1000)
    cancel = threading.Event()
    thread, outcome = run_in_thread(install, TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, cancel=cancel)
    assert stall.reached.wait(20)
    try:
        with pytest.raises(InstallBusyError):
            install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
        (partial,) = find_partial_installs(tmp_path)
        with pytest.raises(InstallBusyError):
            discard_partial(partial)
    finally:
        cancel.set()
        stall.release()
        thread.join(10)
    assert isinstance(outcome.get("error"), CancelledError)
    (partial,) = find_partial_installs(tmp_path)
    discard_partial(partial)
    assert find_partial_installs(tmp_path) == []
    assert list(tmp_path.iterdir()) == []


def test_a_branch_that_moved_resumes_keeping_unchanged_files(fake_hub, tmp_path):
    stall = fake_hub.stall("tokenizer.json", at=1000)
    cancel = threading.Event()
    thread, outcome = run_in_thread(install, TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, cancel=cancel)
    assert stall.reached.wait(20)
    cancel.set()
    stall.release()
    thread.join(10)
    assert isinstance(outcome.get("error"), CancelledError)
    # Upstream pushes new weights to the branch; everything else is unchanged.
    old = fake_hub.repos[TINY_REPO]
    moved = dict(old.branches)
    moved["4.0bpw"] = {**old.branches["4.0bpw"],
                       WEIGHTS: exl2_branch(MODELS / "TinyLlama-1.1B-Chat-v1.0", 4.0, 6, seed=99)[WEIGHTS]}
    fake_hub.repos[TINY_REPO] = dataclasses.replace(old, branches=moved)
    before = len(fake_hub.file_requests())
    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert result.commit == fake_hub.repos[TINY_REPO].commit("4.0bpw") != old.commit("4.0bpw")
    assert_same_files(result.path, moved["4.0bpw"])
    fetched = {r.file for r in fake_hub.file_requests()[before:]}
    assert "generation_config.json" not in fetched, "verified unchanged files were kept"
    assert WEIGHTS in fetched


def test_nothing_is_left_but_the_model_even_after_a_resume(fake_hub, tmp_path):
    fake_hub.drop_connection("tokenizer.json", at=5000)
    result = install(TINY_REPO, "6_5", tmp_path, endpoint=fake_hub.url, retry=FAST)
    assert sorted(os.listdir(tmp_path)) == [result.path.name]
    assert sorted(p.name for p in result.path.iterdir()) == sorted([".specdeck-install.json", *served(fake_hub, branch="6_5")])



def test_destination_defaults_to_config_draft_model_dir(fake_hub, tmp_path):
    from conftest import TABBY

    from specdeck.core import settings
    from specdeck.core.hub import default_install_dir, model_dirs

    config_yml = tmp_path / "tabby" / "config.yml"
    config_yml.parent.mkdir()
    config_yml.write_text((TABBY / "config_sample.exl2-checkpoint.yml").read_text())
    settings.save(settings.Settings().with_config(config_yml))
    # TabbyAPI's default draft_model_dir is "models", relative to config.yml's folder.
    assert default_install_dir() == config_yml.parent / "models"
    assert config_yml.parent / "models" in model_dirs()
    result = install(TINY_REPO, "4.0bpw", endpoint=fake_hub.url)
    assert result.path == config_yml.parent / "models" / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw"


def test_no_destination_and_no_config_is_explained(fake_hub):
    from specdeck.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="--dest"):
        install(TINY_REPO, "4.0bpw", endpoint=fake_hub.url)
