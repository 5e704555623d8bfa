"""The team's saved plans (the library of ui/plan_store.py) as this session sees them, and the table and Plotly figures that compare them (Plans page)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from engine.errors import EngineError
from engine.plan.plans import COMPONENT_KEYS, Plan, PlanImport, PlanResult, evaluate_plan, plan_record
from engine.model.sources import config_from_catalog
from engine.units import Unit, to_unit
from ui.catalog_session import session_gpus, session_prices, table_key
from ui.charts import band_error_bars
from ui.formats import fmt_hours, md_plain, md_usd, plain
from ui.model_picker import shared_architecture
from ui.plan_store import ANONYMOUS, PlanChanged, PlanStore, StoredPlan
from ui.tables import bytes_in, number_columns

PLANS_KEY = "saved_plans"  # this run's view of the library, recomputed: [(Plan, PlanResult)], oldest first
STAMP_KEY = "saved_plans_stamp"  # (app_version, exported_at, {(id, version)}) of an imported file, while the library is it
_SEEN_KEY = "_plans_seen"  # name -> the StoredPlan this session last showed (the version a replace/rename/delete names)
_COPY_SUFFIX = re.compile(r" \(\d+\)$")  # the " (2)" engine.plan.plans.unique_plan_name appends to a taken name


def saved_plans() -> list[tuple[Plan, PlanResult]]:
    """The library's plans that recompute, as last read by :func:`refresh_plans` in this run (oldest first)."""
    return st.session_state.setdefault(PLANS_KEY, [])


def seen_plan(name: str) -> StoredPlan | None:
    """The row this session was shown under ``name`` (its version is what a replace, rename or delete expects)."""
    return st.session_state.get(_SEEN_KEY, {}).get(name)


def saved_names() -> list[str]:
    """Every name in the library as last read (plans that do not recompute here included)."""
    return list(st.session_state.get(_SEEN_KEY, {}))


def _config_of(stored: StoredPlan) -> dict[str, Any]:
    return stored.config if stored.config is not None else resolve_config(stored.plan.model_repo_id, stored.plan.model_revision)


@st.cache_resource(max_entries=512, ttl=3600, show_spinner=False)
def _evaluated(record: str, config_key: str, tables: tuple[str, str], _plan: Plan, _config: dict, _gpus: tuple,
               _prices: tuple) -> PlanResult | str:
    # One evaluation per plan version, config and tables for every session (a library of many plans is read by
    # every visitor of the Plans page); what does not evaluate is kept as its reason. Bounded. The architecture is the
    # app's one object for that config (ui.model_picker.shared_architecture), which the engine's memos know.
    try:
        return evaluate_plan(_plan, _config, gpus=_gpus, prices=_prices, arch=shared_architecture(_config)[0])
    except EngineError as exc:
        return str(exc)


def refresh_plans(store: PlanStore) -> list[tuple[StoredPlan, str]]:
    """Read the library, recompute each plan (kept per plan record, model config and this session's GPU and price
    tables, for every session) into :func:`saved_plans`, and remember the versions shown. Returns the rows that did not
    recompute, with why (a Hub model this session cannot read, a GPU its edited catalog lacks)."""
    rows = store.plans()
    gpus, prices = session_gpus(), session_prices()
    tables = (table_key(gpus), table_key(prices))
    good, failed = [], []
    for row in rows:
        try:
            config = _config_of(row)
        except EngineError as exc:
            failed.append((row, str(exc)))
            continue
        result = _evaluated(row.plan.model_dump_json(), json.dumps(config, sort_keys=True, default=str), tables,
                            row.plan, config, gpus, prices)
        if isinstance(result, str):
            failed.append((row, result))
        else:
            good.append((row.plan, result))
    st.session_state[PLANS_KEY] = good
    st.session_state[_SEEN_KEY] = {r.plan.name: r for r in rows}
    return failed


def export_stamp() -> tuple[str | None, str | None]:
    """An imported file's (version, time) while the library is still exactly that file's plans, else (None, None)."""
    stamp = st.session_state.get(STAMP_KEY)
    if not stamp:
        return None, None
    seen = st.session_state.get(_SEEN_KEY, {})
    return (stamp[0], stamp[1]) if {(r.id, r.version) for r in seen.values()} == stamp[2] else (None, None)


@dataclass(frozen=True)
class ImportOutcome:
    """What :func:`add_plans` did with a file's plans: the names saved as they were, the names skipped as already in
    the library, and the (file name, saved name) of plans saved under a numbered name."""

    saved: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    renamed: tuple[tuple[str, str], ...] = ()


def _copy_of(name: str, base: str) -> bool:
    """``name`` is ``base`` or a numbered copy of it, ``base (2)`` ... (engine.plan.plans.unique_plan_name)."""
    return name == base or (name.startswith(base) and _COPY_SUFFIX.fullmatch(name[len(base):]) is not None)


def _already_saved(plan: Plan, library: list[Plan]) -> bool:
    """A plan of the library is ``plan``: the same inputs (the plan models compared, not CSV text) under its name or
    a numbered copy of it (a file imported twice is not saved twice)."""
    return any(_copy_of(kept.name, plan.name) and kept == plan.model_copy(update={"name": kept.name})
               for kept in library)


def add_plans(store: PlanStore, items: list[tuple[Plan, PlanResult]], stamp: tuple[str | None, str | None] | None = None,
              *, author: str = ANONYMOUS) -> ImportOutcome:
    """Add imported plans to the library: a plan the library already holds (:func:`_already_saved`) is skipped; a
    new one is saved under its name or, when taken by a different plan, ``name (2)`` ...
    (engine.plan.plans.unique_plan_name): an import never replaces a plan. ``stamp``: keep an imported file's
    version and time for re-export while the library is exactly that file's."""
    library = [p.plan for p in store.plans()]
    fresh = not library
    saved: list[str] = []
    skipped: list[str] = []
    renamed: list[tuple[str, str]] = []
    rows = []
    for plan, _result in items:
        if _already_saved(plan, library):
            skipped.append(plan.name)
            continue
        row = store.create_unique(plan, author=author)
        rows.append(row)
        library.append(row.plan)
        if row.plan.name != plan.name:
            renamed.append((plan.name, row.plan.name))
        else:
            saved.append(plan.name)
    keep = stamp and fresh and all(stamp) and not renamed and not skipped
    st.session_state[STAMP_KEY] = (*stamp, frozenset((r.id, r.version) for r in rows)) if keep else None
    return ImportOutcome(tuple(saved), tuple(skipped), tuple(renamed))


def show_import_report(file_name: str, imported: PlanImport, outcome: ImportOutcome) -> None:
    """What an import did: the file refused, its warnings, then one summary (saved N, M already in the library and
    skipped, K renamed), the skipped and renamed plans named (10 of each at most), and the rows not loaded. User text
    escaped (:func:`ui.formats.md_plain`)."""
    if imported.file_error:
        st.error(f"The file was not loaded: {md_plain(imported.file_error)}.")
    for warning in imported.warnings:
        st.warning(f"In the file, {md_plain(warning)}.")
    if imported.plans:
        new, skipped, renamed = len(outcome.saved) + len(outcome.renamed), outcome.skipped, outcome.renamed
        if new:
            st.success(f"Imported '{md_plain(file_name)}': saved {new:,} plan(s), each recomputed from its inputs; "
                       f"{len(skipped):,} already in the library, skipped; {len(renamed):,} renamed.")
        else:
            st.info(f"Imported '{md_plain(file_name)}': nothing new; {len(skipped):,} already in the library, skipped.")
        if skipped:
            st.caption("Skipped, the same plan is saved under that name: " + ", ".join(f"'{md_plain(n)}'" for n in skipped[:10])
                       + (f" and {len(skipped) - 10:,} more" if len(skipped) > 10 else "") + ".")
        if renamed:
            st.info("Saved under a new name, as a different plan has the name: " + ", ".join(
                f"'{md_plain(old)}' as '{md_plain(saved)}'" for old, saved in renamed[:10])
                + (f" and {len(renamed) - 10:,} more" if len(renamed) > 10 else "") + ".")
    rows = [(e.row, e.reason) for e in imported.errors if e.row]
    if rows:
        st.error("Rows not loaded:\n" + "\n".join(f"- row {row}: {md_plain(reason)}" for row, reason in rows))


def save_plan(store: PlanStore, plan: Plan, config: dict[str, Any] | None, *, replace: bool, author: str) -> None:
    """Save the sidebar's plan: a new name is created; ``replace`` replaces the plan of that name this session was
    shown, only if nobody changed it since.

    Raises:
        PlanExists: the name is taken (saved by someone else a moment ago, or ``replace`` not chosen).
        PlanChanged: the plan to replace was changed, renamed or deleted since this session read it.
    """
    seen = seen_plan(plan.name)
    if replace and seen is not None:
        store.replace(plan, seen.version, author=author, config=config)
    else:
        store.create(plan, author=author, config=config)
    st.session_state[STAMP_KEY] = None


COMPARE_COLUMNS = {
    "micro_batch_size": ("micro batch size", "count"), "seq_len": ("sequence length", "count"), "num_gpus": ("GPUs", "count"),
    "per_gpu_peak_bytes": ("per-GPU peak", "bytes"), "tokens_per_second": ("throughput", "tokens_per_second"),
    "tokens_per_second_low": ("throughput low", "tokens_per_second"),
    "tokens_per_second_high": ("throughput high", "tokens_per_second"),
    "train_hours": ("wall time", "hours"), "train_hours_low": ("wall time low", "hours"),
    "train_hours_high": ("wall time high", "hours"), "cost_on_demand_usd": ("cost on demand", "usd"),
    "cost_on_demand_usd_low": ("cost on demand low", "usd"), "cost_on_demand_usd_high": ("cost on demand high", "usd"),
    "cost_spot_usd": ("cost spot", "usd"), "cost_spot_usd_low": ("cost spot low", "usd"),
    "cost_spot_usd_high": ("cost spot high", "usd"),
}
"""The compare table's numeric columns: (label, kind of :data:`ui.tables.KINDS`)."""


def compare_table(plans: list[tuple[Plan, PlanResult]], unit: Unit) -> None:
    """The saved plans side by side: inputs and results, each time and cost with its 80% band (``*_low`` / ``*_high``
    columns, as in the CSV), each number column in one format, bytes in ``unit``."""
    seen = st.session_state.get(_SEEN_KEY, {})
    rows = [plan_record(p, r) | {"saved_by": getattr(seen.get(p.name), "author", ""),
                                 "saved_at": getattr(seen.get(p.name), "updated_at", "")[:16].replace("T", " ")}
            for p, r in plans]
    frame = pd.DataFrame(rows)[["name", "saved_by", "saved_at", "model_repo_id", "method", "precision", "micro_batch_size", "seq_len", "gpu",
                                "num_gpus", "strategy", "per_gpu_peak_bytes", "fits", "verdict", "tokens_per_second",
                                "tokens_per_second_low", "tokens_per_second_high", "train_hours", "train_hours_low",
                                "train_hours_high", "cost_on_demand_usd", "cost_on_demand_usd_low", "cost_on_demand_usd_high",
                                "cost_spot_usd", "cost_spot_usd_low", "cost_spot_usd_high"]]
    st.dataframe(bytes_in(frame, ["per_gpu_peak_bytes"], unit), hide_index=True, width="stretch", key="plans_table",
                 column_config=number_columns(COMPARE_COLUMNS, unit))


def remove_plan(store: PlanStore, name: str, version: int | None = None) -> None:
    """Delete the plan this session was shown under ``name``, if it is still at ``version`` (default: the version
    last shown). Raises PlanChanged if someone changed, renamed or deleted it since."""
    seen = seen_plan(name)
    if seen is None and version is None:
        raise PlanChanged(f"the plan '{name}' is no longer in the library")
    store.delete(name, seen.version if version is None else version)
    st.session_state[STAMP_KEY] = None


def rename_plan(store: PlanStore, name: str, new_name: str) -> None:
    """Rename the plan this session was shown under ``name``.

    Raises:
        PlanExists: ``new_name`` is taken. PlanChanged: someone changed the plan since. ValueError: not a valid name.
    """
    seen = seen_plan(name)
    if seen is None:
        raise PlanChanged(f"the plan '{name}' is no longer in the library")
    store.rename(name, new_name, seen.version)
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


def _short_name(name: str) -> str:
    """``name`` cut to :data:`NAME_CHARS` for an axis, keeping a trailing `` (2)`` of
    :func:`engine.plan.plans.unique_plan_name` whole (an imported copy reads as its name in the table)."""
    if len(name) <= NAME_CHARS:
        return name
    suffix = m.group(0) if (m := _COPY_SUFFIX.search(name)) else ""
    return name[: NAME_CHARS - len(suffix) - 1] + "…" + suffix


def _axis_names(plans: list[tuple[Plan, PlanResult]]) -> tuple[list[str], list[str]]:
    """(tick labels, hover names): user text escaped (a ``<b>`` in a name is shown, not applied, as
    :func:`ui.formats.plain` does), long names cut by :func:`_short_name`. Every tick reads as its plan's name in the
    compare table: a cut name that another plan's cut name equals is shown whole (plan names are unique)."""
    full = [plain(p.name) for p, _ in plans]
    cut = [_short_name(p.name) for p, _ in plans]
    ticks = [plain(c) if cut.count(c) == 1 else f for c, f in zip(cut, full)]
    return ticks, full


ROW_PX = 26
"""Height of one plan's row in the comparison charts (its name on the y axis, horizontal: 30 plans stay readable)."""


def _layout(fig: go.Figure, count: int, **extra: object) -> None:
    # Horizontal bars, one row per plan, the first plan on top; the figure grows with the plans. The legend above the
    # plot, in the figure's own coordinates (above any subplot title).
    fig.update_layout(height=150 + ROW_PX * max(count, 3), margin={"t": 90, "b": 10},
                      legend={"orientation": "h", "yref": "container", "y": 1, "yanchor": "top", "x": 0}, **extra)
    fig.update_yaxes(autorange="reversed", automargin=True, type="category")
    fig.update_xaxes(automargin=True)


def memory_compare_figure(plans: list[tuple[Plan, PlanResult]], unit: Unit) -> go.Figure:
    """Stacked horizontal bars of each plan's memory components at its peak (one GPU, before sharding)."""
    fig = go.Figure()
    names, full = _axis_names(plans)
    extra = [k for _, r in plans for k in r.components_bytes if k not in COMPONENT_KEYS]
    for key in (*COMPONENT_KEYS, *dict.fromkeys(extra)):
        values = [round(to_unit(r.components_bytes.get(key, 0.0), unit), 3) for _, r in plans]
        if any(values):
            fig.add_bar(name=key.replace("_", " "), y=names, x=values, orientation="h", customdata=full,
                        hovertemplate=f"%{{customdata}}<br>{key.replace('_', ' ')}: %{{x:,.2f}} {unit}<extra></extra>")
    fig.add_scatter(name=f"per-GPU peak ({unit})", y=names, x=[round(to_unit(r.per_gpu_peak_bytes, unit), 3) for _, r in plans],
                    mode="markers", marker={"symbol": "diamond", "size": 12, "color": "black"}, customdata=full,
                    hovertemplate=f"%{{customdata}}<br>per-GPU peak: %{{x:,.2f}} {unit}<extra></extra>")
    _layout(fig, len(plans), barmode="stack", xaxis_title=unit)
    return fig


def _costs(plans: list[tuple[Plan, PlanResult]]) -> dict[str, list[float | None]]:
    return {"on demand": [r.cost_usd_on_demand for _, r in plans], "spot": [r.cost_usd_spot for _, r in plans]}


_BAND_OF = {"hours": "hours", "on demand": "cost_usd_on_demand", "spot": "cost_usd_spot"}
"""The :attr:`PlanResult.band` keys (``KEY_low`` / ``KEY_high``) of each bar series of :func:`time_cost_compare_figure`."""


def _error_x(plans: list[tuple[Plan, PlanResult]], values: list[float | None], series: str) -> dict[str, Any]:
    """Plotly error bars of the 80% band of ``values`` (one per plan; none where a plan has no value or band)."""
    key = _BAND_OF[series]
    return band_error_bars(values, [r.band.get(f"{key}_low") for _, r in plans], [r.band.get(f"{key}_high") for _, r in plans])


def band_summary(result: PlanResult) -> str:
    """``4.27 h (3.1 h–6.0 h) · $17.07 ($12.50–$25.00) on demand · ... spot`` for Markdown (dollars escaped,
    :func:`ui.formats.md_usd`): each time and cost with its 80% band, where the result has one."""
    b = result.band

    def rng(fmt, key: str) -> str:
        lo, hi = b.get(f"{key}_low"), b.get(f"{key}_high")
        return "" if lo is None or hi is None else f" ({fmt(lo)}–{fmt(hi)})"

    return (f"{fmt_hours(result.hours)}{rng(fmt_hours, 'hours')} · {md_usd(result.cost_usd_on_demand)}"
            f"{rng(md_usd, 'cost_usd_on_demand')} on demand · {md_usd(result.cost_usd_spot)}{rng(md_usd, 'cost_usd_spot')} spot")


def time_cost_compare_figure(plans: list[tuple[Plan, PlanResult]]) -> go.Figure:
    """Hours (left) and cost on demand and spot in USD (right) of each plan, as horizontal bars with the 80% band of
    each as error bars; a cost series no plan has a price for is left out (:func:`time_cost_notes` says so)."""
    names, full = _axis_names(plans)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Wall time (hours)", "Cost (USD)"), shared_yaxes=True,
                        horizontal_spacing=0.04)
    hours: list[float | None] = [r.hours for _, r in plans]
    fig.add_bar(name="hours", y=names, x=hours, orientation="h", row=1, col=1, customdata=full,
                error_x=_error_x(plans, hours, "hours"), hovertemplate="%{customdata}<br>%{x:,.3g} h<extra></extra>")
    for label, values in _costs(plans).items():
        if any(v is not None for v in values):
            fig.add_bar(name=label, y=names, x=values, orientation="h", row=1, col=2, customdata=full,
                        error_x=_error_x(plans, values, label),
                        hovertemplate=f"%{{customdata}}<br>{label}: $%{{x:,.2f}}<extra></extra>")
    _layout(fig, len(plans), barmode="group")
    return fig


def time_cost_notes(plans: list[tuple[Plan, PlanResult]]) -> None:
    """Captions under :func:`time_cost_compare_figure` saying why a cost bar is missing: no plan has that price, or
    which plans lack it (names escaped)."""
    for label, values in _costs(plans).items():
        missing = [p.name for (p, _), v in zip(plans, values) if v is None]
        if len(missing) == len(plans):
            st.caption(f"No {label} bars: no plan's price source lists a {label} price for its GPU.")
        elif missing:
            st.caption(f"No {label} bar for " + ", ".join(f"'{md_plain(n)}'" for n in missing[:10])
                       + (f" and {len(missing) - 10:,} more" if len(missing) > 10 else "")
                       + f": the plan's price source lists no {label} price for its GPU.")
