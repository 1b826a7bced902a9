"""Issue 45, second audit: rules that two modules each wrote their own way, and disagreed.
Each is read from one home now (docs/architecture.md "where each rule lives"); every test
here failed on the code before, where the two copies gave two answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import MODELS
from specdeck.core.cli import main

QWEN = MODELS / "Qwen2.5-0.5B-Instruct"
DRAFT_GGUF = "/models/draft-0.5b.gguf"


# R9: what a llama-server launch drafts with --------------------------------------------------
@pytest.mark.parametrize(("args", "kind", "drafts_with"), [
    (("--spec-type", "draft-mtp", "-md", DRAFT_GGUF), "server", "mtp"),
    (("--spec-type", "draft-mtp"), "server", "mtp"),
    (("--spec-type", "ngram-simple", "-md", DRAFT_GGUF), "ngram", "ngram"),
    (("--spec-type", "draft-simple", "-md", DRAFT_GGUF), "model", "draft"),
    (("-md", DRAFT_GGUF), "none", ""),
])
def test_a_launch_is_labelled_by_what_it_drafts_with(args, kind, drafts_with):
    """drafter_from_flags sorted spec types by family on its own: draft-mtp beside -md
    became a draft model (its label, and the slow-down causes that blame a draft model's
    cost), while core.draft_kind called it MTP. And draft_kind called an n-gram type beside
    -md a draft model, though llama-server drafts only with the types --spec-type lists
    (common/speculative.cpp common_speculative_init: no draft-simple is added beside an
    n-gram type). One answer now, draft_kind's."""
    from specdeck.core.draft_kind import draft_kind
    from specdeck.core.servers.llama_server import drafter_from_flags, flag_value, spec_type

    drafter = drafter_from_flags(args)
    assert drafter.kind.value == kind
    method = spec_type(args)
    if method is not None:
        assert draft_kind(method, bool(flag_value(args, "-md"))) == drafts_with


# R27/R48: a llama-server answer's draft counts, checked ---------------------------------------
@pytest.mark.parametrize(("timings", "counts", "problem"), [
    ({"draft_n": 10, "draft_n_accepted": 7, "predicted_n": 20}, (10, 7), False),
    ({"draft_n": 4}, (4, 0), False),
    ({"predicted_n": 20}, (None, None), False),
    ({"draft_n": 5, "draft_n_accepted": 9}, (None, None), True),
    ({"draft_n": "12", "draft_n_accepted": 3}, (None, None), True),
    ({"draft_n": 10, "draft_n_accepted": 9, "predicted_n": 4}, (None, None), True),
])
def test_an_answers_draft_counts_are_read_as_every_runs_are(timings, counts, problem):
    """benchmarks/bench_acceptance.py read timings.draft_n and draft_n_accepted raw and
    divided them itself: a string crashed it, more accepted than drafted became a rate above
    1. It reads core.servers.readings.answer_timings (checked as a run's counts are) and
    core.engines.base.acceptance_rate now."""
    from specdeck.core.servers.readings import answer_timings

    read = answer_timings({"timings": timings})
    assert (read.drafted, read.accepted) == counts
    assert bool(read.problems) == problem


# R34: what an inconclusive compatibility verdict allows ---------------------------------------
def test_an_undecided_pair_runs_in_an_ab_with_a_note_but_is_never_chosen_for_the_user():
    """The A/B's engines refused only an incompatible pair, and let an inconclusive one load
    without a word; the tune refused it (CompatVerdict.cleared). The policy is one place
    now: a pair is refused everywhere only when incompatible (CompatVerdict.refused); one
    the check cannot decide is not chosen for the user (the tune writes a config), but one
    the user chose loads in an A/B, whose output check measures losslessness, with a note."""
    from specdeck.core.compat import CompatVerdict, check
    from specdeck.core.engines.common import require_compatible_draft

    target, draft = MODELS / "Llama-3.1-8B", MODELS / "Llama-3.2-1B"
    verdict = check(target, draft, examples=1).verdict
    assert verdict is CompatVerdict.INCONCLUSIVE
    assert not verdict.cleared and not verdict.refused
    assert CompatVerdict.INCOMPATIBLE.refused and not CompatVerdict.WARNINGS.refused
    notes = require_compatible_draft(target, draft)
    assert any("could not decide" in note.lower() for note in notes)


# R37: a TabbyAPI arm's draft_mode, read as TabbyAPI reads it ----------------------------------
def test_a_launched_tabby_arms_mode_is_read_as_tabbyapi_reads_it():
    """tabby_launch_drafting compared draft_mode raw: "NGRAM" (TabbyAPI lower-cases it,
    core.config.schema.draft_mode_of) was not an n-gram mode, so the arm's drafting was
    "as its config.yml says" though its settings said n-gram (and "Disabled" did not switch
    drafting off, core.servers.tabby_launch.switched_off)."""
    from specdeck.core.servers.probe import tabby_launch_drafting

    drafting = tabby_launch_drafting((("draft_mode", " NGRAM"),))
    assert (drafting.drafts, drafting.method) == (True, "ngram")
    assert tabby_launch_drafting((("draft_mode", "Disabled"),)).drafts is False


# R38: an EXL3 head's bits, as exllamav3 allows them -------------------------------------------
def test_vram_takes_the_head_bits_each_format_allows(tmp_path, capsys):
    """`vram --head-bits` took 2-16 (HEAD_BITS_RANGE) while the EXL3 estimate took 1-16:
    exllamav3's converter floors a head's bits to at least 1 (conversion/allocation.py
    allocate_linear), so an EXL3 plan at 1 head bit was refused by the flag alone. The flag
    takes both formats' range now, and an EXL2 plan refuses 1 by its own (2-16)."""
    from hubserver import EXL3_SMALL, exl3_config

    exl3 = tmp_path / "exl3"
    exl3.mkdir()
    (exl3 / "config.json").write_text(json.dumps(exl3_config(QWEN, 4, 6, **EXL3_SMALL)))
    args = ["vram", "--gpus", "24", "--bpw", "4", "--head-bits", "1", "--json"]
    assert main([*args, "--model", str(exl3)]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main([*args, "--model", str(QWEN)]) == 2
    assert "head bits 1 are out of range (2-16)" in capsys.readouterr().err


# R40: `swap show` on a presets .ini ----------------------------------------------------------
def test_swap_show_on_presets_knows_every_drafting_key(tmp_path, capsys):
    """`swap show` on a presets .ini chose its "drafting" keys itself (spec*, *draft*, the
    draft model's keys) and made every key a --flag: ngld, ctkd, devd and the other short
    flags of the draft were not drafting keys, and md became --md, which drafter_from_flags
    does not know, so the preset's drafter was "as the server is configured" rather than
    its draft model. It reads core.swap.presets.flag_of and llama_flags.is_drafting_flag."""
    from specdeck.core import llama_flags
    from specdeck.core.swap import presets as ini

    path = tmp_path / "presets.ini"
    path.write_text("[m]\nmodel = target.gguf\nc = 4096\nmd = draft.gguf\n"
                    "spec-type = draft-simple\nngld = 99\nctkd = q8_0\ndevd = CUDA1\n",
                    encoding="utf-8")
    assert main(["swap", "show", "--config", str(path), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["presets"][0]
    assert set(row["drafting"]) == {"md", "spec-type", "ngld", "ctkd", "devd"}
    assert "draft.gguf" in row["drafter"]
    assert all(ini.key_of(ini.flag_of(k)) == k for k in ("md", "ngld", "spec-type", "c"))
    assert ini.flag_of("md") in llama_flags.DRAFT_MODEL


# U7: one count of MTP layers per format -------------------------------------------------------
def test_the_tune_and_the_vram_plan_count_a_folders_mtp_layers_alike(tmp_path):
    """The tune's TabbyAPI candidates read num_nextn_predict_layers or mtp_num_hidden_layers,
    the EXL3 plan only the second: a folder naming the first was offered MTP by the tune and
    had none in the plan. Both read core.models.mtp_layers."""
    from hubserver import EXL3_SMALL, exl3_config
    from specdeck.core.models import read_model
    from specdeck.core.tune import tabby
    from specdeck.core.vram import exl3

    folder = tmp_path / "glm-style"
    folder.mkdir()
    config = exl3_config(QWEN, 4, 6, num_nextn_predict_layers=1, **EXL3_SMALL)
    (folder / "config.json").write_text(json.dumps(config))
    assert tabby.mtp_layers(folder) == exl3.mtp_layers(read_model(folder)) == 1


def test_the_tune_and_the_probe_see_a_ggufs_mtp_layers_alike(tmp_path):
    """The tune's setup read a GGUF's MTP layers from nextn_predict_layers, the probe of a
    draft-mtp launch from a tensor name: a GGUF with the one and not the other was offered
    draft-mtp by the tune and called unable to draft by the probe. Both read
    core.compat.gguf_model.mtp_layers (llama.cpp's hparams.nextn_predict_layers)."""
    from gguf_writer import write_tokenizer_gguf
    from specdeck.core.servers.llama_server import LaunchProfile
    from specdeck.core.servers.probe import launched_drafting
    from specdeck.core.tune.setup import read_facts

    for layers in (0, 1):
        gguf = write_tokenizer_gguf(QWEN, tmp_path / f"mtp{layers}.gguf",
                                    uint32s={"llama.nextn_predict_layers": layers})
        profile = LaunchProfile(str(tmp_path / "llama-server"), str(gguf),
                                ("--spec-type", "draft-mtp"))
        assert read_facts(Path(gguf)).mtp_layers == layers
        assert launched_drafting(profile).drafts is bool(layers)


# U8: the engines' n-gram sizes ----------------------------------------------------------------
def test_generate_takes_the_ngram_sizes_the_drafter_takes():
    """`generate --ngram-max` wrote its own 1..16 beside DrafterSpec's."""
    from specdeck.core.cli.numbers import whole
    from specdeck.core.engines.base import NGRAM_SIZE_RANGE, DrafterSpec
    from specdeck.core.errors import InvalidInputError

    low, high = NGRAM_SIZE_RANGE
    DrafterSpec(ngram_min=low, ngram_max=high)
    with pytest.raises(InvalidInputError):
        DrafterSpec(ngram_min=low, ngram_max=high + 1)
    assert whole(*NGRAM_SIZE_RANGE)(str(high)) == high
