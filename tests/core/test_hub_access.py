"""Tokens, gated and private repositories, offline mode, rate limits, unreachable Hubs.

A token must reach the Hub and nothing else: not the CDN, not a log line, not an error
message, not a file SpecDeck writes.
"""

from __future__ import annotations

import logging
import socket

import pytest
from hubserver import (  # noqa: F401 - fake_hub and memory_keyring are fixtures
    GATED_REPO,
    GOOD_TOKEN,
    OTHER_TOKEN,
    PRIVATE_REPO,
    TINY_REPO,
    fake_hub,
    memory_keyring,
)

from specdeck.core.hub import (
    HubAccessError,
    HubAuthError,
    HubConnectionError,
    HubOfflineError,
    RateLimitedError,
    RepoNotFoundError,
    TokenSource,
    forget_token,
    install,
    list_variants,
    resolve_token,
    save_token,
    whoami,
)


@pytest.fixture
def implicit_tokens(monkeypatch, tmp_path):
    """Allow HF_TOKEN and `hf auth login` tokens (conftest turns them off), with a
    login token file of our own instead of the user's."""
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.delenv("HF_OIDC_RESOURCE", raising=False)
    token_file = tmp_path / "hf-home" / "token"
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(token_file))
    return token_file


# which token -----------------------------------------------------------------------
def test_token_precedence(implicit_tokens, memory_keyring, monkeypatch):
    assert resolve_token() is None
    implicit_tokens.parent.mkdir()
    implicit_tokens.write_text("hf_from_login\n")
    assert (resolve_token().value, resolve_token().source) == ("hf_from_login", TokenSource.HF_LOGIN)
    assert save_token("hf_from_app") == TokenSource.KEYRING
    assert resolve_token().source == TokenSource.KEYRING
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert (resolve_token().value, resolve_token().source) == ("hf_from_env", TokenSource.ENVIRONMENT)
    assert resolve_token("hf_explicit").source == TokenSource.EXPLICIT
    assert resolve_token(False) is None
    monkeypatch.setenv("HF_HUB_DISABLE_IMPLICIT_TOKEN", "1")
    assert resolve_token().source == TokenSource.KEYRING  # only what was given to SpecDeck
    forget_token()
    assert resolve_token() is None
    assert memory_keyring.store == {}


def test_without_a_keyring_the_token_lives_for_the_session_only(monkeypatch, specdeck_home):
    import keyring
    from keyring.backends import fail

    monkeypatch.setattr(keyring, "get_keyring", lambda: fail.Keyring())
    keyring.set_keyring(fail.Keyring())
    assert save_token("  hf_session_only  ") == TokenSource.SESSION
    token = resolve_token()
    assert token.value == "hf_session_only" and token.source == TokenSource.SESSION
    assert "hf_session_only" not in repr(token) and "hf_session_only" not in str(token)
    forget_token()
    assert resolve_token() is None
    leaked = [p for p in specdeck_home.rglob("*") if p.is_file() and b"hf_session_only" in p.read_bytes()]
    assert leaked == []


def test_whoami_checks_a_token_against_the_hub(fake_hub):
    assert whoami(GOOD_TOKEN, fake_hub.url) == "alice"
    with pytest.raises(HubAuthError, match="rejected"):
        whoami("hf_wrong", fake_hub.url)


# gated and private -----------------------------------------------------------------
def test_gated_repo_needs_a_token_then_installs_without_leaking_it(fake_hub, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    with pytest.raises(HubAuthError) as info:
        install(GATED_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    assert "gated" in str(info.value) and "token" in str(info.value)

    result = install(GATED_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, token=GOOD_TOKEN)
    assert result.status == "installed"
    hub_files = [r for r in fake_hub.file_requests() if r.origin == "hub" and r.method == "GET"]
    cdn_files = [r for r in fake_hub.file_requests() if r.origin == "cdn"]
    assert cdn_files and all(not r.authorized for r in cdn_files), "the token never reaches the CDN"
    assert any(r.authorized for r in hub_files)
    assert GOOD_TOKEN not in caplog.text
    written = [p for p in tmp_path.rglob("*") if p.is_file() and GOOD_TOKEN.encode() in p.read_bytes()]
    assert written == []


def test_gated_repo_with_a_token_that_was_not_granted_access(fake_hub, tmp_path):
    with pytest.raises(HubAccessError) as info:
        install(GATED_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, token=OTHER_TOKEN)
    assert "accept its terms" in str(info.value)
    assert OTHER_TOKEN not in str(info.value)


def test_private_repo(fake_hub, tmp_path):
    with pytest.raises(RepoNotFoundError, match="sign in"):
        install(PRIVATE_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    with pytest.raises(RepoNotFoundError, match="your token cannot see it"):
        install(PRIVATE_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, token=OTHER_TOKEN)
    assert install(PRIVATE_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url, token=GOOD_TOKEN).status == "installed"


def test_an_invalid_token_is_reported_without_echoing_it(fake_hub, tmp_path):
    bad = "hf_thisTokenWasRevoked0000000000000"
    with pytest.raises(HubAuthError) as info:
        list_variants(TINY_REPO, endpoint=fake_hub.url, token=bad)
    assert "rejected" in str(info.value) and bad not in str(info.value)


def test_the_keyring_token_is_used(fake_hub, tmp_path):
    save_token(GOOD_TOKEN)
    assert install(GATED_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url).status == "installed"


# offline, rate limits, no network ----------------------------------------------------
def test_offline_mode_is_respected(fake_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubOfflineError, match="HF_HUB_OFFLINE"):
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=fake_hub.url)
    with pytest.raises(HubOfflineError):
        list_variants(TINY_REPO, endpoint=fake_hub.url)
    assert fake_hub.requests == []


def test_rate_limited(fake_hub, tmp_path):
    fake_hub.fail_next(429, count=5, retry_after=30)
    with pytest.raises(RateLimitedError, match="rate-limiting") as info:
        list_variants(TINY_REPO, endpoint=fake_hub.url)
    assert info.value.retry_after == 30
    assert "30 s" in str(info.value)


def test_unreachable_endpoint(tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(HubConnectionError, match="Cannot reach"):
        install(TINY_REPO, "4.0bpw", tmp_path, endpoint=f"http://127.0.0.1:{port}")


def test_hf_endpoint_is_respected(fake_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", fake_hub.url)
    result = install(TINY_REPO, "4.0bpw", tmp_path)
    assert result.status == "installed"
    assert fake_hub.requests


def test_app_setting_endpoint_is_used_when_hf_endpoint_is_unset(fake_hub, tmp_path, monkeypatch):
    from specdeck.core import settings

    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    settings.save(settings.Settings(hub_endpoint=fake_hub.url))
    assert [v.revision for v in list_variants(TINY_REPO).variants] == ["4.0bpw", "6_5", "8.0bpw"]
