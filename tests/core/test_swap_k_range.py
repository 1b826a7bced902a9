"""The most tokens a server may draft per step is one number (issue 45): an A/B plan, a
llama-swap cmd's edit (`swap set-draft`, the llama-swap page), a tune's arguments and a saved
tune's figure all take up to core.engines.base.MAX_SERVER_DRAFT_TOKENS and refuse one more.
Before, the A/B page could find a winner at a k that the llama-swap edit refused (256)."""

from __future__ import annotations

import argparse

import pytest
from specdeck.core.bench.plan import drafter_from_json
from specdeck.core.cli.swap_cmd import register
from specdeck.core.engines.base import MAX_SERVER_DRAFT_TOKENS as MOST
from specdeck.core.errors import InvalidInputError
from specdeck.core.swap.actions import DraftSetting
from specdeck.core.tune.arguments import number_range
from specdeck.core.tune.predict import checked_entry

K_FLAGS = ("--spec-draft-n-max", "--spec-ngram-mod-n-max", "--spec-ngram-simple-size-m",
           "--draft-max", "--draft", "--draft-n")


def test_every_place_a_server_k_is_taken_takes_the_same_most():
    plan = {"kind": "ngram", "server_type": "ngram-mod", "num_draft_tokens": MOST}
    assert drafter_from_json(plan).num_draft_tokens == MOST
    assert DraftSetting(draft_max=MOST, draft_min=MOST).draft_max == MOST
    for flag in K_FLAGS:
        assert number_range(flag)[1] == MOST, flag
    assert checked_entry({"speedup": 1.5, "k": MOST})["k"] == MOST
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["swap", "set-draft", "--config", "c.yaml", "--model", "m",
                              "--draft-max", str(MOST)])
    assert args.draft_max == MOST

    with pytest.raises(InvalidInputError):
        drafter_from_json({**plan, "num_draft_tokens": MOST + 1})
    with pytest.raises(InvalidInputError, match=f"Use 1 to {MOST}"):
        DraftSetting(draft_max=MOST + 1)
    assert checked_entry({"speedup": 1.5, "k": MOST + 1}) is None
