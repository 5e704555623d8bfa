"""Widgets and figures of the Scale out page: the layout chooser and the per-stage memory bars (no formulas here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from engine.errors import ScenarioError
from engine.scaleout.layout import Layout, Recompute, Schedule

GIB = 2**30


def layout_inputs(num_layers: int, micro_batch: int) -> tuple[dict, int, int]:
    """The layout's fields from the page's widgets, with the node count and GPUs per node."""
    c = st.columns(4)
    tp = c[0].selectbox("Tensor parallel", [1, 2, 4, 8], index=0, key="so_tp")
    pp = c[1].number_input("Pipeline parallel", 1, max(1, num_layers), 1, key="so_pp")
    cp = c[2].selectbox("Context parallel", [1, 2, 4, 8, 16], index=0, key="so_cp")
    ep = c[3].selectbox("Expert parallel", [1, 2, 4, 8, 16, 32, 64], index=0, key="so_ep")
    c = st.columns(4)
    nodes = c[0].number_input("Nodes", 1, 4096, 1, key="so_nodes")
    per_node = c[1].selectbox("GPUs per node", [1, 2, 4, 8], index=3, key="so_gpn")
    gbs = c[2].number_input("Global batch (sequences)", 1, 1 << 20, 64, key="so_gbs")
    zero = c[3].selectbox("Data-parallel sharding", [0, 1, 3], index=1, key="so_zero",
                          format_func=lambda z: {0: "DDP", 1: "ZeRO-1 / distributed optimizer", 3: "ZeRO-3 / FSDP"}[z])
    c = st.columns(4)
    recompute = c[0].selectbox("Recompute", [r.value for r in Recompute], index=1, key="so_rec")
    v = c[1].number_input("Virtual stages (interleaved)", 1, 16, 1, key="so_v")
    schedule = c[2].selectbox("Schedule", [s.value for s in Schedule if s is not Schedule.INTERLEAVED], key="so_sched")
    sp = c[3].checkbox("Sequence parallel", value=tp > 1, key="so_sp", disabled=tp == 1)
    world = int(nodes) * int(per_node)
    fields = dict(tensor_parallel=tp, pipeline_parallel=int(pp), context_parallel=cp, expert_parallel=ep,
                  sequence_parallel=bool(sp and tp > 1), recompute=recompute, virtual_pipeline=int(v),
                  schedule="interleaved" if v > 1 else schedule, zero=zero, micro_batch_size=micro_batch,
                  global_batch_size=int(gbs))
    return fields, world, int(per_node)


def stage_bars(stages: list[dict], labels: dict[str, str]) -> go.Figure:
    """Stacked bars of each pipeline stage's components at its peak (GiB)."""
    fig = go.Figure()
    keys = [k for k in dict.fromkeys(k for s in stages for k in s["components"]) if any(s["components"].get(k) for s in stages)]
    for k in keys:
        fig.add_bar(name=labels.get(k, k), x=[f"stage {s['stage']}" for s in stages],
                    y=[s["components"].get(k, 0.0) / GIB for s in stages])
    fig.update_layout(barmode="stack", yaxis_title="GiB per GPU (allocated)", height=420, legend_title="component")
    return fig


def candidates_frame(rows: list, limit: int = 200) -> pd.DataFrame:
    """The search results as a table (fits first)."""
    return pd.DataFrame([{
        "layout": c.layout.label() if c.fits or c.peak_allocated_bytes else str(c.layout.model_dump(exclude_none=True)),
        "GPUs": c.layout.world_size,
        "fits": c.fits, "most loaded rank (GiB, nvidia-smi)": round(c.device_bytes / GIB, 1) if c.device_bytes else None,
        "step (s)": None if c.step_s is None else round(c.step_s, 2),
        "tokens/s": None if c.tokens_per_second is None else round(c.tokens_per_second),
        "USD / M tokens": None if c.usd_per_million_tokens is None else round(c.usd_per_million_tokens, 3),
        "why not": c.reason,
    } for c in rows[:limit]])


def layout_from(fields: dict, world: int) -> Layout | str:
    """The layout, or the message saying why the widgets do not make one."""
    per = fields["tensor_parallel"] * fields["pipeline_parallel"] * fields["context_parallel"]
    if world % per:
        return f"{world} GPUs are not a multiple of TP x PP x CP = {per}"
    try:
        return Layout.build(**fields, data_parallel=world // per)
    except ScenarioError as exc:
        return str(exc)
