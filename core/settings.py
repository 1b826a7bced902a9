"""SpecDeck's own preferences, shared by the GUI and the CLI (settings.json).

Only small, non-secret values live here: the last TabbyAPI config.yml opened, extra model
folders, the Hub endpoint. Secrets (Hugging Face tokens) go to the platform keyring, never
here. What only the GUI needs (window geometry, the page last shown, the A/B form's controls
and its edited server arms) is Qt's business and lives in QSettings.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from specdeck.core import appdirs
from specdeck.core.atomic import atomic_write_text
from specdeck.core.userpath import expand_user

log = logging.getLogger(__name__)

MAX_RECENT = 8


@dataclass(frozen=True)
class Settings:
    config_path: str | None = None
    recent_configs: tuple[str, ...] = ()
    tabby_dir: str | None = None
    extra_model_dirs: tuple[str, ...] = ()
    hub_endpoint: str | None = None

    def without_config(self) -> "Settings":
        """Forget the current config (it vanished); it leaves the recents too."""
        gone = self.config_path
        return replace(self, config_path=None,
                       recent_configs=tuple(p for p in self.recent_configs if p != gone))

    def with_config(self, path: str | Path) -> "Settings":
        """Remember ``path`` as the current config and move it to the top of the recents."""
        text = str(expand_user(path).absolute())
        recent = (text, *(p for p in self.recent_configs if p != text))[:MAX_RECENT]
        return replace(self, config_path=text, recent_configs=recent)


def settings_path() -> Path:
    return appdirs.config_dir() / "settings.json"


def load() -> Settings:
    """The saved settings; defaults if there are none or the file is unreadable."""
    from specdeck.core.errors import NotFoundError, SpecDeckError
    from specdeck.core.files import read_text_bounded

    path = settings_path()
    try:  # bounded: a FIFO or a huge file put there is ignored, not waited on or read whole
        raw = json.loads(read_text_bounded(path, "settings file"))
    except NotFoundError:
        return Settings()
    except (OSError, ValueError, SpecDeckError) as exc:
        log.warning("Ignoring unreadable settings file %s: %s", path, exc)
        return Settings()
    if not isinstance(raw, dict):
        log.warning("Ignoring settings file %s: its top level is not an object", path)
        return Settings()
    values = {}
    for f in fields(Settings):
        if f.name not in raw:
            continue
        value = _checked(f.name, raw[f.name], f.default)
        if value is _WRONG:
            # One bad value must not cost the user the others (nor be saved back mangled).
            log.warning("Ignoring %s in %s: expected %s, found %r", f.name, path,
                        "a list of paths" if isinstance(f.default, tuple) else "a text",
                        raw[f.name])
            continue
        values[f.name] = value
    return Settings(**values)


_WRONG = object()


def _checked(name: str, value, default):
    """``value`` in the field's type (text or None; a tuple of texts), or _WRONG."""
    if isinstance(default, tuple):
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return tuple(value)
        return _WRONG
    if value is None or isinstance(value, str):
        return value
    return _WRONG


def remembered_config(saved: Settings | None = None) -> Path | None:
    """The config.yml the user last opened in SpecDeck (of ``saved``, else of the settings on
    disk), if it still exists.

    Commands that merely consult it (model folders for suggest, bench --demo) use this: a
    file that vanished since is not their business, and the GUI tells the user once.
    """
    value = (load() if saved is None else saved).config_path
    if not value:
        return None
    path = Path(value)
    return path if path.is_file() else None


def save(settings: Settings) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(asdict(settings), indent=2) + "\n")
