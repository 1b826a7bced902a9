"""Checking Hub ids: through the Hub module, against the fake Hub on 127.0.0.1
(tests/hubserver.py)."""

from __future__ import annotations

import pytest
from conftest import MODELS
from hubserver import (  # noqa: F401 - fake_hub and memory_keyring are fixtures
    GATED_REPO,
    GOOD_TOKEN,
    QWEN_REPO,
    TINY_REPO,
    fake_hub,
    memory_keyring,
)
from specdeck.core.cli import main  # noqa: E402
from specdeck.core.compat import CompatVerdict, Status, check, suggest  # noqa: E402
from specdeck.core.errors import SpecDeckError  # noqa: E402
from specdeck.core.settings import Settings, save  # noqa: E402

WEIGHTS = (".safetensors", ".bin", ".pt", ".gguf")


def test_hub_draft_is_checked_from_its_tokenizer_and_config_only(fake_hub):
    report = check(MODELS / "Llama-2-7b-hf", f"{TINY_REPO}@4.0bpw", endpoint=fake_hub.url)
    assert report.verdict is CompatVerdict.WARNINGS  # TinyLlama's 2,048-token context
    assert report.rule("token_text").status is Status.PASS
    assert (report.draft.repo_id, report.draft.revision) == (TINY_REPO, "4.0bpw")
    assert report.draft.quantization == "EXL2 4 bpw h6"
    downloaded = fake_hub.files_downloaded()
    assert "tokenizer.json" in downloaded and "config.json" in downloaded
    assert not [f for f in downloaded if f.endswith(WEIGHTS)]


def test_a_second_check_reuses_the_fetched_files(fake_hub):
    check(MODELS / "Qwen2.5-7B-Instruct", f"{QWEN_REPO}@6.0bpw", endpoint=fake_hub.url)
    before = len(fake_hub.file_requests())
    report = check(MODELS / "Qwen2.5-7B-Instruct", f"{QWEN_REPO}@6.0bpw", endpoint=fake_hub.url)
    assert len(fake_hub.file_requests()) == before
    assert report.rule("token_text").status is Status.PASS


def test_gated_repo_needs_the_token_and_never_shows_it(fake_hub):
    with pytest.raises(SpecDeckError) as refused:
        check(MODELS / "Llama-3.2-1B", f"{GATED_REPO}@4.0bpw", endpoint=fake_hub.url)
    assert GOOD_TOKEN not in str(refused.value)
    report = check(MODELS / "Llama-3.2-1B", f"{GATED_REPO}@4.0bpw", endpoint=fake_hub.url,
                   token=GOOD_TOKEN)
    assert report.rule("token_text").status is Status.PASS
    assert GOOD_TOKEN not in str(report.to_json())


def test_cli_check_with_a_hub_id_and_a_missing_repo(fake_hub, capsys):
    save(Settings(hub_endpoint=fake_hub.url))
    assert main(["check", str(MODELS / "Llama-2-7b-hf"), f"{TINY_REPO}@6_5"]) == 0
    assert "COMPATIBLE WITH WARNINGS" in capsys.readouterr().out
    assert main(["check", str(MODELS / "Llama-2-7b-hf"), "nobody/no-such-model-exl2"]) == 2
    assert "specdeck: error:" in capsys.readouterr().err


def test_suggest_verify_checks_hub_drafts_against_their_files(fake_hub, tmp_path):
    # The curated list names real Hub repos the fake Hub does not have: they stay
    # unverified, with the Hub's reason, and nothing crashes.
    result = suggest(MODELS / "Qwen2.5-7B-Instruct", model_dirs=[tmp_path], verify_hub=True,
                     endpoint=fake_hub.url)
    hub = [s for s in result.suggestions if s.origin == "hub"]
    assert hub and all(s.status == "unverified" for s in hub)
    assert all("could not be checked" in s.reason for s in hub)
