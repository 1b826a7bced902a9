"""Hostile input on the command line: every case gets one clear line on stderr and exit 2,
no traceback, and nothing started that the input makes absurd (issue 16's list)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest


def specdeck(*args, home, cwd=None):
    env = dict(os.environ, SPECDECK_HOME=str(home))
    # errors="replace": a folder name that is not UTF-8 is printed as its bytes, like ls does.
    return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, errors="replace", env=env, timeout=60, cwd=cwd)


def model_folder(root, name, **overrides):
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 1000,
              "max_position_embeddings": 2048}
    config.update(overrides)
    folder = root / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config).replace("NaN", "NaN"))
    return folder


@pytest.fixture
def models(tmp_path):
    return {
        "huge": model_folder(tmp_path, "huge", num_hidden_layers=10**7),
        "huger": model_folder(tmp_path, "huger", num_hidden_layers=10**12),
        "big": model_folder(tmp_path, "big", hidden_size="big"),
        "nan": model_folder(tmp_path, "nan", vocab_size=float("nan")),
        "null": model_folder(tmp_path, "null", vocab_size=None),
        "list": model_folder(tmp_path, "list", vocab_size=[1, 2]),
        "negative": model_folder(tmp_path, "negative", hidden_size=-1),
        "ok": model_folder(tmp_path, "ok"),
    }


@pytest.mark.parametrize(("case", "args", "says"), [
    ("layers 1e7", ["vram", "--model", "{huge}", "--gpus", "24", "--bpw", "4"],
     "num_hidden_layers is 10000000; it must be a whole number from 1 to 1,024"),
    ("layers 1e12", ["vram", "--model", "{huger}", "--gpus", "24", "--bpw", "4"],
     "num_hidden_layers is 1000000000000"),
    ("hidden_size 'big'", ["vram", "--model", "{big}", "--gpus", "24", "--bpw", "4"],
     "hidden_size is 'big'"),
    ("vocab NaN", ["vram", "--model", "{nan}", "--gpus", "24", "--bpw", "4"], "vocab_size is nan"),
    ("vocab null", ["vram", "--model", "{null}", "--gpus", "24", "--bpw", "4"], "lacks vocab_size"),
    ("vocab list", ["vram", "--model", "{list}", "--gpus", "24", "--bpw", "4"], "vocab_size is [1, 2]"),
    ("hidden -1", ["vram", "--model", "{negative}", "--gpus", "24", "--bpw", "4"],
     "hidden_size is -1"),
    ("gpus nan", ["vram", "--model", "{ok}", "--gpus", "nan", "--bpw", "4"], "nan is not a size"),
    ("gpus inf", ["vram", "--model", "{ok}", "--gpus", "inf", "--bpw", "4"], "inf is not a size"),
    ("gpus 1e400", ["vram", "--model", "{ok}", "--gpus", "1e400", "--bpw", "4"], "is not a size"),
    ("gpus 1e9", ["vram", "--model", "{ok}", "--gpus", "1e9", "--bpw", "4"], "1e+09 is not a size"),
    ("reserve nan", ["vram", "--model", "{ok}", "--gpus", "24", "--reserve-mb", "nan",
                     "--bpw", "4"], "autosplit_reserve: nan"),
    ("split 1e308", ["vram", "--model", "{ok}", "--gpus", "24", "--gpu-split=1e308",
                     "--bpw", "4"], "gpu_split: 1e+308 is not a size"),
    ("split ,,,", ["vram", "--model", "{ok}", "--gpus", "24", "--gpu-split", ",,,",
                   "--bpw", "4"], "needs at least one positive size"),
    ("ctx 0", ["vram", "--model", "{ok}", "--gpus", "24", "--ctx", "0", "--bpw", "4"],
     "--ctx 0 is not a context length"),
    ("head bits 0", ["vram", "--model", "{ok}", "--gpus", "24", "--bpw", "4", "--head-bits", "0"],
     "argument --head-bits: 0 is out of range"),
    ("repeats 1e9", ["bench", "--demo", "--repeats", "1000000000"],
     "argument --repeats: 1,000,000,000 is out of range"),
    ("warmup 1e9", ["bench", "--demo", "--warmup", "1000000000"], "argument --warmup"),
    ("temperature nan", ["generate", "--model", "demo", "--prompt", "x", "--temperature", "nan"],
     "'nan' is not a finite number"),
    ("num-tokens 1e23", ["config", "set-draft", "--config", "{ok}/c.yml", "--num-tokens", "1e23",
                         "--dry-run"], ""),
])
def test_hostile_values_get_one_line_and_exit_2(case, args, says, models, specdeck_home):
    filled = [a.format(**models) for a in args]
    if case == "num-tokens 1e23":
        (models["ok"] / "c.yml").write_text("draft_model:\n  draft_model_name: x\n")
    result = specdeck(*filled, home=specdeck_home)
    assert result.returncode == 2, (case, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, (case, result.stderr)
    assert says in lines[0], (case, lines[0])
    # an argument argparse refuses and a value core refuses read alike
    assert lines[0].startswith("specdeck: error: "), (case, lines[0])


def test_a_plan_file_asking_for_1e9_repeats_is_refused_before_anything_loads(tmp_path,
                                                                           specdeck_home):
    plan = {"version": 1, "engine": "torch", "model": "demo", "arms": [{"name": "A"}],
            "suites": ["code"], "repeats": 10**9, "warmup": 10**9}
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    result = specdeck("bench", "--plan", str(path), home=specdeck_home)
    assert result.returncode == 2
    assert "repeats is 1000000000; it must be a whole number from 1 to 1,000" in result.stderr
    assert "warmup is 1000000000" in result.stderr
    assert "Importing transformers" not in result.stderr  # nothing was loaded


def test_one_bad_model_folder_does_not_hide_the_others(models, specdeck_home):
    result = specdeck("models", "--dir", str(models["ok"].parent), "--json", home=specdeck_home)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    names = {m["name"] for m in data["models"]}
    assert "ok" in names
    unreadable = " ".join(p["reason"] for p in data["problems"])
    assert "hidden_size is 'big'" in unreadable and "num_hidden_layers is 10000000" in unreadable


def test_apply_checks_the_config_before_the_benchmark(tmp_path, specdeck_home):
    result = specdeck("bench", "--demo", "--apply", "--config", str(tmp_path / "missing.yml"),
                      "--yes", home=specdeck_home)
    assert result.returncode == 2
    assert "does not exist" in result.stderr
    assert "Importing transformers" not in result.stderr


def test_apply_refuses_the_demos_setting_as_the_ab_page_does(tmp_path, specdeck_home,
                                                             shared_demo_dir):
    """Issue 45: the A/B page refuses to write the demo's best setting (it runs inside
    SpecDeck, served by no one: core.bench.sweep.why_not_applicable), but `bench --demo
    --apply --config X` ran the demo and wrote its n-gram setting into a TabbyAPI config.yml.
    Refused before any run, the config untouched."""
    from conftest import TABBY

    config = tmp_path / "config.yml"
    config.write_bytes((TABBY / "config_sample.exl2-checkpoint.yml").read_bytes())
    before = config.read_bytes()
    result = specdeck("bench", "--demo", "--apply", "--config", str(config), "--yes",
                      "--max-prompts", "1", "--repeats", "1", "--warmup", "0", "--max-new",
                      "8", "--no-history", home=specdeck_home)
    assert result.returncode == 2, result.stderr
    assert "The demo model runs inside SpecDeck, served by no one" in result.stderr
    assert "Importing transformers" not in result.stderr and "tok/s" not in result.stdout
    assert config.read_bytes() == before and not config.with_name("config.yml.bak").exists()


def test_a_binary_prompt_file_is_refused_in_one_line(tmp_path, specdeck_home):
    binary = tmp_path / "prompt.bin"
    binary.write_bytes(b"\x00\xff\xfe\x80binary")
    result = specdeck("generate", "--model", "demo", "--prompt-file", str(binary), home=specdeck_home)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"specdeck: error: The prompt file {binary} is not UTF-8 text (byte 1 is 0xff).")
    assert "Traceback" not in result.stderr


def test_a_prompt_file_that_is_a_fifo_or_too_large_is_refused_at_once(tmp_path, specdeck_home):
    """--prompt-file named a FIFO: the read waited for a writer for ever (the helper's 60 s
    timeout fails the test). Now it is refused at once, saying what it is and what to give;
    a sparse file over the bound is refused by its size, unread."""
    fifo = tmp_path / "prompt.fifo"
    os.mkfifo(fifo)
    result = specdeck("generate", "--model", "demo", "--prompt-file", str(fifo),
                      home=specdeck_home)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"The prompt file {fifo} is a named pipe (FIFO), not a file." in result.stderr
    assert "Give a regular UTF-8 text file" in result.stderr
    from specdeck.core.files import PROMPT_FILE
    from specdeck.core.units import format_bytes

    huge = tmp_path / "prompt.txt"
    with open(huge, "wb") as handle:
        handle.truncate(PROMPT_FILE + 1)  # no disk space taken
    result = specdeck("generate", "--model", "demo", "--prompt-file", str(huge),
                      home=specdeck_home)
    assert result.returncode == 2
    assert f"The prompt file {huge} is over {format_bytes(PROMPT_FILE)}" in result.stderr


def test_a_model_folder_whose_name_is_not_utf8_is_checked(tmp_path, specdeck_home):
    import shutil

    from conftest import MODELS

    folder = tmp_path / "draft\udcffname"  # the bytes b"draft\xffname" on disk
    shutil.copytree(MODELS / "TinyLlama-1.1B-Chat-v1.0", folder)
    result = specdeck("check", str(MODELS / "Llama-2-7b-hf"), str(folder), home=specdeck_home)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(("token_id", "shown"), [(10**30, "1000000000000000000000000000000"),
                                                 (1.5, "1.5"), (-3, "-3"), ("7", "'7'")])
def test_a_damaged_tokenizer_id_is_one_line(tmp_path, specdeck_home, token_id, shown):
    from conftest import MODELS

    tokenizer = json.loads((MODELS / "TinyLlama-1.1B-Chat-v1.0" / "tokenizer.json").read_text())
    tokenizer["model"]["vocab"]["broken"] = token_id
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    result = specdeck("check", str(MODELS / "Llama-2-7b-hf"), str(folder), home=specdeck_home)
    assert result.returncode == 2, result.stderr
    assert f"token 'broken' has the id {shown}; ids are whole numbers" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_small_surprises_are_worded_for_what_happened(tmp_path, specdeck_home):
    some_file = tmp_path / "some-file.yml"
    some_file.write_text("x: 1\n")
    result = specdeck("vram", "--model", str(some_file), "--gpus", "24", home=specdeck_home)
    assert result.returncode == 2 and "is a file; SpecDeck reads a model from its folder" in result.stderr
    result = specdeck("install", "org/repo", "--name", "../../escape", "--dest", str(tmp_path),
                      home=specdeck_home)
    assert result.returncode == 2 and "without '/'" in result.stderr  # decided before any network
    twice = tmp_path / "twice.yml"
    twice.write_text("draft_model:\n  draft_model_name: a\ndraft_model:\n  draft_cache_mode: Q4\n")
    result = specdeck("config", "show", "--config", str(twice), home=specdeck_home)
    assert result.returncode == 2 and "the section appears twice" in result.stderr
    assert '"{}"' not in result.stderr


def test_a_plan_with_a_missing_draft_folder_fails_before_anything_runs(tmp_path, specdeck_home):
    result = specdeck("bench", "--demo", "--demo-alone", "--draft", str(tmp_path / "nowhere"),
                      home=specdeck_home)
    assert result.returncode == 2
    assert "the draft model folder" in result.stderr and "does not exist" in result.stderr
    assert "Importing transformers" not in result.stderr and "[1/" not in result.stderr


def test_search_with_the_hub_unreachable_is_refused_before_the_library_retries(
        specdeck_home, monkeypatch, capsys):
    """huggingface_hub retries a refused or unresolvable host for ~20 s (a search took 23 s):
    a search a user waits on is refused by SpecDeck's own connection check, before the
    library is asked anything."""
    import socket

    from huggingface_hub import HfApi
    from specdeck.core.cli import main

    asked = []
    monkeypatch.setattr(HfApi, "list_models", lambda *a, **k: asked.append(k) or iter(()))
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code = main(["search", "qwen", "--endpoint", f"http://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 2 and asked == []
    assert f"Cannot reach http://127.0.0.1:{port}" in err and "Traceback" not in err


def test_a_plan_file_without_a_drafting_arm_gets_a_hint_about_the_file(tmp_path, specdeck_home):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "engine": "torch", "model": "demo",
                                "arms": [{"name": "A"}], "suites": ["code"]}))
    result = specdeck("bench", "--plan", str(plan), home=specdeck_home)
    assert result.returncode == 2 and "Nothing to compare" in result.stderr
    assert f"Add a drafting arm to {plan}" in result.stderr and "--ngram" not in result.stderr


# llama-swap configs (issue 26): every class of tangled config.yaml, generated by
# tests/swap_hostile.py, through `specdeck swap`: a clear result or one clear line, never a
# hang, never a traceback, never a raw control character on the terminal.
SWAP_CASES = [
    ("macro bomb: show", "macro-bomb", ["show"], 0, "stdout",
     "problem: its macros expand to more than 2.0 MiB"),
    ("macro bomb: set-draft", "macro-bomb", ["set-draft", "--model", "bomb", "--draft-max", "4",
                                             "--yes"], 2, "stderr",
     "Model bomb: its macros expand to more than 2.0 MiB"),
    ("macro bomb: migrate fixes the rest", "macro-bomb", ["migrate", "--dry-run"], 0, "stdout",
     "--spec-type draft-simple"),
    ("macro cycle: show", "macro-cycle", ["show"], 0, "stdout",
     "problem: macros b -> a -> b use each other (a cycle); llama-swap refuses this config"),
    ("macro cycle: set-draft", "macro-cycle", ["set-draft", "--model", "looped", "--draft-max",
                                               "4", "--yes"], 2, "stderr", "(a cycle)"),
    ("macro self: show", "macro-self", ["show"], 0, "stdout",
     "llama-swap refuses this file: macro 'me' uses itself"),
    ("macro chain of 20: show", "macro-chain", ["show"], 0, "stdout",
     "drafting: draft d.gguf (k=8)"),
    ("macro forward: migrate", "macro-forward", ["migrate", "--dry-run"], 1, "stderr",
     "warning: early: macro server uses ${draft}, which is declared after it"),
    ("merge keys: show", "merge-keys", ["show"], 0, "stdout",
     "its cmd is also used at: models.aliased.cmd, x-base.cmd, models.listed.cmd"),
    ("merge keys: set-draft on a shared cmd", "merge-keys",
     ["set-draft", "--model", "aliased", "--draft-max", "4", "--yes"], 2, "stderr",
     "Model aliased: its cmd is written once and also used at"),
    ("merge keys: set-draft on its own cmd", "merge-keys",
     ["set-draft", "--model", "own", "--draft-max", "4", "--dry-run"], 0, "stdout",
     "--spec-draft-n-max 4"),
    ("merge keys: migrate", "merge-keys", ["migrate", "--dry-run"], 0, "stderr",
     "is written once for several places (a YAML anchor)"),
    ("unclosed quote: show", "unclosed-quote", ["show"], 0, "stdout",
     "problem: line 6 has an unclosed ' quote"),
    ("unclosed quote: set-draft", "unclosed-quote",
     ["set-draft", "--model", "broken", "--draft-max", "4", "--yes"], 2, "stderr",
     "line 6 has an unclosed ' quote"),
    ("CR line ends: show", "cr-only", ["show"], 0, "stdout",
     "out of date: --flash-attn now needs on, off or auto"),
    ("CR line ends: migrate", "cr-only", ["migrate", "--yes"], 0, "stdout", "--spec-type"),
    ("draft with a line break", "draft-writable",
     ["set-draft", "--model", "plain", "--draft", "/m/a\nb.gguf", "--yes"], 2, "stderr",
     "SpecDeck cannot write -md '/m/a\\nb.gguf' into its plain cmd safely: it has a line break"),
    ("draft with ': '", "draft-writable",
     ["set-draft", "--model", "plain", "--draft", "/m/a: b.gguf", "--yes"], 2, "stderr",
     "': ' would start a new key and ' #' a comment. Your file is fine; nothing was changed."),
    ("draft with ': ' in a block", "draft-writable",
     ["set-draft", "--model", "block", "--draft", "/m/a: b.gguf", "--dry-run"], 0, "stdout",
     "-md '/m/a: b.gguf'"),
    ("bare -fa: migrate", "old-flash", ["migrate", "--dry-run"], 0, "stdout",
     "-md /m/d.gguf -fa on --spec-type draft-simple"),
    ("escapes in a name: show", "escape-name", ["show"], 0, "stdout",
     "evil\\x1b[2J\\x1b]0;owned\\x07<b>bold</b>: plain"),
    ("escapes in a name: unknown model", "escape-name",
     ["set-draft", "--model", "nope", "--draft-max", "4", "--yes"], 2, "stderr",
     "(it has: evil\\x1b[2J\\x1b]0;owned\\x07<b>bold</b>)"),
    ("YAML alias bomb: show", "alias-bomb", ["show"], 2, "stderr",
     "uses YAML aliases (*name) that expand to more than 100,000 values"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("case", "config", "args", "code", "stream", "says"), SWAP_CASES,
                         ids=[c[0] for c in SWAP_CASES])
def test_hostile_llama_swap_configs(case, config, args, code, stream, says, tmp_path,
                                    specdeck_home):
    from swap_hostile import write

    path = write(tmp_path, config)
    before = path.read_bytes()
    result = specdeck("swap", *args, "--config", str(path), home=specdeck_home)
    assert "Traceback" not in result.stderr, (case, result.stderr)
    assert result.returncode == code, (case, result.stdout, result.stderr)
    assert "\x1b" not in result.stdout + result.stderr and "\x07" not in result.stdout
    if code == 2:
        assert len(result.stderr.strip().splitlines()) == 1, (case, result.stderr)
    assert says in getattr(result, stream), (case, result.stdout, result.stderr)
    if "--yes" in args and code == 0:  # saved: read back as it was meant, its line ends kept
        from specdeck.core import swap

        after = path.read_bytes()
        assert config == "cr-only" and after != before and b"\n" not in after
        assert all(swap.findings(m) == [] for m in swap.load(path).models)
    else:
        assert path.read_bytes() == before  # nothing written


@pytest.mark.parametrize("command", [("tune", "--demo"), ("bench", "--demo"),
                                     ("tune", "--demo", "--download-dir")])
def test_a_report_folder_that_cannot_be_made_is_refused_before_anything_runs(tmp_path,
                                                                              command):
    """--report (and the tune's --download-dir) naming a file, or a folder inside a file, is
    refused while the arguments are read: a long run must not end unable to save its
    report, and the file it names is left as it was."""
    taken = tmp_path / "config.yaml"
    taken.write_text("# mine\n")
    flag = command[2] if len(command) > 2 else "--report"
    for target, words in ((taken, "is a file, not a folder"),
                          (taken / "sub", "is a file, so")):
        done = specdeck(*command[:2], flag, str(target), home=tmp_path)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr
        assert "Loading" not in done.stderr  # nothing started
    assert taken.read_text() == "# mine\n"


@pytest.mark.parametrize("command", [("tune", "--demo"), ("bench", "--demo")])
def test_a_json_file_that_cannot_be_written_is_refused_before_anything_runs(tmp_path,
                                                                             command):
    """--json FILE naming a folder, or a file below a file, is refused while the arguments
    are read (a user's tune once wrote its config and then failed to save its JSON); a file
    in a folder still to be made is fine, and the folder is made when the result is saved."""
    taken = tmp_path / "config.yaml"
    taken.write_text("# mine\n")
    for target, words in ((tmp_path, "is a folder; name a file"),
                          (taken / "out.json", "is a file, so")):
        done = specdeck(*command, "--json", str(target), home=tmp_path)
        assert done.returncode == 2, done.stderr
        assert words in done.stderr and "Traceback" not in done.stderr
        assert "Loading" not in done.stderr
    assert taken.read_text() == "# mine\n"


def test_json_into_a_folder_still_to_be_made_is_saved(tmp_path):
    from specdeck.core.cli.output import write_json
    from specdeck.core.cli.paths import output_file

    target = output_file(str(tmp_path / "new" / "deeper" / "out.json"))
    write_json(target, {"ok": 1})
    assert json.loads((tmp_path / "new" / "deeper" / "out.json").read_text()) == {"ok": 1}


def test_tune_input_mistakes_are_named_before_anything_runs(tmp_path):
    """Two setups at once, a prompt file that is not there, a prompt file with a broken
    line: each says what is wrong and what to do, before any setup is read."""
    broken = tmp_path / "mine.jsonl"
    broken.write_text('{"prompt": "ok"}\n{"prompt": "broken\n')
    cases = [(("--demo", "--gguf", "x.gguf"), "Give one setup to tune, not --gguf and --demo"),
             (("--demo", "--prompts", str(tmp_path / "gone.jsonl")), "does not exist"),
             (("--demo", "--prompts", str(broken)), "line 2 is not JSON (unterminated string starting at column 12)")]
    for args, says in cases:
        done = specdeck("tune", *args, home=tmp_path)
        assert done.returncode == 2, done.stderr
        assert says in done.stderr and "Traceback" not in done.stderr
        assert "tuning" not in done.stderr  # nothing started


def test_a_reader_that_closes_the_pipe_gets_no_traceback(tmp_path):
    """`specdeck check ... | head` printed a BrokenPipeError traceback once head had its
    lines: the reader closing the pipe is an ordinary end, exit 141 as `yes | head` leaves
    `yes`, nothing on stderr."""
    from conftest import MODELS

    env = {**os.environ, "SPECDECK_HOME": str(tmp_path)}
    process = subprocess.Popen([sys.executable, "-m", "specdeck", "check",
                                str(MODELS / "Qwen2.5-7B-Instruct"), str(MODELS / "Llama-3.2-1B")],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    process.stdout.close()  # the reader is gone before the first line
    _, err = process.communicate(timeout=120)
    assert process.returncode == 141, err.decode(errors="replace")
    assert err == b""


@pytest.mark.parametrize("args,what", [
    (("tune", "--demo", "--llama-server", "./no-such-llama-server", "--budget", "5m"),
     "The llama-server binary ./no-such-llama-server does not exist"),
    (("swap", "migrate", "--config", "x.yaml", "--llama-server", "/nonexistent/ls", "--dry-run"),
     "The llama-server binary /nonexistent/ls does not exist"),
    (("tune", "--tabby-folder", "/nonexistent/tabby", "--budget", "1m"),
     "The TabbyAPI folder /nonexistent/tabby does not exist"),
    (("tune", "--tabby-folder", "/nonexistent/tabby", "--tabby-python", sys.executable,
      "--budget", "1m"), "The TabbyAPI folder /nonexistent/tabby does not exist"),
])
def test_a_path_that_is_not_there_is_said_to_be_missing(tmp_path, args, what):
    """It had been 'is not a llama-server binary', 'does not run as a llama-server (its
    --help said nothing ...)', 'has no venv' or 'is not a TabbyAPI folder (no main.py)'."""
    done = specdeck(*args, home=tmp_path, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert what in done.stderr
