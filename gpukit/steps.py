"""The kit's steps, in order. Each writes results/<step>.json under the work folder.

Ordered by the value of what each measures, so that one command of about eight minutes
brings the most evidence first, and a step that cannot run (the extension does not build on
a new CUDA) does not stop the ones that do not need it:

| step      | needs a GPU | what |
|-----------|-------------|------|
| install   | no  | carried wheels into work/site, SpecDeck linked from the tree |
| env       | no  | machine, GPU, driver, CUDA, versions, SpecDeck's NVML reading |
| build-start | no | start `import exllamav2` (its JIT CUDA build, for this GPU's architecture only, MAX_JOBS = cores) in the background |
| seed-start | no | start writing the seed-shaped EXL2 models (random codes, gpukit.seed_scale) in a thread |
| pair      | yes (CPU: slow) | train target + draft on the same text on the GPU while the extension builds, save HF, agreement |
| build     | yes | wait for the build: timed, its failure text verbatim |
| exl3-start | no | start ExLlamaV3's extension build, niced, on half the cores: measured, not guessed |
| quantize  | yes | EXL2 at one bitrate per model with exllamav2's converter |
| ab        | yes | A/B arms through SpecDeck's engine (losslessness), bare-loop overhead, NVML trace |
| seed      | yes | the plan vs a real load at the seed's 70B shapes, step costs, the predicted speed-up |
| check     | no  | `specdeck check` on the HF pair and on each EXL2 pair |
| exl3      | no  | how many of ExLlamaV3's objects were built in how long (the build then stopped) |
| memory    | yes | `specdeck vram --json` vs a real load's allocation of the trained pair (NVML and torch) |
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpukit.driver import Step, StepContext, StepIncomplete, ToolFailed
from gpukit.quantize import folder_name, tail

REPO_ROOT = Path(__file__).resolve().parents[1]


def site_dir(state_root: Path) -> Path:
    return state_root / "site"


def python_env(state_root: Path, build_jobs: int) -> dict[str, str]:
    """The environment children run with: the installed site first, the extension build
    cached in the work folder."""
    env = dict(os.environ)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    site = str(site_dir(state_root))
    if site_dir(state_root).is_dir() and site not in paths:
        env["PYTHONPATH"] = os.pathsep.join([site, *paths])
    env.setdefault("TORCH_EXTENSIONS_DIR", str(state_root / "torch_extensions"))
    # All cores but one: the pair trains on the GPU meanwhile, and its loop needs a core.
    env.setdefault("MAX_JOBS", str(build_jobs or max(1, (os.cpu_count() or 2) - 1)))
    arch = cuda_arch()
    if arch:
        env.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cuda_arch() -> str | None:
    """This GPU's compute capability as TORCH_CUDA_ARCH_LIST wants it ("9.0" on an H100):
    the extension is built for the GPU that is there, not for every architecture torch
    knows (which multiplies the compile time). None without a CUDA GPU."""
    if not _cuda_available():
        return None
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{major}.{minor}"


def specdeck_cli(args: list[str], env: dict[str, str] | None = None,
                 timeout: float = 300.0) -> tuple[int, Any, str]:
    """Run `specdeck ARGS --json`; (exit code, parsed JSON or None, stderr)."""
    done = subprocess.run([sys.executable, "-m", "specdeck", *args, "--json"],
                          capture_output=True, text=True, env=env, timeout=timeout)
    try:
        data = json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        data = None
    return done.returncode, data, (done.stderr or "") + ("" if data is not None else done.stdout)


# install ---------------------------------------------------------------------------------
def step_install(ctx: StepContext) -> dict[str, Any]:
    from gpukit.install import install

    return install(site_dir(ctx.state.root), REPO_ROOT / ".whl", REPO_ROOT,
                   ctx.state.path("logs", "install.log"))


# env -------------------------------------------------------------------------------------
def step_env(ctx: StepContext) -> dict[str, Any]:
    from gpukit.envinfo import collect

    info = collect()
    info["date"] = time.strftime("%Y-%m-%d")
    ctx.state.write_json("env", info)
    devices = info.get("devices") or []
    return {"gpu": devices[0]["name"] if devices else info["nvml"]["headline"],
            "torch": info.get("torch"), "torch_cuda": info.get("torch_cuda")}


# build -----------------------------------------------------------------------------------
def engine_logits_rows() -> int:
    """The logits rows the engine loads with (core.engines.exllamav2; 33 for k up to 32): the
    build probe sizes its test forward pass the same way."""
    from specdeck.core.engines.base import MAX_DRAFT_TOKENS
    from specdeck.core.engines.exllamav2 import MIN_OUTPUT_LEN, q_size

    return max(MIN_OUTPUT_LEN, q_size(MAX_DRAFT_TOKENS))

# exllamav2 keeps the extension it JIT-builds as exllamav2.ext.exllamav2_ext (0.3.2 ext.py
# 276-288); there is no top-level exllamav2_ext module to import by name.
BUILD_PROBE = (
    "import time; t = time.monotonic(); import exllamav2; "
    "from exllamav2.ext import exllamav2_ext; "
    "print('SPECDECK_IMPORT_OK', exllamav2.__version__, exllamav2_ext.__file__, "
    "round(time.monotonic() - t, 1))"
)


_BACKGROUND: dict[str, Any] = {}
"""The build started by build-start in this process: its Popen, start time and log."""


def _start_build(ctx: StepContext) -> dict[str, Any]:
    env = python_env(ctx.state.root, ctx.config.build_jobs)
    log_path = ctx.state.path("logs", "build.log")
    attempts_path = ctx.state.path("results", "build-attempts.json")
    attempts = json.loads(attempts_path.read_text()) if attempts_path.is_file() else []
    handle = log_path.open("a", encoding="utf-8")
    handle.write(f"--- attempt {len(attempts) + 1}, MAX_JOBS={env['MAX_JOBS']}, "
                 f"TORCH_CUDA_ARCH_LIST={env.get('TORCH_CUDA_ARCH_LIST', '(torch default)')}, "
                 f"TORCH_EXTENSIONS_DIR={env['TORCH_EXTENSIONS_DIR']}\n")
    handle.flush()
    # A killed build leaves torch's baton file behind, and the next import would wait on it
    # for ever: remove it (nothing else builds here).
    (Path(env["TORCH_EXTENSIONS_DIR"]) / "exllamav2_ext" / "lock").unlink(missing_ok=True)
    process = subprocess.Popen([sys.executable, "-c", BUILD_PROBE], stdout=handle,
                               stderr=subprocess.STDOUT, env=env, start_new_session=True)
    _BACKGROUND.update(process=process, started=time.monotonic(), log=handle,
                       attempts=attempts, attempts_path=attempts_path, log_path=log_path)
    return {"max_jobs": env["MAX_JOBS"], "arch": env.get("TORCH_CUDA_ARCH_LIST")}


def step_build_start(ctx: StepContext) -> dict[str, Any]:
    """Start the extension build in the background: it is the longest step and needs the
    CPUs, the pair's training needs the GPU, so they overlap."""
    return _start_build(ctx)


def step_build(ctx: StepContext) -> dict[str, Any]:
    if not _BACKGROUND or _BACKGROUND.get("waited"):
        _start_build(ctx)  # a command that did not run build-start, or `run build` again
    code = wait_group(_BACKGROUND["process"], max(10.0, ctx.seconds_left()))
    _BACKGROUND["waited"] = True
    _BACKGROUND["log"].close()
    attempts, attempts_path = _BACKGROUND["attempts"], _BACKGROUND["attempts_path"]
    log_path = _BACKGROUND["log_path"]
    seconds = time.monotonic() - _BACKGROUND["started"]
    attempts.append({"seconds": round(seconds, 1), "exit": code})
    attempts_path.write_text(json.dumps(attempts, indent=2))
    if code is None:
        raise StepIncomplete(f"the build ran out of this command's time after {seconds:.0f} s; "
                             "ninja keeps what it compiled: run the same command again")
    output = log_path.read_text(encoding="utf-8", errors="replace")
    marker = [line for line in output.splitlines() if line.startswith("SPECDECK_IMPORT_OK")]
    if code != 0 or not marker:
        raise ToolFailed(f"import exllamav2 failed (exit {code}); {log_path}:", tail(log_path, 60))
    _, version, so_path, import_s = marker[-1].split()
    so = Path(so_path)
    exported = []
    if so.suffix == ".so" and so.is_file():
        from gpukit.artifacts import split_file

        exported = [p.name for p in split_file(so, ctx.state.root / "export")]
    return {"exllamav2": version, "extension": so_path,
            "extension_bytes": so.stat().st_size if so.is_file() else None,
            "build_seconds_total": round(sum(a["seconds"] for a in attempts), 1),
            "attempts": len(attempts), "last_import_seconds": float(import_s),
            "prebuilt": "torch_extensions" not in so_path, "exported_parts": exported}


_EXL3: dict[str, Any] = {}
"""The ExLlamaV3 build started by exl3-start in this process."""


def step_exl3_start(ctx: StepContext) -> dict[str, Any]:
    """Start ExLlamaV3's extension build, niced, on half the cores (gpukit.exl3_build)."""
    from gpukit.exl3_build import Build, jobs

    env = python_env(ctx.state.root, ctx.config.build_jobs)
    _EXL3["build"] = Build(env, ctx.state.path("logs", "exl3-build.log"))
    return {"jobs": jobs(), "niced": 19}


def exl3_running() -> bool:
    """Whether this process started ExLlamaV3's build and has not measured it yet."""
    return "build" in _EXL3


def step_exl3(ctx: StepContext) -> dict[str, Any]:
    """How far ExLlamaV3's build got in this call (it is stopped here: a compile must not
    outlive the call or skew a later command's timings)."""
    build = _EXL3.pop("build", None)
    if build is None:  # a later command: the rate is the first command's or nobody's
        data = {"measured": False, "why": "the build was started in an earlier command"}
        ctx.state.write_json("exl3", data)
        return data
    data = build.result()
    ctx.state.write_json("exl3", data)
    if "failure" in data:
        raise ToolFailed(f"import exllamav3.ext failed (exit {data['exit']})", data["failure"])
    return {k: data[k] for k in ("seconds", "objects_built", "objects_total", "finished")}


def run_in_own_group(argv: list[str], output: Any, env: dict[str, str], timeout: float) -> int | None:
    """Exit code, or None after killing the whole process group at the timeout."""
    process = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    return wait_group(process, timeout)


def wait_group(process: subprocess.Popen, timeout: float) -> int | None:
    """``process``'s exit code, or None after killing its whole process group at the
    timeout (ninja and its nvcc children included: orphans would keep compiling into the
    next command)."""
    import signal

    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        return None


# pair ------------------------------------------------------------------------------------
def pair_dir(ctx: StepContext) -> Path:
    return ctx.state.root / "pair"


def step_pair(ctx: StepContext) -> dict[str, Any]:
    from gpukit.pair import make_pair

    device = "cuda" if _cuda_available() else "cpu"
    result = make_pair(ctx.config.pair, pair_dir(ctx), device=device, log=ctx.log)
    data = result.to_json()
    ctx.state.write_json("pair", data)
    return {"agreement": round(result.agreement_after.rate, 4), "steps": result.steps,
            "target_params": result.target_params, "draft_params": result.draft_params}


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


# quantize --------------------------------------------------------------------------------
def quant_dir(ctx: StepContext) -> Path:
    return ctx.state.root / "quant"


def step_quantize(ctx: StepContext) -> dict[str, Any]:
    from gpukit.quantize import conversion_plan, run_conversions

    models = {role: pair_dir(ctx) / role for role in ("target", "draft")}
    plan = conversion_plan(models, quant_dir(ctx), ctx.config.bits, ctx.config.head_bits,
                           ctx.config.calibration_length, rows=ctx.config.calibration_rows,
                           measurement_rows=ctx.config.measurement_rows)
    os.environ.update({k: v for k, v in python_env(ctx.state.root, ctx.config.build_jobs).items()
                       if k in ("TORCH_EXTENSIONS_DIR", "MAX_JOBS")})
    runs = run_conversions(plan, ctx.state.root / "logs", ctx.seconds_left, ctx.log)
    models_out = {}
    for conversion in plan:
        if conversion.output.is_dir():
            models_out[conversion.name] = _describe_model(conversion.output)
    data = {"conversions": runs, "argv": {c.name: list(c.argv[1:]) for c in plan},
            "models": models_out}
    ctx.state.write_json("quantize", data)
    return {"models": {k: v.get("quant") for k, v in models_out.items()},
            "seconds": round(sum(r["seconds"] for r in runs), 1)}


def _describe_model(folder: Path) -> dict[str, Any]:
    """What SpecDeck's own model reader makes of a folder (quant label, bytes on disk)."""
    from specdeck.core.models import read_model

    info = read_model(folder)
    return {"path": str(folder), "quant": info.quant.label,
            "bytes": sum(f.stat().st_size for f in folder.glob("*.safetensors"))}


def exl2_pairs(ctx: StepContext) -> dict[str, tuple[Path, Path]]:
    """bits label -> (target, draft) EXL2 folders that exist."""
    pairs = {}
    for bits in ctx.config.bits:
        target = quant_dir(ctx) / folder_name("target", bits)
        draft = quant_dir(ctx) / folder_name("draft", bits)
        if (target / "config.json").is_file() and (draft / "config.json").is_file():
            pairs[f"{bits:g}bpw"] = (target, draft)
    return pairs


# check -----------------------------------------------------------------------------------
def step_check(ctx: StepContext) -> dict[str, Any]:
    pairs = {"hf": (pair_dir(ctx) / "target", pair_dir(ctx) / "draft"), **exl2_pairs(ctx)}
    results = {}
    for label, (target, draft) in pairs.items():
        code, data, errors = specdeck_cli(["check", str(target), str(draft)])
        results[label] = {"exit": code, "report": data, "stderr": errors[-2000:]}
        ctx.log(f"   check {label}: exit {code}")
    ctx.state.write_json("check", results)
    failing = {k: v["exit"] for k, v in results.items() if v["exit"] != 0}
    if failing:
        raise ToolFailed("specdeck check did not say compatible", json.dumps(failing))
    return {"checked": list(results), "all_compatible": True}


# memory ----------------------------------------------------------------------------------
def plan_and_measure(ctx: StepContext, name: str, target: Path, draft: Path | None,
                     context: int, mode: str, draft_mode: str,
                     measure_args: tuple[str, ...] = ()) -> tuple[dict[str, Any], dict[str, Any]]:
    """`specdeck vram --json` for one load, the same load measured in a fresh process
    (gpukit.memory.measure_load), and the two compared: (comparison, raw)."""
    from gpukit.memory import MeasuredMemory, compare_plan

    env = python_env(ctx.state.root, ctx.config.build_jobs)
    # The load measured is SpecDeck's engine's, which allocates 33 logits rows
    # (q_size(MAX_DRAFT_TOKENS)) where TabbyAPI allocates 16: plan for the same.
    args = ["vram", "--model", str(target), "--ctx", str(context), "--cache-mode", mode,
            "--logits-rows", str(engine_logits_rows())]
    if importlib.util.find_spec("flash_attn") is None:
        # The engine runs unpaged (SDPA with the causal mask restored): plan its buffers.
        args.append("--no-flash-attn")
    if draft is not None:
        args += ["--draft", str(draft), "--draft-cache-mode", draft_mode]
    code, plan, errors = specdeck_cli(args, env)
    if plan is None:
        raise ToolFailed(f"specdeck vram failed for {name} (exit {code})", errors)
    out = ctx.state.path("results", f"measured-{_slug(name)}.json")
    argv = [sys.executable, "-m", "gpukit", "measure-memory", "--model", str(target),
            "--ctx", str(context), "--cache-mode", mode, "--draft-cache-mode", draft_mode,
            "--out", str(out), *measure_args]
    if draft is not None:
        argv += ["--draft", str(draft)]
    done = subprocess.run(argv, capture_output=True, text=True, env=env,
                          timeout=max(10.0, ctx.seconds_left()))
    if done.returncode != 0 or not out.is_file():
        raise ToolFailed(f"measuring {name} failed (exit {done.returncode})",
                         (done.stdout + done.stderr)[-4000:])
    measured_json = json.loads(out.read_text())
    measured = MeasuredMemory.from_json(measured_json)
    comparison = compare_plan(name, plan, measured).to_json()
    ctx.log(f"   {name}: " + ", ".join(
        f"{r['what'].split(' (')[0]} {100 * (r['error'] or 0):+.1f}%" for r in comparison["rows"]))
    return comparison, {"plan": plan, "measured": measured_json}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in name)[:80]


def step_memory(ctx: StepContext) -> dict[str, Any]:
    context = ctx.config.pair.context
    mode = ctx.config.cache_mode
    comparisons, raw = [], {}
    for label, (target, draft) in exl2_pairs(ctx).items():
        for with_draft in (False, True):
            name = f"{label} target" + (" + draft" if with_draft else "")
            comparison, raw[name] = plan_and_measure(ctx, name, target,
                                                     draft if with_draft else None,
                                                     context, mode, mode)
            comparisons.append(comparison)
    ctx.state.write_json("memory", {"comparisons": comparisons, "raw": raw})
    return {"compared": len(comparisons)}


# seed ------------------------------------------------------------------------------------
_SEED: dict[str, Any] = {}
"""The seed-scale writer started by seed-start in this process."""


def step_seed_start(ctx: StepContext) -> dict[str, Any]:
    """Start writing the seed-shaped models (gpukit.seed_scale) in a thread: a core and the
    disk while the pair trains and the extension builds."""
    from gpukit.seed_scale import Writer, needed_models

    _SEED["writer"] = Writer(ctx.config.seed, ctx.state.root, ctx.log)
    return {"models": [m.name for m in needed_models(ctx.config.seed)]}


def step_seed(ctx: StepContext) -> dict[str, Any]:
    from gpukit import seed_scale

    cfg = ctx.config.seed
    writer = _SEED.get("writer")
    if writer is None:  # a later command, or `run seed`: complete folders are kept
        writer = _SEED["writer"] = seed_scale.Writer(cfg, ctx.state.root, ctx.log)
    if not writer.wait(max(1.0, ctx.seconds_left() - 30)):
        raise StepIncomplete("the seed-shaped models are still being written: run the same "
                             "command again")
    _SEED.pop("writer", None)
    if writer.error is not None:
        raise writer.error
    k = cfg.verify_k
    ab_result = ctx.state.read_json("ab")
    length = seed_scale.draft_arm_length(ab_result, k)
    loads, raw = [], {}
    for load in cfg.loads:
        target, draft = seed_scale.load_args(load, ctx.state.root)
        comparison, raw[load.label] = plan_and_measure(
            ctx, load.label, target, draft, load.context, load.cache_mode, load.draft_cache_mode,
            ("--step-timing", str(k), "--prefix-tokens", str(cfg.prefix_tokens),
             "--repeats", str(cfg.timing_repeats)))
        steps = raw[load.label]["measured"].get("steps") or {}
        prediction = seed_scale.predict(steps, length) if steps else None
        loads.append({"label": load.label, "comparison": comparison,
                      "goal": seed_scale.goal(comparison), "steps": steps,
                      "prediction": prediction.to_json() if prediction else None,
                      "load": {"target": load.target, "draft": load.draft,
                               "context": load.context, "cache_mode": load.cache_mode,
                               "draft_cache_mode": load.draft_cache_mode}})
        ctx.log(f"   goal: {loads[-1]['goal']['why']}"
                + (f"; predicted speed-up {prediction.speedup:.2f}x" if prediction else ""))
    ctx.state.write_json("seed", {"models": writer.result, "loads": loads, "raw": raw,
                                  "acceptance_from": (ab_result or {}).get("pair"),
                                  "mean_acceptance_length": length, "k": k})
    return {"goals_met": [entry["goal"]["met"] for entry in loads],
            "predicted": [entry["prediction"]["speedup"] if entry["prediction"] else None
                          for entry in loads]}


# ab --------------------------------------------------------------------------------------
def step_ab(ctx: StepContext) -> dict[str, Any]:
    from gpukit import ab
    from gpukit.bare_loop import interleaved_overhead_runs
    from gpukit.telemetry import Recorder

    cfg = ctx.config.ab
    pairs = exl2_pairs(ctx)
    if not pairs:
        raise RuntimeError("no EXL2 pair: run the quantize step first")
    label, (target, draft) = next(iter(pairs.items()))
    trace = ctx.state.path("trace.jsonl")
    recorder = Recorder(trace, cfg.telemetry_seconds,
                        f"SpecDeck GPU proof kit: ExLlamaV2 A/B on a trained {label} EXL2 pair "
                        "(loads, baseline / draft / n-gram arms)", ctx.state.path("logs", "trace.log"))
    from specdeck.core.bench.summary import summarize
    from specdeck.core.engines.lossless import compare_tokens

    arms = ab.default_arms(draft, cfg.draft_ks, cfg.ngram_k)
    prompts = ab.select_prompts(cfg.prompts, cfg.prompts_per_suite)
    run = ab.run_arms("exllamav2", target, arms, prompts, cfg.repeats, cfg.max_new_tokens,
                      ctx.config.pair.context, ctx.config.cache_mode, ctx.log, cfg.warmup)
    summaries = ab.arm_rows(summarize(run))
    specdeck_runs, bare_runs = interleaved_overhead_runs(
        target, ctx.config.pair.context, prompts[0].text, cfg.max_new_tokens, cfg.bare_repeats)
    overhead = ab.overhead([r.stats.tokens_per_second for r in specdeck_runs],
                           [r.tokens_per_second for r in bare_runs])
    code, recorder_output = recorder.finish()
    data = {
        "pair": label, "target": str(target), "draft": str(draft),
        "prompts": [p.id for p in prompts], "max_new_tokens": cfg.max_new_tokens,
        "repeats": cfg.repeats,
        "summaries": summaries,
        "runs": [ab.run_row(r.arm, r.prompt_id, r.slot.repeat, r.result) for r in run.counted()],
        "overhead": overhead.to_json(),
        "overhead_runs": {"specdeck": [ab.run_row(ab.BASELINE, "overhead", i, r)
                                       for i, r in enumerate(specdeck_runs)],
                          "bare": [{"new_tokens": r.new_tokens, "time_generate": r.time_generate,
                                    "tokens_per_second": r.tokens_per_second} for r in bare_runs],
                          # the engine's output against the bare loop's, core's check
                          "vs_bare": [compare_tokens(b.token_ids, s.token_ids).verdict.value
                                      for s, b in zip(specdeck_runs, bare_runs)]},
        "trace": {"path": str(trace) if trace.is_file() else None, "exit": code,
                  "output": recorder_output[-2000:]},
    }
    ctx.state.write_json("ab", data)
    return {"overhead_ratio": round(overhead.ratio, 4),
            "speedups": {s["arm"]: s["speedup_median"] for s in summaries if s["speedup_median"]}}


STEPS = [
    Step("install", "install the carried wheels, link SpecDeck from the tree", 15, step_install),
    Step("env", "record the machine, GPU, driver and versions", 10, step_env),
    Step("build-start", "start import exllamav2 (its JIT CUDA build) in the background", 2,
         step_build_start),
    Step("seed-start", "start writing the seed-shaped EXL2 models in the background", 2,
         step_seed_start),
    Step("pair", "train a target and a draft on the same text, save HF", 90, step_pair),
    Step("build", "wait for the extension build", 120, step_build, needs=("build-start",)),
    Step("exl3-start", "start ExLlamaV3's extension build, niced, on half the cores", 2,
         step_exl3_start, needs=("install",)),
    Step("quantize", "EXL2-quantize both (exllamav2's converter)", 120, step_quantize,
         needs=("build", "pair")),
    Step("ab", "A/B arms, bare-loop overhead, NVML trace", 90, step_ab, needs=("quantize",)),
    Step("seed", "the plan and step costs at the seed's 70B shapes (random EXL2 codes)", 100,
         step_seed, needs=("build", "seed-start")),
    Step("check", "specdeck check on the HF pair and each EXL2 pair", 20, step_check,
         needs=("pair",)),
    Step("exl3", "how far ExLlamaV3's build got (then stopped)", 3, step_exl3,
         needs=("exl3-start",)),
    Step("memory", "specdeck vram plan vs a real load's allocation (the trained pair)", 60,
         step_memory, needs=("quantize",)),
]


def steps_by_name() -> dict[str, Step]:
    return {s.name: s for s in STEPS}
