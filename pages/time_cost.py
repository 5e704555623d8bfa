"""Time & cost page: tokens/s from the step-time model, where the time goes, wall time, GPU-hours and cost of the
sidebar's scenario, curves, and the cheapest plan."""

import json
import pandas as pd
import streamlit as st

from engine.validation.throughput import compare_measurements, error_summary
from engine.hardware.gpus import spot_sources
from engine.plan.cost import CHEAPEST_LISTED, PLAN_GPU_COUNTS, PlanSearch, calibration_for, dataset_sweep, estimate_plan, run_cost, search_plans
from engine.errors import EngineError
from engine.time.collectives import node_mismatch
from engine.plan.fit import check_fit
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import STRATEGY_LABELS
from engine.scenario.loss import LOSSES
from engine.scenario.precision import precision_spec
from engine.time.band import band_for
from engine.time.seed import SEED_THROUGHPUT, SEED_THROUGHPUT_SOURCE, seed_throughput
from engine.time.sweep import shape_sweep, time_by_technique
from engine.units import fmt_bytes
from ui.charts import (
    BASIS_LABEL, cost_vs_dataset_figure, fmt_hours, fmt_usd, gpu_count_figure, plan_scatter_figure, time_vs_dataset_figure,
)
from ui.catalog_session import session_gpus, session_prices, table_key
from ui.formats import count_of, fmt_big_count, fmt_gpu_hours, md_plain, md_usd
from ui.layout import scenario_page
from ui.scenario_form import time_cost_sidebar
from ui.shared_results import time_cost_shared  # the plan search, sweeps and figures, for every session
from ui.share import write_query_params
from ui.time_charts import CATEGORY_STYLE, Curves, shape_figure, time_stack_figure
from ui.verdict import show_tight
from ui.views import section_choice
from ui.downloads import csv_bytes
from ui.tables import number_columns


def _techniques(arch, scenario, gpu, factor: float, fused: bool):
    rows = time_by_technique(arch, scenario, gpu, calibration=factor, fused_kernels=fused)
    return rows, time_stack_figure(rows)


model, scenario, hw = scenario_page("Training time and cost", write_url=False)
tc = time_cost_sidebar(hw)
write_query_params(scenario)  # the dataset, run and price inputs just drawn go into the URL too
if tc is None:
    st.stop()

arch, gpu, strategy, basis, unit = model.arch, tc.gpu, tc.strategy, tc.basis, hw.unit
nodes_note = node_mismatch(tc.num_gpus, hw.gpus_per_node)
if nodes_note:
    st.warning(f"The times below are not for your nodes: {md_plain(nodes_note)}. The sidebar's GPUs per node sets the "
               "CPU memory per node here; the Scale out page's cluster times nodes of any size.")
try:
    est = estimate_memory(arch, scenario, gpu)
    fewest = check_fit(arch, scenario, gpu, strategy, 1, estimate=est).min_gpus
    num_gpus = tc.num_gpus
    cal = calibration_for(arch, scenario, gpu, num_gpus, hw.training_strategy, tc.measured_tokens_per_second,
                          fused_kernels=tc.fused_kernels, estimate=est)
    factor = cal.factor if cal else 1.0
    plan = estimate_plan(arch, scenario, tc.dataset, gpu, num_gpus, hw.training_strategy, calibration=factor,
                         fused_kernels=tc.fused_kernels, price_source=tc.price_source, prices=session_prices(), estimate=est)
    inputs = json.dumps([model.config, scenario.model_dump(mode="json"), tc.dataset.model_dump(mode="json"), gpu.name,
                         strategy.value, factor, tc.fused_kernels, tc.max_gpus, tc.price_source, basis,
                         table_key(session_gpus()), table_key(session_prices())], sort_keys=True, default=str)
except EngineError as exc:
    st.error(f"Cannot estimate the time of this scenario: {md_plain(exc)}")
    st.stop()

tp, run, price = plan.throughput, plan.run, plan.price
seed = seed_throughput(arch.active_parameters / 1e9, gpu, num_gpus)
st.caption(
    f"**{md_plain(model.title)}** · {scenario.method.value}, {precision_spec(scenario.precision).label}, micro batch "
    f"{scenario.micro_batch_size} × {scenario.seq_len:,} tokens × {scenario.gradient_accumulation_steps} accumulation"
    f"{', gradient checkpointing' if scenario.gradient_checkpointing else ''} · **{md_plain(plan.label)}**, "
    f"{STRATEGY_LABELS[strategy]} · attention kernel {tp.attention_kernel} · loss: {md_plain(LOSSES[tp.loss].label)}"
    f"{' · torch.compile' if scenario.torch_compile else ''}{' · fused kernels' if tp.fused_kernels else ''} · matmuls per GPU at "
    f"{md_plain(tp.rates.matmul_summary)} · prices: {md_plain(price.source)}"
)
if cal is not None:
    st.info(f"Calibrated to your run: you measured {cal.measured_tokens_per_second:,.0f} tokens/s, the model predicted "
            f"{cal.predicted_tokens_per_second:,.0f} ({cal.raw_error:+.0%}); every plan on this page is scaled by "
            f"{cal.factor:.3g}.")
if not plan.fits:
    st.warning(f"This scenario does not fit on {md_plain(hw.label)}: {fmt_bytes(plan.per_gpu_peak_bytes, unit)} "
               f"of tensors per GPU, {fmt_bytes(gpu.usable_memory_bytes - plan.headroom_bytes, unit)} as nvidia-smi would show "
               f"it (allocator reserve and CUDA context added), against {fmt_bytes(gpu.usable_memory_bytes, unit)} per GPU. "
               "Time and cost are for reference only; "
               + (f"the fewest {md_plain(gpu.name)} that fit with {strategy.value}: {fewest}." if fewest else
                  f"no number of {md_plain(gpu.name)} fits with {strategy.value}. The section 'Every plan that fits' below lists what fits."))
    if fewest and fewest != num_gpus:
        st.button(f"Use {count_of(fewest, 'GPU')} (the sidebar's hardware, for every page)", key="tc_use_fewest",
                  on_click=lambda: st.session_state.update(num_gpus=fewest))
if hw.offload.value != "none":
    # As the CLI refuses it: a time without the host transfers and CPU optimizer steps would be a silently wrong number.
    st.warning(f"Time and cost do not model CPU offload ({hw.offload.value}): the host transfers and the CPU optimizer "
               "step would dominate the step, and the model has no term for them. Set Offload to none in the sidebar "
               "to see the time without offload; the Memory page shows what offload saves.")
    st.stop()
show_tight(plan.verdict, plan.label)
for note in plan.notes:
    st.warning(md_plain(note))
if tc.dataset.padding_waste(scenario.seq_len) > 0:
    st.info(f"Without packing, {tc.dataset.padding_waste(scenario.seq_len):.0%} of the processed tokens are padding "
            f"(every example is padded to {scenario.seq_len:,} tokens).")

st.subheader("Step-time model")
c = st.columns(6)
c[0].metric("Tokens to process", fmt_big_count(run.tokens),
            help=f"{run.tokens:,.0f} tokens: {tc.dataset.tokens_per_epoch(scenario.seq_len):,.0f} per epoch × {tc.dataset.epochs:g} epochs × {tc.dataset.runs} runs")
c[1].metric("Tokens/s", f"{run.tokens_per_second:,.0f}",
            help=f"all {count_of(num_gpus, 'GPU')} together: {tp.per_gpu_tokens_per_second:,.0f} per GPU; MFU {tp.mfu:.2f}, HFU {tp.hfu:.2f} "
                 "(PaLM's definitions: model FLOPs / executed FLOPs per second over the dense peak), results of the model")
# every time and cost with its 80% band (engine.time.band), as the Scale out page shows them
(gh_lo, gh_hi), (od_lo, od_hi), (sp_lo, sp_hi) = run.gpu_hours_range, run.cost_usd_on_demand_range, run.cost_usd_spot_range
c[2].metric("Wall time", fmt_hours(run.hours), help=f"{run.hours:,.4f} hours; {fmt_hours(run.hours_low)}–"
                                                    f"{fmt_hours(run.hours_high)} (80% band)")
c[3].metric("GPU-hours", fmt_gpu_hours(run.gpu_hours),
            help=f"{fmt_gpu_hours(gh_lo)}–{fmt_gpu_hours(gh_hi)} (80% band); {count_of(num_gpus, 'GPU')}")
c[4].metric("Cost on-demand", fmt_usd(run.cost_usd_on_demand),
            help=(f"{md_usd(od_lo)}–{md_usd(od_hi)} (80% band); {md_usd(price.on_demand_usd_per_hour)}/GPU-hour from "
                  f"{price.on_demand_source} ({price.date})" if price.on_demand_usd_per_hour else price.reason))
c[5].metric("Cost spot", fmt_usd(run.cost_usd_spot),
            help=(f"{md_usd(sp_lo)}–{md_usd(sp_hi)} (80% band); {md_usd(price.spot_usd_per_hour)}/GPU-hour from "
                  f"{price.spot_source}" if price.spot_usd_per_hour else price.reason))
band = tp.band
raw = band_for(num_gpus, tp.hf_stack) if cal is not None else None
parts = ", ".join(f"{CATEGORY_STYLE[k][0].lower()} {v * 1e3:,.1f} ms" for k, v in tp.breakdown_s.items() if v > 0)
# One caption of paragraphs, not one element each: every element costs the server and the browser on each rerun.
st.caption(f"Range, not a point: tokens/s {run.tokens_per_second_low:,.0f}–{run.tokens_per_second_high:,.0f}, wall time "
           f"{fmt_hours(run.hours_low)}–{fmt_hours(run.hours_high)}, GPU-hours {fmt_gpu_hours(gh_lo)}–{fmt_gpu_hours(gh_hi)}"
           + (f", on-demand cost {md_usd(od_lo)}–{md_usd(od_hi)}" if od_lo is not None else "")
           + (f", spot cost {md_usd(sp_lo)}–{md_usd(sp_hi)}" if sp_lo is not None else "")
           + f". {md_plain(band.note)} (Methodology page)."
           + (f"\n\n{md_plain(band.calibration_note(raw))}" if cal is not None else "")
           + (f"\n\nNo invented prices: {md_plain(price.reason)}. Pick another price source in the sidebar." if price.reason else "")
           + f"\n\nOne optimizer step ({tp.step.tokens:,} tokens per GPU) takes {tp.step_time_s:,.3f} s: {parts}. MFU {tp.mfu:.2f}, "
           f"HFU {tp.hfu:.2f} of the dense {tp.peak.dtype} peak ({(tp.peak.flops or 0) / 1e12:,.1f} TFLOP/s per GPU)"
           + (f"; collectives over {tp.step.link}" if tp.step.link else "") + ".")

st.subheader("Seed rule")
if seed is None:
    lines = "; ".join(f"{b:g}B on {f'{n}× ' if n > 1 else ''}{g} ~{t:,.0f} tokens/s" for b, g, n, t in SEED_THROUGHPUT)
    st.info(f"The seed's throughput table lists nothing for {num_gpus} × {md_plain(gpu.name)}. Its lines: {lines}.")
    seed_run = None
else:
    seed_run = run_cost(tc.dataset, scenario.seq_len, seed.tokens_per_second, num_gpus,
                        price.on_demand_usd_per_hour, price.spot_usd_per_hour)
    s = st.columns(6)
    s[1].metric("Tokens/s (seed rule)", f"{seed_run.tokens_per_second:,.0f}", help=seed.rule)
    s[2].metric("Wall time (seed rule)", fmt_hours(seed_run.hours), help=f"{seed_run.hours:,.4f} hours")
    s[3].metric("GPU-hours (seed rule)", fmt_gpu_hours(seed_run.gpu_hours))
    s[4].metric("Cost on-demand (seed rule)", fmt_usd(seed_run.cost_usd_on_demand))
    s[5].metric("Cost spot (seed rule)", fmt_usd(seed_run.cost_usd_spot))
    st.caption(f"{seed.rule}; Training Time = tokens × epochs / throughput ({SEED_THROUGHPUT_SOURCE}). The table ignores "
               "the method, precision, batch and checkpointing: only the model size, the GPU and the count.")


def _time_section() -> None:
    """Where the time goes, by technique (one GPU)."""
    st.subheader(f"Where the time goes, by technique (one {md_plain(gpu.name)})")
    rows, stack_figure = time_cost_shared("techniques", inputs, lambda: _techniques(arch, scenario, gpu, factor, tc.fused_kernels))
    st.plotly_chart(stack_figure, width="stretch", key="tc_time_stack_chart")
    skipped = [md_plain(f"{r.label}: {r.error}") for r in rows if r.throughput is None]
    st.caption("Step time per 1,000 tokens by category for each method × precision of the Memory page's chart, "
               "labelled with tokens/s." + (" Not timed: " + "; ".join(skipped) if skipped else ""))


def _shape_section() -> None:
    """Tokens/s of one GPU against the sequence length, per micro batch size."""
    st.subheader(f"Tokens/s against sequence length and micro batch (one {md_plain(gpu.name)})")
    st.plotly_chart(time_cost_shared("shapes", inputs, lambda: shape_figure(
        shape_sweep(arch, scenario, gpu, calibration=factor, fused_kernels=tc.fused_kernels), scenario.seq_len,
        scenario.micro_batch_size)), width="stretch", key="tc_shape_chart")
    st.caption("Tokens/s of one GPU against sequence length, per micro batch size (memory fit not checked: see the Fit "
               "page). Short sequences at micro batch 1 are bound by kernel launches and memory traffic; long ones by "
               "attention's s² work.")


def _curves(search: PlanSearch) -> Curves:
    """The data of the dataset and GPU-count curves (both sections offer all of it as one CSV)."""
    sweep = dataset_sweep(tc.dataset, scenario.seq_len, run.tokens_per_second, num_gpus, band=band)
    # One figure everywhere: tokens processed per epoch (after truncation to the sequence length, or padding to it).
    sizes = [d.tokens_per_epoch(scenario.seq_len) for d, _ in sweep]
    seed_hours = None
    if seed is not None:
        seed_hours = [r.hours for _, r in dataset_sweep(tc.dataset, scenario.seq_len, seed.tokens_per_second, num_gpus)]
    series: dict[str, tuple[list[float], list[float], list[float], list[float]]] = {}
    curve_plans = search.cheapest_per_gpu()[:6]
    if plan.cost(basis) is not None and all((p.gpu, p.num_gpus) != (plan.gpu, plan.num_gpus) for p in curve_plans):
        curve_plans.append(plan)
    for p in curve_plans:
        points = dataset_sweep(tc.dataset, scenario.seq_len, p.run.tokens_per_second, p.num_gpus,
                               p.price.on_demand_usd_per_hour, p.price.spot_usd_per_hour, band=p.throughput.band)
        series[p.label + ("" if p.fits else " (does not fit)")] = (  # type: ignore[assignment]
            [d.tokens_per_epoch(scenario.seq_len) for d, _ in points], [r.cost(basis) for _, r in points],
            [r.cost_range(basis)[0] for _, r in points], [r.cost_range(basis)[1] for _, r in points])
    return Curves(sizes, sweep, seed_hours, series, search.for_gpu(gpu.name))


def _curves_csv(c: Curves) -> None:
    curves = (
        [{"curve": "time_vs_dataset", "plan": plan.label, "dataset_tokens": x, "hours": r.hours, "hours_low": r.hours_low,
          "hours_high": r.hours_high, "cost_usd": None} for x, (_, r) in zip(c.sizes, c.sweep)]
        + [{"curve": "cost_vs_dataset", "plan": label, "dataset_tokens": x, "hours": None, "cost_usd": y, "cost_usd_low": lo,
            "cost_usd_high": hi} for label, (xs, ys, los, his) in c.series.items() for x, y, lo, hi in zip(xs, ys, los, his)]
        + [{"curve": "gpu_count", "plan": p.label, "dataset_tokens": tc.dataset.tokens_per_epoch(scenario.seq_len), "hours": p.run.hours,
            "hours_low": p.run.hours_low, "hours_high": p.run.hours_high, "cost_usd": p.cost(basis)} for p in c.counts]
    )
    st.download_button("Download the curves (CSV)", csv_bytes(pd.DataFrame(curves)),
                       file_name="time_cost_curves.csv", mime="text/csv", key="tc_curves_csv")


def _dataset_section(search: PlanSearch) -> None:
    """Time and cost against the dataset size, and the curves' CSV."""
    c = _curves(search)
    st.subheader("Time against dataset size")
    st.plotly_chart(time_vs_dataset_figure(c.sizes, [r.hours for _, r in c.sweep], c.seed_hours, tc.dataset.tokens_per_epoch(scenario.seq_len), plan.label,
                                          band=([r.hours_low for _, r in c.sweep], [r.hours_high for _, r in c.sweep])),
                    width="stretch", key="tc_time_dataset_chart")
    st.subheader(f"Cost against dataset size ({BASIS_LABEL[basis]})")
    if c.series:
        st.plotly_chart(cost_vs_dataset_figure(c.series, tc.dataset.tokens_per_epoch(scenario.seq_len), basis), width="stretch",
                        key="tc_cost_dataset_chart")
        st.caption(f"The GPU kinds cheapest for your dataset, each at its cheapest count that fits ({BASIS_LABEL[basis]} prices "
                   f"from '{md_plain(search.price_source)}'), and your plan. Cost grows linearly with the tokens; the shade around "
                   "each line is its 80% band (Methodology page).")
    else:
        st.info(f"No cost curve to draw: {md_plain(_no_price(search))}")
    _curves_csv(c)


def _gpus_section(search: PlanSearch) -> None:
    """Time and cost against the number of GPUs of the sidebar's kind, and the curves' CSV."""
    c = _curves(search)
    st.subheader(f"Time and cost against the number of {md_plain(gpu.name)}")
    if c.counts:
        st.plotly_chart(gpu_count_figure(c.counts, basis, gpu.name), width="stretch", key="tc_gpu_count_chart")
        if all(p.cost(basis) is None for p in c.counts):
            st.caption(f"Only the time is drawn: '{md_plain(search.price_source)}' has no {BASIS_LABEL[basis]} price for {md_plain(gpu.name)}.")
        st.caption(f"Counts {', '.join(str(p.num_gpus) for p in c.counts)} fit with {strategy.value} (of {', '.join(map(str, search.counts))}). "
                   "Communication is the collectives' exposed time over the link each count uses (NVLink or PCIe within a node, "
                   "one 200 Gb/s InfiniBand NIC per GPU between nodes).")
    else:
        st.info(f"Nothing to draw: no count of {md_plain(gpu.name)} up to {max(search.counts)} fits with {strategy.value}. Raise 'Plan "
                "search: up to', pick another strategy or GPU, or a technique that needs less memory.")
    _curves_csv(c)


def _plans_section(search: PlanSearch) -> None:
    """Every plan that fits: time against cost, the cheapest, fastest and Pareto plans, their table and CSV."""
    st.subheader("Every plan that fits: time against cost")
    if any(p.cost(basis) is not None for p in search.plans):
        st.plotly_chart(time_cost_shared("scatter", inputs, lambda: plan_scatter_figure(search)), width="stretch", key="tc_plans_chart")
    elif search.plans:
        st.info(f"No plan to place on the time-cost chart: {md_plain(_no_price(search))} The plans that fit are in the table below, with their time.")
    else:
        st.info("Nothing fits in memory with this scenario and strategy on any GPU kind and count searched.")
    lines = []
    if search.cheapest is not None:
        ch = search.cheapest
        lo, hi = ch.cost_range(basis)
        lines.append(f"- **Cheapest**: {md_plain(ch.label)}: {fmt_hours(ch.run.hours)} ({fmt_hours(ch.run.hours_low)}–"
                     f"{fmt_hours(ch.run.hours_high)}), {md_usd(ch.cost(basis))} ({md_usd(lo)}–{md_usd(hi)}) {BASIS_LABEL[basis]} "
                     f"({md_usd(ch.price.per_hour(basis) or 0)}/GPU-hour, {md_plain(ch.price.source_of(basis))}).")
    else:
        lines.append(f"- **Cheapest**: none: no fitting plan has a price ({BASIS_LABEL[basis]}) in '{md_plain(search.price_source)}' "
                     "(the note above says why).")
    if search.fastest is not None:
        fa = search.fastest
        lo, hi = fa.cost_range(basis)
        lines.append(f"- **Fastest**: {md_plain(fa.label)}: {fmt_hours(fa.run.hours)} ({fmt_hours(fa.run.hours_low)}–"
                     f"{fmt_hours(fa.run.hours_high)}), {md_usd(fa.cost(basis))}"
                     + (f" ({md_usd(lo)}–{md_usd(hi)})" if lo is not None else f" ({md_plain(fa.price.reason)})") + ".")
    else:
        lines.append("- **Fastest**: none: nothing fits.")
    lines.append(f"- **Pareto front** ({count_of(len(search.pareto), 'plan')}, no plan is both faster and cheaper): "
                 + ", ".join(md_plain(p.label) for p in search.pareto) + "." if search.pareto
                 else "- **Pareto front**: none (no plan that fits has a price to compare).")
    st.markdown("\n".join(lines))
    st.caption(f"{count_of(len(search.plans), 'plan')} {'fits' if len(search.plans) == 1 else 'fit'} in memory with {strategy.value} (GPU kinds × counts {', '.join(map(str, search.counts))}); "
               "a plan that does not fit is never listed. Plans without a price in the source are in the table, not on the chart. "
               "In brackets and in the low / high columns: the 80% band of each time and cost (Methodology page).")
    records = search.records()
    frame = pd.DataFrame(records)
    if not frame.empty:
        shown = frame[["gpu", "num_gpus", "tokens_per_second", "tokens_per_second_low", "tokens_per_second_high", "hours",
                       "hours_low", "hours_high", "gpu_hours", "gpu_hours_low", "gpu_hours_high", "cost_usd_on_demand",
                       "cost_usd_on_demand_low", "cost_usd_on_demand_high", "cost_usd_spot", "cost_usd_spot_low",
                       "cost_usd_spot_high", "pareto", "cheapest", "fastest", "notes"]]
        st.dataframe(shown, hide_index=True, width="stretch", key="tc_plans_table", column_config=number_columns({
            "num_gpus": ("GPUs", "count"), "tokens_per_second": ("throughput", "tokens_per_second"),
            "tokens_per_second_low": ("throughput low", "tokens_per_second"),
            "tokens_per_second_high": ("throughput high", "tokens_per_second"),
            "hours": ("wall time", "hours"), "hours_low": ("wall time low", "hours"), "hours_high": ("wall time high", "hours"),
            "gpu_hours": ("GPU time", "gpu_hours"), "gpu_hours_low": ("GPU time low", "gpu_hours"),
            "gpu_hours_high": ("GPU time high", "gpu_hours"), "cost_usd_on_demand": ("cost on demand", "usd"),
            "cost_usd_on_demand_low": ("cost on demand low", "usd"), "cost_usd_on_demand_high": ("cost on demand high", "usd"),
            "cost_usd_spot": ("cost spot", "usd"), "cost_usd_spot_low": ("cost spot low", "usd"),
            "cost_usd_spot_high": ("cost spot high", "usd")}))
    st.download_button("Download the plans (CSV)", csv_bytes(frame), file_name="training_plans.csv",
                       mime="text/csv", key="tc_plans_csv")
    if search.excluded:
        with st.expander(f"GPU kinds with no plan ({len(search.excluded)})"):
            st.markdown("\n".join(f"- {md_plain(e.gpu)}: {md_plain(e.reason)}" for e in search.excluded))


def _measured_section() -> None:
    """The step-time model against every expressible published measurement."""
    st.subheader("Our tokens/s against published measurements")
    comparison = compare_measurements()
    st.dataframe(pd.DataFrame([r.record() for r in comparison]), hide_index=True, width="stretch", key="tc_comparison_table",
                 column_config=number_columns({
                     "measured tokens/s": ("measured", "tokens_per_second"), "predicted tokens/s": ("predicted", "tokens_per_second"),
                     "MFU (predicted)": ("MFU (predicted)", "fraction"), "HFU (predicted)": ("HFU (predicted)", "fraction")}))
    _all = error_summary()
    st.caption(
        f"Each expressible published row's scenario through the step-time model, uncalibrated (data/throughput_measurements.csv, "
        f"with its source and locator): median |error| {_all.median_abs_error:.0%}, largest {_all.max_abs_error:.0%} over "
        f"{_all.rows} rows. The Methodology page lists the rows the model cannot express, and why."
    )


def _search() -> PlanSearch:
    """Every GPU kind and count that fits, costed (engine.plan.cost.search_plans): only the sections that show plans
    compute it."""
    try:
        return time_cost_shared("search", inputs, lambda: search_plans(
            arch, scenario, tc.dataset, strategy=strategy, calibration=factor, fused_kernels=tc.fused_kernels,
            counts=[n for n in PLAN_GPU_COUNTS if n <= tc.max_gpus], price_source=tc.price_source,
            gpus=session_gpus(), prices=session_prices(), basis=basis, estimate=est))  # type: ignore[arg-type]
    except EngineError as exc:
        st.error(f"Cannot estimate the time of this scenario: {md_plain(exc)}")
        st.stop()


def _no_price(search: PlanSearch) -> str:
    spot = ", ".join(f"'{s}'" for s in spot_sources(session_prices())) or "none of the sources"
    return (f"'{search.price_source}' has no {BASIS_LABEL[basis]} price for any plan that fits (a GPU without a price "
            "gets no cost, never an invented one): pick another price source, or rank by the other price, in the sidebar."
            + (f" Spot prices are listed by {spot}; '{CHEAPEST_LISTED}' quotes each GPU's cheapest on-demand row with "
               "that row's own spot price." if basis == "spot" else ""))


_WITH_PLANS = {"dataset": _dataset_section, "gpus": _gpus_section, "plans": _plans_section}  # sections of the plan search
view = section_choice("tc_view", help="One section at a time: a sidebar change recomputes and redraws only the "
                                        "section shown (the others follow when you pick them). The link keeps it.")
if view in _WITH_PLANS:
    _WITH_PLANS[view](_search())
else:
    {"time": _time_section, "shape": _shape_section, "measured": _measured_section}[view]()
