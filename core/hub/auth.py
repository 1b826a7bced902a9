"""Which Hugging Face token SpecDeck sends, and where it keeps one entered in the app.

Order of precedence, first found wins:

1. a token passed explicitly (the CLI's ``--token-stdin``, a test);
2. ``HF_TOKEN`` (or the older ``HUGGING_FACE_HUB_TOKEN``) in the environment;
3. a token entered in SpecDeck: kept in the platform keyring (Secret Service, macOS
   Keychain, Windows Credential Locker) or, where no keyring exists, in memory for this
   session only;
4. the token saved by ``hf auth login`` (huggingface_hub's token file).

``HF_HUB_DISABLE_IMPLICIT_TOKEN=1`` turns off 2 and 4, as it does in huggingface_hub: then
only a token given to SpecDeck itself is sent.

A token never goes into settings.json, config.yml, logs or error messages: ``HubToken``'s
repr and str show where it came from, never its value.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from enum import Enum

from specdeck.core.errors import InvalidInputError

log = logging.getLogger(__name__)

KEYRING_SERVICE = "SpecDeck Hugging Face token"
KEYRING_USER = "huggingface.co"
TOKEN_ENVS = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
DISABLE_IMPLICIT_ENV = "HF_HUB_DISABLE_IMPLICIT_TOKEN"


class TokenSource(str, Enum):
    EXPLICIT = "given to this command"
    ENVIRONMENT = "the HF_TOKEN environment variable"
    KEYRING = "SpecDeck (system keyring)"
    SESSION = "SpecDeck (this session only: no system keyring)"
    HF_LOGIN = "`hf auth login`"


@dataclass(frozen=True)
class HubToken:
    value: str = field(repr=False)
    source: TokenSource

    def __str__(self) -> str:
        return f"Hugging Face token from {self.source.value}"


# A token entered in the app when no keyring exists; never written anywhere.
_session_lock = threading.Lock()
_session_token: list[str] = []


def _clean(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def _implicit_allowed() -> bool:
    return os.environ.get(DISABLE_IMPLICIT_ENV, "").strip().upper() not in ("1", "ON", "YES", "TRUE")


def _keyring_get() -> str | None:
    try:
        import keyring

        return _clean(keyring.get_password(KEYRING_SERVICE, KEYRING_USER))
    except Exception as exc:  # no backend, locked wallet, D-Bus down: all mean "no token here"
        log.debug("No keyring token (%s)", type(exc).__name__)
        return None


def _hf_login_token() -> str | None:
    # Called only once HF_TOKEN proved empty, so get_token() answers from the token file
    # `hf auth login` writes (or a CI / Colab secret, which is as deliberate).
    from huggingface_hub import get_token

    return _clean(get_token())


def app_token() -> HubToken | None:
    """The token entered in SpecDeck, if any (session first, then the keyring)."""
    with _session_lock:
        if _session_token:
            return HubToken(_session_token[0], TokenSource.SESSION)
    value = _keyring_get()
    return HubToken(value, TokenSource.KEYRING) if value else None


def resolve_token(explicit: str | bool | None = None) -> HubToken | None:
    """The token to send, or None for anonymous access. ``explicit=False`` forces anonymous."""
    if explicit is False:
        return None
    if isinstance(explicit, str):
        value = _clean(explicit)
        if value is None:
            raise InvalidInputError("The Hugging Face token is empty.")
        return HubToken(value, TokenSource.EXPLICIT)
    implicit = _implicit_allowed()
    if implicit:
        for name in TOKEN_ENVS:
            if value := _clean(os.environ.get(name)):
                return HubToken(value, TokenSource.ENVIRONMENT)
    if token := app_token():
        return token
    if implicit and (value := _hf_login_token()):
        return HubToken(value, TokenSource.HF_LOGIN)
    return None


def save_token(value: str) -> TokenSource:
    """Keep a token entered in the app: in the keyring when there is one, else for this session.

    Returns where it went so the caller can tell the user.
    """
    token = _clean(value)
    if token is None:
        raise InvalidInputError("The Hugging Face token is empty.", "Paste a token that starts with hf_.")
    if any(c.isspace() for c in token):
        raise InvalidInputError("A Hugging Face token has no spaces in it.", "Paste the token again.")
    with _session_lock:
        _session_token.clear()
    try:
        import keyring

        keyring.set_password(KEYRING_SERVICE, KEYRING_USER, token)
        return TokenSource.KEYRING
    except Exception as exc:
        log.info("No usable system keyring (%s); keeping the token for this session only", type(exc).__name__)
    with _session_lock:
        _session_token.append(token)
    return TokenSource.SESSION


def forget_token() -> None:
    """Remove the token entered in SpecDeck (keyring and session). Others are untouched."""
    with _session_lock:
        _session_token.clear()
    try:
        import keyring

        keyring.delete_password(KEYRING_SERVICE, KEYRING_USER)
    except Exception as exc:  # nothing stored, or no keyring: either way it is gone
        log.debug("Keyring delete: %s", type(exc).__name__)


def whoami(token: str, endpoint: str | None = None) -> str:
    """The account name a token belongs to; HubAuthError if the Hub rejects it."""
    from specdeck.core.hub.client import HubClient, ensure_online

    ensure_online()
    client = HubClient(endpoint, token)
    with client.errors():
        info = client.api.whoami(token=token, cache=False)
    return str(info.get("name") or "unknown account")
