"""Make an installed model TabbyAPI's draft model: a config.yml change, previewed and saved
through the config editor (specdeck.core.config), never written here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specdeck.core.config.schema import DRAFT, DRAFT_MODE_MODEL, EXLLAMAV2, EXLLAMAV3, draft_mode_of
from specdeck.core.errors import InvalidInputError
from specdeck.core.userpath import expand_user


def draft_settings(model_folder: str | Path) -> dict[tuple[str, str], str]:
    """The config.yml values that make TabbyAPI load ``model_folder`` as its draft model:
    TabbyAPI joins draft_model_dir and draft_model_name."""
    folder = expand_user(model_folder).absolute()
    if not (folder / "config.json").is_file():
        raise InvalidInputError(f"{folder} is not a model folder (no config.json).")
    return {
        (DRAFT, "draft_model_dir"): str(folder.parent),
        (DRAFT, "draft_model_name"): folder.name,
    }


def plan_use_as_draft(model_folder: str | Path, config_path: str | Path) -> Any:
    """The config editor's ConfigChange (new text, diff) that sets ``model_folder`` as the
    draft model in ``config_path``. Nothing is written; save it with config.save(change).

    The config's branch decides what fits: TabbyAPI main runs ExLlamaV3 (EXL3 drafts, and
    ``draft_mode: model`` so a draft model is what it drafts with), exl2-checkpoint runs
    ExLlamaV2 (EXL2 drafts); the other format is refused with the reason."""
    from specdeck.core import config

    doc = config.load(expand_user(config_path))
    settings = draft_settings(model_folder)
    backend = doc.backend_hint()
    _check_draft_format(Path(settings[(DRAFT, "draft_model_dir")]) /
                        settings[(DRAFT, "draft_model_name")], backend)
    if backend == EXLLAMAV3 and draft_mode_of(doc.section_values(DRAFT)) != DRAFT_MODE_MODEL:
        settings[(DRAFT, "draft_mode")] = DRAFT_MODE_MODEL  # the others ignore a draft model
    return config.plan_change(doc, settings)


def _check_draft_format(folder: Path, backend: str | None) -> None:
    """Refuse an EXL2 draft for TabbyAPI main and an EXL3 one for exl2-checkpoint."""
    from specdeck.core.models import quantization_from_config, read_json

    method = quantization_from_config(read_json(folder / "config.json")).method
    if backend == EXLLAMAV3 and method == "exl2":
        raise InvalidInputError(
            f"{folder.name} is an EXL2 quant, but this config.yml is for TabbyAPI's main branch, "
            "which runs ExLlamaV3 only and cannot load EXL2 models.",
            "Install an EXL3 variant of the draft (specdeck search --format exl3), or use "
            "TabbyAPI's exl2-checkpoint branch for EXL2.")
    if backend == EXLLAMAV2 and method == "exl3":
        raise InvalidInputError(
            f"{folder.name} is an EXL3 quant, but this config.yml is for TabbyAPI's ExLlamaV2 "
            "backend (exl2-checkpoint), which cannot load EXL3 models.",
            "Install an EXL2 variant of the draft, or move to TabbyAPI's main branch for EXL3.")


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
