"""Result tables as text: markdown for reports, aligned plain text for a terminal."""

from __future__ import annotations

from collections.abc import Sequence


def text_table(header: Sequence[str], body: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    """The table's lines: a markdown table, or columns padded to their widest cell."""
    if markdown:
        return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                *("| " + " | ".join(cells) + " |" for cells in body)]
    widths = [max(len(str(c)) for c in column) for column in zip(header, *body)]
    return ["  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
            for cells in (header, *body)]


NO_PAIR = "no pair"
NO_PAIR_NOTE = ("\"no pair\": none of the setting's runs there has a no-draft run of the "
                "same prompt beside it with a decode rate (the round was cancelled or cut short "
                "before its reference ran, or those runs failed), so its tok/s has no "
                "speed-up.")


def rate_cell(tokens_per_second: float | None, speedup, best: bool, markdown: bool) -> str:
    """"tok/s (speed-up)", the way every sweep table shows a setting; the best one marked
    (bold in markdown, a leading * in plain text). A rate with no speed-up says so ("no
    pair", NO_PAIR_NOTE), so a cell is never read as a speed-up that was left out."""
    text = "-" if tokens_per_second is None else f"{tokens_per_second:.1f}"
    if speedup is not None:
        text += f" ({speedup.median:.2f}x)"
    elif tokens_per_second is not None:
        text += f" ({NO_PAIR})"
    if best:
        text = f"**{text}**" if markdown else f"*{text}"
    return text
