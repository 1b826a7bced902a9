"""Turn SpecDeck's result objects into JSON: frozen dataclasses, enums, paths, tuples."""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from pathlib import PurePath
from typing import Any


def to_jsonable(obj: Any) -> Any:
    """A structure of dicts, lists, strings, numbers, booleans and None."""
    if hasattr(obj, "to_json") and callable(obj.to_json):
        return to_jsonable(obj.to_json())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, enum.Enum):
        return to_jsonable(obj.value)
    if isinstance(obj, PurePath):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=str) if isinstance(obj, (set, frozenset)) else obj
        return [to_jsonable(v) for v in items]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def dumps(obj: Any, indent: int | None = 2) -> str:
    return json.dumps(to_jsonable(obj), indent=indent, ensure_ascii=False)
