"""Where the user's models are: TabbyAPI's model folders plus the extra folders in settings."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from specdeck.core.errors import SpecDeckError

log = logging.getLogger(__name__)


def config_model_dirs(config_path: str | Path) -> list[Path]:
    """model.model_dir and draft_model.draft_model_dir of a TabbyAPI config.yml.

    Relative folders are resolved against the config file's folder, as TabbyAPI (started
    from its own folder) does. Uses SpecDeck's config API when present.
    """
    path = Path(config_path).expanduser()
    try:
        from specdeck.core import config
    except ImportError:
        return _dirs_from_yaml(path)
    doc = config.load(path)
    return _unique(doc.resolve_dir(section, key)
                   for section, key in (("model", "model_dir"), ("draft_model", "draft_model_dir")))


def _dirs_from_yaml(path: Path) -> list[Path]:
    """Fallback until the config API is merged: read the two keys straight from the YAML."""
    from ruamel.yaml import YAML, YAMLError

    from specdeck.core.errors import InvalidInputError, NotFoundError

    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8")) or {}
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path} does not exist.", "Pick TabbyAPI's config.yml.") from exc
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        raise InvalidInputError(f"Cannot read {path} as YAML: {exc}.") from exc
    model = data.get("model") if isinstance(data, dict) else None
    model = model if isinstance(model, dict) else {}
    draft = data.get("draft_model") if isinstance(data, dict) else None
    if not isinstance(draft, dict):
        draft = model.get("draft") if isinstance(model.get("draft"), dict) else {}
    # TabbyAPI's defaults for both keys are "models".
    values = (model.get("model_dir") or "models", draft.get("draft_model_dir") or "models")
    return _unique(p if p.is_absolute() else path.parent / p
                   for p in (Path(str(v)).expanduser() for v in values))


def _unique(paths: Iterable[Path]) -> list[Path]:
    result: list[Path] = []
    for p in paths:
        if p not in result:
            result.append(p)
    return result


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
    return _unique(dirs), problems
