"""The seeds' optimisation checklist on the Memory page: one checkbox per technique, a waterfall from the naive run's
peak to the final one, and a table of each step's saving and its effect on speed. The numbers come from
:mod:`engine.plan.checklist`; this module only draws them."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from engine.model.architecture import Architecture
from engine.plan.checklist import ORDER, TECHNIQUE_LABELS, ZERO_STAGES, Checklist, Technique, build_checklist, default_techniques
from engine.errors import EngineError
from engine.hardware.gpus import Gpu, find_gpu
from engine.memory.device import tensor_budget
from engine.memory.parallel import Strategy
from engine.scenario.training import Scenario
from engine.units import Unit, fmt_bytes, to_unit
from ui.charts import usable_line
from ui.formats import md_plain

SPEED_GPU = "NVIDIA H100 80GB"
"""GPU the speed column uses when the sidebar shows none."""


def _signed(value: float, unit: Unit) -> str:
    """``-12.3 GiB``, ``+0.4 GiB``, ``±0 GiB`` for a change that rounds to nothing (never ``-0.0``)."""
    shown = round(value, 1)
    return f"±0 {unit}" if shown == 0 else f"{shown:+,.1f} {unit}"


def checklist_figure(checklist: Checklist, unit: Unit, gpu: Gpu | None) -> go.Figure:
    """A Plotly waterfall: the naive peak, one bar per step down by its saving, and the final peak, in ``unit``."""
    steps = checklist.steps
    # The last bar is your configuration only when the ticks rebuild it (then "Your other settings" is the last step).
    mine = steps[-1].label == "Your other settings" or len(steps) > 1 and steps[-1].scenario == checklist.target
    x = [steps[0].label] + [s.label for s in steps[1:]] + ["Your configuration" if mine else "With the ticked techniques"]
    y = [to_unit(steps[0].peak_bytes, unit)] + [-to_unit(s.saving_bytes, unit) for s in steps[1:]] + [0.0]
    text = [f"{to_unit(steps[0].peak_bytes, unit):,.1f} {unit}"]
    text += [_signed(-to_unit(s.saving_bytes, unit), unit) for s in steps[1:]]
    text += [f"{to_unit(checklist.final.peak_bytes, unit):,.1f} {unit}"]
    fig = go.Figure(go.Waterfall(
        x=x, y=y, measure=["absolute"] + ["relative"] * (len(steps) - 1) + ["total"], text=text, textposition="outside",
        decreasing={"marker": {"color": "#2ca02c"}}, increasing={"marker": {"color": "#d62728"}},
        totals={"marker": {"color": "#1f77b4"}}, connector={"line": {"color": "#7f7f7f", "dash": "dot"}},
        hovertemplate="%{x}: %{text}<extra></extra>",
    ))
    if gpu is not None:
        # The bars are tensor peaks (max_memory_allocated): the line is what the GPU leaves for tensors once the
        # CUDA context and the allocator's reserve are taken (engine.memory.device.tensor_budget).
        room = to_unit(tensor_budget(gpu.usable_memory_bytes), unit)
        shape, annotation = usable_line(room, f"{gpu.name}: {room:,.1f} {unit} for tensors")
        fig.update_layout(shapes=[shape], annotations=[annotation])
    # Margins that hold four-digit ticks and one line of step names: no automargin redraw (ui.charts.LABEL_CHAR_PX).
    fig.update_layout(yaxis_title=f"Peak memory per GPU ({unit})", height=460, showlegend=False, margin=dict(t=30, b=28, l=70))
    return fig


def checklist_table(checklist: Checklist, unit: Unit) -> pd.DataFrame:
    """One row per step: what changed, peak and saving in ``unit``, tokens/s and its change, the trade-off."""
    rows = []
    for i, s in enumerate(checklist.steps):
        change = checklist.speed_change(i)
        rows.append({
            "step": s.label, "what changes": s.change, f"peak per GPU ({unit})": f"{to_unit(s.peak_bytes, unit):,.2f}",
            f"saving ({unit})": f"{to_unit(s.saving_bytes, unit):,.2f}",
            "tokens/s": "—" if s.tokens_per_second is None else f"{round(s.tokens_per_second):,}",
            "speed vs previous": "—" if change is None else f"{100 * change:+.0f}%",
            "effective batch": s.effective_batch, "trade-off": s.tradeoff + (f" ({s.speed_note})" if s.speed_note else ""),
        })
    return pd.DataFrame(rows)


CHECKLIST_TITLE = "The seeds' checklist: from the naive run to yours"


def checklist_section(arch: Architecture, scenario: Scenario, unit: Unit, gpu: Gpu | None,
                      strategy: Strategy = Strategy.DDP, num_gpus: int = 1) -> None:
    """The "seeds' checklist" section, in an expander that is closed until opened: while it is closed nothing of it is
    computed or sent, so the Memory page's reruns do not draw its waterfall (a Plotly chart costs 50-100 ms of the
    browser's time each time it changes, benchmarks/bench_browser.py). Once open it stays open for the session and
    its own widgets rerun only the section (:func:`_checklist`, an ``st.fragment``)."""
    box = st.expander(CHECKLIST_TITLE, key="chk_open", on_change="rerun")
    if box.open:
        with box:
            _checklist(arch, scenario, unit, gpu, strategy, num_gpus)


@st.fragment
def _checklist(arch: Architecture, scenario: Scenario, unit: Unit, gpu: Gpu | None, strategy: Strategy,
               num_gpus: int) -> None:
    """Checkboxes (ticked where your scenario already uses the technique), the DeepSpeed / shorter-sequence /
    smaller-batch values, the waterfall and the table."""
    st.caption("Start: full fine-tuning in fp32 with AdamW at your micro batch and sequence length on one GPU. Each ticked "
               "technique is applied in the seeds' order; the boxes start ticked where your scenario already uses it.")
    ticked_by_default = default_techniques(scenario, strategy if num_gpus > 1 else Strategy.DDP)
    # The boxes follow the sidebar: when the scenario's own techniques change, they are ticked afresh.
    signature = (tuple(sorted(t.value for t in ticked_by_default)), strategy.value, num_gpus)
    if st.session_state.get("chk_signature") != signature:
        st.session_state["chk_signature"] = signature
        for t in ORDER:
            st.session_state[f"chk_{t.value}"] = t in ticked_by_default
        if strategy in ZERO_STAGES and num_gpus > 1:
            st.session_state["chk_zero"], st.session_state["chk_gpus"] = strategy, num_gpus
    cols = st.columns(4)
    chosen = set()
    for i, t in enumerate(ORDER):
        if cols[i % 4].checkbox(TECHNIQUE_LABELS[t], key=f"chk_{t.value}"):
            chosen.add(t)
    c1, c2, c3, c4 = st.columns(4)
    st.session_state.setdefault("chk_zero", Strategy.ZERO2)
    st.session_state.setdefault("chk_gpus", 2)
    stage = c1.selectbox("ZeRO stage", list(ZERO_STAGES), format_func=lambda s: s.value.replace("zero", "ZeRO-"),
                         key="chk_zero", disabled=Technique.DEEPSPEED not in chosen)
    n = int(c2.number_input("GPUs (DeepSpeed)", min_value=2, max_value=1024, step=1, key="chk_gpus",
                            disabled=Technique.DEEPSPEED not in chosen))
    shorter = int(c3.number_input("Shorter sequence", min_value=1, max_value=max(1, scenario.seq_len - 1),
                                  value=max(1, scenario.seq_len // 2), step=128, key="chk_seq",
                                  disabled=Technique.SHORTER_SEQUENCES not in chosen or scenario.seq_len < 2))
    smaller = int(c4.number_input("Smaller micro batch", min_value=1, max_value=max(1, scenario.micro_batch_size - 1),
                                  value=max(1, scenario.micro_batch_size // 2), step=1, key="chk_batch",
                                  disabled=Technique.SMALLER_BATCHES not in chosen or scenario.micro_batch_size < 2))
    speed_gpu = gpu if gpu is not None else find_gpu(SPEED_GPU)
    if Technique.SMALLER_BATCHES in chosen and scenario.micro_batch_size < 2:
        st.caption("Smaller batches: your micro batch is already 1.")
        chosen.discard(Technique.SMALLER_BATCHES)
    if Technique.SHORTER_SEQUENCES in chosen and scenario.seq_len < 2:
        chosen.discard(Technique.SHORTER_SEQUENCES)
    try:
        checklist = build_checklist(arch, scenario, frozenset(chosen), speed_gpu, zero_strategy=stage, num_gpus=n,
                                    shorter_seq_len=shorter, smaller_micro_batch=smaller,
                                    user_strategy=strategy, user_gpus=num_gpus)
    except EngineError as exc:
        st.error(f"Cannot build the checklist: {md_plain(exc)}")
        return
    st.plotly_chart(checklist_figure(checklist, unit, gpu), width="stretch", key="checklist_chart")
    st.table(checklist_table(checklist, unit), hide_index=True)  # static: every column wraps to the page width
    st.caption(
        f"Naive {fmt_bytes(checklist.naive.peak_bytes, unit)} -> {fmt_bytes(checklist.final.peak_bytes, unit)} per GPU "
        f"(saved {fmt_bytes(checklist.total_saving_bytes, unit)}). Speed on {md_plain(speed_gpu.name)} at the default MFU; a negative "
        "change is a technique trading speed for memory. Gradient accumulation saves nothing at the same micro batch: "
        "it keeps the effective batch when the micro batch shrinks (the 'smaller batches' step)."
    )
