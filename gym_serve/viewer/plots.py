"""The viewer's two plots as SVG shapes the page template draws: no plotting library in the browser.

>>> chart = histogram([0.0, 0.0, 1.0, 0.5], bins=2)
>>> [(bar.label, bar.value) for bar in chart.bars]
[('0 – 0.5', 2), ('0.5 – 1', 2)]
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Bar", "Chart", "bars", "histogram"]

WIDTH, HEIGHT, ROW = 520, 150, 20


@dataclass
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value: int
    href: str = ""


@dataclass
class Chart:
    width: int
    height: int
    bars: list[Bar]
    caption: str
    ticks: list[tuple[float, str]] = field(default_factory=list)
    """`(x, label)` under the bars."""


def _number(value: float) -> str:
    return f"{value:.3g}"


def histogram(values: list[float], *, bins: int = 20) -> Chart:
    """Counts of `values` in `bins` equal bins from their least to their greatest (0 to 1 at least)."""
    low, high = min([0.0, *values]), max([1.0, *values])
    step = (high - low) / bins
    counts = [0] * bins
    for value in values:
        counts[min(int((value - low) / step), bins - 1)] += 1
    tallest = max(counts) or 1
    width = WIDTH / bins
    chart_bars = [
        Bar(
            x=i * width,
            y=HEIGHT - HEIGHT * n / tallest,
            width=width - 1,
            height=HEIGHT * n / tallest,
            label=f"{_number(low + i * step)} – {_number(low + (i + 1) * step)}",
            value=n,
        )
        for i, n in enumerate(counts)
    ]
    ticks = [(0.0, _number(low)), (WIDTH / 2, _number((low + high) / 2)), (WIDTH, _number(high))]
    return Chart(WIDTH, HEIGHT, chart_bars, f"reward of {len(values):,} finished rollouts", ticks)


def bars(counts: list[tuple[str, int, str]], caption: str) -> Chart:
    """One horizontal bar per `(label, count, link)`, longest first kept in the given order."""
    longest = max((n for _, n, _ in counts), default=0) or 1
    chart_bars = [
        Bar(
            x=0,
            y=i * ROW,
            width=max(1.0, (WIDTH - 260) * n / longest),
            height=ROW - 4,
            label=label,
            value=n,
            href=href,
        )
        for i, (label, n, href) in enumerate(counts)
    ]
    return Chart(WIDTH, max(ROW, ROW * len(counts)), chart_bars, caption)
