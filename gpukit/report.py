"""docs/benchmarks/gpu-<date>.md and .json from whatever the kit's steps have recorded.

Written after every command, so even a run that stops half-way returns its evidence: a
step not run yet says so, a failed one shows its error verbatim.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from gpukit.driver import Step
from gpukit.state import KitState


def report_date(state: KitState) -> str:
    env = state.read_json("env") or {}
    return env.get("date") or time.strftime("%Y-%m-%d")


def collect(state: KitState, steps: list[Step], preset: str) -> dict[str, Any]:
    records = state.records([s.name for s in steps])
    return {
        "kit": "specdeck-gpu-proof",
        "version": 1,
        "date": report_date(state),
        "preset": preset,
        "steps": {s.name: (records[s.name].__dict__ if s.name in records else {"status": "not run"})
                  for s in steps},
        "results": {name: state.read_json(name) for name in
                    ("env", "build-attempts", "pair", "quantize", "check", "memory", "ab",
                     "seed", "exl3")},
    }


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:+.1f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines + [""]


def render_markdown(data: dict[str, Any]) -> str:
    results = data["results"]
    env = results.get("env") or {}
    devices = env.get("devices") or []
    gpu = devices[0]["name"] if devices else (env.get("nvml") or {}).get("headline", "no GPU recorded")
    out = [f"# GPU proof: SpecDeck's ExLlamaV2 path on {gpu} ({data['date']})", "",
           "Made by the GPU proof kit (`gpukit/`, docs/gpu-proof.md), preset "
           f"`{data['preset']}`. Raw numbers: the .json beside this file.", ""]
    out += _environment(env)
    out += ["## Steps", ""]
    out += _table(["step", "status", "seconds", "summary"], [
        [name, rec.get("status"), rec.get("seconds", ""),
         json.dumps(rec.get("summary", {}))[:160] if rec.get("summary") else ""]
        for name, rec in data["steps"].items()])
    out += _pair(results.get("pair"))
    out += _quantize(results.get("quantize"))
    out += _check(results.get("check"))
    out += _memory(results.get("memory"))
    out += _ab(results.get("ab"))
    out += _seed(results.get("seed"))
    out += _exl3(results.get("exl3"))
    out += _failures(data["steps"])
    return "\n".join(out) + "\n"


def _environment(env: dict[str, Any]) -> list[str]:
    if not env:
        return ["## Environment", "", "Not recorded yet.", ""]
    packages = env.get("packages") or {}
    rows = [["platform", env.get("platform")], ["Python", env.get("python")],
            ["CPU cores", env.get("cpu_count")],
            ["nvidia-smi", (env.get("nvidia_smi") or "not found").replace("\n", "; ")],
            ["nvcc", ((env.get("nvcc") or "not found").splitlines() or [""])[-1]],
            ["torch (CUDA)", f"{env.get('torch')} ({env.get('torch_cuda')})"]]
    nvml = env.get("nvml") or {}
    gpus = nvml.get("gpus") or []
    rows.append(["SpecDeck's NVML read", f"{nvml.get('headline', 'not recorded')} "
                 f"(state {nvml.get('state', '?')}; used + free + reserved = total on "
                 f"{sum(1 for g in gpus if g.get('memory_adds_up'))} of {len(gpus)} GPUs)"])
    rows += [[name, version or "not installed"] for name, version in packages.items()]
    return ["## Environment", ""] + _table(["what", "value"], rows)


def _pair(pair: dict[str, Any] | None) -> list[str]:
    if not pair:
        return []
    before, after = pair["agreement_before"], pair["agreement_after"]
    return ["## The target/draft pair", "",
            f"Trained on {pair['tokens']} tokens ({'; '.join(pair['corpus_sources'])}) on "
            f"{pair['device']} for {pair['train_seconds']:.0f} s ({pair['steps']} steps). "
            f"Target {pair['target_params'] / 1e6:.1f} M parameters (final loss "
            f"{pair['target_loss']:.3f}), draft {pair['draft_params'] / 1e6:.1f} M "
            f"({pair['draft_loss']:.3f}).", "",
            f"Greedy agreement on held-out text (draft's next token = target's): "
            f"**{100 * after['rate']:.1f}%** of {after['positions']} positions after training, "
            f"{100 * before['rate']:.1f}% before. Target's own next-token accuracy: "
            f"{100 * after['target_accuracy']:.1f}%.", ""]


def _quantize(quant: dict[str, Any] | None) -> list[str]:
    if not quant:
        return []
    from specdeck.core.units import MiB

    seconds = {r["name"]: r["seconds"] for r in quant["conversions"]}
    rows = [[name, seconds.get(name, ""), info["quant"], _num(info["bytes"] / MiB, 1)]
            for name, info in quant["models"].items()]
    rows += [[name, s, "(measurement)", ""] for name, s in seconds.items() if name not in quant["models"]]
    return ["## EXL2 quantization (exllamav2's converter)", ""] + _table(
        ["job", "seconds", "SpecDeck reads it as", "MiB of weights"], rows)


def _check(check: dict[str, Any] | None) -> list[str]:
    if not check:
        return []
    rows = []
    for label, result in check.items():
        report = result.get("report") or {}
        verdict = report.get("verdict") or report.get("status") or ""
        rows.append([label, result["exit"], verdict])
    return ["## specdeck check", ""] + _table(["pair", "exit", "verdict"], rows)


def _memory(memory: dict[str, Any] | None) -> list[str]:
    if not memory:
        return []
    from specdeck.core.units import GiB

    rows = []
    for c in memory["comparisons"]:
        for r in c["rows"]:
            rows.append([c["label"], r["what"], _num(r["planned"] / GiB, 3),
                         _num(r["measured"] / GiB, 3), _pct(r["error"]), r["verdict"]])
    return ["## VRAM plan vs measured", "",
            "Error = (plan - measured) / measured; positive = the plan is on the safe side.", ""
            ] + _table(["load", "what", "planned GiB", "measured GiB", "error", "verdict"], rows)


def _seed(seed: dict[str, Any] | None) -> list[str]:
    if not seed:
        return []
    from specdeck.core.units import GiB

    out = ["## The seed's scale: 70B-shaped EXL2 with random codes", "",
           "Models written on the device in exllamav2 0.3.2's tensor layout (gpukit.exl2_synth), "
           "loaded through SpecDeck's ExLlamaV2 engine in a fresh process; the plan is "
           "`specdeck vram --json` for the same load. Goal: the plan at or above the measured "
           "peak by at most 5% or 300 MiB.", ""]
    out += _table(["model", "GiB on disk", "bpw (target / reached)", "written in"], [
        [name, _num(m["bytes"] / GiB, 2), f"{m['bpw_target']} / {m['bpw_layers']}",
         f"{m['seconds']} s"] for name, m in (seed.get("models") or {}).items()])
    for entry in seed["loads"]:
        g = entry["goal"]
        out += [f"### {entry['label']}", ""]
        out += _table(["what", "planned GiB", "measured GiB", "error", "verdict"], [
            [r["what"], _num(r["planned"] / GiB, 3), _num(r["measured"] / GiB, 3),
             _pct(r["error"]), r["verdict"]] for r in entry["comparison"]["rows"]])
        out += [f"Goal: **{'met' if g['met'] else 'not met' if g['met'] is False else 'unknown'}**"
                f" ({g['why']}).", ""]
        steps = entry.get("steps") or {}
        if steps:
            rows = [[f"{role}, {rows} row{'s' if rows != '1' else ''}",
                     _num(1000 * t["median_s"], 2), t["runs"]]
                    for role in ("target", "draft") for rows, t in (steps.get(role) or {}).items()]
            out += [f"Forward costs at {steps['prefix_tokens']} cached tokens (median ms):", ""]
            out += _table(["forward", "median ms", "runs"], rows)
        p = entry.get("prediction")
        if p:
            out += [f"**Predicted** speed-up with a draft as good as the trained pair's "
                    f"(mean acceptance length {p['mean_acceptance_length']:.2f} at k={p['k']}): "
                    f"**{p['speedup']:.2f}x**. A prediction from measured parts (these costs, "
                    "that acceptance), not a measured speed-up: random codes accept nothing.", ""]
    return out


def _exl3(exl3: dict[str, Any] | None) -> list[str]:
    if not exl3:
        return []
    out = ["## ExLlamaV3's extension build (exllamav3 1.6.5)", ""]
    if exl3.get("measured") is False:
        return out + [f"Not measured: {exl3['why']}.", ""]
    total = exl3.get("objects_total")
    text = (f"Built {exl3['objects_built']} of {total if total is not None else '?'} objects in "
            f"{exl3['seconds']} s with {exl3['jobs']} jobs at nice {exl3['niced']}, beside the "
            "kit's other steps")
    if exl3.get("finished"):
        text += f"; finished, and `import exllamav3.ext` took {exl3['import_seconds']} s."
    elif exl3.get("projected_minutes_at_these_jobs") is not None:
        text += (f"; stopped at the end of the call. At that rate the whole build takes "
                 f"about {exl3['projected_minutes_at_these_jobs']} min (a projection).")
    else:
        text += "; stopped at the end of the call."
    return out + [text, ""]


def _parted(row: dict[str, Any]) -> str:
    """Where the first run of an arm parted from the baseline, and the target's top-1 minus
    top-2 logit gap at the partings ("-" where the engine reported none)."""
    if row.get("first_divergence") is None:
        return "-"
    gaps = [g for g in row.get("divergence_gaps") or () if g is not None]
    shown = (f" (gaps {min(gaps):.3g}-{max(gaps):.3g})" if len(gaps) > 1 else
             f" (gap {gaps[0]:.3g})" if gaps else " (gap not reported)")
    return f"{row['first_divergence']}{shown}"


def _ab(ab: dict[str, Any] | None) -> list[str]:
    if not ab:
        return []
    rows = []
    for s in ab["summaries"]:
        ci = s.get("speedup_ci")
        speedup = "1 (reference)" if s["speedup_median"] is None else (
            f"{s['speedup_median']:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""))
        rows.append([s["arm"], s["runs"], _num(s["median_tokens_per_second"], 1), speedup,
                     _pct(s["acceptance_rate"]).lstrip("+") if s["acceptance_rate"] is not None
                     else "n/a", _num(s["mean_acceptance_length"]),
                     f"{s['identical_to_baseline']}/{s['runs']}", _parted(s),
                     _pct(s.get("roofline_share")).lstrip("+") if s.get("roofline_share") is not None
                     else "n/a"])
    o = ab["overhead"]
    out = ["## A/B through SpecDeck's ExLlamaV2 engine", "",
           f"Pair {ab['pair']}, prompts {', '.join(ab['prompts'])}, {ab['max_new_tokens']} new "
           f"tokens, greedy, {ab['repeats']} repeats, arms interleaved.", ""]
    out += _table(["arm", "runs", "median tok/s", "speed-up [95% CI]", "acceptance",
                   "mean acceptance length", "tokens = baseline",
                   "parted at token (logit gap there)", "weights read / peak bandwidth"], rows)
    out += ["## SpecDeck overhead", "",
            f"SpecDeck baseline {o['specdeck_median']:.1f} tok/s vs a bare exllamav2 loop "
            f"{o['bare_median']:.1f} tok/s: ratio **{o['ratio']:.3f}** (goal >= {o['goal']}, "
            f"{'met' if o['met'] else 'NOT met'}; paired 95% CI {o['paired_ratio_ci'][0]:.3f}-"
            f"{o['paired_ratio_ci'][1]:.3f}).", ""]
    trace = ab.get("trace") or {}
    out += [f"NVML trace: {trace.get('path') or 'not recorded'} (recorder exit {trace.get('exit')}).", ""]
    return out


def _failures(steps: dict[str, Any]) -> list[str]:
    failed = {name: rec for name, rec in steps.items() if rec.get("error")}
    if not failed:
        return []
    out = ["## Failures and interruptions, verbatim", ""]
    for name, rec in failed.items():
        out += [f"### {name} ({rec['status']})", "", "```", rec["error"].rstrip(), "```", ""]
    return out


def write_report(state: KitState, steps: list[Step], preset: str, out_dir: Path) -> list[Path]:
    data = collect(state, steps, preset)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"gpu-{data['date']}"
    json_path = out_dir / f"{stem}.json"
    md_path = out_dir / f"{stem}.md"
    json_path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    md_path.write_text(render_markdown(data), encoding="utf-8")
    return [md_path, json_path]
