"""Naming a Hub repository and revision: ``owner/name``, ``owner/name@branch``, or a Hub URL.

Users paste what they see: ``turboderp/Llama-3.2-1B-Instruct-exl2@4.0bpw`` from a README, or
``https://huggingface.co/turboderp/Llama-3.2-1B-Instruct-exl2/tree/4.0bpw`` from the browser.
Both name the same variant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from specdeck.core.errors import InvalidInputError

_URL_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
_URL_PATH = re.compile(r"^/(?:models/)?(?P<repo>[^/]+/[^/]+?)(?:/(?:tree|blob|resolve)/(?P<rev>[^/]+).*)?/?$")


@dataclass(frozen=True)
class RepoSpec:
    """A model repository on the Hub, and optionally one revision (branch, tag or commit)."""

    repo_id: str
    revision: str | None = None

    @property
    def name(self) -> str:
        """The repository's name without its owner: ``Llama-3.2-1B-Instruct-exl2``."""
        return self.repo_id.split("/", 1)[1]

    @property
    def owner(self) -> str:
        return self.repo_id.split("/", 1)[0]

    def __str__(self) -> str:
        return f"{self.repo_id}@{self.revision}" if self.revision else self.repo_id


def validate_repo_id(repo_id: str) -> str:
    """``repo_id`` itself if it is a valid ``owner/name``; InvalidInputError otherwise."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id as hf_validate

    if repo_id.count("/") != 1:
        raise InvalidInputError(
            f"'{repo_id}' is not a Hub model id.",
            "Write it as owner/name, for example turboderp/Llama-3.2-1B-Instruct-exl2.",
        )
    try:
        hf_validate(repo_id)
    except HFValidationError as exc:
        raise InvalidInputError(f"'{repo_id}' is not a valid Hub model id: {exc}") from exc
    return repo_id


def parse_repo_spec(text: str, revision: str | None = None) -> RepoSpec:
    """Read ``owner/name[@revision]`` or a huggingface.co URL; ``revision`` overrides."""
    raw = text.strip()
    if not raw:
        raise InvalidInputError("No repository given.", "Write it as owner/name[@branch].")
    parsed_rev: str | None = None
    if "://" in raw or raw.startswith(_URL_HOSTS):
        url = urlsplit(raw if "://" in raw else f"https://{raw}")
        match = _URL_PATH.match(url.path)
        if url.hostname not in _URL_HOSTS or not match:
            raise InvalidInputError(
                f"'{raw}' is not a Hugging Face model URL.",
                "Paste the repository's page address, or write owner/name[@branch].",
            )
        repo_id, parsed_rev = match.group("repo"), match.group("rev")
        parsed_rev = unquote(parsed_rev) if parsed_rev else None
    elif "@" in raw:
        repo_id, parsed_rev = raw.split("@", 1)
        if not parsed_rev:
            raise InvalidInputError(f"'{raw}' names no revision after '@'.", "Write owner/name@branch.")
    else:
        repo_id = raw
    return RepoSpec(validate_repo_id(repo_id), revision or parsed_rev)
