"""GGUF drafts from the Hub: a repository keeps one file per quantization (split into
``-00001-of-0000N`` shards when large, sometimes in a folder per quantization), not one
branch per bitrate. ``gguf_choices`` lists them with their sizes and quant types;
``plan_gguf_install`` picks one and plans its install with the same machinery as EXL2
variants (core.hub.install: every file's sha256 verified, resumable, atomic, progress,
cancel): the folder ``<repo name>-<quant>`` receives the GGUF file(s) and nothing else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from specdeck.core.compat.gguf_file import split_name
from specdeck.core.errors import InvalidInputError
from specdeck.core.hub.client import HubClient, RemoteFile
from specdeck.core.hub.errors import HubError

_QUANT = re.compile(
    r"(?:^|[-_.])((?:I?Q\d(?:_[0-9A-Z]+)*)|BF16|F16|F32|FP16|FP8|TQ\d_\d|MXFP4(?:_MOE)?)"
    r"(?=$|[-_.])", re.IGNORECASE)


@dataclass(frozen=True)
class GgufChoice:
    name: str
    """The file's name without its shard suffix and .gguf (how a user names it)."""
    quant: str | None
    """Q4_K_M, Q8_0, IQ4_XS, F16, ...; None when the name does not say."""
    files: tuple[RemoteFile, ...]
    """The file, or its shards in order."""

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def main_file(self) -> str:
        """The file llama.cpp is given (the first shard of a split model)."""
        return Path(self.files[0].path).name

    @property
    def is_projector(self) -> bool:
        return Path(self.files[0].path).name.lower().startswith("mmproj")


def quant_of(name: str) -> str | None:
    """The quantization a GGUF's name states (names hold dots: "Qwen2.5-0.5B-...-Q8_0")."""
    found = _QUANT.findall(name[:-5] if name.lower().endswith(".gguf") else name)
    return found[-1].upper() if found else None


def gguf_choices(files: list[RemoteFile]) -> list[GgufChoice]:
    """The repository's GGUF files grouped into what can be installed, largest last."""
    groups: dict[str, list[RemoteFile]] = {}
    for f in files:
        if not f.path.lower().endswith(".gguf"):
            continue
        split = split_name(f.path)
        base = split[0] if split else f.path[:-5]
        groups.setdefault(base, []).append(f)
    choices = []
    for base, members in groups.items():
        members.sort(key=lambda f: f.path)
        name = Path(base).name
        choices.append(GgufChoice(name, quant_of(name), tuple(members)))
    return sorted(choices, key=lambda c: (c.is_projector, c.size, c.name))


def pick(choices: list[GgufChoice], wanted: str, repo: str) -> GgufChoice:
    """The choice named by a quant type (Q8_0) or a file name (with or without .gguf)."""
    text = wanted.strip()
    key = text[:-5] if text.lower().endswith(".gguf") else text
    key = re.sub(r"-\d{5}-of-\d{5}$", "", key, flags=re.IGNORECASE)
    exact = [c for c in choices if c.name.lower() == Path(key).name.lower()]
    by_quant = [c for c in choices if c.quant and c.quant == key.upper() and not c.is_projector]
    found = exact or by_quant
    listing = ", ".join(f"{c.quant or c.name}" for c in choices if not c.is_projector)
    if not found:
        raise InvalidInputError(f"{repo} has no GGUF {wanted!r} (it has: {listing or 'none'}).",
                                "Pick one of those (a quant type, or a file name).")
    if len(found) > 1:
        raise InvalidInputError(f"{wanted!r} matches several GGUF files in {repo}: "
                                f"{', '.join(c.name for c in found)}.",
                                "Give the file name instead.")
    return found[0]


def plan_gguf_install(repo: str, wanted: str, dest=None, *, revision: str | None = None,
                      name: str | None = None, endpoint: str | None = None,
                      token=None, client: HubClient | None = None):
    """Plan installing one GGUF (all its shards) of ``repo``: nothing is written."""
    from specdeck.core.hub.install import InstallPlan, resolve_destination, select_files
    from specdeck.core.hub.paths import folder_name_problem
    from specdeck.core.hub.spec import parse_repo_spec

    spec = parse_repo_spec(repo, revision)
    destination = resolve_destination(dest)
    if name and (problem := folder_name_problem(name)):
        raise InvalidInputError(f"'{name}' cannot be a model folder name: {problem}.",
                                "Pick a plain folder name (letters, digits, '-', '_', '.').")
    client = client or HubClient(endpoint, token)
    info = client.model_info(spec.repo_id, revision=spec.revision)
    commit = str(info.sha)
    label = spec.revision or "main"
    listed = client.list_files(spec.repo_id, commit)
    keep, _skipped = select_files(listed, f"{spec.repo_id}@{label}")  # refuses unsafe names
    choices = gguf_choices(keep)
    if not choices:
        raise HubError(f"{spec.repo_id}@{label} holds no .gguf file.",
                       "For an EXL2 repository, install a branch: specdeck install REPO@BRANCH.")
    choice = pick(choices, wanted, spec.repo_id)
    missing = [f.path for f in choice.files if not f.sha256]
    if missing:
        raise HubError(f"{spec.repo_id}'s {', '.join(missing)} is not stored in LFS, so the Hub "
                       "gives no sha256 to verify it against.",
                       "SpecDeck installs only files it can verify; download it by hand.")
    split = split_name(choice.files[0].path)
    if split and split[2] != len(choice.files):
        raise HubError(f"{choice.main_file} is split into {split[2]} files, but "
                       f"{spec.repo_id} holds {len(choice.files)} of them.",
                       "The repository is incomplete; try another quantization.")
    folder = name or gguf_folder_name(spec.repo_id, choice)
    if problem := folder_name_problem(folder):
        raise InvalidInputError(f"'{folder}' cannot be a model folder name: {problem}.")
    return InstallPlan(repo_id=spec.repo_id, revision=label, commit=commit,
                       endpoint=client.endpoint, dest=destination, folder_name=folder,
                       files=choice.files, skipped=(), bits=None, head_bits=None), choice


def gguf_folder_name(repo_id: str, choice: GgufChoice) -> str:
    """The folder an install of ``choice`` goes into: ``<repo name>-<quant>``."""
    return f"{repo_id.split('/')[-1]}-{choice.quant or choice.name}"


def is_installed(choice: GgufChoice, folder) -> bool:
    """``folder`` holds every file of ``choice`` at its size (an install is atomic, so the
    folder exists only once complete)."""
    folder = Path(folder)
    return all((folder / Path(f.path).name).is_file()
               and (folder / Path(f.path).name).stat().st_size == f.size for f in choice.files)


def install_gguf(repo: str, wanted: str, dest, *, name: str | None = None, progress=None,
                 cancel=None, endpoint: str | None = None, token=None):
    """Plan and run one GGUF's install (core.hub.install: staged, verified, atomic)."""
    from specdeck.core.hub.install import install

    plan, _choice = plan_gguf_install(repo, wanted, dest, name=name, endpoint=endpoint, token=token)
    return install(plan.repo_id, plan.revision, dest, name=plan.folder_name, endpoint=endpoint,
                   token=token, progress=progress, cancel=cancel, plan=plan)


def list_gguf(repo: str, revision: str | None = None, *, endpoint: str | None = None,
              token=None) -> list[GgufChoice]:
    """The GGUF files of ``repo`` at ``revision`` (default main), grouped."""
    from specdeck.core.hub.spec import parse_repo_spec

    spec = parse_repo_spec(repo, revision)
    client = HubClient(endpoint, token)
    commit = str(client.model_info(spec.repo_id, revision=spec.revision).sha)
    return gguf_choices(client.list_files(spec.repo_id, commit))
