"""A benchmark's results: numbers, a Markdown summary, and the machine they came from."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def machine_info() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.release()}",
    }
    from importlib import metadata

    for dist in ("torch", "transformers", "PySide6-Essentials", "tokenizers", "exllamav2"):
        try:
            info[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return info


def median(values: list[float]) -> float:
    return statistics.median(values)


@dataclass
class Report:
    name: str
    title: str
    results: dict[str, Any] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    out_dir: Path | None = None
    """Where ``python -m benchmarks`` writes it: :meth:`checkpoint` writes there too."""

    def record(self, key: str, value: Any) -> None:
        self.results[key] = value

    def text(self, line: str = "") -> None:
        """A line of the Markdown summary."""
        self.lines.append(line)

    def table(self, headers: list[str], rows: list[list[Any]]) -> None:
        self.lines.append("| " + " | ".join(headers) + " |")
        self.lines.append("|" + "|".join("---" for _ in headers) + "|")
        for row in rows:
            self.lines.append("| " + " | ".join(str(c) for c in row) + " |")
        self.lines.append("")

    def checkpoint(self, where: str) -> None:
        """Write what is measured so far to NAME.partial.md/.json (a long benchmark stopped
        later still leaves it, and the last finished report stays as it was); the finished
        report removes it."""
        if self.out_dir is not None:
            self.write(self.out_dir, partial=where)

    def write(self, out_dir: Path, partial: str | None = None) -> list[Path]:
        out_dir.mkdir(parents=True, exist_ok=True)
        machine = machine_info()
        stem = f"{self.name}.partial" if partial else self.name
        json_path = out_dir / f"{stem}.json"
        md_path = out_dir / f"{stem}.md"
        if not partial:  # the finished report replaces what a checkpoint left
            for stale in (out_dir / f"{self.name}.partial.json",
                          out_dir / f"{self.name}.partial.md"):
                stale.unlink(missing_ok=True)
        payload = {"benchmark": self.name, "title": self.title, "machine": machine,
                   "results": self.results, **({"partial": partial} if partial else {})}
        json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        header = [
            f"# {self.title}",
            "",
            f"Measured {machine['date']} on {machine['cpu']} ({machine['cores']} cores), "
            f"Python {machine['python']}. Raw numbers: `{json_path.name}`. "
            "Re-run with `make bench BENCH_ARGS=" + self.name + "`.",
            "",
            *([f"**Partial: {partial}.** The benchmark had not finished when this was "
               "written.", ""] if partial else []),
        ]
        md_path.write_text("\n".join(header + self.lines) + "\n", encoding="utf-8")
        return [md_path, json_path]
