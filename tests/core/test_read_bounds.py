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
