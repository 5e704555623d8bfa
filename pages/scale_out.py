"""Scale out page: one run over many GPUs (TP x PP x CP x EP x DP): per-rank memory of every pipeline stage, the step
time, Megatron-LM's own estimate, the layout search and the launch settings of the engine that runs it."""

import pandas as pd
import streamlit as st

from engine.errors import EngineError
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.exports import EXPORTERS, VERSIONS, export_layout
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.search import pareto_front, rejection_summary, search_layouts
from engine.scaleout.step_time import Cluster
from ui.catalog_session import session_gpus
from ui.layout import scenario_page
from engine.units import fmt_bytes
from ui.scaleout import candidates_table, layout_from, layout_inputs, stage_bars
from ui.tables import bytes_in, number_columns
from ui.formats import md_plain

model, scenario, hw = scenario_page("Scale out: tensor, pipeline, context and expert parallelism")
arch, unit = model.arch, hw.unit
st.caption("Per rank, for Megatron-LM / torchtitan-style training. The sidebar's micro batch, sequence length, precision "
           "and optimizer apply; gradient checkpointing is chosen here as Recompute. The product estimates; the "
           "exported settings run the layout on the engine that does it.")
fields, world, per_node = layout_inputs(arch.num_layers, scenario.micro_batch_size)
c1, c2, c3 = st.columns(3)
gpus = {g.name: g for g in session_gpus()}
# The cluster's GPU starts as the sidebar's; the layout below (not the sidebar's GPU count and strategy) sizes the run.
if st.session_state.get("so_gpu") not in gpus:
    st.session_state["so_gpu"] = hw.gpu.name if hw.gpu.name in gpus else next(iter(gpus))
gpu = gpus[c1.selectbox("Cluster GPU", list(gpus), key="so_gpu",
                        help="Starts as the sidebar's GPU. This page explores its own layouts: the sidebar's GPU count, "
                             "strategy and offload do not apply here.")]
fp8_choice = c2.selectbox("FP8", ["off", "te", "torchao"], key="so_fp8",
                          help="TransformerEngine keeps FP8 weight copies (+2 B/parameter); torchao float8 does not")
master = c3.checkbox("16-bit model + fp32 master weights", value=True, key="so_master",
                     help="Megatron-LM --bf16 / torchtitan FSDP2; off = the Hugging Face Trainer's autocast")
fp8 = None if fp8_choice == "off" else Fp8Recipe(fp8_choice)
layout = layout_from(fields, world)
if isinstance(layout, str):
    st.error(md_plain(layout))
    st.stop()
sc = scenario.model_copy(update={"gradient_checkpointing": False})
cluster = Cluster(gpu=gpu, nodes=max(1, world // per_node), gpus_per_node=min(per_node, world))
try:
    est = estimate_layout(arch, sc, layout, cluster, fp8, master_weights=master)
except EngineError as exc:
    st.error(md_plain(exc))
    st.stop()

mem = est.memory
worst = mem.max_stage
usable = gpu.usable_memory_bytes
m1, m2, m3, m4 = st.columns(4)
headroom = usable - worst.device_used_bytes
m1.metric("Most loaded rank (allocated)", fmt_bytes(worst.peak_allocated_bytes, unit, 1), help=f"stage {worst.stage}")
m2.metric("nvidia-smi on that rank", fmt_bytes(worst.device_used_bytes, unit, 1),
          delta=f"{'+' if headroom >= 0 else '-'}{fmt_bytes(abs(headroom), unit, 1)} headroom", delta_color="normal")
m3.metric("Megatron-LM's formula (first stage)", fmt_bytes(est.megatron.total_bytes, unit, 1), help=est.megatron.note)
if est.time:
    m4.metric("Tokens/s", f"{est.time.tokens_per_second:,.0f}", help=f"MFU {est.time.mfu:.0%}")

st.subheader(f"Memory per rank, one bar per pipeline stage ({layout.label()})")
labels = {p.key: p.label for s in mem.stages for p in s.estimate.parts}
stages = [{"stage": s.stage, "components": s.estimate.components} for s in mem.stages]
st.plotly_chart(stage_bars(stages, labels, unit), key="so_bars")
with st.expander("Components and formulas of the most loaded rank"):
    parts = pd.DataFrame([{"component": p.label, "bytes": p.bytes, "formula": p.formula, "source": p.source}
                          for p in worst.estimate.parts if p.bytes])
    st.dataframe(bytes_in(parts, ["bytes"], unit), hide_index=True, key="so_parts",
                 column_config=number_columns({"bytes": ("memory", "bytes")}, unit))

if est.time:
    t = est.time
    st.subheader(f"Where the step time goes (slowest stage: {t.slowest_stage})")
    st.dataframe(pd.DataFrame([*({"part": k.replace("_", " "), "seconds": v} for k, v in t.breakdown_s.items()),
                               *({"part": f"{k.upper()} communication (before overlap)", "seconds": v} for k, v in t.comm_s.items()),
                               {"part": "step", "seconds": t.step_s}]),
                 hide_index=True, key="so_time", column_config=number_columns({"seconds": ("time", "seconds")}))
    st.caption(f"engine.time's step-time model on one rank's shapes (attention kernel: {t.attention_kernel}). Bubble "
               f"{t.bubble_fraction:.1%} = (PP - 1) / (v x micro batches + PP - 1). DP, FSDP and CP communication "
               "overlaps compute (only what it leaves exposed counts); TP, EP and PP sit on the critical path.")

st.subheader("Launch settings")
engine = st.radio("Engine", sorted(EXPORTERS), horizontal=True, key="so_export")
try:
    exp = export_layout(engine, arch, sc, layout, fp8)
    st.caption(md_plain(exp["version"]))
    st.code(exp["text"], language={"megatron": "bash", "torchtitan": "toml", "deepspeed": "json", "accelerate": "yaml"}[engine])
except EngineError as exc:
    st.info(f"{md_plain(engine)} ({md_plain(VERSIONS[engine])}): {md_plain(exc)}")

st.subheader("Layout search")
if st.button("Search every layout of this cluster", key="so_search"):
    try:
        found = search_layouts(arch, sc, cluster, int(fields["global_batch_size"]), fp8, master_weights=master)
    except EngineError as exc:
        st.error(md_plain(exc))
    else:
        fits = [c for c in found if c.fits]
        st.write(f"{len(found):,} layouts searched, {len(fits):,} fit.")
        front = pareto_front(found)
        if front:
            st.markdown("**Pareto front (time vs cost)**")
            candidates_table(front, unit, "so_front")
        st.markdown("**Fastest that fit**")
        candidates_table(fits, unit, "so_fits", 50)
        st.markdown("**Why the others do not fit**")
        st.dataframe(pd.DataFrame([{"reason": k, "layouts": v} for k, v in rejection_summary(found).items()]),
                     hide_index=True, key="so_reasons", column_config=number_columns({"layouts": ("layouts", "count")}))
