"""EXL2 quantization of the pair with ExLlamaV2 0.3.2's own converter.

The converter is ``python -m exllamav2.conversion.convert_exl2`` (what ``convert.py`` runs).
Its arguments, read from v0.3.2's ``exllamav2/conversion/convert_exl2.py``:
``-i`` input HF folder, ``-o`` working folder (holds ``job_new.json``; a rerun without
``-nr`` resumes the job there), ``-om FILE`` measure only and save the measurement,
``-m FILE`` reuse a measurement, ``-b`` bits per weight, ``-hb`` head bits (2, 3, 4, 5, 6
or 8), ``-cf DIR`` the finished model with config and tokenizer files, ``-l`` / ``-ml``
tokens per calibration row (default 2048; the standard calibration set is used when no
``-c`` parquet is given).

One measurement per model, then one quantization per bitrate reusing it: the measurement
is the slow part. A conversion is done when its working folder's job says "finished".
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpukit.driver import StepIncomplete, ToolFailed

CONVERTER_MODULE = "exllamav2.conversion.convert_exl2"
HEAD_BITS = (2, 3, 4, 5, 6, 8)
"""exllamav2.conversion.qparams.qparams_headoptions in v0.3.2."""


@dataclass(frozen=True)
class Conversion:
    name: str
    argv: tuple[str, ...]
    work_dir: Path
    output: Path
    """The measurement file, or the compiled model folder."""


def folder_name(role: str, bits: float) -> str:
    return f"{role}-{bits:g}bpw"


def _rows(rows: int | None, measurement_rows: int | None) -> tuple[str, ...]:
    """-r / -mr (calibration rows for the quantization / the measurement; the converter's
    defaults, 100 and 16, when None)."""
    out: tuple[str, ...] = ()
    if rows is not None:
        out += ("-r", str(rows))
    if measurement_rows is not None:
        out += ("-mr", str(measurement_rows))
    return out


def measurement_argv(python: str, model: Path, work: Path, measurement: Path,
                     length: int, rows: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (python, "-m", CONVERTER_MODULE, "-i", str(model), "-o", str(work),
            "-om", str(measurement), "-ml", str(length), "-l", str(length), *rows)


def quantize_argv(python: str, model: Path, work: Path, measurement: Path, bits: float,
                  head_bits: int, out: Path, length: int,
                  rows: tuple[str, ...] = ()) -> tuple[str, ...]:
    if head_bits not in HEAD_BITS:
        raise ValueError(f"head bits {head_bits} is not one of {HEAD_BITS}")
    if not 2.0 <= bits <= 8.0:
        raise ValueError(f"{bits} bpw is outside the converter's 2..8")
    return (python, "-m", CONVERTER_MODULE, "-i", str(model), "-o", str(work),
            "-m", str(measurement), "-b", f"{bits:g}", "-hb", str(head_bits),
            "-cf", str(out), "-ml", str(length), "-l", str(length), *rows)


def conversion_plan(models: dict[str, Path], quant_dir: Path, bits: tuple[float, ...],
                    head_bits: int, length: int, python: str = sys.executable,
                    rows: int | None = None,
                    measurement_rows: int | None = None) -> list[Conversion]:
    """For each model (role -> HF folder): its measurement, then one job per bitrate."""
    plan = []
    extra = _rows(rows, measurement_rows)
    for role, model in models.items():
        measurement = quant_dir / f"{role}-measurement.json"
        work = quant_dir / "work" / f"{role}-measure"
        plan.append(Conversion(f"{role} measurement", measurement_argv(
            python, model, work, measurement, length, extra), work, measurement))
        for b in bits:
            name = folder_name(role, b)
            out = quant_dir / name
            work = quant_dir / "work" / name
            plan.append(Conversion(name, quantize_argv(
                python, model, work, measurement, b, head_bits, out, length, extra),
                work, out))
    return plan


def job_progress(work_dir: Path) -> str | None:
    job = work_dir / "job_new.json"
    if not job.is_file():
        return None
    try:
        return json.loads(job.read_text(encoding="utf-8")).get("progress")
    except (OSError, ValueError):
        return "corrupt"


def is_finished(conversion: Conversion) -> bool:
    return job_progress(conversion.work_dir) == "finished" and conversion.output.exists()


def prepare_work_dir(conversion: Conversion) -> None:
    """A job that says finished but lacks its output (or a corrupt job) starts afresh;
    an unfinished one is left for the converter to resume."""
    progress = job_progress(conversion.work_dir)
    if progress in ("finished", "corrupt"):
        shutil.rmtree(conversion.work_dir, ignore_errors=True)


def role_of(conversion: Conversion) -> str:
    """"target" of "target measurement" and "target-4bpw"."""
    return conversion.name.split()[0].split("-")[0]


def run_conversions(plan: list[Conversion], log_dir: Path, seconds_left: Callable[[], float],
                    log: Callable[[str], None] = print) -> list[dict]:
    """Run what is not finished; each conversion's output goes to log_dir/<name>.log. Each
    model's chain (its measurement, then its bitrates) runs in order, the models side by
    side: on the first H200 run the target's chain took 172 s and the draft's 59 s one after
    the other, and one GPU holds both with room to spare."""
    from concurrent.futures import ThreadPoolExecutor

    chains: dict[str, list[Conversion]] = {}
    for conversion in plan:
        chains.setdefault(role_of(conversion), []).append(conversion)
    with ThreadPoolExecutor(max_workers=max(1, len(chains))) as pool:
        futures = [pool.submit(_run_chain, chain, log_dir, seconds_left, log)
                   for chain in chains.values()]
        done = [future.result() for future in futures]  # the first failure is raised
    by_name = {r["name"]: r for results in done for r in results}
    return [by_name[c.name] for c in plan if c.name in by_name]


def _run_chain(plan: list[Conversion], log_dir: Path, seconds_left: Callable[[], float],
               log: Callable[[str], None]) -> list[dict]:
    results = []
    for conversion in plan:
        if is_finished(conversion):
            results.append({"name": conversion.name, "seconds": 0.0, "skipped": True})
            continue
        prepare_work_dir(conversion)
        left = seconds_left()
        if left < 10:
            raise StepIncomplete(f"no time left before {conversion.name}")
        log_path = log_dir / f"convert-{conversion.name.replace(' ', '-')}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log(f"   {conversion.name}: {' '.join(conversion.argv[1:])}")
        started = time.monotonic()
        with log_path.open("w", encoding="utf-8") as handle:
            try:
                code = subprocess.run(conversion.argv, stdout=handle, stderr=subprocess.STDOUT,
                                      timeout=left).returncode
            except subprocess.TimeoutExpired:
                raise StepIncomplete(f"{conversion.name} ran out of time; it resumes") from None
        seconds = time.monotonic() - started
        if code != 0 or not is_finished(conversion):
            raise ToolFailed(f"{conversion.name} failed (exit {code}); {log_path}:", tail(log_path))
        results.append({"name": conversion.name, "seconds": round(seconds, 1), "skipped": False})
    return results


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"
