"""How the suite's Markdown reports write a figure in a table cell. A figure with
nothing to measure (NaN, or None in a figure read back from JSON) is "-"."""
from __future__ import annotations

import math
from collections.abc import Sequence


def ratio(v: float | None) -> str:
    """A speed-up: "1.23x"."""
    return "-" if v is None or math.isnan(v) else f"{v:.2f}x"


def percent(v: float | None) -> str:
    """A share: "95%"."""
    return "-" if v is None or math.isnan(v) else f"{v:.0%}"


def signed_percent(v: float | None) -> str:
    """A change: "+1.25%"."""
    return "-" if v is None or math.isnan(v) else f"{v:+.2%}"


def number(v: float | None) -> str:
    """Seconds, tokens per pass: "1.23"."""
    return "-" if v is None or math.isnan(v) else f"{v:.2f}"


def spread(values: Sequence[float]) -> str:
    """The spread over rounds, after a median: " (0.95-1.10)", or nothing for one round."""
    return f" ({min(values):.2f}-{max(values):.2f})" if len(values) > 1 else ""


def size_ranges(sizes: Sequence[int]) -> str:
    """Batch sizes as runs: [1, 2, 3, 5] is "1-3, 5"."""
    out, start = [], None
    for i, b in enumerate(sizes):
        if start is None:
            start = b
        if i + 1 == len(sizes) or sizes[i + 1] != b + 1:
            out.append(f"{start}" if start == b else f"{start}-{b}")
            start = None
    return ", ".join(out)
