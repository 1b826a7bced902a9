"""Reading model folders: real configs from tests/data/fixtures, real safetensors headers."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from conftest import MODELS

from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.models import read_model, read_safetensors_header, scan_models


def test_llama2_architecture_from_real_config():
    info = read_model(MODELS / "Llama-2-7b-hf")
    arch = info.arch
    assert (arch.hidden_size, arch.num_layers, arch.num_kv_heads, arch.head_dim) == (4096, 32, 32, 128)
    assert arch.kv_width == 4096
    # Llama-2-7B has 6.74 B parameters.
    assert 6.6e9 < info.parameters < 6.9e9
    assert info.quant.method == "none"
    assert "tokenizer.json" in info.tokenizer_files


def test_head_dim_from_config_wins_over_division():
    gemma = read_model(MODELS / "gemma-2-9b-it").arch
    assert gemma.head_dim == 256  # 3584 / 16 would say 224
    smol = read_model(MODELS / "SmolLM2-135M").arch
    assert smol.kv_width == 3 * 64


@pytest.mark.parametrize(
    ("folder", "low", "high"),
    [
        ("TinyLlama-1.1B-Chat-v1.0", 1.0e9, 1.2e9),
        ("Qwen2.5-0.5B-Instruct", 0.45e9, 0.55e9),
        ("Qwen2.5-7B-Instruct", 7.4e9, 7.8e9),
        ("Llama-3.1-8B", 7.9e9, 8.2e9),
        ("SmolLM2-135M", 0.12e9, 0.15e9),
        ("gemma-2-9b-it", 9.1e9, 9.4e9),  # tied embeddings, not stated in its config.json
    ],
)
def test_parameter_estimates_match_published_sizes(folder, low, high):
    assert low < read_model(MODELS / folder).parameters < high


def _exl2_folder(tmp_path, bits=4.0, head_bits=6):
    folder = tmp_path / "TinyLlama-exl2"
    folder.mkdir()
    config = json.loads((MODELS / "TinyLlama-1.1B-Chat-v1.0" / "config.json").read_text())
    config["num_hidden_layers"] = 2
    config["quantization_config"] = {
        "quant_method": "exl2",
        "version": "0.3.2",
        "bits": bits,
        "head_bits": head_bits,
        "calibration": {"rows": 115, "length": 2048, "dataset": "(default)"},
    }
    (folder / "config.json").write_text(json.dumps(config))
    from safetensors.numpy import save_file

    save_file(
        {
            "model.embed_tokens.weight": np.zeros((32000, 16), dtype=np.float16),
            "model.layers.0.self_attn.q_proj.q_weight": np.zeros((64, 32), dtype=np.int32),
            "model.layers.1.self_attn.q_proj.q_weight": np.zeros((64, 16), dtype=np.int32),
            "model.layers.1.mlp.up_proj.q_scale": np.zeros((8,), dtype=np.float16),
            "model.norm.weight": np.zeros((2048,), dtype=np.float16),
            "lm_head.q_weight": np.zeros((100, 10), dtype=np.int32),
        },
        str(folder / "output.safetensors"),
    )
    shutil.copy(MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.json", folder)
    return folder


def test_exl2_folder_sizes_are_exact(tmp_path):
    info = read_model(_exl2_folder(tmp_path))
    assert info.is_exl2
    assert info.quant.bits == 4.0 and info.quant.head_bits == 6
    assert info.quant.label == "EXL2 4 bpw h6"
    w = info.weights
    assert w.embedding == 32000 * 16 * 2
    assert w.layers == (64 * 32 * 4, 64 * 16 * 4 + 8 * 2)
    assert w.head == 100 * 10 * 4
    assert w.other == 2048 * 2
    assert w.total == w.embedding + sum(w.layers) + w.head + w.other
    assert w.on_gpu == w.total - w.embedding
    header = read_safetensors_header(tmp_path / "TinyLlama-exl2" / "output.safetensors")
    assert {t.name for t in header} >= {"lm_head.q_weight", "model.norm.weight"}


def test_missing_folder_and_missing_config(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        read_model(tmp_path / "nope")
    with pytest.raises(InvalidInputError, match="no config.json"):
        read_model(tmp_path)


def test_broken_config_reports_line(tmp_path):
    (tmp_path / "config.json").write_text('{"hidden_size": 8,\n "x": }')
    with pytest.raises(InvalidInputError, match="line 2"):
        read_model(tmp_path)


def test_truncated_safetensors_is_a_clear_error(tmp_path):
    folder = _exl2_folder(tmp_path)
    (folder / "output.safetensors").write_bytes(b"\x01\x02")
    with pytest.raises(InvalidInputError, match="truncated"):
        read_model(folder)


def test_scan_finds_models_one_level_down_and_reports_problems(tmp_path):
    _exl2_folder(tmp_path)
    nested = tmp_path / "drafts" / "Qwen"
    shutil.copytree(MODELS / "Qwen2.5-0.5B-Instruct", nested)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("[]")
    (tmp_path / ".staging-x").mkdir()
    shutil.copy(MODELS / "SmolLM2-135M" / "config.json", tmp_path / ".staging-x")
    models, problems = scan_models([tmp_path])
    assert sorted(m.name for m in models) == ["Qwen", "TinyLlama-exl2"]
    assert [p.path.name for p in problems] == ["broken"]
