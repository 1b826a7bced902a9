"""Write resources/traces/demo-5090-4090-70b.jsonl: a SYNTHETIC GPU telemetry trace.

No NVIDIA GPU was available when SpecDeck's GPU views were built, so this script makes a
trace that looks like what NVML reports on a typical user's workstation, from published
facts and SpecDeck's own VRAM plan, for the demo mode, the screenshots and the tests. The
GPU-proof kit replaces it with a real recording (`specdeck gpus --record FILE`).

The scene (every number below has its source in a comment):
- an RTX 4090 in the first PCIe slot (NVML index 0, driving the desktop) and an RTX 5090 in
  the second (NVML index 1); CUDA's default FASTEST_FIRST order makes the 5090 CUDA 0;
- TabbyAPI starts at t=5 s and loads Llama-3.1-70B-Instruct EXL2 4.0 bpw with a
  Llama-3.2-1B-Instruct EXL2 4.0 bpw draft, Q4 caches, 32768 context, autosplit: memory
  climbs as the layers load (the draft and layers 0-63 on the 5090, 64-79 on the 4090, at
  the levels SpecDeck's plan gives);
- then four chat requests: a prompt-processing burst near the power limit, then decoding,
  where the pipeline split keeps the 5090 busy most of each step and the 4090 a fifth;
  temperatures follow power with a 30 s lag.

Run `python -m tools.make_gpu_trace` to regenerate (deterministic: fixed seed).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
from specdeck.core.gpu.telemetry import peak_bandwidth
from specdeck.core.units import MiB, format_bytes

from tools.fixtures import fixtures_dir

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "resources" / "traces" / "demo-5090-4090-70b.jsonl"

INTERVAL_S = 0.25
DURATION_S = 120.0
SEED = 5090

# Card facts. Totals are what nvidia-smi reports (24564 MiB for a 24 GB RTX 4090, 32607 MiB
# for a 32 GB RTX 5090); the reserved share is the idle "used" of a headless card with
# driver 550 (459 MiB on a 4090, RLinf issue #255); power limits are the reference TGPs
# (450 W, 575 W); idle draw ~22 W (4090 at P8, same source) and ~30 W (5090 reviews).
# Peak bandwidth from NVML's max memory clock and bus width as nvidia-smi -q shows them
# (4090: 10501 MHz, 384 bits = 1008 GB/s; 5090: 14001 MHz, 512 bits = 1792 GB/s, as published).
CARDS = [
    dict(index=0, name="NVIDIA GeForce RTX 4090", cuda_index=1,
         uuid="GPU-5d1c9a3e-7f42-4b8e-9c1a-2e6f0b7d4a19", pci_bus_id="00000000:01:00.0",
         memory_total=24564 * MiB, memory_reserved=459 * MiB, power_limit_w=450.0,
         memory_bandwidth_peak=peak_bandwidth(10501, 384),
         idle_w=22.0, decode_w=165.0, prefill_w=410.0, ambient_c=31.0, c_per_w=0.11),
    dict(index=1, name="NVIDIA GeForce RTX 5090", cuda_index=0,
         uuid="GPU-a4e07c52-19b3-4d6f-8e25-7c90f1b3d6e8", pci_bus_id="00000000:02:00.0",
         memory_total=32607 * MiB, memory_reserved=493 * MiB, power_limit_w=575.0,
         memory_bandwidth_peak=peak_bandwidth(14001, 512),
         idle_w=30.0, decode_w=345.0, prefill_w=540.0, ambient_c=30.0, c_per_w=0.085),
]
DESKTOP = [(1893, "Xorg", 412 * MiB), (2240, "gnome-shell", 168 * MiB)]  # on the 4090
TABBY_PID, SPECDECK_PID = 48213, 51377

TABBY_START, DRAFT_END, GPU0_END, GPU1_END, WARMUP_END = 5.0, 8.0, 36.0, 44.0, 46.0
REQUESTS = [(52.0, 0.9, 9.5), (68.0, 0.6, 12.0), (86.0, 1.2, 8.0), (101.0, 0.7, 13.0)]
"""(start s, prompt processing s, decoding s)"""


def planned_bytes() -> dict[int, dict[str, int]]:
    """Per CUDA GPU: the plan's weights+cache and its overhead for the scene's models."""
    from specdeck.core import vram

    tests = ROOT / "tests" / "data" / "models"
    fixtures = fixtures_dir() / "models"
    target = vram.model_weights(tests / "Llama-3.1-70B-Instruct", bpw=4.0)
    draft = vram.model_weights(fixtures / "Llama-3.2-1B", bpw=4.0)
    gpus = tuple(
        vram.GpuSpec(card["cuda_index"], card["name"], card["memory_total"], card["memory_reserved"],
                     nvml_index=card["index"])
        for card in sorted(CARDS, key=lambda c: c["cuda_index"])
    )
    result = vram.plan(vram.PlanRequest(target, gpus, 32768, "Q4", draft, "Q4"))
    return {
        g.index: dict(draft=g.draft_weights + g.draft_cache,
                      target=g.target_weights + g.target_cache,
                      overhead=g.overhead_bytes - g.overhead["activations"],
                      activations=g.overhead["activations"])
        for g in result.gpus
    }


def ramp(t: float, start: float, end: float) -> float:
    return min(1.0, max(0.0, (t - start) / (end - start)))


def tabby_memory(cuda: int, t: float, plan: dict[int, dict[str, int]]) -> int:
    """TabbyAPI's memory on one GPU at time t (0 before it touches the GPU)."""
    p = plan[cuda]
    if cuda == 0:
        if t < TABBY_START + 0.5:
            return 0
        loaded = p["overhead"] + p["draft"] * ramp(t, TABBY_START + 0.5, DRAFT_END)
        # Layers arrive one safetensors shard at a time: steps, not a smooth line.
        loaded += p["target"] * math.floor(ramp(t, DRAFT_END, GPU0_END) * 48) / 48
    else:
        if t < GPU0_END:
            return 0
        loaded = p["overhead"] + p["target"] * math.floor(ramp(t, GPU0_END, GPU1_END) * 12) / 12
    if t >= GPU1_END:
        loaded += p["activations"]  # the warm-up forward pass; PyTorch keeps the blocks
    return int(loaded)


def activity(t: float) -> tuple[str, float]:
    """("idle" | "load" | "warmup" | "prefill" | "decode", phase-local seconds)."""
    for start, prefill, decode in REQUESTS:
        if start <= t < start + prefill:
            return "prefill", t - start
        if start + prefill <= t < start + prefill + decode:
            return "decode", t - start - prefill
    if TABBY_START <= t < GPU1_END:
        return "load", t - TABBY_START
    if GPU1_END <= t < WARMUP_END:
        return "warmup", t - GPU1_END
    return "idle", 0.0


def utilisation(card: dict, phase: str, loading: bool,
                rng: np.random.Generator) -> tuple[float, float, float]:
    """(gpu %, memory %, power W) for one card in one phase (``loading``: layers arrive)."""
    fast = card["cuda_index"] == 0  # the 5090 holds 64 of 80 layers and the draft
    if phase == "prefill":
        util, mem, power = 99, 62 if fast else 55, card["prefill_w"]
    elif phase == "decode":
        util = 78 if fast else 24
        mem, power = (71 if fast else 22), card["decode_w"]
    elif phase == "warmup":
        util, mem, power = 100, 40, card["prefill_w"] * 0.6
    elif phase == "load" and loading:
        util, mem, power = 6, 3, card["idle_w"] * 2.8
    else:
        util, mem, power = (4 if card["index"] == 0 else 0), 2, card["idle_w"]
    jitter = rng.normal(0, 3)
    # The driver's power management never lets the board exceed its enforced limit.
    watts = min(card["power_limit_w"], max(card["idle_w"] * 0.8, power * (1 + rng.normal(0, 0.04))))
    return float(np.clip(util + jitter, 0, 100)), float(np.clip(mem + jitter * 0.7, 0, 100)), watts


def build() -> tuple[dict, list[dict]]:
    rng = np.random.default_rng(SEED)
    plan = planned_bytes()
    header = {
        "format": "specdeck-gpu-trace",
        "version": 1,
        "synthetic": True,
        "description": (
            "SYNTHETIC, not recorded on hardware: RTX 4090 (desktop, NVML 0) + RTX 5090 "
            "(NVML 1, CUDA 0) while TabbyAPI loads Llama-3.1-70B-Instruct EXL2 4.0 bpw with a "
            "Llama-3.2-1B draft (Q4 caches, 32k context, autosplit) and serves four requests. "
            "Memory levels from SpecDeck's VRAM plan; card totals, idle draw and power limits "
            "from published specs. Made by tools/make_gpu_trace.py; replace with a real "
            "recording (specdeck gpus --record)."
        ),
        "interval_s": INTERVAL_S,
        "driver_version": "570.133.07",
        "own_pid": SPECDECK_PID,
        "gpus": [{k: card[k] for k in ("index", "name", "cuda_index", "uuid", "pci_bus_id",
                                       "memory_total", "memory_reserved", "power_limit_w",
                                       "memory_bandwidth_peak")}
                 for card in CARDS],
    }
    temperature = {card["index"]: card["ambient_c"] + card["c_per_w"] * card["idle_w"] for card in CARDS}
    samples = []
    steps = int(DURATION_S / INTERVAL_S)
    for step in range(steps):
        t = step * INTERVAL_S
        phase, _ = activity(t)
        gpus = []
        for card in CARDS:
            tabby = tabby_memory(card["cuda_index"], t, plan)
            util, mem_util, power = utilisation(card, phase, tabby > 0, rng)
            # First-order thermal lag towards the temperature this power sustains.
            target_c = card["ambient_c"] + card["c_per_w"] * power
            temperature[card["index"]] += (target_c - temperature[card["index"]]) * INTERVAL_S / 30.0
            procs = []
            if card["index"] == 0:
                procs += [[pid, name, size + int(rng.integers(-2, 3)) * MiB] for pid, name, size in DESKTOP]
            if tabby:
                procs.insert(0, [TABBY_PID, "python3", tabby])
            temp_c = temperature[card["index"]]
            gpus.append({
                "index": card["index"],
                "used": sum(p[2] for p in procs),
                "util": round(util), "mem_util": round(mem_util), "power_w": round(power, 1),
                "temp_c": round(temp_c),
                "fan": round(min(100.0, max(30.0, 30 + (temp_c - 45) * 2.2))),
                "procs": procs,
            })
        samples.append({"t": round(t, 3), "gpus": gpus})
    return header, samples


def main() -> int:
    from specdeck.core.gpu.replay import write_trace

    header, samples = build()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_trace(OUT, header, samples)
    print(f"{OUT} ({format_bytes(OUT.stat().st_size)}, {len(samples)} samples)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
