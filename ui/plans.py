"""Saved plans in the session, and the table and Plotly figures that compare them (Plans page)."""

from __future__ import annotations

from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from engine.errors import EngineError
from engine.plan.plans import COMPONENT_KEYS, Plan, PlanResult, plan_record, unique_plan_name
from engine.model.sources import config_from_catalog
from engine.units import Unit, to_unit
from ui.formats import plain
from ui.tables import bytes_in, number_columns

PLANS_KEY = "saved_plans"
STAMP_KEY = "saved_plans_stamp"  # (app_version, exported_at) of an imported file, until the plans change


def saved_plans() -> list[tuple[Plan, PlanResult]]:
    """The session's plans, oldest first."""
    return st.session_state.setdefault(PLANS_KEY, [])


def add_plans(items: list[tuple[Plan, PlanResult]], stamp: tuple[str | None, str | None] | None = None,
              *, overwrite: bool = False) -> list[tuple[str, str]]:
    """Add plans. A plan named like a saved one replaces it only with ``overwrite``; otherwise it is saved under a
    new name (``name (2)``, engine.plan.plans.unique_plan_name). Returns the (old, new) names of renamed plans.
    ``stamp``: keep an imported file's version and time for re-export while the set of plans is exactly that file's."""
    plans = saved_plans()
    fresh = not plans
    renamed: list[tuple[str, str]] = []
    if overwrite:
        names = {p.name for p, _ in items}
        plans[:] = [x for x in plans if x[0].name not in names]
    for plan, result in items:
        name = unique_plan_name(plan.name, [p.name for p, _ in plans])
        if name != plan.name:
            renamed.append((plan.name, name))
            plan = plan.model_copy(update={"name": name})
        plans.append((plan, result))
    st.session_state[STAMP_KEY] = stamp if (stamp and fresh and all(stamp) and not renamed) else None
    return renamed


COMPARE_COLUMNS = {
    "micro_batch_size": ("micro batch size", "count"), "seq_len": ("sequence length", "count"), "num_gpus": ("GPUs", "count"),
    "per_gpu_peak_bytes": ("per-GPU peak", "bytes"), "tokens_per_second": ("throughput", "tokens_per_second"),
    "train_hours": ("wall time", "hours"), "cost_on_demand_usd": ("cost on demand", "usd"),
    "cost_spot_usd": ("cost spot", "usd"),
}
"""The compare table's numeric columns: (label, kind of :data:`ui.tables.KINDS`)."""


def compare_table(plans: list[tuple[Plan, PlanResult]], unit: Unit) -> None:
    """The saved plans side by side: inputs and results, each number column in one format, bytes in ``unit``."""
    rows = [plan_record(p, r) for p, r in plans]
    frame = pd.DataFrame(rows)[["name", "model_repo_id", "method", "precision", "micro_batch_size", "seq_len", "gpu",
                                "num_gpus", "strategy", "per_gpu_peak_bytes", "fits", "verdict", "tokens_per_second",
                                "train_hours", "cost_on_demand_usd", "cost_spot_usd"]]
    st.dataframe(bytes_in(frame, ["per_gpu_peak_bytes"], unit), hide_index=True, width="stretch", key="plans_table",
                 column_config=number_columns(COMPARE_COLUMNS, unit))


def remove_plan(name: str) -> None:
    plans = saved_plans()
    plans[:] = [x for x in plans if x[0].name != name]
    st.session_state[STAMP_KEY] = None


def resolve_config(repo_id: str, revision: str | None) -> dict[str, Any]:
    """Config of a plan's model: the bundled catalog, else the Hub through the picker's loaders (cached, token-aware)."""
    try:
        return config_from_catalog(repo_id)[0]
    except EngineError:
        from ui.model_picker import _hub_config

        return _hub_config(repo_id, revision)[0]


NAME_CHARS = 28
"""Characters of a plan name on an axis; the hover shows the whole name."""


def _axis_names(plans: list[tuple[Plan, PlanResult]]) -> tuple[list[str], list[str]]:
    """(tick labels, hover names): user text escaped (a ``<b>`` in a name is shown, not applied), long names cut.
    Distinct plans keep distinct ticks: a cut name that repeats gets its position appended."""
    full = [plain(p.name) for p, _ in plans]
    ticks = [plain(p.name, NAME_CHARS) for p, _ in plans]
    seen: dict[str, int] = {}
    for i, t in enumerate(ticks):
        seen[t] = seen.get(t, 0) + 1
        if seen[t] > 1:
            ticks[i] = f"{t} ({i + 1})"
    return ticks, full


def _layout(fig: go.Figure, height: int, **extra: object) -> None:
    # The legend above the plot, so long (slanted) names below it never run into it.
    fig.update_layout(height=height, margin={"t": 60, "b": 10}, xaxis={"tickangle": -30, "automargin": True},
                      legend={"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0}, **extra)


def memory_compare_figure(plans: list[tuple[Plan, PlanResult]], unit: Unit) -> go.Figure:
    """Stacked bars of each plan's memory components at its peak (one GPU, before sharding)."""
    fig = go.Figure()
    names, full = _axis_names(plans)
    extra = [k for _, r in plans for k in r.components_bytes if k not in COMPONENT_KEYS]
    for key in (*COMPONENT_KEYS, *dict.fromkeys(extra)):
        values = [round(to_unit(r.components_bytes.get(key, 0.0), unit), 3) for _, r in plans]
        if any(values):
            fig.add_bar(name=key.replace("_", " "), x=names, y=values, customdata=full,
                        hovertemplate=f"%{{customdata}}<br>{key.replace('_', ' ')}: %{{y:,.2f}} {unit}<extra></extra>")
    fig.add_scatter(name=f"per-GPU peak ({unit})", x=names, y=[round(to_unit(r.per_gpu_peak_bytes, unit), 3) for _, r in plans],
                    mode="markers", marker={"symbol": "diamond", "size": 12, "color": "black"}, customdata=full,
                    hovertemplate=f"%{{customdata}}<br>per-GPU peak: %{{y:,.2f}} {unit}<extra></extra>")
    _layout(fig, 460, barmode="stack", yaxis_title=unit)
    return fig


def time_cost_compare_figure(plans: list[tuple[Plan, PlanResult]]) -> go.Figure:
    """Hours (left) and cost on demand and spot in USD (right) of each plan."""
    names, full = _axis_names(plans)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Wall time (hours)", "Cost (USD)"))
    fig.add_bar(name="hours", x=names, y=[r.hours for _, r in plans], row=1, col=1, customdata=full,
                hovertemplate="%{customdata}<br>%{y:,.3g} h<extra></extra>")
    for label, values in (("on demand", [r.cost_usd_on_demand for _, r in plans]), ("spot", [r.cost_usd_spot for _, r in plans])):
        fig.add_bar(name=label, x=names, y=values, row=1, col=2, customdata=full,
                    hovertemplate=f"%{{customdata}}<br>{label}: $%{{y:,.2f}}<extra></extra>")
    _layout(fig, 420, barmode="group")
    fig.update_xaxes(tickangle=-30, automargin=True)
    return fig
