"""Memory page: where the GPU memory of one fine-tuning step goes, across techniques and precisions."""

import pandas as pd
import streamlit as st

from engine.errors import EngineError
from engine.memory import estimate_memory
from engine.precision import PrecisionMode
from engine.seed_rules import seed_comparison
from engine.sweep import sweep_techniques
from engine.units import fmt_bytes, fmt_count, to_unit
from ui.charts import memory_stack_figure
from ui.layout import scenario_page
from ui.scenario_form import display_sidebar

model, scenario = scenario_page("GPU memory of a fine-tuning step")
gpu, unit = display_sidebar()

try:
    est = estimate_memory(model.arch, scenario)
    rows = sweep_techniques(model.arch, scenario)
except EngineError as exc:
    st.error(f"Cannot estimate this scenario: {exc}")
    st.stop()

if model.origin.notice:
    st.warning(model.origin.notice)
if model.arch.approximate_from:
    st.warning(f"Approximate architecture: model_type '{model.arch.approximate_from}' is estimated as a Llama-style "
               "decoder with the same sizes.")
for warning in est.warnings:
    st.warning(warning)
st.caption(f"**{model.title}** · peak of `torch.cuda.max_memory_allocated()` in a steady-state step on one GPU")
c1, c2, c3, c4 = st.columns(4)
c1.metric("Parameters", fmt_count(est.total_parameters), help=f"{est.total_parameters:,} unique parameters (tied weights once)")
c2.metric("Trainable parameters", fmt_count(est.trainable_parameters),
          help=f"{est.trainable_parameters:,} ({100 * est.trainable_parameters / est.total_parameters:.3g}% of the model)")
c3.metric("Peak memory", fmt_bytes(est.total_bytes, unit), help=f"{est.total_bytes:,.0f} bytes")
c4.metric("Peak phase", est.peak_phase.replace("_", " "),
          help="Start of backward (activations alive) or optimizer step (gradients and step temporaries alive)")
if gpu is not None:
    headroom = gpu.usable_memory_bytes - est.total_bytes
    verdict = "fits on" if headroom >= 0 else "does not fit on"
    (st.success if headroom >= 0 else st.warning)(
        f"Estimated peak {verdict} one {gpu.name} ({fmt_bytes(gpu.usable_memory_bytes, unit)} usable): "
        f"{'headroom' if headroom >= 0 else 'short by'} {fmt_bytes(abs(headroom), unit)} before the CUDA context and allocator reserve."
    )
st.caption(f"Bytes per parameter: {est.bytes_per_parameter}")

st.subheader("Across techniques and precisions")
st.plotly_chart(memory_stack_figure(rows, unit, gpu), width="stretch", key="memory_chart")
for r in rows:
    if r.error:
        st.caption(f"Not shown — {r.label}: {r.error}")
st.caption("Same batch, sequence, optimizer, checkpointing and LoRA settings in every bar; ◀ marks your choice. "
           "Each bar shows the components alive at that scenario's peak.")

st.subheader("How each component is computed")
table = pd.DataFrame(
    [
        {"component": p.label, unit: round(to_unit(p.bytes, unit), 3),
         "at peak": "yes" if est.peak_phase in p.phases else "no",
         "alive in": ", ".join(ph.replace("_", " ") for ph in p.phases), "formula": p.formula, "source": p.source}
        for p in est.parts
    ]
)
st.dataframe(table, hide_index=True, width="stretch")
left, right = st.columns(2)
with left.expander("Not yet modelled", expanded=True):
    for item in est.not_modelled:
        st.markdown(f"- {item}")
with right.expander("Assumptions", expanded=True):
    for a in est.assumptions:
        st.markdown(f"- {a}")

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
