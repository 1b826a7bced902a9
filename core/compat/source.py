"""Where a model comes from: a local folder, or a Hugging Face Hub id with a revision.

A model is named the way a user types it: a folder path, or ``org/name`` with an optional
``@revision`` (EXL2 repos keep one bitrate per branch: ``turboderp/Llama-3.2-1B-exl2@4.0bpw``).
An existing path always wins; anything else shaped like a repo id goes to the Hub, where
only the tokenizer and config files are fetched (never weights).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.userpath import expand_user

# The Hub's repo id rules: an owner and a name of letters, digits, "-", "_", "."; names
# cannot start with "." or "-".
_HUB_ID = re.compile(
    r"^(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
    r"(?:@(?P<revision>[^\s@:]+))?(?::(?P<gguf>[^\s@:]+))?$"
)


@dataclass(frozen=True)
class ModelSource:
    """A parsed model reference: exactly one of ``folder`` and ``repo_id`` is set."""

    spec: str
    folder: Path | None = None
    repo_id: str | None = None
    revision: str | None = None
    gguf: Path | None = None
    """A local .gguf file: its header holds the vocabulary (llama.cpp models)."""
    hub_gguf: str | None = None
    """A GGUF of a Hub repo, by quant type or file name ("org/name:Q8_0"): only its header is
    fetched (HTTP range requests)."""

    @property
    def is_hub(self) -> bool:
        return self.repo_id is not None

    @property
    def label(self) -> str:
        if self.gguf is not None:
            return str(self.gguf)
        if self.repo_id:
            label = f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id
            return f"{label}:{self.hub_gguf}" if self.hub_gguf else label
        return str(self.folder)


def parse_source(spec: str | Path) -> ModelSource:
    """Turn what the user typed into a folder or a Hub reference (nothing is fetched)."""
    text = str(spec).strip()
    if not text:
        raise InvalidInputError(
            "No model given.", "Give a model folder, or a Hub id such as org/name@revision."
        )
    path = expand_user(text)
    if path.suffix.lower() == ".gguf" and os.path.lexists(path):
        # Whatever it is (a file, a folder, a FIFO, a link that loops), it was named as a
        # GGUF: the GGUF reader says what it is, never "a model folder".
        return ModelSource(text, gguf=path)
    if path.exists():
        if path.is_file() and path.suffix.lower() == ".gguf":
            return ModelSource(text, gguf=path)
        if not path.is_dir():
            raise InvalidInputError(
                f"{path} is a file, not a model folder.",
                "Pick the folder that holds config.json and the tokenizer files.",
            )
        return ModelSource(text, folder=path)
    match = _HUB_ID.match(text)
    if match and not text.startswith((".", "/", "~")):
        return ModelSource(text, repo_id=match["repo"], revision=match["revision"],
                           hub_gguf=match["gguf"])
    raise NotFoundError(
        f"Model folder {path} does not exist.",
        "Pick an existing folder, or give a Hugging Face Hub id such as org/name@revision.",
    )


def resolve_folder(
    source: ModelSource,
    *,
    endpoint: str | None = None,
    token: str | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """The local folder holding the model's tokenizer and config files.

    Hub models are fetched (tokenizer and config files only) into SpecDeck's cache by the Hub
    module; ``token`` is passed through for gated repos and never appears in a message.
    """
    if source.folder is not None:
        return source.folder
    assert source.repo_id is not None
    return _fetch_from_hub(source.repo_id, source.revision, endpoint=endpoint, token=token,
                           cancel=cancel)


def _fetch_from_hub(
    repo_id: str,
    revision: str | None,
    *,
    endpoint: str | None,
    token: str | None,
    cancel: threading.Event | None,
) -> Path:
    from specdeck.core.hub import fetch_metadata

    try:
        folder = fetch_metadata(repo_id, revision, endpoint=endpoint, token=token, cancel=cancel)
    except SpecDeckError:
        raise  # the Hub module words its own errors (offline, gated, not found, ...)
    except OSError as exc:
        # Deliberately no exception text beyond its kind: URLs with credentials must not leak.
        raise SpecDeckError(
            f"Could not fetch the tokenizer and config of {repo_id} from the Hugging Face Hub "
            f"({type(exc).__name__}).",
            "Check the network connection, or point at a local model folder.",
        ) from exc
    return Path(folder)
