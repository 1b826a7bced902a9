"""The local model library, with where each model came from when SpecDeck installed it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.hub.install import InstallMarker, read_marker
from specdeck.core.models import ModelInfo, ScanProblem, scan_models


@dataclass(frozen=True)
class LibraryEntry:
    model: ModelInfo
    source: InstallMarker | None  # None: not installed by SpecDeck

    def to_json(self) -> dict[str, Any]:
        m = self.model
        return {
            "name": m.name,
            "path": str(m.path),
            "model_type": m.arch.model_type,
            "parameters": m.parameters,
            "quantization": m.quant.method,
            "bits": m.quant.bits,
            "head_bits": m.quant.head_bits,
            "context_length": m.context_length,
            "vocab_size": m.arch.vocab_size,
            "files_bytes": m.files_bytes,
            "source": None if self.source is None else {
                "repo_id": self.source.repo_id,
                "revision": self.source.revision,
                "commit": self.source.commit,
                "installed_at": self.source.installed_at,
            },
        }


def scan_library(directories: Iterable[str | Path]) -> tuple[list[LibraryEntry], list[ScanProblem]]:
    """Every model folder under ``directories`` (see core.models.scan_models)."""
    models, problems = scan_models(directories)
    return [LibraryEntry(m, read_marker(m.path)) for m in models], problems


def installed_variants(directories: Iterable[str | Path]) -> dict[tuple[str, str], LibraryEntry]:
    """SpecDeck-installed models by (repo id, revision)."""
    entries, _ = scan_library(directories)
    return {(e.source.repo_id, e.source.revision): e for e in entries if e.source is not None}
