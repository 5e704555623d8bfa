"""Plotly figures built from engine results (no formulas: only unit conversion for display)."""

from __future__ import annotations

import plotly.graph_objects as go

from engine.catalog import Gpu
from engine.sweep import SweepRow
from engine.units import Unit, to_unit

COMPONENT_STYLE = {
    "weights": ("Weights", "#1f77b4"),
    "weight_copies": ("Low-precision weight copies", "#aec7e8"),
    "gradients": ("Gradients", "#ff7f0e"),
    "optimizer_states": ("Optimizer states", "#2ca02c"),
    "optimizer_temporaries": ("Optimizer step temporaries", "#98df8a"),
    "activations": ("Activations", "#d62728"),
    "logits_loss": ("Logits and loss", "#9467bd"),
}


def memory_stack_figure(rows: list[SweepRow], unit: Unit, gpu: Gpu | None) -> go.Figure:
    """Stacked bars of each row's components at its peak, labelled with the total, with a GPU line."""
    ok = [r for r in rows if r.estimate is not None]
    x = [r.label.replace(" · ", "<br>") + (" ◀" if r.is_current else "") for r in ok]
    fig = go.Figure()
    for key, (label, color) in COMPONENT_STYLE.items():
        values = [to_unit(r.estimate.components.get(key, 0.0), unit) for r in ok]  # type: ignore[union-attr]
        if any(values):
            fig.add_bar(name=label, x=x, y=values, marker_color=color,
                        hovertemplate=f"{label}: %{{y:,.2f}} {unit}<extra></extra>")
    totals = [to_unit(r.estimate.total_bytes, unit) for r in ok]  # type: ignore[union-attr]
    phases = [r.estimate.peak_phase.replace("_", " ") for r in ok]  # type: ignore[union-attr]
    fig.add_scatter(x=x, y=totals, mode="text", text=[f"<b>{t:,.1f} {unit}</b>" for t in totals],
                    textposition="top center", showlegend=False, customdata=phases,
                    hovertemplate=f"total %{{y:,.2f}} {unit}, peak at %{{customdata}}<extra></extra>")
    if gpu is not None:
        fig.add_hline(y=to_unit(gpu.memory_bytes, unit), line_dash="dash", line_color="black",
                      annotation_text=f"{gpu.name}: {to_unit(gpu.memory_bytes, unit):,.1f} {unit}",
                      annotation_position="top right", annotation_bgcolor="rgba(255,255,255,0.85)",
                      annotation_font_color="black")
    top = max(totals + ([to_unit(gpu.memory_bytes, unit)] if gpu else []) + [1e-9])
    fig.update_layout(barmode="stack", yaxis_title=f"Peak memory ({unit})", yaxis_range=[0, top * 1.15],
                      legend_title_text="Component", margin=dict(t=30, b=10), height=480, xaxis_tickangle=0)
    return fig


def parameter_figure(counts: dict[str, int]) -> go.Figure:
    """Horizontal bar of parameters by component."""
    items = [(k, v) for k, v in counts.items() if k != "total" and v]
    fig = go.Figure(go.Bar(x=[v for _, v in items], y=[k for k, _ in items], orientation="h",
                           text=[f"{v:,}" for _, v in items], textposition="auto"))
    fig.update_layout(xaxis_title="parameters", height=300, margin=dict(t=10, b=10))
    return fig
