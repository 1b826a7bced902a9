"""``check(target, draft)``: load both models' tokenizers, run the rules, return a report."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdeck.core.compat.cache import VocabCache
from specdeck.core.compat.compare import EXAMPLES, compare_vocabs
from specdeck.core.compat.load import CheckSide, check_cancel, load_model
from specdeck.core.compat.report import (
    CompatReport,
    CompatVerdict,
    RuleResult,
    SideSummary,
    Status,
    Timings,
    decide,
)
from specdeck.core.compat.rules import evaluate
from specdeck.core.compat.source import ModelSource
from specdeck.core.errors import InvalidInputError
from specdeck.core.models import MAX_CONTEXT

Progress = Callable[[Any], None]

MAX_SEQ_LEN_RANGE = (1, MAX_CONTEXT)
"""The context a check takes for the target (``compat --max-seq-len``, the Compatibility
page; None, which the page shows below the range, assumes its native context)."""


def check(
    target: str | Path | ModelSource,
    draft: str | Path | ModelSource,
    *,
    max_seq_len: int | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    examples: int = EXAMPLES,
    cache: VocabCache | None = None,
    progress: Progress | None = None,
    cancel: threading.Event | None = None,
) -> CompatReport:
    """Can ``draft`` speculate for ``target``? Both are folders or Hub ids (``org/name@rev``).

    ``max_seq_len`` is the context the target will run at (TabbyAPI's model.max_seq_len);
    None assumes its native context. Raises SpecDeckError for unreadable input and
    CancelledError when ``cancel`` is set.
    """
    low, high = MAX_SEQ_LEN_RANGE
    if max_seq_len is not None and not low <= max_seq_len <= high:
        raise InvalidInputError(
            f"max_seq_len must be a number of tokens from {low} to {high:,}, not "
            f"{max_seq_len}.")
    started = time.perf_counter()
    if progress:
        progress("Reading the target's tokenizer…")
    target_model = load_model(target, endpoint=endpoint, token=token, cache=cache, cancel=cancel)
    if progress:
        progress("Reading the draft's tokenizer…")
    draft_model = load_model(draft, endpoint=endpoint, token=token, cache=cache, cancel=cancel)
    check_cancel(cancel)
    if progress:
        progress("Comparing…")
    return compare_models(target_model, draft_model, max_seq_len=max_seq_len,
                          examples=examples, started=started)


def compare_models(
    target: CheckSide,
    draft: CheckSide,
    *,
    max_seq_len: int | None = None,
    examples: int = EXAMPLES,
    started: float | None = None,
) -> CompatReport:
    """The report for two already loaded models (suggestions reuse one loaded target)."""
    compare_started = time.perf_counter()
    comparison = compare_vocabs(target.vocab, draft.vocab, examples=examples)
    rules = evaluate(target, draft, comparison, max_seq_len)
    verdict = decide(rules)
    finished = time.perf_counter()
    compare_s = finished - compare_started
    total = (finished - started) if started is not None else (
        target.seconds + draft.seconds + compare_s)
    return CompatReport(
        verdict=verdict,
        summary=summarize(verdict, rules),
        target=side_summary(target),
        draft=side_summary(draft),
        rules=rules,
        vocab=comparison,
        timings=Timings(target.seconds, draft.seconds, compare_s, total),
        max_seq_len=max_seq_len,
    )


def summarize(verdict: CompatVerdict, rules: tuple[RuleResult, ...]) -> str:
    """One sentence for the top of the report."""
    failed = [r for r in rules if r.blocking and r.status is Status.FAIL]
    unknown = [r for r in rules if r.blocking and r.status is Status.UNKNOWN]
    warned = [r for r in rules if r.status is Status.WARN]
    if verdict is CompatVerdict.INCOMPATIBLE:
        names = "; ".join(r.title for r in failed)
        return f"This draft cannot speculate for this target ({names}). {failed[0].detail}"
    if verdict is CompatVerdict.INCONCLUSIVE:
        # The token-text rule says best how much could and could not be compared.
        deciding = next((r for r in unknown if r.key == "token_text"), unknown[0])
        return f"Could not decide. {deciding.detail}"
    if verdict is CompatVerdict.WARNINGS:
        # The checks are named by what they check ("Loadable by ExLlamaV2"): said as the
        # warning itself, a check's name read as good news.
        names = "; ".join(r.title for r in warned)
        plural = len(warned) > 1
        return (f"Compatible, with {len(warned)} warning{'s' if plural else ''} from the "
                f"check{'s' if plural else ''}: {names}.")
    return "Compatible: same tokenizer, same BOS/EOS handling, and the draft fits the target."


def side_summary(model: CheckSide) -> SideSummary:
    info, vocab, special = model.info, model.vocab, model.special
    return SideSummary(
        name=model.name,
        spec=model.source.spec,
        folder=model.folder,
        repo_id=model.source.repo_id,
        revision=model.source.revision,
        vocab_type=vocab.vocab_type.value,
        tokenizer_format=vocab.source_format,
        tokenizer_files=vocab.files,
        vocab_size=vocab.size,
        known_ids=vocab.known_ids,
        head_rows=model.head_rows,
        context_length=model.context_length,
        parameters=model.parameters,
        quantization=info.quant.label if info else None,
        bos_id=special.bos_id.value,
        eos_id=special.eos_id.value,
        add_bos=bool(special.add_bos.value),
        add_eos=bool(special.add_eos.value),
        stop_ids=special.stop_ids,
        has_chat_template=special.chat_template is not None,
        load_seconds=model.seconds,
        cache=model.cache,
    )
