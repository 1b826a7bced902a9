"""Byte counts as SpecDeck shows them: binary units (KiB, MiB, GiB), everywhere.

One unit system for the whole app: a model's download size on the Models page, its weights in
a VRAM plan and a GPU's free memory must be comparable at a glance, and GPU memory is binary
(nvidia-smi's MiB, a "24 GB" card's 24 GiB). The unit is always printed with the number.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4


def format_bytes(count: int | float) -> str:
    """``count`` bytes: "512 B", "3.4 KiB", "12.5 MiB", "412 MiB", "1.50 GiB", "2.00 TiB"."""
    sign = "-" if count < 0 else ""
    value = abs(float(count))
    if value < KiB:
        return f"{sign}{value:.0f} B"
    if value < MiB:
        return f"{sign}{value / KiB:.1f} KiB"
    if value < GiB:
        mib = value / MiB
        return f"{sign}{mib:.1f} MiB" if mib < 100 else f"{sign}{mib:.0f} MiB"
    if value < TiB:
        return f"{sign}{value / GiB:.2f} GiB"
    return f"{sign}{value / TiB:.2f} TiB"
