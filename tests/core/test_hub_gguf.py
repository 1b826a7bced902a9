"""GGUF drafts from the Hub: a repository's GGUF files listed with their quant types and
sizes (shards grouped), and one installed with the EXL2 installer's guarantees (every sha256
verified, atomic, resumable), against the fake Hub (tests/hubserver.py: a real HTTP server
speaking the Hub's API, LFS files served from a second origin)."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES
from gguf_writer import write_tokenizer_gguf
from hubserver import FakeHub, FakeRepo, memory_keyring  # noqa: F401 - a fixture

from specdeck.core.cli import main
from specdeck.core.errors import InvalidInputError
from specdeck.core.hub.errors import IntegrityError

REPO = "bartowski/Qwen2.5-0.5B-Instruct-GGUF"


@pytest.fixture(scope="module")
def gguf_bytes(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return write_tokenizer_gguf(FIXTURES / "models" / "Qwen2.5-0.5B-Instruct",
                                folder / "q.gguf").read_bytes()


@pytest.fixture(scope="module")
def wide_gguf_bytes(tmp_path_factory):
    """The same header (5.9 MB: 151,665 tokens and as many merges) before 19.4 MB of tensor
    data, as a real file has far more weights than header."""
    folder = tmp_path_factory.mktemp("gguf-wide")
    return write_tokenizer_gguf(FIXTURES / "models" / "Qwen2.5-0.5B-Instruct",
                                folder / "q.gguf", columns=64).read_bytes()


@pytest.fixture
def hub(memory_keyring, gguf_bytes, wide_gguf_bytes):  # noqa: F811 - the fixture above
    half = len(gguf_bytes) // 2
    files = {
        "README.md": b"# Qwen2.5-0.5B-Instruct GGUF\n",
        "Qwen2.5-0.5B-Instruct-Q8_0.gguf": gguf_bytes,
        "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf": gguf_bytes[:half],
        "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf": gguf_bytes[half:],
        "Qwen2.5-0.5B-Instruct-IQ4_XS.gguf": gguf_bytes[: half // 2],
        "mmproj-Qwen2.5-0.5B-Instruct-f16.gguf": gguf_bytes[: half // 4],
        "Qwen2.5-0.5B-Instruct-BF16.gguf": wide_gguf_bytes,
    }
    with FakeHub([FakeRepo(REPO, {"main": files}, tags=("gguf",))]) as fake:
        yield fake


def test_variants_lists_the_gguf_files_by_quant(hub, capsys):
    assert main(["variants", REPO, "--endpoint", hub.url, "--json"]) == 0
    listed = {c["quant"] or c["name"]: c for c in json.loads(capsys.readouterr().out)["gguf"]}
    assert set(listed) == {"Q8_0", "Q4_K_M", "IQ4_XS", "F16", "BF16"}
    assert listed["Q4_K_M"]["files"] == ["Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf",
                                         "Qwen2.5-0.5B-Instruct-Q4_K_M-00002-of-00002.gguf"]
    assert listed["F16"]["projector"] is True and listed["Q8_0"]["projector"] is False
    assert main(["variants", REPO, "--endpoint", hub.url]) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out and f"specdeck install {REPO} --gguf QUANT" in out


def test_install_one_gguf_verified_and_checkable(hub, tmp_path, capsys, gguf_bytes):
    assert main(["install", REPO, "--gguf", "q8_0", "--dest", str(tmp_path),
                 "--endpoint", hub.url]) == 0
    out = capsys.readouterr().out
    folder = tmp_path / "Qwen2.5-0.5B-Instruct-GGUF-Q8_0"
    installed = folder / "Qwen2.5-0.5B-Instruct-Q8_0.gguf"
    assert installed.read_bytes() == gguf_bytes
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        installed.name]
    assert f"-md {installed}" in out
    assert hub.files_downloaded() == {"Qwen2.5-0.5B-Instruct-Q8_0.gguf"}
    # The installed draft is checked from its header like any GGUF.
    assert main(["check", str(installed), str(FIXTURES / "models" / "Qwen2.5-0.5B-Instruct"),
                 "--json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    assert next(r for r in report["rules"] if r["key"] == "token_text")["status"] == "pass"
    # Installing again is a no-op.
    assert main(["install", REPO, "--gguf", "Qwen2.5-0.5B-Instruct-Q8_0.gguf", "--dest",
                 str(tmp_path), "--endpoint", hub.url]) == 0
    assert "already installed" in capsys.readouterr().out


def test_split_gguf_installs_all_its_shards_and_survives_a_dropped_connection(hub, tmp_path,
                                                                             gguf_bytes):
    first = "Qwen2.5-0.5B-Instruct-Q4_K_M-00001-of-00002.gguf"
    hub.drop_connection(first, at=20_000)
    assert main(["install", REPO, "--gguf", "Q4_K_M", "--dest", str(tmp_path),
                 "--endpoint", hub.url]) == 0
    folder = tmp_path / "Qwen2.5-0.5B-Instruct-GGUF-Q4_K_M"
    shards = sorted(folder.glob("*.gguf"))
    assert [p.name for p in shards] == [first, first.replace("00001-of", "00002-of")]
    assert b"".join(p.read_bytes() for p in shards) == gguf_bytes


def test_a_corrupt_gguf_never_appears_installed(hub, tmp_path):
    hub.corrupt("Qwen2.5-0.5B-Instruct-IQ4_XS.gguf", at=1000, times=None)
    from specdeck.core.hub import install
    from specdeck.core.hub.gguf import plan_gguf_install

    plan, _ = plan_gguf_install(REPO, "IQ4_XS", tmp_path, endpoint=hub.url)
    with pytest.raises(IntegrityError):
        install(REPO, plan=plan, endpoint=hub.url)
    assert not (tmp_path / "Qwen2.5-0.5B-Instruct-GGUF-IQ4_XS").exists()


def test_unknown_or_ambiguous_picks_say_what_there_is(hub, tmp_path):
    from specdeck.core.hub.gguf import plan_gguf_install

    with pytest.raises(InvalidInputError,
                       match=r"has no GGUF 'Q2_K' \(it has: IQ4_XS, Q4_K_M, Q8_0, BF16\)"):
        plan_gguf_install(REPO, "Q2_K", tmp_path, endpoint=hub.url)


def test_check_reads_a_hub_ggufs_header_with_range_requests(hub, monkeypatch, capsys,
                                                            wide_gguf_bytes):
    """`check org/name:Q8_0 FOLDER`: only the header's bytes are fetched (range requests,
    from the CDN origin), and the verdict is the local file's."""
    from specdeck.core.compat import gguf_hub

    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setattr(gguf_hub, "FIRST_FETCH", 64 * 1024)  # make it grow a few times
    local = FIXTURES / "models" / "Qwen2.5-0.5B-Instruct"
    assert main(["check", f"{REPO}:BF16", str(local), "--json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    assert report["target"]["tokenizer_format"] == "GGUF tokenizer.ggml.*"
    assert report["target"]["vocab_size"] == 151665
    assert next(r for r in report["rules"] if r["key"] == "token_text")["status"] == "pass"
    gets = [r for r in hub.file_requests("GET") if (r.file or "").endswith("BF16.gguf")]
    assert len(gets) >= 2 and all((r.range or "").startswith("bytes=0-") for r in gets)
    assert any(r.origin == "cdn" for r in gets)  # LFS bytes come from the second origin
    fetched = max(int(r.range.split("-")[1]) + 1 for r in gets)
    assert fetched < len(wide_gguf_bytes) / 2  # the header, not the weights
