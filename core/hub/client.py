"""One connection to the Hub: which endpoint, which token, and the few calls SpecDeck makes.

Everything goes through huggingface_hub (HfApi, its shared HTTP session, its headers and
its error classes); this module adds the choice of endpoint (argument, HF_ENDPOINT, the
app's setting), offline mode read at call time, and error translation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from specdeck.core.files import MODEL_CONFIG
from specdeck.core.hub.errors import HubError, hub_errors, offline_error
from specdeck.core.units import format_bytes

from specdeck import __version__

if TYPE_CHECKING:
    from huggingface_hub import HfApi

DEFAULT_ENDPOINT = "https://huggingface.co"
ENDPOINT_ENV = "HF_ENDPOINT"
OFFLINE_ENVS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
MAX_REPO_ENTRIES = 100_000
"""The most entries of one repository's file listing SpecDeck reads (the largest model
repositories hold a few thousand files)."""
LIBRARY_NAME = "specdeck"
PREFLIGHT_TIMEOUT_S = 5.0
PROXY_ENVS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def resolve_endpoint(explicit: str | None = None) -> str:
    """The Hub to talk to: the argument, else HF_ENDPOINT, else SpecDeck's setting, else
    huggingface.co."""
    if explicit:
        return explicit.rstrip("/")
    if os.environ.get(ENDPOINT_ENV):
        return os.environ[ENDPOINT_ENV].rstrip("/")
    from specdeck.core import settings

    configured = settings.load().hub_endpoint
    return (configured or DEFAULT_ENDPOINT).rstrip("/")


def is_offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, now or when huggingface_hub loaded."""
    for name in OFFLINE_ENVS:
        if os.environ.get(name, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return True
    import huggingface_hub.constants

    return huggingface_hub.constants.is_offline_mode()


def ensure_online() -> None:
    if is_offline():
        raise offline_error()


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository at one commit, as the Hub's tree listing describes it."""

    path: str
    size: int
    git_oid: str
    sha256: str | None = None  # LFS files only

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def checksum_label(self) -> str:
        return "sha256" if self.is_lfs else "git blob id"

    @property
    def expected_digest(self) -> str:
        return self.sha256 if self.sha256 else self.git_oid


class HubClient:
    """The endpoint and token for a series of calls. The token is never stored elsewhere."""

    def __init__(self, endpoint: str | None = None, token: str | bool | None = None):
        from specdeck.core.hub.auth import resolve_token

        self.endpoint = resolve_endpoint(endpoint)
        resolved = resolve_token(token)
        self._token: str | None = resolved.value if resolved else None
        self.token_source = resolved.source if resolved else None
        self._api: HfApi | None = None

    def __repr__(self) -> str:
        return f"HubClient(endpoint={self.endpoint!r}, token_source={self.token_source!r})"

    @property
    def token_used(self) -> bool:
        return self._token is not None

    @property
    def api(self) -> HfApi:
        if self._api is None:
            from huggingface_hub import HfApi

            self._api = HfApi(
                endpoint=self.endpoint,
                token=self._token or False,
                library_name=LIBRARY_NAME,
                library_version=__version__,
            )
        return self._api

    def check_reachable(self, timeout: float = PREFLIGHT_TIMEOUT_S) -> None:
        """Fail fast, with the usual message, when the Hub's host does not resolve or take a
        connection: huggingface_hub retries those errors with back-off for about 20 s, too
        long for a search a user waits on. Skipped behind a proxy (the check cannot see
        through it)."""
        import socket
        from urllib.parse import urlsplit

        from specdeck.core.hub.errors import connection_error

        if any(os.environ.get(name) for name in PROXY_ENVS):
            return
        parts = urlsplit(self.endpoint)
        if not parts.hostname:
            return
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout).close()
        except OSError as exc:
            raise connection_error(self.endpoint, exc) from None

    def errors(self, repo_id: str | None = None, revision: str | None = None):
        """A context that turns Hub exceptions into SpecDeck's HubErrors."""
        return hub_errors(
            repo_id=repo_id, revision=revision, endpoint=self.endpoint, token_used=self.token_used
        )

    def hf_token(self) -> str | bool:
        """The ``token=`` argument for huggingface_hub functions: the token, or False."""
        return self._token or False

    def headers(self) -> dict[str, str]:
        """Request headers for file downloads: user agent and, if any, the token."""
        from huggingface_hub.utils import build_hf_headers

        return build_hf_headers(
            token=self._token or False, library_name=LIBRARY_NAME, library_version=__version__
        )

    def session(self) -> Any:
        """huggingface_hub's shared HTTP client (an httpx-style Client)."""
        from huggingface_hub.utils import get_session

        return get_session()

    def file_url(self, repo_id: str, revision: str, path: str) -> str:
        from huggingface_hub import hf_hub_url

        return hf_hub_url(repo_id, path, revision=revision, endpoint=self.endpoint)

    # the calls -----------------------------------------------------------------------
    def model_info(self, repo_id: str, revision: str | None = None) -> Any:
        ensure_online()
        with self.errors(repo_id, revision):
            return self.api.model_info(repo_id, revision=revision)

    def branches(self, repo_id: str) -> list[tuple[str, str]]:
        """(branch name, commit id) of every branch, in the Hub's order."""
        ensure_online()
        with self.errors(repo_id):
            refs = self.api.list_repo_refs(repo_id)
        return [(b.name, b.target_commit) for b in refs.branches]

    def list_files(self, repo_id: str, revision: str) -> list[RemoteFile]:
        """Every file of the repository at ``revision`` (recursive), with sizes and checksums."""
        from huggingface_hub.hf_api import RepoFile

        ensure_online()
        files = []
        with self.errors(repo_id, revision):
            for count, entry in enumerate(self.api.list_repo_tree(repo_id, revision=revision,
                                                                   recursive=True)):
                if count >= MAX_REPO_ENTRIES:  # a listing that pages without end
                    raise HubError(f"{repo_id} lists more than {MAX_REPO_ENTRIES} files and "
                                   "folders; SpecDeck reads no more of it.")
                if isinstance(entry, RepoFile):
                    files.append(
                        RemoteFile(
                            path=entry.path,
                            size=int(entry.size),
                            git_oid=entry.blob_id,
                            sha256=entry.lfs.sha256 if entry.lfs else None,
                        )
                    )
        return files

    def read_small_file(
        self, repo_id: str, revision: str, path: str, expected: RemoteFile | None = None,
        limit: int = MODEL_CONFIG,
    ) -> bytes:
        """The bytes of a small file (config.json); refuses anything over ``limit`` bytes (a
        config.json's cap, ``core.files.MODEL_CONFIG``, unless told) and, given the tree
        listing's ``expected`` entry, bytes that do not match its checksum."""
        from huggingface_hub.utils import hf_raise_for_status

        ensure_online()
        url = self.file_url(repo_id, revision, path)
        with self.errors(repo_id, revision):
            with self.session().stream(
                "GET", url, headers={**self.headers(), "Accept-Encoding": "identity"},
                follow_redirects=True, timeout=30.0,
            ) as response:
                if response.status_code >= 400:
                    response.read()
                    hf_raise_for_status(response)
                chunks, total = [], 0
                for chunk in response.iter_bytes():
                    total += len(chunk)
                    if total > limit:
                        raise HubError(
                            f"{path} in {repo_id} is larger than {format_bytes(limit)}, "
                            "too large for a configuration or tokenizer file."
                        )
                    chunks.append(chunk)
        data = b"".join(chunks)
        if expected is not None:
            from specdeck.core.hub.transfer import verify_bytes

            verify_bytes(data, expected)
        return data


# Stopping a thread's Hub requests -------------------------------------------------------------
class _Stopper:
    """One thread's Hub requests under :func:`stoppable`: their sockets, and the event that
    ends them."""

    def __init__(self, stop) -> None:
        import threading

        self.stop = stop
        self.sockets: list = []
        self.lock = threading.Lock()

    def trace(self, name: str, info: dict) -> None:
        """httpcore's trace extension: the socket of each connection, as soon as it exists
        (before any header arrives)."""
        if not name.endswith("connect_tcp.complete"):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        with self.lock:
            self.sockets.append(sock)
        if self.stop.is_set():
            _shut(sock)

    def shut_all(self) -> None:
        with self.lock:
            sockets = list(self.sockets)
        for sock in sockets:
            _shut(sock)


_STOPPERS: dict[int, _Stopper] = {}


def _shut(sock) -> None:
    """Shut a socket down: a thread blocked reading it wakes at once (closing would not)."""
    import contextlib
    import socket

    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _on_request(request) -> None:
    """The shared session's request hook: a request of a thread under :func:`stoppable` is
    refused once its stop is set, goes on a connection of its own (``Connection: close``:
    no pooled connection whose socket SpecDeck did not see), and reports that socket."""
    import threading

    from specdeck.core.errors import CancelledError

    stopper = _STOPPERS.get(threading.get_ident())
    if stopper is None:
        return
    if stopper.stop.is_set():
        raise CancelledError()
    request.headers["Connection"] = "close"
    request.extensions = {**request.extensions, "trace": stopper.trace}


def stoppable(stop):
    """A context in which every Hub request of the calling thread (through huggingface_hub's
    shared session: listings, searches, header reads) ends as soon as ``stop`` is set: its
    connection is shut, whether the Hub is trickling its headers or its body, and no new one
    starts (CancelledError). A search the tune leaves at its deadline stops, instead of
    reading on in the background."""
    import contextlib
    import threading

    from huggingface_hub.utils import get_session

    @contextlib.contextmanager
    def context():
        session = get_session()
        hooks = session.event_hooks
        if _on_request not in hooks["request"]:
            session.event_hooks = {**hooks, "request": [*hooks["request"], _on_request]}
        stopper = _Stopper(stop)
        me = threading.get_ident()
        _STOPPERS[me] = stopper
        try:
            with when_set(stop, stopper.shut_all):
                yield
        finally:
            _STOPPERS.pop(me, None)

    return context()


WATCH_POLL_S = 0.05
"""How often a watch looks at its event (a blocked socket read cannot look itself)."""


def when_set(event, action):
    """A context during which ``action`` runs (once, on a watching thread) as soon as
    ``event`` is set: what breaks a connection a blocked read is waiting on."""
    import contextlib
    import threading

    @contextlib.contextmanager
    def context():
        if event is None:
            yield
            return
        finished = threading.Event()

        def watch() -> None:
            while not finished.wait(WATCH_POLL_S):
                if event.is_set():
                    action()
                    return

        watcher = threading.Thread(target=watch, name="specdeck-watch", daemon=True)
        watcher.start()
        try:
            yield
        finally:
            finished.set()
            watcher.join()

    return context()
