"""``suggest(target)``: rank draft candidates from the local library and the known Hub list.

Local models are checked for real (the full rule set); incompatible ones are listed apart
with the reason, undecided ones (a tokenizer file missing) come last. Hub drafts come from
the curated list of the target's tokenizer family and stay "unverified" unless
``verify_hub`` fetches their tokenizer files and checks them too (one found incompatible is
listed apart like a local one: ``CompatVerdict.refused``).

Ranking: undecided drafts last, drafts that do not fit in VRAM beside the target just before
them; then the size ratio (target parameters / draft parameters): drafts 5-30x smaller than
the target are the ones that pay off in practice (a bigger draft costs too much per step, a
much smaller one guesses too poorly); then how sure the compatibility is (checked and clean,
checked with warnings, unverified); then closeness to the middle of the range. Whether a
local draft fits the GPUs beside the target comes from the VRAM planner (core.vram).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specdeck.core.compat.cache import VocabCache
from specdeck.core.compat.check import compare_models
from specdeck.core.compat.fit import fit_planner
from specdeck.core.compat.known import Family, KnownDraft, find_family
from specdeck.core.compat.load import CheckSide, check_cancel, load_model
from specdeck.core.compat.report import CompatReport, CompatVerdict
from specdeck.core.compat.source import ModelSource
from specdeck.core.errors import CancelledError, SpecDeckError
from specdeck.core.models import ModelInfo, scan_models

if TYPE_CHECKING:
    from specdeck.core.settings import Settings

SWEET_SPOT = (5.0, 30.0)
_SWEET_CENTER = math.sqrt(SWEET_SPOT[0] * SWEET_SPOT[1])

UNVERIFIED = "unverified"
ORIGIN_LOCAL = "local"
ORIGIN_HUB = "hub"

Progress = Callable[[Any], None]


@dataclass(frozen=True)
class Suggestion:
    rank: int
    name: str
    origin: str
    """"local" (in the model library) or "hub" (from the known-drafts list)."""
    path: Path | None
    repo_id: str | None
    revisions: tuple[str, ...]
    parameters: int | None
    ratio: float | None
    """Target parameters / draft parameters."""
    status: str
    """"compatible", "compatible_with_warnings", "unverified" (Hub, not checked) or
    "inconclusive" (checked, undecided: a tokenizer file is missing)."""
    warnings: tuple[str, ...]
    reason: str
    quantization: str | None = None
    source_url: str | None = None
    fits_vram: bool | None = None
    """Whether target + this draft fit the GPUs (core.vram); None: unknown (no GPU to plan
    on, a size that cannot be worked out, or a Hub draft not on disk)."""


@dataclass(frozen=True)
class Rejected:
    name: str
    location: str
    reason: str


@dataclass(frozen=True)
class SuggestionList:
    target: str
    target_parameters: int | None
    family: str | None
    suggestions: tuple[Suggestion, ...]
    rejected: tuple[Rejected, ...]
    scanned_dirs: tuple[Path, ...]
    problems: tuple[str, ...]
    seconds: float
    vram_note: str | None = None
    """Why no draft's VRAM fit is known, when none is."""


@dataclass(frozen=True)
class _Candidate:
    name: str
    origin: str
    parameters: int | None
    status: str
    report: CompatReport | None
    path: Path | None = None
    known: KnownDraft | None = None
    quantization: str | None = None
    note: str = ""
    fits_vram: bool | None = None


def suggest(
    target: str | Path | ModelSource,
    *,
    model_dirs: Iterable[str | Path] = (),
    config_path: str | Path | None = None,
    saved: Settings | None = None,
    include_hub: bool = True,
    verify_hub: bool = False,
    max_seq_len: int | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    limit: int | None = 10,
    gpus: str | None = None,
    bpw: float | None = None,
    cache: VocabCache | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> SuggestionList:
    """Ranked draft candidates for ``target`` (a folder or a Hub id).

    ``gpus``: GPU sizes in GB to plan VRAM for ("24,24"); None plans for this machine's GPUs.
    ``bpw``: the target's EXL2 bitrate, for a target folder that is not an EXL2 quant.
    Searched: the model library (``core.hub.locations.library_dirs``: ``config_path``'s
    folders, SpecDeck's extra ones in ``saved``, else on disk, and ``model_dirs``).
    """
    from specdeck.core.hub.locations import library_dirs

    started = time.perf_counter()
    target_model = load_model(target, endpoint=endpoint, token=token, cache=cache, cancel=cancel)
    dirs, problems = library_dirs(config_path, model_dirs, saved=saved)
    if progress:
        progress("Scanning the model library…")
    models, scan_problems = scan_models(dirs)
    problems.extend(f"{p.path}: {p.reason}" for p in scan_problems)
    fit = fit_planner(target_model.folder, config_path=config_path, gpus=gpus,
                      max_seq_len=max_seq_len, bpw=bpw)

    candidates: list[_Candidate] = []
    rejected: list[Rejected] = []
    for info in models:
        check_cancel(cancel)
        if progress:
            progress(f"Checking {info.name}…")
        outcome = _check_local(target_model, info, max_seq_len, cache, cancel)
        if isinstance(outcome, Rejected):
            rejected.append(outcome)
        elif outcome is not None:
            candidates.append(replace(outcome, fits_vram=fit.fits(info.path)))

    family = find_family(target_model.vocab)
    if include_hub and family is not None:
        installed = [m.name.lower() for m in models]
        for known in family.drafts:
            check_cancel(cancel)
            if _too_big(known.parameters, target_model.parameters):
                rejected.append(Rejected(known.repo, known.source,
                                         "as large as the target or larger"))
                continue
            if any(name.startswith(known.repo.split("/")[1].lower()) for name in installed):
                continue  # already in the library, suggested (or refused) above
            if progress and verify_hub:
                progress(f"Checking {known.repo} on the Hub…")
            hub = _hub_candidate(target_model, known, verify_hub, max_seq_len, endpoint, token,
                                 cache, cancel)
            if hub.report is not None and hub.report.verdict.refused:
                rejected.append(Rejected(known.repo, known.source, f"{hub.report.verdict.label}. "
                                         f"{hub.report.summary}"))
            else:
                candidates.append(hub)

    ranked = sorted(candidates, key=lambda c: _sort_key(c, target_model.parameters))
    if limit is not None:
        ranked = ranked[:limit]
    suggestions = tuple(_suggestion(i, c, target_model, family)
                        for i, c in enumerate(ranked, start=1))
    return SuggestionList(
        target=target_model.name,
        target_parameters=target_model.parameters,
        family=family.name if family else None,
        suggestions=suggestions,
        rejected=tuple(rejected),
        scanned_dirs=tuple(dirs),
        problems=tuple(problems),
        seconds=time.perf_counter() - started,
        vram_note=fit.note,
    )


def _too_big(draft_parameters: int | None, target_parameters: int | None) -> bool:
    return bool(draft_parameters and target_parameters and draft_parameters >= target_parameters)


def _check_local(
    target: CheckSide,
    info: ModelInfo,
    max_seq_len: int | None,
    cache: VocabCache | None,
    cancel: threading.Event | None,
) -> _Candidate | Rejected | None:
    if info.path.resolve() == target.folder.resolve():
        return None
    if _too_big(info.parameters, target.parameters):
        return Rejected(info.name, str(info.path), "as large as the target or larger")
    try:
        draft = load_model(ModelSource(str(info.path), folder=info.path), cache=cache,
                           cancel=cancel)
    except CancelledError:
        raise
    except SpecDeckError as exc:
        return Rejected(info.name, str(info.path), f"could not be read: {exc}")
    report = compare_models(target, draft, max_seq_len=max_seq_len)
    if report.verdict.refused:
        return Rejected(info.name, str(info.path), f"{report.verdict.label}. {report.summary}")
    return _Candidate(info.name, ORIGIN_LOCAL, info.parameters, report.verdict.value, report,
                      path=info.path, quantization=info.quant.label)


def _hub_candidate(
    target: CheckSide,
    known: KnownDraft,
    verify: bool,
    max_seq_len: int | None,
    endpoint: str | None,
    token: str | None,
    cache: VocabCache | None,
    cancel: threading.Event | None,
) -> _Candidate:
    unverified = _Candidate(known.repo, ORIGIN_HUB, known.parameters, UNVERIFIED, None,
                            known=known)
    if not verify:
        return unverified
    # EXL2 repos often keep only measurement.json on main: check a bitrate branch.
    revision = known.revisions[0] if known.revisions else None
    source = ModelSource(known.repo, repo_id=known.repo, revision=revision)
    try:
        draft = load_model(source, endpoint=endpoint, token=token, cache=cache, cancel=cancel)
    except CancelledError:
        raise
    except SpecDeckError as exc:
        return _Candidate(known.repo, ORIGIN_HUB, known.parameters, UNVERIFIED, None,
                          known=known, note=f"Its Hub files could not be checked: {exc}")
    report = compare_models(target, draft, max_seq_len=max_seq_len)
    return _Candidate(known.repo, ORIGIN_HUB, known.parameters, report.verdict.value, report,
                      known=known)


def _ratio(parameters: int | None, target_parameters: int | None) -> float | None:
    if not parameters or not target_parameters:
        return None
    return target_parameters / parameters


def _ratio_band(ratio: float | None) -> int:
    """0 inside the sweet spot, 1 near it, 2 far from it, 3 unknown."""
    if ratio is None:
        return 3
    low, high = SWEET_SPOT
    if low <= ratio <= high:
        return 0
    if low / 2.5 <= ratio <= high * 2:
        return 1
    return 2


_TIER = {CompatVerdict.COMPATIBLE.value: 0, CompatVerdict.WARNINGS.value: 1, UNVERIFIED: 2}


def _sort_key(candidate: _Candidate, target_parameters: int | None) -> tuple:
    ratio = _ratio(candidate.parameters, target_parameters)
    undecided = candidate.status == CompatVerdict.INCONCLUSIVE.value
    too_big = candidate.fits_vram is False
    distance = abs(math.log(ratio / _SWEET_CENTER)) if ratio else math.inf
    return (undecided, too_big, _ratio_band(ratio), _TIER.get(candidate.status, 3), distance,
            candidate.name.lower())


def _ratio_text(ratio: float | None) -> str:
    if ratio is None:
        return "Its size relative to the target is unknown."
    low, high = SWEET_SPOT
    if low <= ratio <= high:
        return f"{ratio:.1f}x smaller than the target: inside the {low:g}-{high:g}x sweet spot."
    if ratio < low:
        return (f"Only {ratio:.1f}x smaller than the target: below the {low:g}-{high:g}x sweet "
                "spot, so each draft step costs a larger share of a target step.")
    return (f"{ratio:.0f}x smaller than the target: above the {low:g}-{high:g}x sweet spot, so "
            "it guesses the target's tokens less often.")


def _check_text(candidate: _Candidate, family: Family | None) -> str:
    report = candidate.report
    if report is None:
        family_name = family.name if family else "unknown"
        text = (f"Same tokenizer family as the target ({family_name}, by its anchor tokens); "
                "not checked against its own files yet.")
        return f"{text} {candidate.note}".strip()
    where = "its Hub files" if candidate.origin == ORIGIN_HUB else "its files"
    if report.verdict is CompatVerdict.INCONCLUSIVE:
        return f"Checked against {where}, but the check could not decide. {report.summary}"
    if report.verdict is CompatVerdict.COMPATIBLE:
        return (f"Checked against {where}: compatible ({report.vocab.identical:,} token ids "
                "identical).")
    warned = "; ".join(r.title for r in report.warnings)
    return f"Checked against {where}: compatible with warnings ({warned})."


def _suggestion(rank: int, candidate: _Candidate, target: CheckSide,
                family: Family | None) -> Suggestion:
    ratio = _ratio(candidate.parameters, target.parameters)
    parts = [_check_text(candidate, family), _ratio_text(ratio)]
    known = candidate.known
    if candidate.fits_vram is not None:
        parts.append("Fits in VRAM beside the target." if candidate.fits_vram
                     else "Does not fit in VRAM beside the target.")
    if candidate.origin == ORIGIN_LOCAL:
        parts.append(f"Installed at {candidate.path}.")
    elif known is not None:
        parts.append(f"EXL2 quantization of {known.base_model} ({known.flavour}).")
    report = candidate.report
    return Suggestion(
        rank=rank,
        name=candidate.name,
        origin=candidate.origin,
        path=candidate.path,
        repo_id=known.repo if known else None,
        revisions=known.revisions if known else (),
        parameters=candidate.parameters,
        ratio=ratio,
        status=candidate.status,
        warnings=tuple(r.title for r in report.warnings) if report else (),
        reason=" ".join(parts),
        quantization=candidate.quantization,
        source_url=known.source if known else None,
        fits_vram=candidate.fits_vram,
    )
