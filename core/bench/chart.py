"""The report's chart as SVG text: no Qt, no plotting library, so core draws it anywhere
(the CLI on a server without a display, the packaged app without torch).

Left: median decode tok/s per arm. Right: speed-up per drafting arm, the bar at the median
of paired ratios, a thin line from min to max, a box over the bootstrap 95% interval, and a
dashed line at 1.0 (no change). Arms faster than no draft (core.bench.winner's
``beats_no_draft``) are drawn in green, slower ones in red, one exactly as fast in grey.
Browsers, image viewers and Markdown renderers show SVG as they show PNG.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from specdeck.core.bench.summary import BenchSummary
from specdeck.core.bench.winner import NO_DRAFT_SPEEDUP, beats_no_draft

WIDTH = 960
ROW = 44
HEADER = 64
FOOTER = 36
LABEL_W = 250
GAP = 40
TEXT = "#202020"
RATE = "#5b8def"
FASTER, SLOWER = "#2e9d5b", "#d64545"
FASTER_FILL, SLOWER_FILL = "#a9dcbf", "#f0b3b3"
EVEN, EVEN_FILL = "#808080", "#d0d0d0"


def render_chart(summary: BenchSummary) -> str:
    """The chart as an SVG document."""
    arms = summary.arms
    height = HEADER + ROW * max(len(arms), 1) + FOOTER
    plot_w = (WIDTH - LABEL_W - GAP - 20) // 2
    left_x = LABEL_W
    right_x = LABEL_W + plot_w + GAP
    rates = [a.tokens_per_second or 0.0 for a in arms]
    top_rate = max(rates + [1e-9])
    comparisons = {c.arm: c for c in summary.comparisons}
    spans = [1.0]
    for c in summary.comparisons:
        if c.speedup is not None:
            spans += [c.speedup.maximum, c.speedup.ci_high]
    top_ratio = max(spans) * 1.1

    def x_ratio(value: float) -> float:
        return right_x + plot_w * min(value, top_ratio) / top_ratio

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="13">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
        _text(left_x, 22, "decode tok/s (median)"),
        _text(right_x, 22, f"speed-up vs {summary.reference} (median, 95% CI, min-max)"),
    ]
    for i, arm in enumerate(arms):
        y = HEADER + i * ROW
        mid = y + (ROW - 8) / 2
        parts.append(_text(8, mid + 4, _elide(arm.label, 34), title=arm.label))
        bar = (plot_w - 60) * rates[i] / top_rate  # room for the value label
        parts.append(_rect(left_x, y + 8, bar, ROW - 20, RATE))
        parts.append(_text(left_x + bar + 4, mid + 4, f"{rates[i]:.1f}"))
        comparison = comparisons.get(arm.name)
        if comparison is None or comparison.speedup is None:
            label = "reference" if comparison is None else "no paired runs"
            parts.append(_text(right_x, mid + 4, label))
            continue
        s = comparison.speedup
        colour, fill = ((FASTER, FASTER_FILL) if beats_no_draft(s.median) else
                        (SLOWER, SLOWER_FILL) if s.median < NO_DRAFT_SPEEDUP else
                        (EVEN, EVEN_FILL))
        parts.append(_rect(right_x, y + 12, x_ratio(s.median) - right_x, ROW - 28, fill))
        parts.append(_line(x_ratio(s.minimum), mid, x_ratio(s.maximum), mid, "#404040", 1.5))
        if s.has_interval:
            parts.append(f'<rect x="{x_ratio(s.ci_low):.1f}" y="{mid - 5:.1f}" '
                         f'width="{max(x_ratio(s.ci_high) - x_ratio(s.ci_low), 1.0):.1f}" '
                         'height="10" fill="none" stroke="#404040" stroke-width="1.5"/>')
        parts.append(_line(x_ratio(s.median), y + 8, x_ratio(s.median), y + ROW - 12, colour, 3))
        parts.append(_text(x_ratio(max(s.maximum, s.ci_high)) + 6, mid + 4, f"{s.median:.2f}x"))
    one = x_ratio(NO_DRAFT_SPEEDUP)
    parts.append(f'<line x1="{one:.1f}" y1="{HEADER - 6}" x2="{one:.1f}" '
                 f'y2="{height - FOOTER + 4}" stroke="#808080" stroke-dasharray="4 3"/>')
    parts.append(_text(one, height - FOOTER + 20, "1.0x", anchor="middle"))
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def _text(x: float, y: float, text: str, anchor: str = "start", title: str | None = None) -> str:
    tip = f"<title>{escape(title)}</title>" if title and title != text else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" fill="{TEXT}" text-anchor="{anchor}">'
            f"{tip}{escape(text)}</text>")


def _rect(x: float, y: float, w: float, h: float, fill: str) -> str:
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(w, 0.0):.1f}" height="{h:.1f}" fill="{fill}"/>'


def _line(x1: float, y1: float, x2: float, y2: float, stroke: str, width: float) -> str:
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
            f'stroke="{stroke}" stroke-width="{width}"/>')


def _elide(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
