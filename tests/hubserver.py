"""A fake Hugging Face Hub for the tests: a real HTTP server on 127.0.0.1 serving real files.

It speaks the subset of the Hub's HTTP API that huggingface_hub 2.4 and SpecDeck use, with
the same paths, JSON shapes, headers and error codes (read from huggingface_hub's source):

    GET  /api/models?search=&author=&filter=&sort=&limit=&expand=   HfApi.list_models
    GET  /api/models/{repo}[/revision/{rev}]                          HfApi.model_info
    GET  /api/models/{repo}/refs                                      HfApi.list_repo_refs
    GET  /api/models/{repo}/tree/{rev}[/{path}]?recursive=&expand=    HfApi.list_repo_tree
                                                                      (paginated with Link)
    POST /api/models/{repo}/paths-info/{rev}                          HfApi.get_paths_info
    GET  /api/whoami-v2                                               HfApi.whoami
    HEAD /{repo}/resolve/{rev}/{path}   X-Repo-Commit, ETag / X-Linked-Etag, X-Linked-Size
    GET  /{repo}/resolve/{rev}/{path}   the bytes; Range requests answer 206 + Content-Range

Like the real Hub, LFS files (weights, tokenizer.model) are not served by the Hub itself:
/resolve answers 302 to a second origin (another port, the "CDN"), so the Authorization
header never follows them there. Errors carry the X-Error-Code / X-Error-Message headers
huggingface_hub turns into RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError...

Every file's metadata (size, git blob id, LFS sha256, pointer size, commit ids) is computed
from the bytes served, never written by hand. Faults can be switched on per test: drop the
connection at a byte offset, corrupt a byte, stall at an offset until released, throttle,
answer 429 or 5xx, or report a false size.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit

import pytest
from keyring.backend import KeyringBackend
from keyring.errors import PasswordDeleteError

# Suffixes the Hub's default .gitattributes sends to LFS.
LFS_SUFFIXES = (".safetensors", ".bin", ".model", ".pt", ".pth", ".gguf", ".msgpack", ".h5")
LFS_MIN_SIZE = 10 * 1024 * 1024
BODY_CHUNK = 64 * 1024
DATE = "2024-09-18T10:11:12.000Z"


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class FakeFile:
    path: str
    data: bytes = field(repr=False)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def is_lfs(self) -> bool:
        return self.path.endswith(LFS_SUFFIXES) or self.size >= LFS_MIN_SIZE

    @cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def pointer(self) -> bytes:
        return lfs_pointer(self.sha256, self.size)

    @cached_property
    def oid(self) -> str:
        """The git blob id: of the file itself, or of its LFS pointer."""
        return git_blob_id(self.pointer if self.is_lfs else self.data)

    @property
    def etag(self) -> str:
        return self.sha256 if self.is_lfs else self.oid


@dataclass
class FakeRepo:
    repo_id: str
    branches: dict[str, dict[str, bytes]]
    private: bool = False
    gated: str | bool = False  # False, "auto" or "manual", as the Hub reports it
    tags: tuple[str, ...] = ()
    downloads: int = 0
    likes: int = 0
    allowed_users: tuple[str, ...] = ()  # private: who may read; gated: who accepted the terms

    def __post_init__(self) -> None:
        # Repositories never change once built: compute every file's ids once.
        self._files = {
            branch: {path: FakeFile(path, data) for path, data in files.items()}
            for branch, files in self.branches.items()
        }
        self._commits = {}
        for branch, files in self._files.items():
            listing = "".join(f"{p}\0{f.oid}\n" for p, f in sorted(files.items()))
            self._commits[branch] = hashlib.sha1(f"{self.repo_id}\0{branch}\0{listing}".encode()).hexdigest()

    def files(self, branch: str) -> dict[str, FakeFile]:
        return self._files[branch]

    def commit(self, branch: str) -> str:
        return self._commits[branch]

    def resolve(self, revision: str) -> str | None:
        """The branch a revision (branch name or commit id) names, or None."""
        if revision in self.branches:
            return revision
        for branch in self.branches:
            if self.commit(branch) == revision:
                return branch
        return None


@dataclass
class RequestRecord:
    origin: str  # "hub" or "cdn"
    method: str
    path: str  # URL path, unquoted
    query: dict[str, list[str]]
    range: str | None
    authorized: bool  # an Authorization header was sent
    file: str | None = None  # repo file path, for /resolve and CDN requests


@dataclass
class Stall:
    """Holds a file's body at a byte offset until released (or 30 s pass)."""

    path: str
    at: int
    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    times: int = 1

    def release(self) -> None:
        self.released.set()


@dataclass
class _Drop:
    path: str
    at: int
    times: int


@dataclass
class _Corrupt:
    path: str
    at: int
    times: int | None  # None: every time


class FakeHub:
    """Two real HTTP servers (Hub API + "CDN") on 127.0.0.1 serving ``repos``."""

    def __init__(self, repos: list[FakeRepo], tokens: Mapping[str, str] | None = None):
        self.repos = {r.repo_id: r for r in repos}
        self.tokens = dict(tokens or {})  # token -> user name
        self.requests: list[RequestRecord] = []
        self.tree_page_size = 1000
        self.throttle_bps: float | None = None
        self._lock = threading.Lock()
        self._stalls: list[Stall] = []
        self._drops: list[_Drop] = []
        self._corrupts: list[_Corrupt] = []
        self._status_faults: list[list[Any]] = []  # [status, remaining, retry_after]
        self._size_overrides: dict[str, int] = {}
        self._stopping = threading.Event()
        self._servers: list[ThreadingHTTPServer] = []
        self._threads: list[threading.Thread] = []
        self.url = ""
        self.cdn_url = ""

    # lifecycle -----------------------------------------------------------------------
    def start(self) -> FakeHub:
        for origin in ("hub", "cdn"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self, origin))
            server.daemon_threads = True
            thread = threading.Thread(target=server.serve_forever, name=f"fake-{origin}", daemon=True)
            thread.start()
            self._servers.append(server)
            self._threads.append(thread)
        self.url = f"http://127.0.0.1:{self._servers[0].server_address[1]}"
        self.cdn_url = f"http://127.0.0.1:{self._servers[1].server_address[1]}"
        return self

    def stop(self) -> None:
        self._stopping.set()
        for stall in self._stalls:
            stall.release()
        for server in self._servers:
            server.shutdown()
            server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # faults --------------------------------------------------------------------------
    def stall(self, path: str, at: int, times: int = 1) -> Stall:
        stall = Stall(path, at, times=times)
        with self._lock:
            self._stalls.append(stall)
        return stall

    def drop_connection(self, path: str, at: int, times: int = 1) -> None:
        """Close the connection after sending bytes [.., at) of ``path``."""
        with self._lock:
            self._drops.append(_Drop(path, at, times))

    def corrupt(self, path: str, at: int, times: int | None = None) -> None:
        """Flip the bits of byte ``at`` of ``path`` when it is served."""
        with self._lock:
            self._corrupts.append(_Corrupt(path, at, times))

    def fail_next(self, status: int, count: int = 1, retry_after: int | None = None) -> None:
        """Answer the next ``count`` requests with ``status`` (429 carries rate-limit headers)."""
        with self._lock:
            self._status_faults.append([status, count, retry_after])

    def clear_faults(self) -> None:
        with self._lock:
            self._drops.clear()
            self._corrupts.clear()
            self._status_faults.clear()
        self._size_overrides.clear()
        for stall in self._stalls:
            stall.release()

    def report_size(self, path: str, size: int) -> None:
        """Make tree listings claim ``path`` has ``size`` bytes (the bytes are unchanged)."""
        self._size_overrides[path] = size

    # what was asked ------------------------------------------------------------------
    def record(self, rec: RequestRecord) -> None:
        with self._lock:
            self.requests.append(rec)

    def file_requests(self, method: str = "GET") -> list[RequestRecord]:
        with self._lock:
            return [r for r in self.requests if r.file is not None and r.method == method]

    def files_downloaded(self) -> set[str]:
        """Repo paths whose bytes were requested (GET on /resolve or the CDN)."""
        return {r.file for r in self.file_requests("GET") if r.file}

    # internals used by the handler -----------------------------------------------------
    def _take_status_fault(self) -> tuple[int, int | None] | None:
        with self._lock:
            for fault in self._status_faults:
                if fault[1] > 0:
                    fault[1] -= 1
                    return fault[0], fault[2]
        return None

    def _take(self, faults: list, path: str, start: int, end: int):
        """The first armed fault for ``path`` whose offset lies in [start, end)."""
        with self._lock:
            for fault in faults:
                if fault.path == path and start <= fault.at < end and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    return fault
        return None

    def _corruptions(self, path: str) -> list[int]:
        with self._lock:
            hits = []
            for fault in self._corrupts:
                if fault.path == path and (fault.times is None or fault.times > 0):
                    if fault.times is not None:
                        fault.times -= 1
                    hits.append(fault.at)
            return hits

    def _listed_size(self, f: FakeFile) -> int:
        return self._size_overrides.get(f.path, f.size)

    def find_blob(self, sha256: str) -> FakeFile | None:
        for repo in self.repos.values():
            for branch in repo.branches:
                for f in repo.files(branch).values():
                    if f.is_lfs and f.sha256 == sha256:
                        return f
        return None


class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def _handler_for(hub: FakeHub, origin: str) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        pass

    Handler.hub = hub
    Handler.origin = origin
    return Handler


_REPO = r"(?P<repo>[^/]+/[^/]+)"
_ROUTES = [
    ("GET", re.compile(r"^/api/models$"), "list_models"),
    ("GET", re.compile(r"^/api/whoami-v2$"), "whoami"),
    ("GET", re.compile(rf"^/api/models/{_REPO}/refs$"), "refs"),
    ("GET", re.compile(rf"^/api/models/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$"), "tree"),
    ("POST", re.compile(rf"^/api/models/{_REPO}/paths-info/(?P<rev>[^/]+)$"), "paths_info"),
    ("GET", re.compile(rf"^/api/models/{_REPO}/revision/(?P<rev>[^/]+)$"), "model_info"),
    ("GET", re.compile(rf"^/api/models/{_REPO}$"), "model_info"),
    ("GET", re.compile(rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
    ("HEAD", re.compile(rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # TCP_NODELAY, as real web servers set it (nginx's tcp_nodelay is on by default). Without
    # it the headers and a small body go out in two writes, Nagle holds the second until the
    # client's delayed ACK (40 ms on Linux), and every small response took 44 ms on 127.0.0.1.
    disable_nagle_algorithm = True
    hub: FakeHub
    origin: str

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - quiet test output
        pass

    # dispatch ------------------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        self._dispatch("GET")

    def do_HEAD(self) -> None:  # noqa: N802
        self._dispatch("HEAD")

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        split = urlsplit(self.path)
        # Match on the raw path: a file name may hold an escaped "/" that must not split.
        raw_path = split.path
        query = parse_qs(split.query)
        body = b""
        if method == "POST":
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        record = RequestRecord(
            self.origin, method, unquote(raw_path), query, self.headers.get("Range"),
            self.headers.get("Authorization") is not None,
        )
        self.hub.record(record)
        try:
            fault = self.hub._take_status_fault()
            if fault is not None:
                raise self._status_fault(*fault)
            if self.origin == "cdn":
                return self._cdn(method, raw_path, record)
            for route_method, pattern, name in _ROUTES:
                match = pattern.match(raw_path)
                if match and route_method == method:
                    params = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                    return getattr(self, f"_api_{name}")(method, query, body, record, **params)
            raise _HubError(404, None, f"Sorry, we can't find the page you are looking for: {raw_path}")
        except _HubError as err:
            self._send_error(err, method)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def _status_fault(self, status: int, retry_after: int | None) -> _HubError:
        headers = {}
        if status == 429:
            wait = 55 if retry_after is None else retry_after
            headers = {
                "RateLimit": f'"api";r=0;t={wait}',
                "RateLimit-Policy": '"fixed window";"api";q=500;w=300',
            }
            if retry_after is not None:
                headers["Retry-After"] = str(retry_after)
            return _HubError(429, None, "You have been rate-limited.", headers)
        return _HubError(status, None, f"Internal fault {status} injected by the test.", headers)

    # auth ----------------------------------------------------------------------------
    def _user(self) -> str | None:
        header = self.headers.get("Authorization") or ""
        if not header:
            return None
        token = header.removeprefix("Bearer ").strip()
        user = self.hub.tokens.get(token)
        if user is None:
            raise _HubError(401, None, "Invalid credentials in Authorization header")
        return user

    def _repo(self, repo_id: str, *, files: bool) -> FakeRepo:
        user = self._user()
        repo = self.hub.repos.get(repo_id)
        not_found = _HubError(404, "RepoNotFound", "Repository not found")
        if repo is None:
            raise not_found if user else _HubError(401, "RepoNotFound", "Invalid username or password.")
        if repo.private and user not in repo.allowed_users:
            raise not_found if user else _HubError(401, "RepoNotFound", "Invalid username or password.")
        if repo.gated and files and user not in repo.allowed_users:
            msg = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated to access it. Please log in."
            if user is None:
                raise _HubError(401, "GatedRepo", msg)
            raise _HubError(403, "GatedRepo", f"Access to model {repo_id} is restricted and you are not in the authorized list. Visit {self.hub.url}/{repo_id} to ask for access.")
        return repo

    def _branch(self, repo: FakeRepo, rev: str) -> str:
        branch = repo.resolve(rev)
        if branch is None:
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {rev}")
        return branch

    # API -----------------------------------------------------------------------------
    def _api_whoami(self, method, query, body, record):
        user = self._user()
        if user is None:
            raise _HubError(401, None, "Invalid credentials in Authorization header")
        self._send_json({"type": "user", "name": user, "fullname": user.title(), "orgs": [],
                         "auth": {"type": "access_token", "accessToken": {"role": "read"}}})

    def _model_json(self, repo: FakeRepo, branch: str, expand: list[str] | None = None) -> dict:
        full = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": repo.commit(branch),
            "lastModified": DATE,
            "createdAt": DATE,
            "private": repo.private,
            "gated": repo.gated,
            "disabled": False,
            "downloads": repo.downloads,
            "likes": repo.likes,
            "trendingScore": 0,
            "tags": list(repo.tags),
            "pipeline_tag": "text-generation",
            "library_name": "transformers" if "exl2" not in repo.tags else None,
        }
        if expand:
            return {"_id": full["_id"], "id": full["id"], **{k: full[k] for k in expand if k in full}}
        return full

    def _api_list_models(self, method, query, body, record):
        user = self._user()
        search = (query.get("search") or [""])[0].lower()
        author = (query.get("author") or [None])[0]
        tags = query.get("filter") or []
        sort = (query.get("sort") or ["downloads"])[0]
        limit = int((query.get("limit") or ["1000"])[0])
        expand = query.get("expand") or query.get("expand[]")
        hits = []
        for repo in self.hub.repos.values():
            if repo.private and user not in repo.allowed_users:
                continue
            if search and search not in repo.repo_id.lower():
                continue
            if author and repo.repo_id.split("/")[0] != author:
                continue
            if any(tag not in repo.tags for tag in tags):
                continue
            hits.append(repo)
        key = {"likes": lambda r: r.likes}.get(sort, lambda r: r.downloads)
        hits.sort(key=key, reverse=True)
        main = lambda r: "main" if "main" in r.branches else next(iter(r.branches))  # noqa: E731
        self._send_json([self._model_json(r, main(r), expand) for r in hits[:limit]])

    def _api_model_info(self, method, query, body, record, repo, rev="main"):
        fake = self._repo(repo, files=False)
        branch = self._branch(fake, rev)
        info = self._model_json(fake, branch)
        info["siblings"] = [{"rfilename": p} for p in sorted(fake.branches[branch])]
        self._send_json(info)

    def _api_refs(self, method, query, body, record, repo):
        fake = self._repo(repo, files=False)
        branches = [
            {"name": b, "ref": f"refs/heads/{b}", "targetCommit": fake.commit(b)} for b in fake.branches
        ]
        self._send_json({"branches": branches, "converts": [], "tags": [], "pullRequests": []})

    def _entry(self, f: FakeFile, expand: bool, commit: str) -> dict:
        entry: dict[str, Any] = {"type": "file", "oid": f.oid, "size": self.hub._listed_size(f), "path": f.path}
        if f.is_lfs:
            entry["lfs"] = {"oid": f.sha256, "size": self.hub._listed_size(f), "pointerSize": len(f.pointer)}
        if expand:
            entry["lastCommit"] = {"id": commit, "title": "Upload folder using huggingface_hub", "date": DATE}
        return entry

    def _folders(self, paths: list[str]) -> set[str]:
        folders = set()
        for p in paths:
            parts = p.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                folders.add("/".join(parts[:i]))
        return folders

    def _api_tree(self, method, query, body, record, repo, rev, path=""):
        fake = self._repo(repo, files=False)
        branch = self._branch(fake, rev)
        recursive = (query.get("recursive") or ["False"])[0].lower() == "true"
        expand = (query.get("expand") or ["False"])[0].lower() == "true"
        files = fake.files(branch)
        prefix = f"{path.strip('/')}/" if path else ""
        if path and not any(p.startswith(prefix) for p in files):
            raise _HubError(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"")
        commit = fake.commit(branch)
        entries: list[dict] = []
        for folder in sorted(self._folders(list(files))):
            if folder.startswith(prefix) and (recursive or "/" not in folder[len(prefix):]):
                entries.append({"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(),
                                "size": 0, "path": folder})
        for p, f in sorted(files.items()):
            if p.startswith(prefix) and (recursive or "/" not in p[len(prefix):]):
                entries.append(self._entry(f, expand, commit))
        page_size = min(self.hub.tree_page_size, 50) if expand else self.hub.tree_page_size
        cursor = int((query.get("cursor") or ["0"])[0])
        page = entries[cursor : cursor + page_size]
        headers = {}
        if cursor + page_size < len(entries):
            params = {"recursive": str(recursive), "expand": str(expand), "cursor": cursor + page_size}
            url = f"{self.hub.url}{urlsplit(self.path).path}?{urlencode(params)}"
            headers["Link"] = f'<{url}>; rel="next"'
        self._send_json(page, headers)

    def _api_paths_info(self, method, query, body, record, repo, rev):
        fake = self._repo(repo, files=False)
        branch = self._branch(fake, rev)
        form = parse_qs(body.decode())
        wanted = form.get("paths") or []
        expand = (form.get("expand") or ["False"])[0].lower() == "true"
        files = fake.files(branch)
        folders = self._folders(list(files))
        out = []
        for p in wanted:
            if p in files:
                out.append(self._entry(files[p], expand, fake.commit(branch)))
            elif p in folders:
                out.append({"type": "directory", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": 0, "path": p})
        self._send_json(out)

    def _api_resolve(self, method, query, body, record, repo, rev, path):
        fake = self._repo(repo, files=True)
        branch = self._branch(fake, rev)
        record.file = path
        files = fake.files(branch)
        if path not in files:
            raise _HubError(404, "EntryNotFound", f"{path} does not exist on \"{rev}\"",
                            {"X-Repo-Commit": fake.commit(branch)})
        f = files[path]
        common = {"X-Repo-Commit": fake.commit(branch), "Accept-Ranges": "bytes"}
        if f.is_lfs:
            location = f"{self.hub.cdn_url}/lfs/{f.sha256}?filename={quote(path.rsplit('/', 1)[-1])}"
            headers = {
                **common,
                "Location": location,
                "X-Linked-Size": str(f.size),
                "X-Linked-Etag": f'"{f.sha256}"',
                "ETag": f'"{f.oid}"',
                "Content-Length": "0",
            }
            self._send_headers(302, headers)
            return
        self._send_file(method, f, {**common, "ETag": f'"{f.oid}"'})

    def _cdn(self, method, raw_path, record):
        match = re.match(r"^/lfs/([0-9a-f]{64})$", raw_path)
        if not match or method not in ("GET", "HEAD"):
            raise _HubError(404, None, "Not found")
        f = self.hub.find_blob(match.group(1))
        if f is None:
            raise _HubError(404, None, "Not found")
        record.file = f.path
        self._send_file(method, f, {"ETag": f'"{f.sha256}"', "Accept-Ranges": "bytes"})

    # sending -------------------------------------------------------------------------
    def _send_headers(self, status: int, headers: Mapping[str, str]) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def _send_json(self, data: Any, headers: Mapping[str, str] | None = None) -> None:
        payload = json.dumps(data).encode()
        self._send_headers(200, {"Content-Type": "application/json; charset=utf-8",
                                 "Content-Length": str(len(payload)), **(headers or {})})
        self.wfile.write(payload)

    def _send_error(self, err: _HubError, method: str) -> None:
        payload = json.dumps({"error": err.message}).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", "Content-Length": str(len(payload)),
                   "X-Error-Message": err.message, **err.headers}
        if err.code:
            headers["X-Error-Code"] = err.code
        self._send_headers(err.status, headers)
        if method != "HEAD":
            self.wfile.write(payload)

    def _byte_range(self, size: int) -> tuple[int, int] | None:
        """(start, end exclusive) asked by the Range header; None for the whole file."""
        header = self.headers.get("Range")
        if not header:
            return None
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", header.strip())
        if not match:
            return None  # unsupported forms (several ranges, suffixes): ignore, like many servers
        start = int(match.group(1))
        end = int(match.group(2)) + 1 if match.group(2) else size
        if start >= size and size > 0:
            raise _HubError(416, None, "Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
        return start, min(end, size)

    def _send_file(self, method: str, f: FakeFile, headers: dict[str, str]) -> None:
        span = self._byte_range(f.size)
        start, end = span or (0, f.size)
        headers = {**headers, "Content-Length": str(end - start), "Content-Type": "application/octet-stream"}
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{f.size}"
        self._send_headers(206 if span is not None else 200, headers)
        if method == "HEAD":
            return
        data: bytes | memoryview = memoryview(f.data)[start:end]  # no copy of big files
        hits = [at for at in self.hub._corruptions(f.path) if start <= at < end]
        if hits:
            damaged = bytearray(data)
            for at in hits:
                damaged[at - start] ^= 0xFF
            data = bytes(damaged)
        self._stream(f.path, data, start)

    def _stream(self, path: str, data: bytes | memoryview, start: int) -> None:
        hub = self.hub
        drop = hub._take(hub._drops, path, start, start + len(data))
        stall = hub._take(hub._stalls, path, start, start + len(data))
        offset = 0
        while offset < len(data):
            if hub._stopping.is_set():
                break
            limit = len(data)
            if drop is not None:
                limit = min(limit, drop.at - start)
            if stall is not None and not stall.released.is_set():
                limit = min(limit, stall.at - start)
            if offset >= limit:
                if stall is not None and offset == stall.at - start and not stall.released.is_set():
                    self.wfile.flush()
                    stall.reached.set()
                    stall.released.wait(30)
                    stall = None
                    continue
                # The drop point: close the socket mid-body, as a flaky network would.
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            piece = data[offset : min(limit, offset + BODY_CHUNK)]
            self.wfile.write(piece)
            offset += len(piece)
            if hub.throttle_bps:
                time.sleep(len(piece) / hub.throttle_bps)


# ---------------------------------------------------------------------------------------
# Real-looking EXL2 repositories built from the real fixtures.

TOKENIZER_AND_CONFIG = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.json",
    "merges.txt",
    "added_tokens.json",
    "original/tokenizer.model",
)


def safetensors_bytes(tensors: Mapping[str, Any]) -> bytes:
    from safetensors.numpy import save

    return save(dict(tensors), metadata={"format": "pt"})


def exl2_weights(bits: float, head_bits: int, *, layers: int = 2, hidden: int = 256, seed: int = 0) -> dict:
    """Tensors named and typed like exllamav2's converter writes them, sized by ``bits``.

    Shapes are small (the tests move a few MB, not GB), but the proportions follow EXL2:
    packed int32 q_weight rows scale with the bit rate, scales are fp16, the embedding stays
    fp16 and the head is quantized at ``head_bits``.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    tensors: dict[str, Any] = {
        "model.embed_tokens.weight": rng.standard_normal((512, hidden)).astype(np.float16),
        "model.norm.weight": np.ones((hidden,), dtype=np.float16),
    }
    packed_rows = max(1, round(hidden * bits / 32))
    for i in range(layers):
        for proj in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            base = f"model.layers.{i}.{proj}"
            tensors[f"{base}.q_weight"] = rng.integers(-2**31, 2**31 - 1, (packed_rows, hidden), dtype=np.int32)
            tensors[f"{base}.q_scale"] = rng.integers(0, 2**31 - 1, (hidden // 8,), dtype=np.int32)
            tensors[f"{base}.q_scale_max"] = rng.random(hidden // 32).astype(np.float16)
            tensors[f"{base}.q_groups"] = np.array([int(bits), 0] * 4, dtype=np.int16)
            tensors[f"{base}.q_invperm"] = rng.permutation(hidden).astype(np.int16)
        tensors[f"model.layers.{i}.input_layernorm.weight"] = np.ones((hidden,), dtype=np.float16)
        tensors[f"model.layers.{i}.post_attention_layernorm.weight"] = np.ones((hidden,), dtype=np.float16)
    head_rows = max(1, round(hidden * head_bits / 32))
    tensors["lm_head.q_weight"] = rng.integers(-2**31, 2**31 - 1, (head_rows, 512), dtype=np.int32)
    return tensors


def exl2_branch(base: Path, bits: float, head_bits: int = 6, *, shards: int = 1, seed: int = 0,
                layers: int = 2, hidden: int = 256) -> dict[str, bytes]:
    """The files of one EXL2 bitrate branch: real config + tokenizer files of ``base``, real
    safetensors weights, and config.json's quantization_config as exllamav2 0.3.2 writes it."""
    files: dict[str, bytes] = {}
    for name in TOKENIZER_AND_CONFIG:
        if (base / name).is_file():
            files[name] = (base / name).read_bytes()
    config = json.loads(files["config.json"])
    config["quantization_config"] = {
        "quant_method": "exl2",
        "version": "0.3.2",
        "bits": bits,
        "head_bits": head_bits,
        "calibration": {"rows": 115, "length": 2048, "dataset": "(default)"},
    }
    files["config.json"] = (json.dumps(config, indent=2) + "\n").encode()
    tensors = exl2_weights(bits, head_bits, seed=seed, layers=layers, hidden=hidden)
    names = sorted(tensors)
    if shards == 1:
        files["output.safetensors"] = safetensors_bytes(tensors)
    else:
        per = -(-len(names) // shards)
        for k in range(shards):
            part = {n: tensors[n] for n in names[k * per : (k + 1) * per]}
            files[f"output-{k + 1:05d}-of-{shards:05d}.safetensors"] = safetensors_bytes(part)
    return files


def exl2_main_branch(repo_name: str, branches: list[str]) -> dict[str, bytes]:
    """What EXL2 repos keep on main: a README pointing at the branches, measurement.json."""
    readme = f"# {repo_name}\n\nEXL2 quants. Each bitrate lives on its own branch:\n\n" + "".join(
        f"- [{b}](../../tree/{b})\n" for b in branches
    )
    measurement = {"measurement": {f"model.layers.{i}.self_attn": [{"accuracy": 0.99, "total_bits": 1000 + i}]
                                   for i in range(2)}, "last_module_idx": 2}
    return {
        ".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n",
        "README.md": readme.encode(),
        "measurement.json": json.dumps(measurement).encode(),
    }


# ---------------------------------------------------------------------------------------
# EXL3 repositories, as exllamav3 1.6.5's converter writes them (conversion/compile.py
# compile_model, conversion/quant_config.py, modules/quant/exl3_lib/quantize.py): config.json
# with quantization_config = {quant_method: exl3, version, bits, head_bits, calibration,
# out_scales, codebook} and tie_word_embeddings turned false, quantization_config.json with
# every leaf module's stored tensors, and per linear layer trellis (int16, (in/16, out/16, 16*K)),
# suh and svh (fp16), the mul1 codebook marker (an int32 scalar), and Qwen2's q/k/v biases
# (fp16); the embedding and norms fp16, one model.safetensors.

EXL3_SMALL = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "intermediate_size": 512, "num_hidden_layers": 2, "vocab_size": 512}
"""Small dimensions for EXL3 test weights (real shapes of a tiny llama), so a folder's
files match its config.json exactly."""

EXL3_MUL1 = 0x83DCD12D
"""quantize.py codebook_mul1_mult: the value of every ``.mul1`` marker (1.6.5's default codebook)."""


def _exl3_linear(tensors: dict, key: str, features_in: int, features_out: int, k_bits: int, rng, *,
                 bias: bool = False) -> None:
    import numpy as np

    tensors[f"{key}.trellis"] = rng.integers(-2**15, 2**15 - 1, (features_in // 16, features_out // 16, int(16 * k_bits)),
                                             dtype=np.int16)
    tensors[f"{key}.suh"] = rng.standard_normal(features_in).astype(np.float16)
    tensors[f"{key}.svh"] = rng.standard_normal(features_out).astype(np.float16)
    tensors[f"{key}.mul1"] = np.array(EXL3_MUL1, dtype=np.uint32).view(np.int32)  # codebook_markers
    if bias:
        tensors[f"{key}.bias"] = rng.standard_normal(features_out).astype(np.float16)


def exl3_tensors(config: dict, bits: int, head_bits: int, *, mtp_layers: int = 0, seed: int = 0) -> dict:
    """Every tensor of a llama/qwen2-style EXL3 model at ``bits`` (all layers at one K)."""
    import numpy as np
    from specdeck.core.models import architecture_from_config

    arch = architecture_from_config(config)
    rng = np.random.default_rng(seed)
    h, q, kv, inter = arch.hidden_size, arch.num_heads * arch.head_dim, arch.kv_width, arch.intermediate_size
    qkv_bias = arch.model_type == "qwen2"  # exllamav3 architecture/qwen2.py: bias on Q, K and V
    tensors: dict = {"model.embed_tokens.weight": rng.standard_normal((arch.vocab_size, h)).astype(np.float16),
                     "model.norm.weight": np.ones(h, dtype=np.float16)}

    def block(prefix: str) -> None:
        for name, i, o in (("self_attn.q_proj", h, q), ("self_attn.k_proj", h, kv), ("self_attn.v_proj", h, kv),
                           ("self_attn.o_proj", q, h), ("mlp.gate_proj", h, inter), ("mlp.up_proj", h, inter),
                           ("mlp.down_proj", inter, h)):
            _exl3_linear(tensors, f"{prefix}.{name}", i, o, bits, rng,
                         bias=qkv_bias and name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"))
        tensors[f"{prefix}.input_layernorm.weight"] = np.ones(h, dtype=np.float16)
        tensors[f"{prefix}.post_attention_layernorm.weight"] = np.ones(h, dtype=np.float16)

    for layer in range(arch.num_layers):
        block(f"model.layers.{layer}")
    if head_bits == 16:  # --head_bits 16: the head stays an fp16 weight
        tensors["lm_head.weight"] = rng.standard_normal((arch.vocab_size, h)).astype(np.float16)
    else:
        _exl3_linear(tensors, "lm_head", h, arch.vocab_size, head_bits, rng)
    for layer in range(mtp_layers):
        block(f"mtp.layers.{layer}")
    if mtp_layers:  # architecture/qwen3_5_mtp.py: mtp.fc, its two input norms, mtp.norm
        _exl3_linear(tensors, "mtp.fc", 2 * h, h, bits, rng)
        for norm in ("mtp.pre_fc_norm_hidden", "mtp.pre_fc_norm_embedding", "mtp.norm"):
            tensors[f"{norm}.weight"] = np.ones(h, dtype=np.float16)
    return tensors


def exl3_config(base: Path, bits: float, head_bits: int, **overrides) -> dict:
    """``base``'s config.json as exllamav3 1.6.5's converter leaves it. The converter clones a
    tied model's lm_head from the embedding and quantizes it (convert_model.py "Cloned lm_head
    from model.embed_tokens"), so exl3_tensors writes an lm_head either way, and update_config
    (quant_config.py) then sets tie_word_embeddings to false."""
    config = json.loads((base / "config.json").read_text())
    config.update(overrides)
    if "tie_word_embeddings" in config:
        config["tie_word_embeddings"] = False
    config["quantization_config"] = {"quant_method": "exl3", "version": "1.6.5", "bits": bits,
                                     "head_bits": head_bits, "calibration": {"rows": 250, "cols": 2048},
                                     "out_scales": "auto", "codebook": "mul1"}
    return config


_SAFETENSORS_DTYPES = {"float16": "torch.float16", "int16": "torch.int16", "int32": "torch.int32"}


def exl3_quantization_config_json(config: dict, tensors: dict) -> dict:
    """quantization_config.json as quant_config.py create_quantization_config_json writes it:
    config.json's quantization_config plus, per leaf module, its ``stored_tensors`` (shape,
    storage bytes, dtype: SafetensorsCollection.list_tensors) and for EXL3 linears the format,
    the trellis' bits per weight and the codebook multiplier."""
    import numpy as np

    modules: dict = {}
    for name, array in tensors.items():
        module = name.rsplit(".", 1)[0]
        entry = modules.setdefault(module, {"stored_tensors": {}})
        entry["stored_tensors"][name] = {"shape": list(np.shape(array)), "n_bytes": int(np.asarray(array).nbytes),
                                         "dtype": _SAFETENSORS_DTYPES[str(np.asarray(array).dtype)]}
        if name.endswith(".trellis"):
            bpw = np.shape(array)[-1] / 16
            entry.update({"quant_format": "exl3", "bits_per_weight": int(bpw) if bpw.is_integer() else bpw,
                          "mul1_multiplier": EXL3_MUL1})
    return {**config["quantization_config"], "tensor_storage": modules}


def exl3_branch(base: Path, bits: int, head_bits: int = 6, *, small: bool = True, seed: int = 0) -> dict[str, bytes]:
    """One EXL3 branch: the real tokenizer files of ``base``, config.json with exllamav3's
    quantization_config, quantization_config.json, and real safetensors weights whose shapes
    match that config."""
    from specdeck.core.models import TOKENIZER_FILES

    files = {name: (base / name).read_bytes() for name in (*TOKENIZER_FILES, "generation_config.json")
             if (base / name).is_file()}
    config = exl3_config(base, bits, head_bits, **(EXL3_SMALL if small else {}))
    tensors = exl3_tensors(config, bits, head_bits, seed=seed)
    files["config.json"] = json.dumps(config, indent=4).encode()
    files["quantization_config.json"] = json.dumps(exl3_quantization_config_json(config, tensors), indent=4).encode()
    files["model.safetensors"] = safetensors_bytes(tensors)
    return files


TINY_REPO = "testorg/TinyLlama-1.1B-Chat-v1.0-exl2"
QWEN_REPO = "testorg/Qwen2.5-0.5B-Instruct-exl2"
SOLO_REPO = "soloquant/TinyLlama-1.1B-Chat-v1.0-4.0bpw-h6-exl2"
PLAIN_REPO = "testorg/TinyLlama-1.1B-Chat-v1.0"
GATED_REPO = "gatedorg/Llama-3.2-1B-exl2"
PRIVATE_REPO = "privateorg/secret-draft-exl2"
EVIL_REPO = "evil/escape-exl2"
CODE_REPO = "codeorg/custom-code-exl2"
GOOD_TOKEN = "hf_aliceTokenThatMustNeverBeLogged0123456789"
OTHER_TOKEN = "hf_bobTokenWithoutGrants0123456789abcdef"


def standard_repos(models: Path) -> list[FakeRepo]:
    """The repositories every Hub test sees (built from the real fixtures in ``models``)."""
    tiny = models / "TinyLlama-1.1B-Chat-v1.0"
    tiny_branches = {
        "4.0bpw": exl2_branch(tiny, 4.0, 6, seed=1),
        "6_5": exl2_branch(tiny, 6.5, 6, seed=2),
        "8.0bpw": exl2_branch(tiny, 8.0, 8, shards=2, seed=3),
    }
    qwen = models / "Qwen2.5-0.5B-Instruct"
    qwen_branches = {
        "4.0bpw": exl2_branch(qwen, 4.0, 6, seed=4),
        "6.0bpw": exl2_branch(qwen, 6.0, 6, seed=5),
        # Mislabeled on purpose: config.json (what exllamav2 reads) says 4.85.
        "5.0bpw": exl2_branch(qwen, 4.85, 6, seed=12),
    }
    evil_good = exl2_branch(tiny, 4.0, 6, seed=6, layers=1, hidden=64)
    code = exl2_branch(tiny, 4.0, 6, seed=7, layers=1, hidden=64)
    code_config = json.loads(code["config.json"])
    code_config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    code["config.json"] = json.dumps(code_config, indent=2).encode()
    code["modeling_custom.py"] = b"import os\nos.system('echo pwned')\n"
    code["pytorch_model.bin"] = b"\x80\x04pickle that would run code when loaded"
    plain = {name: data for name, data in exl2_branch(tiny, 4.0, 6, seed=8).items()}
    plain_config = json.loads(plain["config.json"])
    del plain_config["quantization_config"]
    plain["config.json"] = json.dumps(plain_config, indent=2).encode()
    plain["model.safetensors"] = plain.pop("output.safetensors")
    llama32 = models / "Llama-3.2-1B"
    return [
        FakeRepo(TINY_REPO, {"main": exl2_main_branch("TinyLlama-1.1B-Chat-v1.0-exl2", list(tiny_branches)),
                             **tiny_branches}, tags=("exl2", "llama", "text-generation"),
                 downloads=1200, likes=12),
        FakeRepo(QWEN_REPO, {"main": exl2_main_branch("Qwen2.5-0.5B-Instruct-exl2", list(qwen_branches)),
                             **qwen_branches}, tags=("exl2", "qwen2"), downloads=3400, likes=40),
        FakeRepo(SOLO_REPO, {"main": exl2_branch(tiny, 4.0, 6, seed=9)}, tags=("llama",), downloads=50),
        FakeRepo(PLAIN_REPO, {"main": plain}, tags=("llama", "safetensors"), downloads=90000, likes=900),
        FakeRepo(GATED_REPO, {"main": exl2_main_branch("Llama-3.2-1B-exl2", ["4.0bpw"]),
                              "4.0bpw": exl2_branch(llama32, 4.0, 6, seed=10)},
                 gated="manual", tags=("exl2", "llama"), allowed_users=("alice",), downloads=700),
        FakeRepo(PRIVATE_REPO, {"main": exl2_main_branch("secret-draft-exl2", ["4.0bpw"]),
                                "4.0bpw": exl2_branch(tiny, 4.0, 6, seed=11, layers=1, hidden=64)},
                 private=True, tags=("exl2",), allowed_users=("alice",)),
        FakeRepo(EVIL_REPO, {
            "dotdot": {**evil_good, "../escape.txt": b"outside"},
            "nested": {**evil_good, "sub/../../escape.txt": b"outside"},
            "absolute": {**evil_good, "/tmp/specdeck-escape.txt": b"outside"},
            "backslash": {**evil_good, "..\\escape.txt": b"outside"},
        }, tags=("exl2",)),
        FakeRepo(CODE_REPO, {"main": exl2_main_branch("custom-code-exl2", ["4.0bpw"]), "4.0bpw": code},
                 tags=("exl2",)),
    ]


_REPO_CACHE: dict[Path, list[FakeRepo]] = {}


def cached_standard_repos(models: Path) -> list[FakeRepo]:
    # The repositories are immutable: build their bytes once per test session.
    if models not in _REPO_CACHE:
        _REPO_CACHE[models] = standard_repos(models)
    return _REPO_CACHE[models]


class MemoryKeyring(KeyringBackend):
    """Stands in for the platform keyring (Secret Service, Keychain...), which this machine
    lacks: a real keyring backend, storing in memory."""

    priority = 1

    def __init__(self):
        super().__init__()
        self.store: dict[tuple[str, str], str] = {}

    def get_password(self, service, username):
        return self.store.get((service, username))

    def set_password(self, service, username, password):
        self.store[(service, username)] = password

    def delete_password(self, service, username):
        if self.store.pop((service, username), None) is None:
            raise PasswordDeleteError("not found")


@pytest.fixture
def memory_keyring():
    """Every Hub test runs against an empty in-memory keyring, never the user's own."""
    import keyring
    from specdeck.core.hub import auth

    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    auth.forget_token()
    yield backend
    auth.forget_token()
    keyring.set_keyring(previous)


@pytest.fixture
def fake_hub(memory_keyring) -> Iterator[FakeHub]:
    """A started FakeHub with the standard repositories; alice's token reads everything."""
    from conftest import MODELS

    hub = FakeHub(cached_standard_repos(MODELS), tokens={GOOD_TOKEN: "alice", OTHER_TOKEN: "bob"})
    with hub:
        yield hub


def tree_size(repo: FakeRepo, branch: str) -> int:
    return sum(len(data) for data in repo.branches[branch].values())
