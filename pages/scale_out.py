"""Scale out page: one run over many GPUs (TP x PP x CP x EP x DP): per-rank memory of every pipeline stage, the step
time, hours and cost of a dataset, Megatron-LM's own estimate, the layout search (whose results can be applied to the
inputs) and the launch settings of the engine that runs it. Every input is kept across pages and is in the URL."""

import pandas as pd
import streamlit as st

from engine.errors import EngineError
from engine.plan.cost import CHEAPEST_LISTED, Dataset, quote_price
from engine.plan.layout_cost import candidate_runs, layout_run
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.exports import VERSIONS, export_layout
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.memory import MASTER_PRECISION
from engine.scaleout.search import pareto_front, rejection_summary, search_layouts
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Method
from engine.units import fmt_bytes
from ui.catalog_session import session_gpus
from ui.downloads import csv_bytes
from ui.formats import count_of, md_usd
from ui.inputs import checked_number, results_withheld
from ui.layout import scenario_page
from ui.scaleout import (CHOICES, candidates_table, framework_inputs, layout_from, layout_inputs, network_input, stage_bars,
                         use_layout)
from ui.share import write_query_params
from ui.tables import bytes_in, number_columns
from ui.formats import md_plain

model, scenario, hw = scenario_page("Scale out: tensor, pipeline, context and expert parallelism", write_url=False)
arch, unit = model.arch, hw.unit
st.caption("Per rank, for Megatron-LM / torchtitan-style training. The sidebar's micro batch, sequence length, precision "
           "and optimizer apply; gradient checkpointing is chosen here as Recompute. The product estimates; the "
           "exported settings run the layout on the engine that does it.")
fields, world, per_node = layout_inputs(arch.num_layers, scenario.micro_batch_size)
layout_problem = st.empty()  # a layout the engine refuses is said here, next to the inputs that cause it


def refuse(reason: object) -> None:
    """Say why there are no results, under the layout inputs, and stop (every input is drawn by then)."""
    layout_problem.error(md_plain(reason))
    results_withheld()
    st.stop()


c1, c2, c3, c4 = st.columns(4)
gpus = {g.name: g for g in session_gpus()}
# The cluster's GPU starts as the sidebar's; the layout below (not the sidebar's GPU count and strategy) sizes the run.
if st.session_state.get("so_gpu") not in gpus:
    st.session_state["so_gpu"] = hw.gpu.name if hw.gpu.name in gpus else next(iter(gpus))
gpu = gpus[c1.selectbox("Cluster GPU", list(gpus), key="so_gpu",
                        help="Starts as the sidebar's GPU. This page explores its own layouts: the sidebar's GPU count, "
                             "strategy and offload do not apply here.")]
fp8_choice = c2.selectbox("FP8", list(CHOICES["so_fp8"]), key="so_fp8",
                          help="te: TransformerEngine keeps FP8 weight copies (+2 B/parameter); torchao: float8 tensorwise, no copies, FP8 "
                               "all-gathers; torchao_rowwise: row-wise scales, bf16 all-gathers and a rescale pass after "
                               "its backward GEMMs")
# Master weights mean one thing (Megatron-LM --bf16 / --fp16) and only for full training of a 16-bit model.
can_master = scenario.method is Method.FULL and scenario.precision in MASTER_PRECISION
st.session_state.setdefault("so_master", True)  # a default once, not value=: a link may set the key first
master = c3.checkbox("16-bit model + fp32 master weights", key="so_master", disabled=not can_master,
                     help="Megatron-LM --bf16 / torchtitan FSDP2 (with the sidebar's bf16 or mixed bf16 precision; fp16 "
                          "likewise); off = the Hugging Face Trainer's autocast. Only for full training of a 16-bit "
                          "model: LoRA/QLoRA train adapters, fp32 has no 16-bit model.") and can_master
dataset_tokens = checked_number(c4, "Dataset tokens (one epoch)", "so_tokens", 1_000_000_000, step=1_000_000, below=st,
                                help="Tokens trained: hours, GPU-hours and cost of the layout (cheapest listed price).")
framework, settings = framework_inputs()
fabric = network_input(st.columns(4)[0])
write_query_params(scenario)  # now with the page's own inputs, so the link carries them
fp8 = None if fp8_choice == "off" else Fp8Recipe(fp8_choice)
layout = layout_from(arch, fields, world)
if isinstance(layout, str):
    refuse(layout)
sc = scenario.model_copy(update={"gradient_checkpointing": False})
cluster = Cluster(gpu=gpu, nodes=max(1, world // per_node), gpus_per_node=min(per_node, world), fabric=fabric)
dataset = Dataset(total_tokens=int(dataset_tokens))
try:
    est = estimate_layout(arch, sc, layout, cluster, fp8, master_weights=master, **settings)
    run = layout_run(est, cluster, dataset, sc.seq_len, CHEAPEST_LISTED)
except EngineError as exc:
    refuse(exc)

mem = est.memory
worst = mem.max_stage
usable = gpu.usable_memory_bytes
headroom = usable - worst.device_used_bytes
if not run.fits:
    st.warning(f"Does not fit: the most loaded rank (stage {worst.stage}) needs {fmt_bytes(worst.device_used_bytes, unit, 1)} "
             f"on a {md_plain(gpu.name)} with {fmt_bytes(usable, unit, 1)} usable, {fmt_bytes(-headroom, unit, 1)} short. No "
             "tokens/s, hours or cost for this layout; try more pipeline stages, ZeRO-3 / FSDP, recompute or the search below.")
m1, m2, m3, m4 = st.columns(4)
m1.metric("Most loaded rank (allocated)", fmt_bytes(worst.peak_allocated_bytes, unit, 1), help=f"stage {worst.stage}")
m2.metric("nvidia-smi on that rank", fmt_bytes(worst.device_used_bytes, unit, 1),
          delta=f"{fmt_bytes(abs(headroom), unit, 1)} {'to spare' if headroom >= 0 else 'short: does not fit'}",
          delta_color="normal" if headroom >= 0 else "inverse")
meg, first = est.megatron, mem.stages[0]
caveat = meg.caveat(sc.method.value)
m3.metric("Megatron-LM's formula", fmt_bytes(meg.total_bytes, unit, 1),
          help=f"Megatron-LM's theoretical_memory_usage for this layout's first pipeline stage"
               f"{', as full training' if caveat else ''} (ours for that stage: "
               f"{fmt_bytes(first.peak_allocated_bytes, unit, 1)} allocated). {meg.note}.")
apart = meg.apart(first.peak_allocated_bytes, sc.method.value)
if apart or caveat:
    st.caption(md_plain(apart or caveat) + ".")
if est.time and run.fits:
    r, price = run.run, run.price  # every figure with its 80% band (engine.plan.layout_cost.layout_band)
    m4.metric("Tokens/s", f"{r.tokens_per_second:,.0f}",
              help=f"MFU {est.time.mfu:.0%}; {r.tokens_per_second_low:,.0f}–{r.tokens_per_second_high:,.0f}: {r.band_note}")
    (gh_lo, gh_hi), (od_lo, od_hi), (sp_lo, sp_hi) = r.gpu_hours_range, r.cost_usd_on_demand_range, r.cost_usd_spot_range
    t1, t2, t3, t4 = st.columns(4)
    t1.metric("Hours", f"{r.hours:,.1f}", help=f"{r.hours_low:,.1f}–{r.hours_high:,.1f} (80% band); {r.tokens:,.0f} "
                                               f"tokens at {r.tokens_per_second:,.0f} tokens/s")
    t2.metric("GPU-hours", f"{r.gpu_hours:,.0f}", help=f"{gh_lo:,.0f}–{gh_hi:,.0f} (80% band); {count_of(run.num_gpus, 'GPU')}")
    t3.metric("Cost on demand", "no price" if r.cost_usd_on_demand is None else f"${r.cost_usd_on_demand:,.0f}",
              help=price.reason if od_lo is None else f"{md_usd(od_lo)}–{md_usd(od_hi)} (80% band); {price.on_demand_source}, {price.date}")
    t4.metric("Cost spot", "no price" if r.cost_usd_spot is None else f"${r.cost_usd_spot:,.0f}",
              help=price.reason if sp_lo is None else f"{md_usd(sp_lo)}–{md_usd(sp_hi)} (80% band); {price.spot_source}, {price.date}")
    st.caption(f"Range, not a point: hours {r.hours_low:,.1f}–{r.hours_high:,.1f}, GPU-hours {gh_lo:,.0f}–{gh_hi:,.0f}"
               + (f", on-demand cost {md_usd(od_lo)}–{md_usd(od_hi)}" if od_lo is not None else "")
               + (f", spot {md_usd(sp_lo)}–{md_usd(sp_hi)}" if sp_lo is not None else "")
               + f". {md_plain(r.band_note)} (Methodology page).")
    st.download_button("Download this layout's plan (CSV)", csv_bytes(pd.DataFrame([run.record()])),
                       file_name="scale_out_plan.csv", mime="text/csv", key="so_plan_csv",
                       help="One row of this layout's results. A record, not a plan: the Plans page does not load it "
                            "(it says why); this page's link reopens the layout.")
elif not run.fits:
    m4.metric("Tokens/s", "does not fit", help="a layout whose most loaded rank does not fit gets no throughput")

st.subheader(f"Memory per rank, one bar per pipeline stage ({layout.label()})")
labels = {p.key: p.label for s in mem.stages for p in s.estimate.parts}
stages = [{"stage": s.stage, "components": s.estimate.components} for s in mem.stages]
st.plotly_chart(stage_bars(stages, labels, unit), key="so_bars")
if est.layout.layers_per_stage != layout.layers_per_stage:  # the framework's own split (engine.scaleout.stage_split)
    st.caption(md_plain(f"{framework.label} splits the {arch.num_layers} layers over the stages by compute cost, the "
                        f"output layer counted as a block: {' + '.join(map(str, est.layout.layers_per_stage))} layers "
                        "per stage; the last stage also runs the output layer and the loss."))
with st.expander("Components and formulas of the most loaded rank"):
    parts = pd.DataFrame([{"component": p.label, "bytes": p.bytes, "formula": p.formula, "source": p.source}
                          for p in worst.estimate.parts if p.bytes])
    st.dataframe(bytes_in(parts, ["bytes"], unit), hide_index=True, key="so_parts",
                 column_config=number_columns({"bytes": ("memory", "bytes")}, unit))

if est.time and run.fits:
    t = est.time
    st.subheader(f"Where the step time goes (slowest stage: {t.slowest_stage})")
    st.dataframe(pd.DataFrame([*({"part": k.replace("_", " "), "seconds": v} for k, v in t.breakdown_s.items()),
                               *({"part": f"{k.upper()} communication (before overlap)", "seconds": v} for k, v in t.comm_s.items()),
                               {"part": "step", "seconds": t.step_s}]),
                 hide_index=True, key="so_time", height="content",  # every row, the step total last, unscrolled
                 column_config=number_columns({"seconds": ("time", "seconds")}))
    links = sorted({cluster.link(c).name for c in est.collectives})
    st.caption(f"engine.time's step-time model on one rank's shapes (attention kernel: {t.attention_kernel}; links: "
               f"{md_plain(', '.join(links) or 'none')}). Bubble {t.bubble_fraction:.1%} = (PP - 1) / (v x micro batches + PP - 1). "
               "DP, FSDP and CP communication overlaps compute (only what it leaves exposed counts); TP, EP and PP sit on "
               "the critical path.")

st.subheader("Launch settings")
engine = st.radio("Engine", list(CHOICES["so_export"]), horizontal=True, key="so_export")
try:
    exp = export_layout(engine, arch, sc, layout, fp8)
    st.caption(md_plain(exp["version"]))
    st.code(exp["text"], language={"megatron": "bash", "torchtitan": "toml", "deepspeed": "json", "accelerate": "yaml"}[engine])
except EngineError as exc:
    st.info(f"{md_plain(engine)} ({md_plain(VERSIONS[engine])}): {md_plain(exc)}")

st.subheader("Layout search")
# The results stay until an input they depend on changes (they are kept in the session, not redrawn from the button).
search_key = (arch.model_type, arch.total_parameters, arch.num_layers, sc.model_dump_json(), gpu.name, world, per_node,
              int(fields["global_batch_size"]), fp8_choice, master, framework.name, settings["tp_comm_overlap"])
if st.button("Search every layout of this cluster", key="so_search"):
    try:
        st.session_state["so_found"] = (search_key, search_layouts(
            arch, sc, cluster, int(fields["global_batch_size"]), fp8, master_weights=master, **settings))
    except EngineError as exc:
        st.error(md_plain(exc))
found_key, found = st.session_state.get("so_found", (None, None))
if found is not None and found_key != search_key:
    st.caption("The inputs changed since the last search: search again.")
elif found is not None:
    fits = [c for c in found if c.fits]
    st.write(f"{len(found):,} layouts searched, {len(fits):,} fit.")
    quote = quote_price(gpu, CHEAPEST_LISTED)
    front = pareto_front(found)
    if front:
        st.markdown("**Pareto front (time vs cost)**")
        candidates_table(front, unit, "so_front", runs=candidate_runs(front, dataset, sc.seq_len, quote))
    st.markdown("**Fastest that fit**")
    shown = fits[:50]
    candidates_table(shown, unit, "so_fits", 50, runs=candidate_runs(shown, dataset, sc.seq_len, quote))
    if shown:
        a, b = st.columns([3, 1])
        pick = a.selectbox("Layout to apply", range(len(shown)), key="so_pick",
                           format_func=lambda i: f"{i + 1}. {shown[i].layout.label()} ({shown[i].tokens_per_second:,.0f} tokens/s)")
        b.button("Use this layout", key="so_use", on_click=use_layout, args=(shown[min(pick, len(shown) - 1)].layout,),
                 help="Sets the inputs above to this layout (same cluster and global batch).")
    st.markdown("**Why the others do not fit**")
    st.dataframe(pd.DataFrame([{"reason": k, "layouts": v} for k, v in rejection_summary(found).items()]),
                 hide_index=True, key="so_reasons", column_config=number_columns({"layouts": ("layouts", "count")}))
