"""Where a llama-server holds its model, decided by one rule (llama_server.runs_on_gpu): its
build's ``--list-devices`` and its flags, never NVML alone. The predictions' verify cost, the
memory the servers are kept up in and the memory a Hub draft must fit all follow it.

The CPU-only build is the real pinned llama-server. A CUDA build cannot run here; its
``--list-devices`` is a shell script printing what llama.cpp 11434 prints (common/arg.cpp,
``--list-devices``: "Available devices:", then "  NAME: DESCRIPTION (TOTAL MiB, FREE MiB
free)" per GPU device). Whether a real CUDA build prints exactly this stays unverified here.
"""

from __future__ import annotations

import dataclasses
import stat

import nvml_driver as driver
import psutil
import pytest
from specdeck.core.servers import llama_server
from specdeck.core.tune import hub
from specdeck.core.tune import setup as tune_setup
from specdeck.core.tune.predict import predict
from specdeck.core.tune.run import TuneOptions, device_of

GiB = 1024**3

CUDA_LIST = ("Available devices:\n"
             "  CUDA0: NVIDIA GeForce RTX 4090 (24080 MiB, 2621 MiB free)\n"
             "  CUDA1: NVIDIA GeForce RTX 5090 (32607 MiB, 3584 MiB free)\n")


def _binary(tmp_path, name: str, list_output: str | None, rc: int = 0):
    """A llama-server stand-in that answers ``--list-devices`` as a CUDA build does (or, with
    None, as a build that predates the flag: an error)."""
    path = tmp_path / name
    body = (f"printf '%s' '{list_output}'; exit {rc}" if list_output is not None
            else "echo 'error: invalid argument: --list-devices' >&2; exit 1")
    path.write_text(f'#!/bin/sh\ncase "$1" in --list-devices) {body};; esac\nexit 1\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def nvml_sees_gpus(monkeypatch):
    """NVML answering as the demo workstation's driver does: two cards, ~6 GiB free."""
    driver.install(monkeypatch, driver.NvmlLibrary(driver.workstation()))
    from specdeck.core.gpu import read_once

    assert read_once().has_gpus


def test_a_cpu_only_build_holds_its_model_in_ram_though_nvml_sees_gpus(llama_bin, demo_gguf,
                                                                        nvml_sees_gpus):
    assert llama_server.offload_devices(llama_bin) == ()  # the real build: "(none)"
    assert not llama_server.runs_on_gpu(llama_bin, ())
    demo = tune_setup.demo(llama_bin)
    assert not demo.on_gpu and device_of(demo, TuneOptions()) == "cpu"
    assert "cpu)" in predict(_ngram(demo), demo, device_of(demo, TuneOptions()), []).source

    ram = psutil.virtual_memory().available
    gpus_free = llama_server.free_memory(True)
    assert gpus_free < 8 * GiB < ram  # the two readings this test tells apart
    assert llama_server.free_memory(False) == pytest.approx(ram, rel=0.05)
    # a Hub draft must fit what the RAM leaves, not what the GPUs do
    assert hub.memory_left(demo) == pytest.approx(
        ram - demo.facts.weight_bytes - llama_server.SERVER_OVERHEAD, rel=0.05)
    size = GiB
    assert llama_server.servers_that_fit(size, demo.on_gpu) == pytest.approx(
        int(0.9 * ram // size), abs=1)
    assert llama_server.servers_that_fit(size, True) < 6


def test_a_cuda_build_holds_its_model_on_the_gpus_unless_its_flags_keep_it_off(
        tmp_path, llama_bin, demo_gguf, nvml_sees_gpus):
    cuda = _binary(tmp_path, "llama-server-cuda", CUDA_LIST)
    assert llama_server.offload_devices(cuda) == ("CUDA0", "CUDA1")
    assert llama_server.runs_on_gpu(cuda, ())  # -ngl auto, llama-server's default
    assert llama_server.runs_on_gpu(cuda, ("-ngl", "all"))
    assert llama_server.runs_on_gpu(cuda, ("--n-gpu-layers", "20"))
    for off in (("-ngl", "0"), ("--n-gpu-layers=0",), ("--gpu-layers", "0"),
                ("--device", "none"), ("-dev", "none")):
        assert not llama_server.runs_on_gpu(cuda, off), off

    demo = dataclasses.replace(tune_setup.demo(llama_bin), binary=str(cuda))
    assert demo.on_gpu and device_of(demo, TuneOptions()) == "gpu"
    assert device_of(demo, TuneOptions(device="cpu")) == "cpu"  # the user's word wins
    on_cpu = dataclasses.replace(demo, flags=("-ngl", "0"))
    assert device_of(on_cpu, TuneOptions()) == "cpu"
    # the verify cost follows: a GPU verifies k rows for about the price of one
    gpu = predict(_ngram(demo), demo, "gpu", [])
    cpu = predict(_ngram(on_cpu), on_cpu, "cpu", [])
    assert "gpu)" in gpu.source and "cpu)" in cpu.source and gpu.speedup > cpu.speedup

    gpus_free = llama_server.free_memory(True)
    assert hub.memory_left(demo) == pytest.approx(
        gpus_free - demo.facts.weight_bytes - llama_server.SERVER_OVERHEAD, rel=0.01)


def test_a_build_that_cannot_list_its_devices_falls_back_to_what_nvml_sees(tmp_path,
                                                                           monkeypatch):
    old = _binary(tmp_path, "llama-server-old", None)
    missing = tmp_path / "no-such-llama-server"
    assert llama_server.offload_devices(old) is None
    assert llama_server.offload_devices(missing) is None
    assert not llama_server.runs_on_gpu(old, ())  # no NVML library on this machine
    driver.install(monkeypatch, driver.NvmlLibrary(driver.workstation()))
    assert llama_server.runs_on_gpu(old, ())
    assert not llama_server.runs_on_gpu(old, ("-ngl", "0"))


def _ngram(setup):
    from specdeck.core.tune.candidates import Candidate

    return Candidate("ngram-mod")
