"""`specdeck models / search / variants / install` against the fake Hub, in-process and as
real processes (progress on stderr, Ctrl-C, a process killed mid-download then resumed)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from hubserver import TINY_REPO, fake_hub, memory_keyring  # noqa: F401 - fixtures

from specdeck.core.cli import main
from specdeck.core.cli.hub_cmd import TerminalProgress
from specdeck.core.hub import InstallProgress, find_partial_installs, install

WEIGHTS = "output.safetensors"


def cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "specdeck", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_variants_json(fake_hub, capsys):
    assert main(["variants", TINY_REPO, "--endpoint", fake_hub.url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [v["revision"] for v in data["variants"]] == ["4.0bpw", "6_5", "8.0bpw"]
    assert data["variants"][0]["bits"] == 4.0
    assert data["other_branches"][0][0] == "main"


def test_search_json(fake_hub, capsys):
    assert main(["search", "tinyllama", "--endpoint", fake_hub.url, "--json"]) == 0
    assert [h["repo_id"] for h in json.loads(capsys.readouterr().out)][0] == TINY_REPO


def test_install_then_models_lists_it_with_its_source(fake_hub, tmp_path, capsys):
    assert main(["install", f"{TINY_REPO}@6_5", "--dest", str(tmp_path), "--endpoint", fake_hub.url]) == 0
    out = capsys.readouterr()
    assert "every checksum verified" in out.out and "6.5 bpw" in out.out
    assert "output.safetensors" in out.err  # per-file progress lines on stderr
    assert main(["models", "--dir", str(tmp_path), "--json"]) == 0
    (model,) = json.loads(capsys.readouterr().out)["models"]
    assert model["name"] == "TinyLlama-1.1B-Chat-v1.0-exl2-6.5bpw"
    assert (model["bits"], model["head_bits"], model["vocab_size"]) == (6.5, 6, 32000)
    assert model["source"]["repo_id"] == TINY_REPO and model["source"]["revision"] == "6_5"
    assert main(["install", f"{TINY_REPO}@6_5", "--dest", str(tmp_path), "--endpoint", fake_hub.url]) == 0
    assert "already installed" in capsys.readouterr().out


def test_install_dry_run_downloads_nothing(fake_hub, tmp_path, capsys):
    assert main(["install", f"{TINY_REPO}@4.0bpw", "--dest", str(tmp_path), "--endpoint", fake_hub.url,
                 "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["target"] == str(tmp_path / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw")
    assert plan["total_bytes"] == sum(len(d) for d in fake_hub.repos[TINY_REPO].branches["4.0bpw"].values())
    assert fake_hub.files_downloaded() == {"config.json"}
    assert list(tmp_path.iterdir()) == []


def test_install_errors_exit_2_with_one_line(fake_hub, tmp_path, capsys):
    (tmp_path / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw").mkdir()
    assert main(["install", f"{TINY_REPO}@4.0bpw", "--dest", str(tmp_path), "--endpoint", fake_hub.url]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdeck: error:") and "left untouched" in err


def test_models_without_folders_says_what_to_do(capsys):
    assert main(["models"]) == 2
    assert "--models-dir FOLDER" in capsys.readouterr().err  # spelled as suggest and bench do


def test_models_takes_the_folder_as_suggest_and_bench_spell_it_and_as_it_did(capsys):
    from conftest import MODELS

    for flag in ("--models-dir", "--dir"):
        assert main(["models", flag, str(MODELS), "--json"]) == 0
        assert "Qwen2.5-0.5B-Instruct" in capsys.readouterr().out


def test_terminal_progress_bar_on_a_tty():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    stream = Tty()
    bar = TerminalProgress(stream)
    bar(InstallProgress("downloading", TINY_REPO, "4.0bpw", done=500, total=1000, file="x.safetensors",
                        rate=2e6, eta_s=75))
    bar.close()
    bar(InstallProgress("downloading", TINY_REPO, "4.0bpw", done=1000, total=1000,
                        file="x.safetensors", rate=2e6, eta_s=0))
    bar.close()
    text = stream.getvalue()
    # tqdm's bar: the variant, the percentage, bytes done of all in decimal units, the file.
    assert f"{TINY_REPO}@4.0bpw" in text and "50%" in text and "100%" in text
    assert "500/1.00k" in text and "1.00k/1.00k" in text and "x.safetensors" in text
    assert text.endswith("\n")


def interrupt_install(hub, dest, stop) -> tuple[int, str]:
    """Run `specdeck install` in a process, call ``stop(proc)`` once it is mid-file;
    (exit code, stderr)."""
    stall = hub.stall(WEIGHTS, at=300_000)
    proc = cli("install", f"{TINY_REPO}@4.0bpw", "--dest", str(dest), "--endpoint", hub.url)
    try:
        assert stall.reached.wait(60)
        deadline = time.monotonic() + 60  # until what arrived before the stall is on disk
        while not any(part.stat().st_size for part in dest.glob(".*/parts/*.part")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        stop(proc)
        _, err = proc.communicate(timeout=30)
    finally:
        stall.release()
        proc.kill()
    return proc.returncode, err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_ctrl_c_cancels_cleanly_and_the_next_run_resumes(fake_hub, tmp_path, signum):
    """Ctrl-C, a service manager's SIGTERM and a closed terminal's SIGHUP stop it alike."""
    code, err = interrupt_install(fake_hub, tmp_path, lambda proc: proc.send_signal(signum))
    assert code == 130, err
    assert "cancelled" in err and "resumes" in err and "stopping after this step" in err
    (partial,) = find_partial_installs(tmp_path)
    assert partial.bytes_done > 0


def test_a_killed_process_is_resumed_by_the_next_install(fake_hub, tmp_path):
    """A restart: the process dies mid-file (no cleanup at all); the next install resumes."""
    code, _ = interrupt_install(fake_hub, tmp_path, lambda proc: proc.kill())  # SIGKILL
    assert code == -signal.SIGKILL
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith(".")] == []
    (partial,) = find_partial_installs(tmp_path)
    kept = sum(p.stat().st_size for p in partial.staging.glob("parts/*.part"))
    assert kept > 0
    result = install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)  # the lock died with it
    assert result.resumed_bytes == partial.bytes_done
    data = fake_hub.repos[TINY_REPO].branches["4.0bpw"]
    assert (result.path / WEIGHTS).read_bytes() == data[WEIGHTS]
    ranges = [r.range for r in fake_hub.file_requests() if r.file == WEIGHTS and r.origin == "cdn"]
    assert ranges[-1] == f"bytes={kept}-"


@pytest.mark.parametrize("args", [["variants", "not-a-repo"], ["install", "a/b/c", "--dest", "x"]])
def test_bad_repo_names(args, capsys):
    assert main(args) == 2
    assert "owner/name" in capsys.readouterr().err


def test_install_into_the_draft_folder_of_a_config(fake_hub, tmp_path, capsys):
    from conftest import TABBY

    config_yml = tmp_path / "config.yml"
    config_yml.write_text((TABBY / "config_sample.exl2-checkpoint.yml").read_text())
    assert main(["install", f"{TINY_REPO}@4.0bpw", "--config", str(config_yml), "--endpoint", fake_hub.url,
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["path"] == str(tmp_path / "models" / "TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw")
    assert main(["models", "--config", str(config_yml), "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert str(tmp_path / "models") in listing["folders"]
    assert [m["name"] for m in listing["models"]] == ["TinyLlama-1.1B-Chat-v1.0-exl2-4.0bpw"]
