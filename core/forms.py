"""A form's field table: the frozen model of a page's form says, per field, which values it
takes and whether the form keeps it between sessions.

A page reads its widgets into one frozen model and shows a model in its widgets (both
directions, one function each); the GUI keeps a model between sessions by this table
(``gui/form_settings.py``), so a saved value that is out of range, not one of the choices or
of another type is never shown: the field falls back to the model's default.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

LOW, HIGH, CHOICES, CHECK, KEPT, KEY, OLDER, TO_TEXT, FROM_TEXT = (
    "low", "high", "choices", "check", "kept", "key", "older", "to_text", "from_text")


def form_field(default: Any = dataclasses.MISSING, *, low=None, high=None, choices=None,
               check: Callable[[Any], bool] | None = None, kept: bool = True,
               key: str | None = None, older: tuple = (),
               to_text: Callable[[Any], str] | None = None,
               from_text: Callable[[str], Any] | None = None,
               default_factory: Any = dataclasses.MISSING):
    """One row of the table: ``low``/``high`` bound a number, ``choices`` lists the values a
    field takes, ``check`` says whether a value is one (e.g. a duration); ``kept=False``:
    never saved (a key, a consent meant for this session); ``key``: the name it is saved
    under when not the field's; ``older``: how an older SpecDeck saved it, read when it is
    not saved under ``key`` (a name: the same value under that name, removed once the field
    is saved; a function of every saved name -> value under the form's prefix: the value as
    it is saved now, or None); ``to_text``/``from_text``: how a value that is not text, a
    number, a bool or a tuple of texts is saved."""
    metadata = {LOW: low, HIGH: high, CHOICES: None if choices is None else tuple(choices),
                CHECK: check, KEPT: kept, KEY: key, OLDER: tuple(older), TO_TEXT: to_text,
                FROM_TEXT: from_text}
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata=metadata)


def accepts(field: dataclasses.Field, value: Any) -> bool:
    """Whether ``value`` is in the range, among the choices and passes the check ``field``
    names."""
    meta = field.metadata
    low, high, choices, check = meta.get(LOW), meta.get(HIGH), meta.get(CHOICES), meta.get(CHECK)
    try:
        if low is not None and value < low or high is not None and value > high:
            return False
    except TypeError:
        return False
    return (choices is None or value in choices) and (check is None or bool(check(value)))


def kept_fields(model) -> list[dataclasses.Field]:
    """The fields a form keeps between sessions."""
    return [f for f in dataclasses.fields(model) if f.metadata.get(KEPT, True)]


def saved_key(field: dataclasses.Field) -> str:
    return field.metadata.get(KEY) or field.name


def bounds(model, name: str) -> tuple:
    """(low, high) of the field ``name`` of ``model`` (a class or an instance): what the
    widget showing it is limited to."""
    field = next(f for f in dataclasses.fields(model) if f.name == name)
    return field.metadata[LOW], field.metadata[HIGH]
