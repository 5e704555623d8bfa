""""Verify by tracing": the fake-tensor trace of the scenario beside the engine's estimate.

Optional: without the ``[trace]`` extra the panel says how to install it. The trace runs in a
subprocess (:func:`engine.trace.trace_training_step`, a few seconds; the first one also compiles a small
extension) only when the button is pressed; results are kept in ``st.session_state`` per config and
scenario, so reruns of the page do not trace again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from engine.errors import NotTraceableError, TraceError, TraceUnavailableError
from engine.scenario.training import Scenario
from engine.trace import INSTALL_HINT, check_traceable, trace_training_step, tracer_available
from engine.trace.compare import Comparison, compare
from engine.trace.result import TraceResult
from engine.units import Unit, fmt_bytes, to_unit
from ui.formats import md_plain

_CACHE = "trace_results"
"""``st.session_state`` key: {cache key: TraceResult}."""


def trace_key(config: dict[str, Any], scenario: Scenario) -> str:
    """A short stable key of (config, scenario) for the session cache."""
    blob = json.dumps({"c": config, "s": scenario.model_dump(mode="json")}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def comparison_frame(cmp: Comparison, unit: Unit) -> pd.DataFrame:
    """The comparison as a table: component, estimate, trace (in ``unit``), difference in %."""
    rows = []
    for r in (*cmp.rows, cmp.total, *cmp.phases):
        diff = r.difference_pct
        rows.append({
            "component": r.label if r not in cmp.phases else f"{r.label} (phase total)",
            f"estimate ({unit})": round(to_unit(r.estimate_bytes, unit), 3),
            f"trace ({unit})": round(to_unit(r.traced_bytes, unit), 3),
            "difference": "—" if diff is None else f"{diff:+.1f}%",
        })
    return pd.DataFrame(rows)


def comparison_figure(cmp: Comparison, unit: Unit) -> go.Figure:
    """Grouped bars, estimate vs trace, per component at each side's peak."""
    labels = [r.label for r in cmp.rows]
    fig = go.Figure([
        go.Bar(name="Engine estimate", x=labels, y=[to_unit(r.estimate_bytes, unit) for r in cmp.rows]),
        go.Bar(name="Fake-tensor trace", x=labels, y=[to_unit(r.traced_bytes, unit) for r in cmp.rows]),
    ])
    fig.update_layout(barmode="group", height=320, margin=dict(l=10, r=10, t=30, b=10), yaxis_title=unit,
                      legend=dict(orientation="h", y=1.12))
    return fig


def _show(result: TraceResult, estimate: Any, unit: Unit) -> None:
    cmp = compare(estimate, result)
    total = cmp.total
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Traced peak", fmt_bytes(result.peak_allocated_bytes, unit), help=f"{result.peak_allocated_bytes:,} bytes, steady-state step")
    c2.metric("Estimate vs trace", "—" if total.difference_pct is None else f"{total.difference_pct:+.1f}%")
    c3.metric("Traced peak phase", result.peak_phase)
    c4.metric("Attention kernel", result.attention_kernel.replace("_", "-"))
    st.plotly_chart(comparison_figure(cmp, unit), width="stretch", key="trace_compare_chart")
    st.dataframe(comparison_frame(cmp, unit), hide_index=True, width="stretch")
    for note in result.notes:
        st.caption(md_plain(note))
    v = result.versions
    st.caption(
        f"First step peak {fmt_bytes(result.first_step.peak_allocated_bytes, unit)} (no optimizer states yet); "
        f"traced in {result.trace_seconds:.1f} s ({result.wall_seconds:.1f} s with the worker's start) with torch "
        f"{v.get('torch')}, transformers {v.get('transformers')}, peft {v.get('peft')}. The trace counts every tensor "
        "allocation of two Trainer-like steps on fake CUDA tensors, rounded to 512-byte blocks: a model of "
        "`torch.cuda.max_memory_allocated()`. Activations, logits and loss are compared together: the trace labels "
        "tensors by when they are created, the engine by what they are.")


def trace_panel(config: dict[str, Any], scenario: Scenario, estimate: Any, unit: Unit = "GB") -> None:
    """Draw "Verify by tracing" for ``scenario`` on the model of ``config`` beside ``estimate``
    (an :class:`engine.memory.result.MemoryEstimate` of the same scenario on one GPU)."""
    st.subheader("Verify by tracing")
    ok, reason = tracer_available()
    if not ok:
        st.info(f"Tracing measures the step exactly on fake tensors (no GPU needed) but needs the optional extra: "
                f"{md_plain(reason.split(';')[0])}. Install it with `{INSTALL_HINT}` and restart the app.")
        return
    try:
        check_traceable(scenario, config)
    except NotTraceableError as exc:
        st.info(f"This scenario cannot be traced: {md_plain(exc)}.")
        return
    cache: dict[str, TraceResult] = st.session_state.setdefault(_CACHE, {})
    key = trace_key(config, scenario)
    if key not in cache:
        st.caption("Builds the real transformers model on fake CUDA tensors and runs two training steps as Trainer "
                   "would, counting every allocation (a few seconds; the first trace also compiles a small extension).")
        if not st.button("Verify by tracing", key="trace_button"):
            return
        with st.spinner("Tracing two training steps on fake tensors…"):
            try:
                cache[key] = trace_training_step(config, scenario)
            except TraceUnavailableError as exc:
                st.info(md_plain(exc))
                return
            except NotTraceableError as exc:
                st.info(f"This scenario cannot be traced: {md_plain(exc)}.")
                return
            except TraceError as exc:
                st.error(f"The trace did not complete: {md_plain(exc)}")
                return
    _show(cache[key], estimate, unit)
