"""BOS/EOS ids, add-BOS flags and chat templates, read the way ExLlamaV2 / TabbyAPI read them."""

from __future__ import annotations

import json

from compat_helpers import copy_model, edit_json
from conftest import MODELS

from specdeck.core.compat.special import read_special_tokens
from specdeck.core.compat.tokenizer_files import read_vocab


def special(folder):
    return read_special_tokens(folder, read_vocab(folder))


def test_llama2_reads_ids_from_config_and_add_bos_from_tokenizer_config():
    tokens = special(MODELS / "Llama-2-7b-hf")
    assert (tokens.bos_id.value, tokens.eos_id.value) == (1, 2)
    assert tokens.bos_id.source == "config.json bos_token_id"
    assert tokens.add_bos.value is True
    assert tokens.add_bos.source == "tokenizer_config.json add_bos_token"
    assert tokens.add_eos.value is False
    assert tokens.declared["bos"] == "<s>" and tokens.declared["pad"] is None
    assert tokens.chat_template is None


def test_missing_add_bos_token_follows_tabbyapi_default():
    tokens = special(MODELS / "TinyLlama-1.1B-Chat-v1.0")
    assert tokens.add_bos.value is True
    assert "TabbyAPI's default" in tokens.add_bos.source
    assert tokens.chat_template_source == "tokenizer_config.json chat_template"


def test_qwen_instruct_eos_and_stop_tokens():
    tokens = special(MODELS / "Qwen2.5-7B-Instruct")
    assert tokens.add_bos.value is False
    assert tokens.bos_id.value == 151643
    assert tokens.eos_id.value == 151645
    # TabbyAPI stops on config.json's and generation_config.json's EOS ids together.
    assert tokens.stop_ids == (151645, 151643)
    assert tokens.chat_template_source == "chat_template.jinja"


def test_the_chat_template_is_the_same_wherever_it_is_stored():
    small = special(MODELS / "Qwen2.5-0.5B-Instruct")
    big = special(MODELS / "Qwen2.5-7B-Instruct")
    assert small.chat_template_source == "tokenizer_config.json chat_template"
    assert small.chat_template == big.chat_template


def test_without_config_ids_come_from_tokenizer_config_texts(tmp_path):
    folder = copy_model("Qwen2.5-0.5B-Instruct", tmp_path)
    (folder / "config.json").unlink()
    (folder / "generation_config.json").unlink()
    tokens = special(folder)
    assert tokens.eos_id.value == 151645
    assert tokens.eos_id.source == "tokenizer_config.json eos_token '<|im_end|>'"
    # Qwen's tokenizer_config.json says bos_token: null, so there is no BOS id at all.
    assert tokens.bos_id.value is None and "null" in tokens.bos_id.source
    assert tokens.stop_ids == ()


def test_exllamav2_defaults_when_nothing_names_bos_or_eos(tmp_path):
    folder = tmp_path / "bare"
    folder.mkdir()
    source = MODELS / "Llama-2-7b-hf" / "tokenizer.json"
    (folder / "tokenizer.json").write_bytes(source.read_bytes())
    tokens = special(folder)
    assert (tokens.bos_id.value, tokens.eos_id.value) == (1, 2)
    assert "ExLlamaV2's default" in tokens.bos_id.source
    assert tokens.add_bos.value is True and "is missing" in tokens.add_bos.source


def test_eos_list_in_config_uses_its_first_id(tmp_path):
    folder = copy_model("Llama-3.2-1B", tmp_path)
    edit_json(folder / "config.json", eos_token_id=[128001, 128008, 128009])
    tokens = special(folder)
    assert tokens.eos_id.value == 128001
    assert tokens.stop_ids == (128001, 128008, 128009)


def test_named_chat_templates_use_the_default_one(tmp_path):
    folder = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    edit_json(folder / "tokenizer_config.json", chat_template=[
        {"name": "tool_use", "template": "{{ tools }}"},
        {"name": "default", "template": config["chat_template"]},
    ])
    assert special(folder).chat_template == config["chat_template"]
