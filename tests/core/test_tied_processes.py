"""Processes SpecDeck starts (core.servers.process.start_tied: every managed server, every
binary's --help) end with SpecDeck's process however it ends, SIGKILL included, and not
before: Linux's parent-death signal follows the thread that forked, so a server started from a
worker thread must outlive that thread. The fixtures' own servers: tests/servers/."""

from __future__ import annotations

import sys

from processes import gone_after_kill

SLEEPER = f"[{sys.executable!r}, '-c', 'import time; time.sleep(600)']"


def test_a_server_started_from_a_worker_thread_outlives_the_thread_not_specdeck(tmp_path):
    """The one place SpecDeck launches a server (ManagedProcess._spawn), from a worker thread
    that then ends (the Tune page's workers, a grid's search)."""
    started = gone_after_kill(
        "import threading\n"
        "from pathlib import Path\n"
        "from specdeck.core.servers.process import ManagedProcess\n"
        "server = ManagedProcess()\n"
        f"server.log_path, server.process, server._log = Path({str(tmp_path / 'log')!r}), "
        "None, None\n"
        f"worker = threading.Thread(target=server._spawn, args=({SLEEPER},))\n"
        "worker.start()\n"
        "worker.join()\n"
        "threading.Event().wait(0.5)  # a SIGTERM at the thread's end has had time to land\n"
        "print('ready' if server.process.poll() is None else "
        "f'ended: {server.process.returncode}', flush=True)\n"
        "threading.Event().wait(600)\n")
    assert len(started) == 1


def test_a_fixtures_process_started_from_a_request_thread_dies_with_the_test_run():
    """start_tied from a thread of a ThreadingHTTPServer's kind (the llama-swap stand-in starts
    its llama-servers from its request handler)."""
    started = gone_after_kill(
        "import threading\n"
        "from specdeck.core.servers.process import start_tied\n"
        "box = []\n"
        f"worker = threading.Thread(target=lambda: box.append(start_tied({SLEEPER})))\n"
        "worker.start()\n"
        "worker.join()\n"
        "threading.Event().wait(0.5)\n"
        "print('ready' if box[0].poll() is None else 'ended', flush=True)\n"
        "threading.Event().wait(600)\n")
    assert len(started) == 1
