"""Where models live: the folders of the user's TabbyAPI config.yml, and SpecDeck's extras.

The default install destination is config.yml's ``draft_model.draft_model_dir`` (TabbyAPI's
default, ``models``, resolved against config.yml's folder). The config is read through the
config editor's API (specdeck.core.config); :func:`current_config` is the only place that
touches it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specdeck.core import settings as settings_store
from specdeck.core.userpath import expand_user

if TYPE_CHECKING:
    from specdeck.core.config import ConfigDocument


def current_config(config_path: str | Path | None = None) -> ConfigDocument | None:
    """The ConfigDocument of ``config_path`` (default: the config.yml SpecDeck has open, if
    it still exists), or None when there is none.

    Raises the config editor's ConfigError / NotFoundError for a file that cannot be read:
    a broken config.yml must be reported, not silently replaced by another folder.
    """
    from specdeck.core import config

    path = config_path or settings_store.remembered_config()
    if not path:
        return None
    return config.load(expand_user(path))


def default_install_dir(config_path: str | Path | None = None) -> Path | None:
    """config.yml's draft model folder, or None when no config.yml is known."""
    doc = current_config(config_path)
    if doc is None:
        return None
    return Path(doc.resolve_dir("draft_model", "draft_model_dir"))


def model_dirs(config_path: str | Path | None = None, extra: tuple[str | Path, ...] = ()) -> list[Path]:
    """Folders to scan for the local library: config.yml's model and draft folders, the
    extra folders in SpecDeck's settings, then ``extra``; without duplicates."""
    dirs: list[Path] = []
    doc = current_config(config_path)
    if doc is not None:
        dirs.append(Path(doc.resolve_dir("model", "model_dir")))
        dirs.append(Path(doc.resolve_dir("draft_model", "draft_model_dir")))
    dirs.extend(Path(p) for p in settings_store.load().extra_model_dirs)
    dirs.extend(Path(p) for p in extra)
    unique: list[Path] = []
    seen: set[Path] = set()
    for d in dirs:
        key = expand_user(d).resolve()
        if key not in seen:
            seen.add(key)
            unique.append(expand_user(d))
    return unique
