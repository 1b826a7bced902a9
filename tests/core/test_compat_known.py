"""The curated Hub draft list: its anchors match the real tokenizers, its entries are sane."""

from __future__ import annotations

import re

import pytest
from conftest import MODELS

from specdeck.core.compat.known import find_family, known_families
from specdeck.core.compat.source import parse_source
from specdeck.core.compat.tokenizer_files import read_vocab


@pytest.mark.parametrize(("folder", "family"), [
    ("Llama-2-7b-hf", "llama-2"),
    ("TinyLlama-1.1B-Chat-v1.0", "llama-2"),
    ("Llama-3.2-1B", "llama-3.1"),
    ("Llama-3.1-8B", "llama-3.1"),  # only its 256 added tokens are known: enough anchors
    ("Qwen2.5-0.5B-Instruct", "qwen-2.5"),
    ("Qwen2.5-7B-Instruct", "qwen-2.5"),
    ("gemma-2-9b-it", "gemma-2"),
])
def test_anchors_recognise_the_real_tokenizers(folder, family):
    found = find_family(read_vocab(MODELS / folder))
    assert found is not None and found.id == family


def test_same_size_other_vocabulary_matches_no_family():
    # Mistral v0.1 has Llama 2's size and special tokens but other token texts.
    assert find_family(read_vocab(MODELS / "Mistral-7B-v0.1")) is None


def test_every_entry_is_a_checkable_hub_repo():
    families = known_families()
    assert {f.id for f in families} == {"llama-2", "llama-3.1", "qwen-2.5", "gemma-2"}
    for family in families:
        assert family.drafts and len(family.anchors) >= 6
        for draft in family.drafts:
            source = parse_source(draft.repo)
            assert source.repo_id == draft.repo and source.revision is None
            # The Hub page it was checked against: the repo's own, or a collection listing it.
            assert draft.source.startswith((f"https://huggingface.co/{draft.repo}",
                                            "https://huggingface.co/collections/"))
            assert draft.flavour in {"base", "instruct"}
            assert 1e8 < draft.parameters < 2e10 and draft.context_length >= 2048
            assert all(re.fullmatch(r"[\w.\-]+", r) for r in draft.revisions)
