"""The local model library, with where each model came from when SpecDeck installed it, and
what the Models page shows of it: the scan with its unfinished installs, each model's badge
against config.yml's target, a Hub repository's variants and GGUF files with their install
states, and what an installed folder is for (TabbyAPI, or llama-server with its flags). The
page renders these; it decides none of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.hub.install import InstallMarker, read_marker
from specdeck.core.models import ModelInfo, ScanProblem, scan_models


@dataclass(frozen=True)
class LibraryEntry:
    model: ModelInfo
    source: InstallMarker | None  # None: not installed by SpecDeck

    def to_json(self) -> dict[str, Any]:
        m = self.model
        return {
            "name": m.name,
            "path": str(m.path),
            "model_type": m.arch.model_type,
            "parameters": m.parameters,
            "quantization": m.quant.method,
            "bits": m.quant.bits,
            "head_bits": m.quant.head_bits,
            "context_length": m.context_length,
            "vocab_size": m.arch.vocab_size,
            "files_bytes": m.files_bytes,
            "source": None if self.source is None else {
                "repo_id": self.source.repo_id,
                "revision": self.source.revision,
                "commit": self.source.commit,
                "installed_at": self.source.installed_at,
            },
        }


def scan_library(directories: Iterable[str | Path]) -> tuple[list[LibraryEntry], list[ScanProblem]]:
    """Every model folder under ``directories`` (see core.models.scan_models)."""
    models, problems = scan_models(directories)
    return [LibraryEntry(m, read_marker(m.path)) for m in models], problems


def installed_variants(directories: Iterable[str | Path]) -> dict[tuple[str, str], LibraryEntry]:
    """SpecDeck-installed models by (repo id, revision)."""
    entries, _ = scan_library(directories)
    return {(e.source.repo_id, e.source.revision): e for e in entries if e.source is not None}


# What the Models page shows: the library with its badges, a repository's variants with their
# install states, and what an installed model is for. The page renders these; it decides none.
@dataclass(frozen=True)
class LibraryScan:
    """The local library as the Models page lists it."""

    dirs: tuple[Path, ...]
    """The folders scanned: config.yml's model and draft folders, the install folder."""
    entries: tuple[LibraryEntry, ...]
    problems: tuple[ScanProblem, ...]
    """Folders that look like models but could not be read."""
    partials: tuple[Any, ...]
    """Unfinished installs in the install folder (core.hub.install.PartialInstall)."""
    errors: tuple[str, ...]
    """What went wrong reading config.yml (the install folder is still scanned)."""


def scan_for_install(config_path: str | Path | None, install_dir: str | Path | None) -> LibraryScan:
    """The library of config.yml's folders and ``install_dir``, with the unfinished installs
    there. A config.yml that cannot be read is reported in ``errors``, not raised: the
    install folder is still worth listing."""
    from specdeck.core.hub.install import find_partial_installs
    from specdeck.core.hub.locations import model_dirs

    extra = (install_dir,) if install_dir else ()
    errors = []
    try:
        dirs = model_dirs(config_path, extra)
    except Exception as exc:  # noqa: BLE001 - a broken config.yml: still show the install folder
        errors.append(str(exc))
        dirs = [Path(install_dir)] if install_dir else []
    entries, problems = scan_library(dirs)
    partials = find_partial_installs(install_dir) if install_dir else []
    return LibraryScan(tuple(dirs), tuple(entries), tuple(problems), tuple(partials), tuple(errors))


@dataclass(frozen=True)
class Badge:
    """A library model's compatibility with config.yml's target model."""

    verdict: str
    """A core.compat CompatVerdict value, "target" (the target itself) or "inconclusive"."""
    label: str
    summary: str


def target_badges(config_path: str | Path | None, drafts: Iterable[str | Path], cancel=None,
                  progress=None) -> dict[str, Badge]:
    """Each draft folder (by its path as given) checked against config.yml's target model
    (core.compat.check); {} when config.yml names no target folder on this machine.
    ``progress`` receives the badges found so far, after each one."""
    from specdeck.core.compat import check
    from specdeck.core.compat.report import CompatVerdict
    from specdeck.core.hub.locations import current_config

    doc = current_config(config_path)
    target = doc.target_model_path() if doc is not None else None
    if target is None or not Path(target).is_dir():
        return {}
    badges: dict[str, Badge] = {}
    for draft in drafts:
        if cancel is not None and cancel.is_set():
            break
        if Path(draft).resolve() == Path(target).resolve():
            badges[str(draft)] = Badge("target", "Target model", "config.yml's target model")
            continue
        try:
            report = check(target, draft, cancel=cancel)
            badges[str(draft)] = Badge(report.verdict.value, report.verdict.label, report.summary)
        except Exception as exc:  # noqa: BLE001 - one unreadable model must not hide the others
            badges[str(draft)] = Badge(CompatVerdict.INCONCLUSIVE.value, "Not checked", str(exc))
        if progress:
            progress(dict(badges))
    return badges


@dataclass(frozen=True)
class InstallState:
    """Whether a variant of a repository is in the library."""

    installed: bool = False
    """This exact version (the same commit) is installed."""
    text: str = ""
    """"installed", "older version installed", "unfinished (40%)", or "" (not installed)."""


@dataclass(frozen=True)
class RepoOffer:
    """A repository's EXL2 branches and GGUF files, and which of them are installed."""

    variants: Any
    """core.hub.variants.RepoVariants."""
    ggufs: tuple[Any, ...]
    """core.hub.gguf.GgufChoice, one per file (its shards together)."""
    installed: dict[tuple[str, str], LibraryEntry]
    partials: tuple[Any, ...]
    gguf_installed: frozenset[str]
    """The names of the GGUF choices installed in the install folder."""

    @property
    def repo_id(self) -> str:
        return self.variants.repo_id

    def state(self, variant) -> InstallState:
        """An EXL2 branch's state: installed at its commit, at an older one, or unfinished."""
        entry = self.installed.get((variant.repo_id, variant.revision))
        if entry is not None:
            same = entry.source.commit == variant.commit
            return InstallState(same, "installed" if same else "older version installed")
        for partial in self.partials:
            if (partial.repo_id, partial.revision) == (variant.repo_id, variant.revision):
                return InstallState(False, f"unfinished ({partial.fraction:.0%})")
        return InstallState()

    def gguf_state(self, choice) -> InstallState:
        installed = choice.name in self.gguf_installed
        return InstallState(installed, "installed" if installed else "")

    def gguf_folder(self, choice) -> str:
        """The folder an install of ``choice`` goes into (core.hub.gguf.gguf_folder_name)."""
        from specdeck.core.hub.gguf import gguf_folder_name

        return gguf_folder_name(self.repo_id, choice)


def repo_offer(repo_id: str, dirs: Iterable[str | Path], install_dir: str | Path | None,
               cancel=None) -> RepoOffer:
    """What ``repo_id`` offers (its branches, its GGUF files) against the library in ``dirs``
    and ``install_dir``."""
    from specdeck.core.hub.gguf import gguf_folder_name, is_installed, list_gguf
    from specdeck.core.hub.install import find_partial_installs
    from specdeck.core.hub.variants import list_variants

    dirs = list(dirs)
    found = list_variants(repo_id, cancel=cancel)
    installed = installed_variants([*dirs, install_dir] if install_dir else dirs)
    partials = find_partial_installs(install_dir) if install_dir else []
    ggufs = list_gguf(repo_id)
    gguf_installed = frozenset(c.name for c in ggufs if install_dir and is_installed(
        c, Path(install_dir) / gguf_folder_name(repo_id, c)))
    return RepoOffer(found, tuple(ggufs), installed, tuple(partials), gguf_installed)


@dataclass(frozen=True)
class InstalledUse:
    """What an installed model folder is for: a TabbyAPI draft (EXL2), or llama-server's."""

    gguf: Path | None
    """The GGUF file llama-server is given (the first shard); None: not a GGUF model."""

    @property
    def for_tabby(self) -> bool:
        """config.yml's draft_model can take it (TabbyAPI loads EXL2, not GGUF)."""
        return self.gguf is None

    @property
    def llama_server_flags(self) -> tuple[str, ...]:
        """The flags that make a llama-server draft with it; () for a TabbyAPI draft."""
        if self.gguf is None:
            return ()
        from specdeck.core import llama_flags

        # A draft model drafts only with --spec-type (check_args says so for a launch).
        return (llama_flags.DRAFT_MODEL[0], str(self.gguf), llama_flags.SPEC_TYPE,
                llama_flags.DRAFT_SIMPLE)


def installed_use(folder: str | Path) -> InstalledUse:
    ggufs = sorted(Path(folder).glob("*.gguf"))
    return InstalledUse(ggufs[0] if ggufs else None)
