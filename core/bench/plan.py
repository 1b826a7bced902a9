"""What an A/B run does: the engine and model, the arms, the prompts, and how often.

A plan is plain data, saved as JSON beside its report so a run can be repeated exactly
(``BenchPlan.to_json`` / ``BenchPlan.from_json``). The first arm is the reference: it must
run without a drafter, every other arm's speed-up is paired against it, and with greedy
sampling every other arm's tokens must equal its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdeck.core.bench.fields import DEFAULT_SUITES, PLAN_FIELDS, out_of_range
from specdeck.core.engines.base import (
    DEFAULT_DRAFT_TOKENS,
    GREEDY,
    NO_DRAFT,
    DrafterKind,
    DrafterSpec,
    LoadSpec,
    SamplingSpec,
)
from specdeck.core.engines.demo import DEMO_ALIAS
from specdeck.core.errors import InvalidInputError

PLAN_VERSION = 1
COUNTS = ("repeats", "warmup", "max_new_tokens", "max_prompts", "warmup_tokens")
"""The plan's counts, bounded by ``core.bench.fields.PLAN_FIELDS`` (the CLI's flags and the
A/B page's spin boxes use the same ranges): a plan (or plan.json) asking for 1e9 repeats is
refused before anything starts."""
MAX_ARMS = 64
DEFAULT_WARMUP_TOKENS = PLAN_FIELDS["warmup_tokens"].default
"""Warm-up runs generate this many tokens at most: enough to touch every kernel path."""


@dataclass(frozen=True)
class Arm:
    """One side of the comparison: a name ("A", "B", ...) and the drafter it runs with.

    A server arm also names its server (``core.servers.arms.ServerArm``): a running one or a
    llama-server SpecDeck launches; then ``drafter`` describes what that server does."""

    name: str
    drafter: DrafterSpec = NO_DRAFT
    server: Any = None

    @property
    def label(self) -> str:
        if self.server is not None:
            return f"{self.name}: {self.drafter.label} @ {self.server.where}"
        return f"{self.name}: {self.drafter.label}"

    @property
    def is_baseline(self) -> bool:
        return self.drafter.kind is DrafterKind.NONE


def default_arms(
    draft_model: str | Path | None = None,
    ngram: bool = False,
    k: int = DEFAULT_DRAFT_TOKENS,
    adaptive: bool = True,
) -> tuple[Arm, ...]:
    """A = no draft, then B = the draft model and/or an n-gram arm, each with ``k``."""
    arms = [Arm("A")]
    if draft_model is not None:
        spec = DrafterSpec(DrafterKind.MODEL, Path(draft_model), num_draft_tokens=k, adaptive=adaptive)
        arms.append(Arm(arm_letter(len(arms)), spec))
    if ngram:
        arms.append(Arm(arm_letter(len(arms)), DrafterSpec(DrafterKind.NGRAM, num_draft_tokens=k,
                                                          adaptive=adaptive)))
    return tuple(arms)


def arm_letter(index: int) -> str:
    """The default name of the plan's arm at ``index``: A (the reference), B, C, ..."""
    return chr(ord("A") + index) if index < 26 else f"arm{index + 1}"


@dataclass(frozen=True)
class BenchPlan:
    engine: str = "torch"
    model: str = DEMO_ALIAS
    """A model folder, or "demo" for the embedded demo model."""
    arms: tuple[Arm, ...] = (Arm("A"),)
    suites: tuple[str, ...] = DEFAULT_SUITES
    """Built-in suite names or suite files (see core/bench/suites.py)."""
    prompt_ids: tuple[str, ...] = ()
    """Only these prompts of the suites (all when empty)."""
    max_prompts: int | None = None
    """At most this many prompts, in suite order (after ``prompt_ids``)."""
    max_new_tokens: int = PLAN_FIELDS["max_new_tokens"].default
    repeats: int = PLAN_FIELDS["repeats"].default
    warmup: int = PLAN_FIELDS["warmup"].default
    """Warm-up runs per arm before anything is measured (not counted)."""
    warmup_tokens: int = DEFAULT_WARMUP_TOKENS
    sampling: SamplingSpec = GREEDY
    apply_chat_template: bool = True
    stop_on_eos: bool = True
    """False: every run generates exactly ``max_new_tokens`` (equal lengths across arms)."""
    load: LoadSpec | None = None
    """Device, dtype, cache modes, split; ``model_path`` and ``drafter`` are set per run.
    None = the engine's defaults."""
    notes: tuple[str, ...] = field(default=())
    on_error: str = "stop"
    """When a run fails (a server that is down or answers an error): "stop" the plan, or
    "skip" the run (recorded with its error, left out of every statistic) and go on."""
    one_server_at_a_time: bool = False
    """Server plans: run one launched llama-server at a time (they share one GPU); else each
    launched arm's server stays up for the whole plan."""

    def __post_init__(self) -> None:
        if self.load is not None:
            # Only the load options count: the model and drafter come from the plan and arms.
            object.__setattr__(self, "load", replace(self.load, model_path=Path("."), drafter=NO_DRAFT))
        problems = []
        if not self.arms:
            problems.append("it has no arms")
        elif not self.arms[0].is_baseline:
            problems.append(f"its first arm ({self.arms[0].label}) has a drafter; the first arm is "
                            "the no-draft reference")
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            problems.append(f"arm names repeat ({', '.join(names)})")
        for name in COUNTS:
            value = getattr(self, name)
            if value is None and name == "max_prompts":
                continue
            problem = out_of_range(name, value)
            if problem:
                problems.append(problem)
        if len(self.arms) > MAX_ARMS:
            problems.append(f"it has {len(self.arms)} arms; at most {MAX_ARMS}")
        if not self.suites:
            problems.append("it names no prompt suite")
        if self.on_error not in ("stop", "skip"):
            problems.append(f"on_error is {self.on_error!r}; it must be stop or skip")
        if problems:
            raise InvalidInputError("This A/B plan is invalid: " + "; ".join(problems) + ".",
                                    "Fix the plan (or its JSON file) and start again.")

    @property
    def baseline(self) -> Arm:
        return self.arms[0]

    def require_comparison(self, fix: str) -> None:
        """An A/B compares arms with the reference: a plan with the reference alone (valid for
        a sweep's base, or a plan being edited) cannot run as one. ``fix``: what to do, worded
        for where the plan came from (the CLI's flags, a plan.json, the A/B page)."""
        if len(self.arms) < 2:
            raise InvalidInputError("Nothing to compare: the plan has no arm beside the "
                                    f"reference ({self.baseline.label}).", fix)

    def arm(self, name: str) -> Arm:
        for arm in self.arms:
            if arm.name == name:
                return arm
        raise KeyError(name)

    def load_spec(self, model_path: Path) -> LoadSpec:
        base = self.load or LoadSpec(model_path)
        return replace(base, model_path=model_path, drafter=NO_DRAFT)

    # JSON ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "version": PLAN_VERSION,
            "engine": self.engine,
            "model": self.model,
            "arms": [arm_to_json(a) for a in self.arms],
            "suites": list(self.suites),
            "prompt_ids": list(self.prompt_ids),
            "max_prompts": self.max_prompts,
            "max_new_tokens": self.max_new_tokens,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "warmup_tokens": self.warmup_tokens,
            "sampling": _sampling_to_json(self.sampling),
            "apply_chat_template": self.apply_chat_template,
            "stop_on_eos": self.stop_on_eos,
            "load": None if self.load is None else _load_to_json(self.load),
            "notes": list(self.notes),
            "on_error": self.on_error,
            "one_server_at_a_time": self.one_server_at_a_time,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchPlan:
        if not isinstance(data, dict):
            raise InvalidInputError("An A/B plan must be a JSON object.")
        version = data.get("version", PLAN_VERSION)
        if version != PLAN_VERSION:
            raise InvalidInputError(
                f"This A/B plan has version {version}; this SpecDeck reads version {PLAN_VERSION}.",
                "Update SpecDeck, or recreate the plan.",
            )
        try:
            load = data.get("load")
            return cls(
                engine=str(data.get("engine", "torch")),
                model=str(data.get("model", DEMO_ALIAS)),
                arms=tuple(arm_from_json(a) for a in data.get("arms", [{"name": "A"}])),
                suites=tuple(str(s) for s in data.get("suites", DEFAULT_SUITES)),
                prompt_ids=tuple(str(p) for p in data.get("prompt_ids", ())),
                **{name: data.get(name, PLAN_FIELDS[name].default) for name in COUNTS},
                sampling=SamplingSpec(**(data.get("sampling") or {})),
                apply_chat_template=bool(data.get("apply_chat_template", True)),
                stop_on_eos=bool(data.get("stop_on_eos", True)),
                load=None if load is None else _load_from_json(load),
                notes=tuple(str(n) for n in data.get("notes", ())),
                on_error=str(data.get("on_error", "stop")),
                one_server_at_a_time=bool(data.get("one_server_at_a_time", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInputError(f"This A/B plan is not readable: {exc!r}.",
                                    "Recreate it: every `specdeck bench --report DIR` writes "
                                    "DIR/plan.json.") from exc


def arm_to_json(arm: Arm) -> dict[str, Any]:
    """An arm as plan.json holds it (the A/B page keeps its server arms this way too)."""
    data = {"name": arm.name, "drafter": drafter_to_json(arm.drafter)}
    if arm.server is not None:
        data["server"] = arm.server.to_json()
    return data


def arm_from_json(data: dict[str, Any]) -> Arm:
    server = data.get("server")
    if server is not None:
        from specdeck.core.servers.arms import ServerArm

        server = ServerArm.from_json(server)
    return Arm(str(data["name"]), drafter_from_json(data.get("drafter") or {}), server)


def drafter_to_json(spec: DrafterSpec) -> dict[str, Any]:
    return {
        "kind": spec.kind.value,
        "model_path": None if spec.model_path is None else str(spec.model_path),
        "num_draft_tokens": spec.num_draft_tokens,
        "ngram_max": spec.ngram_max,
        "ngram_min": spec.ngram_min,
        "ngram_short": spec.ngram_short,
        "adaptive": spec.adaptive,
        "server_type": spec.server_type,
        "k_from_server": spec.k_from_server,
    }


def drafter_from_json(data: dict[str, Any]) -> DrafterSpec:
    path = data.get("model_path")
    server_type = _server_type(data.get("server_type"))
    k = data.get("num_draft_tokens", PLAN_FIELDS["k"].default)
    if server_type is not None:  # a server's own k, up to MAX_SERVER_DRAFT_TOKENS
        from specdeck.core.engines.base import MAX_SERVER_DRAFT_TOKENS

        if not (type(k) is int and 1 <= k <= MAX_SERVER_DRAFT_TOKENS):
            raise InvalidInputError(f"This A/B plan is invalid: a server drafter's k is {k!r}; "
                                    f"it must be a whole number from 1 to "
                                    f"{MAX_SERVER_DRAFT_TOKENS}.",
                                    "Fix the plan (or its JSON file) and start again.")
    else:
        k = _whole(k, "k")
    return DrafterSpec(
        kind=DrafterKind(data.get("kind", "none")),
        model_path=None if path is None else Path(path),
        num_draft_tokens=k,
        ngram_max=int(data.get("ngram_max", 4)),
        ngram_min=int(data.get("ngram_min", 2)),
        ngram_short=int(data.get("ngram_short", DrafterSpec.ngram_short)),
        adaptive=bool(data.get("adaptive", True)),
        server_type=server_type,
        k_from_server=bool(data.get("k_from_server", False)),
    )


def _server_type(value: Any) -> str | None:
    if value is None or (isinstance(value, str) and value.isprintable() and len(value) <= 64):
        return value
    raise InvalidInputError("This A/B plan is invalid: a drafter's server_type is not a short "
                            "name.", "Fix the plan (or its JSON file) and start again.")


def _whole(value: Any, name: str) -> int:
    """A plan file's count as written: 4, not 4.7 or "4" (int() would round or parse them)."""
    problem = out_of_range(name, value)
    if problem:
        raise InvalidInputError(f"This A/B plan is invalid: {problem}.",
                                "Fix the plan (or its JSON file) and start again.")
    return value


def _sampling_to_json(spec: SamplingSpec) -> dict[str, Any]:
    return {"temperature": spec.temperature, "top_k": spec.top_k, "top_p": spec.top_p,
            "repetition_penalty": spec.repetition_penalty, "seed": spec.seed}


_LOAD_FIELDS = ("device", "dtype", "max_seq_len", "cache_mode", "draft_cache_mode",
                "gpu_split", "autosplit_reserve_mb", "draft_rope_alpha")


def _load_to_json(spec: LoadSpec) -> dict[str, Any]:
    data = {name: getattr(spec, name) for name in _LOAD_FIELDS}
    for name in ("gpu_split", "autosplit_reserve_mb"):
        if data[name] is not None:
            data[name] = list(data[name])
    return data


def _load_from_json(data: dict[str, Any]) -> LoadSpec:
    values = {name: data[name] for name in _LOAD_FIELDS if name in data}
    for name in ("gpu_split", "autosplit_reserve_mb"):
        if values.get(name) is not None:
            values[name] = tuple(float(v) for v in values[name])
    return LoadSpec(Path("."), **values)
