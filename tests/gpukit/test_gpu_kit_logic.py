"""The kit's logic that needs no GPU: step driver and resume, converter command lines and
job state, plan-vs-measured arithmetic, overhead ratio, artifact split/join, report."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import kit_paths  # noqa: F401
import pytest

from conftest import MODELS, REPO_ROOT
from gpukit.driver import Step, StepIncomplete, ToolFailed, run_steps
from gpukit.state import KitState


# driver ----------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _steps(calls: list[str], clock: Clock, behaviour: dict[str, list]) -> list[Step]:
    def make(name: str, seconds: float):
        def run(ctx):
            calls.append(name)
            clock.now += seconds
            outcome = behaviour.get(name, []).pop(0) if behaviour.get(name) else None
            if isinstance(outcome, Exception):
                raise outcome
            return {"name": name}
        return run

    return [Step("a", "first", 10, make("a", 5)), Step("b", "long", 300, make("b", 200)),
            Step("c", "last", 50, make("c", 20))]


def test_driver_resumes_an_incomplete_step_and_skips_done_ones(tmp_path):
    state, clock, calls = KitState(tmp_path), Clock(), []
    steps = _steps(calls, clock, {"b": [StepIncomplete("ninja was cut off")]})
    first = run_steps(steps, state, None, budget_s=540, log=lambda s: None, clock=clock)
    # c does not need b, and its estimate fits what is left: it runs in the same command
    assert first.ran == ["a", "b", "c"] and first.next_step == "b" and not first.finished
    assert state.record("b").status == "incomplete"
    second = run_steps(steps, state, None, budget_s=540, log=lambda s: None, clock=clock)
    assert second.ran == ["b"] and second.finished
    assert calls == ["a", "b", "c", "b"]


def test_driver_stops_before_a_step_that_would_not_fit_the_budget(tmp_path):
    state, clock, calls = KitState(tmp_path), Clock(), []
    steps = _steps(calls, clock, {})
    outcome = run_steps(steps, state, None, budget_s=250, log=lambda s: None, clock=clock)
    assert outcome.ran == ["a"] and outcome.next_step == "b"
    # Alone in a command, a step longer than the budget still gets its chance.
    outcome = run_steps(steps, state, None, budget_s=250, log=lambda s: None, clock=clock)
    assert outcome.ran == ["b", "c"]


def test_driver_records_a_tool_failure_verbatim_goes_on_and_retries_it_next_time(tmp_path):
    state, clock, calls = KitState(tmp_path), Clock(), []
    error = ToolFailed("import exllamav2 failed (exit 1)", "nvcc fatal: Unsupported gpu architecture 'compute_120'")
    steps = _steps(calls, clock, {"b": [error]})
    reports = []
    outcome = run_steps(steps, state, None, budget_s=540, log=lambda s: None, clock=clock,
                        after_step=lambda o: reports.append(list(o.ran)))
    assert outcome.failed == "b" and outcome.ran == ["a", "b", "c"]  # c does not need b
    assert reports == [["a"], ["a", "b"], ["a", "b", "c"]]  # the report after every step
    record = state.record("b")
    assert record.status == "failed"
    assert "nvcc fatal: Unsupported gpu architecture 'compute_120'" in record.error
    outcome = run_steps(steps, state, None, budget_s=540, log=lambda s: None, clock=clock)
    assert outcome.finished and calls == ["a", "b", "c", "b"]


def test_a_step_whose_needs_did_not_finish_is_skipped_with_why_and_runs_later(tmp_path):
    from dataclasses import replace

    state, clock, calls = KitState(tmp_path), Clock(), []
    steps = _steps(calls, clock, {"a": [ToolFailed("no CUDA", "CUDA_HOME is not set")]})
    steps[2] = replace(steps[2], needs=("a",))
    outcome = run_steps(steps, state, None, budget_s=540, log=lambda s: None, clock=clock)
    assert outcome.ran == ["a", "b"] and calls == ["a", "b"]
    assert state.record("c").status == "skipped" and state.record("c").error == "needs a (failed)"
    assert outcome.next_step == "a"
    outcome = run_steps(steps, state, None, budget_s=540, log=lambda s: None, clock=clock)
    assert outcome.finished and calls == ["a", "b", "a", "c"]


def test_run_one_step_again_even_when_done(tmp_path):
    state, clock, calls = KitState(tmp_path), Clock(), []
    steps = _steps(calls, clock, {})
    run_steps(steps, state, None, budget_s=1000, log=lambda s: None, clock=clock)
    run_steps(steps, state, None, budget_s=1000, log=lambda s: None, only="a", clock=clock)
    assert calls == ["a", "b", "c", "a"]


# quantize --------------------------------------------------------------------------------
def test_conversion_plan_measures_once_per_model_then_reuses_it(tmp_path):
    from gpukit.quantize import conversion_plan

    models = {"target": tmp_path / "hf-target", "draft": tmp_path / "hf-draft"}
    plan = conversion_plan(models, tmp_path / "q", (4.0, 6.5), 6, 1024, python="py")
    assert [c.name for c in plan] == ["target measurement", "target-4bpw", "target-6.5bpw",
                                      "draft measurement", "draft-4bpw", "draft-6.5bpw"]
    measure, quant = plan[0].argv, plan[2].argv
    assert measure[:3] == ("py", "-m", "exllamav2.conversion.convert_exl2")
    assert _flags(measure) == {"-i": str(tmp_path / "hf-target"),
                               "-o": str(tmp_path / "q" / "work" / "target-measure"),
                               "-om": str(tmp_path / "q" / "target-measurement.json"),
                               "-ml": "1024", "-l": "1024"}
    assert _flags(quant) == {"-i": str(tmp_path / "hf-target"),
                             "-o": str(tmp_path / "q" / "work" / "target-6.5bpw"),
                             "-m": str(tmp_path / "q" / "target-measurement.json"),
                             "-b": "6.5", "-hb": "6", "-cf": str(tmp_path / "q" / "target-6.5bpw"),
                             "-ml": "1024", "-l": "1024"}
    assert plan[2].output == tmp_path / "q" / "target-6.5bpw"


def _flags(argv: tuple[str, ...]) -> dict[str, str]:
    rest = argv[3:]
    return dict(zip(rest[::2], rest[1::2]))


def test_converter_arguments_are_checked():
    from gpukit.quantize import quantize_argv

    with pytest.raises(ValueError, match="head bits 7"):
        quantize_argv("py", Path("i"), Path("o"), Path("m"), 4.0, 7, Path("out"), 1024)
    with pytest.raises(ValueError, match="outside"):
        quantize_argv("py", Path("i"), Path("o"), Path("m"), 9.0, 6, Path("out"), 1024)


# A stand-in for the converter's job bookkeeping (the real one needs CUDA): it writes
# job_new.json like convert_exl2.py does, "finished" at the end, and the output.
STAND_IN = textwrap.dedent("""
    import json, sys, pathlib
    work, out, mode = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3]
    work.mkdir(parents=True, exist_ok=True)
    runs = work / "runs"; runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
    if mode == "fail":
        print("## Error: something broke in the converter"); sys.exit(1)
    (work / "job_new.json").write_text(json.dumps({"progress": "finished"}))
    out.mkdir(parents=True, exist_ok=True); (out / "config.json").write_text("{}")
""")


def test_run_conversions_skips_finished_jobs_and_reports_failures_verbatim(tmp_path):
    from gpukit.quantize import Conversion, is_finished, run_conversions

    script = tmp_path / "convert.py"
    script.write_text(STAND_IN)

    def conversion(name: str, mode: str) -> Conversion:
        work, out = tmp_path / "work" / name, tmp_path / name
        return Conversion(name, (sys.executable, str(script), str(work), str(out), mode), work, out)

    good = conversion("target-4bpw", "ok")
    results = run_conversions([good], tmp_path / "logs", lambda: 60.0, lambda s: None)
    assert results[0]["skipped"] is False and is_finished(good)
    again = run_conversions([good], tmp_path / "logs", lambda: 60.0, lambda s: None)
    assert again[0]["skipped"] is True
    assert (good.work_dir / "runs").read_text() == "x"  # not run twice
    bad = conversion("draft-4bpw", "fail")
    with pytest.raises(ToolFailed) as failure:
        run_conversions([bad], tmp_path / "logs", lambda: 60.0, lambda s: None)
    assert "## Error: something broke in the converter" in failure.value.verbatim


# Each measurement waits for the other model's to have started: only side by side can both
# finish. The quantization after it checks that its own measurement finished first.
RENDEZVOUS = textwrap.dedent("""
    import json, sys, time, pathlib
    work, out, me, other = (pathlib.Path(a) for a in sys.argv[1:5])
    work.mkdir(parents=True, exist_ok=True); me.write_text("started")
    if other.name != "none":
        deadline = time.monotonic() + 20
        while not other.exists():
            if time.monotonic() > deadline:
                print("## the other model's chain never started"); sys.exit(1)
            time.sleep(0.05)
    elif not (out.parent / (out.name.split("-")[0] + "-measurement")).is_dir():
        print("## quantized before its measurement"); sys.exit(1)
    (work / "job_new.json").write_text(json.dumps({"progress": "finished"}))
    out.mkdir(parents=True, exist_ok=True)
""")


def test_each_models_chain_runs_in_order_and_the_models_side_by_side(tmp_path):
    from gpukit.quantize import Conversion, run_conversions

    script = tmp_path / "convert.py"
    script.write_text(RENDEZVOUS)
    flags = {role: tmp_path / f"{role}.started" for role in ("target", "draft")}

    def conversion(name: str, output: str, other: Path | str) -> Conversion:
        work, out = tmp_path / "work" / name.replace(" ", "-"), tmp_path / output
        me = tmp_path / f"{name.replace(' ', '-')}.flag"
        if name.endswith("measurement"):
            me = flags[name.split()[0]]
        return Conversion(name, (sys.executable, str(script), str(work), str(out), str(me),
                                 str(other)), work, out)

    plan = [conversion("target measurement", "target-measurement", flags["draft"]),
            conversion("target-4bpw", "target-4bpw", "none"),
            conversion("draft measurement", "draft-measurement", flags["target"]),
            conversion("draft-4bpw", "draft-4bpw", "none")]
    results = run_conversions(plan, tmp_path / "logs", lambda: 60.0, lambda s: None)
    assert [r["name"] for r in results] == [c.name for c in plan]
    assert all(not r["skipped"] for r in results)


def test_a_finished_job_without_its_output_starts_afresh(tmp_path):
    from gpukit.quantize import Conversion, is_finished, prepare_work_dir

    work = tmp_path / "work"
    work.mkdir()
    (work / "job_new.json").write_text(json.dumps({"progress": "finished"}))
    conversion = Conversion("x", ("py",), work, tmp_path / "missing-output")
    assert not is_finished(conversion)
    prepare_work_dir(conversion)
    assert not work.exists()
    work.mkdir()
    (work / "job_new.json").write_text(json.dumps({"progress": "measure_quant"}))
    prepare_work_dir(conversion)  # an interrupted job is kept: the converter resumes it
    assert (work / "job_new.json").is_file()


# memory ----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_plan() -> dict:
    """The real planner's JSON for a TinyLlama-shaped model at 4 bpw on an 80 GB GPU."""
    done = subprocess.run(
        [sys.executable, "-m", "specdeck", "vram", "--model", str(MODELS / "TinyLlama-1.1B-Chat-v1.0"),
         "--bpw", "4", "--gpus", "80", "--ctx", "2048", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_plan_vs_measured_rows(real_plan):
    from gpukit.memory import MeasuredMemory, compare_plan

    gpu = real_plan["gpus"][0]
    used, context = gpu["used_bytes"], gpu["overhead"]["cuda_context"]
    at_load = (gpu["target_weights"] + gpu["target_cache"] + gpu["overhead"]["blas_workspaces"]
               + gpu["overhead"]["scratch"]
               + gpu["overhead"]["cache_staging"] + gpu["overhead"]["rope_tables"])
    measured = MeasuredMemory(
        nvml_used_before=600 * 2**20, nvml_used_loaded=600 * 2**20 + used - 10 * 2**20,
        nvml_used_peak=600 * 2**20 + used + 50 * 2**20,     # real use above the plan
        torch_allocated_loaded=at_load - 4 * 2**20, torch_reserved_loaded=0,
        torch_peak_allocated=0, torch_peak_reserved=(used - context) // 2)  # plan 2x too big
    comparison = compare_plan("4bpw target", real_plan, measured)
    rows = {r.what.split(" (")[0]: r for r in comparison.rows}
    device = rows["device total"]
    assert device.planned == used and device.measured == used + 50 * 2**20
    assert device.error < 0 and device.verdict == "UNDER-estimate"
    reserved = rows["PyTorch peak reserved"]
    assert reserved.error == pytest.approx(1.0, abs=1e-6) and reserved.verdict == "over-estimate"
    load = rows["allocated after load"]
    assert load.planned == at_load and 0 < load.error < 0.15 and load.verdict == "accurate"
    data = comparison.to_json()
    assert data["context"] == 2048 and data["plan_fits"] is True
    assert json.loads(json.dumps(data))["rows"][0]["verdict"] == "UNDER-estimate"


def test_without_nvml_the_device_row_is_left_out(real_plan):
    from gpukit.memory import MeasuredMemory, compare_plan

    measured = MeasuredMemory(None, None, None, 1, 1, 1, 1)
    comparison = compare_plan("x", real_plan, measured)
    assert [r.what.split(" (")[0] for r in comparison.rows] == [
        "PyTorch peak reserved", "allocated after load"]


# overhead --------------------------------------------------------------
def test_overhead_ratio_and_goal():
    from gpukit.ab import overhead

    result = overhead([495.0, 500.0, 490.0, 505.0, 498.0], [500.0, 505.0, 499.0, 510.0, 502.0])
    # The median of the paired ratios (495/500, 500/505, ...), not the ratio of the medians.
    assert result.ratio == pytest.approx(500.0 / 505.0)
    assert result.specdeck_median == 498.0 and result.bare_median == 502.0
    assert result.met  # 0.992 >= 0.98
    assert result.paired_ratio_ci[0] <= result.ratio <= result.paired_ratio_ci[1] + 0.01
    slow = overhead([450.0, 455.0], [500.0, 500.0])
    assert not slow.met and slow.to_json()["met"] is False


# artifacts, telemetry, wheels ------------------------------------------------------------
def test_extension_parts_round_trip_and_detect_damage(tmp_path):
    from gpukit.artifacts import join_parts, split_file

    source = tmp_path / "exllamav2_ext.so"
    source.write_bytes(bytes(range(256)) * 41)  # 10496 bytes -> 3 parts of 4096
    files = split_file(source, tmp_path / "out", part_bytes=4096)
    assert [f.name for f in files] == ["exllamav2_ext.so.parts.json", "exllamav2_ext.so.part00",
                                       "exllamav2_ext.so.part01", "exllamav2_ext.so.part02"]
    joined = join_parts(files[0], tmp_path / "prebuilt")
    assert joined.read_bytes() == source.read_bytes()
    files[2].write_bytes(b"damaged")
    with pytest.raises(ValueError, match="sha256"):
        join_parts(files[0], tmp_path / "again")
    files[3].unlink()
    with pytest.raises(ValueError, match="missing"):
        join_parts(files[0], tmp_path / "again")


def test_compressed_extension_parts_join_to_the_same_file(tmp_path):
    from gpukit.artifacts import compress_parts, join_parts, split_file

    source = tmp_path / "exllamav2_ext.so"
    source.write_bytes(bytes(range(256)) * 4096)  # 1 MiB that xz packs small
    raw = split_file(source, tmp_path / "raw", part_bytes=4096)
    packed = compress_parts(raw[0], tmp_path / "packed")
    assert json.loads(packed[0].read_text())["compression"] == "xz"
    assert sum(p.stat().st_size for p in packed[1:]) < source.stat().st_size // 10
    assert sorted(p.name for p in (tmp_path / "packed").iterdir()) == sorted(p.name for p in packed)
    assert join_parts(packed[0], tmp_path / "prebuilt").read_bytes() == source.read_bytes()
    packed[1].write_bytes(packed[1].read_bytes()[:-1] + b"\0")
    with pytest.raises(ValueError, match="xz|sha256"):
        join_parts(packed[0], tmp_path / "again")


def test_recorder_runs_specdecks_real_command(tmp_path):
    """Without a GPU `specdeck gpus --record` refuses with its no-GPU message: proof that
    the command line the kit builds is one the real CLI accepts."""
    from gpukit.telemetry import Recorder

    recorder = Recorder(tmp_path / "trace.jsonl", 0.5, "kit test", tmp_path / "trace.log")
    code, output = recorder.finish()
    assert code == 2 and "Nothing to record" in output
    assert not (tmp_path / "trace.jsonl").exists()


def test_missing_wheels_are_named(tmp_path):
    from gpukit.install import missing_wheels

    (tmp_path / "exllamav2-0.3.2-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "platformdirs-4.14.7-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "ruamel_yaml-0.18.0-py3-none-any.whl").write_bytes(b"")  # not the pinned one
    assert missing_wheels(tmp_path) == ["fastparquet==2026.9.0", "cramjam==2.14.0",
                                        "websockets==17.4", "ruamel.yaml==0.19.1",
                                        "exllamav3==1.6.5"]
    (tmp_path / "ruamel_yaml-0.19.1-py3-none-any.whl").write_bytes(b"")
    assert "ruamel.yaml==0.19.1" not in missing_wheels(tmp_path)


def _wheel(folder: Path, name: str, tag: str) -> Path:
    """A minimal valid wheel: one module and its dist-info (PEP 427)."""
    import base64
    import hashlib
    import zipfile

    files = {f"{name}/__init__.py": b"VALUE = 1\n",
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\n"
                                               "Version: 1.0\n".encode(),
             f"{name}-1.0.dist-info/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\n"
                                            f"Root-Is-Purelib: false\nTag: {tag}\n".encode()}
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in files.items()) + f"{name}-1.0.dist-info/RECORD,,\n"
    files[f"{name}-1.0.dist-info/RECORD"] = record.encode()
    path = folder / f"{name}-1.0-{tag}.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def test_the_rehearsal_installs_the_devices_wheels_on_any_python(tmp_path):
    """The carried wheels are CPython 3.12's (the device's); the CPU rehearsal runs on this
    machine's Python. pip is told the device's tags on both sides, so the install step the
    device runs is the one rehearsed here (it had failed here: 'cramjam-2.14.0-cp312-...
    is not a supported wheel on this platform'), and the report says where they differ."""
    from gpukit.install import DEVICE_PYTHON, install

    wheels = tmp_path / "whl"
    wheels.mkdir()
    compiled = "cp{0}-cp{0}-manylinux_2_28_x86_64".format(DEVICE_PYTHON.replace(".", ""))
    _wheel(wheels, "devicecompiled", compiled)
    _wheel(wheels, "purepython", "py3-none-any")
    site = tmp_path / "site"
    summary = install(site, wheels, REPO_ROOT, tmp_path / "install.log")
    assert (site / "devicecompiled" / "__init__.py").is_file()
    assert (site / "purepython" / "__init__.py").is_file()
    assert (site / "specdeck" / "core").resolve() == REPO_ROOT / "core"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert ("note" in summary) == (here != DEVICE_PYTHON)


def test_bare_loop_imports_exllamav2_only_when_loading():
    import importlib

    module = importlib.import_module("gpukit.bare_loop")
    assert "exllamav2" not in sys.modules
    run = module.BareRun(new_tokens=250, time_generate=0.5, time_prefill=0.01, token_ids=())
    assert run.tokens_per_second == 500.0
    with pytest.raises(ImportError):  # no exllamav2 (or no CUDA) here: unverified until a GPU run
        module.BareLoop().load(Path("nowhere"), 2048)


# report ----------------------------------------------------------------------------------
def test_report_renders_recorded_gpu_numbers_and_failures(tmp_path):
    from gpukit.ab import Overhead
    from gpukit.report import write_report
    from gpukit.state import StepRecord
    from gpukit.steps import STEPS

    state = KitState(tmp_path / "work")
    state.write_json("env", {"date": "2026-11-30", "devices": [{"name": "NVIDIA H100 80GB HBM3"}],
                             "packages": {"exllamav2": "0.3.2"}, "torch": "2.11.0",
                             "torch_cuda": "13.0",
                             "nvml": {"headline": "GPU telemetry is live", "state": "ok",
                                      "gpus": [{"memory_adds_up": True}]}})
    state.save(StepRecord("build", "failed", 312.5, "t", {}, "import exllamav2 failed (exit 1)\n"
                          "error: identifier \"__hfma2\" is undefined"))
    state.write_json("memory", {"comparisons": [{"label": "4bpw target + draft", "context": 2048,
                     "plan_fits": True, "rows": [{"what": "device total (NVML used, peak)",
                     "planned": 3 * 2**30, "measured": 2 * 2**30, "error": 0.5,
                     "verdict": "over-estimate"}]}]})
    state.write_json("ab", {"pair": "4bpw", "prompts": ["grounded/rename-variable"],
                            "max_new_tokens": 256, "repeats": 3, "summaries": [
        {"arm": "baseline", "runs": 3, "median_tokens_per_second": 410.0, "acceptance_rate": None,
         "mean_acceptance_length": None, "speedup_median": None, "speedup_ci": None,
         "identical_to_baseline": 3, "first_divergence": None},
        {"arm": "draft k=4", "runs": 3, "median_tokens_per_second": 820.0, "acceptance_rate": 0.75,
         "mean_acceptance_length": 4.0, "speedup_median": 2.0, "speedup_ci": [1.9, 2.1],
         "identical_to_baseline": 3, "first_divergence": None}],
        "overhead": Overhead(400.0, 404.0, 400 / 404, (0.98, 1.0)).to_json(),
        "trace": {"path": "/tmp/specdeck-gpu/trace.jsonl", "exit": 0}})
    md, js = write_report(state, STEPS, "gpu", tmp_path / "out")
    assert md.name == "gpu-2026-11-30.md"
    data = json.loads(js.read_text())
    assert data["steps"]["build"]["status"] == "failed"
    assert data["results"]["ab"]["overhead"]["met"] is True
    text = md.read_text()
    assert "NVIDIA H100 80GB HBM3" in text
    assert ("| SpecDeck's NVML read | GPU telemetry is live (state ok; used + free + reserved "
            "= total on 1 of 1 GPUs) |") in text
    assert "| 4bpw target + draft | device total (NVML used, peak) | 3.000 | 2.000 | +50.0% |" in text
    assert "| draft k=4 | 3 | 820.0 | 2.00x [1.90, 2.10] | 75.0% | 4.00 | 3/3 |" in text
    assert "ratio **0.990**" in text and "met" in text
    assert 'error: identifier "__hfma2" is undefined' in text  # verbatim failure


def test_the_env_step_records_what_specdeck_s_nvml_read_sees_here():
    """The live NVML path is read by the kit on the GPU (where each card's used + free +
    reserved must add up to its total); without a driver the same call records the no-GPU
    state, not an error."""
    from gpukit.envinfo import gpu_frame

    frame = gpu_frame()
    if frame["state"] == "ok":  # a machine with an NVIDIA driver
        assert frame["gpus"] and all(g["memory_adds_up"] for g in frame["gpus"])
    else:
        assert frame["state"] == "no-library" and frame["gpus"] == []
        assert frame["headline"] == "No NVIDIA GPU detected"


def test_a_timed_out_build_is_killed_with_its_children(tmp_path):
    """ninja's nvcc children must not outlive a build the kit stopped at its time limit."""
    import os
    import time

    from gpukit.steps import run_in_own_group

    pid_file = tmp_path / "child.pid"
    script = (f"import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
              f"'import time; time.sleep(60)']); open({str(pid_file)!r}, 'w').write(str(p.pid)); "
              "time.sleep(60)")
    with (tmp_path / "log").open("w") as log:
        code = run_in_own_group([sys.executable, "-c", script], log, dict(os.environ), 1.5)
    assert code is None
    child = int(pid_file.read_text())
    status = Path(f"/proc/{child}/status")

    def running() -> bool:
        # Gone, or a zombie waiting for init to reap it: either way no longer running.
        try:
            return "\nState:\tZ" not in status.read_text()
        except FileNotFoundError:
            return False

    deadline = time.monotonic() + 30  # the group was sent SIGKILL: it goes as soon as it can
    while running() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not running()


def _fake_exllamav2(root, *, flash_paged=True, arch_turns_flash_off=False):
    """A package shaped like exllamav2 0.3.2 where the kit touches it: ext.py keeps the built
    extension as a module-level name (ext.py 276-288: ``exllamav2_ext = load(...)``), attn
    says whether flash-attn supports paging, and a config's arch_compat_overrides may turn
    flash-attn off for an architecture."""
    pkg = root / "exllamav2"
    (pkg / "generator").mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        "__version__ = '0.3.2'\n"
        "class ExLlamaV2Config:\n"
        "    def __init__(self, path):\n"
        "        self.no_flash_attn = False\n"
        "    def arch_compat_overrides(self, quiet=False):\n"
        f"        self.no_flash_attn = self.no_flash_attn or {arch_turns_flash_off}\n"
        "class ExLlamaV2:\n"
        "    def __init__(self, config): self.config = config\n"
        "    def load_autosplit(self, cache): pass\n"
        "def ExLlamaV2Cache(model, max_seq_len, lazy): return object()\n"
        "def ExLlamaV2Tokenizer(config): return object()\n")
    (pkg / "ext.py").write_text("import types\nexllamav2_ext = types.ModuleType('exllamav2_ext')\n"
                                "exllamav2_ext.__file__ = '/built/exllamav2_ext.so'\n"
                                "ext_c = exllamav2_ext\n")
    (pkg / "attn.py").write_text(f"has_flash_attn_with_paged = {flash_paged}\n")
    (pkg / "generator" / "__init__.py").write_text(
        "made = []\n"
        "class ExLlamaV2DynamicGenerator:\n"
        "    def __init__(self, **kw): made.append(kw)\n"
        "    def warmup(self): pass\n"
        "class ExLlamaV2DynamicJob: pass\n"
        "class ExLlamaV2Sampler: pass\n")
    return root


def test_the_build_probe_imports_the_extension_where_exllamav2_keeps_it(tmp_path):
    """Issue 14 item 5: exllamav2 has no top-level exllamav2_ext module; the probe must find
    the extension as exllamav2.ext.exllamav2_ext (it failed with ModuleNotFoundError)."""
    import subprocess
    import sys

    from gpukit.steps import BUILD_PROBE

    root = _fake_exllamav2(tmp_path)
    done = subprocess.run([sys.executable, "-c", BUILD_PROBE], capture_output=True, text=True,
                          env={**__import__("os").environ, "PYTHONPATH": str(root)}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "SPECDECK_IMPORT_OK 0.3.2 /built/exllamav2_ext.so" in done.stdout


@pytest.mark.parametrize("flash_paged, arch_off, capability, paged", [
    (True, False, (8, 6), True),
    (True, True, (8, 6), False),   # an architecture that turns flash-attn off runs unpaged
    (True, False, (7, 5), False),  # a Turing GPU: no paged flash-attn
    (False, False, (8, 9), False),
])
def test_the_bare_loop_chooses_paged_mode_by_the_engines_rule(tmp_path, monkeypatch,
                                                              flash_paged, arch_off,
                                                              capability, paged):
    """Issue 14 item 6: the kit's bare loop took flash-attn's presence alone, so a draft
    whose architecture turns flash-attn off still ran paged and hit "Paged mode requires
    flash-attn" (dynamic.py 354-357)."""
    import sys

    torch = pytest.importorskip("torch")
    root = _fake_exllamav2(tmp_path, flash_paged=flash_paged, arch_turns_flash_off=arch_off)
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "exllamav2" or m.startswith("exllamav2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: capability)
    monkeypatch.setattr(torch.version, "hip", None)
    from gpukit.bare_loop import BareLoop

    try:
        BareLoop().load(tmp_path / "model", 2048)
        import exllamav2.generator as generator

        assert generator.made[-1]["paged"] is paged
    finally:  # the fake package must not outlive this test
        for name in [m for m in sys.modules if m == "exllamav2" or m.startswith("exllamav2.")]:
            del sys.modules[name]


def test_the_kit_plans_the_logits_rows_the_engine_allocates(tmp_path):
    """Issue 14 item 8: the planner's 16 rows are TabbyAPI's; the kit measures SpecDeck's
    engine, which allocates q_size(MAX_DRAFT_TOKENS) = 33, so it plans with 33."""
    import json

    from gpukit.steps import engine_logits_rows
    from conftest import MODELS

    from specdeck.core.cli import main

    assert engine_logits_rows() == 33  # k up to 32 drafts plus the step's own token
    used = {}
    for rows in (16, 33):
        out = tmp_path / f"{rows}.json"
        import contextlib
        import io

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            main(["vram", "--model", str(MODELS / "Llama-3.2-1B"), "--bpw", "4", "--ctx", "4096",
                  "--gpus", "24", "--logits-rows", str(rows), "--json"])
        out.write_text(buffer.getvalue())
        plan = json.loads(buffer.getvalue())
        used[rows] = sum(g["overhead"]["activations"] for g in plan["gpus"])
    vocab = json.loads((MODELS / "Llama-3.2-1B" / "config.json").read_text())["vocab_size"]
    assert used[33] - used[16] == 17 * vocab * 4 * 2


def test_specdeck_imports_from_the_checkout_with_nothing_installed(tmp_path):
    """The device machine is bare: the kit runs `python -m gpukit` in the repository's root,
    where the tree's specdeck/ folder comes first on sys.path. Its parts (core/, gui/, ...)
    must be found from there (the first GPU run failed here: No module named
    'specdeck.core'). -S leaves out site-packages, so no installed SpecDeck can help."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-S", "-c",
                           "import specdeck.core.units as u, specdeck.core.errors; "
                           "print(u.__file__)"],
                          cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(root / "core" / "units.py")


def test_prepare_runs_again_over_its_own_copy(tmp_path, monkeypatch):
    """A second `python -m gpukit prepare` finds the tokenizer it carried first, and had
    died copying it onto itself (shutil.SameFileError)."""
    import gpukit.__main__ as kit
    from gpukit.install import WHEELS, wheel_prefix

    monkeypatch.setattr(kit, "CARRY_DIR", tmp_path / ".gpukit")
    monkeypatch.setattr(kit, "WHEELS_DIR", tmp_path / ".whl")
    (tmp_path / ".whl").mkdir()
    for pin in WHEELS:
        (tmp_path / ".whl" / f"{wheel_prefix(pin)}py3-none-any.whl").write_bytes(b"")
    source = MODELS / "TinyLlama-1.1B-Chat-v1.0"
    assert kit.main(["prepare", "--no-download", "--tokenizer", str(source)]) == 0
    carried = tmp_path / ".gpukit" / "tokenizer"
    assert (carried / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
    assert kit.main(["prepare", "--no-download", "--tokenizer", str(carried)]) == 0
    assert (carried / "tokenizer.json").read_bytes() == (source / "tokenizer.json").read_bytes()
