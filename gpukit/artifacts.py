"""Carry big build outputs between device machines through $OUT's size limits.

$OUT returns at most 8 files of 16 MiB each, and a later call's working tree may carry
them back (`.gpukit/` in `carry`). The built ExLlamaV2 extension (one .so, tens of MB) is
split into numbered parts on the way out and joined again on the way in, with its sha256
checked, so a cold machine can import it instead of compiling for minutes.
"""

from __future__ import annotations

import hashlib
import json
import lzma
from pathlib import Path

from specdeck.core.units import MiB

PART_BYTES = 15 * MiB
"""Below $OUT's 16 MiB per file."""


def split_file(source: Path, out_dir: Path, part_bytes: int = PART_BYTES) -> list[Path]:
    """``name.partNN`` files plus ``name.parts.json`` (sha256, size, part names)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    data = Path(source).read_bytes()
    parts = []
    for number, start in enumerate(range(0, max(len(data), 1), part_bytes)):
        part = out_dir / f"{source.name}.part{number:02d}"
        part.write_bytes(data[start : start + part_bytes])
        parts.append(part)
    manifest = out_dir / f"{source.name}.parts.json"
    manifest.write_text(json.dumps({
        "name": source.name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
        "parts": [p.name for p in parts]}, indent=2) + "\n", encoding="utf-8")
    return [manifest, *parts]


def join_parts(manifest: Path, dest_dir: Path) -> Path:
    """Rebuild the file next to nothing half-written; ValueError if a part is missing or
    the checksum differs."""
    info = json.loads(Path(manifest).read_text(encoding="utf-8"))
    chunks = []
    for name in info["parts"]:
        part = manifest.parent / name
        if not part.is_file():
            raise ValueError(f"{part} is missing: copy every part back before joining")
        chunks.append(part.read_bytes())
    data = b"".join(chunks)
    if info.get("compression") == "xz":  # see compress_parts
        try:
            data = lzma.decompress(data)
        except lzma.LZMAError as exc:
            raise ValueError(f"{info['name']}: the joined parts are not a whole xz stream ({exc})") from exc
    if len(data) != info["size"] or hashlib.sha256(data).hexdigest() != info["sha256"]:
        raise ValueError(f"{info['name']}: the joined parts do not match the manifest's sha256")
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / info["name"]
    temporary = target.with_suffix(".partial")
    temporary.write_bytes(data)
    temporary.replace(target)
    return target


def compress_parts(manifest: Path, out_dir: Path) -> list[Path]:
    """The same file as xz-compressed parts (``compression: xz`` in the manifest; sha256 and
    size stay those of the joined file). The built extension, 43 MB, is 12 MB in xz: with the
    working tree it fits the 64 MiB a device call carries, where the raw parts do not."""
    source = join_parts(manifest, out_dir / ".joined")
    data = source.read_bytes()
    packed = lzma.compress(data, preset=3)
    info = json.loads(Path(manifest).read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)
    parts = []
    for number, start in enumerate(range(0, max(len(packed), 1), PART_BYTES)):
        part = out_dir / f"{info['name']}.xz.part{number:02d}"
        part.write_bytes(packed[start : start + PART_BYTES])
        parts.append(part)
    source.unlink()
    source.parent.rmdir()
    target = out_dir / f"{info['name']}.parts.json"
    target.write_text(json.dumps({**info, "compression": "xz", "parts": [p.name for p in parts]},
                                 indent=2) + "\n", encoding="utf-8")
    return [target, *parts]
