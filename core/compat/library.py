"""What the user's TabbyAPI config.yml says about models: its folders and the pair it names.

The model library's folders (config.yml's, SpecDeck's extra ones, a command's own) are
``core.hub.locations.library_dirs``: one definition for every page and command that scans
models.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfiguredModels:
    """What a TabbyAPI config.yml says about models."""

    model_dirs: tuple[Path, ...]
    """model.model_dir and draft_model.draft_model_dir (one entry when they are the same)."""
    target: Path | None
    """model_dir / model_name, when a model is named."""
    draft: Path | None
    """draft_model_dir / draft_model_name, when a draft is named."""
    max_seq_len: int | None


def read_config_models(config_path: str | Path) -> ConfiguredModels:
    """The model folders, the configured pair and max_seq_len of a TabbyAPI config.yml.

    Relative folders resolve against the config file's folder, as TabbyAPI (started from its
    own folder) does; the legacy layout with ``draft:`` under ``model:`` is understood.
    """
    from specdeck.core import config
    from specdeck.core.config.schema import MODEL
    from specdeck.core.hub.locations import config_dirs

    doc = config.load(config_path)
    max_seq_len = doc.value(MODEL, "max_seq_len")
    return ConfiguredModels(
        model_dirs=_unique(config_dirs(doc)),
        target=doc.target_model_path(),
        draft=doc.draft_model_path(),
        max_seq_len=max_seq_len if isinstance(max_seq_len, int) else None,
    )


def _unique(paths: Iterable[Path]) -> tuple[Path, ...]:
    result: list[Path] = []
    for p in paths:
        if p not in result:
            result.append(p)
    return tuple(result)
