"""Install one model from the Hub into a model folder, safely: an EXL2 variant (a branch) or,
planned by core.hub.gguf, one GGUF file with its shards; both with the same guarantees.

The promise to the user: a folder with the model's name appears only when every file is
complete and verified; until then everything lives in a hidden staging folder beside it
(same filesystem, so the final move is one atomic rename, and the library scan skips
dot-folders). In order:

1. plan: resolve the revision to a commit (everything is downloaded at that commit, so a
   branch that moves mid-install cannot mix two versions), list the files with their sizes
   and checksums, refuse file names that would escape the destination, leave out code
   (.py, ...) and pickled weights, name the folder "<repo name>-<bpw>bpw" (a GGUF:
   "<repo name>-<quant>", holding the GGUF file(s) only);
2. refuse to touch an existing folder of that name, unless it is this very variant
   installed by SpecDeck (then installing is a no-op); take a lock so two installs of the
   same variant cannot interleave; check free disk space;
3. download each file into the staging folder, resuming what an earlier attempt left
   (after a cancel, a dropped connection or a restart), verifying size and checksum;
4. write a marker (.specdeck-install.json: repo, revision, commit, files) and rename the
   staging folder's content into place.

Staging layout, all SpecDeck's own (safe to delete):

    <dest>/.<name>.specdeck-staging/state.json    what is being installed, what is verified
    <dest>/.<name>.specdeck-staging/parts/<checksum>.part   downloads in progress
    <dest>/.<name>.specdeck-staging/files/...      verified files, in the model's layout
    <dest>/.<name>.specdeck-staging/lock           held while an install runs
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from specdeck.core.atomic import atomic_write_text, fsync_dir  # the same durable rename
from specdeck.core.changed import MODEL, FileChanged
from specdeck.core.errors import CancelledError, InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.hub.client import HubClient, RemoteFile
from specdeck.core.hub.errors import (
    HubError,
    InstallBusyError,
    InstallConflictError,
    InsufficientSpaceError,
    IntegrityError,
    RevisionNotFoundError,
    UnsafeRepoError,
)
from specdeck.core.hub.locations import default_install_dir
from specdeck.core.hub.paths import folder_name_problem, path_problem, safe_join
from specdeck.core.hub.progress import InstallProgress, ProgressTracker
from specdeck.core.hub.spec import RepoSpec, parse_repo_spec
from specdeck.core.hub.transfer import RetryPolicy, download_file, file_digest
from specdeck.core.hub.variants import bits_from_branch, variant_folder_name
from specdeck.core.models import ModelInfo, quantization_from_config, read_model
from specdeck.core.units import MiB, format_bytes
from specdeck.core.userpath import expand_user

from specdeck import __version__

log = logging.getLogger(__name__)

MARKER_NAME = ".specdeck-install.json"
STAGING_SUFFIX = ".specdeck-staging"
LOCK_NAME = "lock"
STATE_VERSION = 1
# Headroom kept free on the destination disk beyond the download itself.
SPACE_MARGIN = 256 * MiB
# state.json (written and fsynced: two fsyncs) is saved after a verified file is moved into
# place once this many bytes were accepted or this long passed since the last save, and
# whenever an install stops early; a process killed in between forgets at most that much,
# which its resume downloads again (a file state.json does not list is never trusted).
# Saving after every small file was 12 of an install's 27 fsyncs on the hub benchmark.
STATE_SAVE_BYTES = 64 * MiB
STATE_SAVE_S = 1.0

# Never installed. Code: SpecDeck never runs code from a repository, and leaving it out
# means nothing downstream (trust_remote_code) can run it from the installed folder either.
CODE_SUFFIXES = (".py", ".pyc", ".pyo", ".pyd", ".so", ".dll", ".dylib", ".exe", ".sh",
                 ".bat", ".cmd", ".ps1", ".ipynb", ".js")
# Pickled weights run code when loaded; EXL2 models are .safetensors.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".joblib")
GIT_FILES = (".gitattributes", ".gitignore")
RESERVED_NAMES = (MARKER_NAME,)


@dataclass(frozen=True)
class SkippedFile:
    path: str
    size: int
    reason: str


@dataclass(frozen=True)
class InstallPlan:
    """What installing one variant will do, decided before any byte is written."""

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    dest: Path
    folder_name: str
    files: tuple[RemoteFile, ...]
    skipped: tuple[SkippedFile, ...]
    bits: float | None
    head_bits: int | None

    @property
    def target(self) -> Path:
        return self.dest / self.folder_name

    @property
    def staging(self) -> Path:
        return self.dest / f".{self.folder_name}{STAGING_SUFFIX}"

    @property
    def lock_path(self) -> Path:
        return self.staging / LOCK_NAME

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def spec(self) -> str:
        return f"{self.repo_id}@{self.revision}"


@dataclass(frozen=True)
class InstallMarker:
    """What SpecDeck wrote into a folder it installed: where it came from, what it holds."""

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    installed_at: str
    files: tuple[tuple[str, int, str], ...] = field(repr=False)  # (path, size, checksum)

    @property
    def spec(self) -> str:
        return f"{self.repo_id}@{self.revision}"


@dataclass(frozen=True)
class InstallResult:
    status: str  # "installed" or "already installed"
    path: Path
    repo_id: str
    revision: str
    commit: str
    files: int
    total_bytes: int
    downloaded_bytes: int  # by this call
    resumed_bytes: int  # found from an earlier, interrupted attempt
    skipped: tuple[SkippedFile, ...]
    model: ModelInfo | None = field(default=None, compare=False)

    @property
    def changed(self) -> FileChanged | None:
        """The model folder this install filled, for the app to announce (None: it was
        there already)."""
        return FileChanged(self.path, MODEL) if self.status == "installed" else None

    def to_json(self) -> dict[str, Any]:
        model = self.model
        return {
            "status": self.status,
            "path": str(self.path),
            "repo_id": self.repo_id,
            "revision": self.revision,
            "commit": self.commit,
            "files": self.files,
            "total_bytes": self.total_bytes,
            "downloaded_bytes": self.downloaded_bytes,
            "resumed_bytes": self.resumed_bytes,
            "skipped": [{"path": s.path, "size": s.size, "reason": s.reason} for s in self.skipped],
            "model": None if model is None else {
                "name": model.name,
                "model_type": model.arch.model_type,
                "parameters": model.parameters,
                "quantization": model.quant.label,
                "bits": model.quant.bits,
                "head_bits": model.quant.head_bits,
                "vocab_size": model.arch.vocab_size,
                "context_length": model.context_length,
                "files_bytes": model.files_bytes,
            },
        }


@dataclass(frozen=True)
class PartialInstall:
    """An install that stopped before the end; installing the same variant resumes it."""

    folder_name: str
    repo_id: str
    revision: str
    commit: str
    endpoint: str
    staging: Path
    bytes_done: int
    bytes_total: int
    updated_at: str
    gguf: str | None = None
    """A GGUF install: the file (its first shard) it installs; None for an EXL2 branch."""

    @property
    def spec(self) -> str:
        return f"{self.repo_id}@{self.revision}"

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 0.0


# ---------------------------------------------------------------------------------------
# planning


def _skip_reason(path: str) -> str | None:
    name = path.rsplit("/", 1)[-1].lower()
    if name in GIT_FILES:
        return "git metadata"
    if name.endswith(CODE_SUFFIXES):
        return "code: SpecDeck never installs or runs code from a repository"
    if name.endswith(PICKLE_SUFFIXES):
        return "pickle weights, which can run code when loaded (EXL2 uses .safetensors)"
    return None


def select_files(files: list[RemoteFile], spec: str) -> tuple[list[RemoteFile], list[SkippedFile]]:
    """Split ``files`` into what to install and what to leave out; UnsafeRepoError if any
    name could escape the destination (the whole repository is refused)."""
    unsafe = [(f.path, problem) for f in files if (problem := path_problem(f.path))]
    reserved = [(f.path, "a name SpecDeck reserves for its install marker")
                for f in files if f.path.rsplit("/", 1)[-1] in RESERVED_NAMES]
    if unsafe or reserved:
        listed = "; ".join(f"{p!r} ({why})" for p, why in (unsafe + reserved)[:5])
        raise UnsafeRepoError(
            f"{spec} holds file names that could write outside the destination folder: {listed}.",
            "SpecDeck refuses to install this repository. Report it to its owner or to the Hub.",
        )
    keep, skipped = [], []
    for f in files:
        reason = _skip_reason(f.path)
        if reason:
            skipped.append(SkippedFile(f.path, f.size, reason))
        else:
            keep.append(f)
    return keep, skipped


def _revision_missing(client: HubClient, spec: RepoSpec) -> RevisionNotFoundError:
    with contextlib.suppress(SpecDeckError):
        names = [name for name, _ in client.branches(spec.repo_id)]
        return RevisionNotFoundError(
            f"{spec.repo_id} has no branch, tag or commit named '{spec.revision}'.",
            f"Its branches: {', '.join(names)}.",
        )
    return RevisionNotFoundError(f"{spec.repo_id} has no branch, tag or commit named '{spec.revision}'.")


def _no_model_error(client: HubClient, spec: RepoSpec, revision: str, files: list[RemoteFile], what: str) -> HubError:
    held = ", ".join(sorted(f.path for f in files)[:5]) or "no files"
    fix = "Pick a branch that holds config.json and .safetensors weights."
    with contextlib.suppress(SpecDeckError):
        others = [name for name, _ in client.branches(spec.repo_id) if name != revision]
        if others:
            fix = (
                "EXL2 repositories keep each bitrate on its own branch: install one of "
                f"{', '.join(others)} (for example {spec.repo_id}@{others[0]})."
            )
    return HubError(f"{spec.repo_id}@{revision} holds no installable model ({what}; it has {held}).", fix)


def _read_quantization(client: HubClient, repo_id: str, commit: str, listed: RemoteFile) -> tuple[float | None, int | None]:
    raw = client.read_small_file(repo_id, commit, "config.json", expected=listed)
    try:
        config = json.loads(raw)
    except ValueError as exc:
        raise HubError(f"config.json of {repo_id} is not valid JSON ({exc}).") from exc
    if not isinstance(config, dict):
        raise HubError(f"config.json of {repo_id} does not hold a JSON object.")
    quant = quantization_from_config(config)
    return (quant.bits, quant.head_bits) if quant.method == "exl2" else (None, None)


def resolve_destination(dest: str | Path | None) -> Path:
    if dest is not None:
        return expand_user(dest).absolute()
    default = default_install_dir()
    if default is None:
        raise InvalidInputError(
            "No destination folder: no TabbyAPI config.yml is open to take draft_model_dir from.",
            "Open your config.yml in SpecDeck, or pass --dest FOLDER.",
        )
    return expand_user(default).absolute()


def plan_install(
    repo: str,
    revision: str | None = None,
    dest: str | Path | None = None,
    *,
    name: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    client: HubClient | None = None,
) -> InstallPlan:
    """Decide what installing ``repo`` at ``revision`` into ``dest`` would do (network reads
    only; nothing is written). ``dest`` defaults to config.yml's draft_model_dir."""
    spec = parse_repo_spec(repo, revision)
    destination = resolve_destination(dest)
    if name and (problem := folder_name_problem(name)):  # "" means the default name, as below
        # Before any network call: a bad name is the user's to fix, whatever the Hub says.
        raise InvalidInputError(f"'{name}' cannot be a model folder name: {problem}.",
                                "Pick a plain folder name (letters, digits, '-', '_', '.').")
    client = client or HubClient(endpoint, token)
    try:
        info = client.model_info(spec.repo_id, revision=spec.revision)
    except RevisionNotFoundError:
        raise _revision_missing(client, spec) from None
    commit = str(info.sha)
    label = spec.revision or "main"
    all_files = client.list_files(spec.repo_id, commit)
    keep, skipped = select_files(all_files, f"{spec.repo_id}@{label}")
    paths = {f.path for f in keep}
    if "config.json" not in paths:
        raise _no_model_error(client, spec, label, all_files, "no config.json")
    if not any(p.endswith(".safetensors") for p in paths):
        raise _no_model_error(client, spec, label, all_files, "no .safetensors weights")
    config_entry = next(f for f in keep if f.path == "config.json")
    bits, head_bits = _read_quantization(client, spec.repo_id, commit, config_entry)
    named = bits_from_branch(label)
    if bits is None and named is not None:
        bits, head_bits = named
    folder = name or variant_folder_name(spec.name, label, bits, head_bits if named and named[1] else None)
    if problem := folder_name_problem(folder):
        raise InvalidInputError(f"'{folder}' cannot be a model folder name: {problem}.")
    return InstallPlan(
        repo_id=spec.repo_id,
        revision=label,
        commit=commit,
        endpoint=client.endpoint,
        dest=destination,
        folder_name=folder,
        files=tuple(sorted(keep, key=lambda f: f.path)),
        skipped=tuple(skipped),
        bits=bits,
        head_bits=head_bits,
    )


# ---------------------------------------------------------------------------------------
# markers, locks, space


def _public_endpoint(endpoint: str) -> str:
    """The endpoint without credentials or query (a mirror URL may embed a password)."""
    parts = urlsplit(endpoint)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}{parts.path}".rstrip("/")


def read_marker(folder: Path) -> InstallMarker | None:
    """The install marker in ``folder``, or None if SpecDeck did not install it (or what is
    there is no marker it wrote: a FIFO is not waited on, a huge file not read)."""
    from specdeck.core.files import read_bounded

    try:
        data = json.loads(read_bounded(folder / MARKER_NAME, "install marker"))
        return InstallMarker(
            repo_id=str(data["repo_id"]),
            revision=str(data["revision"]),
            commit=str(data["commit"]),
            endpoint=str(data.get("endpoint", "")),
            installed_at=str(data.get("installed_at", "")),
            files=tuple((str(f["path"]), int(f["size"]), str(f["checksum"])) for f in data.get("files", [])),
        )
    except (SpecDeckError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _write_marker(folder: Path, plan: InstallPlan) -> None:
    marker = {
        "repo_id": plan.repo_id,
        "revision": plan.revision,
        "commit": plan.commit,
        "endpoint": _public_endpoint(plan.endpoint),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "installed_by": f"SpecDeck {__version__}",
        "files": [{"path": f.path, "size": f.size, "checksum": f.expected_digest} for f in plan.files],
        "skipped": [{"path": s.path, "reason": s.reason} for s in plan.skipped],
    }
    atomic_write_text(folder / MARKER_NAME, json.dumps(marker, indent=2) + "\n")


def free_folder_name(dest: Path, name: str) -> str:
    """``name`` or the first "<name>-2", "<name>-3", ... that does not exist in ``dest``."""
    candidate, n = name, 1
    while (dest / candidate).exists() or (dest / f".{candidate}{STAGING_SUFFIX}").exists():
        n += 1
        candidate = f"{name}-{n}"
    return candidate


@contextlib.contextmanager
def _staging_lock(staging: Path, busy: InstallBusyError) -> Iterator[None]:
    """Hold the lock file inside ``staging`` (created if needed); ``busy`` if another process
    or thread holds it. The OS drops the lock when a process dies, so a crash never leaves
    a stale lock behind. A staging folder left with nothing but its lock is removed."""
    from filelock import FileLock, Timeout

    staging.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(staging / LOCK_NAME), timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise busy from None
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            lock.release()
        with contextlib.suppress(OSError):
            if staging.is_dir() and {p.name for p in staging.iterdir()} <= {LOCK_NAME}:
                shutil.rmtree(staging)


def _install_lock(plan: InstallPlan) -> contextlib.AbstractContextManager[None]:
    return _staging_lock(
        plan.staging,
        InstallBusyError(
            f"{plan.spec} is being installed into {plan.dest} by another SpecDeck window or command.",
            "Wait for it to finish (or cancel it there), then try again.",
        ),
    )


def _check_space(dest: Path, needed: int) -> None:
    free = shutil.disk_usage(dest).free
    if needed + SPACE_MARGIN > free:
        raise InsufficientSpaceError(
            f"Not enough free space in {dest}: the download needs {format_bytes(needed)} more "
            f"(plus {format_bytes(SPACE_MARGIN)} headroom) and {format_bytes(free)} is free.",
            "Free some space or choose another destination folder.",
        )


def _already_installed(plan: InstallPlan) -> bool:
    """True if plan.target is this variant, installed by SpecDeck and intact; raises
    InstallConflictError for any other folder of that name (never overwritten)."""
    target = plan.target
    if not target.exists():
        return False
    other = free_folder_name(plan.dest, plan.folder_name)
    rename_fix = f"Remove or rename it, or install under another name (for example '{other}')."
    marker = read_marker(target)
    if marker is None:
        raise InstallConflictError(
            f"{target} already exists and was not installed by SpecDeck; it is left untouched.",
            rename_fix,
        )
    if marker.repo_id != plan.repo_id:
        raise InstallConflictError(f"{target} already holds {marker.spec}; it is left untouched.", rename_fix)
    if marker.commit != plan.commit:
        raise InstallConflictError(
            f"{target} holds another version of {plan.spec} (commit {marker.commit[:10]}, the Hub now "
            f"has {plan.commit[:10]}); it is left untouched.",
            rename_fix,
        )
    damaged = [p for p, size, _ in marker.files if not (target / p).is_file() or (target / p).stat().st_size != size]
    if damaged:
        raise InstallConflictError(
            f"{target} holds {plan.spec} but is damaged ({', '.join(damaged[:3])} missing or resized).",
            f"Delete that folder and install again, or install under another name (for example '{other}').",
        )
    return True


# ---------------------------------------------------------------------------------------
# staging


class _Staging:
    """The hidden folder an install builds in, and its state.json."""

    def __init__(self, plan: InstallPlan):
        self.plan = plan
        self.root = plan.staging
        self.parts = self.root / "parts"
        self.files = self.root / "files"
        self.state_path = self.root / "state.json"
        self.verified: dict[str, str] = {}  # path -> checksum
        self._unsaved = 0  # bytes accepted since state.json was last saved
        self._saved_at = float("-inf")

    def open(self) -> None:
        """Adopt what an earlier attempt left, or start empty."""
        state = _read_state(self.root)
        if state is not None and state.get("repo_id") != self.plan.repo_id:
            raise InstallConflictError(
                f"An unfinished install of {state.get('repo_id')} into a folder named "
                f"'{self.plan.folder_name}' is waiting in {self.plan.dest}.",
                "Resume or discard it first, or install this one under another name.",
            )
        if state is None:  # nothing, or unreadable leftovers of our own: start over
            shutil.rmtree(self.parts, ignore_errors=True)
            shutil.rmtree(self.files, ignore_errors=True)
        self.parts.mkdir(parents=True, exist_ok=True)
        self.files.mkdir(parents=True, exist_ok=True)
        wanted = {f.path: f for f in self.plan.files}
        previous = state.get("verified", {}) if state else {}
        for path, checksum in previous.items():
            f = wanted.get(path)
            if f is not None and f.expected_digest == checksum and self._file_ok(f):
                self.verified[path] = checksum
        if state is not None and state.get("commit") != self.plan.commit:
            log.info("Resuming %s at a new commit; keeping files whose checksums did not change", self.plan.spec)
        self._prune(wanted)
        self.save()

    def _file_ok(self, f: RemoteFile) -> bool:
        path = safe_join(self.files, f.path)
        return path.is_file() and path.stat().st_size == f.size

    def _prune(self, wanted: dict[str, RemoteFile]) -> None:
        """Drop parts and files that the plan no longer wants (e.g. the branch moved)."""
        checksums = {f.expected_digest for f in wanted.values()}
        for part in self.parts.glob("*.part"):
            if part.stem not in checksums:
                part.unlink()
        for path in sorted(self.files.rglob("*"), reverse=True):
            rel = path.relative_to(self.files).as_posix()
            if path.is_file() and rel not in self.verified:
                path.unlink()
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()

    def part_path(self, f: RemoteFile) -> Path:
        return self.parts / f"{f.expected_digest}.part"

    def bytes_present(self) -> int:
        total = 0
        for f in self.plan.files:
            if f.path in self.verified:
                total += f.size
            elif (part := self.part_path(f)).exists():
                total += min(part.stat().st_size, f.size)
        return total

    def accept(self, f: RemoteFile) -> None:
        """Move a verified part into the model layout and record it."""
        target = safe_join(self.files, f.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.part_path(f), target)
        self.verified[f.path] = f.expected_digest
        self._unsaved += max(f.size, 1)
        if self._unsaved >= STATE_SAVE_BYTES or time.monotonic() - self._saved_at >= STATE_SAVE_S:
            self.save()

    def save_unsaved(self) -> None:
        """Record what was accepted since the last save (an install stopping early)."""
        if self._unsaved:
            with contextlib.suppress(OSError, SpecDeckError):  # the error that stopped it matters
                self.save()

    def save(self) -> None:
        plan = self.plan
        state = {
            "version": STATE_VERSION,
            "repo_id": plan.repo_id,
            "revision": plan.revision,
            "commit": plan.commit,
            "endpoint": _public_endpoint(plan.endpoint),
            "folder_name": plan.folder_name,
            "files": [{"path": f.path, "size": f.size, "checksum": f.expected_digest} for f in plan.files],
            "verified": self.verified,
            "updated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        atomic_write_text(self.state_path, json.dumps(state, indent=1) + "\n")
        self._unsaved, self._saved_at = 0, time.monotonic()

    def commit_to(self, target: Path) -> None:
        """Put the verified files in place as ``target`` in one rename, then clean up."""
        _write_marker(self.files, self.plan)
        _fsync_tree(self.files)
        if target.exists():
            raise InstallConflictError(f"{target} appeared while the install ran; it is left untouched.")
        os.rename(self.files, target)
        fsync_dir(target.parent)
        # Everything but the lock, which the caller still holds (and removes on release).
        self.state_path.unlink()
        shutil.rmtree(self.parts, ignore_errors=True)


def _clear_staging(staging: Path) -> None:
    """Remove a staging folder's content, except the lock its caller holds."""
    for child in staging.iterdir() if staging.is_dir() else ():
        if child.name == LOCK_NAME:
            continue
        if child.is_dir():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                child.unlink()


def _read_state(root: Path) -> dict | None:
    from specdeck.core.files import read_text_bounded

    try:  # bounded: whatever is there now (a FIFO, a huge file) is no state of ours
        state = json.loads(read_text_bounded(root / "state.json", "install state"))
    except (OSError, ValueError, SpecDeckError):
        return None
    return state if isinstance(state, dict) and state.get("version") == STATE_VERSION else None


def _fsync_tree(root: Path) -> None:
    # Files were fsynced as they completed; the directory entries need it too.
    for directory in [root, *(p for p in root.rglob("*") if p.is_dir())]:
        fsync_dir(directory)


# ---------------------------------------------------------------------------------------
# the install


def install(
    repo: str,
    revision: str | None = None,
    dest: str | Path | None = None,
    *,
    name: str | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
    progress: Callable[[InstallProgress], None] | None = None,
    cancel: threading.Event | None = None,
    retry: RetryPolicy = RetryPolicy(),
    plan: InstallPlan | None = None,
) -> InstallResult:
    """Install ``repo`` at ``revision`` (a branch such as "4.0bpw") into ``dest``.

    ``dest`` defaults to config.yml's draft_model_dir; ``name`` overrides the folder name.
    Given a ``plan`` (from plan_install, e.g. shown to the user first), the repository,
    revision, destination and name are the plan's.
    Returns an InstallResult (status "already installed" when the same variant is there).
    Raises CancelledError (what was downloaded is kept for the next attempt),
    IntegrityError, InstallConflictError, InsufficientSpaceError, HubError...
    """
    client = HubClient(endpoint, token)
    if plan is None:
        ProgressTracker(progress, InstallProgress("planning", repo, revision or "main")).phase("planning")
        plan = plan_install(repo, revision, dest, name=name, client=client)
    tracker = ProgressTracker(
        progress,
        InstallProgress("checking", plan.repo_id, plan.revision, total=plan.total_bytes, files_total=len(plan.files)),
    )
    try:
        plan.dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecDeckError(
            f"Cannot create the destination folder {plan.dest}: {exc.strerror or exc}.",
            "Choose a folder you can write to.",
        ) from exc
    with _install_lock(plan):
        if _already_installed(plan):
            _clear_staging(plan.staging)  # leftovers of a finished install
            tracker.phase("done")
            return _result("already installed", plan, downloaded=0, resumed=0)
        staging = _Staging(plan)
        staging.open()
        resumed = staging.bytes_present()
        _check_space(plan.dest, plan.total_bytes - resumed)
        tracker.add(resumed)
        for f in plan.files:
            if f.path in staging.verified:
                tracker.finish_file()
        try:
            try:
                _download_all(client, plan, staging, tracker, cancel, retry)
            except BaseException:
                staging.save_unsaved()  # what was verified stays verified for the resume
                raise
        except CancelledError:
            done = staging.bytes_present()
            raise CancelledError(
                f"Install of {plan.spec} cancelled.",
                f"{format_bytes(done)} of {format_bytes(plan.total_bytes)} is kept in a hidden "
                "folder: installing the same variant again resumes from there.",
            ) from None
        tracker.phase("finishing")
        staging.commit_to(plan.target)
    tracker.phase("done")
    return _result("installed", plan, downloaded=plan.total_bytes - resumed, resumed=resumed)


def _download_all(
    client: HubClient,
    plan: InstallPlan,
    staging: _Staging,
    tracker: ProgressTracker,
    cancel: threading.Event | None,
    retry: RetryPolicy,
) -> None:
    for f in plan.files:
        if f.path in staging.verified:
            continue
        if cancel is not None and cancel.is_set():
            raise CancelledError()
        part = staging.part_path(f)
        already = min(part.stat().st_size, f.size) if part.exists() else 0
        if already:
            tracker.phase("checking", f.path)  # re-hashing the kept part
        tracker.start_file(f.path, f.size, already)
        # One fresh retry after a checksum mismatch: a corrupt byte in transit is fixed by
        # downloading again; a second mismatch means the Hub's copy is bad.
        for attempt in (1, 2):
            try:
                download_file(client, plan.repo_id, plan.commit, f, part,
                              on_bytes=tracker.add, cancel=cancel, retry=retry)
                break
            except IntegrityError as exc:
                if attempt == 2:
                    raise IntegrityError(
                        f"{exc.what} Nothing was installed.",
                        "The same file failed twice, so the Hub's copy or something between "
                        "you and the Hub (a proxy, a mirror) is damaging it. Try again later "
                        "or from another network; the other verified files are kept.",
                    ) from None
                log.warning("%s; downloading it again", exc.what)
                tracker.start_file(f.path, f.size, 0)
        staging.accept(f)
        tracker.finish_file()


def _result(status: str, plan: InstallPlan, *, downloaded: int, resumed: int) -> InstallResult:
    model = None
    if not all(f.path.lower().endswith(".gguf") for f in plan.files):  # a GGUF has no config.json
        try:
            model = read_model(plan.target)
        except SpecDeckError as exc:  # installed, but not readable as a model: say so, keep it
            log.warning("Installed %s but cannot read it as a model: %s", plan.target, exc)
    return InstallResult(
        status=status,
        path=plan.target,
        repo_id=plan.repo_id,
        revision=plan.revision,
        commit=plan.commit,
        files=len(plan.files),
        total_bytes=plan.total_bytes,
        downloaded_bytes=downloaded,
        resumed_bytes=resumed,
        skipped=plan.skipped,
        model=model,
    )


# ---------------------------------------------------------------------------------------
# unfinished installs


def find_partial_installs(dest: str | Path) -> list[PartialInstall]:
    """Installs in ``dest`` that stopped before the end (cancelled, failed, interrupted)."""
    root = expand_user(dest)
    found = []
    if not root.is_dir():
        return found
    for staging in sorted(root.glob(f".*{STAGING_SUFFIX}")):
        state = _read_state(staging)
        if state is None or not (staging / "files").is_dir():
            continue
        files = state.get("files", [])
        verified = state.get("verified", {})
        done = 0
        for f in files:
            if f["path"] in verified:
                done += int(f["size"])
            elif (part := staging / "parts" / f"{f['checksum']}.part").exists():
                done += min(part.stat().st_size, int(f["size"]))
        found.append(
            PartialInstall(
                folder_name=str(state.get("folder_name")),
                repo_id=str(state.get("repo_id")),
                revision=str(state.get("revision")),
                commit=str(state.get("commit")),
                endpoint=str(state.get("endpoint", "")),
                staging=staging,
                bytes_done=done,
                bytes_total=sum(int(f["size"]) for f in files),
                updated_at=str(state.get("updated_at", "")),
                gguf=(Path(sorted(f["path"] for f in files)[0]).name
                      if files and all(f["path"].lower().endswith(".gguf") for f in files) else None),
            )
        )
    return found


def discard_partial(partial: PartialInstall) -> None:
    """Delete what an unfinished install downloaded (InstallBusyError while it runs)."""
    staging = partial.staging
    if not staging.name.endswith(STAGING_SUFFIX) or not staging.name.startswith("."):
        raise InvalidInputError(f"{staging} is not a SpecDeck staging folder.")
    if not staging.exists():
        raise NotFoundError(f"{staging} no longer exists.")
    busy = InstallBusyError(f"The install of {partial.spec} is still running.", "Cancel it before discarding it.")
    with _staging_lock(staging, busy):
        _clear_staging(staging)


def verify_installed(folder: str | Path, cancel: threading.Event | None = None) -> list[str]:
    """Re-check every file listed in ``folder``'s install marker; the paths that fail."""
    path = Path(folder)
    marker = read_marker(path)
    if marker is None:
        raise InvalidInputError(f"{path} was not installed by SpecDeck (no {MARKER_NAME}).")
    bad = []
    for rel, size, checksum in marker.files:
        local = path / rel
        remote = RemoteFile(rel, size, git_oid=checksum, sha256=checksum if len(checksum) == 64 else None)
        if not local.is_file() or local.stat().st_size != size or file_digest(local, remote, cancel) != checksum:
            bad.append(rel)
    return bad
