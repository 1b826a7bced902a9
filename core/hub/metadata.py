"""A repository's configuration and tokenizer files, without its weights.

The compatibility checker compares tokenizers and configs; for a model on the Hub it needs
those few files, never the gigabytes of weights. :func:`fetch_metadata` downloads exactly
the files named in METADATA_FILES (at the repository root, or under ``original/`` where
Llama 3 keeps its tiktoken model) with huggingface_hub's ``hf_hub_download``, verifies them
against the tree listing, and caches them per commit under SpecDeck's cache folder:

    <cache>/hub-metadata/<owner>--<name>/<commit>/...   the files
    <cache>/hub-metadata/<owner>--<name>/refs/<revision> the commit a revision last resolved to

A cached commit is reused without downloading; with HF_HUB_OFFLINE set, the last commit a
revision resolved to is served from the cache.
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
import threading
from pathlib import Path

from specdeck.core import appdirs
from specdeck.core.atomic import atomic_write_text
from specdeck.core.errors import CancelledError, NotFoundError, SpecDeckError
from specdeck.core.files import METADATA_FILE, MODEL_CONFIG, read_text_bounded
from specdeck.core.hub.client import HubClient, RemoteFile, is_offline
from specdeck.core.hub.errors import IntegrityError, offline_error
from specdeck.core.hub.paths import path_problem
from specdeck.core.hub.spec import parse_repo_spec
from specdeck.core.hub.transfer import file_digest

log = logging.getLogger(__name__)

METADATA_FILES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer.model",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "added_tokens.json",
        "chat_template.jinja",
        "chat_template.json",
    }
)
METADATA_FOLDERS = ("", "original/")
COMPLETE_FLAG = ".complete"


def is_metadata_file(path: str) -> bool:
    folder, _, name = path.rpartition("/")
    return name in METADATA_FILES and (f"{folder}/" if folder else "") in METADATA_FOLDERS


def metadata_cache_root() -> Path:
    return appdirs.cache_dir() / "hub-metadata"


def _repo_cache(repo_id: str) -> Path:
    return metadata_cache_root() / repo_id.replace("/", "--")


def _ref_file(repo_id: str, revision: str) -> Path:
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", revision)
    return _repo_cache(repo_id) / "refs" / safe


def _cached(repo_id: str, commit: str) -> Path | None:
    folder = _repo_cache(repo_id) / commit
    return folder if (folder / COMPLETE_FLAG).is_file() else None


def _offline_copy(repo_id: str, revision: str | None) -> Path:
    ref = _ref_file(repo_id, revision or "main")
    try:  # bounded: whatever is there now (a FIFO, a huge file) is no commit of ours
        commit = read_text_bounded(ref, "Hub cache reference").strip()
    except (OSError, SpecDeckError):
        commit = ""
    folder = _cached(repo_id, commit) if commit else None
    if folder is None:
        raise offline_error()
    return folder


def _choose_revision(client: HubClient, repo_id: str, revision: str | None) -> tuple[str, str, list[RemoteFile]]:
    """(revision, commit, files) to read metadata from. EXL2 repositories keep config.json
    and the tokenizer on their bitrate branches, not on main: without an explicit revision,
    fall back to the first branch that has config.json."""
    info = client.model_info(repo_id, revision=revision)
    files = client.list_files(repo_id, str(info.sha))
    label = revision or "main"
    if revision is not None or any(f.path == "config.json" for f in files):
        return label, str(info.sha), files
    for name, commit in client.branches(repo_id):
        if name == label:
            continue
        branch_files = client.list_files(repo_id, commit)
        if any(f.path == "config.json" for f in branch_files):
            log.info("%s has no config.json on main; reading metadata from branch %s", repo_id, name)
            return name, commit, branch_files
    return label, str(info.sha), files


def fetch_metadata(
    repo_id: str,
    revision: str | None = None,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """A local folder holding only the configuration and tokenizer files of ``repo_id`` at
    ``revision`` (default: main, or the first branch with config.json). Never downloads
    weights. Raises NotFoundError if the repository has no config.json there."""
    spec = parse_repo_spec(repo_id, revision)
    if is_offline():
        return _offline_copy(spec.repo_id, spec.revision)
    client = HubClient(endpoint, token)
    label, commit, files = _choose_revision(client, spec.repo_id, spec.revision)
    wanted = [f for f in files if is_metadata_file(f.path) and not path_problem(f.path)]
    if not any(f.path == "config.json" for f in wanted):
        raise NotFoundError(
            f"{spec.repo_id}@{label} has no config.json, so it cannot be checked.",
            "Name a branch that holds the model (`specdeck variants REPO` lists them).",
        )
    cached = _cached(spec.repo_id, commit)
    if cached is None:
        cached = _download(client, spec.repo_id, commit, wanted, cancel)
    ref = _ref_file(spec.repo_id, label)
    ref.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(ref, commit + "\n")
    return cached


def _download(
    client: HubClient, repo_id: str, commit: str, files: list[RemoteFile], cancel: threading.Event | None
) -> Path:
    from huggingface_hub import hf_hub_download

    final = _repo_cache(repo_id) / commit
    final.parent.mkdir(parents=True, exist_ok=True)
    # A fresh folder each time: hf_hub_download trusts files already in local_dir.
    staging = Path(tempfile.mkdtemp(prefix=f".{commit[:12]}.", dir=final.parent))
    try:
        for f in files:
            if cancel is not None and cancel.is_set():
                raise CancelledError()
            limit = MODEL_CONFIG if f.path.rpartition("/")[2] == "config.json" else METADATA_FILE
            if f.size > limit:
                log.warning("Skipping %s of %s: %d bytes is too large for metadata", f.path, repo_id, f.size)
                continue
            with client.errors(repo_id, commit):
                hf_hub_download(
                    repo_id,
                    f.path,
                    revision=commit,
                    local_dir=staging,
                    endpoint=client.endpoint,
                    token=client.hf_token(),
                    library_name="specdeck",
                )
            local = staging / f.path
            if file_digest(local, f) != f.expected_digest:
                raise IntegrityError(
                    f"{f.path} of {repo_id} does not match the checksum the Hub published.",
                    "Try again; if it keeps failing, a proxy or mirror may be altering files.",
                )
        shutil.rmtree(staging / ".cache", ignore_errors=True)  # hf_hub_download's bookkeeping
        (staging / COMPLETE_FLAG).write_text(commit + "\n", encoding="utf-8")
        if final.exists():  # another process finished first; its copy is as good
            shutil.rmtree(staging)
        else:
            staging.rename(final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final
