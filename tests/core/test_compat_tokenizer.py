"""Reading vocabularies from every tokenizer format, checked against the real libraries."""

from __future__ import annotations

import json
import shutil

import pytest
from compat_helpers import copy_model
from conftest import MODELS

from specdeck.core.compat.tokenizer_files import _parse_until_merges, read_vocab
from specdeck.core.compat.vocab import VocabType, byte_to_unicode
from specdeck.core.errors import InvalidInputError, NotFoundError


def only_file(src, tmp_path, name="tokenizer.model"):
    """A folder holding nothing but one tokenizer file (copied from a fixture)."""
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(src, folder / name)
    return folder


# --- tokenizer.json -----------------------------------------------------------------------


def test_llama2_tokenizer_json_is_sentencepiece_bpe():
    vocab = read_vocab(MODELS / "Llama-2-7b-hf")
    assert vocab.vocab_type is VocabType.SPM  # BPE with byte_fallback and a "▁" normalizer
    assert vocab.source_format == "tokenizer.json"
    assert vocab.size == 32000 and vocab.complete
    assert vocab.texts[:3] == ("<unk>", "<s>", "</s>")
    assert vocab.texts[13] == "<0x0A>" and vocab.texts[450] == "\u2581The"
    assert {0, 1, 2} <= vocab.special_ids
    assert not vocab.byte_level


def test_mistral_metaspace_tokenizer_is_sentencepiece_bpe():
    vocab = read_vocab(MODELS / "Mistral-7B-v0.1")
    assert vocab.vocab_type is VocabType.SPM
    assert vocab.size == 32000
    assert vocab.texts[29871] == "ข"  # where Llama 2 has "▁": same size, other vocabulary


def test_byte_level_tokenizer_json(tmp_path):
    folder = copy_model("Qwen2.5-0.5B-Instruct", tmp_path)
    (folder / "tokenizer.derived.json").rename(folder / "tokenizer.json")
    vocab = read_vocab(folder)
    assert vocab.vocab_type is VocabType.BPE and vocab.byte_level
    assert vocab.files == ("tokenizer.json",)
    assert vocab.size == 151665
    assert vocab.texts[1879] == "\u0120world"
    assert vocab.texts[151645] == "<|im_end|>" and 151645 in vocab.special_ids


def test_walk_stops_before_merges_and_keeps_everything_else():
    text = (MODELS / "Qwen2.5-0.5B-Instruct" / "tokenizer.derived.json").read_text("utf-8")
    partial = _parse_until_merges(text)
    full = json.loads(text)
    assert "merges" not in partial["model"]
    assert partial["model"]["vocab"] == full["model"]["vocab"]
    for key in ("added_tokens", "normalizer", "pre_tokenizer", "post_processor", "decoder"):
        assert partial[key] == full[key]


@pytest.mark.parametrize("order", ["model_first", "merges_before_vocab"])
def test_unusual_key_order_still_reads_the_same_vocabulary(tmp_path, order):
    original = json.loads((MODELS / "Llama-2-7b-hf" / "tokenizer.json").read_text("utf-8"))
    if order == "model_first":
        rest = {k: v for k, v in original.items() if k != "model"}
        reordered = {"model": original["model"], **rest}
    else:
        model = original["model"]
        reordered = dict(original)
        reordered["model"] = {"merges": model["merges"],
                              **{k: v for k, v in model.items() if k != "merges"}}
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(reordered, ensure_ascii=False), "utf-8")
    assert read_vocab(folder).texts == read_vocab(MODELS / "Llama-2-7b-hf").texts


def test_unigram_and_wordpiece_tokenizers_from_the_tokenizers_library(tmp_path):
    from tokenizers import Tokenizer
    from tokenizers.models import Unigram, WordPiece

    unigram = Tokenizer(Unigram([("<unk>", 0.0), ("\u2581a", -1.0), ("b", -2.0)], unk_id=0))
    (tmp_path / "ugm").mkdir()
    unigram.save(str(tmp_path / "ugm" / "tokenizer.json"))
    vocab = read_vocab(tmp_path / "ugm")
    assert vocab.vocab_type is VocabType.UGM
    assert vocab.texts == ("<unk>", "\u2581a", "b")

    wordpiece = Tokenizer(WordPiece({"[UNK]": 0, "hello": 1, "##s": 2}, unk_token="[UNK]"))
    (tmp_path / "wpm").mkdir()
    wordpiece.save(str(tmp_path / "wpm" / "tokenizer.json"))
    vocab = read_vocab(tmp_path / "wpm")
    assert vocab.vocab_type is VocabType.WPM
    assert vocab.texts == ("[UNK]", "hello", "##s")


def test_broken_tokenizer_json_says_where(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}\n  oops', "utf-8")
    with pytest.raises(InvalidInputError, match="line 2"):
        read_vocab(folder)


# --- SentencePiece tokenizer.model --------------------------------------------------------


@pytest.mark.parametrize("name", ["Llama-2-7b-hf", "Mistral-7B-v0.1"])
def test_sentencepiece_reader_matches_the_sentencepiece_package(tmp_path, name):
    spm = pytest.importorskip("sentencepiece")
    model_file = MODELS / name / "tokenizer.model"
    vocab = read_vocab(only_file(model_file, tmp_path))
    processor = spm.SentencePieceProcessor(model_file=str(model_file))
    assert vocab.source_format == "sentencepiece"
    assert vocab.vocab_type is VocabType.SPM  # trainer_spec.model_type == BPE
    assert vocab.texts == tuple(processor.id_to_piece(i) for i in range(processor.get_piece_size()))
    expected_special = {i for i in range(processor.get_piece_size())
                        if processor.is_control(i) or processor.is_unknown(i)}
    assert vocab.special_ids == expected_special


def test_sentencepiece_and_tokenizer_json_agree_for_llama2(tmp_path):
    from_model = read_vocab(only_file(MODELS / "Llama-2-7b-hf" / "tokenizer.model", tmp_path))
    assert from_model.texts == read_vocab(MODELS / "Llama-2-7b-hf").texts


def test_truncated_sentencepiece_model_is_refused(tmp_path):
    data = (MODELS / "Llama-2-7b-hf" / "tokenizer.model").read_bytes()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidInputError, match="not a SentencePiece model"):
        read_vocab(folder)


# --- tiktoken -----------------------------------------------------------------------------


def test_tiktoken_ranks_match_the_tiktoken_package():
    tiktoken_load = pytest.importorskip("tiktoken.load")
    path = MODELS / "Llama-3.2-1B" / "original" / "tokenizer.model"
    ranks = tiktoken_load.load_tiktoken_bpe(str(path))
    vocab = read_vocab(MODELS / "Llama-3.2-1B")
    alphabet = byte_to_unicode()
    assert vocab.source_format == "tiktoken" and vocab.vocab_type is VocabType.BPE
    assert all(vocab.texts[rank] == "".join(alphabet[b] for b in raw)
               for raw, rank in ranks.items())


def test_tiktoken_with_added_tokens_equals_the_byte_level_tokenizer_json(tmp_path):
    """Llama 3.2's tiktoken file + tokenizer_config gives exactly the tokenizer.json vocabulary."""
    from_tiktoken = read_vocab(MODELS / "Llama-3.2-1B")
    assert from_tiktoken.files == ("original/tokenizer.model", "tokenizer_config.json")
    folder = copy_model("Llama-3.2-1B", tmp_path, skip=("original",))
    (folder / "tokenizer.derived.json").rename(folder / "tokenizer.json")
    from_json = read_vocab(folder)
    assert from_json.size == from_tiktoken.size == 128256
    assert from_json.texts == from_tiktoken.texts
    assert from_json.special_ids == from_tiktoken.special_ids


def test_bad_tiktoken_line_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(b"IQ== 0\nnot base64 at all\n")
    with pytest.raises(InvalidInputError, match="tiktoken"):
        read_vocab(folder)


# --- vocab.json + merges.txt, partial folders ---------------------------------------------


def test_slow_bpe_files_equal_the_tokenizer_json(tmp_path):
    slow = read_vocab(MODELS / "Qwen2.5-0.5B-Instruct")
    assert slow.files == ("vocab.json", "merges.txt", "added_tokens.json", "tokenizer_config.json")
    folder = copy_model("Qwen2.5-0.5B-Instruct", tmp_path)
    (folder / "tokenizer.derived.json").rename(folder / "tokenizer.json")
    assert read_vocab(folder).texts == slow.texts
    # tokenizer_config.json marks <tool_call> as not special although added_tokens.json lists it.
    assert 151645 in slow.special_ids and 151657 not in slow.special_ids


def test_qwen_sizes_share_one_vocabulary():
    assert read_vocab(MODELS / "Qwen2.5-0.5B-Instruct").texts == \
        read_vocab(MODELS / "Qwen2.5-7B-Instruct").texts


def test_folder_with_only_tokenizer_config_gives_a_partial_vocabulary():
    vocab = read_vocab(MODELS / "Llama-3.1-8B")
    assert not vocab.complete and vocab.size is None
    assert vocab.vocab_type is VocabType.UNKNOWN
    assert vocab.known_ids == 256
    assert vocab.texts[128000] == "<|begin_of_text|>" and vocab.texts[0] is None
    assert "only the added tokens" in vocab.notes[0]


def test_a_folder_with_neither_model_nor_tokenizer_files_is_not_found(tmp_path):
    with pytest.raises(NotFoundError, match="has no tokenizer files"):
        read_vocab(tmp_path)


def test_a_model_folder_without_tokenizer_files_has_an_unknown_vocabulary():
    vocab = read_vocab(MODELS / "SmolLM2-135M")  # config.json alone
    assert not vocab.complete and vocab.size is None and not any(vocab.texts)


def test_missing_folder_is_not_found(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        read_vocab(tmp_path / "nope")
