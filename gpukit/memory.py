"""The VRAM planner against what a real load allocates.

``specdeck vram --json`` says what TabbyAPI + ExLlamaV2 will allocate; a fresh process then
loads the same models through SpecDeck's ExLlamaV2 engine and reads what was allocated:
NVML's device memory used (CUDA context included) before CUDA starts, after loading and
after a generation, and PyTorch's allocated / reserved bytes. :func:`compare_plan` sets the
two side by side, three ways:

- device: the plan's total per-GPU use vs NVML's used delta at the peak;
- PyTorch reserved: the plan without the CUDA context vs torch's peak reserved bytes;
- at load: weights + caches + the buffers allocated while loading (scratch, cache
  staging, RoPE tables) vs torch's allocated bytes right after loading.

An error is (plan - measured) / measured: positive means the plan over-estimates (safe),
negative that real use exceeded the plan (a "fits" verdict could be wrong).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

LOAD_TIME_OVERHEADS = ("blas_workspaces", "scratch", "cache_staging", "rope_tables")
"""Overhead parts (vram.OVERHEAD_PARTS) that exist right after loading, before any run."""
SAFE_OVERESTIMATE = 0.15
"""A plan up to 15% above the measurement counts as accurate; more is wasteful."""


@dataclass(frozen=True)
class MeasuredMemory:
    """One load + one generation, in bytes (summed over GPUs); None where unknown."""

    nvml_used_before: int | None
    nvml_used_loaded: int | None
    nvml_used_peak: int | None
    torch_allocated_loaded: int
    torch_reserved_loaded: int
    torch_peak_allocated: int
    torch_peak_reserved: int

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> MeasuredMemory:
        return cls(**{k: data.get(k) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ComparisonRow:
    what: str
    planned: int
    measured: int

    @property
    def error_bytes(self) -> int:
        return self.planned - self.measured

    @property
    def error(self) -> float | None:
        return self.error_bytes / self.measured if self.measured else None

    @property
    def verdict(self) -> str:
        error = self.error
        if error is None:
            return "not measured"
        if error < 0:
            return "UNDER-estimate"
        return "accurate" if error <= SAFE_OVERESTIMATE else "over-estimate"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "error_bytes": self.error_bytes, "error": self.error,
                "verdict": self.verdict}


@dataclass(frozen=True)
class MemoryComparison:
    label: str
    context: int
    rows: tuple[ComparisonRow, ...]
    plan_fits: bool

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "context": self.context, "plan_fits": self.plan_fits,
                "rows": [r.to_json() for r in self.rows]}


def _plan_sums(plan: dict[str, Any]) -> dict[str, int]:
    sums = {"used": 0, "cuda_context": 0, "weights_caches": 0, "load_overheads": 0}
    for gpu in plan["gpus"]:
        sums["used"] += gpu["used_bytes"]
        sums["cuda_context"] += gpu["overhead"].get("cuda_context", 0)
        sums["weights_caches"] += (gpu["target_weights"] + gpu["target_cache"]
                                   + gpu["draft_weights"] + gpu["draft_cache"])
        sums["load_overheads"] += sum(gpu["overhead"].get(k, 0) for k in LOAD_TIME_OVERHEADS)
    return sums


def compare_plan(label: str, plan: dict[str, Any], measured: MeasuredMemory) -> MemoryComparison:
    """``plan`` is `specdeck vram --json`'s output; ``measured`` one real load."""
    sums = _plan_sums(plan)
    rows = []
    if measured.nvml_used_peak is not None and measured.nvml_used_before is not None:
        rows.append(ComparisonRow("device total (NVML used, peak)", sums["used"],
                                  measured.nvml_used_peak - measured.nvml_used_before))
    rows.append(ComparisonRow("PyTorch peak reserved (no CUDA context)",
                              sums["used"] - sums["cuda_context"], measured.torch_peak_reserved))
    rows.append(ComparisonRow("allocated after load (weights, caches, load buffers)",
                              sums["weights_caches"] + sums["load_overheads"],
                              measured.torch_allocated_loaded))
    return MemoryComparison(label, int(plan["context"]), tuple(rows), bool(plan["fits"]))


# On the GPU (unverified until a GPU run) -------------------------------------------------
def nvml_used_bytes() -> int | None:
    """Device memory used on all NVIDIA GPUs, through SpecDeck's own telemetry."""
    from specdeck.core.gpu import read_once

    frame = read_once()
    if not frame.has_gpus:
        return None
    return sum(g.memory_used or 0 for g in frame.gpus)


def measure_load(model: Path, draft: Path | None, context: int, cache_mode: str,
                 prompt: str, max_new_tokens: int = 128, draft_cache_mode: str | None = None,
                 then: Callable[[Any], Any] | None = None) -> tuple[MeasuredMemory, Any]:
    """Load through SpecDeck's ExLlamaV2 engine in THIS process (call it in a fresh one:
    the NVML baseline must be read before CUDA starts) and generate once. ``then(engine)``
    runs after the memory is read, before unloading (the seed step's step costs); its
    result is returned beside the measurement."""
    before = nvml_used_bytes()
    import torch
    from specdeck.core.engines import create_engine
    from specdeck.core.engines.base import (
        NO_DRAFT,
        DrafterKind,
        DrafterSpec,
        GenerationRequest,
        LoadSpec,
    )

    drafter = DrafterSpec(DrafterKind.MODEL, Path(draft), 4) if draft else NO_DRAFT
    engine = create_engine("exllamav2")
    engine.load(LoadSpec(Path(model), drafter=drafter, max_seq_len=context,
                         cache_mode=cache_mode, draft_cache_mode=draft_cache_mode or cache_mode))
    torch.cuda.synchronize()
    devices = range(torch.cuda.device_count())
    allocated = sum(torch.cuda.memory_allocated(d) for d in devices)
    reserved = sum(torch.cuda.memory_reserved(d) for d in devices)
    # generate() resets PyTorch's peak counters: the load's own peak (its forward passes,
    # the warm-up) is read now or never.
    load_peak_allocated = sum(torch.cuda.max_memory_allocated(d) for d in devices)
    load_peak_reserved = sum(torch.cuda.max_memory_reserved(d) for d in devices)
    loaded = nvml_used_bytes()
    engine.generate(GenerationRequest(prompt=prompt, max_new_tokens=max_new_tokens))
    torch.cuda.synchronize()
    peak = nvml_used_bytes()
    measured = MeasuredMemory(
        nvml_used_before=before,
        nvml_used_loaded=loaded,
        nvml_used_peak=max(v for v in (loaded, peak) if v is not None) if peak is not None else None,
        torch_allocated_loaded=allocated,
        torch_reserved_loaded=reserved,
        torch_peak_allocated=max(load_peak_allocated,
                                 sum(torch.cuda.max_memory_allocated(d) for d in devices)),
        torch_peak_reserved=max(load_peak_reserved,
                                sum(torch.cuda.max_memory_reserved(d) for d in devices)),
    )
    extra = then(engine) if then is not None else None
    engine.unload()
    return measured, extra
