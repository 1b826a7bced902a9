"""A llama-server --help that lists drafting methods SpecDeck has never heard of: the pinned
build's real help text (tests/data/servers/llama-server-11434-help.txt) with ``ngram-foo``
(its own --spec-ngram-foo-size-n/-size-m, written as the pinned build writes ngram-simple's
lines in common/arg.cpp) and ``draft-zeta`` added, served by an executable that prints it the
way a newer llama-server would. Only its --help is ever read from it."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "servers"
REAL_TEXT = (DATA / "llama-server-11434-help.txt").read_text()

TYPES_LINE = ("--spec-type none,draft-simple,draft-eagle3,draft-mtp,draft-dflash,draft-dspark,"
              "ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache")
FOO = ("--spec-ngram-foo-size-n N               ngram size N for ngram-foo speculative "
       "decoding, length of lookup\n"
       "                                        n-gram (default: 6)\n"
       "--spec-ngram-foo-size-m N               ngram size M for ngram-foo speculative "
       "decoding, length of draft\n"
       "                                        m-gram (default: 16)\n")
"""Written as the pinned build writes its ngram-simple lines (common/arg.cpp)."""


def newer_help() -> str:
    """The pinned build's help with two methods it does not have, in its own layout."""
    assert TYPES_LINE in REAL_TEXT  # the real text is as this test expects
    text = REAL_TEXT.replace(TYPES_LINE, TYPES_LINE + ",ngram-foo,draft-zeta", 1)
    anchor = "--spec-ngram-map-k4v-size-n N"
    assert anchor in text
    return text.replace(anchor, FOO + anchor, 1)


def newer_binary(tmp_path: Path) -> str:
    """An executable in ``tmp_path`` answering --help with ``newer_help()``."""
    return help_binary(tmp_path, newer_help())


IK_TEXT = (DATA / "ik-llama-cpp-0.1.5-help.txt").read_text()
"""ik_llama.cpp's real --help (tests/data/servers/SOURCE.txt): last year's layout and flags."""


def help_binary(tmp_path: Path, text: str, status: int = 0) -> str:
    """An executable ``llama-server`` in ``tmp_path`` that prints ``text`` for --help (and
    exits with ``status``, as ik_llama.cpp's exits 1): where the real build is not here, its
    real help is."""
    (tmp_path / "help.txt").write_text(text)
    path = tmp_path / "bin" / "llama-server"
    path.parent.mkdir()
    path.write_text(f"#!/bin/sh\ncat '{tmp_path / 'help.txt'}'\nexit {status}\n")
    path.chmod(0o755)
    return str(path)


HOSTILE_NAMES = ("$(touch${IFS}PWNED)", "`touch${IFS}PWNED`", "ngram-mod;touch", "${PORT}x",
                 "--model=/tmp/evil.gguf", "-hf", "ngram-MOD", "ngram-" + "x" * 60)
"""Spec types a hostile --help could list (issue 41): shell syntax, a llama-swap macro,
flags (one a Hub download), an uppercase name, an overlong one."""


def hostile_help() -> str:
    """The pinned build's help with ``HOSTILE_NAMES`` added to its --spec-type list."""
    assert TYPES_LINE in REAL_TEXT
    return REAL_TEXT.replace(TYPES_LINE, TYPES_LINE + "," + ",".join(HOSTILE_NAMES), 1)
