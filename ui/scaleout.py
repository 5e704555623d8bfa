"""Widgets, tables and figures of the Scale out page: the layout chooser, the per-stage memory bars and the layout
search's table, bytes in the sidebar's unit (no formulas here)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from engine.errors import ScenarioError
from engine.scaleout.exports import EXPORTERS
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.frameworks import FRAMEWORKS, Framework
from engine.model.architecture import Architecture
from engine.scaleout.layout import ZERO_CHOICES, Layout, Recompute, Schedule, layout_for_world
from engine.time.fabrics import FABRICS
from engine.units import Unit, to_unit
from ui.formats import md_plain
from ui.inputs import checked_number
from ui.tables import bytes_in, number_columns


CHOICES: dict[str, tuple] = {
    "so_tp": (1, 2, 4, 8), "so_cp": (1, 2, 4, 8, 16), "so_ep": (1, 2, 4, 8, 16, 32, 64), "so_gpn": (1, 2, 4, 8),
    "so_zero": tuple(ZERO_CHOICES), "so_rec": tuple(r.value for r in Recompute),
    "so_sched": tuple(s.value for s in Schedule if s is not Schedule.INTERLEAVED),
    "so_fp8": ("off", *(r.value for r in Fp8Recipe)), "so_export": tuple(sorted(EXPORTERS)),
    "so_framework": tuple(FRAMEWORKS), "so_net": tuple(FABRICS),
}
"""Options of the page's select boxes, by widget key (= URL parameter, :mod:`ui.share`)."""
NUMBERS = ("so_pp", "so_nodes", "so_gbs", "so_v", "so_tokens")
"""Checked number inputs (ranges in :data:`ui.inputs.LIMITS`)."""
FLAGS = ("so_sp", "so_master", "so_tp_overlap")
SCALEOUT_KEYS = (*CHOICES, *NUMBERS, *FLAGS, "so_gpu")
"""Every input of the Scale out page: kept across page switches (:mod:`ui.layout`) and written to the URL."""
DEFAULT_ZERO = 3
"""The page's default data-parallel sharding: ZeRO-3 / FSDP, what full fine-tuning of an 8B model on one node of 8
GPUs runs (torchtitan's Llama 3 8B preset, ``torchtitan/models/llama3/train_configs/llama3_8b.toml`` at
pytorch/torchtitan@01424cb2: FSDP over every rank, ``data_parallel_shard_degree = -1``, TP = PP = CP = 1). With the
page's other defaults (8 GPUs on one node, global batch 64, selective recompute) and the sidebar's (Llama 3.1 8B, full
fine-tuning, mb 1 x 2,048 tokens, A100 80GB) the most loaded rank needs 39.2 GiB of 80 (tests/app/test_scale_out_page.py);
ZeRO-1 there needs 80.5 GiB and does not fit. A link's ``so_zero`` opens any stage (:mod:`ui.share`)."""


def framework_inputs() -> tuple[Framework, dict]:
    """The training framework (default the first, generic) and the TP-overlap choice, with a caption of what the
    framework changes; returns it and :meth:`Framework.layout_settings` (estimate_layout's keywords)."""
    a, b = st.columns([3, 1])
    name = a.selectbox("Framework", list(CHOICES["so_framework"]), key="so_framework",
                       format_func=lambda n: FRAMEWORKS[n].label,
                       help="The framework that runs the layout (engine.scaleout.frameworks): its kernels, its TP and "
                            "data-parallel communication. The sidebar's training framework is the one-GPU stack.")
    fw = FRAMEWORKS[name]
    # Defaults set once in Session State, the widgets drawn without value=/index= (a link or a page switch may have set
    # the key first: Streamlit then logs a warning with a stack dump for a widget given a default too).
    st.session_state.setdefault("so_tp_overlap", fw.tp_comm_overlap)
    overlap = b.checkbox("TP overlap", key="so_tp_overlap", disabled=not fw.tp_comm_overlap_available,
                         help="TP collectives under the GEMMs (Megatron-LM --tp-comm-overlap, torchtitan AsyncTP)")
    st.caption("What it changes: " + md_plain(fw.summary()) + ". The estimate and the layout search both run it.")
    return fw, fw.layout_settings(tp_comm_overlap=bool(overlap and fw.tp_comm_overlap_available))


def network_input(column) -> str:
    """The network between nodes (:data:`engine.time.fabrics.FABRICS`, default InfiniBand) in ``column``, with its
    figures' source as the help; returns its name (:class:`engine.scaleout.step_time.Cluster`'s ``fabric``)."""
    return column.selectbox("Network between nodes", list(CHOICES["so_net"]), key="so_net",
                            format_func=lambda n: FABRICS[n].label,
                            help="Its share of the NICs' 400 Gb/s per GPU that NCCL reaches and its latency per ring "
                                 "step (engine.time.fabrics): " + "; ".join(f"{f.label}: {f.source}" for f in FABRICS.values()))


def use_layout(layout: Layout) -> None:
    """Button callback (it runs before the rerun draws any widget, so it may set their values): make ``layout``, a
    search result of this cluster, the page's inputs, its micro batch the sidebar's."""
    st.session_state.update({
        "micro_batch_size": layout.micro_batch_size,
        "so_tp": layout.tensor_parallel, "so_pp": layout.pipeline_parallel, "so_cp": layout.context_parallel,
        "so_ep": layout.expert_parallel, "so_zero": layout.zero, "so_rec": layout.recompute.value,
        "so_v": layout.virtual_pipeline, "so_sp": layout.sequence_parallel,
        **({"so_sched": layout.schedule.value} if layout.schedule is not Schedule.INTERLEAVED else {}),
    })


def layout_inputs(num_layers: int, micro_batch: int) -> tuple[dict, int, int]:
    """The layout's fields from the page's widgets, with the node count and GPUs per node. A number typed out of range
    is said so under its input and the last valid one is used (:func:`ui.inputs.checked_number`); a pipeline deeper
    than the model's ``num_layers`` is the engine's layout problem, which the page says."""
    c = st.columns(4)
    # Each default set once in Session State and the widgets drawn without index=/value=: a link (ui.share) or a page
    # switch (ui.layout) sets these keys before the widgets are drawn, and a widget given a default as well makes
    # Streamlit log a warning with a stack dump ("created with a default value but also had its value set via the
    # Session State API").
    for key, default in (("so_gpn", 8), ("so_zero", DEFAULT_ZERO), ("so_rec", Recompute.SELECTIVE.value)):
        st.session_state.setdefault(key, default)
    tp = c[0].selectbox("Tensor parallel", list(CHOICES["so_tp"]), key="so_tp")
    pp = checked_number(c[1], "Pipeline parallel", "so_pp", 1, step=1, below=st, help=f"Pipeline stages; at most the model's "
                        f"{num_layers} layers.")
    cp = c[2].selectbox("Context parallel", list(CHOICES["so_cp"]), key="so_cp")
    ep = c[3].selectbox("Expert parallel", list(CHOICES["so_ep"]), key="so_ep")
    c = st.columns(4)
    nodes = checked_number(c[0], "Nodes", "so_nodes", 1, step=1, below=st)
    per_node = c[1].selectbox("GPUs per node", list(CHOICES["so_gpn"]), key="so_gpn")
    gbs = checked_number(c[2], "Global batch (sequences)", "so_gbs", 64, step=1, below=st)
    zero = c[3].selectbox("Data-parallel sharding", list(CHOICES["so_zero"]), key="so_zero",
                          format_func=ZERO_CHOICES.__getitem__)
    c = st.columns(4)
    recompute = c[0].selectbox("Recompute", list(CHOICES["so_rec"]), key="so_rec")
    v = checked_number(c[1], "Virtual stages (interleaved)", "so_v", 1, step=1, below=st)
    schedule = c[2].selectbox("Schedule", list(CHOICES["so_sched"]), key="so_sched")
    st.session_state.setdefault("so_sp", tp > 1)  # on by default where TP is, as value=tp > 1 was at first draw
    sp = c[3].checkbox("Sequence parallel", key="so_sp", disabled=tp == 1)
    world = int(nodes) * int(per_node)
    fields = dict(tensor_parallel=tp, pipeline_parallel=int(pp), context_parallel=cp, expert_parallel=ep,
                  sequence_parallel=bool(sp and tp > 1), recompute=recompute, virtual_pipeline=int(v),
                  schedule="interleaved" if v > 1 else schedule, zero=zero, micro_batch_size=micro_batch,
                  global_batch_size=int(gbs))
    return fields, world, int(per_node)


def stage_bars(stages: list[dict], labels: dict[str, str], unit: Unit) -> go.Figure:
    """Stacked bars of each pipeline stage's components at its peak, in ``unit``."""
    fig = go.Figure()
    keys = [k for k in dict.fromkeys(k for s in stages for k in s["components"]) if any(s["components"].get(k) for s in stages)]
    for k in keys:
        fig.add_bar(name=labels.get(k, k), x=[f"stage {s['stage']}" for s in stages],
                    y=[to_unit(s["components"].get(k, 0.0), unit) for s in stages],
                    hovertemplate=f"{labels.get(k, k)}: %{{y:,.2f}} {unit}<extra></extra>")
    fig.update_layout(barmode="stack", yaxis_title=f"Memory per GPU, allocated ({unit})", height=420,
                      legend_title="component")
    return fig


CANDIDATE_COLUMNS = {"GPUs": ("GPUs", "count"), "device_bytes": ("most loaded rank, nvidia-smi", "bytes"),
                     "step_s": ("step", "seconds"), "tokens_per_second": ("throughput", "tokens_per_second"),
                     "usd_per_million_tokens": ("cost per million tokens", "usd"), "hours": ("dataset", "hours"),
                     "gpu_hours": ("dataset", "gpu_hours"), "cost_usd_on_demand": ("dataset on demand", "usd"),
                     "cost_usd_spot": ("dataset spot", "usd")}


def candidates_table(rows: list, unit: Unit, key: str, limit: int = 200, runs: list | None = None) -> None:
    """The search results as a table (fits first): every number column in one format, bytes in ``unit``; ``runs``
    (:func:`engine.plan.layout_cost.candidate_runs` of the same rows) adds the dataset's hours and cost."""
    runs = runs if runs is not None else [None] * len(rows)
    frame = pd.DataFrame([{
        "layout": c.layout.label() if c.fits or c.peak_allocated_bytes else str(c.layout.model_dump(exclude_none=True)),
        "GPUs": c.layout.world_size, "fits": "fits" if c.fits else "does not fit", "device_bytes": c.device_bytes or None,
        "step_s": c.step_s, "tokens_per_second": c.tokens_per_second if c.fits else None,
        "usd_per_million_tokens": c.usd_per_million_tokens if c.fits else None,
        "hours": r.hours if r else None, "gpu_hours": r.gpu_hours if r else None,
        "cost_usd_on_demand": r.cost_usd_on_demand if r else None, "cost_usd_spot": r.cost_usd_spot if r else None,
        "why not": c.reason,
    } for c, r in zip(rows[:limit], runs[:limit])], columns=["layout", "GPUs", "fits", *list(CANDIDATE_COLUMNS)[1:], "why not"])
    st.dataframe(bytes_in(frame, ["device_bytes"], unit), hide_index=True, key=key,
                 column_config=number_columns(CANDIDATE_COLUMNS, unit))


def layout_from(arch: Architecture, fields: dict, world: int) -> Layout | str:
    """The layout, or the message saying why the widgets do not make one (the engine's first failing check, the
    model's own limits first: :func:`engine.scaleout.layout.layout_for_world`)."""
    try:
        return layout_for_world(arch, fields, world)
    except ScenarioError as exc:
        return str(exc)
