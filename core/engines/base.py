"""One protocol for every generation engine.

An engine loads a target model and optionally a drafter, runs one generation at a time,
streams :class:`GenerationEvent` objects to a callback as it goes, honours a cancel token
between steps, and returns a :class:`GenerationResult` with honest timings.

Speculative accounting (the definitions vLLM and llama.cpp use):

- a *verify step* is one forward of the target model that yields exactly one token of its
  own (the "bonus" / correction token) plus the draft tokens it accepted;
- ``drafted`` counts draft tokens proposed to the target, ``accepted + rejected == drafted``;
- ``new_tokens == steps + accepted`` whenever nothing was cut short (EOS or the token limit
  can truncate an accepted run; then ``new_tokens`` counts only the tokens emitted);
- acceptance rate = accepted / drafted; mean acceptance length = 1 + accepted / steps;
- decode tokens/s = new_tokens / decode_s, where decode_s excludes the prompt's prefill.

Nothing here imports torch or exllamav2: engines import them inside their own modules.

Extensions since the first version (names above are unchanged): ``Engine.load`` returns a
:class:`LoadedModel` (also ``Engine.loaded``); ``Engine.set_drafter`` switches the drafter without reloading the target
(A/B arms share one loaded target); ``GenerationResult.top2_gaps`` lets a losslessness check
tell float ties from real divergences; ``Availability.detail`` says what was found; ``DrafterSpec.adaptive``
(on by default) lets the PyTorch engine draft fewer than k tokens after rejections;
:class:`EngineUnavailableError` and
:class:`OutOfMemoryError` are the errors every engine raises for those two cases.
"""

from __future__ import annotations

import enum
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.exl2_facts import DEFAULT_AUTOSPLIT_RESERVE_MB, DEFAULT_CACHE_MODE
from specdeck.core.llama_flags import DRAFT_SIMPLE

MAX_DRAFT_TOKENS = 32
"""More draft tokens per step than any engine's verify batch (ExLlamaV2: max_q_size 8..16)."""
MAX_SERVER_DRAFT_TOKENS = 1024
"""The most tokens a server's drafter (``DrafterSpec.server_type``) may draft per step (k),
wherever SpecDeck takes one: an A/B plan, a llama-swap cmd or presets file (`swap set-draft`,
the llama-swap page), a tune's arguments and a saved tune's k. More than an engine here:
llama.cpp's n-gram types default to 48 (ngram-simple's size-m) and 64 (ngram-mod's n-max),
and llama.cpp 11434 checks those up to 1024 (common/arg.cpp)."""
NGRAM_SIZE_RANGE = (1, 16)
"""The n-gram lengths the engines' prompt-lookup drafter takes (``DrafterSpec.ngram_min`` to
``ngram_max``: `specdeck generate --ngram-min/--ngram-max` reads the same bounds)."""
DEFAULT_DRAFT_TOKENS = 4
"""k when nobody says: ExLlamaV2's num_draft_tokens default (and TabbyAPI's, which cannot
change it on its ExLlamaV2 backend). core.bench.fields's table reads it."""
DEFAULT_MAX_NEW_TOKENS = 256


class DrafterKind(str, enum.Enum):
    NONE = "none"
    MODEL = "model"
    NGRAM = "ngram"
    SERVER = "server"
    """A server arm that drafts as its server is configured (SpecDeck does not choose k)."""


@dataclass(frozen=True)
class DrafterSpec:
    """What proposes draft tokens, and how many per step (k)."""

    kind: DrafterKind = DrafterKind.NONE
    model_path: Path | None = None
    num_draft_tokens: int = DEFAULT_DRAFT_TOKENS
    ngram_max: int = 4
    """Longest suffix (in tokens) the n-gram drafter tries to match."""
    ngram_min: int = 2
    """Shortest match that lets the n-gram drafter propose up to num_draft_tokens."""
    ngram_short: int = 2
    """Most tokens a shorter match (down to one token) may propose; 0 = none (ngram.py)."""
    adaptive: bool = True
    """num_draft_tokens is the most per step; fewer after rejections (PyTorch engine only:
    ExLlamaV2 always drafts num_draft_tokens and reports its drafter with adaptive=False)."""
    server_type: str | None = None
    """The server's own name for this drafter (llama-server's --spec-type, e.g.
    "ngram-simple"); None for a drafter SpecDeck's engines run. Its k may reach
    ``MAX_SERVER_DRAFT_TOKENS``."""
    k_from_server: bool = False
    """The server drafts a number of tokens no flag sets (llama-server's ngram-cache):
    num_draft_tokens only stands in for the theory, and the label shows no k."""

    def __post_init__(self) -> None:
        most = MAX_DRAFT_TOKENS if self.server_type is None else MAX_SERVER_DRAFT_TOKENS
        if not 1 <= self.num_draft_tokens <= most:
            raise InvalidInputError(
                f"num_draft_tokens is {self.num_draft_tokens}; it must be 1 to {most}.",
                "Use 2 to 8; 4 is a good start.",
            )
        low, high = NGRAM_SIZE_RANGE
        if not low <= self.ngram_min <= self.ngram_max <= high:
            raise InvalidInputError(
                f"n-gram sizes {self.ngram_min}..{self.ngram_max} are invalid: "
                f"{low} <= ngram_min <= ngram_max <= {high}.",
                "The defaults (2..4) suit most prompts.",
            )
        if not 0 <= self.ngram_short <= MAX_DRAFT_TOKENS:
            raise InvalidInputError(
                f"ngram_short is {self.ngram_short}; it must be 0 to {MAX_DRAFT_TOKENS}.",
                "Use 0 (short matches draft nothing) to 2, the default.")
        if self.kind is DrafterKind.MODEL and self.model_path is None:
            raise InvalidInputError("A draft-model drafter needs the draft model's folder.")

    @property
    def label(self) -> str:
        if self.kind is DrafterKind.NONE:
            return "no draft"
        k = f"k<={self.num_draft_tokens}, adaptive" if self.adaptive else f"k={self.num_draft_tokens}"
        if self.server_type is not None and self.kind is not DrafterKind.MODEL:
            return self.server_type if self.k_from_server else f"{self.server_type} ({k})"
        if self.kind is DrafterKind.NGRAM:
            return f"n-gram ({k})"
        if self.kind is DrafterKind.SERVER:
            return "server-side drafting"
        name = self.model_path.name if self.model_path else "?"
        if self.server_type not in (None, DRAFT_SIMPLE):
            k = f"{self.server_type}, {k}"
        return f"draft {name} ({k})"


NO_DRAFT = DrafterSpec()


@dataclass(frozen=True)
class LoadSpec:
    """What to load and where. Engines ignore the fields that do not apply to them."""

    model_path: Path
    drafter: DrafterSpec = NO_DRAFT
    device: str = "auto"
    """"auto", "cpu", "cuda", "cuda:1", ..."""
    dtype: str = "auto"
    """"auto" (float32 on CPU: bfloat16 ties break greedy losslessness), "float16", ..."""
    max_seq_len: int | None = None
    cache_mode: str = DEFAULT_CACHE_MODE
    draft_cache_mode: str = DEFAULT_CACHE_MODE
    gpu_split: tuple[float, ...] | None = None
    """GB per GPU; None = autosplit."""
    autosplit_reserve_mb: tuple[float, ...] = DEFAULT_AUTOSPLIT_RESERVE_MB
    draft_rope_alpha: float | None = None
    """None = automatic (NTK alpha when the draft's native context is shorter)."""


@dataclass(frozen=True)
class SamplingSpec:
    """Greedy by default: A/B losslessness is then checkable token by token."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        problems = []
        for name in ("temperature", "top_p", "repetition_penalty"):
            if not math.isfinite(getattr(self, name)):
                problems.append(f"{name} {getattr(self, name)!r} is not a finite number")
        if problems:
            raise InvalidInputError("Invalid sampling settings: " + "; ".join(problems) + ".",
                                    "Use temperature 0 (greedy) for A/B runs.")
        if self.temperature < 0:
            problems.append(f"temperature {self.temperature:g} is negative")
        if self.top_k < 0:
            problems.append(f"top_k {self.top_k} is negative")
        if not 0.0 < self.top_p <= 1.0:
            problems.append(f"top_p {self.top_p:g} is outside (0, 1]")
        if self.repetition_penalty <= 0:
            problems.append(f"repetition_penalty {self.repetition_penalty:g} is not positive")
        if problems:
            raise InvalidInputError(
                "Invalid sampling settings: " + "; ".join(problems) + ".",
                "Use temperature 0 (greedy) for A/B runs.",
            )

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 or self.top_k == 1

    @property
    def label(self) -> str:
        if self.greedy and self.repetition_penalty == 1.0:
            return "greedy"
        parts = [f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top_k={self.top_k}")
        if self.top_p < 1.0:
            parts.append(f"top_p={self.top_p:g}")
        if self.repetition_penalty != 1.0:
            parts.append(f"rep={self.repetition_penalty:g}")
        return "sampled (" + ", ".join(parts) + ")"


GREEDY = SamplingSpec()


@dataclass(frozen=True)
class GenerationRequest:
    prompt: str = ""
    prompt_ids: tuple[int, ...] | None = None
    """Exact prompt tokens; when given they win over ``prompt`` (A/B arms share them)."""
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    sampling: SamplingSpec = GREEDY
    stop_on_eos: bool = True
    apply_chat_template: bool = False

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidInputError(
                f"max_new_tokens is {self.max_new_tokens}; it must be at least 1."
            )


WARMUP_TEXT = "Say hello in one short sentence."
"""What a server arm warms up on, instead of the plan's first prompt: a drafter that keeps
earlier requests (llama.cpp's ngram-mod) would otherwise be handed the start of that prompt's
answer before its first measured run."""


class StopReason(str, enum.Enum):
    EOS = "eos"
    MAX_NEW_TOKENS = "max_new_tokens"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class GenerationEvent:
    """One verify step's worth of output (or one token, without a drafter)."""

    text: str
    """Decoded text added by this step."""
    token_ids: tuple[int, ...]
    from_draft: tuple[bool, ...]
    """Per token of ``token_ids``: True if it was an accepted draft token."""
    step: int
    """1-based index of the verify step (target forward) that produced these tokens."""
    drafted: int
    """Draft tokens proposed in this step."""
    accepted: int
    """Of those, accepted."""
    new_tokens: int
    """Tokens generated so far, these included."""
    total_drafted: int
    total_accepted: int
    elapsed_s: float
    """Seconds since the start of decoding (after the prefill)."""
    draft_chars: int | None = None
    """How many leading characters of ``text`` came from accepted draft tokens (the rest is
    the target's own token); None when the engine cannot tell (ExLlamaV2 streams a step's
    text in one piece)."""

    @property
    def total_rejected(self) -> int:
        return self.total_drafted - self.total_accepted


def acceptance_rate(accepted: int, drafted: int) -> float | None:
    """The share of drafted tokens the target kept: accepted / drafted (None: nothing was
    drafted). A run's, and runs' pooled (their counts summed first, never their rates
    averaged)."""
    return accepted / drafted if drafted else None


def mean_acceptance_length(accepted: int, drafts: int) -> float | None:
    """Tokens a drafted verify step yields on average: 1 + accepted / drafts, where drafts
    counts the verify steps that carried a draft (not draft tokens) and the 1 is the token
    the target adds itself. The formula vLLM (vllm/v1/spec_decode/metrics.py:
    ``1 + num_accepted_tokens / num_drafts``), SGLang (spec_accept_length) and llama.cpp
    (its num_drafts counter) use, so SpecDeck's figure reads beside theirs. None without a
    draft: there is no length to average."""
    return 1.0 + accepted / drafts if drafts > 0 else None


# Acceptance by draft position: two figures, defined here once. Position i's token is kept
# only when every earlier one was, so accepted[i] counts the drafts whose first i+1 tokens
# were all kept.
SHARE_OF_DRAFTS = "share of all drafts"
"""accepted[i] / drafts: of every draft, the share whose first i+1 tokens were kept. It never
rises with i. vLLM's and llama.cpp's per-position rate (accepted_per_pos[i] / num_drafts), so
a server's counters always give it."""
OF_REACHED = "of the drafts that reached it"
"""accepted[i] / reached[i]: of the drafts that had a token at position i (an n-gram draft or
a draft model's early stop makes some shorter than k), the share that kept it. A server's
counters do not say how many drafts reached position i (only the drafts and the draft
tokens), so there it is known only when every draft was k tokens long."""


def count_at(counts: Sequence[int], i: int) -> int:
    """A run's count at position i; 0 past its end (nothing reached or was kept there)."""
    return counts[i] if i < len(counts) else 0


def position_shares(accepted: Sequence[int], drafts: int) -> tuple[float | None, ...]:
    """SHARE_OF_DRAFTS per position; None everywhere without a draft."""
    return tuple(a / drafts if drafts > 0 else None for a in accepted)


def position_rates(accepted: Sequence[int], reached: Sequence[int]) -> tuple[float | None, ...]:
    """OF_REACHED per position; () when ``reached`` is not known, None where no draft
    reached the position."""
    if not reached:
        return ()
    return tuple(a / d if d else None for a, d in zip(accepted, reached))


@dataclass(frozen=True)
class GenerationStats:
    prompt_tokens: int
    new_tokens: int
    prefill_s: float
    decode_s: float
    steps: int
    """Target forwards during decoding (verify steps)."""
    draft_steps: int
    """Steps in which the drafter proposed at least one token."""
    drafted: int
    accepted: int
    per_position_drafted: tuple[int, ...] = ()
    """Index i: how often a draft token was proposed at position i of a step (the drafts
    that reached position i); () where the source does not say (a server's counters, unless
    every draft was k long)."""
    per_position_accepted: tuple[int, ...] = ()
    """Index i: how often the draft token at position i was accepted."""
    stop_reason: StopReason = StopReason.MAX_NEW_TOKENS
    time_to_first_token_s: float | None = None
    peak_memory_bytes: int | None = None
    """Peak VRAM (GPU) or resident memory (CPU) during the run, when known."""
    memory_kind: str = ""
    """"vram" or "rss"."""
    weight_bytes_read: int | None = None
    """Bytes of model weights the decode read (see :func:`weights_read`); None when unknown."""

    @property
    def weight_read_rate(self) -> float | None:
        """Bytes of weights read per second of decoding: the memory-bandwidth roofline's
        numerator (bytes per generated token over time per generated token)."""
        if self.weight_bytes_read is None or self.decode_s <= 0:
            return None
        return self.weight_bytes_read / self.decode_s

    @property
    def rejected(self) -> int:
        return self.drafted - self.accepted

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        return acceptance_rate(self.accepted, self.drafted)

    @property
    def mean_acceptance_length(self) -> float | None:
        return mean_acceptance_length(self.accepted, self.draft_steps)

    @property
    def per_position_acceptance(self) -> tuple[float | None, ...]:
        """SHARE_OF_DRAFTS per position (position_shares)."""
        return position_shares(self.per_position_accepted, self.draft_steps)

    @property
    def per_position_of_reached(self) -> tuple[float | None, ...]:
        """OF_REACHED per position (position_rates); () where not known."""
        return position_rates(self.per_position_accepted, self.per_position_drafted)

    def to_json(self) -> dict[str, object]:
        """The fields plus the derived metrics, so JSON readers need not recompute them."""
        data: dict[str, object] = {f.name: getattr(self, f.name) for f in fields(self)}
        data.update(
            rejected=self.rejected,
            tokens_per_second=self.tokens_per_second,
            acceptance_rate=self.acceptance_rate,
            mean_acceptance_length=self.mean_acceptance_length,
            per_position_acceptance=self.per_position_acceptance,
            per_position_of_reached=self.per_position_of_reached,
        )
        return data


def weights_read(steps: int, draft_forwards: int, target_bytes: int | None,
                 draft_bytes: int | None = 0) -> int | None:
    """Bytes of weights a decode reads: the target's once per verify step (one forward reads
    every weight once, however many tokens it verifies) and the draft model's once per draft
    forward (one per drafted token; n-gram lookup reads no weights: pass 0 forwards).
    KV-cache reads are not counted: this is the weights' share of the memory traffic."""
    if target_bytes is None or (draft_forwards and draft_bytes is None):
        return None
    return steps * target_bytes + draft_forwards * (draft_bytes or 0)


@dataclass(frozen=True)
class GenerationResult:
    text: str
    token_ids: tuple[int, ...]
    prompt_ids: tuple[int, ...]
    stats: GenerationStats
    drafter: DrafterSpec
    sampling: SamplingSpec
    engine: str
    from_draft: tuple[bool, ...] = field(default=(), repr=False)
    top2_gaps: tuple[float, ...] = field(default=(), repr=False)
    """Per token of ``token_ids`` where the engine knows it: the target's top-1 minus top-2
    logit at that position. A greedy divergence where the gap is ~0 is a float tie (batch
    shape flipped the argmax), not a bug; empty when unknown (ExLlamaV2)."""
    server: Any = field(default=None, repr=False)
    """For a server arm: what the server reported beside the client's clock
    (core.servers.engine.ServerRun); None for in-process engines."""


@dataclass(frozen=True)
class LoadProgress:
    stage: str
    """Human-readable, e.g. "Loading target weights"."""
    fraction: float | None = None


@dataclass(frozen=True)
class Availability:
    """Whether an engine can run on this machine, and if not, why and what to do."""

    available: bool
    reason: str = ""
    install_hint: str = ""
    detail: str = ""
    """What was found when available (versions, build), for status lines."""


@dataclass(frozen=True)
class LoadedModel:
    """What an engine has loaded, for status lines and reports."""

    engine: str
    model_path: Path
    device: str
    dtype: str
    drafter: DrafterSpec
    max_seq_len: int
    """Longest prompt + output the loaded configuration accepts."""
    vocab_size: int
    eos_token_ids: tuple[int, ...] = ()
    notes: tuple[str, ...] = ()
    """Decisions worth telling the user, e.g. "paged=False: flash-attn not installed"."""

    @property
    def label(self) -> str:
        return f"{self.model_path.name} on {self.device} ({self.dtype}), {self.drafter.label}"


class EngineUnavailableError(SpecDeckError):
    """The engine cannot run on this machine (missing package, no CUDA, failed build)."""


class OutOfMemoryError(SpecDeckError):
    """The model, its draft or their caches did not fit; everything was freed again."""


EventCallback = Callable[[GenerationEvent], None]
ProgressCallback = Callable[[LoadProgress], None]


@runtime_checkable
class Engine(Protocol):
    """The contract every engine implements. All calls happen on one thread."""

    name: str

    @property
    def loaded(self) -> LoadedModel | None:
        """What is loaded now, or None."""
        ...

    def load(
        self,
        spec: LoadSpec,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LoadedModel: ...

    def set_drafter(
        self,
        drafter: DrafterSpec,
        progress: ProgressCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> LoadedModel:
        """Switch to another drafter (or none), keeping the loaded target."""
        ...

    def tokenize(self, text: str, apply_chat_template: bool = False) -> list[int]: ...

    def generate(
        self,
        request: GenerationRequest,
        on_event: EventCallback | None = None,
        cancel: threading.Event | None = None,
    ) -> GenerationResult: ...

    def unload(self) -> None: ...
