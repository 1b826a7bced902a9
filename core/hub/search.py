"""Find quantized models a user can run on the Hub: EXL2, EXL3 and GGUF repositories, by
text, model family and author.

The Hub's ``search`` parameter matches one substring of the repository id, so SpecDeck sends
the most specific word of the query (or, with no words, each wanted format's mark: "exl2",
"exl3", "gguf") and keeps, from the answers, the repositories whose id holds every word,
whose id or tags name a wanted format, and whose id or tags name the family. Results come
most-downloaded first.

A repository's format is read from its id and tags the way their authors mark them:
exllamav2/v3 quants carry "exl2" / "exl3" in the name (turboderp's "...-exl3", bartowski's
"...-exl2"), GGUF repositories carry the "gguf" tag the Hub adds to any repository holding a
.gguf file (and usually "-GGUF" in the name). Variants (core.hub.variants) then read each
branch's config.json, which is what the loaders themselves trust.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from specdeck.core.errors import InvalidInputError
from specdeck.core.hub.client import HubClient, ensure_online

EXL2_MARK = "exl2"
EXL3_MARK = "exl3"
GGUF_MARK = "gguf"
FORMATS = (EXL2_MARK, EXL3_MARK, GGUF_MARK)
"""Every format a user can run with the servers SpecDeck drives: EXL2 (TabbyAPI
exl2-checkpoint), EXL3 (TabbyAPI main), GGUF (llama.cpp, llama-swap, LM Studio, Ollama)."""
ALL_FORMATS = "all"
"""Asked for instead of a format: every one of ``FORMATS`` (``check_formats``)."""
FORMAT_LABELS = {EXL2_MARK: "EXL2", EXL3_MARK: "EXL3", GGUF_MARK: "GGUF"}
FORMAT_RUNS_ON = {
    EXL2_MARK: "ExLlamaV2: TabbyAPI's exl2-checkpoint branch",
    EXL3_MARK: "ExLlamaV3: TabbyAPI's main branch",
    GGUF_MARK: "llama.cpp: llama-server, llama-swap, LM Studio, Ollama",
}
SERVER_OF = {EXL2_MARK: "TabbyAPI exl2-checkpoint", EXL3_MARK: "TabbyAPI main",
             GGUF_MARK: "llama.cpp servers", "none": "TabbyAPI main (unquantized)"}
"""The server a model folder's quant_method (or a repository's format) runs on, in short:
ExLlamaV3 loads EXL3 and unquantized weights, ExLlamaV2 EXL2 only."""

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
    format: str | None = None
    """"exl2", "exl3" or "gguf" (from the id and tags), None when neither says."""

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[-1]

    @property
    def format_label(self) -> str:
        return FORMAT_LABELS.get(self.format or "", "?")


def _normal(text: str) -> str:
    """Lower case without punctuation: "Qwen2.5-0.5B" and "qwen2.5 0.5b" compare equal."""
    return re.sub(r"[^a-z0-9]+", "", text.lower())


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"\s+", text.lower().strip()) if w]


def format_of(repo_id: str, tags: Iterable[str] = ()) -> str | None:
    """The format a repository's id or tags name: the id first (an "...-exl3" repository
    converted from a GGUF-tagged base is EXL3), then the tags; None when neither does."""
    repo = repo_id.lower()
    lowered = [t.lower() for t in tags]
    for mark in (EXL3_MARK, EXL2_MARK, GGUF_MARK):
        if re.search(rf"(?:^|[^a-z0-9]){mark}(?:$|[^a-z0-9])", repo):
            return mark
    for mark in (EXL3_MARK, EXL2_MARK, GGUF_MARK):
        if mark in lowered:
            return mark
    return None


def check_formats(formats: str | Iterable[str] | None) -> tuple[str, ...]:
    """The formats asked for, lower case; None, "" or "all" mean every format."""
    if formats is None:
        return FORMATS
    items = [formats] if isinstance(formats, str) else list(formats)
    wanted = [str(f).strip().lower() for f in items if str(f).strip()]
    if not wanted or wanted == [ALL_FORMATS]:
        return FORMATS
    unknown = [f for f in wanted if f not in FORMATS]
    if unknown:
        raise InvalidInputError(
            f"Unknown model format {', '.join(repr(f) for f in unknown)}.",
            f"Use one of {', '.join(FORMATS)} (or leave it out for all of them).")
    return tuple(f for f in FORMATS if f in wanted)


def _matches(hit: RepoHit, words: list[str], family: str | None, formats: tuple[str, ...]) -> bool:
    if hit.format not in formats:
        return False
    repo = hit.repo_id.lower()
    if not all(w in repo or _normal(w) in _normal(repo) for w in words):
        return False
    if family:
        wanted = _normal(family)
        return wanted in _normal(repo) or any(wanted == _normal(t) for t in hit.tags)
    return True


def _queries(words: list[str], formats: tuple[str, ...]) -> list[str]:
    """What to send as ``search``: the longest word that is not a format mark, else each
    wanted format's mark (a repository of that format has it in its id or tags)."""
    plain = [w for w in words if w not in FORMATS]
    return [max(plain, key=len)] if plain else list(formats)


def search_repos(
    text: str = "",
    *,
    author: str | None = None,
    family: str | None = None,
    limit: int = 50,
    formats: str | Iterable[str] | None = None,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> list[RepoHit]:
    """Repositories of the wanted ``formats`` (default: EXL2, EXL3 and GGUF) matching
    ``text`` (every word), ``family`` and ``author``, most downloaded first."""
    wanted = check_formats(formats)
    words = _words(text)
    ensure_online()
    client = HubClient(endpoint, token)
    client.check_reachable()  # seconds, not the library's ~20 s of retries
    found: dict[str, RepoHit] = {}
    with client.errors():
        for query in _queries(words, wanted):
            kept = 0  # each query answers most downloaded first: its first `limit` suffice
            for hit in _list(client, query, author):
                if _matches(hit, words, family, wanted):
                    found.setdefault(hit.repo_id, hit)
                    kept += 1
                    if kept >= limit:
                        break
    hits = sorted(found.values(), key=lambda h: -h.downloads)  # stable: the Hub's order on ties
    return hits[:limit]


def _list(client: HubClient, query: str, author: str | None):
    for info in client.api.list_models(
        search=query,
        author=author.strip() if author and author.strip() else None,
        sort="downloads",
        limit=FETCH_LIMIT,
        expand=EXPAND,  # type: ignore[arg-type]
    ):
        tags = tuple(info.tags or ())
        yield RepoHit(
            repo_id=info.id,
            author=info.author or info.id.split("/", 1)[0],
            downloads=int(info.downloads or 0),
            likes=int(info.likes or 0),
            tags=tags,
            gated=info.gated or False,
            private=bool(info.private),
            last_modified=info.last_modified.isoformat() if info.last_modified else None,
            format=format_of(info.id, tags),
        )
