"""Model page: the architecture derived from config.json and its exact parameter count."""

import pandas as pd
import streamlit as st

from engine.units import fmt_count
from ui.charts import parameter_figure
from engine.model.checkpoint import explain_difference
from ui.layout import page_setup
from ui.model_picker import checkpoint_count
from ui.formats import md_plain
from ui.share import write_query_params

model = page_setup()
st.title("Model architecture")
if model is None:
    st.info("Pick a model in the sidebar.")
    st.stop()
write_query_params(None)  # the link names the model this page shows (the shell writes it when there is none)
arch = model.arch
if model.origin.notice:
    st.warning(md_plain(model.origin.notice))
st.caption(f"**{md_plain(model.title)}** · model_type {md_plain(arch.model_type)} · config from {model.origin.kind.replace('_', ' ')}")

c1, c2, c3 = st.columns(3)
c1.metric("Parameters", fmt_count(arch.total_parameters), help=f"{arch.total_parameters:,}")
c2.metric("Active per token", fmt_count(arch.active_parameters), help="MoE models use top-k experts per token")
c3.metric("Tied embeddings", "yes" if arch.tie_word_embeddings else "no")

left, right = st.columns(2)
with left:
    st.subheader("Sizes")
    sizes = {
        "hidden size": arch.hidden_size, "layers": arch.num_layers, "attention heads": arch.num_attention_heads,
        "key/value heads": arch.num_key_value_heads, "head dim": arch.head_dim,
        "intermediate size": arch.intermediate_size, "vocabulary": arch.vocab_size,
        "experts (top-k)": f"{arch.num_experts} ({arch.experts_per_token})" if arch.num_experts else "dense",
        "norm": arch.norm, "MLP": f"{arch.mlp} ({arch.activation})", "positions": arch.positional,
    }
    st.table(pd.DataFrame({"value": {k: str(v) for k, v in sizes.items()}}))  # every row shown
with right:
    st.subheader("Parameters by component")
    st.plotly_chart(parameter_figure(arch.parameter_counts), width="stretch", key="params_chart")
    st.dataframe(pd.DataFrame({"parameters": {k: f"{v:,}" for k, v in arch.parameter_counts.items()}}), width="stretch")

st.subheader("Linear layers of one decoder block (LoRA targets)")
st.dataframe(
    pd.DataFrame(
        [{"module": lin.module, "target name": lin.target_name, "in_features": lin.in_features,
          "out_features": lin.out_features, "bias": lin.bias, "copies per block": lin.count} for lin in arch.layer_linears]
    ),
    hide_index=True, width="stretch",
)
with st.expander("Parameter tensors"):
    st.dataframe(
        pd.DataFrame([{"tensor": g.name, "shape": " x ".join(map(str, g.shape)), "count": g.count, "component": g.role,
                       "parameters": g.parameters} for g in arch.tensors]),
        hide_index=True, width="stretch",
    )
st.subheader("Cross-check with the checkpoint on the Hub")
if model.origin.repo_id is None:
    st.caption("An uploaded config has no repo: pick the model from the catalog or by repo id to compare.")
elif model.origin.kind == "hub" or st.button("Read the checkpoint's parameter count from the Hub", key="read_checkpoint"):
    count = checkpoint_count(model)
    if count.total is None:
        st.info(f"No checkpoint count for {md_plain(model.origin.repo_id)}: {md_plain(count.reason)}.")
    else:
        c1, c2, c3 = st.columns(3)
        c1.metric("In memory (this tool)", f"{arch.total_parameters:,}")
        c2.metric("Stored in safetensors", f"{count.total:,}", help=", ".join(f"{k}: {v:,}" for k, v in count.by_dtype.items()))
        c3.metric("Difference", f"{count.total - arch.total_parameters:+,}")
        for cause in explain_difference(arch, model.config, count.total):
            st.markdown(f"- {md_plain(cause)}")
st.caption("Counts are exact sums over the tensor shapes transformers creates for this model_type: tied weights "
           "once, non-persistent buffers (rotary tables, GPT-2's causal mask) not counted. A checkpoint's total on "
           "the Hub can differ: Qwen3-0.6B stores lm_head.weight although it is tied (751,632,384 vs 596,049,920); "
           "GPT-2's checkpoint holds 12 attn.bias buffers (137,022,720 vs 124,439,808).")
