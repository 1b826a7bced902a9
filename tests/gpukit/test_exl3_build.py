"""ExLlamaV3's build, measured with spare CPUs (gpukit.exl3_build): progress read from torch's
build folder, the niced build stopped with its children at the end of the call, the report."""

from __future__ import annotations

import os
import sys
import time

import kit_paths  # noqa: F401

from gpukit import exl3_build


def _ninja(folder, sources: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    rules = "\n".join(f"build kernel_{i}.cuda.o: cuda_compile /src/kernel_{i}.cu"
                      for i in range(sources))
    (folder / "build.ninja").write_text(f"ninja_required_version = 1.3\n{rules}\n"
                                        "build ext.so: link kernel_0.cuda.o\n")


def test_progress_counts_finished_objects_against_the_build_file(tmp_path):
    folder = tmp_path / exl3_build.EXTENSION
    assert exl3_build.progress(folder) == (0, None)
    _ninja(folder, 177)
    for i in range(40):
        (folder / f"kernel_{i}.cuda.o").write_bytes(b"\x7fELF")
    (folder / "kernel_40.cuda.o").write_bytes(b"")  # being written: not counted
    assert exl3_build.progress(folder) == (40, 177)


def test_a_running_build_is_stopped_with_its_children_and_projected(tmp_path):
    """The build and a compiler it started die at the end of the call (a compile must not
    outlive it); the rate so far projects the whole build."""
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    folder = tmp_path / "ext" / exl3_build.EXTENSION
    _ninja(folder, 10)
    pid_file = tmp_path / "child.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(120)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); "
              "time.sleep(120)")
    build = exl3_build.Build(env, tmp_path / "build.log", [sys.executable, "-c", script])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child = int(pid_file.read_text())
    assert os.getpriority(os.PRIO_PROCESS, build.process.pid) == 19
    for i in range(5):
        (folder / f"kernel_{i}.cuda.o").write_bytes(b"\x7fELF")
    result = build.result()
    assert result["finished"] is False and result["exit"] is None
    assert (result["objects_built"], result["objects_total"]) == (5, 10)
    assert result["projected_minutes_at_these_jobs"] == round(result["seconds"] * 2 / 60, 1)
    assert "failure" not in result
    deadline = time.monotonic() + 10
    while True:  # the grandchild is gone (killed with the group, then reaped by init)
        try:
            os.kill(child, 0)
            with open(f"/proc/{child}/stat") as stat:
                if stat.read().split()[2] == "Z":
                    break
        except (ProcessLookupError, FileNotFoundError):
            break
        assert time.monotonic() < deadline, "the build's child outlived it"
        time.sleep(0.05)


def test_a_failed_build_is_reported_verbatim(tmp_path):
    env = {**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path / "ext")}
    build = exl3_build.Build(env, tmp_path / "build.log", [
        sys.executable, "-c", "import sys; print('nvcc fatal: Unsupported gpu architecture'); "
        "sys.exit(1)"])
    build.process.wait(30)
    result = build.result()
    assert result["exit"] == 1 and result["finished"] is False
    assert "nvcc fatal: Unsupported gpu architecture" in result["failure"]


def test_the_report_says_how_far_the_build_got(tmp_path):
    from gpukit.report import write_report
    from gpukit.state import KitState
    from gpukit.steps import STEPS

    state = KitState(tmp_path / "work")
    state.write_json("env", {"date": "2026-12-01"})
    state.write_json("exl3", {"seconds": 380.0, "jobs": 8, "niced": 19, "objects_built": 61,
                              "objects_total": 177, "finished": False, "exit": None,
                              "projected_minutes_at_these_jobs": 18.4})
    md, _ = write_report(state, STEPS, "gpu", tmp_path / "out")
    assert ("Built 61 of 177 objects in 380.0 s with 8 jobs at nice 19, beside the kit's other "
            "steps; stopped at the end of the call. At that rate the whole build takes about "
            "18.4 min (a projection).") in md.read_text()


def test_a_build_still_running_when_the_budget_ends_is_measured_anyway(tmp_path, monkeypatch):
    """The driver stops before a step that does not fit; the build's measurement must not
    be lost with the command (the build would die unmeasured at exit)."""
    import argparse

    from gpukit import __main__ as kit
    from gpukit import steps
    from gpukit.driver import Step
    from gpukit.state import KitState, StepRecord

    class Started:
        def result(self):
            return {"seconds": 200.0, "jobs": 8, "niced": 19, "objects_built": 50,
                    "objects_total": 177, "finished": False, "exit": None,
                    "projected_minutes_at_these_jobs": 11.8}

    exl3 = next(s for s in steps.STEPS if s.name == "exl3")
    monkeypatch.setattr(steps, "STEPS", [Step("quick", "runs", 1, lambda ctx: {}),
                                         Step("long", "does not fit", 10_000, lambda ctx: {}),
                                         exl3])
    monkeypatch.setenv("SPECDECK_GPU_WORK", str(tmp_path / "work"))
    monkeypatch.setitem(steps._EXL3, "build", Started())
    state = KitState(tmp_path / "work")
    state.save(StepRecord("exl3-start", "done", 0.0, "t", {}))  # started earlier in the call
    kit.cmd_steps(argparse.Namespace(preset="tiny", budget=60.0, out=None))
    assert not state.is_done("long")
    assert state.is_done("exl3") and state.read_json("exl3")["objects_built"] == 50
    assert not steps.exl3_running()
