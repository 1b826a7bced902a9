"""Where SpecDeck keeps its own files (never inside the user's TabbyAPI folders).

Platform directories come from platformdirs. ``SPECDECK_HOME`` overrides all of them with
one folder, which the tests use so that they never touch a real user's settings.
"""

from __future__ import annotations

import os
from pathlib import Path

from specdeck.core.userpath import expand_user

APP_NAME = "specdeck"
HOME_ENV = "SPECDECK_HOME"


def _override() -> Path | None:
    value = os.environ.get(HOME_ENV)
    return expand_user(value) if value else None


def config_dir() -> Path:
    """User preferences (settings.json)."""
    if home := _override():
        return home / "config"
    import platformdirs

    return Path(platformdirs.user_config_dir(APP_NAME, appauthor=False))


def data_dir() -> Path:
    """Things the user made with SpecDeck: bench reports, run history."""
    if home := _override():
        return home / "data"
    import platformdirs

    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    """Things SpecDeck can rebuild: the converted demo model, Hub metadata."""
    if home := _override():
        return home / "cache"
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))
