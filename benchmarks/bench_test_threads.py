"""The thread counts the test suite pins, at 1 and 2 threads, quiet and beside busy cores

tests/conftest.py runs torch with one thread (OMP_NUM_THREADS=1) and every llama-server a
test starts with one (-t 1, LLAMA_ARG_THREADS=1): the suite runs on several xdist workers at
once, and a thread that spins at a barrier while another worker holds the core slows both.
This measures both levers where it matters: on the machine as it is, and with two other
processes spinning on its cores.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.report import Report


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() \
        else "?"


LINEAR = """
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
w, x = torch.randn(32000, 64), torch.randn(5, 64)
for _ in range(50):
    torch.nn.functional.linear(x, w)
wall, cpu = time.perf_counter(), time.process_time()
for _ in range(500):
    torch.nn.functional.linear(x, w)
print((time.perf_counter() - wall) / 500, (time.process_time() - cpu) / 500)
"""


def _linear(threads: int) -> tuple[float, float]:
    """A tiny test model's output layer (64 x 32000 on 5 rows): seconds of wall and CPU."""
    done = subprocess.run([sys.executable, "-c", LINEAR, str(threads)], capture_output=True,
                          text=True, check=True, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    wall, cpu = done.stdout.split()
    return float(wall), float(cpu)


def _llama_requests(threads: int) -> float:
    """Three greedy 64-token requests to the pinned llama-server on the demo GGUF, -t N."""
    import json
    import urllib.request

    from specdeck.core.engines.demo import find_gguf
    from specdeck.core.servers.llama_server import free_port

    from tools.llama_server_build import build

    port = free_port()
    server = subprocess.Popen([str(build()), "-m", str(find_gguf()), "--port", str(port),
                               "-t", str(threads), "-c", "1024"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        started = time.monotonic()
        for i in range(3):
            body = json.dumps({"prompt": f"Write story {i} about a cat.", "n_predict": 64,
                               "temperature": 0, "cache_prompt": False,
                               "ignore_eos": True}).encode()
            request = urllib.request.Request(f"http://127.0.0.1:{port}/completion", body,
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=600) as answer:
                made = json.loads(answer.read()).get("tokens_predicted")
            if made != 64:  # an early end of generation would time nothing
                raise RuntimeError(f"llama-server generated {made} tokens, not 64")
        return time.monotonic() - started
    finally:
        server.terminate()
        server.wait(timeout=30)


BURN = "while True: pass"


def _measure(busy: int) -> list[list[str]]:
    """Both levers at 1 and 2 threads, with ``busy`` other processes spinning on the cores
    (what another xdist worker's test does to this one)."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(busy)]
    try:
        time.sleep(1.0 if busy else 0.0)
        rows = []
        for threads in (1, 2):
            wall, cpu = _linear(threads)
            rows.append([f"torch linear 64x32000, 5 rows, {threads} thread(s)", busy,
                         f"{wall * 1e3:.2f} ms", f"{cpu * 1e3:.2f} ms", _load()])
        for threads in (1, 2):
            rows.append([f"llama-server -t {threads}: 3 x 64 greedy tokens", busy,
                         f"{_llama_requests(threads):.2f} s", "", _load()])
        return rows
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()


def run(report: Report) -> None:
    rows = _measure(0) + _measure(2)
    report.record("levers", rows)
    report.text("The thread counts the suite pins (tests/conftest.py: OMP_NUM_THREADS=1, "
                "LLAMA_ARG_THREADS=1 and -t 1 in the tests' flags), each timed at 1 and 2 "
                "threads, first on the machine as it is, then with two other processes "
                "spinning on its cores (as the suite's other workers do):")
    report.text()
    report.table(["what", "other processes spinning", "wall", "CPU", "load (1 min)"], rows)


