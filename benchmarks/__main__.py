"""Run the benchmarks: `python -m benchmarks [NAME ...] [--list]`."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import time
from pathlib import Path

import benchmarks
from benchmarks.report import Report

OUT_DIR = Path(__file__).resolve().parents[1] / "docs" / "benchmarks"


def available() -> dict[str, str]:
    names = {}
    for info in pkgutil.iter_modules(benchmarks.__path__):
        if info.name.startswith("bench_"):
            names[info.name.removeprefix("bench_")] = f"benchmarks.{info.name}"
    return dict(sorted(names.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="where reports are written")
    args = parser.parse_args(argv)
    modules = available()
    if args.list:
        print("\n".join(modules))
        return 0
    unknown = [n for n in args.names if n not in modules]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(modules)}")
    failed = []
    for name in args.names or list(modules):
        module = importlib.import_module(modules[name])
        report = Report(name, title=(module.__doc__ or name).strip().splitlines()[0],
                        out_dir=args.out)
        print(f"== {name}: {report.title}", flush=True)
        started = time.perf_counter()
        try:
            module.run(report)
        except Exception as exc:  # report and go on with the others
            failed.append(name)
            print(f"   FAILED: {exc!r}", flush=True)
            continue
        paths = report.write(args.out)
        print(f"   done in {time.perf_counter() - started:.1f} s -> {', '.join(map(str, paths))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
