"""Searching the fake Hub, listing variants, and fetching metadata without weights."""

from __future__ import annotations

import json

import pytest
from hubserver import (  # noqa: F401 - fake_hub and memory_keyring are fixtures
    GATED_REPO,
    GOOD_TOKEN,
    PLAIN_REPO,
    QWEN_REPO,
    SOLO_REPO,
    TINY_REPO,
    fake_hub,
    memory_keyring,
)

from specdeck.core.errors import NotFoundError
from specdeck.core.hub import (
    HubOfflineError,
    RepoNotFoundError,
    fetch_metadata,
    list_variants,
    search_repos,
)
from specdeck.core.hub.metadata import is_metadata_file
from specdeck.core.models import read_model

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")


# search --------------------------------------------------------------------------------
def test_search_finds_exl2_repos_and_leaves_out_the_rest(fake_hub):
    hits = search_repos("tinyllama", endpoint=fake_hub.url)
    ids = [h.repo_id for h in hits]
    assert ids == [TINY_REPO, SOLO_REPO]  # most downloaded first
    assert PLAIN_REPO not in ids  # the unquantized original is not an EXL2 repo
    assert hits[0].downloads == 1200 and "exl2" in hits[0].tags


def test_every_word_must_match(fake_hub):
    assert [h.repo_id for h in search_repos("qwen 0.5b instruct", endpoint=fake_hub.url)] == [QWEN_REPO]
    assert search_repos("qwen llama", endpoint=fake_hub.url) == []


def test_search_by_family_and_author(fake_hub):
    assert [h.repo_id for h in search_repos(family="qwen2", endpoint=fake_hub.url)] == [QWEN_REPO]
    by_author = search_repos(author="gatedorg", endpoint=fake_hub.url)
    assert [h.repo_id for h in by_author] == [GATED_REPO]
    assert by_author[0].gated == "manual"


def test_private_repos_show_only_with_a_token_that_may_see_them(fake_hub):
    anonymous = {h.repo_id for h in search_repos("secret", endpoint=fake_hub.url)}
    signed_in = {h.repo_id for h in search_repos("secret", endpoint=fake_hub.url, token=GOOD_TOKEN)}
    assert anonymous == set()
    assert signed_in == {"privateorg/secret-draft-exl2"}


# variants ------------------------------------------------------------------------------
def test_variants_come_from_branches_with_sizes_from_the_tree(fake_hub):
    found = list_variants(TINY_REPO, endpoint=fake_hub.url)
    assert [v.revision for v in found.variants] == ["4.0bpw", "6_5", "8.0bpw"]
    repo = fake_hub.repos[TINY_REPO]
    for v in found.variants:
        data = repo.branches[v.revision]
        assert v.total_bytes == sum(len(d) for d in data.values())
        assert v.weight_bytes == sum(len(d) for p, d in data.items() if p.endswith(".safetensors"))
        assert v.file_count == len(data)
        assert v.commit == repo.commit(v.revision)
        assert v.bits_source == "config.json"
        config = json.loads(data["config.json"])["quantization_config"]
        assert (v.bits, v.head_bits) == (config["bits"], config["head_bits"])
    assert [v.label for v in found.variants] == ["4.0 bpw · h6", "6.5 bpw · h6", "8.0 bpw · h8"]
    assert [v.folder_name for v in found.variants][1] == "TinyLlama-1.1B-Chat-v1.0-exl2-6.5bpw"
    (main,) = found.other_branches
    assert main[0] == "main" and "README.md" in main[1]


def test_variants_carry_the_vram_planners_weight_estimate(fake_hub):
    found = list_variants(TINY_REPO, endpoint=fake_hub.url)
    vram = [v.weights_vram_bytes for v in found.variants]
    # TinyLlama has 1.1 B parameters, 65.5 M of them in the embedding (kept in system RAM):
    # about 1.03 B x 4 / 8 bytes at 4.0 bpw.
    assert 0.45e9 < vram[0] < 0.6e9
    assert vram == sorted(vram) and vram[2] > 1.8 * vram[0]  # 4.0 < 6.5 < 8.0 bpw
    (gated,) = list_variants(GATED_REPO, endpoint=fake_hub.url).variants
    assert gated.weights_vram_bytes is None  # no config.json without access: no guess


def test_config_wins_over_a_mislabeled_branch_and_says_so(fake_hub):
    variant = list_variants(QWEN_REPO, endpoint=fake_hub.url).find("5.0bpw")
    assert variant.bits == 4.85
    assert any("5.0 bpw" in note and "4.85" in note for note in variant.notes)


def test_gated_variants_are_listed_without_access(fake_hub):
    (variant,) = list_variants(GATED_REPO, endpoint=fake_hub.url).variants
    assert variant.bits == 4.0 and variant.bits_source == "branch name"
    assert any("gated" in note for note in variant.notes)
    (variant,) = list_variants(GATED_REPO, endpoint=fake_hub.url, token=GOOD_TOKEN).variants
    assert variant.bits_source == "config.json" and variant.notes == ()


def test_unknown_repo(fake_hub):
    with pytest.raises(RepoNotFoundError, match="not found"):
        list_variants("nobody/nothing-exl2", endpoint=fake_hub.url)


# metadata ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "wanted"),
    [("config.json", True), ("original/tokenizer.model", True), ("tokenizer.json", True),
     ("output.safetensors", False), ("sub/config.json", False), ("pytorch_model.bin", False)],
)
def test_metadata_file_selection(path, wanted):
    assert is_metadata_file(path) is wanted


def test_fetch_metadata_never_requests_weights(fake_hub, specdeck_home):
    folder = fetch_metadata(TINY_REPO, "6_5", endpoint=fake_hub.url)
    data = fake_hub.repos[TINY_REPO].branches["6_5"]
    expected = {p for p in data if not p.endswith(WEIGHT_SUFFIXES)}
    assert {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != ".complete"} == expected
    for path in expected:
        assert (folder / path).read_bytes() == data[path]
    assert not any(f.endswith(WEIGHT_SUFFIXES) for f in fake_hub.files_downloaded())
    assert str(folder).startswith(str(specdeck_home))
    # The compatibility checker can read it like any model folder.
    info = read_model(folder)
    assert info.arch.vocab_size == 32000 and info.weights is None
    assert info.quant.bits == 6.5


def test_fetch_metadata_uses_its_cache_and_works_offline(fake_hub, monkeypatch):
    first = fetch_metadata(TINY_REPO, "4.0bpw", endpoint=fake_hub.url)
    downloads = len(fake_hub.file_requests())
    again = fetch_metadata(TINY_REPO, "4.0bpw", endpoint=fake_hub.url)
    assert again == first and len(fake_hub.file_requests()) == downloads
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    requests = len(fake_hub.requests)
    assert fetch_metadata(TINY_REPO, "4.0bpw", endpoint=fake_hub.url) == first
    assert len(fake_hub.requests) == requests, "offline means no request at all"
    with pytest.raises(HubOfflineError, match="HF_HUB_OFFLINE"):
        fetch_metadata(TINY_REPO, "8.0bpw", endpoint=fake_hub.url)


def test_fetch_metadata_finds_the_model_on_a_branch_when_main_has_none(fake_hub):
    folder = fetch_metadata(TINY_REPO, endpoint=fake_hub.url)
    assert (folder / "config.json").is_file() and (folder / "tokenizer.json").is_file()


def test_fetch_metadata_of_a_gated_repo_with_its_subfolder(fake_hub):
    folder = fetch_metadata(GATED_REPO, "4.0bpw", endpoint=fake_hub.url, token=GOOD_TOKEN)
    assert (folder / "original" / "tokenizer.model").read_bytes() == \
        fake_hub.repos[GATED_REPO].branches["4.0bpw"]["original/tokenizer.model"]


def test_fetch_metadata_without_config(fake_hub):
    from hubserver import CODE_REPO

    with pytest.raises(NotFoundError, match="no config.json"):
        fetch_metadata(CODE_REPO, "main", endpoint=fake_hub.url)
