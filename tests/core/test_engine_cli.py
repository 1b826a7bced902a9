"""`specdeck engines` and `specdeck generate`, run as a user would (a real subprocess)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from tiny_models import random_llama

pytest.importorskip("transformers")

PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown fox"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return random_llama(tmp_path_factory.mktemp("cli-models") / "tiny", seed=0)


def specdeck(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "specdeck", *args],
        capture_output=True, text=True, timeout=timeout, env=dict(os.environ), check=False,
    )


def test_engines_json_lists_engines_and_the_demo_model():
    done = specdeck("engines", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert [e["name"] for e in data["engines"]] == ["torch", "exllamav2", "server"]
    torch_engine = data["engines"][0]
    assert torch_engine["availability"]["available"] is True
    assert set(data["demo_model"]) >= {"available", "converted", "model_dir", "reason"}


def test_engines_table_says_what_to_install():
    done = specdeck("engines")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["engine", "available", "details"]
    assert any(line.startswith("torch") and " yes " in line for line in lines)
    if "exllamav2  no" in done.stdout:
        assert "exllamav2:" in done.stdout  # the install hint line


@pytest.mark.slow
def test_generate_json_result(tiny):
    done = specdeck("generate", "--model", str(tiny), "--ngram", "--k", "3", "--prompt", PROMPT,
                    "--max-new", "20", "--no-eos", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    result, loaded = data["result"], data["loaded"]
    assert loaded["engine"] == "torch" and loaded["drafter"]["kind"] == "ngram"
    stats = result["stats"]
    assert stats["new_tokens"] == len(result["token_ids"]) == 20
    assert stats["new_tokens"] == stats["steps"] + stats["accepted"]
    assert stats["tokens_per_second"] > 0
    assert result["drafter"]["num_draft_tokens"] == 3


@pytest.mark.slow
def test_generate_streams_the_same_text_and_prints_stats(tiny):
    args = ("generate", "--model", str(tiny), "--prompt", PROMPT, "--max-new", "24", "--no-eos")
    human = specdeck(*args)
    as_json = json.loads(specdeck(*args, "--json").stdout)
    assert human.returncode == 0, human.stderr
    assert human.stdout == as_json["result"]["text"] + "\n"
    assert "tok/s" in human.stderr and "stopped by max_new_tokens" in human.stderr
    assert "Loading weights" not in human.stderr  # transformers' progress bars are silenced


@pytest.mark.slow
def test_self_drafting_from_the_cli_gives_the_baseline_tokens(tiny):
    base = json.loads(specdeck("generate", "--model", str(tiny), "--prompt", PROMPT,
                               "--max-new", "16", "--no-eos", "--json").stdout)
    spec = json.loads(specdeck("generate", "--model", str(tiny), "--draft", str(tiny),
                               "--prompt", PROMPT, "--max-new", "16", "--no-eos", "--json").stdout)
    assert spec["result"]["token_ids"] == base["result"]["token_ids"]
    assert spec["result"]["stats"]["acceptance_rate"] == 1.0


def test_errors_exit_2_with_one_line(tmp_path):
    done = specdeck("generate", "--model", str(tmp_path / "missing"), "--prompt", "hi")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("specdeck: error: Model folder")
    done = specdeck("generate", "--model", "x", "--prompt", "hi", "--k", "0")
    assert done.returncode == 2 and "argument --k: 0 is out of range; use 1 to 32" in done.stderr
    done = specdeck("generate", "--model", "x", "--prompt", "hi", "--ngram", "--draft", "y")
    assert done.returncode == 2 and "not allowed with" in done.stderr
    done = specdeck("generate", "--engine", "vllm", "--model", "x", "--prompt", "hi")
    assert done.returncode == 2 and "Unknown engine" in done.stderr


def test_gpu_split_is_parsed_and_checked():
    from specdeck.core.cli.engine_cmd import _gpu_split
    from specdeck.core.errors import InvalidInputError

    assert _gpu_split("20,24") == (20.0, 24.0)
    assert _gpu_split(None) is None
    for bad in ("20,abc", "0,4"):
        with pytest.raises(InvalidInputError):
            _gpu_split(bad)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
def test_ctrl_c_stops_after_the_current_step_and_keeps_the_output(tiny):
    process = subprocess.Popen(
        [sys.executable, "-m", "specdeck", "generate", "--model", str(tiny), "--prompt", PROMPT,
         "--max-new", "480", "--no-eos"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ),
    )
    first = process.stdout.read(1)  # generation has started streaming
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err.decode()
    assert first + out
    assert b"stopping after this step" in err
    assert b"stopped by cancelled" in err
