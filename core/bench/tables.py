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


def rate_cell(tokens_per_second: float | None, speedup, best: bool, markdown: bool) -> str:
    """"tok/s (speed-up)", the way every sweep table shows a setting; the best one marked
    (bold in markdown, a leading * in plain text)."""
    text = "-" if tokens_per_second is None else f"{tokens_per_second:.1f}"
    if speedup is not None:
        text += f" ({speedup.median:.2f}x)"
    if best:
        text = f"**{text}**" if markdown else f"*{text}"
    return text
