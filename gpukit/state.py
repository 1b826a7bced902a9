"""Where the kit keeps its work, and which steps are done: what lets a step resume.

The device machine forgets everything when it goes back (30 s after a call), and one
command may run at most 10 minutes. So every step writes its outputs under one work folder
(``/tmp/specdeck-gpu`` by default, ``SPECDECK_GPU_WORK`` overrides it) and, when it
finished, a small record ``state/<step>.json``. The driver runs the first step without a
"done" record; a warm machine's next command therefore continues where the last one
stopped, and a cold one starts again from the beginning (its work folder is gone).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_WORK = Path("/tmp/specdeck-gpu")

DONE = "done"
FAILED = "failed"
INCOMPLETE = "incomplete"
"""The step ran out of this command's time; running it again continues it."""
SKIPPED = "skipped"
"""A step it needs did not finish (failed, cut off, skipped): it runs when that one has."""


def work_dir() -> Path:
    return Path(os.environ.get("SPECDECK_GPU_WORK") or DEFAULT_WORK)


@dataclass(frozen=True)
class StepRecord:
    step: str
    status: str
    seconds: float
    finished_at: str
    summary: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    """The failure verbatim (the last lines of the log when a tool failed)."""

    @property
    def done(self) -> bool:
        return self.status == DONE


class KitState:
    """The work folder of one kit run and the records of its steps."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def path(self, *parts: str) -> Path:
        """A path under the work folder; its parent folder exists afterwards."""
        target = self.root.joinpath(*parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def _record_path(self, step: str) -> Path:
        return self.path("state", f"{step}.json")

    def record(self, step: str) -> StepRecord | None:
        path = self._record_path(step)
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        return StepRecord(**data)

    def save(self, record: StepRecord) -> None:
        path = self._record_path(record.step)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(record), indent=2) + "\n", encoding="utf-8")
        temporary.replace(path)  # a step killed mid-write leaves no half record

    def is_done(self, step: str) -> bool:
        record = self.record(step)
        return record is not None and record.done

    def records(self, steps: list[str]) -> dict[str, StepRecord]:
        found = {}
        for step in steps:
            record = self.record(step)
            if record is not None:
                found[step] = record
        return found

    def write_json(self, name: str, data: Any) -> Path:
        """A step's result, under results/."""
        path = self.path("results", f"{name}.json")
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
        return path

    def read_json(self, name: str) -> Any:
        path = self.root / "results" / f"{name}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
