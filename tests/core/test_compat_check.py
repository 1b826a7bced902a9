"""Verdicts for real model pairs, each rule on real data, the report's JSON shape."""

from __future__ import annotations

import json
import threading

import pytest
from compat_helpers import copy_model, edit_json, with_tokenizer_json
from conftest import MODELS
from specdeck.core.compat import CompatVerdict, Status, check, parse_source
from specdeck.core.compat.rules import ntk_rope_alpha
from specdeck.core.errors import CancelledError, InvalidInputError, NotFoundError
from specdeck.core.jsonout import to_jsonable


def run(target, draft, **kwargs):
    return check(MODELS / target if isinstance(target, str) else target,
                 MODELS / draft if isinstance(draft, str) else draft, **kwargs)


def statuses(report):
    return {r.key: r.status for r in report.rules}


# --- the five real pairs --------------------------------------------------------------------


def test_llama2_and_tinyllama_share_a_vocabulary_but_tinyllama_needs_rope_scaling():
    report = run("Llama-2-7b-hf", "TinyLlama-1.1B-Chat-v1.0")
    assert report.verdict is CompatVerdict.WARNINGS
    assert report.vocab.compared == 31995 and report.vocab.differing == 0
    assert [r.key for r in report.warnings] == ["context"]
    context = report.rule("context")
    assert "draft_rope_alpha: 2.63" in context.detail  # NTK alpha for 4096 / 2048
    assert all(report.rule(k).status is Status.PASS
               for k in ("vocab_type", "add_bos", "bos_id", "add_eos", "eos_id", "vocab_size",
                         "token_text", "output_head"))


def test_llama2_and_mistral_have_the_same_size_but_not_the_same_tokens():
    report = run("Llama-2-7b-hf", "Mistral-7B-v0.1")
    assert report.verdict is CompatVerdict.INCOMPATIBLE
    assert report.rule("vocab_size").status is Status.PASS  # 32,000 both: size proves nothing
    assert report.rule("vocab_type").status is Status.PASS
    assert report.rule("token_text").status is Status.FAIL
    assert report.vocab.identical == 265  # the byte tokens and a handful of others
    first = report.vocab.mismatches[0]
    assert first.id == 260
    assert (first.target.text, first.draft.text) == ("\u2581t", "\u2581\u2581\u2581\u2581")
    assert (first.target.display, first.draft.display) == (" t", "    ")
    assert len(report.vocab.mismatches) == 12


def test_qwen_sizes_are_compatible_despite_padded_heads():
    report = run("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct")
    assert report.target.head_rows == 152064 and report.draft.head_rows == 151936
    assert report.vocab.target_size == report.vocab.draft_size == 151665
    assert report.rule("output_head").status is Status.PASS
    assert report.vocab.compared == 151660 and report.vocab.differing == 0
    # The fixtures carry vocab.json + merges.txt only, which ExLlamaV2 0.3 cannot load.
    assert [r.key for r in report.warnings] == ["exllamav2_tokenizer"]
    assert report.verdict is CompatVerdict.WARNINGS
    # the check that warned is named as a check: "1 warning: Loadable by ExLlamaV2" read as
    # the warning itself, and so as good news
    title = report.warnings[0].title
    assert report.summary == f"Compatible, with 1 warning from the check: {title}."


def test_qwen_pair_with_tokenizer_json_is_plainly_compatible(tmp_path):
    draft = with_tokenizer_json("Qwen2.5-0.5B-Instruct", tmp_path)
    # Qwen2.5 sizes share one tokenizer (vocab.json is byte-identical across them), so the
    # 7B folder gets the same tokenizer.json its real repository ships.
    target = copy_model("Qwen2.5-7B-Instruct", tmp_path)
    (target / "tokenizer.json").write_bytes((draft / "tokenizer.json").read_bytes())
    report = run(target, draft)
    assert report.verdict is CompatVerdict.COMPATIBLE
    assert report.warnings == ()


def test_llama3_target_without_tokenizer_files_is_inconclusive():
    report = run("Llama-3.1-8B", "Llama-3.2-1B")
    assert report.verdict is CompatVerdict.INCONCLUSIVE
    text = report.rule("token_text")
    assert text.status is Status.UNKNOWN
    assert report.vocab.compared == 256 and report.vocab.differing == 0  # the added tokens
    assert report.vocab.not_compared == 128251 - 256
    assert report.rule("vocab_type").status is Status.UNKNOWN
    assert report.rule("bos_id").status is Status.PASS  # ids come from config.json
    assert "could not be compared" in report.summary
    assert report.verdict.exit_code == 3


def test_llama_and_qwen_are_incompatible():
    report = run("Llama-2-7b-hf", "Qwen2.5-0.5B-Instruct")
    assert report.verdict is CompatVerdict.INCOMPATIBLE
    failed = {k for k, s in statuses(report).items() if s is Status.FAIL}
    assert {"vocab_type", "vocab_size", "token_text", "bos_id", "output_head"} <= failed


def test_a_partial_target_is_still_refused_when_its_known_ids_differ():
    report = run("Llama-3.1-8B", "Qwen2.5-0.5B-Instruct")
    assert report.verdict is CompatVerdict.INCOMPATIBLE
    assert report.rule("token_text").status is Status.FAIL
    assert report.vocab.mismatches[0].target.text == "<|begin_of_text|>"


# --- single rules, one real change at a time -----------------------------------------------


def test_bigger_draft_head_over_padding_only_warns():
    report = run("Qwen2.5-0.5B-Instruct", "Qwen2.5-7B-Instruct")
    head = report.rule("output_head")
    assert head.status is Status.WARN and "151,936–152,063" in head.detail
    assert report.rule("size_ratio").status is Status.WARN


def test_draft_with_a_real_token_past_the_target_embedding_is_refused(tmp_path):
    draft = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    data = json.loads((draft / "tokenizer.json").read_text("utf-8"))
    data["added_tokens"].append({"id": 32000, "content": "<pad>", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": True})
    (draft / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), "utf-8")
    edit_json(draft / "config.json", vocab_size=32001)
    report = run("Llama-2-7b-hf", draft)
    assert report.rule("vocab_size").status is Status.PASS  # 1 apart: llama.cpp would accept
    assert report.rule("token_text").status is Status.PASS
    assert report.rule("output_head").status is Status.FAIL
    assert report.verdict is CompatVerdict.INCOMPATIBLE


def test_instruct_target_with_a_base_flavoured_eos_is_refused(tmp_path):
    draft = copy_model("Qwen2.5-0.5B-Instruct", tmp_path)
    edit_json(draft / "config.json", eos_token_id=151643)  # as in Qwen2.5-0.5B (base)
    report = run("Qwen2.5-7B-Instruct", draft)
    eos = report.rule("eos_id")
    assert eos.status is Status.FAIL and "same flavour" in eos.detail
    assert report.verdict is CompatVerdict.INCOMPATIBLE


def test_different_add_bos_flags_are_refused(tmp_path):
    draft = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path)
    edit_json(draft / "tokenizer_config.json", add_bos_token=False)
    report = run("Llama-2-7b-hf", draft)
    assert report.rule("add_bos").status is Status.FAIL
    assert report.verdict is CompatVerdict.INCOMPATIBLE


def test_different_chat_templates_warn(tmp_path):
    draft = copy_model("Qwen2.5-0.5B-Instruct", tmp_path)
    edit_json(draft / "tokenizer_config.json", chat_template="{{ messages[0]['content'] }}")
    report = run("Qwen2.5-7B-Instruct", draft)
    assert report.rule("chat_template").status is Status.WARN
    assert report.verdict is CompatVerdict.WARNINGS


@pytest.mark.parametrize(("max_seq_len", "status"), [(2048, Status.PASS), (4096, Status.WARN),
                                                     (8192, Status.WARN)])
def test_context_rule_follows_the_length_the_target_runs_at(max_seq_len, status):
    report = run("Llama-2-7b-hf", "TinyLlama-1.1B-Chat-v1.0", max_seq_len=max_seq_len)
    rule = report.rule("context")
    assert rule.status is status
    if status is Status.WARN:
        assert f"draft_rope_alpha: {ntk_rope_alpha(max_seq_len / 2048):.2f}" in rule.detail


def test_tabbyapi_automatic_alpha_covers_a_draft_as_long_as_the_target():
    # Both native 32k, target stretched to 64k: TabbyAPI's automatic alpha fits the draft too.
    report = run("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct", max_seq_len=65536)
    rule = report.rule("context")
    assert rule.status is Status.PASS and "automatic draft_rope_alpha (2.63)" in rule.detail


def test_ntk_alpha_matches_tabbyapi():
    assert ntk_rope_alpha(1.0) == 1.0
    assert ntk_rope_alpha(2.0) == pytest.approx(-0.13436 + 0.80541 * 2 + 0.28833 * 4)


# --- the report --------------------------------------------------------------------------------


def test_no_examples_still_gives_the_verdict_and_the_count():
    # `specdeck check --examples 0`, and the engines' own check before loading a draft.
    report = run("Llama-2-7b-hf", "Mistral-7B-v0.1", examples=0)
    rule = next(r for r in report.rules if r.key == "token_text")
    assert report.verdict.value == "incompatible" and report.vocab.mismatches == ()
    assert rule.status.value == "fail" and "carry different text. Draft tokens" in rule.detail


def test_json_shape_is_stable():
    report = run("Llama-2-7b-hf", "Mistral-7B-v0.1", examples=3)
    data = json.loads(json.dumps(to_jsonable(report)))
    assert set(data) == {"schema", "verdict", "summary", "target", "draft", "rules", "vocab",
                         "mismatches", "max_seq_len", "timings"}
    assert data["schema"] == 1 and data["verdict"] == "incompatible"
    assert set(data["rules"][0]) == {"key", "title", "status", "detail", "target", "draft",
                                     "blocking", "origin"}
    assert [r["key"] for r in data["rules"]] == [
        "vocab_type", "add_bos", "bos_id", "add_eos", "eos_id", "vocab_size", "token_text",
        "output_head", "context", "special_texts", "chat_template", "exllamav2_tokenizer",
        "size_ratio"]
    assert data["vocab"] == {"target_size": 32000, "draft_size": 32000,
                             "target_head_rows": 32000, "draft_head_rows": 32000,
                             "first_id": 5, "end_id": 32000, "compared": 31995,
                             "identical": 265, "differing": 31730, "not_compared": 0}
    assert data["mismatches"][0] == {
        "id": 260,
        "target": {"text": "\u2581t", "display": " t", "special": False},
        "draft": {"text": "\u2581\u2581\u2581\u2581", "display": "    ", "special": False}}
    assert len(data["mismatches"]) == 3
    assert set(data["timings"]) == {"load_target_s", "load_draft_s", "compare_s", "total_s"}
    assert data["target"]["vocab_type"] == "SPM" and data["target"]["bos_id"] == 1


def test_timings_add_up():
    t = run("Qwen2.5-7B-Instruct", "Qwen2.5-0.5B-Instruct").timings
    assert 0 < t.compare_s < t.total_s
    assert t.load_target_s + t.load_draft_s + t.compare_s <= t.total_s + 1e-3


def test_progress_is_reported_and_cancel_is_honoured():
    messages = []
    run("Llama-2-7b-hf", "TinyLlama-1.1B-Chat-v1.0", progress=messages.append)
    assert messages[0].startswith("Reading the target") and messages[-1] == "Comparing…"
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(CancelledError):
        run("Llama-2-7b-hf", "TinyLlama-1.1B-Chat-v1.0", cancel=cancel)


def test_bad_input_is_a_specdeck_error(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        run(tmp_path / "missing", "Llama-2-7b-hf")
    with pytest.raises(InvalidInputError, match="max_seq_len"):
        run("Llama-2-7b-hf", "TinyLlama-1.1B-Chat-v1.0", max_seq_len=0)
    with pytest.raises(InvalidInputError, match="is a file"):
        run(MODELS / "Llama-2-7b-hf" / "config.json", "Llama-2-7b-hf")
    (tmp_path / "not-a-model").mkdir()  # neither config.json nor a tokenizer file
    with pytest.raises(NotFoundError, match="has no tokenizer files"):
        run("Llama-2-7b-hf", tmp_path / "not-a-model")


def test_a_model_folder_without_tokenizer_files_leaves_the_pair_undecided(tmp_path):
    """A model folder (config.json) that lacks its tokenizer files is checked as far as its
    config goes, and undecided where the tokens would tell (exit 3, as `check --help` and
    docs/compat.md say); it had been an error (exit 2)."""
    draft = copy_model("TinyLlama-1.1B-Chat-v1.0", tmp_path, skip=("tokenizer*", "*.model",
                                                                   "special_tokens_map.json"))
    assert sorted(p.name for p in draft.iterdir()) == ["config.json", "generation_config.json"]
    report = run("TinyLlama-1.1B-Chat-v1.0", draft)
    assert report.verdict is CompatVerdict.INCONCLUSIVE
    assert report.rule("token_text").status is Status.UNKNOWN
    from specdeck.core.cli import main

    assert main(["check", str(MODELS / "TinyLlama-1.1B-Chat-v1.0"), str(draft)]) == 3


# --- sources ---------------------------------------------------------------------------------


def test_hub_ids_and_folders_are_told_apart(tmp_path, monkeypatch):
    source = parse_source("turboderp/Llama-3.2-1B-exl2@4.0bpw")
    assert (source.repo_id, source.revision, source.folder) == (
        "turboderp/Llama-3.2-1B-exl2", "4.0bpw", None)
    assert parse_source("Qwen/Qwen2.5-0.5B-Instruct").revision is None
    # An existing folder always wins over the Hub reading of the same text.
    (tmp_path / "turboderp" / "Llama-3.2-1B-exl2").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert parse_source("turboderp/Llama-3.2-1B-exl2").folder is not None
    with pytest.raises(NotFoundError):
        parse_source("./not/here")
    with pytest.raises(NotFoundError):
        parse_source("just some words")
    with pytest.raises(InvalidInputError):
        parse_source("  ")


def _tokenizer_only(tmp_path, source: str, name: str):
    import shutil

    folder = tmp_path / name
    folder.mkdir()
    for file in (MODELS / source).iterdir():
        if file.name.startswith("tokenizer"):
            shutil.copy(file, folder / file.name)
    assert not (folder / "config.json").exists()
    return folder


def test_tokenizer_only_folders_are_decided_when_every_id_matches(tmp_path):
    target = _tokenizer_only(tmp_path, "Llama-2-7b-hf", "target")
    draft = _tokenizer_only(tmp_path, "TinyLlama-1.1B-Chat-v1.0", "draft")
    report = check(str(target), str(draft))
    assert report.verdict is CompatVerdict.WARNINGS
    head = report.rule("output_head")
    assert head.status is Status.WARN and "its head size is unknown" in head.detail
    assert report.rule("context").status is Status.WARN


def test_a_known_draft_head_within_the_target_tokenizer_is_safe_whatever_the_target_head(tmp_path):
    target = _tokenizer_only(tmp_path, "Llama-2-7b-hf", "target")
    report = check(str(target), str(MODELS / "TinyLlama-1.1B-Chat-v1.0"))
    assert report.rule("output_head").status is Status.PASS
    assert report.verdict is not CompatVerdict.INCONCLUSIVE


def test_tokenizer_only_folders_that_differ_are_still_refused(tmp_path):
    target = _tokenizer_only(tmp_path, "Llama-2-7b-hf", "target")
    draft = _tokenizer_only(tmp_path, "Mistral-7B-v0.1", "draft")
    assert check(str(target), str(draft)).verdict is CompatVerdict.INCOMPATIBLE
