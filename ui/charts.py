"""Plotly figures built from engine results (no formulas: only unit conversion for display)."""

from __future__ import annotations

import math

import plotly.colors
import plotly.graph_objects as go

from engine.hardware.gpus import Gpu
from engine.plan.cost import PlanEstimate, PlanSearch
from engine.plan.fit import FitMatrix
from engine.memory.sweep import SweepRow
from engine.plan.verdict import Verdict
from engine.units import Unit, fmt_bytes, to_unit
from ui.verdict import VERDICT_MARKS, verdict_label
from ui.axes import log_axis, point_axis
from ui.formats import fmt_hours, fmt_usd, plain  # noqa: F401 (fmt_hours, fmt_usd: re-exported for the pages)

class PrebuiltFigure(go.Figure):
    """A figure whose :meth:`to_dict` hands out its own data and layout instead of deep copies (plotly 6's
    ``BaseFigure.to_dict`` deep-copies both: for a fit heatmap, thousands of cells, on every rerun, inside
    st.plotly_chart, which only serialises the dict). Callers must not change the dict they get."""

    def to_dict(self) -> dict:
        return {"data": self._data, "layout": self._layout}


def prebuilt(spec: dict) -> go.Figure:
    """A figure from a spec built here (``{"data": [...], "layout": {...}}``), without plotly.py's property-by-property
    validation (``BaseFigure(_validate=False)``, plotly 6): for a fit heatmap it took 20-35 ms of the 25-40 ms of
    building the figure, on every rerun; st.plotly_chart then serialises it as it is (:class:`PrebuiltFigure`). The
    specs are still checked: tests/app/test_figures_valid.py validates every figure of the pages that draw them."""
    return PrebuiltFigure(spec, _validate=False)


COMPONENT_STYLE = {
    "weights": ("Weights", "#1f77b4"),
    "weight_copies": ("Low-precision weight copies", "#aec7e8"),
    "master_weights": ("fp32 master weights (DeepSpeed)", "#c5b0d5"),
    "master_gradients": ("fp32 gradient partition (DeepSpeed step)", "#f7b6d2"),
    "gradients": ("Gradients", "#ff7f0e"),
    "gradient_temporaries": ("Backward temporaries (tied embedding)", "#ffbb78"),
    "optimizer_states": ("Optimizer states", "#2ca02c"),
    "optimizer_temporaries": ("Optimizer step temporaries", "#98df8a"),
    "activations": ("Activations", "#d62728"),
    "recomputed_layer": ("Recomputed block (checkpointing)", "#ff9896"),
    "logits_loss": ("Logits and loss", "#9467bd"),
    "logits_forward": ("Logits and loss (forward)", "#c5b0d5"),
    "gathered_weights": ("Gathered weights (ZeRO-3/FSDP)", "#17becf"),
    "comm_buckets": ("Communication buckets", "#bcbd22"),
    "kv_cache": ("KV cache", "#8c564b"),
    "activation_workspace": ("Activation workspace", "#e377c2"),
    "allocator_reserve": ("Allocator reserve (not tensors)", "#c7c7c7"),
    "cuda_context": ("CUDA context (not tensors)", "#7f7f7f"),
}


def usable_line(y: float, text: str, bgcolor: str | None = None) -> tuple[dict, dict]:
    """A dashed horizontal line across the plot at ``y`` and its label at the top right: the layout shape and
    annotation ``Figure.add_hline`` would add, built directly (add_hline costs milliseconds per call, on every rerun)."""
    shape = {"type": "line", "xref": "x domain", "x0": 0, "x1": 1, "yref": "y", "y0": y, "y1": y,
             "line": {"dash": "dash", "color": "black"}}
    annotation = {"text": text, "xref": "x domain", "x": 1, "xanchor": "right", "yref": "y", "y": y,
                  "yanchor": "bottom", "showarrow": False, "font": {"color": "black"}}
    if bgcolor:
        annotation["bgcolor"] = bgcolor
    return shape, annotation


LABEL_CHAR_PX = 6.5
"""At most this many pixels a character of plotly.js's 12 px labels (ticks, legend entries) take, for margins sized in
advance: plotly.js first lays a chart out within the requested margins, then grows them to what its labels need and
draws the whole chart once more (about 15-30 ms a chart in headless Chromium on 2 cores, on every rerun that changes
it); margins already wide enough spare that drawing. An estimate that falls short only brings it back (automargin
stays on); one too wide leaves a little space."""


def label_px(texts: list[str]) -> int:
    """Pixels the longest of ``texts`` (one line each) may take at plotly.js's 12 px font."""
    return round(LABEL_CHAR_PX * max(map(len, texts), default=0))


def per_gpu_figure(components: dict[str, float], cpu_bytes: float, unit: Unit, gpu: Gpu | None,
                   title: str = "per GPU") -> go.Figure:
    """One stacked bar of the per-GPU components at the peak and, when states are offloaded, a separate bar of
    the CPU memory (per node), with the GPU's usable memory as a line."""
    x = [title] + (["CPU memory (per node)"] if cpu_bytes else [])
    data: list[dict] = []
    for key, (label, color) in COMPONENT_STYLE.items():
        v = components.get(key, 0.0)
        if v:
            data.append({"type": "bar", "name": label, "x": [x[0]], "y": [to_unit(v, unit)], "marker": {"color": color},
                         "hovertemplate": f"{label}: %{{y:,.2f}} {unit}<extra></extra>"})
    if cpu_bytes:
        data.append({"type": "bar", "name": "Offloaded states (CPU)", "x": [x[1]], "y": [to_unit(cpu_bytes, unit)],
                     "marker": {"color": "#7f7f7f"}, "hovertemplate": f"CPU: %{{y:,.2f}} {unit}<extra></extra>"})
    total = to_unit(sum(components.values()), unit)
    data.append({"type": "scatter", "x": [x[0]], "y": [total], "mode": "text", "text": [f"<b>{total:,.1f} {unit}</b>"],
                 "textposition": "top center", "showlegend": False, "hoverinfo": "skip"})
    shapes, annotations = [], []
    if gpu is not None:
        usable = to_unit(gpu.usable_memory_bytes, unit)
        shape, annotation = usable_line(usable, f"{gpu.name}: {usable:,.1f} {unit} usable")
        shapes.append(shape)
        annotations.append(annotation)
    top = max([total, to_unit(cpu_bytes, unit)] + ([to_unit(gpu.usable_memory_bytes, unit)] if gpu else []) + [1e-9])
    layout = {"barmode": "stack", "yaxis": {"title": {"text": f"Memory ({unit})"}, "range": [0, top * 1.15]},
              "height": 420, "legend": {"title": {"text": "Component"}}, "margin": {"t": 30, "b": 10},
              "shapes": shapes, "annotations": annotations}
    return prebuilt({"data": data, "layout": layout})


def memory_stack_figure(rows: list[SweepRow], unit: Unit, gpu: Gpu | None) -> go.Figure:
    """Stacked bars of each row's components at its peak, labelled with the total, with a line at the
    GPU's usable memory (the device total nvidia-smi reports, :attr:`engine.hardware.gpus.Gpu.usable_memory_bytes`).

    Built as one figure dict (validated once) rather than trace by trace: this chart is redrawn on every rerun of
    the Memory page."""
    ok = [r for r in rows if r.estimate is not None]
    x = [r.label.replace(" · ", "<br>") + (" ◀" if r.is_current else "") for r in ok]
    data: list[dict] = []
    parts = [{**r.estimate.components, **{p.key: p.bytes for p in r.estimate.overheads}} for r in ok]  # type: ignore[union-attr]
    for key, (label, color) in COMPONENT_STYLE.items():
        values = [to_unit(c.get(key, 0.0), unit) for c in parts]
        if any(values):
            data.append({"type": "bar", "name": label, "x": x, "y": values, "marker": {"color": color},
                         "hovertemplate": f"{label}: %{{y:,.2f}} {unit}<extra></extra>"})
    totals = [to_unit(r.estimate.device_used_bytes, unit) for r in ok]  # type: ignore[union-attr]
    info = [(r.estimate.peak_phase.replace("_", " "), to_unit(r.estimate.peak_allocated_bytes, unit)) for r in ok]  # type: ignore[union-attr]
    data.append({"type": "scatter", "x": x, "y": totals, "mode": "text", "text": [f"<b>{t:,.1f} {unit}</b>" for t in totals],
                 "textposition": "top center", "showlegend": False, "customdata": info,
                 "hovertemplate": (f"nvidia-smi %{{y:,.2f}} {unit}; tensors (max_memory_allocated) %{{customdata[1]:,.2f}} "
                                   f"{unit}; peak at %{{customdata[0]}}<extra></extra>")})
    shapes, annotations = [], []
    if gpu is not None:
        usable = to_unit(gpu.usable_memory_bytes, unit)
        shape, annotation = usable_line(usable, f"{gpu.name}: {usable:,.1f} {unit} usable", "rgba(255,255,255,0.85)")
        shapes.append(shape)
        annotations.append(annotation)
    top = max(totals + ([to_unit(gpu.usable_memory_bytes, unit)] if gpu else []) + [1e-9])
    layout = {"barmode": "stack", "yaxis": {"title": {"text": f"Peak memory, as nvidia-smi shows it ({unit})"},
                                            "range": [0, top * 1.15]},
              "legend": {"title": {"text": "Component"}}, "height": 480, "xaxis": {"tickangle": 0},
              # Measured in Chromium: the legend at x = 1.02 takes about 68 px and 5.1 px a character of its longest
              # entry, the bars' names 24 px and 15 px a line (one per "<br>"), four-digit ticks and the title 80 px.
              "margin": {"t": 30, "l": 82, "r": 68 + round(5.4 * max([len(d["name"]) for d in data if "name" in d] + [0])),
                         "b": 24 + 15 * max([n.count("<br>") + 1 for n in x] + [1])},
              "shapes": shapes, "annotations": annotations}
    return prebuilt({"data": data, "layout": layout})


def parameter_figure(counts: dict[str, int]) -> go.Figure:
    """Horizontal bar of parameters by component."""
    items = [(k, v) for k, v in counts.items() if k != "total" and v]
    fig = go.Figure(go.Bar(x=[v for _, v in items], y=[k for k, _ in items], orientation="h",
                           text=[f"{v:,}" for _, v in items], textposition="auto"))
    fig.update_layout(xaxis_title="parameters", height=300,
                      margin=dict(t=10, b=58, l=12 + label_px([k for k, _ in items])))  # no automargin redraw (LABEL_CHAR_PX)
    return fig


def short_gpu_name(name: str) -> str:
    """Column label for a GPU: the catalog name without the vendor and brand words."""
    return name.removeprefix("NVIDIA ").removeprefix("AMD Instinct ").replace(" (one GCD)", " GCD")


NO_CELL_LABELS = "Off"
"""The cell-label choice that draws no text (colour and hover only), the fit page's default."""
CELL_LABELS = ("Fewest GPUs", "Headroom", NO_CELL_LABELS)
"""What a fit heatmap cell shows: the fewest GPUs (blank: one is enough, ≈ tight on one, ×N, ✗ none up to 1,024), the
single-GPU headroom, or nothing (:data:`NO_CELL_LABELS`: colour and hover only)."""

# Every cell's label is an SVG text element that plotly.js lays out when the chart is drawn again, about 0.2 ms each in
# headless Chromium on 2 cores (benchmarks/bench_browser.py): a one-GPU fit, the commonest cell, says it with its
# green alone, and the text is one colour (black) so plotly.js does not work out a contrasting colour cell by cell,
# which is why the colour scale's ends stay light enough for black text (5.6:1 on the red end, 7.7:1 on the green).
_HEADROOM_COLOURS = [[0.0, "#d6604d"], [0.45, "#f4a582"], [0.5, "#f7f7f7"], [0.55, "#a6dba0"], [1.0, "#5aae61"]]


def _cell_text(headroom: float, verdict: Verdict, min_gpus: int | None, unit: Unit, mode: str) -> str:
    # At most four characters: 28 GPU columns at 1,400 px leave about 30 px a cell (the hover has the figures).
    if mode == NO_CELL_LABELS:
        return ""
    if mode == "Headroom":
        value = to_unit(headroom, unit)
        size = f"{abs(value):.0f}" if abs(value) >= 9.5 else f"{abs(value):.1f}"
        return f"{'+' if headroom >= 0 else '−'}{size}"
    if verdict is Verdict.FITS:
        return ""  # one GPU is enough: the green says it
    if verdict is Verdict.TIGHT:
        return VERDICT_MARKS[verdict]  # ≈ tight: may not fit
    return "✗" if min_gpus is None else f"×{min_gpus}"


def _heatmap_margin(x: list[str], y: list[str], titled: bool) -> dict:
    """Margins that already hold a fit heatmap's row labels (left), its GPU names at -45 degrees under the axis title
    (top) and its colour bar (right), estimated from the labels' lengths (:data:`LABEL_CHAR_PX`; about 25 ms of
    drawing spared a heatmap)."""
    return {"l": 10 + label_px(y), "r": 120, "b": 10, "t": round(0.71 * (label_px(x) + 12) + 56 + (30 if titled else 0))}


def fit_heatmap(matrix: FitMatrix, unit: Unit, title: str = "", labels: str = "Fewest GPUs") -> go.Figure:
    """Rows x GPUs heatmap, the GPUs grouped by memory (columns from the smallest usable memory to the largest).
    Colour: single-GPU headroom (green) or shortfall (red) in ``unit``; text (``labels``, one of
    :data:`CELL_LABELS`): the fewest GPUs with the row's strategy (none on a cell one GPU is enough for), or the
    headroom; ⚠ after a GPU's name: a bf16 scenario on a GPU without bf16. Hover gives the breakdown."""
    order = sorted(range(len(matrix.gpus)), key=lambda i: (matrix.usable_bytes[i], i))
    x = [short_gpu_name(matrix.gpus[i]) for i in order]
    usable_text = [fmt_bytes(u, unit) for u in matrix.usable_bytes]
    y, z, text, hover = [], [], [], []
    for row in matrix.rows:
        y.append(plain(row.label))
        if not row.cells:
            z.append([None] * len(x))
            text.append(["n/a"] * len(x))
            hover.append([f"not computed: {plain(row.error or '')}"] * len(x))
            continue
        est = row.estimate
        # The row's largest components once (the same on every GPU of the row): the hover is sent for every cell,
        # so it stays short (the whole matrix is one message per rerun).
        top = ""
        if est is not None:
            big = sorted(((v, k) for k, v in est.components.items() if v), reverse=True)[:3]
            top = "; ".join(f"{k.replace('_', ' ')} {fmt_bytes(v, unit)}" for v, k in big)
        tail = (f"<br>largest: {top}" if top else "") + (f"<br>note: {plain(row.note)}" if row.note else "")
        zr, tr, hr = [], [], []
        # GPUs of the same usable memory share one cell object (engine.plan.fit._cells): its hover is built once
        seen: dict[int, str] = {}
        for i in order:
            cell = row.cells[i]
            zr.append(to_unit(cell.headroom_bytes, unit))
            if labels != NO_CELL_LABELS:
                tr.append(_cell_text(cell.headroom_bytes, cell.verdict, cell.min_gpus, unit, labels))
            if id(cell) not in seen:
                many = ("none up to 1,024" if cell.min_gpus is None
                        else f"{cell.min_gpus} ({fmt_bytes(cell.per_gpu_bytes_at_min or 0, unit)} each)")
                seen[id(cell)] = (
                    f"one GPU: {fmt_bytes(cell.peak_bytes, unit)} of "
                    f"{usable_text[i]}, {verdict_label(cell.verdict)}, {'headroom' if cell.fits else 'short by'} "
                    f"{fmt_bytes(abs(cell.headroom_bytes), unit)}<br>fewest GPUs ({row.strategy.value}): {many}"
                    + (f"<br>⚠ {cell.warning}" if cell.warning else "") + tail
                )
            hr.append(seen[id(cell)])
        z.append(zr)
        text.append(tr)
        hover.append(hr)
    warned = {matrix.gpus[i] for row in matrix.rows for i, c in enumerate(row.cells) if c.warning}
    x = [name + (" ⚠" if matrix.gpus[i] in warned else "") for name, i in zip(x, order)]  # no bf16: on the column
    finite = [abs(v) for r in z for v in r if v is not None]
    span = max(finite + [1.0])
    cap = min(span, 80.0)  # beyond +-80 GB the colour saturates, so small margins stay visible
    # No texttemplate at all without labels: plotly.js formats every cell's template even when its text is empty.
    labelled = {"text": text, "texttemplate": "%{text}", "textfont": {"size": 11, "color": "black"}} if labels != NO_CELL_LABELS else {}
    trace = {"type": "heatmap", "x": x, "y": y, "z": z, **labelled, "customdata": hover,
             # the row and the GPU come from the axes, not from every cell's text (a third of the message)
             "hovertemplate": "<b>%{y}</b> on <b>%{x}</b><br>%{customdata}<extra></extra>",
             # No xgap/ygap: with gaps plotly.js paints every cell with its own fillRect on a canvas the size of the plot
             # and encodes that as a PNG (toDataURL), about 60 ms a redraw in headless Chromium (profile_browser.py);
             # without them it draws one pixel per cell and lets the browser scale the image up, unsmoothed
             # (plotly.js src/traces/heatmap/plot.js, drawingMethod 'fast' where the browser supports pixelated images).
             "colorscale": _HEADROOM_COLOURS, "zmid": 0, "zmin": -cap, "zmax": cap,
             "colorbar": {"title": {"text": f"headroom<br>on one GPU<br>({unit})"}, "thickness": 14}}
    layout = {"title": {"text": title} if title else None, "height": max(260, 30 * len(y) + 170),
              "margin": _heatmap_margin(x, y, bool(title)),
              # no grid lines: the cells cover them (61 SVG paths fewer to lay out on each redraw)
              "xaxis": {"side": "top", "tickangle": -45, "showgrid": False,
                        "title": {"text": "GPUs, from the least usable memory to the most"}},
              "yaxis": {"autorange": "reversed", "showgrid": False}}
    if not title:
        del layout["title"]
    return prebuilt({"data": [trace], "layout": layout})


# --------------------------------------------------------------------------------------------------
# Time & cost

BASIS_LABEL = {"on_demand": "on-demand", "spot": "spot"}
DATASET_AXIS = "dataset per epoch (tokens, after truncation / padding)"


def _log_axes_vline(current_size: float, text: str) -> dict:
    """A dotted vertical line at ``current_size`` on a log x axis and its label at the top left: what
    ``Figure.add_vline`` adds, built directly (add_vline costs milliseconds per call, on every rerun). plotly.js takes
    a shape's position on a log axis in data units and an annotation's in log10 units."""
    shape = {"type": "line", "xref": "x", "x0": current_size, "x1": current_size, "yref": "y domain", "y0": 0, "y1": 1,
             "line": {"dash": "dot", "color": "gray"}}
    annotation = {"text": text, "xref": "x", "x": math.log10(current_size) if current_size > 0 else 0.0,
                  "xanchor": "right", "yref": "y domain", "y": 1, "yanchor": "top", "showarrow": False}
    return {"shapes": [shape], "annotations": [annotation]}


def band_error_bars(values: list[float | None], lows: list[float | None], highs: list[float | None]) -> dict:
    """Plotly asymmetric error bars spanning each value's 80% band (``lows`` .. ``highs``, one per value); none where a
    value or its band is missing (an unpriced plan)."""
    return {"type": "data", "symmetric": False, "thickness": 1,
            "array": [None if v is None or hi is None else hi - v for v, hi in zip(values, highs)],
            "arrayminus": [None if v is None or lo is None else v - lo for v, lo in zip(values, lows)]}


def _band_shade(x: list[float], lows: list, highs: list, fillcolor: str, low: dict, high: dict) -> list[dict]:
    """Two line-less traces whose fill between them shades an 80% band (``tonexty``: the low trace fills up to the high
    one drawn just before it); ``low`` / ``high``: each trace's own keys (its name, legend)."""
    return [{"type": "scatter", "x": x, "y": highs, "mode": "lines", "line": {"width": 0}, "hoverinfo": "skip", **high},
            {"type": "scatter", "x": x, "y": lows, "mode": "lines", "line": {"width": 0}, "fill": "tonexty",
             "fillcolor": fillcolor, "hoverinfo": "skip", **low}]


def time_vs_dataset_figure(
    sizes: list[float], hours: list[float], seed_hours: list[float] | None, current_size: float, label: str,
    band: tuple[list[float], list[float]] | None = None,
) -> go.Figure:
    """Wall hours against dataset size (tokens) for one plan: the step-time model (with its 80% band, ``band`` = (low,
    high) hours, shaded), and the seed rule if it has a line."""
    data = []
    if band is not None:
        data += _band_shade(sizes, band[0], band[1], "rgba(99, 110, 250, 0.18)",
                            low={"name": "80% band (cross-validated)"}, high={"name": "band high", "showlegend": False})
    data.append({"type": "scatter", "x": sizes, "y": hours, "mode": "lines", "name": f"step-time model ({label})",
                 "hovertemplate": "%{x:,.3s} tokens: %{y:,.3g} h<extra>step-time model</extra>"})
    if seed_hours is not None:
        data.append({"type": "scatter", "x": sizes, "y": seed_hours, "mode": "lines", "name": "seed rule",
                     "line": {"dash": "dash"}, "hovertemplate": "%{x:,.3s} tokens: %{y:,.3g} h<extra>seed rule</extra>"})
    layout = {"xaxis": log_axis(sizes, DATASET_AXIS),
              "yaxis": log_axis([*hours, *(seed_hours or []), *(band[0] + band[1] if band else [])], "wall time (hours)"),
              "height": 380,
              "margin": {"t": 30, "b": 10}, "legend": {"orientation": "h", "y": -0.25},
              **_log_axes_vline(current_size, "your dataset")}
    return prebuilt({"data": data, "layout": layout})


def cost_vs_dataset_figure(series: dict[str, tuple[list[float], list[float], list[float], list[float]]],
                           current_size: float, basis: str) -> go.Figure:
    """Cost against dataset size, one line per plan (label -> (sizes, USD, low USD, high USD)), each shaded over its
    80% band (the plan's cross-validated throughput band, engine.time.band) in the line's colour."""
    data: list[dict] = []
    for i, (label, (sizes, costs, lows, highs)) in enumerate(series.items()):
        # Plotly's default colour sequence, named so each band takes its line's colour
        colour = plotly.colors.qualitative.Plotly[i % len(plotly.colors.qualitative.Plotly)]
        fill = "rgba({}, {}, {}, 0.15)".format(*plotly.colors.hex_to_rgb(colour))
        data += _band_shade(sizes, lows, highs, fill,
                            low={"name": f"{label} band low", "showlegend": False, "legendgroup": label},
                            high={"name": f"{label} band high", "showlegend": False, "legendgroup": label})
        data += [{"type": "scatter", "x": sizes, "y": costs, "mode": "lines", "name": label, "legendgroup": label,
                  "line": {"color": colour}, "customdata": list(zip(lows, highs)),
                  "hovertemplate": f"{label}<br>%{{x:,.3s}} tokens: $%{{y:,.2f}} ($%{{customdata[0]:,.2f}}–"
                                   "$%{customdata[1]:,.2f})<extra></extra>"}]
    layout = {"xaxis": log_axis([x for sizes, *_ in series.values() for x in sizes], DATASET_AXIS),
              "yaxis": log_axis([c for _, costs, lows, highs in series.values() for c in (*costs, *lows, *highs)],
                                f"cost, {BASIS_LABEL.get(basis, basis)} (USD)", prefix="$"),
              "height": 420, "margin": {"t": 30, "b": 10}, "legend": {"orientation": "h", "y": -0.25},
              **_log_axes_vline(current_size, "your dataset")}
    return prebuilt({"data": data, "layout": layout})


def gpu_count_figure(plans: list[PlanEstimate], basis: str, gpu: str) -> go.Figure:
    """Hours (left axis) and cost (right axis) against the number of GPUs, for the counts that fit."""
    n = [p.num_gpus for p in plans]
    data = [{"type": "scatter", "x": n, "y": [p.run.hours for p in plans], "mode": "lines+markers",
             "name": "wall time (h)", "hovertemplate": "%{x} GPUs: %{y:,.3g} h<extra></extra>", "yaxis": "y",
             # the cross-validated 80% band of each plan's hours (engine.time.band) as error bars
             "error_y": band_error_bars([p.run.hours for p in plans], [p.run.hours_low for p in plans],
                                        [p.run.hours_high for p in plans])}]
    costs = [p.cost(basis) for p in plans]  # type: ignore[arg-type]
    ranges = [p.cost_range(basis) for p in plans]  # type: ignore[arg-type]
    if any(c is not None for c in costs):
        data.append({"type": "scatter", "x": n, "y": costs, "mode": "lines+markers",
                     "name": f"cost, {BASIS_LABEL.get(basis, basis)} (USD)", "line": {"dash": "dash"},
                     "hovertemplate": "%{x} GPUs: $%{y:,.2f}<extra></extra>", "yaxis": "y2",
                     # the same 80% band on each plan's cost (none where a plan has no price)
                     "error_y": band_error_bars(costs, [lo for lo, _ in ranges], [hi for _, hi in ranges])})
    layout = {
        "xaxis": {**point_axis(n, f"number of {gpu} (GPUs)"), "domain": [0.0, 0.94]},
        "yaxis": {"title": {"text": "wall time (hours)"}, "rangemode": "tozero"},
        "yaxis2": {"title": {"text": "cost (USD)"}, "rangemode": "tozero", "overlaying": "y", "side": "right",
                   "anchor": "x", "tickprefix": "$", "tickformat": ",.2~f"},  # dollars, not bare 0.556
        "height": 380, "margin": {"t": 30, "b": 10}, "legend": {"orientation": "h", "y": -0.25},
    }
    return prebuilt({"data": data, "layout": layout})


def plan_scatter_figure(search: PlanSearch) -> go.Figure:
    """Hours against cost of every priced plan that fits, the Pareto front as a line, cheapest and fastest named."""
    basis = search.basis
    priced = [p for p in search.plans if p.cost(basis) is not None]
    front = list(search.pareto)
    front_costs = [p.cost_range(basis) for p in front]  # (low, high) USD of each front plan
    others = [p for p in priced if p not in front]  # the front's own points are drawn (and hovered) once, on the front
    hover = "%{text}<br>%{customdata[0]}, %{customdata[1]}"

    def ranges(plans: list) -> list[list[str]]:  # wall time and cost with their 80% band, as the bullets write them
        return [[f"{fmt_hours(p.run.hours)} ({fmt_hours(p.run.hours_low)}–{fmt_hours(p.run.hours_high)})",
                 "{} ({}–{})".format(fmt_usd(p.cost(basis)), *map(fmt_usd, p.cost_range(basis)))] for p in plans]

    data = [
        {"type": "scatter", "x": [p.run.hours for p in others], "y": [p.cost(basis) for p in others], "mode": "markers",
         "name": "plans that fit", "marker": {"size": 7, "color": "#9ecae1", "line": {"width": 0.5, "color": "#3182bd"}},
         "text": [p.label for p in others], "customdata": ranges(others), "hovertemplate": hover + "<extra></extra>"},
        # the front's plans carry their 80% band as error bars (on every plan the chart would be unreadable)
        {"type": "scatter", "x": [p.run.hours for p in front], "y": [p.cost(basis) for p in front],
         "mode": "lines+markers", "name": "Pareto front (error bars: 80% band)", "marker": {"size": 9, "color": "#d62728"},
         "line": {"color": "#d62728"}, "text": [p.label for p in front], "customdata": ranges(front),
         "error_x": band_error_bars([p.run.hours for p in front], [p.run.hours_low for p in front],
                                    [p.run.hours_high for p in front]),
         "error_y": band_error_bars([p.cost(basis) for p in front], [lo for lo, _ in front_costs],
                                    [hi for _, hi in front_costs]),
         "hovertemplate": hover + "<extra>Pareto front</extra>"},
    ]
    annotations = [
        {"x": math.log10(plan.run.hours), "y": math.log10(plan.cost(basis) or 1e-9),
         "text": f"<b>{what}</b>: {plan.label}", "showarrow": True, "arrowhead": 2,
         "ax": 40 if what == "cheapest" else -40, "ay": -40 if what == "cheapest" else 40,
         "bgcolor": "rgba(255,255,255,0.85)"}
        for plan, what in ((search.cheapest, "cheapest"), (search.fastest, "fastest"))
        if plan is not None and plan.cost(basis) is not None
    ]
    layout = {"xaxis": log_axis([p.run.hours for p in priced], "wall time (hours)"),
              "yaxis": log_axis([p.cost(basis) for p in priced], f"cost, {BASIS_LABEL.get(basis, basis)} (USD)", prefix="$"),
              "height": 480, "margin": {"t": 30, "b": 10}, "legend": {"orientation": "h", "y": -0.2},
              "annotations": annotations}
    return prebuilt({"data": data, "layout": layout})


# --------------------------------------------------------------------------------------------------
# Validation (Methodology)

BAND_COLOURS = {25: "rgba(44, 160, 44, 0.10)", 10: "rgba(44, 160, 44, 0.22)"}
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star", "cross", "triangle-down", "pentagon", "hexagon")
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")


def predicted_vs_measured_figure(points: list[dict], *, quantity: str, axis_unit: str, colour_title: str,
                                 symbol_title: str, height: int = 520) -> go.Figure:
    """Log-log scatter of predicted against measured values with the line y = x and the ±10% and ±25% bands.

    ``points``: one dict per row with ``measured`` and ``predicted`` (> 0, in ``axis_unit``), ``colour`` and
    ``symbol`` (category labels: one colour per value of the first, one marker per value of the second) and
    ``hover`` (the row, as HTML-safe text lines joined by ``<br>``). A point above the line is an over-estimate.
    Used for both the memory and the throughput validation, so both read the same way.
    """
    pts = [p for p in points if p["measured"] > 0 and p["predicted"] > 0]
    values = [v for p in pts for v in (p["measured"], p["predicted"])] or [1.0, 10.0]
    lo, hi = min(values) / 1.5, max(values) * 1.5
    xs = [lo * (hi / lo) ** (i / 20) for i in range(21)]
    data: list[dict] = []
    for pct in (25, 10):  # the wider band first, so the narrower one draws over it
        data.append({"type": "scatter", "x": xs, "y": [x * (1 - pct / 100) for x in xs], "mode": "lines",
                     "line": {"width": 0}, "hoverinfo": "skip", "showlegend": False})
        data.append({"type": "scatter", "x": xs, "y": [x * (1 + pct / 100) for x in xs], "mode": "lines",
                     "line": {"width": 0}, "fill": "tonexty", "fillcolor": BAND_COLOURS[pct], "hoverinfo": "skip",
                     "name": f"within ±{pct}%", "legendgroup": "bands"})
    data.append({"type": "scatter", "x": [lo, hi], "y": [lo, hi], "mode": "lines", "name": "predicted = measured",
                 "line": {"color": "black", "dash": "dash", "width": 1}, "hoverinfo": "skip", "legendgroup": "bands"})
    symbols = {s: SYMBOLS[i % len(SYMBOLS)] for i, s in enumerate(dict.fromkeys(p["symbol"] for p in pts))}
    colours = {c: PALETTE[i % len(PALETTE)] for i, c in enumerate(dict.fromkeys(p["colour"] for p in pts))}
    data.append({
        "type": "scatter", "mode": "markers", "showlegend": False,
        "x": [p["measured"] for p in pts], "y": [p["predicted"] for p in pts], "customdata": [p["hover"] for p in pts],
        "marker": {"size": 10, "symbol": [symbols[p["symbol"]] for p in pts], "color": [colours[p["colour"]] for p in pts],
                   "line": {"width": 1, "color": "white"}},
        "hovertemplate": f"%{{customdata}}<br>measured %{{x:,.3g}} {axis_unit}, predicted %{{y:,.3g}} {axis_unit}"
                         "<extra></extra>",
    })
    # Legend-only entries: one per colour (a circle) and one per marker (grey), so each legend line means one thing.
    data += [{"type": "scatter", "mode": "markers", "x": [None], "y": [None], "name": plain(str(c)),
              "legendgroup": "colour", "legendgrouptitle": {"text": colour_title} if i == 0 else None,
              "marker": {"size": 10, "color": colour, "symbol": "circle"}} for i, (c, colour) in enumerate(colours.items())]
    data += [{"type": "scatter", "mode": "markers", "x": [None], "y": [None], "name": plain(str(s)),
              "legendgroup": "symbol", "legendgrouptitle": {"text": symbol_title} if i == 0 else None,
              "marker": {"size": 10, "color": "#7f7f7f", "symbol": symbol}} for i, (s, symbol) in enumerate(symbols.items())]
    for trace in data:
        if trace.get("legendgrouptitle") is None:
            trace.pop("legendgrouptitle", None)
    axis = f"{quantity} ({axis_unit})" if axis_unit != quantity else quantity
    layout = {
        "xaxis": {"type": "log", "title": {"text": f"measured {axis}"}, "range": [math.log10(lo), math.log10(hi)]},
        "yaxis": {"type": "log", "title": {"text": f"predicted {axis}"}, "range": [math.log10(lo), math.log10(hi)]},
        "height": height, "margin": {"t": 30, "b": 10}, "legend": {"groupclick": "toggleitem", "tracegroupgap": 12},
    }
    return prebuilt({"data": data, "layout": layout})
