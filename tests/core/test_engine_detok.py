"""Streaming detokenization with real tokenizers: the pieces must add up to the whole."""

from __future__ import annotations

import random

import pytest
from conftest import MODELS
from specdeck.core.engines.detok import StreamDecoder
from tokenizers import Tokenizer

TEXT = (
    "Hello world! naïve café, crème brûlée; Grüße aus Köln. 東京タワーは高い。 "
    "Emoji: 🚀🙂👍🏽 and code: def f(x):\n    return x ** 2\n"
)
TOKENIZERS = {
    "llama-sentencepiece": MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.json",
    "mistral-sentencepiece": MODELS / "Mistral-7B-v0.1" / "tokenizer.json",
    "qwen-bytelevel": MODELS / "Qwen2.5-0.5B-Instruct" / "tokenizer.derived.json",
    "llama3-bytelevel": MODELS / "Llama-3.2-1B" / "tokenizer.derived.json",
}


@pytest.fixture(params=sorted(TOKENIZERS), scope="module")
def tokenizer(request) -> Tokenizer:
    return Tokenizer.from_file(str(TOKENIZERS[request.param]))


def _decoder(tok: Tokenizer):
    return lambda ids: tok.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pieces_add_up_to_the_full_decode(tokenizer, seed):
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    stream = StreamDecoder(_decoder(tokenizer))
    rng = random.Random(seed)
    pieces, i = [], 0
    while i < len(ids):
        step = rng.randint(1, 5)  # verify steps emit 1..k+1 tokens
        pieces.append(stream.push(ids[i : i + step]))
        i += step
    pieces.append(stream.flush())
    assert "".join(pieces) == tokenizer.decode(ids, skip_special_tokens=True)
    assert stream.text == "".join(pieces)
    assert not any("\ufffd" in p for p in pieces)


def test_multibyte_characters_are_held_until_complete(tokenizer):
    ids = tokenizer.encode("🚀", add_special_tokens=False).ids
    stream = StreamDecoder(_decoder(tokenizer))
    pieces = [stream.push([t]) for t in ids] + [stream.flush()]
    assert "".join(pieces) == tokenizer.decode(ids)
    assert "🚀" in "".join(pieces)
    assert not any("\ufffd" in p for p in pieces)
    # Byte-level tokenizers split the emoji over several tokens: nothing shows until the last.
    assert [bool(p) for p in pieces[:-1]].count(True) == 1


def test_prompt_context_keeps_the_first_tokens_leading_space():
    tok = Tokenizer.from_file(str(TOKENIZERS["llama-sentencepiece"]))
    prompt = tok.encode("The answer is", add_special_tokens=False).ids
    answer = tok.encode("The answer is forty two", add_special_tokens=False).ids[len(prompt) :]
    with_context = StreamDecoder(_decoder(tok), prompt)
    text = "".join(with_context.push([t]) for t in answer) + with_context.flush()
    assert text == " forty two"
