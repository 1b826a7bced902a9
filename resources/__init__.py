"""Data files shipped with SpecDeck (prompt suites, icons, templates, traces).

Use :func:`path` rather than building paths by hand: it works from a source checkout, an
installed wheel and the PyInstaller bundle alike.
"""

from __future__ import annotations

from importlib import resources as _resources
from pathlib import Path


def path(*parts: str) -> Path:
    """The filesystem path of a resource file, e.g. ``path("icons", "specdeck.svg")``."""
    return Path(str(_resources.files(__name__).joinpath(*parts)))
