"""Draft models from the Hub: found by the target's family, checked before any download, the
quantization chosen for the memory left, installed within the download budget.

1. **Search**: repositories whose id holds the target's family (``general.basename`` of its
   header, else its architecture) and "gguf" (as GGUF repositories are named: "...-GGUF"),
   most downloaded first, ``MAX_REPOS`` of them.
2. **Quantization** (:func:`choose_quant`): of a repository's GGUF files, those smaller than
   the target (the rule local drafts follow, ``candidates.smaller_than_target``) and within
   the memory left once the target is loaded; of these the smallest with at least
   ``MIN_DRAFT_BITS`` bits per weight (below that a draft's guesses, and so its acceptance,
   degrade faster than its cost falls), else the smallest. The choice says why.
3. **Tokenizer, before any download**: the chosen file's GGUF header, read with HTTP range
   requests (``core.compat.gguf_hub``: the first MiBs, never the weights), against the target's
   with llama.cpp's vocabulary rules (``core.compat``). A draft that fails is not a candidate.
4. **Install** (:func:`install_draft`): the verified, staged, resumable installer
   (``core.hub.install``) puts it into SpecDeck's model library (:func:`library_dir`); a
   cancelled or failed download leaves only the installer's hidden staging folder, which a
   later install resumes and the library scan skips.

Which candidates are downloaded (rank and budget) and asking first are :mod:`.run`'s.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path

from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.llama_flags import DRAFT_SIMPLE
from specdeck.core.tune.candidates import (
    NOT_SMALLER,
    Candidate,
    HubFile,
    NotTried,
    draft_refusal,
    smaller_than_target,
)
from specdeck.core.tune.setup import Setup
from specdeck.core.units import GiB, format_bytes

DEFAULT_DOWNLOAD_BUDGET = 2 * GiB
"""Enough for one or two drafts of the usual sizes (a 0.5-1.5B draft in Q4-Q8 is 0.3-1.6 GiB),
never a second target; asked first unless --yes."""
MAX_REPOS = 6
"""Repositories inspected (each costs a listing and a header read of a few MiB)."""
MAX_DOWNLOADS = 2
"""Drafts downloaded in one tune: each one more is another round of the search."""
MIN_DRAFT_BITS = 4
GGUF_MARK = "gguf"

_BITS = re.compile(r"^(?:I?Q|TQ)(\d)")
_FLOAT_BITS = {"F32": 32, "F16": 16, "BF16": 16, "FP16": 16, "FP8": 8, "MXFP4": 4,
               "MXFP4_MOE": 4}


def quant_bits(quant: str | None) -> int | None:
    """Bits per weight a quant type names ("Q4_K_M" -> 4, "IQ3_XXS" -> 3, "BF16" -> 16)."""
    if not quant:
        return None
    if quant in _FLOAT_BITS:
        return _FLOAT_BITS[quant]
    match = _BITS.match(quant)
    return int(match.group(1)) if match else None


def choose_quant(choices, setup: Setup, memory_left: int | None):
    """(the GgufChoice to download or None, why): see the module docstring, rule 2."""
    files = [c for c in choices if not c.is_projector]
    smaller = [c for c in files if smaller_than_target(c.size, setup)]
    if not smaller:
        return None, f"no GGUF file {NOT_SMALLER} ({format_bytes(setup.facts.weight_bytes)})"
    fits = [c for c in smaller if memory_left is None or c.size <= memory_left]
    if not fits:
        return None, (f"no GGUF file smaller than the target fits the memory left "
                      f"({format_bytes(max(memory_left or 0, 0))})")
    good = [c for c in fits if (quant_bits(c.quant) or 0) >= MIN_DRAFT_BITS]
    chosen = min(good or fits, key=lambda c: (c.size, c.name))
    room = "" if memory_left is None else f" and fits the memory left ({format_bytes(memory_left)})"
    rule = (f"the smallest file of at least {MIN_DRAFT_BITS} bits per weight" if good else
            f"the smallest file (none of at least {MIN_DRAFT_BITS} bits per weight fits)")
    return chosen, (f"{chosen.quant or chosen.name} ({format_bytes(chosen.size)}): {rule} that "
                    f"is smaller than the target{room}")


def memory_left(setup: Setup, given: int | None = None) -> int:
    """Memory for a draft once the target's server is up: ``given`` (the user's figure), else
    what is free now where the server holds the model (core.servers.llama_server.free_memory)
    less the target and a server's overhead."""
    from specdeck.core.servers.llama_server import SERVER_OVERHEAD, free_memory

    free = free_memory(setup.on_gpu) if given is None else given
    return free - setup.facts.weight_bytes - SERVER_OVERHEAD


def library_dir(given: Path | None = None) -> Path:
    """Where downloaded drafts go: ``given``, else the draft folder of the TabbyAPI config.yml
    SpecDeck has open (core.hub.locations), else the ``models`` folder in SpecDeck's data
    folder."""
    from specdeck.core import appdirs
    from specdeck.core.hub.locations import default_install_dir

    if given is not None:
        return Path(given)
    try:
        found = default_install_dir()
    except SpecDeckError:
        found = None  # a config.yml that cannot be read: SpecDeck's own folder still works
    return Path(found) if found is not None else appdirs.data_dir() / "models"


def library_folders(library: Path) -> list[Path]:
    """The installed model folders of ``library`` (hidden staging folders left out: an
    unfinished download is never a draft)."""
    try:
        return sorted(p for p in library.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def find_hub_drafts(setup: Setup, library: Path, local: list[Candidate], *,
                    memory: int | None = None, endpoint: str | None = None,
                    cancel: threading.Event | None = None
                    ) -> tuple[list[Candidate], list[NotTried], list[str]]:
    """Draft candidates from the Hub (nothing downloaded), the repositories refused and why,
    and notes (a Hub that could not be searched: tuning goes on with the local drafts)."""
    from specdeck.core.compat.load import load_model
    from specdeck.core.hub.errors import HubError
    from specdeck.core.hub.search import search_repos

    try:
        hits = search_repos(f"{setup.facts.family} {GGUF_MARK}", formats="gguf",
                            limit=MAX_REPOS, endpoint=endpoint)
    except HubError as exc:
        return [], [], [f"The Hub was not searched for drafts: {exc.what}"]
    if not hits:
        return [], [], [f"The Hub has no GGUF repository named after {setup.facts.family}."]
    target = load_model(setup.target, cancel=cancel)
    on_disk = {c.draft.resolve() for c in local if c.draft is not None}
    found: list[Candidate] = []
    refused: list[NotTried] = []
    left = memory_left(setup, memory)
    for hit in hits:
        if cancel is not None and cancel.is_set():
            raise CancelledError()
        try:
            candidate = _repo_candidate(setup, target, hit.repo_id, library, left, endpoint,
                                        cancel)
        except CancelledError:
            raise
        except SpecDeckError as exc:
            refused.append(NotTried(f"{DRAFT_SIMPLE} {hit.repo_id}", exc.what))
            continue
        if isinstance(candidate, NotTried):
            refused.append(candidate)
        elif candidate.draft.resolve() not in on_disk:
            found.append(candidate)
    return found, refused, []


def _repo_candidate(setup, target, repo_id: str, library: Path, left: int, endpoint, cancel
                    ) -> Candidate | NotTried:
    from specdeck.core.compat import compare_models
    from specdeck.core.compat.load import load_model
    from specdeck.core.compat.source import ModelSource
    from specdeck.core.hub.client import HubClient
    from specdeck.core.hub.gguf import gguf_choices, gguf_folder_name, is_installed

    client = HubClient(endpoint)
    commit = str(client.model_info(repo_id).sha)
    choice, why = choose_quant(gguf_choices(client.list_files(repo_id, commit)), setup, left)
    label = f"{DRAFT_SIMPLE} {repo_id}"
    if choice is None:
        return NotTried(label, why)
    spec = f"{repo_id}@{commit}:{choice.main_file}"
    draft = load_model(ModelSource(spec, repo_id=repo_id, revision=commit,
                                   hub_gguf=choice.main_file), endpoint=endpoint, cancel=cancel)
    verdicts: list[str] = []

    def checked():
        report = compare_models(target, draft, examples=0)
        verdicts.append(report.verdict.label.lower())
        return report

    refusal = draft_refusal(choice.size, setup.facts.weight_bytes, checked)
    if refusal is not None:
        return NotTried(f"{label} {choice.main_file}", f"tokenizer checked from its GGUF "
                        f"header, before any download: {refusal}")
    folder = library / gguf_folder_name(repo_id, choice)
    from specdeck.core.tune.arguments import draft_problems

    why_not = draft_problems(folder / choice.main_file, on_disk=False)
    if why_not:  # checked before any download: a name that cannot become an argument
        return NotTried(f"{label} {choice.main_file}", why_not[0])
    installed = is_installed(choice, folder)
    source = HubFile(repo_id, commit, choice.files[0].path, choice.quant, choice.size)
    return Candidate(DRAFT_SIMPLE, folder / choice.main_file, choice.size,
                     0 if installed else choice.size,
                     notes=(f"from the Hub: {source.spec}", why,
                            "its tokenizer passed the check from the GGUF header "
                            f"({verdicts[-1]})"),
                     hub=source)


def install_draft(candidate: Candidate, library: Path, *, endpoint: str | None = None,
                  progress: Callable | None = None, cancel: threading.Event | None = None,
                  retry=None):
    """Install a Hub candidate's GGUF into ``library`` at the commit that was checked
    (core.hub.install: staged, every byte verified, atomic; resumes an earlier attempt).
    Raises what the installer raises; returns its InstallResult."""
    from specdeck.core.hub.gguf import plan_gguf_install
    from specdeck.core.hub.install import install

    source = candidate.hub
    if source is None:
        raise ValueError(f"{candidate.label} is not a Hub draft")
    plan, _choice = plan_gguf_install(source.repo_id, Path(source.file).name, library,
                                      revision=source.commit, endpoint=endpoint)
    extra = {} if retry is None else {"retry": retry}
    return install(plan.repo_id, plan.revision, library, name=plan.folder_name,
                   endpoint=endpoint, progress=progress, cancel=cancel, plan=plan, **extra)
