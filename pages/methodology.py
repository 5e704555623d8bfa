"""Methodology page: how every number is produced, where it comes from, and what is not modelled."""

import pandas as pd
import streamlit as st

from engine.memory import NOT_MODELLED, quantized_bytes_per_param
from engine.precision import DTYPE_BYTES
from engine.seed_rules import seed_quick_rule
from ui.layout import page_setup

page_setup()
st.title("Methodology")

st.markdown(
    """
**Data flow.** `config.json` → architecture (exact tensor shapes) → scenario (what you would put in
`TrainingArguments`, `LoraConfig`, `BitsAndBytesConfig`) → estimate (bytes by component) → page.
The engine is plain Python with no Streamlit import; `python -m engine params|estimate` prints the same
numbers as JSON.

**What is estimated.** The steady-state peak of `torch.cuda.max_memory_allocated()` for one training step on
one GPU with the Hugging Face stack (transformers, PEFT, bitsandbytes, Trainer). `nvidia-smi` shows more:
the CUDA context and the allocator's cached blocks are not tensors.

**Parameters.** Summed over the tensor shapes transformers creates for the `model_type`: grouped-query
attention (k/v projections of `num_key_value_heads x head_dim`), an explicit `head_dim`, the third matrix of gated
MLPs, MoE experts and routers, biases where the architecture has them (Qwen2 q/k/v), tied embeddings counted once.
"""
)

st.subheader("Number formats (seed chapter table)")
st.dataframe(pd.DataFrame({"bytes per parameter": DTYPE_BYTES}), width="content")

st.subheader("The peak: two moments, not one sum")
st.markdown(
    """
Fake-tensor traces of real training steps show the peak at one of two moments, and the estimate computes both:

- **start of backward**: weights, optimizer states, every activation saved for backward, and the loss over the
  vocabulary (fp32 log-softmax plus its two gradients: 12 bytes x batch x sequence x vocabulary). Weight gradients
  do not exist yet, unless gradient accumulation keeps them from the previous micro batch.
- **optimizer step**: weights, gradients, optimizer states and the step's temporaries (torch's foreach AdamW
  allocates about one more copy of the parameters); activations are freed.

The chart stacks the components alive at whichever moment is larger.
"""
)

st.subheader("Components")
st.markdown(
    f"""
- **Weights.** Full fine-tuning: every parameter at the precision's weight width (4 B in fp32 and mixed precision,
  2 B in pure bf16/fp16). LoRA: the frozen base at that width plus fp32 adapters `r x (in + out)` per targeted module
  (PEFT casts adapters to fp32). QLoRA: every linear layer of the decoder blocks in 4 bits with its block constants
  ({quantized_bytes_per_param(True):.4f} B/param with double quantization, {quantized_bytes_per_param(False):.4f}
  without; QLoRA paper sec. 3), while embeddings, norms and the LM head stay unquantized, and
  `prepare_model_for_kbit_training` casts them to fp32. That is why QLoRA is not always smaller than LoRA in bf16:
  for a 128k-vocabulary 8B model the fp32 embeddings and LM head alone take 4.2 GB.
- **Low-precision weight copies.** Under autocast, the bf16 copy of each trainable fp32 weight is cached and kept
  for backward (+2 B/param: the "18 bytes per parameter" of mixed precision). Frozen fp32 weights are cast on each
  use and the copy is saved for the input gradient. QLoRA dequantizes one weight at a time.
- **Gradients.** Trainable parameters x their dtype width.
- **Optimizer states.** torch AdamW: two tensors like the parameter (8 B/param for fp32 weights, but 4 B in pure
  bf16, where the seed's "fp32 states" do not hold); 8-bit AdamW: 2 B/param plus one fp32 constant per 256 values
  (tensors under 4,096 values keep fp32 states); Adafactor: a row and a column vector per matrix; SGD: none.
- **Activations.** The tensors each module of the block saves for backward, summed from the modules of this
  architecture (norms, q/k/v/o, rotary, attention kernel, gated or plain MLP, LoRA dropout copies), by precision.
  Attention keeps the s x s probabilities with eager attention, and with PyTorch's math kernel (fp32 with grouped-query
  attention); flash and memory-efficient kernels do not. With gradient checkpointing each block keeps only its input
  and one block is recomputed at a time.
- **Logits and loss.** 12 bytes x batch x sequence x vocabulary, which dominates small models and LoRA with
  128k-152k vocabularies.
"""
)

st.subheader("Why tools say 8, 16, 18 or 20 bytes per parameter")
st.markdown(
    """
- **8**: pure bf16 with torch AdamW (2 weights + 2 gradients + 4 states).
- **16**: fp32 or mixed precision with AdamW (4 + 4 + 8), the ZeRO paper's count for model states.
- **18**: mixed precision with the autocast copies of the weights (+2), alive during backward.
- **20**: fp32/mixed at the foreach AdamW step (+4 of temporaries).
- **12**: the seed chapter's "bf16 + mixed precision" row (2 + 2 + 8), which stores bf16 weights yet fp32 states.
"""
)

st.subheader("The seed chapters' rules")
fp32, bf16 = seed_quick_rule(7_000_000_000, "fp32"), seed_quick_rule(7_000_000_000, "bf16")
st.markdown(
    f"""
The seed chapter "Cálculo de Memoria de GPU" estimates full fine-tuning of a 7B model from the parameter count:
fp32 = {fp32.weights_bytes / 1e9:g} + {fp32.gradients_bytes / 1e9:g} + {fp32.optimizer_bytes / 1e9:g} =
**{fp32.total_bytes / 1e9:g} GB**; bf16 with fp32 optimizer states = {bf16.weights_bytes / 1e9:g} +
{bf16.gradients_bytes / 1e9:g} + {bf16.optimizer_bytes / 1e9:g} = **{bf16.total_bytes / 1e9:g} GB**, and its
`estimate_memory()` adds a fixed `batch x seq x 4096 x 4` bytes of activations. The Memory page shows these rules
beside the detailed estimate. They differ because the rules ignore the technique, the optimizer's real state
dtype, the architecture's activations and vocabulary, and the fact that the peak is one of two moments.
"""
)

st.subheader("Not yet modelled")
for item in NOT_MODELLED:
    st.markdown(f"- {item}")

st.subheader("Sources")
st.markdown(
    """
- Seed chapters: "Capítulo 2: Requisitos Computacionales" and "Capítulo 3: Entrenamiento eficiente en memoria".
- Dettmers et al. 2023, *QLoRA: Efficient Finetuning of Quantized LLMs* (NF4, double quantization, paged optimizers).
- Dettmers et al. 2022, *8-bit Optimizers via Block-wise Quantization*.
- Hu et al. 2021, *LoRA: Low-Rank Adaptation of Large Language Models*.
- Korthikanti et al. 2022, *Reducing Activation Recomputation in Large Transformer Models* (activation accounting).
- Rajbhandari et al. 2020, *ZeRO* (16 bytes per parameter of model states with mixed-precision Adam).
- Shazeer & Stern 2018, *Adafactor*.
- transformers `modeling_<type>.py` (tensor shapes), PEFT `LoraConfig` / `prepare_model_for_kbit_training`,
  PyTorch autocast and SDPA kernel selection.
"""
)
