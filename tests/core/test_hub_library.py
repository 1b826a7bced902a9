"""What the Models page shows, decided in core.hub.library against the fake Hub (a real HTTP
server) and real folders: the library scan with a broken config.yml, a repository's variants
and GGUF files with their install states, the compatibility badges against config.yml's
target, and what an installed folder is for (TabbyAPI or llama-server, with its flags)."""

from __future__ import annotations

import json
import threading

import pytest
from conftest import FIXTURES, MODELS
from gguf_writer import write_tokenizer_gguf
from hubserver import TINY_REPO, FakeHub, FakeRepo, fake_hub, memory_keyring  # noqa: F401

from specdeck.core.errors import CancelledError
from specdeck.core.hub import install
from specdeck.core.hub.gguf import install_gguf
from specdeck.core.hub.library import (
    Badge,
    installed_use,
    repo_offer,
    scan_for_install,
    target_badges,
)

GGUF_REPO = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"


@pytest.fixture
def endpoint(fake_hub, monkeypatch):  # noqa: F811 - the fixture imported above
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    return fake_hub.url


def test_states_follow_the_library_installed_older_and_unfinished(fake_hub, endpoint, tmp_path):  # noqa: F811
    drafts = tmp_path / "drafts"
    offer = repo_offer(TINY_REPO, [], drafts)
    assert [offer.state(v).text for v in offer.variants.variants] == ["", "", ""]

    result = install(TINY_REPO, "4.0bpw", drafts)
    cancel = threading.Event()
    with pytest.raises(CancelledError):  # stopped at its first progress report: resumable
        install(TINY_REPO, "8.0bpw", drafts, cancel=cancel, progress=lambda _p: cancel.set())
    offer = repo_offer(TINY_REPO, [], drafts)
    states = {v.revision: offer.state(v) for v in offer.variants.variants}
    assert states["4.0bpw"].installed and states["4.0bpw"].text == "installed"
    assert not states["8.0bpw"].installed and states["8.0bpw"].text.startswith("unfinished (")
    assert states["6_5"].text == ""
    assert [p.revision for p in offer.partials] == ["8.0bpw"]

    # The branch has moved on since: the folder holds an older commit of it.
    marker = result.path / ".specdeck-install.json"
    data = json.loads(marker.read_text())
    data["commit"] = "0" * 40
    marker.write_text(json.dumps(data))
    offer = repo_offer(TINY_REPO, [], drafts)
    older = offer.state(offer.variants.find("4.0bpw"))
    assert not older.installed and older.text == "older version installed"


def test_a_broken_config_still_lists_the_install_folder(fake_hub, endpoint, tmp_path):  # noqa: F811
    drafts = tmp_path / "drafts"
    install(TINY_REPO, "4.0bpw", drafts)
    broken = tmp_path / "config.yml"
    broken.write_text("model: [unclosed\n")
    scan = scan_for_install(str(broken), str(drafts))
    assert scan.errors and "config.yml" in scan.errors[0]
    assert scan.dirs == (drafts,)
    (entry,) = scan.entries
    assert entry.source.repo_id == TINY_REPO and entry.source.revision == "4.0bpw"
    assert scan_for_install(None, None).entries == ()


def test_badges_against_the_target_model(fake_hub, endpoint, tmp_path):  # noqa: F811
    drafts = tmp_path / "drafts"
    tiny = install(TINY_REPO, "4.0bpw", drafts).path
    config = tmp_path / "config.yml"
    config.write_text(f"model:\n  model_dir: {MODELS}\n  model_name: Llama-2-7b-hf\n"
                      f"draft_model:\n  draft_model_dir: {drafts}\n")
    seen = []
    target = MODELS / "Llama-2-7b-hf"
    badges = target_badges(str(config), [tiny.as_posix(), target.as_posix(),
                                         (tmp_path / "nowhere").as_posix()], progress=seen.append)
    assert badges[tiny.as_posix()].label.startswith("Compatible")  # Llama 2's tokenizer
    assert badges[target.as_posix()] == Badge("target", "Target model", "config.yml's target model")
    assert badges[(tmp_path / "nowhere").as_posix()].verdict == "inconclusive"
    assert len(seen) == 2 and seen[-1] == badges  # after each check (the target is no check)
    assert target_badges(None, [tiny.as_posix()]) == {}  # no config.yml: nothing to check against


@pytest.fixture
def gguf_hub(memory_keyring, tmp_path, monkeypatch):  # noqa: F811
    data = write_tokenizer_gguf(FIXTURES / "models" / "Qwen2.5-0.5B-Instruct",
                                tmp_path / "q.gguf", columns=8).read_bytes()
    half = len(data) // 2
    files = {"Qwen2.5-0.5B-Instruct-Q8_0.gguf": data,
             "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf": data[:half],
             "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf": data[half:]}
    with FakeHub([FakeRepo(GGUF_REPO, {"main": files}, tags=("gguf",))]) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        yield hub


def test_a_gguf_is_installed_into_its_folder_and_is_llama_servers(gguf_hub, tmp_path):
    drafts = tmp_path / "drafts"
    offer = repo_offer(GGUF_REPO, [], drafts)
    q4 = next(c for c in offer.ggufs if c.quant == "Q4_K_M")
    assert offer.gguf_folder(q4) == "Qwen2.5-0.5B-Instruct-GGUF-Q4_K_M"
    assert not offer.gguf_state(q4).installed and offer.gguf_state(q4).text == ""

    result = install_gguf(GGUF_REPO, "Q4_K_M", drafts)
    assert result.path == drafts / offer.gguf_folder(q4)
    offer = repo_offer(GGUF_REPO, [], drafts)
    assert offer.gguf_state(q4).installed and offer.gguf_state(q4).text == "installed"
    q8 = next(c for c in offer.ggufs if c.quant == "Q8_0")
    assert not offer.gguf_state(q8).installed

    use = installed_use(result.path)
    first = result.path / "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf"
    assert not use.for_tabby and use.gguf == first
    assert use.llama_server_flags == ("-md", str(first), "--spec-type", "draft-simple")


def test_an_exl2_folder_is_tabbys(fake_hub, endpoint, tmp_path):  # noqa: F811
    use = installed_use(install(TINY_REPO, "4.0bpw", tmp_path).path)
    assert use.for_tabby and use.gguf is None and use.llama_server_flags == ()
