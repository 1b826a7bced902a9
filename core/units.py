"""Byte counts as SpecDeck shows them: binary units (KiB, MiB, GiB), everywhere; and the one
byte rate shown in decimal units, a memory bandwidth (``format_bandwidth``).

One unit system for the whole app: a model's download size on the Models page, its weights in
a VRAM plan and a GPU's free memory must be comparable at a glance, and GPU memory is binary
(nvidia-smi's MiB, a "24 GB" card's 24 GiB). The unit is always printed with the number.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4


_UNITS = (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB))


def byte_unit(count: int | float) -> tuple[str, int]:
    """The unit ``count`` bytes read best in, and its size: the largest binary unit not above
    it ("B" below 1 KiB). format_bytes and every plot's byte axis pick their unit here, so a
    36 MiB process reads "MiB" on an axis as in a table, never "GiB (x0.001)"."""
    value = abs(float(count))
    return next(((name, size) for name, size in _UNITS if value >= size), ("B", 1))


def format_bytes(count: int | float) -> str:
    """``count`` bytes: "512 B", "3.4 KiB", "12.5 MiB", "412 MiB", "1.50 GiB", "2.00 TiB"."""
    sign = "-" if count < 0 else ""
    name, size = byte_unit(count)
    value = abs(float(count)) / size
    if name == "B":
        return f"{sign}{value:.0f} B"
    if name == "KiB" or (name == "MiB" and value < 100):
        return f"{sign}{value:.1f} {name}"
    if name == "MiB":
        return f"{sign}{value:.0f} MiB"
    return f"{sign}{value:.2f} {name}"


def format_bandwidth(bytes_per_s: float) -> str:
    """A memory bandwidth: "1.31 TB/s", "936.0 GB/s". Decimal, unlike byte counts: GPU makers
    publish bandwidth in decimal TB/s (an H100 SXM's 3.35 TB/s), and a roofline share is read
    against that figure."""
    if bytes_per_s >= 1e12:
        return f"{bytes_per_s / 1e12:.2f} TB/s"
    return f"{bytes_per_s / 1e9:.1f} GB/s"
