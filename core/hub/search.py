"""Find EXL2 repositories on the Hub by text, model family and author.

The Hub's ``search`` parameter matches one substring of the repository id, so SpecDeck sends
the most specific word of the query (or "exl2" when there is none) and keeps, from the
answers, the repositories whose id holds every word, whose id or tags say EXL2, and whose id
or tags name the family. Results come most-downloaded first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from specdeck.core.hub.client import HubClient, ensure_online

EXL2_MARK = "exl2"
# The Hub answers at most this many per page; more than enough once filtered locally.
FETCH_LIMIT = 1000
EXPAND = ["author", "downloads", "likes", "tags", "gated", "private", "lastModified"]


@dataclass(frozen=True)
class RepoHit:
    repo_id: str
    author: str | None
    downloads: int
    likes: int
    tags: tuple[str, ...]
    gated: bool | str
    private: bool
    last_modified: str | None

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]


def _normal(text: str) -> str:
    """Lower case without punctuation: "Qwen2.5-0.5B" and "qwen2.5 0.5b" compare equal."""
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"\s+", text.lower().strip()) if w]


def _matches(hit: RepoHit, words: list[str], family: str | None, exl2_only: bool) -> bool:
    repo = hit.repo_id.lower()
    tags = [t.lower() for t in hit.tags]
    if exl2_only and EXL2_MARK not in repo and EXL2_MARK not in tags:
        return False
    if not all(w in repo or _normal(w) in _normal(repo) for w in words):
        return False
    if family:
        wanted = _normal(family)
        return wanted in _normal(repo) or any(wanted == _normal(t) for t in tags)
    return True


def search_repos(
    text: str = "",
    *,
    author: str | None = None,
    family: str | None = None,
    limit: int = 50,
    exl2_only: bool = True,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> list[RepoHit]:
    """EXL2 repositories matching ``text`` (every word), ``family`` and ``author``."""
    words = _words(text)
    query_words = [w for w in words if w != EXL2_MARK]
    query = max(query_words, key=len) if query_words else EXL2_MARK
    ensure_online()
    client = HubClient(endpoint, token)
    client.check_reachable()  # seconds, not the library's ~20 s of retries
    hits: list[RepoHit] = []
    with client.errors():
        for info in client.api.list_models(
            search=query,
            author=author.strip() if author and author.strip() else None,
            sort="downloads",
            limit=FETCH_LIMIT,
            expand=EXPAND,  # type: ignore[arg-type]
        ):
            hit = RepoHit(
                repo_id=info.id,
                author=info.author or info.id.split("/", 1)[0],
                downloads=int(info.downloads or 0),
                likes=int(info.likes or 0),
                tags=tuple(info.tags or ()),
                gated=info.gated or False,
                private=bool(info.private),
                last_modified=info.last_modified.isoformat() if info.last_modified else None,
            )
            if _matches(hit, words, family, exl2_only):
                hits.append(hit)
                if len(hits) >= limit:
                    break
    return hits
