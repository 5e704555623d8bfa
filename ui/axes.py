"""Log axes with clean major ticks for the Plotly figures (display only).

Plotly labels a log axis that spans a decade or two at every minor tick (2, 3, 4, ... 9 between the powers of ten),
in its own mix of formats, which crowds the Time & cost charts. :func:`log_axis` gives the axis explicit ticks
instead: the powers of ten (1, 10, 100, ...) when the values span three decades or more, else 1, 2, 5 per decade,
labelled compactly (``500``, ``1k``, ``20M``, ``0.05``); :func:`point_axis` ticks the values themselves (GPU
counts, sequence lengths: the points computed).
"""

from __future__ import annotations

import math
from typing import Iterable

WIDE_DECADES = 3.0
"""Span (in decades) from which only the powers of ten are ticked (three or more of them lie inside the values);
below it, 1, 2 and 5 of each decade."""

_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))


def tick_text(value: float, prefix: str = "") -> str:
    """``'1k'``, ``'20M'``, ``'500'``, ``'0.05'``, ``'$2k'``: a tick's value in at most three significant digits."""
    for div, suffix in _SUFFIXES:
        if value >= div:
            return f"{prefix}{value / div:g}{suffix}"
    return f"{prefix}{value:g}"


def _ticks(lo: float, hi: float, mantissas: tuple[int, ...]) -> list[float]:
    """Every ``m x 10^e`` (m in ``mantissas``) from the largest at or below ``lo`` to the smallest at or above ``hi``."""
    out = []
    for e in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1):
        for m in mantissas:
            out.append(float(f"{m}e{e}"))  # exact decimals: 5e-2 is 0.05, not 0.05000000000000001
    below = max(t for t in out if t <= lo * (1 + 1e-9))
    above = min(t for t in out if t >= hi * (1 - 1e-9))
    return [t for t in out if below <= t <= above]


def log_axis(values: Iterable[float | None], title: str, prefix: str = "") -> dict:
    """A Plotly log axis titled ``title`` (which should carry the unit) with clean major ticks covering ``values``.

    Plotly's autorange keeps the axis to the values; when fewer than two ticks lie among them, the range is set from
    the tick at or below the smallest value to the one at or above the largest, so the axis still reads. ``prefix`` goes before each label (``"$"``). Values that are None,
    zero, negative or not finite are left out; without any, the axis is Plotly's own."""
    finite = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    axis: dict = {"type": "log", "title": {"text": title}}
    if not finite:
        return axis
    lo, hi = min(finite), max(finite)
    wide = math.log10(hi / lo) >= WIDE_DECADES
    ticks = _ticks(lo, hi, (1,) if wide else (1, 2, 5))
    axis.update({"tickmode": "array", "tickvals": ticks, "ticktext": [tick_text(t, prefix) for t in ticks]})
    inside = [t for t in ticks if lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9)]
    if len(inside) < 2:  # too narrow for two labelled ticks: widened to the ticks around the values
        # A little beyond the end ticks: a marker there is not cut, and plotly.js (Streamlit 1.67's) draws a tick that
        # sits exactly on the range's end at y = -Infinity, with a console error.
        pad = 0.03  # decades
        axis["range"] = [math.log10(ticks[0]) - pad, math.log10(ticks[-1]) + pad]
    return axis


def point_axis(values: Iterable[float], title: str) -> dict:
    """A Plotly log axis titled ``title`` ticked at ``values`` themselves, labelled with separators (``1,024``)."""
    points = sorted(set(values))
    return {"type": "log", "title": {"text": title}, "tickmode": "array", "tickvals": points,
            "ticktext": [f"{int(v):,}" if float(v).is_integer() else f"{v:g}" for v in points]}
