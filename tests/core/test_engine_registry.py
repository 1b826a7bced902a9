"""Engine discovery: listing is instant and imports nothing heavy; each engine says why not."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from specdeck.core.engines import availability as av
from specdeck.core.engines import (
    create_engine,
    engine_info,
    engine_names,
    list_engines,
)
from specdeck.core.engines.base import EngineUnavailableError
from specdeck.core.errors import InvalidInputError

DATA_ERROR = (
    Path(__file__).resolve().parents[1] / "data" / "exllamav2-0.3.2-import-on-cpu-torch.txt"
).read_text()


def test_listing_engines_imports_neither_torch_nor_exllamav2():
    code = (
        "import sys, json\n"
        "from specdeck.core.engines import list_engines\n"
        "infos = list_engines()\n"
        "print(json.dumps({'names': [i.name for i in infos],\n"
        "  'heavy': [m for m in ('torch', 'transformers', 'exllamav2') if m in sys.modules]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    out = json.loads(done.stdout)
    assert out == {"names": ["torch", "exllamav2", "server"], "heavy": []}


def test_torch_engine_availability_matches_this_machine():
    info = engine_info("torch")
    installed = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "safetensors"))
    assert info.availability.available is bool(installed)
    if installed:
        import torch

        assert f"torch {torch.__version__}" in info.availability.detail
    else:
        assert "specdeck[torch]" in info.availability.install_hint


def test_exllamav2_availability_matches_this_machine():
    import torch

    info = engine_info("exllamav2").availability
    if importlib.util.find_spec("exllamav2") is None:
        assert (info.available, info.reason) == (False, "exllamav2 is not installed")
        assert "specdeck[exllamav2]" in info.install_hint
    elif torch.version.cuda is None and getattr(torch.version, "hip", None) is None:
        assert not info.available
        assert info.reason.startswith("no CUDA: torch")


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(InvalidInputError, match="torch, exllamav2, server"):
        engine_info("vllm")
    assert engine_names() == ("torch", "exllamav2", "server")
    assert [i.name for i in list_engines()] == ["torch", "exllamav2", "server"]


def test_creating_an_unavailable_engine_says_what_to_install():
    if engine_info("exllamav2").availability.available:
        pytest.skip("ExLlamaV2 can run on this machine")
    with pytest.raises(EngineUnavailableError) as caught:
        create_engine("exllamav2")
    assert "cannot run here" in caught.value.what
    assert caught.value.fix


def test_creating_the_torch_engine_gives_an_unloaded_engine():
    engine = create_engine("torch", prepack=False)
    assert engine.name == "torch" and engine.loaded is None


# torch's version.py, read without importing torch --------------------------------------------
CUDA_VERSION_PY = """from typing import Optional

__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'xpu']
__version__ = '2.6.0+cu124'
debug = False
cuda: Optional[str] = '12.4'
git_version = '1eba9b3aa3c43f86f4a2c807ac8e12c4a7767340'
hip: Optional[str] = None
xpu: Optional[str] = None
"""


def test_version_fields_are_read_from_torchs_version_file():
    assert av._read_version_field(CUDA_VERSION_PY, "__version__") == "2.6.0+cu124"
    assert av._read_version_field(CUDA_VERSION_PY, "cuda") == "12.4"
    assert av._read_version_field(CUDA_VERSION_PY, "hip") is None


def test_torch_build_agrees_with_torch_itself():
    import torch

    assert av.torch_build() == (torch.__version__, torch.version.cuda, torch.version.hip)
    code = (
        "import sys, json\n"
        "from specdeck.core.engines.availability import torch_build\n"
        "print(json.dumps([torch_build(), 'torch' in sys.modules]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    build, imported = json.loads(done.stdout)
    assert tuple(build) == (torch.__version__, torch.version.cuda, torch.version.hip)
    assert imported is False


# the decision, for machines other than this one ------------------------------------------------
RTX_BOX = av.ExllamaFacts(
    installed=True, version="0.3.2", torch_version="2.6.0+cu124", cuda="12.4", hip=None,
    driver=True, prebuilt_extension=False, nvcc=None,
)


def test_a_cuda_box_without_nvcc_or_a_prebuilt_extension_cannot_build_it():
    verdict = av.exllamav2_verdict(RTX_BOX)
    assert not verdict.available
    assert "no CUDA toolkit (nvcc)" in verdict.reason


def test_a_prebuilt_wheel_needs_no_toolkit():
    from dataclasses import replace

    verdict = av.exllamav2_verdict(replace(RTX_BOX, prebuilt_extension=True))
    assert verdict.available
    assert verdict.detail.startswith("exllamav2 0.3.2, torch 2.6.0+cu124 (CUDA 12.4)")


def test_with_nvcc_the_first_load_will_build():
    from dataclasses import replace

    verdict = av.exllamav2_verdict(replace(RTX_BOX, nvcc="/usr/local/cuda/bin/nvcc"))
    assert verdict.available and "built on first load" in verdict.detail


def test_a_recorded_build_failure_makes_it_unavailable_with_the_fix():
    from dataclasses import replace

    facts = replace(RTX_BOX, nvcc="/usr/local/cuda/bin/nvcc", import_ok=False,
                    import_error=DATA_ERROR)
    verdict = av.exllamav2_verdict(facts)
    assert not verdict.available
    assert "failed to build or load" in verdict.reason
    assert "CUDA_HOME" in verdict.install_hint


@pytest.mark.parametrize(
    "change, phrase",
    [
        ({"installed": False}, "not installed"),
        ({"cuda": None}, "CPU-only build"),
        ({"driver": False}, "no NVIDIA driver"),
        ({"torch_version": "2.13.0+cu130", "cuda": "13.0", "prebuilt_extension": True},
         "newer than any"),
    ],
)
def test_each_blocker_is_named(change, phrase):
    from dataclasses import replace

    verdict = av.exllamav2_verdict(replace(RTX_BOX, **change))
    assert phrase in (verdict.reason + verdict.detail)


def test_import_outcomes_are_remembered_per_installed_versions(specdeck_home):
    av.record_exllamav2_import(False, "OSError: CUDA_HOME environment variable is not set.")
    assert av.recorded_exllamav2_import() == (
        False, "OSError: CUDA_HOME environment variable is not set."
    )
    record = av._record_path()
    payload = json.loads(record.read_text())
    payload["versions"]["torch"] = "1.0.0"
    record.write_text(json.dumps(payload))
    assert av.recorded_exllamav2_import() is None  # another torch: the outcome may differ


def test_deep_probe_really_imports_in_a_child_process():
    import torch

    ok, error = av.probe_exllamav2_import(timeout_s=300)
    if importlib.util.find_spec("exllamav2") is None:
        assert not ok and "No module named 'exllamav2'" in error
    elif torch.version.cuda is None:
        assert not ok and error  # CPU-only torch: the CUDA extension cannot build
