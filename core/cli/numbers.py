"""argparse types for numbers with a range: a typo or a hostile value (nan, inf, 1e400,
1e9 repeats) is refused while parsing, with the range in the message, before anything runs."""

from __future__ import annotations

import argparse
import math


def whole(low: int, high: int, what: str = "a whole number"):
    """An int from ``low`` to ``high`` inclusive."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {what}; use {low} to {high:,}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:,} is out of range; use {low} to {high:,}")
        return value

    parse.__name__ = "whole number"  # argparse names the type in its messages
    parse.bounds = (low, high)  # what a page's widget for the same value must take
    return parse


def finite(low: float, high: float, *, low_open: bool = False):
    """A finite float in [low, high] (or (low, high] with ``low_open``)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        below = value <= low if low_open else value < low
        if below or value > high:
            bracket = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"{value:g} is out of range {bracket}{low:g}, {high:g}]")
        return value

    parse.__name__ = "number"
    parse.bounds = (low, high)
    return parse
