"""Memory page: where the GPU memory of one fine-tuning step goes, across techniques and precisions, per GPU
over many GPUs (DDP, ZeRO, FSDP, offload), and the memory of serving the model (Inference)."""

import json

import pandas as pd
import streamlit as st

from engine.errors import EngineError
from engine.memory.inference import estimate_inference, kv_cache_bytes_per_token, sliding_window_layers
from engine.plan.serving import serving_plan
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import STRATEGY_LABELS, deepspeed_estimate, device_memory_per_gpu, plan_parallel
from engine.scenario.precision import PrecisionMode
from engine.memory.seed_rules import seed_comparison
from engine.units import fmt_bytes, fmt_count, to_unit
from ui.charts import per_gpu_figure
from ui.checklist import checklist_section
from ui.config_import import config_import_section
from ui.hardware import hardware_sidebar
from ui.layout import page_start, scenario_page
from ui.scenario_form import INFERENCE, TRAINING, WORKLOADS, inference_inputs
from ui.share import write_query_params
from ui.shared_results import memory_techniques  # kept for every session, keyed by the JSON of its inputs
from ui.trace_panel import trace_panel
from ui.verdict import TIGHT_NOTE, verdict_box
from engine.plan.verdict import Verdict, fit_verdict
from ui.formats import md_plain, sequences


TITLES = {TRAINING: "GPU memory of a fine-tuning step", INFERENCE: "GPU memory of serving the model"}

st.session_state.setdefault("mem_workload", TRAINING)
serving = st.session_state["mem_workload"] == INFERENCE  # decides the title and which sidebar inputs are drawn


def _workload() -> None:
    st.radio("Workload", list(WORKLOADS), key="mem_workload", horizontal=True,
             help="Fine-tuning: the sidebar's training scenario. Inference: serving the model (weights, KV cache); the "
                  "sidebar then asks only for the GPU.")


if serving:
    model = page_start(TITLES[INFERENCE])
    _workload()
    hw = hardware_sidebar(serving=True)
else:
    model, scenario, hw = scenario_page(TITLES[TRAINING])
    _workload()
    # Import a training config (ui/config_import.py): upload/paste, mapped/ignored/unsupported, apply to the sidebar.
    config_import_section()
gpu, unit = hw.gpu, hw.unit


def inference_view() -> None:
    """Serving memory: weights at the serving precision, KV cache, activation workspace; what fits."""
    arch = model.arch
    isc = inference_inputs(arch.max_position_embeddings)
    write_query_params(None)  # after the serving inputs, so that the link carries them from the first run
    if isc is None:
        st.stop()
    try:
        est = estimate_inference(arch, isc)
    except EngineError as exc:  # a tensor-parallel degree the model's heads do not divide
        st.error(f"Cannot serve this scenario: {md_plain(exc)}")
        st.stop()
    for warning in est.warnings:
        st.warning(md_plain(warning))
    per_tok = kv_cache_bytes_per_token(arch, isc.kv_cache_dtype, isc.tensor_parallel)
    c1, c2, c3, c4 = st.columns(4)
    c1.metric("Parameters", fmt_count(est.total_parameters), help=f"{est.total_parameters:,} unique parameters")
    c2.metric("KV cache per token", f"{per_tok / 1024:,.1f} KiB", help=f"{per_tok:,} bytes with every layer caching the token")
    c3.metric("Peak memory", fmt_bytes(est.total_bytes, unit), help=f"{est.total_bytes:,.0f} bytes")
    c4.metric("Weights", fmt_bytes(est.components["weights"], unit), help=f"{est.components['weights']:,.0f} bytes")
    sliding = sliding_window_layers(arch)
    if sliding:
        st.caption(f"{sliding} of {arch.num_layers} layers use a sliding window of {arch.sliding_window:,} tokens: "
                   "their cache stops growing there.")
    # The sidebar's GPU: the same rule as training, what nvidia-smi would show against it; the plan (engine.plan.serving)
    # gives one rank's budget at vLLM's gpu_memory_utilization, the most sequences and the speed.
    headroom = gpu.usable_memory_bytes - est.device_used_bytes
    plan = serving_plan(arch, isc, gpu)
    lim = plan.limits
    verdict = fit_verdict(est.total_bytes, gpu.usable_memory_bytes)
    where = f"one {gpu.name}" if isc.tensor_parallel == 1 else f"each of {isc.tensor_parallel} x {gpu.name} (tensor parallel)"
    verdict_box(verdict)(
        f"{'Fits on' if headroom >= 0 else 'Does not fit on'} {where} "
        f"{'(tight: may not fit) ' if verdict is Verdict.TIGHT else ''}"
        f"({'headroom' if headroom >= 0 else 'short by'} {fmt_bytes(abs(headroom), unit)}). Longest context at "
        f"{sequences(isc.concurrency)}: {lim.max_seq_len or 0:,} tokens; most sequences at {isc.seq_len:,} tokens: "
        f"{lim.max_concurrency or 0:,}."
        + ("" if plan.fit.fits or not plan.min_tensor_parallel else
           f" Tensor parallel {plan.min_tensor_parallel} fits.")
    )
    s1, s2, s3, s4 = st.columns(4)
    s1.metric("Max concurrency", f"{lim.max_concurrency or 0:,}",
              help=f"sequences of {isc.seq_len:,} tokens within {fmt_bytes(lim.budget_bytes, unit)} per GPU "
                   f"(gpu_memory_utilization {isc.gpu_memory_utilization:g} less the CUDA context)")
    s2.metric("KV-cache budget", fmt_bytes(lim.kv_cache_budget_bytes, unit),
              help=f"{lim.kv_cache_tokens:,} tokens per GPU beside the weights and the workspace")
    if plan.fit.fits and plan.speed is not None:
        s3.metric("Decode tokens/s", f"{plan.decode_tokens_per_second:,.0f}",
                  help=f"{sequences(isc.concurrency)} at {isc.seq_len:,} tokens of context, {plan.speed.decode_bound} bound "
                       f"({plan.speed.decode_tokens_per_second_per_sequence:,.1f} tokens/s per sequence)")
        s4.metric("Prefill tokens/s", f"{plan.prefill_tokens_per_second:,.0f}", help="one prefill chunk, compute-bound")
    else:
        s3.metric("Decode tokens/s", "does not fit")
    st.plotly_chart(per_gpu_figure(est.components, 0.0, unit, gpu, title="one replica" if isc.tensor_parallel == 1 else
                                   "one tensor-parallel rank"), width="stretch", key="inference_chart")
    st.table(pd.DataFrame([{"component": p.label, unit: f"{to_unit(p.bytes, unit):,.2f}", "formula": p.formula,
                            "source": p.source} for p in est.parts]), hide_index=True)
    with st.expander("Not yet modelled", expanded=False):
        for item in est.not_modelled:
            st.markdown(f"- {md_plain(item)}")


if serving:
    inference_view()
    st.stop()

try:
    est = estimate_memory(model.arch, scenario)
    rows, stack_figure = memory_techniques(model.arch, scenario, unit, gpu, key=json.dumps(
        [model.config, scenario.model_dump(mode="json"), unit, gpu.model_dump(mode="json")], sort_keys=True, default=str))
    plan = plan_parallel(est, model.arch, scenario, hw.training_strategy, hw.offload)
except EngineError as exc:
    st.error(f"Cannot estimate this scenario: {md_plain(exc)}")
    st.stop()
n = hw.num_gpus
peak_phase = plan.peak_phase(n)
cpu_node = plan.cpu_bytes_per_node(n, hw.gpus_per_node)
device = device_memory_per_gpu(est, plan, n)  # allocated, reserved and nvidia-smi bytes of one GPU

if model.arch.approximate_from:
    st.warning(f"Approximate architecture: model_type '{md_plain(model.arch.approximate_from)}' is estimated as a Llama-style "
               "decoder with the same sizes.")
for warning in est.warnings:
    st.warning(md_plain(warning))
where = "on one GPU" if not hw.is_multi else f"per GPU, {n} GPUs with {STRATEGY_LABELS[hw.training_strategy]}"
st.caption(f"**{md_plain(model.title)}** · peak of `torch.cuda.max_memory_allocated()` (live tensors) in a steady-state step "
           f"{where}; below it, what `max_memory_reserved()` and nvidia-smi would show")
c1, c2, c3, c4 = st.columns(4)
c1.metric("Parameters", fmt_count(est.total_parameters), help=f"{est.total_parameters:,} unique parameters (tied weights once)")
c2.metric("Trainable parameters", fmt_count(est.trainable_parameters),
          help=f"{est.trainable_parameters:,} ({100 * est.trainable_parameters / est.total_parameters:.3g}% of the model)")
c3.metric("Peak memory", fmt_bytes(device.allocated, unit), help=f"{device.allocated:,.0f} bytes")
c4.metric("Peak phase", peak_phase.replace("_", " "),
          help="Start of backward (activations alive) or optimizer step (gradients and step temporaries alive)")
d1, d2, d3, d4 = st.columns(4)
d1.metric("Reserved", fmt_bytes(device.reserved, unit),
          help=f"torch.cuda.max_memory_reserved(): allocated + the caching allocator's reserve ({device.reserve_fraction:.0%})")
d2.metric("nvidia-smi shows", fmt_bytes(device.device_used, unit),
          help=f"reserved + the CUDA context ({fmt_bytes(device.context, unit)})"
          + (f" + paged optimizer states ({fmt_bytes(device.pageable, unit)})" if device.pageable else ""))
if device.pageable:
    d3.metric("Paged optimizer states", fmt_bytes(device.pageable, unit),
              help="Unified memory: on the GPU while there is room, evicted to CPU RAM under pressure (slower, not an OOM)")
if cpu_node:
    d4.metric("CPU memory per node (offload)", fmt_bytes(cpu_node, unit),
              help=f"{cpu_node:,.0f} bytes: the offloaded states of {min(n, hw.gpus_per_node)} GPUs of a node")
# Against the sidebar's GPU.
headroom = gpu.usable_memory_bytes - device.device_used
paged_headroom = headroom + device.pageable  # the driver can move paged states to CPU RAM instead of failing
which = "one" if not hw.is_multi else "each"
verdict = fit_verdict(device.allocated, gpu.usable_memory_bytes)
if headroom >= 0 or paged_headroom < 0:
    verdict_box(verdict)(
        f"What nvidia-smi would show {'fits on' if headroom >= 0 else 'does not fit on'} {which} {gpu.name} "
        f"({fmt_bytes(gpu.usable_memory_bytes, unit)} usable): "
        f"{'headroom' if headroom >= 0 else 'short by'} {fmt_bytes(abs(headroom), unit)}, the allocator reserve and "
        "the CUDA context included." + (f" Tight: may not fit ({TIGHT_NOTE.removeprefix('tight: may not fit: ')})."
                                         if verdict is Verdict.TIGHT else "")
    )
else:
    st.info(f"Fits on {which} {md_plain(gpu.name)} only with paging: without the paged optimizer states it leaves "
            f"{fmt_bytes(paged_headroom, unit)}, so the driver keeps part of the {fmt_bytes(device.pageable, unit)} of "
            "paged states in CPU RAM and moves them in at each step (slower, not an out-of-memory error).")
if scenario.gradient_accumulation_steps > 1:
    st.info(f"Gradient accumulation ({scenario.gradient_accumulation_steps} steps) does not lower the peak: each micro "
            "batch's activations are the same, and the gradients stay alive between micro batches (ms-swift's "
            "benchmarks measure the same peak with and without it). It lets a smaller micro batch keep the effective batch.")
st.caption(f"Model-state bytes per parameter (not all alive at the peak: see \"at peak\" below): {est.bytes_per_parameter}")

if hw.is_multi:
    st.subheader(f"Per GPU: {n} GPUs, {STRATEGY_LABELS[hw.training_strategy]}")
    bars = {**plan.components_per_gpu(n), **{p.key: p.bytes for p in device.components()}}
    st.plotly_chart(per_gpu_figure(bars, cpu_node, unit, gpu), width="stretch", key="per_gpu_chart")
    notes = [f"One GPU would need {fmt_bytes(est.total_bytes, unit)}; activations and loss tensors are per GPU and never divided."]
    if plan.gathered_unit:
        notes.append(f"Gathered at once: {plan.gathered_unit}.")
    if plan.replicated_note:
        notes.append(f"Not sharded: {plan.replicated_note}.")
    if plan.storage_note:
        notes.append(f"QLoRA storage: {plan.storage_note}.")
    if plan.bucket_note:
        notes.append(f"Buckets: {plan.bucket_note}.")
    ds = deepspeed_estimate(model.arch, hw.training_strategy, hw.offload, n, hw.gpus_per_node)
    # One caption of paragraphs: one element, not two.
    st.caption(" ".join(md_plain(n) for n in notes)
               + (f"\n\nDeepSpeed's own estimate (`{ds.function}`): {fmt_bytes(ds.gpu_bytes_per_gpu, unit)} per GPU, "
                  f"{fmt_bytes(ds.cpu_bytes_per_node, unit)} CPU per node. {ds.note}." if ds is not None else ""))

st.subheader("Across techniques and precisions")
st.plotly_chart(stack_figure, width="stretch", key="memory_chart")
# One caption of paragraphs (the rows not shown, then how to read the chart): one element per rerun, not one per line.
st.caption("".join(f"Not shown — {md_plain(r.label)}: {md_plain(r.error)}\n\n" for r in rows if r.error)
           + "Same batch, sequence, optimizer, checkpointing and LoRA settings in every bar; ◀ marks your choice. "
           "Each bar shows the tensors alive at that scenario's peak, then the allocator reserve and the CUDA context, so "
           "its top is what nvidia-smi would show (hover for max_memory_allocated).")

st.subheader("How each component is computed")
table = pd.DataFrame(
    [
        {"component": p.label, unit: f"{to_unit(p.bytes, unit):,.2f}",
         "at peak": "yes" if est.peak_phase in p.phases else "no",
         "alive in": ", ".join(ph.replace("_", " ") for ph in p.phases), "formula": p.formula, "source": p.source}
        for p in est.parts
    ]
    + [
        {"component": p.label, unit: f"{to_unit(p.bytes, unit):,.2f}", "at peak": "yes (not tensors)",
         "alive in": "whole run", "formula": p.formula, "source": p.source}
        for p in est.overheads
    ]
)
# A static table: every row and the formula and source columns wrap to the page's width (a scrolling grid cut them).
st.table(table, hide_index=True)
left, right = st.columns(2)
# One Markdown list each, not one element per line: every element is drawn again in the browser on each rerun.
left.expander("Not yet modelled", expanded=True).markdown("\n".join(f"- {md_plain(item)}" for item in est.not_modelled))
right.expander("Assumptions", expanded=True).markdown("\n".join(f"- {md_plain(a)}" for a in est.assumptions))
if est.first_step_peak_bytes < est.total_bytes:
    st.caption(f"First training step: {fmt_bytes(est.first_step_peak_bytes, unit)} at most on one GPU (the optimizer "
               "states are created inside its optimizer step); the figures above are the steady state, from the second step.")

trace_panel(model.config, scenario, est, unit)

st.subheader("The seeds' simple rules beside this estimate")
seed_rows = seed_comparison(est.total_parameters, scenario.micro_batch_size, scenario.seq_len,
                            scenario.precision is PrecisionMode.FP32)
compare = pd.DataFrame(
    [{"rule": r.rule, unit: round(to_unit(r.total_bytes, unit), 2), "what it counts": r.counts} for r in seed_rows]
    + [{"rule": "This estimate (detailed)", unit: round(to_unit(est.total_bytes, unit), 2),
        "what it counts": f"{est.peak_phase.replace('_', ' ')} peak of your scenario, by component"}]
)
st.dataframe(compare, hide_index=True, width="stretch")
st.caption(
    "The seed rules count only model states from the parameter count. The detailed estimate follows the technique "
    "(LoRA/QLoRA train a few adapters), the dtype of each tensor (pure bf16 keeps AdamW states in bf16), the "
    "activations and vocabulary-sized loss tensors of this architecture, and which tensors are alive at the peak. "
    "See the Methodology page."
)

checklist_section(model.arch, scenario, unit, gpu, hw.training_strategy, hw.num_gpus)
