"""The servers SpecDeck launched for a plan's arms (llama-servers, TabbyAPIs), kept between plans.

One server per arm, started on the arm's first activation and kept up while it fits: a grid
or a search reuses an engine across plans, so its reference and the settings of the next
round stay loaded and only what must go is restarted (``make_room`` stops the one used
longest ago). The pool also remembers, per server, whether it has answered since it started
(``is_warm``: its first-request costs are paid) and which prompts it has run (a drafter that
remembers earlier requests must meet a prompt afresh: ``ServerEngine._afresh``).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from specdeck.core import appdirs


class ServerPool:
    def __init__(self, log_dir: Path | None = None):
        self._log_dir = log_dir
        self._managed: dict = {}
        """Arm name -> its running server (core.servers.llama_server.ManagedServer or
        core.servers.tabby_launch.ManagedTabby)."""
        self._used: dict[str, int] = {}
        """Arm name -> when it was last activated (a counter): the least recent goes first."""
        self.seen: dict[str, set[str]] = {}
        """Arm name -> the prompts its server has run since it started."""
        self._served: set[str] = set()
        """Arms whose server has answered a request since it started."""
        self.starts = 0
        """Servers started (restarts among them)."""

    def get(self, name: str):
        """The running server of arm ``name`` (None: none started, or stopped)."""
        return self._managed.get(name)

    def __contains__(self, name: str) -> bool:
        return name in self._managed

    def running(self) -> dict[str, int]:
        """Arm name -> process id of each server started and kept up."""
        return {name: server.process.pid for name, server in self._managed.items()
                if server.process is not None}

    def retain(self, wanted: dict, keep_others: bool) -> None:
        """Before a plan: stop each server whose arm now names another launch (``wanted``:
        arm name -> its launch profile), and those of arms the plan does not use unless
        ``keep_others`` (an engine that keeps what fits: a search's next round uses them)."""
        self._rename(wanted)
        for name, running in list(self._managed.items()):
            if wanted.get(name, running.profile if keep_others else None) != running.profile:
                self.stop(name)

    def _rename(self, wanted: dict) -> None:
        """A server already running a wanted launch under another arm's name (the tune's
        verification calls its finalist W) serves it under the new name, with what it has
        run and answered: on a GPU box a restart reloads a 30-70B model."""
        for name, profile in wanted.items():
            if self._managed.get(name) is not None and self._managed[name].profile == profile:
                continue
            spare = next((other for other, running in self._managed.items()
                          if other not in wanted and running.profile == profile), None)
            if spare is None:
                continue
            self.stop(name)  # what ran under this name is another launch
            self._managed[name] = self._managed.pop(spare)
            self.seen[name] = self.seen.pop(spare, set())
            self._served.discard(name)
            if spare in self._served:
                self._served.discard(spare)
                self._served.add(name)
            if spare in self._used:
                self._used[name] = self._used.pop(spare)

    def start(self, name: str, launch, tabby: bool, cancel: threading.Event | None) -> object:
        """Start arm ``name``'s server from ``launch`` (a TabbyLaunch when ``tabby``, else a
        LaunchProfile); ``make_room`` first where their number is limited."""
        if tabby:
            from specdeck.core.servers.tabby_launch import ManagedTabby

            running = ManagedTabby(launch, self._log_path(name))
        else:
            from specdeck.core.servers.llama_server import ManagedServer

            running = ManagedServer(launch, self._log_path(name))
        running.start(cancel)
        self.starts += 1
        self._managed[name] = running
        self.seen[name] = set()
        self._served.discard(name)
        return running

    def use(self, name: str) -> None:
        """Arm ``name`` is the arm of the moment: the last to be stopped to make room."""
        self._used[name] = max(self._used.values(), default=0) + 1

    def make_room(self, limit: int | None) -> None:
        """Stop servers, the least recently used first, until one more fits ``limit``."""
        if limit is None:
            return
        while self._managed and len(self._managed) >= limit:
            self.stop(min(self._managed, key=lambda n: self._used.get(n, 0)))

    def stop(self, name: str) -> None:
        server = self._managed.pop(name, None)
        if server is not None:
            server.stop()

    def keep_only(self, names: set[str]) -> None:
        """Stop the servers of every arm not in ``names``."""
        for name in [n for n in self._managed if n not in names]:
            self.stop(name)

    def stop_all(self) -> None:
        for server in self._managed.values():
            server.stop()
        self._managed.clear()

    def answered(self, name: str) -> None:
        """Arm ``name``'s server answered a request (its first-request costs are paid)."""
        if name in self._managed:
            self._served.add(name)

    def is_warm(self, name: str) -> bool:
        """Whether arm ``name``'s server is up and has answered since it started."""
        return name in self._managed and name in self._served

    def _log_path(self, arm_name: str) -> Path:
        folder = self._log_dir or appdirs.cache_dir() / "llama-server-logs"
        return folder / f"arm-{arm_name}-{int(time.time())}.log"
