"""What to tune, said once (issue 45): `specdeck tune`'s flags and the Tune page's form both
become a core.tune.request.TuneRequest, and one function reads it into a setup. The same
setup named either way gives the same Setup, or the same refusal; the page no longer imports
the CLI."""

from __future__ import annotations

import ast
import sys

import pytest
from specdeck.core.cli import build_parser
from specdeck.core.cli.tune_cmd import _setup
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import InvalidInputError
from specdeck.core.tune.request import (
    GGUF,
    SWAP,
    TABBY,
    TABBY_FOLDER,
    TuneRequest,
    parse_duration,
    read_setup,
)
from test_tune import binary, swap_config  # noqa: F401 - binary: a fixture

DEMO_GGUF = find_gguf()
pytestmark = pytest.mark.skipif(DEMO_GGUF is None, reason="the demo GGUF is not installed")


def cli(*argv: str):
    return _setup(build_parser().parse_args(["tune", *argv]))


def test_a_llama_swap_model_and_a_gguf_read_alike_from_the_cli_and_a_request(tmp_path, binary):
    config = swap_config(tmp_path)
    from_cli = cli("--swap-config", str(config), "--model", "smol")
    assert from_cli == read_setup(TuneRequest(SWAP, swap_config=str(config), model="smol"))
    assert from_cli.kind == "llama-swap" and from_cli.swap_model == "smol"

    flags = ("-t", "1", "-c", "1024")
    from_cli = cli("--llama-server", binary, "--gguf", str(DEMO_GGUF), "--", *flags)
    assert from_cli == read_setup(TuneRequest(GGUF, binary, gguf=str(DEMO_GGUF), flags=flags))
    assert from_cli.flags == flags


@pytest.mark.parametrize("argv, request_, words", [
    (("--swap-config", "{config}"), TuneRequest(SWAP, swap_config="{config}"),
     "Say which model"),
    (("--swap-config", "{config}", "--model", "smol", "--", "-c", "8"),
     TuneRequest(SWAP, swap_config="{config}", model="smol", flags=("-c", "8")),
     "flags come from its cmd"),
    (("--gguf", "{gguf}"), TuneRequest(GGUF, gguf="{gguf}"), "say which binary"),
    (("--tabby-folder", "{tmp}/tabbyAPI", "--", "-c", "8"),
     TuneRequest(TABBY_FOLDER, tabby_folder="{tmp}/tabbyAPI", flags=("-c", "8")),
     "TabbyAPI takes its settings from config.yml"),
    (("--tabby", "http://127.0.0.1:9"), TuneRequest(TABBY, tabby_url="http://127.0.0.1:9"),
     "needs the config.yml it was started from"),
])
def test_what_is_wrong_is_refused_alike_by_both(tmp_path, argv, request_, words):
    values = {"config": str(swap_config(tmp_path)), "gguf": str(DEMO_GGUF), "tmp": str(tmp_path)}
    argv = tuple(a.format(**values) for a in argv)
    request_ = TuneRequest(**{k: (v.format(**values) if isinstance(v, str) else v)
                              for k, v in vars(request_).items()})
    with pytest.raises(InvalidInputError) as from_cli:
        cli(*argv)
    with pytest.raises(InvalidInputError) as from_request:
        read_setup(request_)
    assert words in from_cli.value.what
    assert (from_cli.value.what, from_cli.value.fix) == \
        (from_request.value.what, from_request.value.fix)


def test_the_budget_is_one_rule_for_both():
    import argparse

    from specdeck.core.cli.tune_cmd import duration

    assert parse_duration("10m") == duration("10m") == 600
    for bad in ("", "ten", "5", "-1m", "9d"):
        with pytest.raises(InvalidInputError) as core_says:
            parse_duration(bad)
        with pytest.raises(argparse.ArgumentTypeError) as cli_says:
            duration(bad)
        assert str(cli_says.value) == core_says.value.what


def test_the_tune_page_reads_its_form_through_core_not_the_cli(qtbot, configured_qapp, tmp_path):
    """The page's form, as a request, reads to the Setup the CLI's flags read to; and the
    page's module imports nothing of core.cli."""
    import specdeck.gui.pages.tune as page_module
    from specdeck.gui.main_window import MainWindow

    tree = ast.parse(open(page_module.__file__, encoding="utf-8").read())
    imported = [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [m for m in imported if m and m.startswith("specdeck.core.cli")]

    config = swap_config(tmp_path)
    window = MainWindow()
    qtbot.addWidget(window)
    page = window.show_page("tune")
    page.kind.setCurrentIndex(page.kind.findData(SWAP))
    page.swap_config.setText(str(config))
    page.swap_config.editingFinished.emit()
    qtbot.waitUntil(lambda: page.model.findData("smol") >= 0, timeout=20_000)
    page.model.setCurrentIndex(page.model.findData("smol"))
    page.binary.setText("")
    asked = page.request()
    assert asked == TuneRequest(SWAP, "", str(config), "smol")
    assert read_setup(asked) == cli("--swap-config", str(config), "--model", "smol")
    assert sys.modules["specdeck.gui.pages.tune"].TuneRequest is TuneRequest
