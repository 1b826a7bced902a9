"""What can go wrong talking to the Hub, worded for the user, and how huggingface_hub's
exceptions map onto it.

huggingface_hub raises RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError, ...
with messages written for developers (URLs, request ids, advice about ``repo_type``). SpecDeck
turns each into a :class:`HubError` that says what happened in the user's terms and what to
do. Messages never include a token: they are built here from the repo id, the revision and
the status code only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.urls import redact_text, redact_url

TOKENS_PAGE = "https://huggingface.co/settings/tokens"


class HubError(SpecDeckError):
    """A problem reaching or using the Hugging Face Hub."""


class HubOfflineError(HubError):
    """HF_HUB_OFFLINE is set: SpecDeck does not contact the Hub."""


class HubConnectionError(HubError):
    """The Hub (or the mirror in HF_ENDPOINT) could not be reached."""


class RepoNotFoundError(HubError, NotFoundError):
    """No such repository, or it is private and the token cannot see it."""


class RevisionNotFoundError(HubError, NotFoundError):
    """The repository exists but has no such branch, tag or commit."""


class EntryNotFoundError(HubError, NotFoundError):
    """A file is missing from the repository at that revision."""


class HubAuthError(HubError):
    """The token was rejected, or the repository needs one and none was given."""


class HubAccessError(HubError):
    """The token is valid but may not read this repository (gated or no permission)."""


class RateLimitedError(HubError):
    """The Hub asked SpecDeck to slow down (HTTP 429)."""

    def __init__(self, what: str, fix: str | None = None, retry_after: float | None = None):
        super().__init__(what, fix)
        self.retry_after = retry_after


class HubServerError(HubError):
    """The Hub answered with a server error (5xx) or something unexpected."""


class IntegrityError(HubError):
    """A downloaded file does not match the size or checksum the Hub published."""


class UnsafeRepoError(HubError, InvalidInputError):
    """The repository holds file names that would land outside the destination folder."""


class InstallConflictError(HubError):
    """The destination already holds a folder of that name that SpecDeck will not overwrite."""


class InstallBusyError(HubError):
    """Another SpecDeck process is installing the same variant into the same folder."""


class InsufficientSpaceError(HubError):
    """The destination's disk has less free space than the download needs."""


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _header(exc: BaseException, name: str) -> str | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return headers.get(name) if headers is not None else None


def _retry_after(exc: BaseException) -> float | None:
    """Seconds the Hub asked us to wait, from Retry-After or the RateLimit header."""
    from huggingface_hub.utils import parse_ratelimit_headers

    value = _header(exc, "Retry-After")
    if value and value.strip().isdigit():
        return float(value)
    response = getattr(exc, "response", None)
    if response is not None:
        info = parse_ratelimit_headers(response.headers)
        if info is not None and info.remaining == 0:
            return float(info.reset_in_seconds)
    return None


def is_transport_error(exc: BaseException) -> bool:
    # httpx (huggingface_hub 1.x) and httpx2 (2.x) share these class names; matching on the
    # module avoids importing either one just to classify an exception.
    module = type(exc).__module__.split(".")[0]
    return module in ("httpx", "httpx2", "httpcore") and any(
        cls.__name__ == "TransportError" for cls in type(exc).__mro__
    )


def translate(
    exc: BaseException,
    *,
    repo_id: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    token_used: bool = False,
) -> BaseException:
    """The SpecDeck error for an exception raised while talking to the Hub.

    Returns ``exc`` itself when it is not a Hub or network problem (a bug stays a bug).
    """
    from huggingface_hub import errors as hf

    if isinstance(exc, SpecDeckError):
        return exc
    where = redact_url(endpoint) if endpoint else "the Hugging Face Hub"
    repo = repo_id or "the repository"
    login_fix = (
        f"If it is private or gated, sign in: set HF_TOKEN, run `hf auth login`, or enter a "
        f"token in SpecDeck (create one at {TOKENS_PAGE})."
    )
    if isinstance(exc, hf.OfflineModeIsEnabled):
        return offline_error()
    if isinstance(exc, hf.GatedRepoError):
        if _status(exc) == 401 or not token_used:
            return HubAuthError(
                f"{repo} is a gated repository: downloading it needs a Hugging Face token.",
                f"Accept its terms on its Hub page while signed in, then give SpecDeck a token "
                f"from that account ({TOKENS_PAGE}).",
            )
        return HubAccessError(
            f"Your token may not download {repo}: it is gated and this account has not been "
            "granted access yet.",
            "Open the repository's page on the Hub, accept its terms (some need the author's "
            "approval), then try again.",
        )
    if isinstance(exc, hf.RevisionNotFoundError):
        return RevisionNotFoundError(
            f"{repo} has no branch, tag or commit named '{revision}'.",
            "Pick one of its branches (`specdeck variants REPO` lists them).",
        )
    if isinstance(exc, hf.LocalEntryNotFoundError):
        # hf_hub_download's "cannot reach the Hub and no local copy": the cause says why.
        cause = exc.__cause__ or exc.__context__
        if cause is not None and cause is not exc:
            translated = translate(cause, repo_id=repo_id, revision=revision,
                                   endpoint=endpoint, token_used=token_used)
            if translated is not cause:
                return translated
        return connection_error(endpoint, exc)
    if isinstance(exc, hf.DisabledRepoError):
        return HubAccessError(f"{repo} has been disabled on {where}; its files cannot be downloaded.")
    if isinstance(exc, hf.RemoteEntryNotFoundError):
        return EntryNotFoundError(
            f"A file is missing from {repo} at '{revision or 'main'}'.",
            "The repository may have changed while SpecDeck was reading it; try again.",
        )
    if isinstance(exc, hf.RepositoryNotFoundError):
        if token_used:
            return RepoNotFoundError(
                f"{repo} was not found on {where}, or your token cannot see it.",
                "Check the name (owner/name, as on the Hub page); for a private repository, "
                "use a token from an account that may read it.",
            )
        return RepoNotFoundError(f"{repo} was not found on {where}.", f"Check the name. {login_fix}")
    if isinstance(exc, hf.HfHubHTTPError):
        status = _status(exc)
        if status == 401:
            return HubAuthError(
                "The Hub rejected your token: it is invalid, expired or revoked.",
                f"Create a new token at {TOKENS_PAGE} and set it again (HF_TOKEN, "
                "`hf auth login` or SpecDeck's token field).",
            )
        if status == 403:
            return HubAccessError(
                f"Your token is not allowed to read {repo}.",
                "Use a token with read access (a fine-grained token needs read access to "
                "this repository or to public gated repositories).",
            )
        if status == 429:
            wait = _retry_after(exc)
            when = f"in about {wait:.0f} s" if wait else "in a few minutes"
            return RateLimitedError(
                f"{where} is rate-limiting this computer (HTTP 429).",
                f"Wait and try again {when}; signing in with a token raises the limits.",
                retry_after=wait,
            )
        if status is not None and status >= 500:
            return HubServerError(
                f"{where} answered with a server error (HTTP {status}).",
                "The Hub may be having trouble; try again later.",
            )
        return HubServerError(f"{where} refused the request (HTTP {status}).")
    if is_transport_error(exc):
        return connection_error(endpoint, exc)
    return exc


def connection_error(endpoint: str | None, exc: BaseException) -> HubConnectionError:
    reason = redact_text(str(exc).strip()) or type(exc).__name__
    where = redact_url(endpoint) if endpoint else "the Hugging Face Hub"
    return HubConnectionError(
        f"Cannot reach {where}: {reason}.",
        "Check your network connection or proxy. If HF_ENDPOINT is set, check that it points "
        "at a working Hub mirror.",
    )


def offline_error() -> HubOfflineError:
    return HubOfflineError(
        "HF_HUB_OFFLINE is set, so SpecDeck does not contact the Hugging Face Hub.",
        "Unset HF_HUB_OFFLINE to search and install models; installed models keep working.",
    )


@contextlib.contextmanager
def hub_errors(
    *,
    repo_id: str | None = None,
    revision: str | None = None,
    endpoint: str | None = None,
    token_used: bool = False,
) -> Iterator[None]:
    """Translate Hub and network exceptions raised inside the block into HubErrors."""
    try:
        yield
    except Exception as exc:
        translated = translate(
            exc, repo_id=repo_id, revision=revision, endpoint=endpoint, token_used=token_used
        )
        if translated is exc:
            raise
        raise translated from exc
