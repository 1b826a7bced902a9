"""Run the kit's steps in order inside one command's time budget, skipping done ones.

A step is a function of a :class:`StepContext` returning a small summary (JSON-able). It
may raise :class:`StepIncomplete` when it used up the command's time but can continue
(the extension build: ninja keeps what it compiled), or any exception, recorded verbatim
as the step's failure. A failure does not end the command: every later step that does not
need the failed one still runs (a build that fails on a new CUDA still leaves the
environment, the trained pair and its check measured), and a step whose ``needs`` did not
finish is recorded as skipped, with which and why. The driver never starts a step whose
estimate exceeds the time left, unless nothing has run yet in this command (a long step
then gets the whole budget and resumes next time if it must). ``after_step`` is called
after every step, so the report is written after each one, not only at the end: a command
cut at its limit still leaves everything measured until then.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpukit.state import DONE, FAILED, INCOMPLETE, SKIPPED, KitState, StepRecord, now_iso


class StepIncomplete(Exception):
    """The step ran out of time but can resume: run the same command again."""


@dataclass
class StepContext:
    state: KitState
    config: Any
    """The kit's :class:`gpukit.config.KitConfig`."""
    deadline: float
    """time.monotonic() by which the step must return."""
    log: Callable[[str], None] = print

    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.monotonic())


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    estimate_s: float
    """Expected seconds on the reference machine (one H100, 16 cores)."""
    run: Callable[[StepContext], dict[str, Any]]
    needs: tuple[str, ...] = ()
    """Steps that must be done before this one can run."""


@dataclass
class DriverOutcome:
    ran: list[str] = field(default_factory=list)
    failed: str | None = None
    next_step: str | None = None
    """The first step not done yet; None when all are done."""

    @property
    def finished(self) -> bool:
        return self.next_step is None and self.failed is None


def pending(steps: list[Step], state: KitState) -> list[Step]:
    return [s for s in steps if not state.is_done(s.name)]


def run_steps(
    steps: list[Step],
    state: KitState,
    config: Any,
    budget_s: float,
    log: Callable[[str], None] = print,
    only: str | None = None,
    clock: Callable[[], float] = time.monotonic,
    after_step: Callable[[DriverOutcome], None] = lambda _outcome: None,
) -> DriverOutcome:
    """Run pending steps (or just ``only``) until the budget is spent (see the module's
    docstring for failures and needs)."""
    started = clock()
    deadline = started + budget_s
    outcome = DriverOutcome()
    todo = [s for s in steps if s.name == only] if only else pending(steps, state)
    for step in todo:
        left = deadline - clock()
        if outcome.ran and step.estimate_s > left:
            log(f"-- {step.name}: needs ~{step.estimate_s:.0f} s, {left:.0f} s left; stopping here")
            break
        missing = [n for n in step.needs if not state.is_done(n)]
        if missing:
            why = ", ".join(f"{n} ({_status(state, n)})" for n in missing)
            state.save(StepRecord(step.name, SKIPPED, 0.0, now_iso(), {}, f"needs {why}"))
            log(f"-- {step.name}: skipped, needs {why}")
            after_step(outcome)
            continue
        log(f"== {step.name}: {step.title} (~{step.estimate_s:.0f} s)")
        step_started = clock()
        context = StepContext(state, config, deadline, log)
        status, summary, error = DONE, {}, ""
        try:
            summary = step.run(context) or {}
        except StepIncomplete as exc:
            status, error = INCOMPLETE, str(exc)
        except Exception as exc:  # every failure is evidence: record it verbatim
            status, error = FAILED, _verbatim(exc)
        seconds = clock() - step_started
        state.save(StepRecord(step.name, status, round(seconds, 2), now_iso(), summary, error))
        outcome.ran.append(step.name)
        log(f"   {status} in {seconds:.1f} s" + (f": {error.splitlines()[-1]}" if error else ""))
        after_step(outcome)
        if status == FAILED:
            outcome.failed = outcome.failed or step.name
        if only:
            break
    remaining = pending(steps, state)
    outcome.next_step = remaining[0].name if remaining else None
    return outcome


def _status(state: KitState, name: str) -> str:
    record = state.record(name)
    return "not run yet" if record is None else record.status


def _verbatim(exc: BaseException) -> str:
    text = getattr(exc, "verbatim", None)
    if text:
        return str(text)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-6000:]


class ToolFailed(RuntimeError):
    """An external tool (pip, the converter, the JIT build) failed; ``verbatim`` holds the
    end of its output, which goes into the report unchanged."""

    def __init__(self, message: str, verbatim: str):
        super().__init__(message)
        self.verbatim = f"{message}\n{verbatim}"


def describe(steps: list[Step], state: KitState) -> list[str]:
    """One line per step: status, seconds, error's last line."""
    lines = []
    for step in steps:
        record = state.record(step.name)
        if record is None:
            lines.append(f"  {step.name:<10} pending   (~{step.estimate_s:.0f} s)  {step.title}")
            continue
        tail = f"  {record.error.strip().splitlines()[-1][:120]}" if record.error.strip() else ""
        lines.append(f"  {step.name:<10} {record.status:<9} {record.seconds:7.1f} s{tail}")
    return lines


def log_to(path: Path) -> Callable[[str], None]:
    """A log function that prints and appends to ``path`` (the kit's log comes back in $OUT)."""

    def log(line: str) -> None:
        print(line, flush=True)
        with path.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")

    return log
