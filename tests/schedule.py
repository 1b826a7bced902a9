"""The order the suite's modules are handed to the xdist workers: the longest first.

`make test` runs with ``--dist loadscope``: a module's tests, and the servers its fixtures
start, stay on one worker, and a worker takes the next module when its own is nearly done.
xdist's default order (modules with the most tests first) left a few long modules with few
tests, the A/B page's and the packaging test, to start late and end alone while the other
workers sat idle. Handing out the longest first (the classic longest-processing-time rule)
lets the short modules fill in around them.

The seconds come from ``module_seconds.json`` beside this file, a record of an earlier run of
the whole suite (`make test PYTEST_ARGS=--record-module-seconds` writes it, a run of some
modules updates theirs; refresh it when modules are added or grow). A module it does not list counts as the median: an out-of-date
record only changes the order, never what runs.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

RECORD = Path(__file__).with_name("module_seconds.json")


def pytest_addoption(parser):
    parser.addoption("--record-module-seconds", action="store_true",
                     help=f"write each test module's seconds (setup + call + teardown) to {RECORD}")


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def read_record(path: Path = RECORD) -> dict[str, float]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}


def longest_first(nodeids: list[str], seconds: dict[str, float]) -> list[str]:
    """The modules' order: known seconds descending, unknown modules at the median; the
    collection's order among equals and within a module."""
    median = statistics.median(seconds.values()) if seconds else 0.0
    first_seen: dict[str, int] = {}
    for nodeid in nodeids:
        first_seen.setdefault(module_of(nodeid), len(first_seen))
    return sorted(first_seen, key=lambda m: (-seconds.get(m, median), first_seen[m]))


def _by_module(config) -> bool:
    return config.getoption("dist", "no") == "loadscope"


def pytest_configure(config):
    if _by_module(config):
        # xdist would otherwise re-sort the modules by their number of tests.
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    # The workers collect, and the scheduler takes their order; xdist runs them with dist "no".
    if not hasattr(config, "workerinput"):
        return
    order = {m: i for i, m in enumerate(longest_first([i.nodeid for i in items], read_record()))}
    items.sort(key=lambda item: order[module_of(item.nodeid)])  # stable: a module keeps its order


_SECONDS: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report):
    _SECONDS[module_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session):
    config = session.config
    if not config.getoption("record_module_seconds") or hasattr(config, "workerinput"):
        return  # written once, by the process that saw every worker's reports
    root = Path(str(config.rootpath))
    # A run of some modules updates theirs; modules that no longer exist leave the record.
    record = {m: s for m, s in read_record().items() if (root / m).is_file()}
    record.update({m: round(s, 1) for m, s in _SECONDS.items()})
    RECORD.write_text(json.dumps(dict(sorted(record.items())), indent=1) + "\n",
                      encoding="utf-8")
