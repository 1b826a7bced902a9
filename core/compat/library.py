"""Where the user's models are: TabbyAPI's config.yml and the extra folders in settings."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.errors import SpecDeckError

log = logging.getLogger(__name__)

# TabbyAPI's default for model_dir and draft_model_dir.
DEFAULT_MODEL_DIR = "models"


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

    Relative folders are resolved against the config file's folder, as TabbyAPI (started
    from its own folder) does. Uses SpecDeck's config API when it is present.
    """
    path = Path(config_path).expanduser()
    try:
        from specdeck.core import config
    except ImportError:
        return _read_yaml(path)
    doc = config.load(path)
    max_seq_len = doc.value("model", "max_seq_len")
    return ConfiguredModels(
        model_dirs=_unique([doc.resolve_dir("model", "model_dir"),
                            doc.resolve_dir("draft_model", "draft_model_dir")]),
        target=doc.target_model_path(),
        draft=doc.draft_model_path(),
        max_seq_len=max_seq_len if isinstance(max_seq_len, int) else None,
    )


def _read_yaml(path: Path) -> ConfiguredModels:
    """Fallback until the config API is merged: read the few keys straight from the YAML,
    including the legacy layout that nests ``draft:`` under ``model:``."""
    from ruamel.yaml import YAML, YAMLError

    from specdeck.core.errors import InvalidInputError, NotFoundError

    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path} does not exist.", "Pick TabbyAPI's config.yml.") from exc
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        raise InvalidInputError(f"Cannot read {path} as YAML: {exc}.") from exc
    model = _section(data, "model")
    draft = _section(data, "draft_model") or _section(model, "draft")

    def folder(value: Any) -> Path:
        p = Path(str(value or DEFAULT_MODEL_DIR)).expanduser()
        return p if p.is_absolute() else path.parent / p

    model_dir, draft_dir = folder(model.get("model_dir")), folder(draft.get("draft_model_dir"))
    max_seq_len = model.get("max_seq_len")
    return ConfiguredModels(
        model_dirs=_unique([model_dir, draft_dir]),
        target=model_dir / str(model["model_name"]) if model.get("model_name") else None,
        draft=draft_dir / str(draft["draft_model_name"]) if draft.get("draft_model_name") else None,
        max_seq_len=max_seq_len if isinstance(max_seq_len, int) else None,
    )


def _section(data: Any, key: str) -> Mapping[str, Any]:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, Mapping) else {}


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
    dirs = [Path(d).expanduser() for d in extra_dirs]
    problems: list[str] = []
    if config_path:
        try:
            dirs.extend(config_model_dirs(config_path))
        except SpecDeckError as exc:
            log.warning("Not scanning the model folders of %s: %s", config_path, exc)
            problems.append(f"Model folders of {config_path} not scanned: {exc}")
    return list(_unique(dirs)), problems
