"""Find a TabbyAPI install and the per-model overrides it applies.

TabbyAPI reads ``config.yml`` from the folder it starts in (its install folder); users copy
``config_sample.yml`` to create it. When a model is loaded, a ``tabby_config.yml`` inside
the model's folder overrides the ``model:`` and ``draft_model:`` settings
(common/model.py, ``apply_load_defaults``; the ``draft_model`` part only there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.config.document import ConfigDocument, parse_values
from specdeck.core.config.schema import DRAFT, MODEL
from specdeck.core.errors import InvalidInputError, NotFoundError
from specdeck.core.userpath import expand_user

CONFIG_NAME = "config.yml"
SAMPLE_NAME = "config_sample.yml"
MODEL_OVERRIDE_NAME = "tabby_config.yml"


@dataclass(frozen=True)
class TabbyInstall:
    root: Path
    config: Path
    sample: Path | None
    has_exllamav2_backend: bool
    """The install still has TabbyAPI's ExLlamaV2 backend (exl2-checkpoint or older)."""

    @property
    def config_exists(self) -> bool:
        return self.config.is_file()


def find_install(folder: str | Path) -> TabbyInstall:
    """Recognise a TabbyAPI folder (it has main.py plus config_sample.yml or config.yml)."""
    root = expand_user(folder)
    if root.is_file() and root.name in (CONFIG_NAME, SAMPLE_NAME):
        root = root.parent
    if not root.is_dir():
        raise NotFoundError(f"{root} does not exist.", "Pick the folder you cloned TabbyAPI into.")
    config = root / CONFIG_NAME
    sample = root / SAMPLE_NAME
    looks_like_tabby = (root / "main.py").is_file() or sample.is_file() or config.is_file()
    if not looks_like_tabby:
        raise InvalidInputError(
            f"{root} does not look like a TabbyAPI folder (no main.py, config.yml or "
            "config_sample.yml).",
            "Pick the folder that holds TabbyAPI's main.py.",
        )
    return TabbyInstall(
        root=root,
        config=config,
        sample=sample if sample.is_file() else None,
        has_exllamav2_backend=(root / "backends" / "exllamav2").is_dir(),
    )


@dataclass(frozen=True)
class ModelOverrides:
    """The settings a model's tabby_config.yml forces when that model loads."""

    path: Path
    model: dict[str, Any]
    draft_model: dict[str, Any]

    @property
    def overrides_draft(self) -> bool:
        return bool(self.draft_model)


def model_overrides(doc: ConfigDocument) -> ModelOverrides | None:
    """The target model's tabby_config.yml, if it has one."""
    target = doc.target_model_path()
    if target is None:
        return None
    path = target / MODEL_OVERRIDE_NAME
    if not path.is_file():
        return None
    from specdeck.core.files import CONFIG_FILE, read_text_bounded

    text = read_text_bounded(path, "model's tabby_config.yml", CONFIG_FILE,
                             hint="TabbyAPI reads it beside the model: fix or remove it.")
    data = parse_values(text, str(path)) or {}
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path} should be a mapping with model: / draft_model: sections.")
    model = data.get(MODEL) if isinstance(data.get(MODEL), dict) else {}
    draft = data.get(DRAFT) if isinstance(data.get(DRAFT), dict) else {}
    return ModelOverrides(path=path, model=dict(model), draft_model=dict(draft))
