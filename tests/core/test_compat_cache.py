"""The vocabulary cache: memory, disk, invalidation when a tokenizer file changes."""

from __future__ import annotations

import os

from compat_helpers import copy_model

from specdeck.core.compat import cache as cache_module
from specdeck.core.compat.cache import VocabCache
from specdeck.core.compat.tokenizer_files import read_vocab


def test_memory_then_disk_then_reread_after_a_change(tmp_path):
    folder = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    cache = VocabCache(tmp_path / "cache")
    first, origin = cache.read(folder)
    assert origin == "none"
    assert cache.read(folder) == (first, "memory")

    fresh = VocabCache(tmp_path / "cache")  # a new process: memory empty, disk kept
    from_disk, origin = fresh.read(folder)
    assert origin == "disk"
    assert from_disk == first == read_vocab(folder)

    # Editing a tokenizer file (new size and mtime) must not serve the old vocabulary.
    config = folder / "tokenizer_config.json"
    config.write_text(config.read_text().replace('"<unk>"', '"<unknown>"'))
    os.utime(config, ns=(1, 1))
    _, origin = fresh.read(folder)
    assert origin == "none"


def test_unreadable_cache_entry_is_ignored(tmp_path):
    folder = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    cache = VocabCache(tmp_path / "cache")
    vocab, _ = cache.read(folder)
    for entry in (tmp_path / "cache").glob("vocab-*.json"):
        entry.write_text("{ truncated")
    again, origin = VocabCache(tmp_path / "cache").read(folder)
    assert origin == "none" and again == vocab


def test_disk_cache_keeps_only_the_newest_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module, "DISK_ENTRIES", 2)
    cache = VocabCache(tmp_path / "cache")
    for name in ("TinyLlama-1.1B-Chat-v1.0", "Llama-2-7b-hf", "Mistral-7B-v0.1"):
        cache.read(copy_model(name, tmp_path))
    assert len(list((tmp_path / "cache").glob("vocab-*.json"))) == 2


def test_unwritable_cache_folder_only_costs_time(tmp_path):
    folder = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    vocab, origin = VocabCache(blocker).read(folder)
    assert origin == "none" and vocab.size == 32000


def test_default_cache_lives_in_specdeck_home(specdeck_home, tmp_path):
    folder = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    VocabCache().read(folder)
    assert list((specdeck_home / "cache" / "compat").glob("vocab-*.json"))
