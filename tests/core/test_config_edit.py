"""Editing real TabbyAPI config_sample.yml files: only the changed values' bytes move."""

from __future__ import annotations

import difflib

import pytest
from conftest import TABBY

from specdeck.core import config
from specdeck.core.config import DRAFT, MODEL, ConfigDocument, Layout
from specdeck.core.errors import InvalidInputError

SAMPLES = sorted(TABBY.glob("*.yml"))
SAMPLE_IDS = [p.name for p in SAMPLES]


def changed_lines(old: str, new: str) -> tuple[list[str], list[str]]:
    """(removed, added) lines between two texts."""
    removed, added = [], []
    for line in difflib.ndiff(old.splitlines(), new.splitlines()):
        if line.startswith("- "):
            removed.append(line[2:])
        elif line.startswith("+ "):
            added.append(line[2:])
    return removed, added


def comment_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


def test_fixtures_cover_three_generations():
    layouts = {p.name: config.load(p).layout for p in SAMPLES}
    assert sorted(layouts.values(), key=str) == sorted(
        [Layout.LEGACY_NESTED, Layout.DRAFT_MODEL, Layout.DRAFT_MODEL], key=str
    )


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_unchanged_save_is_byte_identical(sample, tmp_path):
    path = tmp_path / "config.yml"
    path.write_bytes(sample.read_bytes())
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    doc = config.load(path)
    # Setting every key to the value it already has is no change at all.
    same = {s.path: doc.raw(*s.path) for s in config.SETTINGS if doc.has(*s.path)}
    change = config.plan_change(doc, same)
    assert change.is_noop and change.changed_keys == ()
    result = config.save(change)
    assert not result.written
    assert path.read_bytes() == before
    assert path.stat().st_mtime_ns == mtime
    assert not config.backup_path(path).exists()


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_setting_name_and_cache_mode_changes_only_those_lines(sample, tmp_path):
    path = tmp_path / "config.yml"
    path.write_bytes(sample.read_bytes())
    original = path.read_text()
    doc = config.load(path)
    change = config.plan_change(
        doc,
        {(DRAFT, "draft_model_name"): "TinyLlama-1.1B-exl2-4.0bpw", (DRAFT, "draft_cache_mode"): "q4"},
    )
    assert set(change.changed_keys) == {(DRAFT, "draft_model_name"), (DRAFT, "draft_cache_mode")}
    config.save(change)
    saved = path.read_text()
    removed, added = changed_lines(original, saved)
    assert [line.split(":")[0].strip() for line in added] == ["draft_model_name", "draft_cache_mode"]
    assert all(line.split(":")[0].strip() in ("draft_model_name", "draft_cache_mode") for line in removed)
    assert comment_lines(saved) == comment_lines(original)
    reread = config.load(path)
    assert reread.value(DRAFT, "draft_model_name") == "TinyLlama-1.1B-exl2-4.0bpw"
    assert reread.value(DRAFT, "draft_cache_mode") == "Q4"
    assert config.backup_path(path).read_text() == original


@pytest.mark.parametrize("sample", SAMPLES, ids=SAMPLE_IDS)
def test_every_draft_setting_round_trips(sample):
    doc = config.load(sample)
    values = {
        (DRAFT, "draft_model_dir"): "/srv/models/drafts",
        (DRAFT, "draft_model_name"): "Qwen2.5-0.5B-Instruct-exl2_6.5bpw",
        (DRAFT, "draft_rope_scale"): "1.5",
        (DRAFT, "draft_rope_alpha"): 2.63,
        (DRAFT, "draft_cache_mode"): "Q6",
        (DRAFT, "draft_gpu_split"): "8, 0.5",
        (DRAFT, "draft_mode"): "ngram",
        (DRAFT, "draft_num_tokens"): "6",
        (DRAFT, "ngram_match_min"): 3,
        (DRAFT, "dynamic_draft"): True,
    }
    change = config.plan_change(doc, values)
    after = ConfigDocument(change.new_text)
    assert after.value(DRAFT, "draft_model_dir") == "/srv/models/drafts"
    assert after.value(DRAFT, "draft_rope_scale") == 1.5
    assert after.value(DRAFT, "draft_rope_alpha") == 2.63
    assert after.value(DRAFT, "draft_gpu_split") == (8.0, 0.5)
    assert after.value(DRAFT, "draft_num_tokens") == 6
    assert after.value(DRAFT, "dynamic_draft") is True
    # Planning the same values again on the result changes nothing.
    assert config.plan_change(after, values).is_noop
    assert comment_lines(change.new_text) == comment_lines(doc.text)


def test_blanking_a_value_leaves_key_and_comment():
    doc = config.load(TABBY / "config_sample.exl2-checkpoint.yml")
    change = config.plan_change(doc, {(DRAFT, "draft_model_dir"): ""})
    removed, added = changed_lines(doc.text, change.new_text)
    assert removed == ["  draft_model_dir: models"]
    assert added == ["  draft_model_dir:"]
    assert ConfigDocument(change.new_text).value(DRAFT, "draft_model_dir") == "models"


def test_legacy_nested_layout_is_edited_in_place():
    doc = config.load(TABBY / "config_sample.581e1fc.yml")
    assert doc.section_path(DRAFT) == (MODEL, "draft")
    assert doc.value(DRAFT, "draft_model_name") == "A model name"
    change = config.plan_change(
        doc, {(DRAFT, "draft_model_name"): "Tiny", (DRAFT, "draft_cache_mode"): "Q8"}
    )
    after = ConfigDocument(change.new_text)
    assert after.layout is Layout.LEGACY_NESTED
    assert after.data["model"]["draft"]["draft_model_name"] == "Tiny"
    assert after.data["model"]["draft"]["draft_cache_mode"] == "Q8"
    removed, added = changed_lines(doc.text, change.new_text)
    assert removed == ["    draft_model_name: A model name"]
    assert added == ["    draft_model_name: Tiny", "    draft_cache_mode: Q8"]


def test_missing_draft_section_is_appended():
    text = "# my server\nnetwork:\n  host: 127.0.0.1\n  port: 5000\n\nmodel:\n  model_name: Big\n"
    change = config.plan_change(ConfigDocument(text), {(DRAFT, "draft_model_name"): "Small"})
    assert change.new_text == text + "\ndraft_model:\n  draft_model_name: Small\n"


def test_empty_draft_section_gets_keys():
    text = "model:\n    model_name: Big\ndraft_model:  # all commented out\n#  draft_model_name: x\n"
    change = config.plan_change(
        ConfigDocument(text), {(DRAFT, "draft_model_name"): "Small", (DRAFT, "draft_cache_mode"): "Q4"}
    )
    assert change.new_text == (
        "model:\n    model_name: Big\ndraft_model:  # all commented out\n"
        "    draft_model_name: Small\n    draft_cache_mode: Q4\n#  draft_model_name: x\n"
    )


def test_flow_style_section_gets_keys():
    text = "draft_model: {draft_model_dir: models}\n"
    change = config.plan_change(ConfigDocument(text), {(DRAFT, "draft_model_name"): "Small"})
    assert change.new_text == "draft_model: {draft_model_dir: models, draft_model_name: Small}\n"


def test_block_list_keeps_block_style():
    text = "model:\n  gpu_split:\n  - 20\n  - 24  # second card\n  cache_mode: Q4\n"
    doc = ConfigDocument(text)
    change = config.plan_change(doc, {(MODEL, "gpu_split"): [18.5, 22, 8]})
    assert change.new_text == (
        "model:\n  gpu_split:\n  - 18.5\n  - 22\n  - 8  # second card\n  cache_mode: Q4\n"
    )
    emptied = config.plan_change(doc, {(MODEL, "gpu_split"): ""})
    assert emptied.new_text == "model:\n  gpu_split: []  # second card\n  cache_mode: Q4\n"


def test_quoting_style_and_unsafe_strings():
    text = "draft_model:\n  draft_model_dir: 'C:\\models'\n  draft_model_name: \"x\"\n"
    doc = ConfigDocument(text)
    change = config.plan_change(
        doc,
        {(DRAFT, "draft_model_dir"): "D:\\it's here", (DRAFT, "draft_model_name"): "name: with colon"},
    )
    assert "draft_model_dir: 'D:\\it''s here'" in change.new_text
    assert 'draft_model_name: "name: with colon"' in change.new_text
    # Strings that YAML would read as something else get quoted.
    for tricky in ("true", "1.5", "null", "# not a comment", "[x]", "- dash", "  padded "):
        edited = config.plan_change(ConfigDocument("draft_model:\n  draft_model_name: a\n"),
                                    {(DRAFT, "draft_model_name"): tricky})
        assert ConfigDocument(edited.new_text).raw(DRAFT, "draft_model_name") == tricky


def test_crlf_and_bom_survive(tmp_path):
    original = (TABBY / "config_sample.exl2-checkpoint.yml").read_text().replace("\n", "\r\n")
    path = tmp_path / "config.yml"
    path.write_bytes(("\ufeff" + original).encode("utf-8"))
    doc = config.load(path)
    change = config.plan_change(doc, {(DRAFT, "draft_model_name"): "Small", (DRAFT, "draft_num_tokens"): 5})
    config.save(change)
    raw = path.read_bytes()
    assert raw.startswith("\ufeff".encode())
    text = raw.decode("utf-8")[1:]
    assert "\n" not in text.replace("\r\n", "")  # every line still ends in CRLF
    assert "  draft_model_name: Small\r\n" in text
    assert len(text.splitlines()) == len(original.splitlines())


def test_new_key_in_crlf_file_uses_crlf():
    text = "draft_model:\r\n  draft_model_dir: models\r\n"
    change = config.plan_change(ConfigDocument(text), {(DRAFT, "draft_model_name"): "S"})
    assert change.new_text == "draft_model:\r\n  draft_model_dir: models\r\n  draft_model_name: S\r\n"


def test_unknown_keys_and_other_sections_untouched():
    text = (
        "network:\n  host: 0.0.0.0   # exposed!\n  api_servers: [\"oai\", \"kobold\"]\n"
        "draft_model:\n  draft_model_name: A\n  future_key: {nested: [1, 2]}  # keep\n"
        "sampling:\n  override_preset: safe_defaults\n"
    )
    change = config.plan_change(ConfigDocument(text), {(DRAFT, "draft_model_name"): "B"})
    assert change.new_text == text.replace("draft_model_name: A", "draft_model_name: B")


def test_unknown_setting_is_refused():
    with pytest.raises(InvalidInputError, match="does not edit"):
        config.plan_change(ConfigDocument(""), {(DRAFT, "no_such_key"): 1})
