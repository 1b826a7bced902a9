"""Faster linear layers on CPU: weights pre-packed once for oneDNN.

A verify step multiplies 2-9 rows by every weight matrix. With plain ``F.linear`` (MKL
sgemm) a few rows cost 1.5-3x one row, because the big weight is re-packed on every call;
oneDNN's linear with a weight reordered once at load time costs about the same for 1 to 9
rows (measured on SmolLM2-135M, 2-core AVX2: full forward 41 ms for 1 token, 53 ms for 5,
against 52 / 81 ms unpacked). That is what makes drafting pay off on a CPU at all, and it
speeds up plain decoding too, so both A/B arms get it.

The ops are PyTorch-internal (``torch.ops.mkldnn._reorder_linear_weight`` and
``_linear_pointwise``, the ones Inductor's CPU weight pre-packing uses). Every packed layer
is checked against ``F.linear`` on a random input when it is built; any failure, missing op
or mismatch leaves the model as it was. Imports torch; only the PyTorch engine uses it.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
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


def prepack_linears(model: nn.Module) -> int:
    """Replace every ``nn.Linear`` of ``model`` by a :class:`PackedLinear`; returns how many.

    All or nothing: if one layer cannot be packed, none is (mixed layers would only make
    the speed harder to explain)."""
    targets: list[tuple[nn.Module, str, PackedLinear]] = []
    for parent in model.modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear:
                packed = _packed_or_none(child)
                if packed is None:
                    return 0
                targets.append((parent, name, packed))
    for parent, name, packed in targets:
        setattr(parent, name, packed)
    return len(targets)
