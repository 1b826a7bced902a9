"""A stand-in for the A/B page's engine process (gui.bench_session.BenchSession, tested on
its own): it runs the page's plan here, in the test's process, and reports it done as the
process would. A test changes the finished run (``finish``) to make the case it needs."""

from __future__ import annotations

from specdeck.core.bench.runner import run_plan
from specdeck.core.bench.summary import summarize


class InProcessSession:
    alive = True
    running = False
    worker_pid = None

    def __init__(self):
        self.events = []

    def measure(self, plan):
        return run_plan(plan)

    def finish(self, run):
        """The run as the page will see it (as measured here)."""
        return run

    def start(self, plan):
        from specdeck.core.bench.worker import PlanDone

        run = self.finish(self.measure(plan))
        self.events = [PlanDone(run, summarize(run))]

    def drain(self, limit=None):
        events, self.events = self.events, []
        return events

    def stop(self):
        pass

    def shutdown(self, timeout_s=30.0):
        return True
