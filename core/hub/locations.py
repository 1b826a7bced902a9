"""Where models live: the folders of the user's TabbyAPI config.yml, and SpecDeck's extras.

The model library is config.yml's model and draft folders, the extra folders in SpecDeck's
settings, and any folder a command or page adds (:func:`library_dirs`): the Models page,
`specdeck models`, the Compatibility page, `specdeck suggest` and the demo's partner search
all scan these. The default install destination is config.yml's
``draft_model.draft_model_dir`` (TabbyAPI's default, ``models``, resolved against
config.yml's folder). The config is read through the config editor's API
(specdeck.core.config); :func:`current_config` is the only place that touches it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from specdeck.core import settings as settings_store
from specdeck.core.config.schema import DRAFT, MODEL
from specdeck.core.userpath import expand_user

if TYPE_CHECKING:
    from specdeck.core.config import ConfigDocument
    from specdeck.core.settings import Settings


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
    return Path(doc.resolve_dir(DRAFT, "draft_model_dir"))


def config_dirs(doc: ConfigDocument) -> list[Path]:
    """A config.yml's model folders: ``model.model_dir`` and ``draft_model.draft_model_dir``
    (TabbyAPI's defaults where unset; relative ones against the config's folder; the legacy
    ``draft:`` under ``model:`` understood by the config API)."""
    return [Path(doc.resolve_dir(MODEL, "model_dir")),
            Path(doc.resolve_dir(DRAFT, "draft_model_dir"))]


def library_dirs(config_path: str | Path | None = None, extra: Iterable[str | Path] = (), *,
                 saved: Settings | None = None) -> tuple[list[Path], list[str]]:
    """The folders of the model library, and what kept any from being read: config.yml's
    model and draft folders (``config_path``, else the one SpecDeck has open), SpecDeck's
    extra folders, then ``extra``; each once (the same folder however it is written). A
    config.yml that cannot be read is said in the problems; the other folders still count.
    ``saved``: the SpecDeck settings that say which config.yml is open and the extra
    folders (a page passes the ones it shows, which a save in progress has not written
    yet); None reads them from disk."""
    from specdeck.core.errors import SpecDeckError

    saved = settings_store.load() if saved is None else saved
    config = config_path or settings_store.remembered_config(saved)
    try:
        return _dirs(config, saved.extra_model_dirs, extra), []
    except SpecDeckError as exc:
        return (_dirs(None, saved.extra_model_dirs, extra),
                [f"Model folders of {config} not scanned: {exc}"])


def model_dirs(config_path: str | Path | None = None, extra: Iterable[str | Path] = ()) -> list[Path]:
    """:func:`library_dirs` as saved on disk, with a config.yml that cannot be read raised
    (its SpecDeckError): for a command that reports it and stops."""
    saved = settings_store.load()
    return _dirs(config_path or settings_store.remembered_config(saved), saved.extra_model_dirs,
                 extra)


def _dirs(config_path: str | Path | None, saved_dirs: Iterable[str | Path],
          extra: Iterable[str | Path]) -> list[Path]:
    dirs: list[Path] = []
    doc = current_config(config_path) if config_path else None
    if doc is not None:
        dirs.extend(config_dirs(doc))
    dirs.extend(Path(p) for p in saved_dirs)
    dirs.extend(Path(p) for p in extra)
    unique: list[Path] = []
    seen: set[Path] = set()
    for d in dirs:
        key = expand_user(d).resolve()
        if key not in seen:
            seen.add(key)
            unique.append(expand_user(d))
    return unique
