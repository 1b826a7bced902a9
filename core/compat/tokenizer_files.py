"""Read a model folder's tokenizer files into a :class:`~specdeck.core.compat.vocab.Vocab`.

The sources, best first:

- ``tokenizer.json`` (what ExLlamaV2 0.3 and transformers load): the model's vocab plus
  ``added_tokens``. The kind comes from the model type and its pre-tokenizer: BPE with
  byte fallback or a "▁" metaspace is SentencePiece-style BPE (llama.cpp's SPM), BPE with
  a ByteLevel pre-tokenizer is GPT-2 byte-level BPE (llama.cpp's BPE), Unigram is llama.cpp's
  UGM, WordPiece its WPM.
- ``tokenizer.model``: either a SentencePiece model (a protobuf, read here directly; no
  package needed) or a tiktoken ranks file (``base64 rank`` lines, Meta's Llama 3 format).
  tiktoken tokens are raw bytes; they are written with GPT-2's byte-to-unicode table so that
  they compare equal to the same tokens in a byte-level ``tokenizer.json``.
- ``vocab.json`` + ``merges.txt`` (the "slow" GPT-2 / Qwen2 tokenizer files): byte-level BPE.
- Added tokens from ``added_tokens.json`` and ``tokenizer_config.json``'s
  ``added_tokens_decoder`` complete the last three (tokenizer.json lists its own).

Only the vocabulary is read: BPE merges decide how text is split, not what an id means, and
parsing them is most of the cost of a tokenizer.json. A folder with none of these files
still yields the added tokens its tokenizer_config.json lists, marked incomplete.
"""

from __future__ import annotations

import binascii
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from specdeck.core.compat.vocab import (
    FORMAT_ADDED_ONLY,
    FORMAT_SENTENCEPIECE,
    FORMAT_SLOW_BPE,
    FORMAT_TIKTOKEN,
    FORMAT_TOKENIZER_JSON,
    MAX_TOKEN_ID,
    Vocab,
    VocabBuilder,
    VocabType,
    byte_to_unicode,
)
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.files import METADATA_FILE, read_bounded
from specdeck.core.models import read_json
from specdeck.core.userpath import expand_user

# ---------------------------------------------------------------------------------------
# Which files describe the vocabulary


def vocab_source_files(folder: Path) -> tuple[str, ...]:
    """The files :func:`read_vocab` would read in ``folder``, relative names.

    Used as the cache key: when any of them changes, the vocabulary is read again.
    """
    base = _base_source(folder)
    names = list(base[1]) if base else []
    for extra in ("added_tokens.json", "tokenizer_config.json"):
        if (folder / extra).is_file() and extra not in names:
            names.append(extra)
    return tuple(names)


def _base_source(folder: Path) -> tuple[str, tuple[str, ...]] | None:
    """(format, files) of the best full-vocabulary source in ``folder``."""
    if (folder / "tokenizer.json").is_file():
        return FORMAT_TOKENIZER_JSON, ("tokenizer.json",)
    if (folder / "tokenizer.model").is_file():
        return _model_file_format(folder / "tokenizer.model"), ("tokenizer.model",)
    if (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
        return FORMAT_SLOW_BPE, ("vocab.json", "merges.txt")
    # Meta's original checkpoints keep their tokenizer in original/ (tiktoken for Llama 3).
    original = folder / "original" / "tokenizer.model"
    if original.is_file():
        return _model_file_format(original), ("original/tokenizer.model",)
    return None


_TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/=]+ \d+$")


def _model_file_format(path: Path) -> str:
    """A tokenizer.model is a SentencePiece protobuf or a tiktoken ranks file."""
    head = _read_tokenizer_file(path)[:256]
    first_line = head.split(b"\n", 1)[0]
    return FORMAT_TIKTOKEN if _TIKTOKEN_LINE.match(first_line) else FORMAT_SENTENCEPIECE


def _read_tokenizer_file(path: Path) -> bytes:
    """A tokenizer file's bytes (core.files.read_bounded, ``METADATA_FILE`` at most): a FIFO,
    a device or a file of gigabytes under a tokenizer's name is refused, never waited on or
    read whole."""
    return read_bounded(path, "tokenizer file", METADATA_FILE,
                        hint="Re-download the tokenizer files, or point at the model's folder.")


def read_vocab(folder: str | Path) -> Vocab:
    """The vocabulary of the model in ``folder`` (see the module docstring for the sources).

    Raises NotFoundError when the folder does not exist or holds no tokenizer file at all,
    InvalidInputError when a tokenizer file is unreadable or malformed.
    """
    path = expand_user(folder)
    if not path.is_dir():
        raise NotFoundError(f"Model folder {path} does not exist.")
    base = _base_source(path)
    if base is None:
        draft = VocabBuilder([], VocabType.UNKNOWN, FORMAT_ADDED_ONLY, [], complete=False)
        draft.notes.append(
            "No tokenizer.json, tokenizer.model or vocab.json + merges.txt in this folder: "
            "only the added tokens listed in tokenizer_config.json are known."
        )
    else:
        fmt, files = base
        draft = _READERS[fmt](path / files[0])
        draft.files = [*files, *(f for f in draft.files if f not in files)]
    if draft.source_format != FORMAT_TOKENIZER_JSON:
        _add_listed_tokens(path, draft)
    if not draft.complete and not draft.files and not (path / "config.json").is_file():
        raise NotFoundError(
            f"{path} has no tokenizer files (tokenizer.json, tokenizer.model, vocab.json + "
            "merges.txt, or tokenizer_config.json).",
            "Point at the folder that holds the model's config.json and tokenizer files.",
        )
    return draft.freeze()


# ---------------------------------------------------------------------------------------
# tokenizer.json


def _read_tokenizer_json(path: Path) -> VocabBuilder:
    top = _load_tokenizer_json(path)
    model = top.get("model")
    if not isinstance(model, Mapping):
        raise InvalidInputError(f"{path} has no \"model\" section: it is not a tokenizer.json.")
    kind = _tokenizer_json_kind(top, model)
    draft = VocabBuilder([], kind, FORMAT_TOKENIZER_JSON, [path.name])
    draft.byte_level = kind is VocabType.BPE and _mentions_type(top, "ByteLevel")
    vocab = model.get("vocab")
    if isinstance(vocab, Mapping):
        draft.texts = _texts_by_id(vocab.items(), path)
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        draft.texts = [entry[0] if isinstance(entry, list) and entry else None for entry in vocab]
    else:
        raise InvalidInputError(f"{path}: the model has no vocabulary (\"vocab\" is missing).")
    for added in top.get("added_tokens") or ():
        if isinstance(added, Mapping) and isinstance(added.get("id"), int) \
                and not isinstance(added.get("id"), bool):
            draft.put(added["id"], str(added.get("content", "")), bool(added.get("special")))
    return draft


def _load_tokenizer_json(path: Path) -> dict[str, Any]:
    try:
        text = _read_tokenizer_file(path).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{path} is not UTF-8 text: it is not a tokenizer.json.") from exc
    try:
        top = _parse_until_merges(text)
    except (ValueError, IndexError):
        top = None
    if top is None:
        try:
            top = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(
                f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}).",
                "Re-download the tokenizer files.",
            ) from exc
    if not isinstance(top, dict):
        raise InvalidInputError(f"{path} should hold a JSON object.")
    return top


_WS = re.compile(r"[ \t\n\r]*")
# tokenizers writes every one of these keys (null when unused) before "model".
_KEYS_BEFORE_MODEL = ("added_tokens", "normalizer", "pre_tokenizer", "decoder")


def _parse_until_merges(text: str) -> dict[str, Any] | None:
    """The tokenizer.json object without the BPE merges, or None if the layout is unusual.

    The ``tokenizers`` library writes "model" last and, inside it, "vocab" before "merges";
    merges are most of the file (150k pairs for Qwen2.5) and are not needed here, so parsing
    stops there. Any other layout returns None and the caller parses the whole file.
    """

    def at_merges(key: str, model: dict[str, Any]) -> bool:
        return key == "merges" and "vocab" in model

    top, _, stopped = _decode_object(text, 0, json.JSONDecoder(), inner=("model", at_merges))
    if stopped and not all(k in top for k in _KEYS_BEFORE_MODEL):
        return None
    return top


def _decode_object(
    text: str,
    pos: int,
    decoder: json.JSONDecoder,
    *,
    inner: tuple[str, Callable[[str, dict[str, Any]], bool]] | None = None,
    stop: Callable[[str, dict[str, Any]], bool] | None = None,
) -> tuple[dict[str, Any], int, bool]:
    """Decode the JSON object at ``pos`` member by member: (object, end, stopped early).

    ``stop(key, members_so_far)`` ends the walk before that key's value is decoded;
    ``inner = (key, stop)`` walks that member's object the same way. Raises ValueError on
    anything that is not a well-formed object.
    """
    members: dict[str, Any] = {}
    pos = _WS.match(text, pos).end()
    if not text.startswith("{", pos):
        raise ValueError("expected an object")
    pos = _WS.match(text, pos + 1).end()
    if text.startswith("}", pos):
        return members, pos + 1, False
    while True:
        key, pos = decoder.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()
        if not isinstance(key, str) or not text.startswith(":", pos):
            raise ValueError("expected a key and ':'")
        pos = _WS.match(text, pos + 1).end()
        if stop is not None and stop(key, members):
            return members, pos, True
        if inner is not None and key == inner[0]:
            members[key], pos, stopped = _decode_object(text, pos, decoder, stop=inner[1])
            if stopped:
                return members, pos, True
        else:
            members[key], pos = decoder.raw_decode(text, pos)
        pos = _WS.match(text, pos).end()
        if text.startswith(",", pos):
            pos = _WS.match(text, pos + 1).end()
        elif text.startswith("}", pos):
            return members, pos + 1, False
        else:
            raise ValueError("expected ',' or '}'")


def _mentions_type(node: Any, type_name: str) -> bool:
    """Whether a "type": type_name appears anywhere below ``node`` (model excluded)."""
    if isinstance(node, Mapping):
        if node.get("type") == type_name:
            return True
        return any(_mentions_type(v, type_name) for k, v in node.items() if k != "model")
    if isinstance(node, list):
        return any(_mentions_type(v, type_name) for v in node)
    return False


def _mentions_metaspace(top: Mapping[str, Any]) -> bool:
    if _mentions_type(top, "Metaspace"):
        return True
    # Llama 2's tokenizer.json normalizes " " to "▁" with Replace / Prepend steps.
    return "\u2581" in json.dumps(top.get("normalizer"), ensure_ascii=False)


def _tokenizer_json_kind(top: Mapping[str, Any], model: Mapping[str, Any]) -> VocabType:
    kind = model.get("type")
    if kind is None:  # very old files omit the type; infer it from the fields
        if "merges" in model:
            kind = "BPE"
        elif isinstance(model.get("vocab"), list):
            kind = "Unigram"
        elif "continuing_subword_prefix" in model:
            kind = "WordPiece"
    if kind == "BPE":
        if model.get("byte_fallback") or _mentions_metaspace(top):
            return VocabType.SPM
        return VocabType.BPE
    return {"Unigram": VocabType.UGM, "WordPiece": VocabType.WPM}.get(str(kind), VocabType.OTHER)


# ---------------------------------------------------------------------------------------
# SentencePiece tokenizer.model (protobuf ModelProto, read without the sentencepiece package)

# SentencePiece.Type values (sentencepiece_model.proto).
_SP_CONTROL, _SP_USER_DEFINED, _SP_UNKNOWN = 3, 4, 2
# TrainerSpec.ModelType: 1 UNIGRAM (the proto default), 2 BPE, 3 WORD, 4 CHAR.
_SP_MODEL_TYPES = {1: VocabType.UGM, 2: VocabType.SPM}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    if byte < 0x80:
        return byte, pos + 1
    result, shift, pos = byte & 0x7F, 7, pos + 1
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def _skip_field(buf: bytes, pos: int, wire_type: int) -> int:
    if wire_type == 0:
        return _varint(buf, pos)[1]
    if wire_type == 2:
        length, pos = _varint(buf, pos)
        return pos + length
    if wire_type == 5:
        return pos + 4
    if wire_type == 1:
        return pos + 8
    raise ValueError(f"unsupported protobuf wire type {wire_type}")


def _read_sentencepiece(path: Path) -> VocabBuilder:
    buf = _read_tokenizer_file(path)
    try:
        pieces, specials, model_type = _parse_sentencepiece(buf)
    except (ValueError, IndexError, UnicodeDecodeError) as exc:
        raise InvalidInputError(
            f"{path} is not a SentencePiece model ({exc}).", "Re-download the tokenizer files."
        ) from exc
    if not pieces:
        raise InvalidInputError(f"{path} is not a SentencePiece model (it lists no pieces).")
    kind = _SP_MODEL_TYPES.get(model_type, VocabType.OTHER)
    draft = VocabBuilder(pieces, kind, FORMAT_SENTENCEPIECE, [_relative(path)])
    draft.special_ids.update(specials)
    return draft


def _parse_sentencepiece(buf: bytes) -> tuple[list[str | None], set[int], int]:
    pieces: list[str | None] = []
    specials: set[int] = set()
    model_type = 1
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        if key == 0x0A:  # field 1 (pieces), length-delimited: one SentencePiece message
            length, pos = _varint(buf, pos)
            stop, piece, piece_type = pos + length, None, 1
            while pos < stop:
                inner, pos = _varint(buf, pos)
                if inner == 0x0A:  # piece (string)
                    size, pos = _varint(buf, pos)
                    piece = buf[pos:pos + size].decode("utf-8")
                    pos += size
                elif inner == 0x18:  # type (enum)
                    piece_type, pos = _varint(buf, pos)
                else:
                    pos = _skip_field(buf, pos, inner & 7)
            if piece_type in (_SP_CONTROL, _SP_USER_DEFINED, _SP_UNKNOWN):
                specials.add(len(pieces))
            pieces.append(piece)
        elif key == 0x12:  # field 2: TrainerSpec
            length, pos = _varint(buf, pos)
            stop = pos + length
            while pos < stop:
                inner, pos = _varint(buf, pos)
                if inner == 0x18:  # model_type
                    model_type, pos = _varint(buf, pos)
                else:
                    pos = _skip_field(buf, pos, inner & 7)
        else:
            pos = _skip_field(buf, pos, key & 7)
    if pos != end:
        raise ValueError("truncated")
    return pieces, specials, model_type


# ---------------------------------------------------------------------------------------
# tiktoken ranks file


_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def _is_ranks_file(data: bytes, fields: list[bytes]) -> bool:
    """Every line is "base64 rank": checked in bulk so the per-token loop can use the fast,
    non-validating base64 decoder."""
    lines = sum(1 for line in data.splitlines() if line.strip())
    tokens, ranks = fields[0::2], fields[1::2]
    return (len(fields) == 2 * lines
            and not b"".join(tokens).translate(None, _BASE64_ALPHABET)
            and b"".join(ranks).isdigit())


def _read_tiktoken(path: Path) -> VocabBuilder:
    data = _read_tokenizer_file(path)
    fields = data.split()
    if not _is_ranks_file(data, fields):
        raise InvalidInputError(
            f"{path} is not a tiktoken ranks file (every line must be 'base64 rank').",
            "Re-download the tokenizer files.",
        )
    # bytes -> latin-1 text -> GPT-2 alphabet: one C-level translate per token.
    alphabet = byte_to_unicode()
    decode = binascii.a2b_base64
    try:
        tokens = [decode(t).decode("latin-1").translate(alphabet) for t in fields[0::2]]
    except binascii.Error as exc:
        raise InvalidInputError(f"{path} is not a tiktoken ranks file ({exc}).",
                                "Re-download the tokenizer files.") from exc
    ranks = [int(r) for r in fields[1::2]]
    if ranks == list(range(len(ranks))):  # the usual layout: line n holds rank n
        texts: list[str | None] = list(tokens)
    else:
        texts = _texts_by_id(zip(tokens, ranks), path)
    draft = VocabBuilder(texts, VocabType.BPE, FORMAT_TIKTOKEN, [_relative(path)], byte_level=True)
    draft.notes.append(
        "tiktoken ranks file: its special tokens are not in the file; they come from "
        "tokenizer_config.json when the folder has one."
    )
    return draft


# ---------------------------------------------------------------------------------------
# vocab.json + merges.txt


def _read_slow_bpe(path: Path) -> VocabBuilder:
    data = _read_tokenizer_file(path)
    try:
        vocab = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidInputError(
            f"{path} is not valid JSON: {exc}.", "Re-download the tokenizer files."
        ) from exc
    if not isinstance(vocab, dict):
        raise InvalidInputError(f"{path} should map token texts to integer ids.")
    texts = _texts_by_id(vocab.items(), path)
    return VocabBuilder(texts, VocabType.BPE, FORMAT_SLOW_BPE, [path.name], byte_level=True)


def _texts_by_id(pairs, path: Path) -> list[str | None]:
    """Token texts indexed by id, from (text, id) pairs; ids must be whole numbers below
    MAX_TOKEN_ID (a damaged file's 10**30 must not size a list)."""
    pairs = list(pairs)
    for text, token_id in pairs:
        if isinstance(token_id, bool) or not isinstance(token_id, int) \
                or not 0 <= token_id < MAX_TOKEN_ID:
            shown = repr(token_id) if len(repr(token_id)) < 40 else repr(token_id)[:37] + "..."
            raise InvalidInputError(
                f"{path}: token {str(text)[:40]!r} has the id {shown}; ids are whole numbers "
                f"from 0 to {MAX_TOKEN_ID - 1:,}, so this file is damaged.", "Re-download it.")
    texts: list[str | None] = [None] * (max((i for _, i in pairs), default=-1) + 1)
    for text, token_id in pairs:
        texts[token_id] = text
    return texts


def _relative(path: Path) -> str:
    return f"{path.parent.name}/{path.name}" if path.parent.name == "original" else path.name


_READERS = {
    FORMAT_TOKENIZER_JSON: _read_tokenizer_json,
    FORMAT_SENTENCEPIECE: _read_sentencepiece,
    FORMAT_TIKTOKEN: _read_tiktoken,
    FORMAT_SLOW_BPE: _read_slow_bpe,
}


# ---------------------------------------------------------------------------------------
# Added tokens listed beside the base vocabulary


def read_optional_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from an optional file: None if it is absent; an error if it is broken."""
    return read_json(path, METADATA_FILE) if path.is_file() else None


def _add_listed_tokens(folder: Path, draft: VocabBuilder) -> None:
    """Merge added_tokens.json and tokenizer_config.json's added_tokens_decoder.

    transformers gives added tokens precedence over the base vocabulary, so they win here too.
    """
    added = read_optional_json(folder / "added_tokens.json")
    if added:
        draft.files.append("added_tokens.json")
        for text, token_id in added.items():
            if isinstance(token_id, int):
                # ExLlamaV2 treats every added_tokens.json entry as special.
                draft.put(token_id, text, special=True)
    config = read_optional_json(folder / "tokenizer_config.json")
    decoder = config.get("added_tokens_decoder") if config else None
    if isinstance(decoder, Mapping) and decoder:
        draft.files.append("tokenizer_config.json")
        for key, entry in decoder.items():
            if isinstance(entry, Mapping) and str(key).isdigit() and "content" in entry:
                draft.put(int(key), str(entry["content"]), bool(entry.get("special")))
