"""TabbyAPI's config.yml: read, validate, edit the draft settings, save atomically.

    doc = load(path)                                   # ConfigDocument
    doc.value("draft_model", "draft_cache_mode")       # what TabbyAPI would use
    change = plan_change(doc, {("draft_model", "draft_model_name"): "Draft-4.0bpw"})
    print(change.diff())                               # unified diff, nothing written yet
    save(change)                                       # conflict check, .bak, atomic replace

Edits rewrite only the characters of the values that change (see edit.py); everything
else in the user's file, comments included, stays byte for byte.
"""

from specdeck.core.config.document import ConfigDocument, ConfigError, Layout, Problem, load
from specdeck.core.config.edit import ConfigChange, plan_change
from specdeck.core.config.migrate import Migration, legacy_parts, plan_migration
from specdeck.core.config.schema import DRAFT, MODEL, SETTINGS, Kind, Setting, setting
from specdeck.core.config.store import (
    ConfigConflictError,
    SaveResult,
    backup_path,
    create_config,
    default_config_text,
    save,
)
from specdeck.core.config.tabby import ModelOverrides, TabbyInstall, find_install, model_overrides

__all__ = [
    "DRAFT",
    "MODEL",
    "SETTINGS",
    "ConfigChange",
    "ConfigConflictError",
    "ConfigDocument",
    "ConfigError",
    "Kind",
    "Layout",
    "Migration",
    "ModelOverrides",
    "Problem",
    "SaveResult",
    "Setting",
    "TabbyInstall",
    "backup_path",
    "create_config",
    "default_config_text",
    "find_install",
    "legacy_parts",
    "load",
    "model_overrides",
    "plan_change",
    "plan_migration",
    "save",
    "setting",
]
