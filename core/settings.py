"""SpecDeck's own preferences, shared by the GUI and the CLI (settings.json).

Only small, non-secret values live here: the last TabbyAPI config.yml opened, extra model
folders, the Hub endpoint. Secrets (Hugging Face tokens) go to the platform keyring, never
here. Window geometry is Qt's business and lives in QSettings.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from specdeck.core import appdirs
from specdeck.core.atomic import atomic_write_text

log = logging.getLogger(__name__)

MAX_RECENT = 8


@dataclass(frozen=True)
class Settings:
    config_path: str | None = None
    recent_configs: tuple[str, ...] = ()
    tabby_dir: str | None = None
    extra_model_dirs: tuple[str, ...] = ()
    hub_endpoint: str | None = None

    def with_config(self, path: str | Path) -> "Settings":
        """Remember ``path`` as the current config and move it to the top of the recents."""
        text = str(Path(path).expanduser().absolute())
        recent = (text, *(p for p in self.recent_configs if p != text))[:MAX_RECENT]
        return replace(self, config_path=text, recent_configs=recent)


def settings_path() -> Path:
    return appdirs.config_dir() / "settings.json"


def load() -> Settings:
    """The saved settings; defaults if there are none or the file is unreadable."""
    path = settings_path()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Settings()
    except (OSError, ValueError) as exc:
        log.warning("Ignoring unreadable settings file %s: %s", path, exc)
        return Settings()
    known = {f.name: f for f in fields(Settings)}
    values = {}
    for name, value in raw.items() if isinstance(raw, dict) else ():
        if name not in known:
            continue
        values[name] = tuple(value) if isinstance(value, list) else value
    try:
        return Settings(**values)
    except TypeError:
        return Settings()


def save(settings: Settings) -> None:
    path = settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(asdict(settings), indent=2) + "\n")
