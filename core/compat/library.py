"""Where the user's models are: TabbyAPI's config.yml and the extra folders in settings."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import SpecDeckError
from specdeck.core.userpath import expand_user

log = logging.getLogger(__name__)


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

    doc = config.load(config_path)
    max_seq_len = doc.value("model", "max_seq_len")
    return ConfiguredModels(
        model_dirs=_unique([doc.resolve_dir("model", "model_dir"),
                            doc.resolve_dir("draft_model", "draft_model_dir")]),
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


def config_model_dirs(config_path: str | Path) -> list[Path]:
    return list(read_config_models(config_path).model_dirs)


def library_dirs(
    extra_dirs: Iterable[str | Path] = (), config_path: str | Path | None = None
) -> tuple[list[Path], list[str]]:
    """The folders to scan for models (``extra_dirs`` first, then the config's model dirs)
    and the problems met on the way.

    A config that cannot be read is reported and skipped: the other folders still count.
    """
    dirs = [expand_user(d) for d in extra_dirs]
    problems: list[str] = []
    if config_path:
        try:
            dirs.extend(config_model_dirs(config_path))
        except SpecDeckError as exc:
            log.warning("Not scanning the model folders of %s: %s", config_path, exc)
            problems.append(f"Model folders of {config_path} not scanned: {exc}")
    return list(_unique(dirs)), problems
