"""Make an installed model TabbyAPI's draft model: a config.yml change, previewed and saved
through the config editor (specdeck.core.config), never written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specdeck.core.errors import InvalidInputError
from specdeck.core.userpath import expand_user


def draft_settings(model_folder: str | Path) -> dict[tuple[str, str], str]:
    """The config.yml values that make TabbyAPI load ``model_folder`` as its draft model:
    TabbyAPI joins draft_model_dir and draft_model_name."""
    folder = expand_user(model_folder).absolute()
    if not (folder / "config.json").is_file():
        raise InvalidInputError(f"{folder} is not a model folder (no config.json).")
    return {
        ("draft_model", "draft_model_dir"): str(folder.parent),
        ("draft_model", "draft_model_name"): folder.name,
    }


def plan_use_as_draft(model_folder: str | Path, config_path: str | Path) -> Any:
    """The config editor's ConfigChange (new text, diff) that sets ``model_folder`` as the
    draft model in ``config_path``. Nothing is written; save it with config.save(change)."""
    from specdeck.core import config

    doc = config.load(expand_user(config_path))
    return config.plan_change(doc, draft_settings(model_folder))


def change_diff(change: Any) -> str:
    """The unified diff of a planned change (the config editor offers it as ``diff()``)."""
    diff = change.diff
    return diff() if callable(diff) else str(diff)


def change_is_noop(change: Any) -> bool:
    """True when the model already is the draft model: saving would change nothing."""
    noop = getattr(change, "is_noop", None)
    return bool(noop) if noop is not None else not getattr(change, "changed_keys", True)


def save_change(change: Any, force: bool = False) -> None:
    """Write a planned change atomically (config.yml.bak keeps the previous version)."""
    from specdeck.core import config

    config.save(change, force=force)
