"""Vega-Lite charts (``st.vega_lite_chart``) for the figures a sidebar change redraws on every rerun.

Why not Plotly for these: Streamlit gives a Plotly chart a new element id whenever its spec changes, so every rerun
that changes the numbers remounts the chart and Plotly draws it from scratch. Measured in headless Chromium with
benchmarks/bench_browser.py's method (issue 26): a stacked bar of 8 traces cost about 150 ms of the page's main-thread
CPU per change, a Vega-Lite chart of the same bars about 25 ms (a one-widget page alone: about 70 ms). The
Memory page spent about 190 ms of its ~480 ms per change in its one Plotly chart.

Each function returns ``(rows, spec)``: the chart's data as a list of dicts and the Vega-Lite spec (v5) that draws
it, for ``st.vega_lite_chart(pd.DataFrame(rows), spec, key=...)``. With a ``key``, Streamlit keeps the chart's
identity across reruns and its frontend swaps the data in place when only the rows change. No formulas: unit
conversion for display only.
"""

from __future__ import annotations

from engine.hardware.gpus import Gpu
from engine.memory.sweep import SweepRow
from engine.units import Unit, to_unit
from ui.charts import COMPONENT_STYLE


def memory_stack_chart(rows: list[SweepRow], unit: Unit, gpu: Gpu | None) -> tuple[list[dict], dict]:
    """Stacked bars of each sweep row's components at its peak (the colours and names of
    :data:`ui.charts.COMPONENT_STYLE`), its nvidia-smi total written on top (hover: the tensors, as
    ``max_memory_allocated``, and the peak phase), and a dashed line at the GPU's usable memory
    (:attr:`engine.hardware.gpus.Gpu.usable_memory_bytes`). Rows without an estimate are left out (the page names them).

    Data rows: ``technique`` (the sweep row's label, "◀" on the user's choice), ``order`` (its place), ``component``,
    ``stack`` (the component's place in the stack), ``value`` (in ``unit``), ``total`` (nvidia-smi, in ``unit``),
    ``tensors`` (max_memory_allocated, in ``unit``), ``peak`` (the peak phase)."""
    ok = [r for r in rows if r.estimate is not None]
    data: list[dict] = []
    present: list[str] = []
    for order, r in enumerate(ok):
        est = r.estimate
        parts = {**est.components, **{p.key: p.bytes for p in est.overheads}}  # type: ignore[union-attr]
        common = {"technique": r.label + (" ◀" if r.is_current else ""), "order": order,
                  "total": round(to_unit(est.device_used_bytes, unit), 4),  # type: ignore[union-attr]
                  "tensors": round(to_unit(est.peak_allocated_bytes, unit), 4),  # type: ignore[union-attr]
                  "peak": est.peak_phase.replace("_", " ")}  # type: ignore[union-attr]
        for stack, (key, (label, _)) in enumerate(COMPONENT_STYLE.items()):
            value = to_unit(parts.get(key, 0.0), unit)
            if value:
                data.append({**common, "component": label, "stack": stack, "value": round(value, 4)})
                if label not in present:
                    present.append(label)
    colours = {label: colour for label, colour in COMPONENT_STYLE.values()}
    domain = [label for label, _ in COMPONENT_STYLE.values() if label in present]
    totals = [d["total"] for d in data]
    top = max(totals + ([to_unit(gpu.usable_memory_bytes, unit)] if gpu else []) + [1e-9]) * 1.15
    x = {"field": "technique", "type": "nominal", "title": None, "sort": {"field": "order", "op": "min"},
         "axis": {"labelAngle": 0, "labelExpr": "split(datum.label, ' · ')", "labelLimit": 200}}
    y_title = f"Peak memory, as nvidia-smi shows it ({unit})"
    layers: list[dict] = [
        {"mark": {"type": "bar"},
         "encoding": {
             "x": x,
             "y": {"field": "value", "type": "quantitative", "stack": "zero", "title": y_title,
                   "scale": {"domain": [0, top]}},
             "color": {"field": "component", "type": "nominal", "title": "Component",
                       "scale": {"domain": domain, "range": [colours[c] for c in domain]},
                       "legend": {"orient": "right", "labelLimit": 320}},
             "order": {"field": "stack", "type": "quantitative"},
             "tooltip": [{"field": "technique", "title": "technique"}, {"field": "component", "title": "component"},
                         {"field": "value", "title": unit, "format": ",.2f"}]}},
        {"transform": [{"aggregate": [{"op": "max", "field": "total", "as": "total"},
                                      {"op": "max", "field": "tensors", "as": "tensors"},
                                      {"op": "min", "field": "order", "as": "order"}],
                        "groupby": ["technique", "peak"]},
                       {"calculate": f"format(datum.total, ',.1f') + ' {unit}'", "as": "label"}],
         "mark": {"type": "text", "dy": -8, "fontWeight": "bold"},
         "encoding": {
             "x": x, "y": {"field": "total", "type": "quantitative"}, "text": {"field": "label"},
             "tooltip": [{"field": "technique", "title": "technique"},
                         {"field": "total", "title": f"nvidia-smi ({unit})", "format": ",.2f"},
                         {"field": "tensors", "title": f"tensors, max_memory_allocated ({unit})", "format": ",.2f"},
                         {"field": "peak", "title": "peak at"}]}},
    ]
    if gpu is not None:
        usable = round(to_unit(gpu.usable_memory_bytes, unit), 4)
        line = {"data": {"values": [{"usable": usable, "label": f"{gpu.name}: {usable:,.1f} {unit} usable"}]}}
        layers += [
            {**line, "mark": {"type": "rule", "strokeDash": [6, 4], "color": "#444"},
             "encoding": {"y": {"field": "usable", "type": "quantitative"}}},
            {**line, "mark": {"type": "text", "align": "right", "baseline": "bottom", "dy": -3, "x": "width"},
             "encoding": {"y": {"field": "usable", "type": "quantitative"}, "text": {"field": "label"}}},
        ]
    return data, {"height": 420, "layer": layers}
