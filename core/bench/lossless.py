"""Is an A/B's drafting arm lossless: its paired runs compared with the reference's.

Greedy plans only (a sampled plan's outputs differ by design). Each pair is compared token by
token (or character by character for servers, which give no ids) by core.engines.lossless,
float ties told from real divergences; a divergence is reported with the agreed text before
it, decoded by the target's tokenizer when there is one. A run that lost data (a stream
event that was not JSON) is not compared: what it returned is not all it made.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdeck.core.bench.runner import BenchRun, RunRecord
from specdeck.core.engines.lossless import OutputMatch, TokenComparison, compare_runs

Decoder = Callable[[Sequence[int]], str]


TEXT_CONTEXT_TOKENS = 12
"""Tokens of agreed text shown before a divergence."""


@dataclass(frozen=True)
class DivergenceReport:
    """One run whose tokens differ from the reference's run of the same prompt and repeat."""

    prompt_id: str
    repeat: int
    position: int
    """Index of the first differing generated token (character, for server arms)."""
    reference_token: int | None
    candidate_token: int | None
    tie: bool
    """True when the target's top-2 logits were (near) equal there: a float tie."""
    gap: float | None
    context: str
    """The agreed text just before the divergence."""
    reference_text: str
    candidate_text: str
    unit: str = "token"
    """What ``position`` counts: "token", or "character" for runs without token ids."""
    ended: str = ""
    """When one output is shorter: which one ends at ``position`` ("this arm" or "the
    reference") while the other goes on; "" for a differing token."""


@dataclass(frozen=True)
class LosslessCheck:
    checkable: bool
    reason: str = ""
    """Why not checkable (e.g. "not checkable: sampled")."""
    compared: int = 0
    identical: int = 0
    ties: int = 0
    divergences: tuple[DivergenceReport, ...] = ()
    """Real divergences and ties, in run order."""
    not_compared: int = 0
    """Paired runs left out because a run lost data (a stream event that was not JSON): what
    it returned is not all it made, so comparing it could only pass by chance."""
    not_compared_why: tuple[str, ...] = ()

    @property
    def diverged(self) -> int:
        return sum(1 for d in self.divergences if not d.tie)

    @property
    def verdict(self) -> str:
        if not self.checkable:
            return self.reason
        left_out = (f"; {self.not_compared} not compared (lost data: "
                    f"{self.not_compared_why[0]})" if self.not_compared else "")
        if not self.compared:
            if self.not_compared:
                return (f"not checked: every paired run lost data ({self.not_compared}: "
                        f"{self.not_compared_why[0]})")
            return "not checked: no paired runs"
        if self.diverged:
            return f"NOT lossless: {self.diverged} of {self.compared} runs diverged{left_out}"
        if self.ties:
            return f"lossless up to float ties ({self.ties} of {self.compared} runs){left_out}"
        return f"lossless: {self.identical} of {self.compared} runs identical{left_out}"

    def to_json(self) -> dict[str, Any]:
        return {
            "checkable": self.checkable, "reason": self.reason, "compared": self.compared,
            "identical": self.identical, "ties": self.ties, "diverged": self.diverged,
            "not_compared": self.not_compared, "not_compared_why": list(self.not_compared_why),
            "verdict": self.verdict, "divergences": list(self.divergences),
        }


def compare_pair(reference: RunRecord, candidate: RunRecord
                 ) -> tuple[TokenComparison, str] | str:
    """One paired run of a greedy plan against the reference's run of the same prompt and
    repeat, as the summary's check (:func:`check_lossless`) and the live view
    (core.bench.live.check_output) both compare it: the comparison and its unit
    (core.engines.lossless.compare_runs: ties told from divergences), or, where a run of the
    pair lost data, what it lost (not compared: what it returned is not all it made)."""
    losses = [*reference.lost_data, *candidate.lost_data]
    if losses:
        return losses[0]
    return compare_runs(reference.result, candidate.result)


def check_lossless(run: BenchRun, matched: list[tuple[RunRecord, RunRecord]],
                   decoder: LazyDecoder) -> LosslessCheck:
    """Every paired run of a greedy plan compared with the reference's (:func:`compare_pair`);
    runs that lost data are left out, with why."""
    if not run.plan.sampling.greedy:
        return LosslessCheck(False, "not checkable: sampled (outputs differ by design)")
    identical = ties = compared = 0
    found = []
    lost: list[str] = []
    for reference, candidate in matched:
        compared_pair = compare_pair(reference, candidate)
        if isinstance(compared_pair, str):
            lost.append(compared_pair)
            continue
        compared += 1
        comparison, unit = compared_pair
        if comparison.lossless:
            identical += 1
            continue
        tie = comparison.verdict is OutputMatch.TIE
        ties += tie
        ended = _which_ended(comparison)
        if unit == "character":
            found.append(_text_divergence(reference, candidate, comparison.first_divergence or 0,
                                          ended))
            continue
        found.append(_divergence(reference, candidate, comparison.first_divergence or 0,
                                 comparison.reference_token, comparison.candidate_token,
                                 tie, comparison.gap, decoder, ended))
    return LosslessCheck(True, "", compared, identical, ties, tuple(found), len(lost),
                         tuple(dict.fromkeys(lost)))


def _which_ended(comparison) -> str:
    """For a PREFIX comparison: which output ended first, and after how much of the other."""
    if comparison.verdict is not OutputMatch.PREFIX:
        return ""
    if comparison.candidate_length < comparison.reference_length:
        return (f"this arm's output ends here ({comparison.candidate_length} of the "
                f"reference's {comparison.reference_length})")
    return (f"the reference's output ends here ({comparison.reference_length} of this arm's "
            f"{comparison.candidate_length})")


def _divergence(reference: RunRecord, candidate: RunRecord, position: int,
                ref_token: int | None, cand_token: int | None, tie: bool, gap: float | None,
                decoder: LazyDecoder, ended: str = "") -> DivergenceReport:
    ref_ids = reference.result.token_ids
    cand_ids = candidate.result.token_ids
    before = ref_ids[max(0, position - TEXT_CONTEXT_TOKENS):position]
    return DivergenceReport(
        prompt_id=reference.prompt_id,
        repeat=reference.slot.repeat,
        position=position,
        reference_token=ref_token,
        candidate_token=cand_token,
        tie=tie,
        gap=gap,
        context=decoder(before),
        reference_text=decoder(ref_ids[position:position + 4]),
        candidate_text=decoder(cand_ids[position:position + 4]),
        ended=ended,
    )


def _text_divergence(reference: RunRecord, candidate: RunRecord, position: int,
                     ended: str = "") -> DivergenceReport:
    ref, cand = reference.result.text, candidate.result.text
    return DivergenceReport(
        prompt_id=reference.prompt_id, repeat=reference.slot.repeat, position=position,
        reference_token=None, candidate_token=None, tie=False, gap=None,
        context=ref[max(0, position - 40):position],
        reference_text=ref[position:position + 16], candidate_text=cand[position:position + 16],
        unit="character", ended=ended)


class LazyDecoder:
    """Token ids to text: the caller's decoder, or the target's tokenizer.json read once."""

    def __init__(self, decode: Decoder | None, model_path: Path):
        self._decode = decode
        self._model_path = model_path
        self._tried = decode is not None

    def __call__(self, ids: Sequence[int]) -> str:
        if not self._tried:
            self._tried = True
            self._decode = _tokenizer_decoder(self._model_path)
        if not ids:
            return ""
        if self._decode is None:
            return " ".join(f"<{i}>" for i in ids)
        return self._decode(list(ids))


def _tokenizer_decoder(model_path: Path) -> Decoder | None:
    file = Path(model_path) / "tokenizer.json"
    if not file.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(file))
    except Exception:  # noqa: BLE001 - any unreadable tokenizer: show ids instead
        return None
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=False)
