"""`make test` and `make run` on a fresh clone, as a contributor's machine sees them

Goals (issue 42): `make test` on a fresh clone with nothing cached (no pip cache, no
llama-server build) in at most 15 minutes; on a second clone of a machine whose user cache
already holds the pinned llama-server and pip's downloads, at most 8 minutes, the clone's
own venv install included; `make run` still opens the app (seconds to its first window).

Each case is a `git clone` of this checkout's HEAD into a temporary folder, run with pip's
cache and SpecDeck's developer cache (SPECDECK_DEV_CACHE: the llama-server builds) pointed
into that folder, so "fresh" means fresh. What stays is the machine itself: its Python, its
compilers, and the local torch wheel the CI machines carry (.ci/constraints.txt). The suite's
own slowest tests are read from pytest's `--durations` in the cached run.

Quote it with the machine's load: `uptime` before and after each case is recorded, since
the suite measures speed-ups of real servers and shares the machine's two cores.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.report import Report

REPO = Path(__file__).resolve().parents[1]
FRESH_GOAL_S = 15 * 60
CACHED_GOAL_S = 8 * 60
DURATIONS = 25


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() \
        else "?"


def _clone(where: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(where)], check=True)
    return where


def _env(cache: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SPECDECK_LLAMA_CACHE", "SPECDECK_LLAMA_SERVER", "VIRTUAL_ENV")}
    env.update(PIP_CACHE_DIR=str(cache / "pip"), SPECDECK_DEV_CACHE=str(cache / "dev"),
               CONSTRAINTS=".ci/constraints.txt")
    return env


def _make_test(clone: Path, cache: Path, log: Path) -> dict:
    load_before = _load()
    started = time.monotonic()
    with open(log, "w") as out:
        done = subprocess.run(["make", "test", f"PYTEST_ARGS=--durations={DURATIONS} -q"],
                              cwd=clone, env=_env(cache), stdout=out, stderr=subprocess.STDOUT)
    total = time.monotonic() - started
    text = log.read_text(errors="replace")
    summary = re.findall(r"(\d+) passed.*? in ([\d.]+)s", text)
    tests_s = float(summary[-1][1]) if summary else None
    return {"exit": done.returncode, "total_s": round(total, 1),
            "tests_s": tests_s, "setup_s": round(total - tests_s, 1) if tests_s else None,
            "passed": int(summary[-1][0]) if summary else None,
            "load_before": load_before, "load_after": _load(), "log_tail": text[-1500:],
            # what a failing test said (the clone and its log are temporary)
            "failures": [line for line in text.splitlines()
                         if line.startswith(("E ", "FAILED ", "____"))][:80],
            "durations": _durations(text)}


def _workers() -> str:
    done = subprocess.run(["make", "-n", "test"], cwd=REPO, capture_output=True, text=True)
    found = re.search(r"pytest -n (\S+)", done.stdout)
    return found.group(1) if found else "?"


def _durations(text: str) -> list[list[str]]:
    rows = []
    for line in text.splitlines():
        found = re.match(r"\s*([\d.]+)s (call|setup|teardown)\s+(\S+)", line)
        if found:
            rows.append([found.group(1), found.group(2), found.group(3)])
    return rows[:DURATIONS]


def _make_run(clone: Path, cache: Path, home: Path) -> dict:
    """`make run` until the app's first paint (SPECDECK_STARTUP_PROBE makes it write the
    time and quit, as benchmarks/bench_startup.py uses it), in a clone whose venv exists."""
    home.mkdir(parents=True, exist_ok=True)  # the probe is written there
    probe = home / "painted"
    env = dict(_env(cache), QT_QPA_PLATFORM="offscreen", SPECDECK_STARTUP_PROBE=str(probe),
               SPECDECK_HOME=str(home))
    started = time.time()
    done = subprocess.run(["make", "run"], cwd=clone, env=env, capture_output=True, text=True,
                          timeout=900)
    painted = float(probe.read_text()) - started if probe.exists() else None
    return {"exit": done.returncode, "seconds_to_window": None if painted is None
            else round(painted, 1), "tail": (done.stdout + done.stderr)[-800:]}


def run(report: Report) -> None:
    with tempfile.TemporaryDirectory(prefix="specdeck-suite-") as tmp:
        root = Path(tmp)
        cache = root / "cache"
        fresh = _make_test(_clone(root / "fresh"), cache, root / "fresh.log")
        report.record("fresh", fresh)
        report.checkpoint("fresh clone, nothing cached")
        second = _make_test(_clone(root / "second"), cache, root / "second.log")
        report.record("second_clone", second)
        report.checkpoint("second clone, caches warm")
        window = _make_run(_clone(root / "app"), cache, root / "home")
        report.record("make_run", window)

    def verdict(case: dict, goal: float) -> str:
        ok = case["exit"] == 0 and case["total_s"] <= goal
        return "met" if ok else "NOT met"

    report.text("| case | `make test` | setup (install, builds) | tests | passed | goal | load "
                "before/after |")
    report.text("|---|---|---|---|---|---|---|")
    for name, case, goal in (("fresh clone, nothing cached", fresh, FRESH_GOAL_S),
                             ("second clone, caches warm", second, CACHED_GOAL_S)):
        report.text(f"| {name} | {case['total_s'] / 60:.1f} min | "
                    f"{(case['setup_s'] or 0) / 60:.1f} min | {(case['tests_s'] or 0) / 60:.1f} "
                    f"min | {case['passed']} (exit {case['exit']}) | <= {goal / 60:.0f} min: "
                    f"{verdict(case, goal)} | {case['load_before']} / {case['load_after']} |")
    report.text()
    report.text(f"`make run` in a third clone (the venv installed from the warm pip cache) "
                f"opened its first window {window['seconds_to_window']} s after `make run` "
                f"started (exit {window['exit']}).")
    report.text()
    report.text(f"The {DURATIONS} slowest test phases of the second clone's run "
                f"(pytest --durations, {_workers()} xdist workers, the Makefile's default "
                "here):")
    report.text()
    report.table(["seconds", "phase", "test"], second["durations"])
