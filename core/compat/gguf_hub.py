"""A GGUF on the Hub, checked from its header alone: HTTP range requests fetch the first
bytes of the file (doubling until the header's end is in them), never the weights.

The file is named by quant type or file name after the repo ("org/name:Q8_0",
"org/name@rev:model-Q4_K_M.gguf"); a split model's header is in its first shard.
"""

from __future__ import annotations

import threading
from typing import Any

from specdeck.core.compat.gguf_file import NeedMore
from specdeck.core.compat.gguf_model import read_gguf_prefix
from specdeck.core.errors import CancelledError
from specdeck.core.hub.errors import HubError
from specdeck.core.units import KiB, MiB, format_bytes

FIRST_FETCH = 4 * MiB
"""A 150k-token vocabulary with its merges is about 5 MiB of header; smaller ones fit here."""
MAX_HEADER = 256 * MiB


def read_hub_gguf(repo_id: str, revision: str | None, wanted: str, *,
                  endpoint: str | None = None, token: str | None = None,
                  cancel: threading.Event | None = None) -> tuple[Any, Any, dict, str, int]:
    """(vocab, special tokens, numbers, the file's path in the repo, bytes fetched)."""
    from specdeck.core.hub.client import HubClient
    from specdeck.core.hub.gguf import gguf_choices, pick

    client = HubClient(endpoint, token)
    commit = str(client.model_info(repo_id, revision=revision).sha)
    choices = gguf_choices(client.list_files(repo_id, commit))
    if not choices:
        raise HubError(f"{repo_id} holds no .gguf file.",
                       "Name a GGUF repository, or drop the :FILE part for an HF/EXL2 one.")
    choice = pick(choices, wanted, repo_id)
    path = choice.files[0].path
    url = client.file_url(repo_id, commit, path)
    size = FIRST_FETCH
    while True:
        if cancel is not None and cancel.is_set():
            raise CancelledError("Compatibility check cancelled.")
        data = _fetch(client, url, size, repo_id, commit)
        try:
            # The listing's size lets the tensor table be checked against the whole file
            # (a truncated upload is refused as llama.cpp refuses it).
            vocab, special, numbers = read_gguf_prefix(data, path.rsplit("/", 1)[-1],
                                                       choice.files[0].size or None)
            return vocab, special, numbers, path, len(data)
        except NeedMore as more:
            if len(data) < size:
                raise HubError(f"{repo_id}'s {path} ends inside its own header.",
                               "The file on the Hub is damaged; try another quantization.") from None
            size = max(size * 2, more.needed + 64 * KiB)
            if size > MAX_HEADER:
                raise HubError(f"{repo_id}'s {path} has a header larger than "
                               f"{format_bytes(MAX_HEADER)}; that is not a model's "
                               "metadata.") from None


def _fetch(client, url: str, size: int, repo_id: str, commit: str) -> bytes:
    """The first ``size`` bytes (a range request; a server that ignores Range is read only
    that far)."""
    from huggingface_hub.utils import hf_raise_for_status

    headers = {**client.headers(), "Range": f"bytes=0-{size - 1}",
               "Accept-Encoding": "identity"}
    chunks, total = [], 0
    with client.errors(repo_id, commit):
        with client.session().stream("GET", url, headers=headers, follow_redirects=True,
                                     timeout=30.0) as response:
            if response.status_code >= 400:
                response.read()
                hf_raise_for_status(response)
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                total += len(chunk)
                if total >= size:
                    break
    return b"".join(chunks)[:size]
