"""Successive halving: the rounds a search runs (each twice the prompt-runs of the one before)
and which settings go on after each (the better half, except that within the machine's noise
of the cut the cheaper settings go on, not the luckier; ``survivors``), and which settings
are slower than no drafting beyond doubt (``clearly_slower``: a search of only those stops).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from specdeck.core.bench import winner
from specdeck.core.bench.noise import noise_band
from specdeck.core.bench.plan import BenchPlan
from specdeck.core.config.schema import draft_mode_of
from specdeck.core.draft_kind import DRAFT_MODEL, draft_kind
from specdeck.core.engines.base import DrafterKind

if TYPE_CHECKING:
    from specdeck.core.bench.grid import Cell, GridRow


def dropped_why(row: GridRow, halved: bool, lowest_kept: float | None) -> str:
    """Why ``row`` did not go on (``halved``: it was in the half the cut kept, and only the
    time left kept fewer). A figure that is no drafting result (its output changed, it drafted
    nothing, ...) is said in the winner's words (``Standing.not_a_result``)."""
    why = row.standing().not_a_result  # as survivors read it
    if why:
        return why
    if halved:
        return "the time left kept fewer settings"
    if lowest_kept is not None and row.score > lowest_kept:
        return "within the noise of the cut, and a cheaper setting went on"
    return "below the cut"


def pairs_of(row: GridRow) -> int:
    figure = row.overall
    return figure.speedup.n if figure is not None and figure.speedup is not None else 0


def setting_cost(cell: Cell) -> tuple[int, int]:
    """Cheaper settings first: no draft model before one (it takes memory and a forward of its
    own per token; what drafts with one: core.draft_kind, as the tune's prediction reads it,
    so an MTP or n-gram setting is never costed as one), then fewer tokens per step."""
    server, drafter = cell.arm.server, cell.arm.drafter
    if server is not None and server.launch is not None:
        kinds = _launch_kinds(tuple(server.launch.args))
    elif server is not None and server.tabby_launch is not None:
        settings = dict(server.tabby_launch.draft)
        named = bool(settings.get("draft_model_name"))  # none: config.yml's, unknown here
        kinds = [draft_kind(draft_mode_of(settings), True)] if named else []
    elif server is not None and server.tabby is not None:
        kinds = [draft_kind(None, bool(server.tabby.draft_model_name))]
    else:
        kinds = [draft_kind(None, drafter.kind is DrafterKind.MODEL
                            or drafter.model_path is not None)]
    return int(DRAFT_MODEL in kinds), drafter.num_draft_tokens


def _launch_kinds(args: tuple[str, ...]) -> list[str]:
    """What a llama-server launched with ``args`` drafts with, per spec type it names (none
    named: a -md draft alone, or nothing)."""
    from specdeck.core import llama_flags
    from specdeck.core.servers.llama_server import flag_value, spec_types_given

    draft = bool(flag_value(args, *llama_flags.DRAFT_MODEL))
    return [draft_kind(t, draft) for t in spec_types_given(args) or [None]]


SLOWER_NOISE_MULTIPLE = 2.0
"""How many times the machine's noise below 1.0 a setting's median speed-up must lie (its
interval below 1.0 too) for the search to call it clearly slower (``clearly_slower``)."""


def clearly_slower(row: GridRow, noise_share: float) -> bool:
    """Whether ``row`` is slower than no drafting beyond doubt: its speed-up's 95% interval
    lies below 1.0 and its median more than ``SLOWER_NOISE_MULTIPLE`` times the machine's
    noise below it. More rounds cannot make such a setting the winner (the winner beats no
    drafting: core.bench.winner), so a search whose settings left are all clearly slower
    stops: in tune_search (2026-11-27, structured) three rounds more of draft-model settings
    at 0.41x [0.40, 0.45] took a third of the search's time."""
    figure = row.overall
    speedup = None if figure is None else figure.speedup
    return winner.clearly_slower(speedup) and \
        speedup.median < winner.NO_DRAFT_SPEEDUP * (1 - SLOWER_NOISE_MULTIPLE * noise_share)


def survivors(rows: Sequence[GridRow], noise_share: float) -> set[str]:
    """The arm names that go on to the next round: half of them (rounded up). Settings above
    the cut by more than the noise go on; those within the noise of the cut
    (``noise_band``) cannot be told apart by this round, so the cheaper of them
    (``setting_cost``) fill the places left, not the luckier. Each row is read through its
    ``Standing`` (core.bench.winner), as the winner is: a setting whose output changed never
    goes on; one whose figure is not a drafting result (it drafted nothing, nobody can tell
    whether it drafted, its output was never checked, its speed unknown: its score is no
    evidence for it) goes on only when no setting's figure is one (later prompts may give it
    something to copy, or runs that keep their data)."""
    standings = {r.cell.arm.name: r.standing() for r in rows}
    ranked = sorted((r for r in rows if not standings[r.cell.arm.name].diverged),
                    key=lambda r: r.score, reverse=True)
    if not ranked:
        return set()
    keep = max(1, math.ceil(len(ranked) / 2))
    # with no drafting result at all, the rest are told apart the same way
    pool = [r for r in ranked if standings[r.cell.arm.name].not_a_result is None] or ranked
    cut = pool[min(keep, len(pool)) - 1].score
    band = [r for r in pool if abs(r.score - cut) <= cut * noise_band(noise_share,
                                                                      pairs_of(r))]
    sure = [r for r in pool[:keep] if r not in band]
    band.sort(key=lambda r: (setting_cost(r.cell), -r.score))
    return {r.cell.arm.name for r in [*sure, *band][:keep]}


def plan_rounds(base: BenchPlan, prompts, n_cells: int) -> list[BenchPlan]:
    """One round per halving of the cells; each runs twice the prompt-runs of the round before:
    one prompt of each suite once (one prompt alone where the plan has too few prompt-runs
    to double that every round), then more prompts (taken from each suite in turn), then
    every prompt as many times as that makes (up to the full plan). The last round runs every
    prompt at least once. Two cells or fewer: the full plan alone."""
    if n_cells <= 2:
        return [base]
    interleaved = interleaved_ids(prompts)
    full = len(interleaved) * base.repeats
    halvings = math.ceil(math.log2(n_cells))
    suites = len({p.suite for p in prompts})
    first = suites if suites * 2 ** (halvings - 1) <= full else 1
    plans = []
    for number in range(halvings):
        size = first * 2 ** number
        if number == halvings - 1:
            size = max(size, len(interleaved))
        if size >= full:
            plans.append(base)
            break
        ids = interleaved[:size] if size < len(interleaved) else interleaved
        plans.append(replace(base, prompt_ids=tuple(ids), max_prompts=None,
                             repeats=max(1, size // len(interleaved)),
                             warmup=min(base.warmup, 1)))
    return plans


def interleaved_ids(prompts) -> list[str]:
    """Prompt ids taken from each suite in turn: any prefix is as even across suites as it
    can be."""
    by_suite: dict[str, list[str]] = {}
    for p in prompts:
        by_suite.setdefault(p.suite, []).append(p.id)
    return [ids[i] for i in range(max(map(len, by_suite.values())))
            for ids in by_suite.values() if i < len(ids)]
