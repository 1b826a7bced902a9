"""Run an A/B plan: warm up, then every prompt on every arm, interleaved, greedy by default.

The protocol, and why:

- one engine, one loaded target for every arm (``Engine.set_drafter`` switches arms), so the
  arms differ only in their drafter;
- every prompt is tokenized once and all arms get the same prompt ids;
- warm-up runs first (``plan.warmup`` per arm, short, not counted): the first generations pay
  for kernel selection, allocator growth and page faults (a llama-server SpecDeck keeps up
  and that has already answered is not warmed again: ``ServerEngine.is_warm``);
- the arms are interleaved per prompt and the order alternates (A B, then B A, ...): slow
  drift (thermals, a background job) hits every arm alike, no arm always runs first after a
  switch, and half the switches are saved (a draft model may have to be reloaded on a switch);
- the loop checks ``cancel`` between runs and the engine checks it between steps; a cancelled
  run is kept in the records, marked, and left out of every statistic.

Everything is reported to ``on_event`` on the calling thread (the A/B page runs this in the
engine process, core/bench/worker.py, which batches the events back to the GUI). Nothing
here imports torch: engines do.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from specdeck.core.bench.plan import Arm, BenchPlan
from specdeck.core.bench.suites import Prompt, select_prompts
from specdeck.core.engines.base import (
    WARMUP_TEXT,
    DrafterKind,
    DrafterSpec,
    Engine,
    GenerationEvent,
    GenerationRequest,
    GenerationResult,
    LoadedModel,
    LoadProgress,
    StopReason,
)
from specdeck.core.engines.common import check_length
from specdeck.core.errors import CancelledError, InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.userpath import expand_user

from specdeck import __version__


@dataclass(frozen=True)
class RunSlot:
    """One scheduled generation: which arm, which prompt, which repeat."""

    index: int
    """0-based position in the schedule, warm-ups included."""
    arm: Arm
    prompt: Prompt
    repeat: int
    """0-based repeat; warm-ups count their own repeats."""
    warmup: bool = False


@dataclass(frozen=True)
class RunRecord:
    slot: RunSlot
    result: GenerationResult
    started_at: float
    """Wall-clock time (time.time) when the run started."""
    error: str | None = None
    """Why the run failed, when the plan skips failed runs (plan.on_error == "skip")."""

    @property
    def arm(self) -> str:
        return self.slot.arm.name

    @property
    def prompt_id(self) -> str:
        return self.slot.prompt.id

    @property
    def pair_key(self) -> tuple[str, int]:
        """What pairs a drafting arm's run with the reference's: the same prompt and repeat
        (the live reducer and the finished summary both pair by it)."""
        return self.slot.prompt.id, self.slot.repeat

    @property
    def lost_data(self) -> tuple[str, ...]:
        """What the run's answer lost on the way (a server's stream event that was not JSON):
        such a run's output is not all it made, so it is not compared; () for none."""
        return tuple(getattr(self.result.server, "lost", ()) or ())

    @property
    def complete(self) -> bool:
        return self.result.stats.stop_reason is not StopReason.CANCELLED

    @property
    def counted(self) -> bool:
        """Measured and complete: the runs that statistics use."""
        return self.complete and not self.slot.warmup


# Events ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Stage:
    """Preparation progress: resolving and loading the model, tokenizing, switching arms."""

    text: str
    fraction: float | None = None


@dataclass(frozen=True)
class PlanStarted:
    plan: BenchPlan
    prompts: tuple[Prompt, ...]
    schedule: tuple[RunSlot, ...]
    loaded: LoadedModel


@dataclass(frozen=True)
class RunStarted:
    slot: RunSlot
    total: int
    prompt_tokens: int


@dataclass(frozen=True)
class RunStep:
    """One engine event of the current run."""

    slot: RunSlot
    event: GenerationEvent


@dataclass(frozen=True)
class RunFinished:
    record: RunRecord
    total: int


BenchEvent = Stage | PlanStarted | RunStarted | RunStep | RunFinished
EventSink = Callable[[BenchEvent], None]


@dataclass(frozen=True)
class BenchRun:
    """Everything a plan's execution produced; ``core.bench.summary`` turns it into numbers."""

    plan: BenchPlan
    prompts: tuple[Prompt, ...]
    records: tuple[RunRecord, ...]
    loaded: LoadedModel
    environment: dict[str, Any]
    started_at: float
    finished_at: float
    cancelled: bool = False
    prompt_ids: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """The token ids every arm got, by prompt id."""

    def counted(self, arm: str | None = None) -> list[RunRecord]:
        return [r for r in self.records if r.counted and (arm is None or r.arm == arm)]


# Scheduling --------------------------------------------------------------------------------
def choose_prompts(plan: BenchPlan) -> tuple[Prompt, ...]:
    prompts = select_prompts(list(plan.suites))
    if plan.prompt_ids:
        by_id = {p.id: p for p in prompts}
        missing = [pid for pid in plan.prompt_ids if pid not in by_id]
        if missing:
            raise NotFoundError(
                f"The plan names prompts its suites do not have: {', '.join(missing)}.",
                f"Prompt ids in {', '.join(plan.suites)}: {', '.join(by_id)}.",
            )
        prompts = [by_id[pid] for pid in plan.prompt_ids]
    if plan.max_prompts is not None:
        prompts = prompts[: plan.max_prompts]
    return tuple(prompts)


def build_schedule(plan: BenchPlan, prompts: Sequence[Prompt]) -> tuple[RunSlot, ...]:
    """Warm-ups (each arm on the first prompt), then the measured runs, interleaved.

    Within each (repeat, prompt) every arm runs once; the arm order reverses every time,
    so each arm runs first as often as last and consecutive groups share their edge arm.
    """
    if not prompts:
        raise InvalidInputError("The plan selects no prompts.", "Pick at least one prompt.")
    slots: list[RunSlot] = []
    for repeat in range(plan.warmup):
        for arm in plan.arms:
            slots.append(RunSlot(len(slots), arm, prompts[0], repeat, warmup=True))
    group = 0
    for repeat in range(plan.repeats):
        for prompt in prompts:
            order = plan.arms if group % 2 == 0 else tuple(reversed(plan.arms))
            for arm in order:
                slots.append(RunSlot(len(slots), arm, prompt, repeat))
            group += 1
    return tuple(slots)


def environment(engine: Engine, loaded: LoadedModel) -> dict[str, Any]:
    """Versions and the machine, so a report says where its numbers come from."""
    env: dict[str, Any] = {
        "specdeck": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "engine": engine.name,
        "device": loaded.device,
        "dtype": loaded.dtype,
        "notes": list(loaded.notes),
    }
    from importlib import metadata

    for package in ("torch", "transformers", "exllamav2"):
        try:
            env[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            pass
    if engine.name == "exllamav2" or "cuda" in loaded.device:
        env.update(gpu_environment())
    return env


def gpu_environment(source=None) -> dict[str, Any]:
    """The GPUs CUDA sees, with their peak memory bandwidth (NVML): the roofline's denominator.
    With several GPUs the layers run one GPU after another, so the slowest one's peak is used."""
    from specdeck.core.gpu import read_once

    frame = read_once(source)
    gpus = [g for g in frame.gpus if g.cuda_index is not None]
    peaks = [g.memory_bandwidth_peak for g in gpus if g.memory_bandwidth_peak]
    return {
        "gpus": [{"cuda_index": g.cuda_index, "name": g.name, "memory_total": g.memory_total,
                  "memory_bandwidth_peak": g.memory_bandwidth_peak} for g in gpus],
        "memory_bandwidth_peak": min(peaks) if peaks else None,
        "gpu_telemetry": frame.headline,
    }


# Running -----------------------------------------------------------------------------------
def serves_arms(engine) -> bool:
    """Whether ``engine`` runs each arm on a server of its own (core.servers.engine: it
    switches servers with ``activate_arm``) rather than one loaded model."""
    return hasattr(engine, "activate_arm")


def run_plan(
    plan: BenchPlan,
    engine: Engine | None = None,
    on_event: EventSink | None = None,
    cancel: threading.Event | None = None,
) -> BenchRun:
    """Run ``plan`` to the end (or until ``cancel``) and return every record.

    ``engine``: an engine to use (it is loaded with the plan's model unless it already holds
    it, and left loaded); by default one is created from ``plan.engine`` and unloaded at the
    end. Raises CancelledError only when cancelled before the first measured run.
    """
    emit = on_event or (lambda _event: None)
    cancel = cancel or threading.Event()
    prompts = choose_prompts(plan)
    schedule = build_schedule(plan, prompts)
    owned = engine is None
    if engine is None:
        from specdeck.core.engines import create_engine

        engine = create_engine(plan.engine)
    try:
        arms_served = serves_arms(engine)
        if arms_served:  # a server engine: every arm is a server, checked before any run
            loaded = engine.prepare_plan(plan, _stage_sink(emit), cancel)
        else:
            _check_draft_folders(plan)  # before the target loads and arm A runs
            loaded = _load(plan, engine, emit, cancel)
        emit(Stage("Tokenizing prompts", None))
        prompt_ids = {
            p.id: tuple(engine.tokenize(p.text, apply_chat_template=plan.apply_chat_template))
            for p in prompts
        }
        if not arms_served:
            _check_context(plan, loaded, prompt_ids)
        env = environment(engine, loaded)  # before measuring: reading package metadata is slow
        # Servers warm when the plan starts (all of the plan's warm-ups run for the others).
        warm = {a.name for a in plan.arms if arms_served and engine.is_warm(a)}
        emit(PlanStarted(plan, prompts, schedule, loaded))
        started = time.time()
        records: list[RunRecord] = []
        current: Arm | None = None
        for slot in schedule:
            if cancel.is_set():
                break
            if arms_served and slot.arm != current:
                emit(Stage(f"Switching to {slot.arm.label}", None))
                loaded = engine.activate_arm(slot.arm, _stage_sink(emit), cancel)
                current = slot.arm
            elif not arms_served and (current is None or slot.arm.drafter != current.drafter):
                emit(Stage(f"Switching to {slot.arm.label}", None))
                drafter = _resolve_drafter(slot.arm.drafter, emit, cancel)
                loaded = engine.set_drafter(drafter, _stage_sink(emit), cancel)
                current = slot.arm
            if slot.warmup and slot.arm.name in warm:
                continue  # a server SpecDeck kept up and that has answered: already warm
            try:
                records.append(_run_one(plan, engine, slot, prompt_ids[slot.prompt.id],
                                        len(schedule), emit, cancel))
            except SpecDeckError as exc:
                if isinstance(exc, CancelledError) and cancel.is_set():
                    break  # what was measured stands (a server restarting when cancelled)
                if plan.on_error != "skip" or isinstance(exc, CancelledError):
                    raise
                record = _failed_record(plan, slot, str(exc))
                records.append(record)
                emit(RunFinished(record, len(schedule)))
        if not any(r.counted for r in records) and cancel.is_set():
            raise CancelledError("The A/B run was stopped before any measured run finished.")
        return BenchRun(
            plan=plan,
            prompts=prompts,
            records=tuple(records),
            loaded=loaded,
            environment=env,
            started_at=started,
            finished_at=time.time(),
            cancelled=cancel.is_set(),
            prompt_ids=prompt_ids,
        )
    finally:
        if owned:
            engine.unload()


def _check_draft_folders(plan: BenchPlan) -> None:

    from specdeck.core.engines.demo import is_demo_alias

    for arm in plan.arms:
        path = arm.drafter.model_path
        if arm.drafter.kind is DrafterKind.MODEL and path is not None \
                and not is_demo_alias(path) and not expand_user(path).is_dir():
            raise NotFoundError(f"Arm {arm.name}: the draft model folder {path} does not exist.",
                                "Fix the plan's draft folder; nothing was run.")


def _stage_sink(emit: EventSink) -> Callable[[LoadProgress], None]:
    return lambda progress: emit(Stage(progress.stage, progress.fraction))


def _resolve_drafter(drafter: DrafterSpec, emit: EventSink, cancel: threading.Event) -> DrafterSpec:
    """A draft model named "demo" is the embedded demo model (converted on first use): it
    drafts for a larger model of its family, such as SmolLM2-360M."""
    from specdeck.core.engines.demo import is_demo_alias, resolve_model

    if drafter.kind is DrafterKind.MODEL and drafter.model_path is not None \
            and is_demo_alias(drafter.model_path):
        return replace(drafter, model_path=resolve_model(drafter.model_path, _stage_sink(emit), cancel))
    return drafter


def _load(plan: BenchPlan, engine: Engine, emit: EventSink, cancel: threading.Event) -> LoadedModel:
    from specdeck.core.engines.demo import resolve_model

    emit(Stage("Finding the model", None))
    path = resolve_model(plan.model, _stage_sink(emit), cancel)
    loaded = engine.loaded
    if loaded is not None and loaded.model_path.resolve() == path.resolve():
        return loaded
    return engine.load(plan.load_spec(path), _stage_sink(emit), cancel)


def _check_context(plan: BenchPlan, loaded: LoadedModel, prompt_ids: dict[str, tuple[int, ...]]) -> None:
    """Before any run: the longest prompt must fit with max_new_tokens (the engines' check,
    made once for the plan rather than failing every run of that prompt)."""
    name, ids = max(prompt_ids.items(), key=lambda item: len(item[1]))
    check_length(len(ids), plan.max_new_tokens, loaded.max_seq_len, prompt=name)


def _failed_record(plan: BenchPlan, slot: RunSlot, error: str) -> RunRecord:
    """A run that failed: kept in the records with its error, counted by no statistic."""
    from specdeck.core.engines.base import GenerationStats

    stats = GenerationStats(prompt_tokens=0, new_tokens=0, prefill_s=0.0, decode_s=0.0, steps=0,
                            draft_steps=0, drafted=0, accepted=0,
                            stop_reason=StopReason.CANCELLED)
    result = GenerationResult(text="", token_ids=(), prompt_ids=(), stats=stats,
                              drafter=slot.arm.drafter, sampling=plan.sampling, engine=plan.engine)
    return RunRecord(slot, result, time.time(), error=error)


def _run_one(
    plan: BenchPlan,
    engine: Engine,
    slot: RunSlot,
    ids: tuple[int, ...],
    total: int,
    emit: EventSink,
    cancel: threading.Event,
) -> RunRecord:
    emit(RunStarted(slot, total, len(ids)))
    # A server's warm-up runs on other text: a drafter that keeps earlier requests (llama.cpp's
    # ngram-mod, whose flags SpecDeck may not know on a running server) would otherwise be
    # handed the start of the first prompt's answer.
    afresh = slot.warmup and serves_arms(engine)
    request = GenerationRequest(
        prompt=WARMUP_TEXT if afresh else slot.prompt.text,
        prompt_ids=None if afresh else ids or None,
        apply_chat_template=plan.apply_chat_template,
        max_new_tokens=min(plan.max_new_tokens, plan.warmup_tokens) if slot.warmup else plan.max_new_tokens,
        sampling=plan.sampling,
        stop_on_eos=plan.stop_on_eos,
    )
    started = time.time()
    result = engine.generate(request, lambda event: emit(RunStep(slot, event)), cancel)
    record = RunRecord(slot, result, started)
    emit(RunFinished(record, total))
    return record
