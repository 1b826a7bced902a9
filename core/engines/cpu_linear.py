"""Faster linear layers on some CPUs: weights pre-packed once for oneDNN.

A verify step multiplies 2-9 rows by every weight matrix. With plain ``F.linear`` (MKL
sgemm) a few rows can cost much more than one; oneDNN's linear with a weight reordered once
at load time costs about the same for 1 to 9 rows. Whether that wins depends on the CPU
(docs/benchmarks/engine_choices.md): on the 2-core EPYC it was written on packing made a
1-row forward faster as well (by hand), on a 2-core Xeon 1.22x slower, while there 5 rows
cost 1.24x one row packed against 1.58x plain. A slower plain decode would make every
speed-up read high (the no-draft arm is the anchor), so the engine does not assume:
:func:`choose` times a 1-row forward both ways on the loaded model and keeps the packed
layers only where they are not slower.

The ops are PyTorch-internal (``torch.ops.mkldnn._reorder_linear_weight`` and
``_linear_pointwise``, the ones Inductor's CPU weight pre-packing uses). Every packed layer
is checked against ``F.linear`` on a random input when it is built; any failure, missing op
or mismatch leaves the model as it was. Imports torch; only the PyTorch engine uses it.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from specdeck.core.engines.speculative import cache_argument
from torch import nn

log = logging.getLogger(__name__)

_RTOL = 1e-4
_ATOL = 1e-4


class PackedLinear(nn.Module):
    """``nn.Linear`` computed by oneDNN from a weight reordered once."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        weight = linear.weight.detach()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight, None)
        self.bias = None if linear.bias is None else linear.bias.detach()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = torch.ops.mkldnn._linear_pointwise(
            x.reshape(-1, shape[-1]), self.packed, self.bias, "none", [], ""
        )
        return y.reshape(*shape[:-1], self.out_features)


def supported(device: torch.device, dtype: torch.dtype) -> bool:
    return (
        device.type == "cpu"
        and dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


def _packed_or_none(linear: nn.Linear) -> PackedLinear | None:
    try:
        packed = PackedLinear(linear)
        probe = torch.randn(3, linear.in_features, dtype=linear.weight.dtype)
        with torch.inference_mode():
            expected = F.linear(probe, linear.weight, linear.bias)
            got = packed(probe)
        if got.shape == expected.shape and torch.allclose(got, expected, rtol=_RTOL, atol=_ATOL):
            return packed
        log.warning("oneDNN linear disagrees with F.linear; keeping the plain layer")
    except (RuntimeError, TypeError, AttributeError) as exc:
        log.info("oneDNN weight packing unavailable: %s", exc)
    return None


class Packing:
    """Every ``nn.Linear`` of a model with its packed twin, swappable both ways."""

    def __init__(self, model: nn.Module):
        self.swaps: list[tuple[nn.Module, str, nn.Linear, PackedLinear]] = []
        for parent in model.modules():
            for name, child in parent.named_children():
                if type(child) is nn.Linear:
                    packed = _packed_or_none(child)
                    if packed is None:  # all or nothing: mixed layers explain nothing
                        self.swaps = []
                        return
                    self.swaps.append((parent, name, child, packed))

    def __len__(self) -> int:
        return len(self.swaps)

    def use(self, packed: bool) -> None:
        for parent, name, plain, twin in self.swaps:
            setattr(parent, name, twin if packed else plain)


def prepack_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`PackedLinear`; returns how many
    (0: none could be packed, the model is unchanged)."""
    packing = Packing(model)
    packing.use(True)
    return len(packing)


@dataclass(frozen=True)
class Choice:
    packed_layers: int
    """Layers left packed (0: plain F.linear)."""
    plain_ms: float | None = None
    packed_ms: float | None = None
    """Median 1-row forward, each way, when they were timed."""

    def note(self) -> str | None:
        if self.plain_ms is None or self.packed_ms is None:
            return (f"{self.packed_layers} linear layers pre-packed for oneDNN"
                    if self.packed_layers else None)
        timing = f"a 1-token forward took {self.packed_ms:.1f} ms packed, {self.plain_ms:.1f} ms plain"
        if self.packed_layers:
            return f"{self.packed_layers} linear layers pre-packed for oneDNN ({timing})"
        return f"linear layers left plain: oneDNN pre-packing is slower on this CPU ({timing})"


def cpu_seconds() -> float:
    """This process's CPU seconds (every thread's): the work a forward does, whatever else
    runs on the machine. ``choose`` times by it, not by the wall clock: on the shared 2-core
    machine, at a load average of 11, the wall clock once timed a 1-row forward at 298 ms
    plain and 348 ms packed and left the layers plain, where one thread's CPU time says
    26 ms packed and 40 ms plain (and a 5-row verify 35 ms packed, 65 ms plain: n-gram
    drafting then cost 1.35x a plain step instead of 1.08x, 2026-11-28)."""
    return time.process_time()


def choose(model: nn.Module, device: torch.device, repeats: int = 5) -> Choice:
    """Pack the model's linear layers only if a 1-row forward (plain decoding, the A/B's
    anchor) is not slower packed. The two are timed alternately after a short prefill, in
    CPU seconds (``cpu_seconds``)."""
    from transformers import DynamicCache

    packing = Packing(model)
    if not packing:
        return Choice(0)
    cache_key = cache_argument(model)
    times: dict[bool, list[float]] = {False: [], True: []}
    with torch.inference_mode():
        vocab = model.get_input_embeddings().num_embeddings
        context = (torch.arange(100, 164, device=device) % vocab).unsqueeze(0)
        step = torch.tensor([[200 % vocab]], device=device)
        cache = DynamicCache(config=model.config)
        model(context, use_cache=True, **{cache_key: cache})
        for index in range(2 * (repeats + 1)):
            packed = index % 2 == 1
            packing.use(packed)
            started = cpu_seconds()
            model(step, use_cache=True, **{cache_key: cache})
            if index >= 2:  # the first of each way is a warm-up
                times[packed].append(cpu_seconds() - started)
            cache.crop(-1)
    plain_ms, packed_ms = (statistics.median(times[p]) * 1000 for p in (False, True))
    keep = packed_ms <= plain_ms
    packing.use(keep)
    return Choice(len(packing) if keep else 0, plain_ms, packed_ms)
