"""A page's form kept between sessions: its frozen model saved to, and restored from,
QSettings by the model's field table (core.forms). No page writes a settings key by hand.

Restoring never fails: a value missing, of another type, out of range or not among the
choices (an older SpecDeck's, a hand-edited file) is the model's default for that field, and
the others still come back.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from typing import Any, TypeVar

from PySide6.QtCore import QSettings
from specdeck.core.errors import SpecDeckError
from specdeck.core.forms import FROM_TEXT, OLDER, TO_TEXT, accepts, kept_fields, saved_key

log = logging.getLogger(__name__)

Model = TypeVar("Model")
_WRONG = object()
_INTEGER = re.compile(r"^\s*-?\d+\s*$")


def save(prefix: str, model) -> None:
    """Keep ``model``'s kept fields under ``prefix`` (e.g. "tune/")."""
    store = QSettings()
    for field in kept_fields(model):
        store.setValue(prefix + saved_key(field), _encode(field, getattr(model, field.name)))
        for older in field.metadata.get(OLDER, ()):
            if not callable(older):
                store.remove(prefix + older)


def restore(prefix: str, default: Model) -> Model:
    """The model saved under ``prefix``, field by field; ``default``'s value for each field
    never saved or saved unusable."""
    store = QSettings()
    values = {}
    for field in kept_fields(default):
        raw = _saved_value(store, prefix, field)
        if raw is None:
            continue
        value = _decode(field, raw, getattr(default, field.name))
        if value is _WRONG or not accepts(field, value):
            log.info("Ignoring the saved %s%s: %r", prefix, saved_key(field), raw)
            continue
        values[field.name] = value
    return dataclasses.replace(default, **values)


def _saved_value(store: QSettings, prefix: str, field: dataclasses.Field):
    """What is saved for ``field``: under its key, else as an older SpecDeck saved it."""
    raw = store.value(prefix + saved_key(field))
    for older in field.metadata.get(OLDER, ()):
        if raw is not None:
            break
        if callable(older):
            saved = {key[len(prefix):]: store.value(key) for key in store.allKeys()
                     if key.startswith(prefix)}
            raw = older(saved)
        else:
            raw = store.value(prefix + older)
    return raw


def has_saved(prefix: str, model) -> bool:
    """Whether any of ``model``'s fields was ever saved under ``prefix``."""
    store = QSettings()
    return any(store.contains(prefix + saved_key(f)) for f in kept_fields(model))


def _encode(field: dataclasses.Field, value: Any):
    to_text = field.metadata.get(TO_TEXT)
    if to_text is not None:
        return to_text(value)
    if isinstance(value, tuple):
        return json.dumps(list(value))
    return value


def _decode(field: dataclasses.Field, raw: Any, default: Any):
    """``raw`` as QSettings gives it back (an INI file gives text) in ``default``'s type."""
    from_text = field.metadata.get(FROM_TEXT)
    if from_text is not None:
        try:
            return from_text(raw)
        except (TypeError, ValueError, LookupError, AttributeError, SpecDeckError):
            return _WRONG
    if isinstance(default, bool):
        if isinstance(raw, bool):
            return raw
        return {"true": True, "false": False}.get(raw, _WRONG) if isinstance(raw, str) else _WRONG
    if isinstance(default, int):
        if isinstance(raw, int) and not isinstance(raw, bool):
            return raw
        return int(raw) if isinstance(raw, str) and _INTEGER.match(raw) else _WRONG
    if isinstance(default, float):
        if isinstance(raw, bool):
            return _WRONG
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return _WRONG
        return value if math.isfinite(value) else _WRONG
    if isinstance(default, str):
        return raw if isinstance(raw, str) else _WRONG
    if isinstance(default, tuple):
        try:
            items = json.loads(raw) if isinstance(raw, str) else _WRONG
        except ValueError:
            return _WRONG
        if isinstance(items, list) and all(isinstance(i, str) for i in items):
            return tuple(items)
        return _WRONG
    return _WRONG
