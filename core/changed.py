"""What one of SpecDeck's writes changed, said once.

Every write to a file the user owns (TabbyAPI's config.yml, llama-swap's config.yaml, a
router's presets file, a model folder an install filled) returns a :class:`FileChanged`; the
app broadcasts it to every page (``gui.context.AppContext.file_changed``) so whatever shows
that file re-reads it, whichever page wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TABBY_CONFIG = "TabbyAPI config.yml"
SWAP_CONFIG = "llama-swap config.yaml"
MODEL = "model folder"

__all__ = ["FileChanged", "MODEL", "SWAP_CONFIG", "TABBY_CONFIG"]


@dataclass(frozen=True)
class FileChanged:
    path: Path
    """The file (or, for a model, the folder) as written, absolute."""
    kind: str
    """What it is: ``TABBY_CONFIG``, ``SWAP_CONFIG``, ``core.swap.presets.PRESETS_FILE`` or
    ``MODEL`` (the words each file's messages use)."""
