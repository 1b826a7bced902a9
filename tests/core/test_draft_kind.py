"""What a setting drafts with (core.draft_kind): successive halving's cost and the tune's
prediction read one answer, for llama-server's spec types and TabbyAPI's draft modes alike."""

from __future__ import annotations

from pathlib import Path

import pytest
from specdeck.core import draft_kind
from specdeck.core.bench.grid import Cell
from specdeck.core.bench.halving import setting_cost
from specdeck.core.bench.plan import Arm
from specdeck.core.config.schema import DRAFT_MODE_MODEL, DRAFT_MODE_MTP, DRAFT_MODE_NGRAM
from specdeck.core.servers.arms import ServerArm
from specdeck.core.servers.llama_server import LaunchProfile, drafter_from_flags
from specdeck.core.servers.tabby_launch import TabbyLaunch
from specdeck.core.tune.candidates import Candidate
from specdeck.core.tune.predict import _kind

DRAFT_GGUF = "/models/draft-0.5b.gguf"


def launched(*args: str) -> Cell:
    launch = LaunchProfile("/opt/llama-server", "/models/target.gguf", args)
    return Cell(Arm("B", drafter_from_flags(args), ServerArm(launch=launch)), "setting")


def tabby(**settings) -> Cell:
    launch = TabbyLaunch("/opt/tabbyAPI", "/usr/bin/python3", tuple(settings.items()))
    return Cell(Arm("B", drafter_from_flags(()), ServerArm(tabby_launch=launch)), "setting")


# (a setting as a search launches it, the same setting as a tune candidate, its kind)
SETTINGS = [
    pytest.param(launched("--spec-type", "draft-mtp", "--spec-draft-n-max", "3"),
                 Candidate("draft-mtp"), draft_kind.MTP, id="llama-server draft-mtp"),
    pytest.param(launched("--spec-type", "ngram-simple", "--spec-ngram-simple-size-m", "8",
                          "--spec-draft-p-min", "0.5"),
                 Candidate("ngram-simple"), draft_kind.NGRAM,
                 id="n-gram beside a --spec-draft-* flag"),
    pytest.param(launched("--spec-type", "draft-simple", "-md", DRAFT_GGUF),
                 Candidate("draft-simple", Path(DRAFT_GGUF)), draft_kind.DRAFT_MODEL,
                 id="llama-server draft-simple"),
    pytest.param(launched("-md", DRAFT_GGUF), Candidate("draft-simple", Path(DRAFT_GGUF),
                                                        implied=True),
                 draft_kind.DRAFT_MODEL, id="a build that drafts with -md alone"),
    pytest.param(tabby(draft_mode=DRAFT_MODE_MTP, draft_model_name="tiny"),
                 Candidate(DRAFT_MODE_MTP, Path("tiny")), draft_kind.MTP, id="TabbyAPI mtp"),
    pytest.param(tabby(draft_mode=DRAFT_MODE_NGRAM, draft_model_name="tiny"),
                 Candidate(DRAFT_MODE_NGRAM, Path("tiny")), draft_kind.NGRAM,
                 id="TabbyAPI ngram"),
    pytest.param(tabby(draft_mode=DRAFT_MODE_MODEL, draft_model_name="tiny"),
                 Candidate(DRAFT_MODE_MODEL, Path("tiny")), draft_kind.DRAFT_MODEL,
                 id="TabbyAPI model"),
]


@pytest.mark.parametrize(("cell", "candidate", "kind"), SETTINGS)
def test_halving_costs_a_draft_model_where_the_prediction_sees_one(cell, candidate, kind):
    """Issue 45: halving's setting_cost took every launch whose flags held "draft-" for a
    draft model, so an MTP setting (--spec-type draft-mtp) and an n-gram one beside any
    --spec-draft-* flag were costed as draft-model settings (and lost a tie to a draft model's
    cheaper k); the tune's prediction called them mtp and ngram, and a TabbyAPI ngram or mtp
    candidate naming a draft "draft". Both read core.draft_kind now."""
    assert _kind(candidate) == kind
    assert setting_cost(cell)[0] == int(kind == draft_kind.DRAFT_MODEL)


def test_a_setting_that_drafts_nothing_is_no_kind():
    assert draft_kind.draft_kind("none") == draft_kind.draft_kind("disabled", True) == \
        draft_kind.NOTHING
    assert draft_kind.draft_kind(None) == draft_kind.NOTHING
    assert draft_kind.draft_kind("draft-eagle3", True) == draft_kind.DRAFT_MODEL
    assert draft_kind.draft_kind("ngram-mod") == draft_kind.NGRAM
