"""Generation engines: one protocol (base.py), several engines, discovered lazily.

``list_engines()`` says which engines exist, whether each can run here and, if not, why and
what to install, without importing torch or exllamav2 (availability.py reads installed
files only). ``create_engine(name)`` imports the engine's module and builds it; that is the
first moment torch is imported.

    from specdeck.core.engines import create_engine
    engine = create_engine("torch")
    engine.load(LoadSpec(model_path=...))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from specdeck.core.engines import availability as _availability
from specdeck.core.engines.base import Availability, Engine, EngineUnavailableError
from specdeck.core.errors import InvalidInputError

SERVER_ENGINE = "server"
"""The engine of a plan whose arms are servers (core.servers.engine.ServerEngine): what the
A/B page's server form, `bench --server/--launch/--tabby` and the tune build."""
SERVER_MODEL = "server"
"""Such a plan's model: each of its servers holds its own."""


@dataclass(frozen=True)
class _Entry:
    label: str
    summary: str
    target: str
    """"module:Class" to import when the engine is created."""
    probe: Callable[[bool], Availability]


_ENGINES: dict[str, _Entry] = {
    "torch": _Entry(
        "PyTorch reference",
        "Hugging Face models (safetensors) on CPU or any torch device; SpecDeck's own "
        "speculative loop with n-gram or draft-model drafting.",
        "specdeck.core.engines.torch_ref:TorchEngine",
        lambda deep: _availability.torch_availability(),
    ),
    "exllamav2": _Entry(
        "ExLlamaV2",
        "EXL2 models on NVIDIA GPUs through ExLlamaV2 0.3.2's dynamic generator "
        "(draft model or n-gram drafting), as TabbyAPI runs them.",
        "specdeck.core.engines.exllamav2:ExLlamaV2Engine",
        _availability.exllamav2_availability,
    ),
    SERVER_ENGINE: _Entry(
        "Servers",
        "Your running servers (llama-server, llama-swap, TabbyAPI, vLLM, LM Studio, Ollama, "
        "any OpenAI-compatible one) or llama-servers SpecDeck launches, one per arm, over HTTP.",
        "specdeck.core.servers.engine:ServerEngine",
        lambda deep: Availability(True, detail="standard-library HTTP; no torch needed"),
    ),
}


@dataclass(frozen=True)
class EngineInfo:
    name: str
    label: str
    summary: str
    availability: Availability


def engine_names() -> tuple[str, ...]:
    return tuple(_ENGINES)


def engine_label(name: str) -> str:
    """The engine's display name; cheap (probes nothing)."""
    return _entry(name).label


def _entry(name: str) -> _Entry:
    try:
        return _ENGINES[name]
    except KeyError:
        raise InvalidInputError(
            f"Unknown engine {name!r}.", f"Choose one of: {', '.join(_ENGINES)}."
        ) from None


def engine_info(name: str, deep: bool = False) -> EngineInfo:
    """``deep`` may import the engine's library in a child process (slow, thorough)."""
    entry = _entry(name)
    return EngineInfo(name, entry.label, entry.summary, entry.probe(deep))


def list_engines(deep: bool = False) -> list[EngineInfo]:
    return [engine_info(name, deep) for name in _ENGINES]


def create_engine(name: str, **options: Any) -> Engine:
    """A new, unloaded engine; EngineUnavailableError (with what to install) if it cannot run."""
    entry = _entry(name)
    status = entry.probe(False)
    if not status.available:
        raise EngineUnavailableError(
            f"The {entry.label} engine cannot run here: {status.reason}.", status.install_hint
        )
    module_name, class_name = entry.target.split(":")
    cls = getattr(importlib.import_module(module_name), class_name)
    return cls(**options)


__all__ = ["EngineInfo", "create_engine", "engine_info", "engine_names", "list_engines"]
