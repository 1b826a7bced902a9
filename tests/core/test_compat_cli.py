"""`specdeck check` and `specdeck suggest`: exit codes, human output, JSON."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import MODELS

from specdeck.core.cli import main


def cli(capsys, *args):
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("target", "draft", "code", "word"), [
    ("Llama-2-7b-hf", "TinyLlama-1.1B-Chat-v1.0", 0, "COMPATIBLE WITH WARNINGS"),
    ("Llama-2-7b-hf", "Mistral-7B-v0.1", 1, "INCOMPATIBLE"),
    ("Llama-3.1-8B", "Llama-3.2-1B", 3, "INCONCLUSIVE"),
])
def test_check_exit_codes_and_verdict(capsys, target, draft, code, word):
    got, out, _ = cli(capsys, "check", str(MODELS / target), str(MODELS / draft))
    assert got == code
    assert word in out
    assert "Token ids compared" in out and "Checked in" in out


def test_check_lists_the_differing_tokens(capsys):
    _, out, _ = cli(capsys, "check", str(MODELS / "Llama-2-7b-hf"), str(MODELS / "Mistral-7B-v0.1"),
                    "--examples", "2")
    assert "Differing tokens (first 2 of 31,730)" in out
    assert '     260  " t"' in out


def test_check_json(capsys):
    code, out, _ = cli(capsys, "check", str(MODELS / "Qwen2.5-7B-Instruct"),
                       str(MODELS / "Qwen2.5-0.5B-Instruct"), "--json", "--max-seq-len", "65536")
    data = json.loads(out)
    assert code == 0
    assert data["verdict"] == "compatible_with_warnings" and data["max_seq_len"] == 65536
    assert data["vocab"]["compared"] == 151660


def test_check_error_exits_2(capsys, tmp_path):
    code, _, err = cli(capsys, "check", str(tmp_path / "nope"), str(MODELS / "Llama-2-7b-hf"))
    assert code == 2
    assert err.startswith("specdeck: error: Model folder") and "does not exist" in err


def test_suggest_with_a_model_folder(capsys, tmp_path):
    (tmp_path / "TinyLlama").symlink_to(MODELS / "TinyLlama-1.1B-Chat-v1.0")
    code, out, _ = cli(capsys, "suggest", str(MODELS / "Llama-2-7b-hf"), "--models-dir",
                       str(tmp_path))
    assert code == 0
    assert "1. TinyLlama  [local, 1.1B, 6.1x, compatible with warnings]" in out
    assert "turboderp/TinyLlama-1B-exl2" in out and "revisions: 2.3bpw" in out


def test_suggest_json_and_nothing_found(capsys, tmp_path):
    code, out, _ = cli(capsys, "suggest", str(MODELS / "Mistral-7B-v0.1"), "--models-dir",
                       str(tmp_path), "--json")
    assert code == 1
    data = json.loads(out)
    assert data["suggestions"] == [] and data["family"] is None


def test_entry_point_runs_check():
    result = subprocess.run(
        [sys.executable, "-m", "specdeck", "check", "--json", str(MODELS / "Llama-2-7b-hf"),
         str(MODELS / "Mistral-7B-v0.1")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)["verdict"] == "incompatible"
    listing = subprocess.run([sys.executable, "-m", "specdeck", "--help"], capture_output=True,
                             text=True, timeout=60)
    assert "check" in listing.stdout and "suggest" in listing.stdout


def test_suggest_plans_vram_for_typed_gpu_sizes(capsys, tmp_path):
    from compat_helpers import copy_model, edit_json

    exl2 = {"quant_method": "exl2", "version": "0.3.2", "bits": 4.0, "head_bits": 6}
    target = copy_model("Qwen2.5-7B-Instruct", tmp_path)
    edit_json(target / "config.json", quantization_config=exl2)
    library = tmp_path / "library"
    library.mkdir()
    edit_json(copy_model("Qwen2.5-0.5B-Instruct", library) / "config.json",
              quantization_config=exl2)
    _, out, _ = cli(capsys, "suggest", str(target), "--models-dir", str(library), "--no-hub",
                    "--gpus", "24")
    assert "compatible with warnings, fits VRAM]" in out
    _, out, _ = cli(capsys, "suggest", str(target), "--models-dir", str(library), "--no-hub")
    assert "note: VRAM fit unknown:" in out  # no GPU here, or an unquantized target
