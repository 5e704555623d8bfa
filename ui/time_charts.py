"""Plotly figures of the step-time model: where the time goes per technique, tokens/s against shape."""

from __future__ import annotations

import math
from typing import NamedTuple

import plotly.graph_objects as go

from engine.time.step import CATEGORIES
from engine.time.sweep import TechniqueTime
from ui.axes import point_axis
from ui.charts import label_px, prebuilt

CATEGORY_STYLE = {
    "matmul": ("Matmuls (GEMMs)", "#4C78A8"), "attention": ("Attention", "#F58518"),
    "memory_bound": ("Memory-bound ops", "#54A24B"), "dequantization": ("4/8-bit dequantization", "#B279A2"),
    "optimizer": ("Optimizer step", "#E45756"), "communication": ("Communication (exposed)", "#72B7B2"),
    "overhead": ("Launch and host overhead", "#9D755D"),
}


class Curves(NamedTuple):
    """The data of Time & cost's dataset and GPU-count curves (both sections offer all of it as one CSV). Defined here,
    not in the page, whose script runs anew on every rerun (a NamedTuple class costs about 0.08 ms to make, timeit)."""

    sizes: list  # tokens per epoch of each dataset size of the sweep
    sweep: list  # (dataset, run) of this plan at each size
    seed_hours: list | None  # hours at each size by the seed's throughput rule, or None without one
    series: dict  # plan label -> (sizes, costs in USD, low costs, high costs: the plan's 80% band)
    counts: list  # the plans of this GPU kind at each count that fits


LEGEND_BELOW_PX = 77
"""Pixels a horizontal legend of the time categories (six by default) takes below the plot, padding included, at Streamlit's
width for a chart on a 1,400 px window: two rows (plotly.js's ``_pushmargin.legend`` measured in headless Chromium:
64 px + 10; three rows, 93 px, at 1,100 px, one row, 55 px, at 1,800 px), and 3 px for plotly.js's solving of the
margins, which came out 1 px over the formula below with 74."""


def _legend_below(height: int, t: int = 30, y: float = 0.15) -> int:
    """The bottom margin that already holds a horizontal legend at ``y`` = -0.15 of the plot's height below it: plotly.js
    grows the margin to ``y`` × plot height + the legend's (:data:`LEGEND_BELOW_PX`) and then draws the chart again,
    about 15-30 ms (:data:`ui.charts.LABEL_CHAR_PX`); sized so, the first drawing stands. Solves b = y (height - t - b) +
    legend for b. A window where the legend wraps to more rows only brings the second drawing back."""
    return math.ceil((y * (height - t) + LEGEND_BELOW_PX) / (1 + y))


def time_stack_figure(rows: list[TechniqueTime]) -> go.Figure:
    """Horizontal stacked bars of each technique's step time per 1,000 tokens by category (ms), labelled with tokens/s.

    Horizontal because a dozen techniques with two-line names do not fit side by side at 1,400 px: each name gets its
    own row, and the tokens/s label sits right of its bar."""
    ok = [r for r in rows if r.throughput is not None]
    y = [r.label + (" ◀" if r.is_current else "") for r in ok]
    data: list[dict] = []
    for key in CATEGORIES:
        label, color = CATEGORY_STYLE[key]
        values = [r.throughput.breakdown_s[key] / r.throughput.step.tokens * 1e6 for r in ok]  # type: ignore[union-attr]
        if any(values):
            data.append({"type": "bar", "orientation": "h", "name": label, "y": y, "x": values, "marker": {"color": color},
                         "hovertemplate": f"{label}: %{{x:,.2f}} ms per 1k tokens<extra></extra>"})
    totals = [r.throughput.step_time_s / r.throughput.step.tokens * 1e6 for r in ok]  # type: ignore[union-attr]
    height = 160 + 34 * len(ok)
    data.append({"type": "scatter", "y": y, "x": totals, "mode": "text", "showlegend": False, "hoverinfo": "skip",
                 "text": [f"  {r.throughput.tokens_per_second:,.0f} tok/s" for r in ok],  # type: ignore[union-attr]
                 "textposition": "middle right", "cliponaxis": False})
    layout = {"barmode": "stack", "xaxis": {"title": {"text": "Step time per 1,000 tokens (ms)"},
                                            "range": [0, max(totals + [1e-9]) * 1.25]},
              "yaxis": {"autorange": "reversed", "automargin": True},
              "legend": {"title": {"text": "Where the time goes"}, "orientation": "h", "y": -0.15},
              # the row labels' width in advance (ui.charts.LABEL_CHAR_PX) and the legend's below the plot: no second
              # drawing to grow the margins
              "margin": {"t": 30, "b": _legend_below(height), "r": 20, "l": 12 + label_px(y)}, "height": height}
    return prebuilt({"data": data, "layout": layout})


def shape_figure(curves: dict[int, list[tuple[int, float]]], current_seq: int, current_mbs: int) -> go.Figure:
    """Tokens/s against sequence length (log axis ticked at the lengths computed), one line per micro batch size."""
    data = [{"type": "scatter", "mode": "lines+markers", "name": f"micro batch {mbs}" + (" ◀" if mbs == current_mbs else ""),
             "x": [s for s, _ in pts], "y": [t for _, t in pts],
             "hovertemplate": f"micro batch {mbs}, %{{x:,}} tokens: %{{y:,.0f}} tokens/s<extra></extra>"}
            for mbs, pts in curves.items() if pts]
    layout = {"xaxis": point_axis([s for pts in curves.values() for s, _ in pts], "Sequence length (tokens)"),
              "yaxis": {"title": {"text": "Throughput of one GPU (tokens/s)"}, "rangemode": "tozero"}, "height": 420,
              "margin": {"t": 30, "b": 10},
              "shapes": [{"type": "line", "xref": "x", "yref": "paper", "x0": current_seq, "x1": current_seq, "y0": 0, "y1": 1,
                          "line": {"dash": "dot", "color": "grey"}}]}
    return prebuilt({"data": data, "layout": layout})
