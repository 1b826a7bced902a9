"""Building model folders for the compatibility tests out of the real fixtures.

The fixtures are read-only; tests that need a variation (a tokenizer.json where the fixture
has vocab.json, a config.json with another EOS id) copy a real folder and change one thing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from conftest import MODELS


def copy_model(name: str, dest: Path, *, skip: tuple[str, ...] = ()) -> Path:
    """A writable copy of fixture folder ``name`` (without SOURCE.txt and ``skip``)."""
    target = dest / name
    shutil.copytree(MODELS / name, target,
                    ignore=shutil.ignore_patterns("SOURCE.txt", *skip))
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    return target


def with_tokenizer_json(name: str, dest: Path) -> Path:
    """A copy whose tokenizer.derived.json becomes tokenizer.json, as real repos ship it."""
    folder = copy_model(name, dest)
    (folder / "tokenizer.derived.json").rename(folder / "tokenizer.json")
    return folder


def edit_json(path: Path, **changes: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
