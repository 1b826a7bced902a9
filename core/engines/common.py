"""What every local engine does the same way, written once.

- :func:`check_model_folder`: refuse, before anything heavy loads, a folder the engine
  cannot load (wrong quantization, no weights, no tokenizer), saying what to do;
- :func:`require_compatible_draft`: a draft model's token ids go straight into the target,
  so the pair must pass ``core.compat``'s check, the one ``specdeck check`` and the
  Compatibility page run (llama.cpp's vocabulary rules, BOS/EOS, the output head);
- :func:`eos_ids`: the tokens that end a generation (generation_config's list and the
  tokenizer's own);
- :func:`prompt_with_bos`: a prompt's ids begin with BOS exactly when TabbyAPI's would
  (``core.compat.special.adds_bos``, the rule the compatibility check compares);
- :func:`check_length`: the prompt plus the tokens asked for must fit the loaded context;
- :class:`LoadStages`: a load's progress as LoadProgress fractions, and where a cancel
  request interrupts it;
- :func:`out_of_memory`: an out-of-memory failure worded for the user (what was freed,
  what to try).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from specdeck.core.engines.base import LoadProgress, OutOfMemoryError, ProgressCallback
from specdeck.core.errors import CancelledError, InvalidInputError
from specdeck.core.models import ModelInfo, read_model


def check_model_folder(path: Path, role: str, *, loads: Iterable[str], wrong_quant: str,
                       wrong_quant_fix: str, weights: tuple[str, ...] = ("*.safetensors",),
                       tokenizer: str | None = None, tokenizer_note: str = "") -> ModelInfo:
    """The folder's ModelInfo, or InvalidInputError naming what the engine cannot load.

    ``loads``: the quantization methods the engine loads ("none" = unquantized);
    ``wrong_quant``: the sentence for another one ({role}, {name}, {label} filled in);
    ``weights``: globs of which one must match; ``tokenizer``: the file the engine needs
    (None: any tokenizer file), and ``tokenizer_note`` why."""
    info = read_model(path)
    if info.quant.method not in set(loads):
        raise InvalidInputError(wrong_quant.format(role=role, name=path.name, label=info.quant.label),
                                wrong_quant_fix)
    if not any(any(path.glob(pattern)) for pattern in weights):
        raise InvalidInputError(f"The {role} folder {path} has no weights ({', '.join(weights)}).",
                                "Download the model's weight files into that folder.")
    if tokenizer is not None and not (path / tokenizer).is_file():
        raise InvalidInputError(f"The {role} folder {path} has no {tokenizer}"
                                + (f"; {tokenizer_note}" if tokenizer_note else "."),
                                f"Copy {tokenizer} from the original (unquantized) model repository.")
    if tokenizer is None and not info.tokenizer_files:
        raise InvalidInputError(f"The {role} folder {path} has no tokenizer files.",
                                "Copy tokenizer.json and tokenizer_config.json from the original "
                                "model.")
    return info


def require_compatible_draft(target: Path, draft: Path, max_seq_len: int | None = None) -> tuple[str, ...]:
    """Refuse a draft that cannot speculate for ``target`` (core.compat's verdict,
    ``CompatVerdict.refused``); returns the check's warnings, and where it could not decide
    that it could not, for the loaded model's notes."""
    from specdeck.core.compat import Status, check

    report = check(target, draft, max_seq_len=max_seq_len, examples=1)
    if report.verdict.refused:
        raise InvalidInputError(f"Draft {draft.name}, target {target.name}: {report.summary}",
                                "Pick a draft model from the target's family (same tokenizer); "
                                "`specdeck suggest` lists candidates.")
    undecided = () if report.verdict.cleared else (
        f"compatibility: {report.summary} The A/B's output check tells whether drafting "
        "changes the output.",)
    return undecided + tuple(f"compatibility: {r.title}: {r.detail}" for r in report.rules
                             if r.status is Status.WARN)


def eos_ids(configured: object, tokenizer_eos: object) -> frozenset[int]:
    """generation_config's eos_token_id (an int or a list) and the tokenizer's, together."""
    ids: set[int] = set()
    if isinstance(configured, int):
        ids.add(configured)
    elif isinstance(configured, (list, tuple)):
        ids.update(int(i) for i in configured)
    if tokenizer_eos is not None:
        ids.add(int(tokenizer_eos))
    return frozenset(ids)


def prompt_with_bos(ids: list[int], bos_id: int | None, folder: Path) -> list[int]:
    """``ids`` (a prompt encoded without special tokens; a chat template's text may already
    begin with BOS) with BOS in front when the model's rule adds one and none is there: what
    TabbyAPI sends its backend (it strips a template's leading BOS text and lets the backend
    add the token, endpoints/OAI/utils/chat_completion.py)."""
    from specdeck.core.compat.special import adds_bos

    if bos_id is not None and ids[:1] != [bos_id] and adds_bos(folder).value:
        return [bos_id, *ids]
    return ids


def check_length(prompt_tokens: int, max_new_tokens: int, context: int, reserved: int = 0,
                 prompt: str = "") -> None:
    """``reserved``: tokens the engine needs beyond them (a drafting step's k); ``prompt``:
    which prompt, where there are several (an A/B plan's longest)."""
    total = prompt_tokens + max_new_tokens + reserved
    if total > context:
        extra = f" plus {reserved} for drafting" if reserved else ""
        name = f" {prompt}" if prompt else ""
        raise InvalidInputError(
            f"The prompt{name} ({prompt_tokens} tokens) plus max_new_tokens ({max_new_tokens}){extra} "
            f"is {total} tokens, more than the {context}-token context this model was loaded with.",
            "Shorten the prompt, lower max_new_tokens, or load the model with a longer context.")


def freed(kept: str | None) -> str:
    """What a failed load left: everything freed, or the target that stays without a draft."""
    return (f"it was freed again and {kept} stays loaded without a draft" if kept
            else "everything was freed again")


GENERATION_FREED = "the run's memory was freed and the model stays loaded"


def out_of_memory(doing: str, fix: str, left: str = GENERATION_FREED) -> OutOfMemoryError:
    """``left``: what the failure left (``freed(kept)`` for a load)."""
    return OutOfMemoryError(f"Ran out of memory while {doing}; {left}.", fix)


class LoadStages:
    """A load's progress (stage, fraction) for the engine's caller, checking ``cancel`` at
    every report: a cancelled load stops at its next stage or weight file."""

    def __init__(self, progress: ProgressCallback | None, cancel: threading.Event | None = None,
                 kept: str | None = None):
        self._progress = progress
        self._cancel = cancel
        self._cancelled = (f"Loading the draft cancelled; {kept} stays loaded without a draft."
                           if kept else "Loading cancelled; nothing stays loaded.")

    def check_cancel(self) -> None:
        if self._cancel is not None and self._cancel.is_set():
            raise CancelledError(self._cancelled)

    def __call__(self, stage: str, fraction: float | None = None) -> None:
        self.check_cancel()
        if self._progress is not None:
            self._progress(LoadProgress(stage, fraction))

    def span(self, label: str, start: float, end: float) -> Callable[[int, int], None]:
        """A (done, total) callback covering ``start``..``end`` of the load."""

        def callback(done: int, total: int) -> None:
            self(label, start + (end - start) * (done / total if total else 1.0))

        return callback
