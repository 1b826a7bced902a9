"""`specdeck gpus` and `specdeck vram`, run through the real CLI entry point."""

from __future__ import annotations

import json

import pytest
from conftest import MODELS, REPO_ROOT
from specdeck.core.cli import main

DEMO = REPO_ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl"
DATA = REPO_ROOT / "tests" / "data" / "models"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_gpus_without_a_gpu_says_so_and_exits_1(capsys):
    from specdeck.core.gpu import read_once

    if read_once().has_gpus:
        pytest.skip("this machine has GPUs")
    code, out, _ = run(capsys, "gpus")
    assert code == 1
    assert out.startswith("No NVIDIA GPU detected.")
    code, out, _ = run(capsys, "gpus", "--json")
    data = json.loads(out)
    assert code == 1 and data["state"] == "no-library" and data["headline"] == "No NVIDIA GPU detected"


def test_gpus_replay_prints_both_indices_and_processes(capsys):
    code, out, _ = run(capsys, "gpus", "--replay", str(DEMO))
    assert code == 0
    assert "synthetic" in out
    lines = out.splitlines()
    row_4090 = next(line for line in lines if "RTX 4090" in line)
    assert row_4090.split()[:2] == ["0", "1"]  # NVML 0 is CUDA 1
    assert "Xorg" in out and "Driver 570.133.07" in out


def test_gpus_record_from_a_replay(capsys, tmp_path):
    out_file = tmp_path / "rec.jsonl"
    code, out, _ = run(capsys, "gpus", "--replay", str(DEMO), "--record", str(out_file),
                       "--duration", "1", "--interval", "0.25")
    assert code == 0 and "Saved" in out
    assert len(out_file.read_text().splitlines()) == 1 + 4


def test_vram_plan_json_for_typed_gpus(capsys):
    code, out, _ = run(capsys, "vram", "--model", str(DATA / "Llama-2-70b-hf"), "--bpw", "2.5",
                       "--draft", str(MODELS / "TinyLlama-1.1B-Chat-v1.0"), "--draft-bpw", "4",
                       "--ctx", "16384", "--cache-mode", "Q4", "--draft-cache-mode", "Q4",
                       "--gpus", "32,24", "--json")
    plan = json.loads(out)
    assert code == 0 and plan["verdict"] == "fits"
    assert plan["context"] == 16384 and plan["cache_mode"] == "Q4"
    assert plan["gpus"][0]["target_cache"] == 1152 * 80 * 16384
    assert plan["gpus"][1]["used_bytes"] == 0


def test_vram_human_output_and_no_fit_exit_code(capsys):
    code, out, _ = run(capsys, "vram", "--model", str(DATA / "Llama-3.1-70B-Instruct"), "--bpw", "4",
                       "--ctx", "65536", "--gpus", "24")
    assert code == 1
    assert "Verdict: DOES NOT FIT" in out and "To make it fit:" in out
    assert "Usable" in out and "Target KV" in out


def test_vram_defaults_to_tabbyapis_context(capsys):
    code, out, _ = run(capsys, "vram", "--model", str(MODELS / "Llama-3.1-8B"), "--bpw", "5",
                       "--gpus", "24", "--json")
    assert code == 0 and json.loads(out)["context"] == 4096  # min(native 131072, 4096)


@pytest.mark.parametrize("argv,message", [
    (["--model", str(MODELS / "Llama-2-7b-hf"), "--gpus", "24"], "--bpw"),
    (["--model", str(MODELS / "Llama-2-7b-hf"), "--bpw", "4", "--gpus", "x"], "GPU sizes"),
    (["--model", str(MODELS / "Llama-2-7b-hf"), "--bpw", "4", "--gpus", "24", "--cache-mode", "Q3"],
     "Cache mode"),
    (["--model", "/no/such/model", "--bpw", "4", "--gpus", "24"], "does not exist"),
    # The draft's bitrate has its own option: the fix names it, not the target's --bpw.
    (["--model", str(MODELS / "Llama-2-7b-hf"), "--bpw", "4", "--gpus", "24",
      "--draft", str(MODELS / "TinyLlama-1.1B-Chat-v1.0")], "e.g. 4.0 (--draft-bpw on"),
])
def test_vram_user_errors_exit_2_with_a_fix(capsys, argv, message):
    code, _, err = run(capsys, "vram", *argv)
    assert code == 2 and message in err and err.startswith("specdeck: error:")


def test_vram_without_gpus_or_sizes_explains_how_to_plan(capsys):
    from specdeck.core.gpu import read_once

    if read_once().has_gpus:
        pytest.skip("this machine has GPUs")
    code, _, err = run(capsys, "vram", "--model", str(MODELS / "Llama-2-7b-hf"), "--bpw", "4")
    assert code == 2 and "No NVIDIA GPU detected" in err and "--gpus 32,24" in err


def test_gpus_shows_byte_counts_in_the_apps_one_format(capsys):
    """A 413 MiB process and 581 MiB used read so (core.units.format_bytes, as on the GPUs
    page), not "0.40 GiB" and "0.57 GiB"."""
    from specdeck.core.units import format_bytes

    code, out, _ = run(capsys, "gpus", "--replay", str(DEMO))
    assert code == 0
    xorg = next(line for line in out.splitlines() if "Xorg" in line)
    row_4090 = next(line for line in out.splitlines() if "RTX 4090" in line)
    assert xorg.split()[-2:] == ["413", "MiB"] and "0.40" not in xorg
    assert f"{format_bytes(609222656)} / 23.54 GiB" in row_4090
