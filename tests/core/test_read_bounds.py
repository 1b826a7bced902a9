"""Files someone else writes, read with bounds (issue 41, round 5): a server's log quoted by
its last lines only, TabbyAPI's log read as it grows (each byte once, never again for every
request), and a model's tabby_config.yml no larger than SpecDeck reads of a file. Real files,
FIFOs and sparse files of gigabytes (no disk space taken)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from specdeck.core.errors import InvalidInputError
from specdeck.core.files import LOG_TAIL, read_new, read_tail
from specdeck.core.servers.tabby_launch import LoggedDraft, ManagedTabby, TabbyLaunch

LINE = ("2026-11-28 10:00:00.123 INFO:     Metrics (ID: {id}): 24 tokens generated in 0.5 "
        "seconds (Queue: 0.0 s, Process: 0 cached tokens and 30 new tokens at 600.0 T/s, "
        "Generate: 48.0 T/s, Context: 30 tokens, Draft: {a} / 16 tokens accepted (50.00%)) \n")
"""common/gen_logging.py's metrics line (TabbyAPI main e632af41), as its console prints it."""


def sparse(path: Path, size: int, tail: bytes = b"") -> Path:
    """A file of ``size`` zero bytes that takes no disk space, ``tail`` after them."""
    with open(path, "wb") as handle:
        handle.truncate(size)
        handle.seek(size)
        handle.write(tail)
    return path


def test_a_servers_log_is_quoted_from_its_end_only(tmp_path):
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    log = sparse(tmp_path / "server.log", 3 * 1024**3,
                 b"\nloading\nerror: invalid argument: --nope\nexiting\n")
    server = ManagedServer(LaunchProfile("llama-server", "m.gguf"), log)
    assert server.log_tail() == "loading | error: invalid argument: --nope | exiting"
    tail = read_tail(log)
    assert len(tail) <= LOG_TAIL and tail.endswith(b"exiting\n")


@pytest.mark.timeout(20)
def test_a_log_that_is_a_fifo_is_no_log_and_no_hang(tmp_path):
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    fifo = tmp_path / "server.log"
    os.mkfifo(fifo)
    assert ManagedServer(LaunchProfile("llama-server", "m.gguf"), fifo).log_tail() == "(no log)"
    tabby = ManagedTabby(TabbyLaunch(str(tmp_path), sys.executable), fifo)
    assert tabby.logged_draft("aa11", wait_s=0) is None


def test_tabbyapis_log_is_read_as_it_grows_each_byte_once(tmp_path):
    log = tmp_path / "tabby.log"
    log.write_text("starting\n" + LINE.format(id="aa11", a=10))
    tabby = ManagedTabby(TabbyLaunch(str(tmp_path), sys.executable), log)
    assert tabby.logged_draft("aa11", wait_s=0) == LoggedDraft(10, 16)
    read = log.stat().st_size
    assert tabby._log_read == read
    with open(log, "a") as handle:  # the next request's line, written in two pieces
        handle.write(LINE.format(id="bb22", a=12)[:40])
    assert tabby.logged_draft("bb22", wait_s=0) is None
    with open(log, "a") as handle:
        handle.write(LINE.format(id="bb22", a=12)[40:])
    assert tabby.logged_draft("bb22", wait_s=0) == LoggedDraft(12, 16)
    assert tabby._log_read == log.stat().st_size
    log.write_text(LINE.format(id="cc33", a=3))  # started again (a new TabbyAPI)
    assert tabby.logged_draft("cc33", wait_s=0) == LoggedDraft(3, 16)


def test_a_log_of_gigabytes_is_read_in_steps_not_at_once(tmp_path):
    log = sparse(tmp_path / "tabby.log", 2 * 1024**3)
    data, start = read_new(log, 0, limit=1024)
    assert (len(data), start) == (1024, 0)
    data, start = read_new(log, 2 * 1024**3 - 10, limit=1024)
    assert (len(data), start) == (10, 2 * 1024**3 - 10)
    assert read_new(log, 5 * 1024**3, limit=8) == (bytes(8), 0)  # shrank: from its start


def test_a_models_tabby_config_is_read_with_a_bound(tmp_path):
    from specdeck.core.config.document import ConfigDocument
    from specdeck.core.config.tabby import model_overrides

    model = tmp_path / "models" / "big"
    model.mkdir(parents=True)
    (tmp_path / "config.yml").write_text(
        f"model:\n  model_dir: {tmp_path / 'models'}\n  model_name: big\n")
    sparse(model / "tabby_config.yml", 64 * 1024**2)
    doc = ConfigDocument.from_file(tmp_path / "config.yml")
    with pytest.raises(InvalidInputError, match="more than SpecDeck reads of one"):
        model_overrides(doc)
    (model / "tabby_config.yml").write_text("draft_model:\n  draft_num_tokens: 3\n")
    assert model_overrides(doc).draft_model == {"draft_num_tokens": 3}


def test_a_tokenizer_or_template_file_over_the_bound_is_refused_unread(tmp_path):
    """A model folder's tokenizer.json and chat_template.jinja were read whole, whatever
    their size: a sparse file over core.files.METADATA_FILE (no disk space taken) is now
    refused by its size, with what to do, before a byte of it is read."""
    from compat_helpers import copy_model
    from specdeck.core.compat.special import read_special_tokens
    from specdeck.core.compat.tokenizer_files import read_vocab
    from specdeck.core.files import METADATA_FILE

    folder = copy_model("Qwen2.5-7B-Instruct", tmp_path)
    vocab = read_vocab(folder)
    sparse(folder / "chat_template.jinja", METADATA_FILE + 1)
    with pytest.raises(InvalidInputError, match=r"The chat template .* is over 128 MiB"):
        read_special_tokens(folder, vocab)
    sparse(folder / "tokenizer.json", METADATA_FILE + 1)
    with pytest.raises(InvalidInputError,
                       match=r"The tokenizer file .*tokenizer\.json is over 128 MiB") as caught:
        read_vocab(folder)
    assert "Re-download the tokenizer files" in caught.value.fix


@pytest.mark.timeout(60)
def test_a_gpu_trace_that_is_a_fifo_or_too_large_is_refused_at_once(tmp_path):
    """load_trace read the whole path: a FIFO waited for a writer for ever, a file of
    gigabytes was read whole. Now each is refused at once, saying what it is."""
    from specdeck.core.gpu.replay import MAX_TRACE_BYTES, load_trace

    fifo = tmp_path / "trace.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InvalidInputError, match=r"is a named pipe \(FIFO\), not a file") as caught:
        load_trace(fifo)
    assert "specdeck gpus --record" in caught.value.fix
    huge = sparse(tmp_path / "huge.jsonl", MAX_TRACE_BYTES + 1)
    with pytest.raises(InvalidInputError, match=r"The trace .* is over 256 MiB"):
        load_trace(huge)


@pytest.mark.timeout(60)
def test_an_ab_report_or_plan_that_is_a_fifo_or_too_large_is_refused_at_once(tmp_path):
    """load_report and load_plan (``bench --plan``) read the whole path: a FIFO waited for a
    writer for ever, a file of gigabytes was read whole. A FIFO put in the history folder
    held the History page's listing the same way: now it is skipped."""
    from specdeck.core.bench.report import (
        ENTRY_JSON,
        MAX_REPORT_BYTES,
        PLAN_JSON,
        REPORT_JSON,
        list_history,
        load_plan,
        load_report,
    )
    from specdeck.core.files import SMALL_FILE

    folder = tmp_path / "run"
    folder.mkdir()
    os.mkfifo(folder / REPORT_JSON)
    os.mkfifo(folder / PLAN_JSON)
    with pytest.raises(InvalidInputError, match=r"The A/B report .* is a named pipe \(FIFO\)"):
        load_report(folder)
    with pytest.raises(InvalidInputError, match=r"The A/B plan .* is a named pipe \(FIFO\)") \
            as caught:
        load_plan(folder)
    assert "--report DIR" in caught.value.fix
    with pytest.raises(InvalidInputError, match=r"The A/B report .* is over 256 MiB"):
        load_report(sparse(tmp_path / "report.json", MAX_REPORT_BYTES + 1))
    with pytest.raises(InvalidInputError, match=r"The A/B plan .* is over 16\.0 MiB"):
        load_plan(sparse(tmp_path / "plan.json", SMALL_FILE + 1))
    (tmp_path / "nested.json").write_text("[" * 100_000)
    with pytest.raises(InvalidInputError, match="is not a readable A/B plan"):
        load_plan(tmp_path / "nested.json")
    history = tmp_path / "history"
    (history / "a").mkdir(parents=True)
    os.mkfifo(history / "a" / ENTRY_JSON)
    assert list_history(history) == []


@pytest.mark.timeout(60)
def test_a_safetensors_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """A FIFO named *.safetensors in a model folder held read_model (the Models page, vram,
    check) for ever: its header was read with a blocking open."""
    import shutil

    from specdeck.core.models import read_model, read_safetensors_header

    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(Path(__file__).parents[1] / "data" / "models" / "Phi-3-mini-128k-instruct"
                / "config.json", folder / "config.json")
    os.mkfifo(folder / "model.safetensors")
    with pytest.raises(InvalidInputError, match=r"The safetensors file .*model\.safetensors is "
                       r"a named pipe \(FIFO\), not a file") as caught:
        read_model(folder)
    assert "Re-download" in caught.value.fix
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").mkdir()
    with pytest.raises(InvalidInputError, match="is a folder, not a file"):
        read_safetensors_header(folder / "model.safetensors")


@pytest.mark.timeout(60)
def test_an_api_key_file_that_is_a_fifo_is_no_key_and_no_hang(tmp_path):
    """llama-server's --api-key-file was opened with a blocking open: a FIFO held every
    request's key lookup for ever. Now it is no key (llama-server says why it cannot start),
    as a file over core.files.KEY_FILE is; a real one gives its first key."""
    from specdeck.core.files import KEY_FILE
    from specdeck.core.servers.llama_server import LaunchProfile

    fifo = tmp_path / "keys.fifo"
    os.mkfifo(fifo)
    assert LaunchProfile("llama-server", "m.gguf", args=("--api-key-file", str(fifo))
                         ).api_key() is None
    huge = sparse(tmp_path / "huge.keys", KEY_FILE + 1)
    assert LaunchProfile("llama-server", "m.gguf", args=("--api-key-file", str(huge))
                         ).api_key() is None
    (tmp_path / "keys.txt").write_text("\nsk-first\nsk-second\n")
    assert LaunchProfile("llama-server", "m.gguf",
                         args=("--api-key-file", str(tmp_path / "keys.txt"))
                         ).api_key() == "sk-first"


@pytest.mark.timeout(60)
def test_a_config_swapped_for_a_fifo_after_it_was_opened_is_not_waited_on(tmp_path):
    """A save reads the file again before writing (to compare and to keep the backup): a FIFO
    put there since it was opened held the save, and the GUI's worker, for ever."""
    from specdeck.core import config
    from specdeck.core.config.edit import plan_change
    from specdeck.core.config.store import save

    path = tmp_path / "config.yml"
    path.write_text("draft_model:\n  draft_model_name: old\n")
    change = plan_change(config.load(path), {("draft_model", "draft_model_name"): "new"})
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(InvalidInputError, match=r"is a named pipe \(FIFO\), not a file"):
        save(change)


@pytest.mark.timeout(60)
def test_a_written_file_swapped_for_a_fifo_while_proved_is_not_rolled_back_nor_waited_on(
        tmp_path):
    """After a tune writes its winner it proves the server; a FIFO put in the file's place
    meanwhile held the roll back's check for ever (it read the path whole). Now it is a file
    changed since SpecDeck wrote it: nothing rolled back, the backup named."""
    from specdeck.core import swap
    from specdeck.core.swap.apply import plan_apply_flags
    from specdeck.core.tune.apply import write_and_prove

    path = tmp_path / "config.yaml"
    path.write_text("models:\n  smol:\n    cmd: llama-server -m /m/smol.gguf --port ${PORT}\n")
    change = plan_apply_flags(swap.load(path), "smol", ("--spec-type", "ngram-simple"))

    def prove() -> str:
        path.unlink()
        os.mkfifo(path)
        return "llama-server did not start."

    applied = write_and_prove(path, "--spec-type ngram-simple", change, None, prove,
                              proved="proved", noop="noop")
    assert applied.written and not applied.rolled_back
    assert "changed since SpecDeck wrote it" in applied.why
    assert str(applied.backup) in applied.why


@pytest.mark.timeout(60)
def test_an_install_marker_that_is_a_fifo_is_no_marker(tmp_path):
    """The Models page reads every library folder's install marker: a FIFO of that name held
    the listing for ever."""
    from specdeck.core.hub.install import MARKER_NAME, read_marker

    os.mkfifo(tmp_path / MARKER_NAME)
    assert read_marker(tmp_path) is None


@pytest.mark.timeout(60)
def test_cached_hub_refs_the_import_record_and_settings_that_are_fifos_are_not_waited_on(
        tmp_path, monkeypatch):
    """Offline, the Hub metadata's cached ref names the commit to use; the engines' record of
    the last exllamav2 import says whether it worked; settings.json is read as the app opens.
    Each was read whole, unbounded: a FIFO put there held the caller for ever."""
    from specdeck.core import settings
    from specdeck.core.engines import availability
    from specdeck.core.hub import metadata
    from specdeck.core.hub.errors import HubOfflineError

    settings.settings_path().parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(settings.settings_path())
    assert settings.load() == settings.Settings()

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ref = metadata._ref_file("org/model", "main")
    ref.parent.mkdir(parents=True)
    os.mkfifo(ref)
    with pytest.raises(HubOfflineError):
        metadata.fetch_metadata("org/model")
    record = availability._record_path()
    record.parent.mkdir(parents=True)
    os.mkfifo(record)
    assert availability.recorded_exllamav2_import() is None


def test_a_prompt_file_has_one_cap_for_generate_and_a_suite(tmp_path):
    """`specdeck generate --prompt-file` took 8 MiB, a prompt suite 16: one cap now
    (core.files.PROMPT_FILE), a file over it refused by both before it is read."""
    import argparse

    from specdeck.core.bench.suites import load_suite
    from specdeck.core.cli.engine_cmd import _prompt_text
    from specdeck.core.files import PROMPT_FILE
    from specdeck.core.units import MiB

    def generate(path: Path) -> str:
        return _prompt_text(argparse.Namespace(prompt_file=path, prompt=None))

    nine = tmp_path / "long.txt"
    nine.write_bytes(b"x" * (9 * MiB))
    assert len(generate(nine)) == 9 * MiB
    over = sparse(tmp_path / "over.txt", PROMPT_FILE + 1)
    for read in (generate, load_suite):
        with pytest.raises(InvalidInputError, match="more than SpecDeck reads"):
            read(over)
