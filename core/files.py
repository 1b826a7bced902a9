"""Files someone else wrote, read with bounds: one reader for all of them.

A path a user gives, a file in SpecDeck's data folder or a backup beside the user's config
can be anything by the time SpecDeck opens it: a named pipe (opening it waits for a writer
for ever), ``/dev/zero`` (reading it never ends), a folder, a symbolic link swapped in since,
or a file of gigabytes. :func:`read_bounded` opens without blocking, reads only a regular
file, at most ``limit`` bytes, and says which of these it met instead; :func:`file_kind`
words what a path is, so that a FIFO is never reported as "does not exist".
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from specdeck.core.errors import InvalidInputError, NotFoundError, SpecDeckError
from specdeck.core.units import KiB, MiB, format_bytes

SMALL_FILE = 16 * MiB
"""What SpecDeck reads at most of a text file it did not write itself this run (a saved
tune, the tune history, a prompts file, api_tokens.yml): far above any real one."""
METADATA_FILE = 128 * MiB
"""What SpecDeck reads at most of a model's tokenizer or template file (tokenizer.json,
tokenizer.model, vocab.json, chat_template.jinja), on disk or from the Hub: real
tokenizer.json files reach ~35 MB (Gemma); anything far larger is not metadata."""
KEY_FILE = 64 * KiB
"""What SpecDeck reads at most of an API key file (llama-server's ``--api-key-file``, a key a
line; TabbyAPI's api_tokens.yml, two keys of 32 hex digits, common/auth.py)."""
CONFIG_FILE = 4 * MiB
"""What SpecDeck reads at most of a server's config, whether it edits, copies or only reads
it (TabbyAPI's config.yml, a launched arm's copy of it, a model's tabby_config.yml, the
config_sample.yml a new config.yml is copied from; llama-swap's config.yaml; a presets
file): TabbyAPI's config_sample.yml is about 10 KiB, so a 4 MiB "config" is something else.
A config is read whole and parsed at every open, hence the smallest cap of a text file."""
MODEL_CONFIG = SMALL_FILE
"""What SpecDeck reads at most of a model's config.json, on disk (``core.models.read_json``)
and from the Hub (``HubClient.read_small_file``, the metadata download): real ones are a few
KiB, the largest (label maps) well under 1 MiB. One cap, so that a config.json the Hub gives
is one the model library then reads (the Hub's caps were 64 and 128 MiB, the disk's 16)."""
PROMPT_FILE = SMALL_FILE
"""What SpecDeck reads at most of a prompt file: ``specdeck generate --prompt-file`` and a
prompt suite (.json, .jsonl, .txt) alike; a suite of hundreds of long prompts stays far
below (``generate`` had 8 MiB of its own)."""


_READ = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
"""How every file here is opened: to read, never waiting (a FIFO's open would wait for a
writer), not inherited by a launched server."""


def file_kind(mode: int) -> str:
    """What an ``st_mode`` is, in words ("a regular file", "a named pipe (FIFO)", ...)."""
    for test, words in ((stat.S_ISREG, "a regular file"), (stat.S_ISDIR, "a folder"),
                        (stat.S_ISFIFO, "a named pipe (FIFO)"),
                        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                        (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return words
    return "not a regular file"


def not_a_file(path: str | os.PathLike[str], what: str, hint: str = "") -> SpecDeckError | None:
    """Why ``path`` cannot be read as the ``what`` it should be (None: it is a regular file,
    through any symbolic links): it does not exist, or it is a folder, a FIFO, a device."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return NotFoundError(f"The {what} {path} does not exist.", hint or None)
    except OSError as exc:
        return SpecDeckError(f"Cannot read the {what} {path}: {exc.strerror or exc}.",
                             hint or None)
    if stat.S_ISREG(mode):
        return None
    return InvalidInputError(f"The {what} {path} is {file_kind(mode)}, not a file.",
                             hint or None)


def open_regular_file(path: str | os.PathLike[str], what: str, *,
                      follow_symlinks: bool = True, hint: str = "") -> BinaryIO:
    """The regular file ``path`` (the ``what`` of messages) opened to read, binary: opened
    without blocking (a FIFO answers at once) and, with ``follow_symlinks=False``, without
    following a link at ``path`` itself. For a file read in part, as a header: what is read
    of it is the caller's bound. Raises a SpecDeckError saying what it met instead: nothing
    there, a link, a folder, a FIFO, a device."""
    flags = _READ | (0 if follow_symlinks else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise NotFoundError(f"The {what} {path} does not exist.", hint or None) from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise InvalidInputError(f"The {what} {path} is a symbolic link, not the file "
                                    "SpecDeck wrote; it was not followed.",
                                    hint or None) from None
        raise SpecDeckError(f"Cannot read the {what} {path}: {exc.strerror or exc}.",
                            hint or None) from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise InvalidInputError(f"The {what} {path} is {file_kind(mode)}, not a file.",
                                    hint or None)
        return os.fdopen(fd, "rb")
    except OSError as exc:
        os.close(fd)
        raise SpecDeckError(f"Cannot read the {what} {path}: {exc.strerror or exc}.",
                            hint or None) from exc
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | os.PathLike[str], what: str, limit: int = SMALL_FILE, *,
                 follow_symlinks: bool = True, hint: str = "") -> bytes:
    """The bytes of the regular file ``path`` (the ``what`` of messages), at most ``limit``
    of them, opened as :func:`open_regular_file` opens it. Raises a SpecDeckError saying
    what it met: nothing there, a link, a folder, a FIFO, a device, a file over the limit
    (or that grew past it while read)."""
    with open_regular_file(path, what, follow_symlinks=follow_symlinks, hint=hint) as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            too_big = InvalidInputError(
                f"The {what} {path} is over {format_bytes(limit)}, more than SpecDeck reads "
                f"of one ({format_bytes(max(size, limit + 1))}).", hint or None)
            if size > limit:
                raise too_big
            chunks, read = [], 0
            while read <= limit:  # in steps: a read of ``limit`` bytes would reserve them all
                chunk = handle.read(min(1 * MiB, limit + 1 - read))
                if not chunk:
                    break
                chunks.append(chunk)
                read += len(chunk)
        except OSError as exc:
            raise SpecDeckError(f"Cannot read the {what} {path}: {exc.strerror or exc}.",
                                hint or None) from exc
        if read > limit:
            raise too_big
        return b"".join(chunks)


def read_text_bounded(path: str | os.PathLike[str], what: str, limit: int = SMALL_FILE, *,
                      hint: str = "") -> str:
    """:func:`read_bounded`, decoded as UTF-8 (a file that is not says where it stops)."""
    data = read_bounded(path, what, limit, hint=hint)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"The {what} {path} is not UTF-8 text (byte {exc.start} is "
                                f"0x{data[exc.start]:02x}).", hint or None) from None


def is_regular_file(path: Path) -> bool:
    """``path`` is a regular file (through links); a FIFO, a device or a folder is not."""
    return not_a_file(path, "file") is None


LOG_TAIL = 64 * KiB
"""What SpecDeck reads of the end of a log to quote its last lines."""
LOG_STEP = 4 * MiB
"""The most SpecDeck reads of a growing log in one look."""


def _open_regular(path: str | os.PathLike[str]) -> int | None:
    """A descriptor of the regular file ``path``, opened without blocking; None for anything
    else (nothing there, a FIFO, a device, a folder)."""
    try:
        fd = os.open(path, _READ)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def read_tail(path: str | os.PathLike[str], limit: int = LOG_TAIL) -> bytes | None:
    """The last ``limit`` bytes of the regular file ``path`` (a server's log, which may have
    grown to gigabytes), from the first whole line in them; None when it is no regular file
    or cannot be read."""
    fd = _open_regular(path)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size
        start = max(size - limit, 0)
        data = os.pread(fd, limit, start)
    except OSError:
        return None
    finally:
        os.close(fd)
    if start > 0:  # began mid-line: that part of a line is not quoted
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return data


def read_new(path: str | os.PathLike[str], offset: int, limit: int = LOG_STEP
             ) -> tuple[bytes, int]:
    """What the regular file ``path`` holds after byte ``offset`` (at most ``limit`` bytes)
    and where those bytes start: ``offset``, or 0 when the file shrank since (truncated,
    started again), which is then read from its start. A log read as it grows, each byte
    once: the next read starts at the start plus the bytes returned. Nothing (b"") when it
    is no regular file."""
    fd = _open_regular(path)
    if fd is None:
        return b"", offset
    try:
        if os.fstat(fd).st_size < offset:
            offset = 0
        data = os.pread(fd, limit, offset)
    except OSError:
        return b"", offset
    finally:
        os.close(fd)
    return data, offset
