"""The GPUs a plan is for: typed-in sizes, or the ones telemetry sees, in CUDA order."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specdeck.core.config.schema import MAX_GPU_GB, MAX_GPUS, MAX_RESERVE_MB
from specdeck.core.errors import InvalidInputError
from specdeck.core.units import GiB
from specdeck.core.vram.costs import DEFAULT_OVERHEADS, Overheads


class CudaNamed:
    """How a planned GPU is named, for GpuSpec and the plan's GpuPlan alike (each has
    ``index``, its place in gpu_split; ``name``; ``cuda_index``; ``cuda_exact``)."""

    @property
    def label(self) -> str:
        """"CUDA 0: RTX 5090", as the GPUs page's card for it says
        (core.gpu.telemetry.cuda_text), never a bare "GPU 0" that on the same page names
        nvidia-smi's GPU 0, which need not be this one."""
        return gpu_label(self.index, self.name, self.cuda_index, self.cuda_exact)

    @property
    def in_words(self) -> str:
        """"the RTX 5090 (CUDA 0)", for a sentence."""
        return gpu_label(self.index, self.name, self.cuda_index, self.cuda_exact, True)


@dataclass(frozen=True)
class GpuSpec(CudaNamed):
    """A GPU to plan for, numbered as CUDA (and so TabbyAPI's gpu_split) numbers it."""

    index: int
    name: str
    total_bytes: int
    reserved_bytes: int
    """Held by the driver and firmware; no program can use it."""
    in_use_bytes: int = 0
    """Held by other programs right now (the desktop, another server), when counted."""
    nvml_index: int | None = None
    cuda_index: int | None = -1
    """CUDA's index for this GPU as telemetry read it (None: hidden from CUDA); -1, the
    default, for a GPU typed in by size: its position is its CUDA index."""
    cuda_exact: bool = True
    """False where telemetry had to estimate the CUDA order."""

    @property
    def capacity_bytes(self) -> int:
        return self.total_bytes - self.reserved_bytes - self.in_use_bytes


def short_name(name: str) -> str:
    """A GPU's name without the vendor's prefix: "RTX 4090", "H200"."""
    return name.replace("NVIDIA GeForce ", "").replace("NVIDIA ", "")


def gpu_label(position: int, name: str, cuda_index: int | None, exact: bool = True,
              in_words: bool = False) -> str:
    """See CudaNamed.label; ``in_words`` for a sentence: "the RTX 5090 (CUDA 0)".
    ``cuda_index`` -1: a typed-in GPU, whose position is its index."""
    from specdeck.core.gpu.telemetry import cuda_text

    cuda = cuda_text(position if cuda_index == -1 else cuda_index, exact)
    return f"the {short_name(name)} ({cuda})" if in_words else f"{cuda}: {short_name(name)}"


def parse_gpu_sizes(text: str, overheads: Overheads = DEFAULT_OVERHEADS) -> tuple[GpuSpec, ...]:
    """GPUs typed by hand: "32,24" = a 32 GB card and a 24 GB card (GPU 0 first)."""
    sizes = _parse_numbers(text, "GPU sizes")
    if not sizes or any(s <= 0 for s in sizes):
        raise InvalidInputError(
            f"GPU sizes {text!r} should be positive numbers of GB.", "For example: --gpus 32,24"
        )
    return tuple(
        GpuSpec(i, f"{size:g} GB GPU", int(size * GiB), min(overheads.driver_reserved, int(size * GiB) // 4))
        for i, size in enumerate(sizes)
    )




def _parse_numbers(text: str | Sequence[float], what: str, limit: float = MAX_GPU_GB,
                   example: str = "20,24") -> list[float]:
    """Finite numbers from 0 to ``limit``, at most one per GPU."""
    try:
        if isinstance(text, str):
            values = [float(part) for part in text.replace(" ", "").strip("[]").split(",") if part]
        else:
            values = [float(v) for v in text]
    except (TypeError, ValueError):
        raise InvalidInputError(
            f"{what} {str(text)[:40]!r} should be numbers separated by commas.",
            f"For example: {example}") from None
    if len(values) > MAX_GPUS:
        raise InvalidInputError(f"{what} lists {len(values)} GPUs; SpecDeck plans for at most "
                                f"{MAX_GPUS}.", f"For example: {example}")
    bad = [v for v in values if not math.isfinite(v) or not 0 <= v <= limit]
    if bad:
        raise InvalidInputError(f"{what}: {bad[0]:g} is not a size from 0 to {limit:g}.",
                                f"For example: {example}")
    return values


def parse_split(text: str | Sequence[float] | None, what: str = "gpu_split") -> tuple[float, ...] | None:
    """A gpu_split like "20,24" (GB per GPU, in CUDA order), or None."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    values = _parse_numbers(text, what)
    if not values or any(v < 0 for v in values) or not any(v > 0 for v in values):
        raise InvalidInputError(f"{what} {text!r} needs at least one positive size in GB.")
    return tuple(values)


def parse_reserve_mb(text: str | Sequence[float]) -> tuple[float, ...]:
    """TabbyAPI's autosplit_reserve: MB kept free per GPU during autosplit, e.g. "96"."""
    values = _parse_numbers(text, "autosplit_reserve", MAX_RESERVE_MB, "96 or 96,0")
    if not values or any(v < 0 for v in values):
        raise InvalidInputError(
            f"autosplit_reserve {text!r} should be MB per GPU (0 or more).", "For example: 96 or 96,0"
        )
    return tuple(values)


def gpus_from_frame(frame, count_in_use: bool = False,
                    overheads: Overheads = DEFAULT_OVERHEADS) -> tuple[GpuSpec, ...]:
    """The GPUs a telemetry frame shows, in CUDA order (what gpu_split means by GPU 0)."""
    from specdeck.core.gpu.telemetry import GpuStatus

    usable = [g for g in frame.gpus if g.status == GpuStatus.OK and g.memory_total]
    visible = [g for g in usable if g.cuda_index is not None] or usable
    visible.sort(key=lambda g: (g.cuda_index if g.cuda_index is not None else g.index))
    specs = []
    for position, g in enumerate(visible):
        reserved = g.memory_reserved if g.memory_reserved is not None else overheads.driver_reserved
        in_use = 0
        if count_in_use and g.memory_used is not None:
            # v1 "used" includes the driver's reservation, v2 "used" does not.
            held = g.memory_used - (0 if g.memory_reserved is not None else reserved)
            in_use = max(0, held - (g.own_bytes or 0))
        specs.append(GpuSpec(position, g.name, g.memory_total, reserved, in_use, g.index,
                             g.cuda_index, g.cuda_index_exact))
    return tuple(specs)
