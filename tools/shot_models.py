"""Screenshots of the Models page: `python -m tools.screenshots models`.

The page runs its real flow against the test suite's fake Hub (tests/hubserver.py: a real
HTTP server on 127.0.0.1 serving EXL2-shaped repositories built from the real tokenizer and
config fixtures, with small synthetic weights), so the repository names are the fake Hub's
("testorg/...") and the download sizes are megabytes where the VRAM column, computed from
the real configs, says what the real model would need. Shots:

- models-install.png: search results, the variants of a repository, an install under way;
- models-installed.png: the install done, the model in the library, "Use as draft";
- models-gguf.png: a GGUF repository's files by quant, one installed;
- models-exl3.png: one model's EXL2, EXL3 and GGUF repositories, filtered to EXL3, an EXL3
  branch installed and labelled with the TabbyAPI branch that runs it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]


def _wait(app, condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the Models page did not reach the state to capture")
        app.processEvents()
        time.sleep(0.01)


def _settle(app) -> None:
    """Let pending layout and paint events run, so the grab shows the final geometry."""
    for _ in range(20):
        app.processEvents()
        time.sleep(0.01)


def _fixtures() -> Path:
    return fixtures_dir()


def render(window, out_dir: Path) -> list[Path]:
    from PySide6.QtWidgets import QApplication

    sys.path.insert(0, str(ROOT / "tests"))
    from hubserver import TINY_REPO, FakeHub, standard_repos

    app = QApplication.instance()
    hub = FakeHub(standard_repos(_fixtures() / "models")).start()
    os.environ["HF_ENDPOINT"] = hub.url
    shots = []
    try:
        page = window.show_page("models")
        drafts = Path(tempfile.mkdtemp(prefix="specdeck-shot-drafts-"))
        page.installer.set_install_dir(drafts)
        # One model already installed, so the library is not empty.
        from specdeck.core.hub import install

        install("testorg/Qwen2.5-0.5B-Instruct-exl2", "4.0bpw", drafts)
        page.library.refresh()
        page.browser.search_edit.setText("tinyllama")
        page.browser.search()
        _wait(app, lambda: page.browser.results_table.rowCount() > 0)
        page.browser.select_repo(TINY_REPO)
        _wait(app, lambda: page.browser.variants_table.rowCount() == 3)
        page.browser.select_variant("6_5")
        hub.throttle_bps = 1_200_000
        page.installer.start_install()
        _wait(app, lambda: page.installer.progress_bar.value() > 450)
        _settle(app)
        shots.append(out_dir / "models-install.png")
        window.grab().save(str(shots[-1]))
        hub.throttle_bps = None
        _wait(app, lambda: not page.installer.installing() and not page.busy())
        _settle(app)
        shots.append(out_dir / "models-installed.png")
        window.grab().save(str(shots[-1]))
    finally:
        hub.stop()
    shots.append(_gguf_shot(app, window, out_dir, drafts))
    shots.append(_exl3_shot(app, window, out_dir, drafts))
    return shots


def _exl3_shot(app, window, out_dir: Path, drafts: Path) -> Path:
    """models-exl3.png: search every format, filter to EXL3, install an EXL3 branch."""
    from hubserver import FakeHub, FakeRepo, exl2_branch, exl3_branch

    qwen = _fixtures() / "models" / "Qwen2.5-0.5B-Instruct"
    readme = {"README.md": b"# Qwen2.5-0.5B-Instruct\n\nEach bitrate on its own branch.\n"}
    repos = [
        FakeRepo("testorg/Qwen2.5-0.5B-Instruct-exl2", {"main": readme, "4.0bpw": exl2_branch(qwen, 4.0, 6)},
                 tags=("exl2", "qwen2"), downloads=3400),
        FakeRepo("turboderp/Qwen2.5-0.5B-Instruct-exl3",
                 {"main": readme, **{f"{b}.0bpw": exl3_branch(qwen, b, 6, small=False, seed=b) for b in (3, 4)}},
                 tags=("exl3", "qwen2"), downloads=2100),
        FakeRepo("bartowski/Qwen2.5-0.5B-Instruct-GGUF", {"main": {"README.md": b"# GGUF\n"}},
                 tags=("gguf", "qwen2"), downloads=9000),
    ]
    hub = FakeHub(repos).start()
    os.environ["HF_ENDPOINT"] = hub.url
    try:
        page = window.show_page("models")
        page.browser.search_edit.setText("qwen2.5 0.5b")
        page.browser.format_combo.setCurrentIndex(page.browser.format_combo.findData("exl3"))
        page.browser.search()
        _wait(app, lambda: page.browser.results_table.rowCount() == 1)
        page.browser.select_repo("turboderp/Qwen2.5-0.5B-Instruct-exl3")
        _wait(app, lambda: page.browser.variants_table.rowCount() == 2)
        page.browser.select_variant("3.0bpw")
        page.installer.start_install()
        _wait(app, lambda: not page.installer.installing() and not page.busy(), timeout=300)
        _settle(app)
        shot = out_dir / "models-exl3.png"
        window.grab().save(str(shot))
    finally:
        hub.stop()
        page.browser.format_combo.setCurrentIndex(0)
    return shot


def _gguf_shot(app, window, out_dir: Path, drafts: Path) -> Path:
    """models-gguf.png: a GGUF repository's files by quant, one installed (llama-server's -md)."""
    from gguf_writer import write_tokenizer_gguf
    from hubserver import FakeHub, FakeRepo

    repo = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"
    data = write_tokenizer_gguf(_fixtures() / "models" / "Qwen2.5-0.5B-Instruct",
                                Path(tempfile.mkdtemp()) / "q.gguf", columns=16).read_bytes()
    half = len(data) // 2
    files = {"README.md": b"# GGUF\n", "Qwen2.5-0.5B-Instruct-Q8_0.gguf": data,
             "Qwen2.5-0.5B-Instruct-Q6_K.gguf": data[: half + half // 2],
             "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf": data[:half // 2],
             "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf": data[half // 2:half],
             "mmproj-Qwen2.5-0.5B-Instruct-f16.gguf": data[: half // 4]}
    hub = FakeHub([FakeRepo(repo, {"main": files}, tags=("gguf",))]).start()
    os.environ["HF_ENDPOINT"] = hub.url
    try:
        page = window.show_page("models")
        page.browser.show_repo(repo)
        _wait(app, lambda: len(page.browser.variant_rows()) == 4)
        page.browser.select_variant(page.browser.GGUF_PREFIX + "Qwen2.5-0.5B-Instruct-Q8_0")
        page.installer.start_install()
        _wait(app, lambda: not page.installer.installing() and not page.busy())
        _settle(app)
        shot = out_dir / "models-gguf.png"
        window.grab().save(str(shot))
    finally:
        hub.stop()
    return shot
