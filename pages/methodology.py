"""Methodology page: how every number is produced, where it comes from, and what is not modelled."""

import pandas as pd
import streamlit as st

from engine.validation.throughput import ASSUMPTIONS, compare_measurements, default_mfu_from_measurements
from engine.memory.device import ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES
from engine.memory.estimate import NOT_MODELLED
from engine.memory.weights import quantized_bytes_per_param
from engine.scenario.precision import DTYPE_BYTES
from engine.memory.seed_rules import seed_quick_rule
from engine.time.throughput import DEFAULT_MFU, DEFAULT_SCALING_EFFICIENCY, SEED_THROUGHPUT
from engine.errors import EngineError
from engine.validation.memory import TARGET_MAX_ERROR_PCT, TRACE_TARGET_MAX_ERROR_PCT, validate_all, validate_traced
from ui.charts import predicted_vs_measured_figure
from ui.formats import plain
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

st.subheader("The peak: a few moments, not one sum")
st.markdown(
    """
Fake-tensor traces of real training steps (the optional tracer, `engine/trace`) show the peak at one of a few
moments; the estimate computes the memory alive at each and reports the largest:

- **end of the forward**: saved activations, autocast's cache of 16-bit weight copies, and the loss's forward
  tensors (the logits, their fp32 copy and the fp32 log-softmax: (2 + 8) bytes x batch x sequence x vocabulary);
- **start of backward**: weights, optimizer states, every activation saved for backward, and the loss over the
  vocabulary (fp32 log-softmax plus its two gradients: 12 bytes x batch x sequence x vocabulary). Weight gradients
  do not exist yet, unless gradient accumulation keeps them from the previous micro batch;
- **recompute** (gradient checkpointing only): the blocks' inputs and one block's tensors again, after the loss
  gradients are freed;
- **end of backward**: every gradient, and with a tied input/output embedding (GPT-2, Llama 3.2 1B, Qwen2.5 0.5B)
  two more vocabulary x hidden tensors while its two gradients are summed;
- **optimizer step**: weights, gradients, optimizer states and the step's temporaries (torch's foreach AdamW
  allocates about one more copy of the parameters); activations are freed.

The chart stacks the components alive at the largest moment. The first step is smaller: optimizer states are
created inside its `step()`.
"""
)

st.subheader("Components")
st.markdown(
    f"""
- **Weights.** Full fine-tuning: every parameter at the precision's weight width (4 B in fp32 and mixed precision,
  2 B in pure bf16/fp16). LoRA: the frozen base at that width plus fp32 adapters `r x (in + out)` per targeted module
  (PEFT casts adapters to fp32). QLoRA: every linear layer of the decoder blocks in 4 bits with its block constants
  ({quantized_bytes_per_param(True):.4f} B/param with double quantization, {quantized_bytes_per_param(False):.4f}
  without; QLoRA paper sec. 3; LLM.int8 as the base: 1 B plus one fp32 scale per output row), while embeddings, norms and the LM head stay unquantized, and
  `prepare_model_for_kbit_training` casts them to fp32. That is why QLoRA is not always smaller than LoRA in bf16:
  for a 128k-vocabulary 8B model the fp32 embeddings and LM head alone take 4.2 GB.
- **Low-precision weight copies.** Under autocast, the bf16 copy of each trainable fp32 weight is cached and kept
  for backward (+2 B/param: the "18 bytes per parameter" of mixed precision). Frozen fp32 weights are cast on each
  use and the copy is saved for the input gradient. QLoRA dequantizes one weight at a time.
- **Gradients.** Trainable parameters x their dtype width.
- **Optimizer states.** torch AdamW: two tensors like the parameter (8 B/param for fp32 weights, but 4 B in pure
  bf16, where the seed's "fp32 states" do not hold); 8-bit AdamW: 2 B/param plus one fp32 constant per 256 values
  (tensors under 4,096 values keep fp32 states); paged 32-bit AdamW: 8 B/param in fp32 whatever the weights; Lion
  (Chen et al. 2023): one momentum, fp32 or 8-bit; Adafactor: a row and a column vector per matrix; SGD: none, with
  momentum one buffer like the parameter.
- **Activations.** The tensors each module of the block saves for backward, summed from the modules of this
  architecture (norms, q/k/v/o, rotary, attention kernel, gated or plain MLP, LoRA dropout copies), by precision.
  Attention keeps the s x s probabilities with eager attention, and with PyTorch's math kernel (fp32 with grouped-query
  attention); flash and memory-efficient kernels do not. With gradient checkpointing each block keeps only its input
  and one block is recomputed at a time.
  With LoRA the frozen base saves much less than with full fine-tuning: autograd saves an input only when the
  gradient that needs it is required, so a frozen `nn.Linear` keeps no input and a frozen norm weight keeps no
  normalised copy; the adapters keep their own (fp32 with PEFT). bitsandbytes' 4-bit matmul (QLoRA) does save its
  input, so QLoRA keeps them.
- **Logits and loss.** 12 bytes x batch x sequence x vocabulary, which dominates small models and LoRA with
  128k-152k vocabularies. The *fused cross-entropy* switch (Liger Kernel, `TrainingArguments(use_liger_kernel=True)`)
  computes the LM head and the loss in chunks: the hidden-state gradient and one chunk's logits instead.
- **Beyond tensors.** The estimate is `torch.cuda.max_memory_allocated()`. `max_memory_reserved()` adds the caching
  allocator's reserve, modelled as {ALLOCATOR_RESERVE_FRACTION:.0%} of the allocated peak (published runs: +5 to +20%);
  nvidia-smi adds the CUDA context, {CUDA_CONTEXT_BYTES / 2**20:,.0f} MiB (the transformers docs' measurement after
  initialising CUDA), and paged optimizer states (bitsandbytes allocates them with `cudaMallocManaged`, outside torch's
  allocator, and the driver may move them to CPU RAM). The GPU fit compares what nvidia-smi would show with the
  GPU's memory.
- **Frameworks.** The estimate follows the Hugging Face stack (transformers + PEFT + bitsandbytes + Trainer) unless the
  *Training framework* input says LitGPT (every parameter, adapters included, in the weight dtype; the loss in chunks
  of 128 tokens on 16-bit logits; fused GELU) or torchtune (adapters in the weight dtype).
- **Gradient accumulation** does not lower the peak at a given micro batch (ms-swift measures the same peak with and
  without it); it keeps the gradients alive between micro batches, which can raise a backward peak. It lets a smaller
  micro batch keep the effective batch size.
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

st.subheader("Training time and cost (Time & cost page)")
_cmp = compare_measurements(DEFAULT_MFU)
_hf = [c for c in _cmp if c.stack == "hf"]
_other = [c for c in _cmp if c.stack != "hf"]
st.markdown(
    f"""
**FLOPs per token** (Kaplan et al. 2020 sec. 2.1; PaLM, Chowdhery et al. 2022, appendix B). A weight matrix with N
entries costs 2N FLOPs per token forward, 2N for the input gradient and 2N for the weight gradient. N counts the
weights that multiply each token: the block linears (for MoE only the routed top-k experts: active parameters) and
the LM head; the embedding lookup is not a matmul.

- full fine-tuning: **6N**; LoRA/QLoRA: **4N** (frozen weights get no weight gradient) + 6 x adapter parameters;
- attention scores and values: **12 x layers x (heads x head_dim) x sequence** (forward 4, backward 8);
- gradient checkpointing re-runs the forward: **+2N + 4 x layers x q x sequence**.

**Step time on one GPU** = tokens x FLOPs per token / (dense peak x MFU) + the bandwidth-bound parts FLOPs miss:
the optimizer step reads and writes every trainable weight and optimizer state and reads the gradients once per step
(with ZeRO-3 each GPU updates its 1/N shard), and QLoRA reads every 4-bit weight and writes and reads its 16-bit copy
on each forward and backward use. The peak is the catalog's dense tensor figure for the compute dtype: bf16 for bf16
and mixed bf16, fp16 for fp16 modes, fp32 (no TF32, PyTorch's default) for fp32; a GPU without bf16 (T4, V100) gets its
fp16 peak, flagged.

**MFU here** is the fraction of the peak achieved on the FLOPs the GPU executes, recompute included (what PaLM calls
HFU when checkpointing is on), so switching checkpointing on costs time at the same MFU. **Default {DEFAULT_MFU}**: the
median, over the {len(_hf)} Hugging Face-stack rows of `data/throughput_measurements.csv` (LlamaFactory, which runs
transformers + PEFT + bitsandbytes), of the MFU that makes this step model reproduce the measured tokens/s
({default_mfu_from_measurements("hf"):.3f}, rounded). Not all {len(_cmp)} rows: the app models the Hugging Face stack,
while the torchtune rows (torch.compile, packing, chunked cross-entropy) form a faster group of their own (median
{default_mfu_from_measurements("torchtune"):.2f}); the median of all rows ({default_mfu_from_measurements(None):.2f}) lies
between the two groups and describes neither. The LlamaFactory runs are short (512 tokens, micro batch 1), which
lowers utilisation, so for longer sequences and batches the default errs towards longer, costlier runs. Change it in
the sidebar.

**Multi-GPU.** tokens/s of one GPU x N x a scaling efficiency: {DEFAULT_SCALING_EFFICIENCY[list(DEFAULT_SCALING_EFFICIENCY)[0]]}
for DDP (one gradient all-reduce per step, overlapped with backward), {DEFAULT_SCALING_EFFICIENCY[list(DEFAULT_SCALING_EFFICIENCY)[1]]}
for ZeRO-3 (weights gathered in forward and backward, gradients reduce-scattered: about 1.5x DDP's traffic,
Rajbhandari et al. 2020 sec. 7). Assumptions for GPUs in one NVLink node, editable; the same factor at every count,
so plans over PCIe-only GPUs or across nodes (over 8 GPUs) are optimistic, and flagged.

**Time and cost.** Tokens = tokens per epoch x epochs x runs, where an epoch is examples x average tokens with
packing, or examples x sequence length without (the padding is computed too). Hours = tokens / tokens per second
(the seed's `Training Time = Dataset Size x Epochs / Throughput`); GPU-hours = hours x GPUs; cost = GPU-hours x price
per GPU-hour, on demand and spot, from one price source of `data/gpu_prices.csv` (each row dated and sourced) or the
cheapest on-demand row of any source. A GPU a source does not price gets no cost, never an invented one.

**Plan search.** Every catalog GPU x 1, 2, 4, 8, 16, 32, 64 GPUs with the chosen strategy, kept only when the per-GPU
peak fits the usable memory (the GPU fit engine); the Pareto front of (hours, cost), the cheapest and the fastest are
taken from those plans only.

**The seed rule** is the seed's throughput table ({"; ".join(f"{b:g}B on {f'{n}x ' if n > 1 else ''}{g} ~{t:,.0f} tokens/s" for b, g, n, t in SEED_THROUGHPUT)}),
its GPU names resolved through the GPU catalog; a model within -15%/+25% of a listed size takes that line's number,
otherwise it is scaled by listed size / model size. It ignores method, precision, batch and checkpointing.
"""
)
st.markdown("**Our tokens/s against published measurements** (at the default MFU)")
st.plotly_chart(predicted_vs_measured_figure(
    # Only the per-row measured and predicted tokens/s and the row's own record (for the hover) are read, so a new
    # time model that keeps compare_measurements()'s rows keeps this chart.
    [{"measured": c.measured_tokens_per_second, "predicted": c.predicted_tokens_per_second,
      "colour": getattr(c, "source", "published"), "symbol": str(c.record().get("method", "")),
      "hover": "<br>".join(plain(f"{k}: {v}") for k, v in c.record().items() if k != "locator")} for c in _cmp],
    quantity="tokens/s", axis_unit="tokens/s", colour_title="Source", symbol_title="Method"),
    width="stretch", key="throughput_validation_chart")
st.dataframe(pd.DataFrame([c.record() for c in _cmp]), hide_index=True, width="stretch", key="methodology_comparison")
st.caption("Assumed where the sources are silent: " + "; ".join(ASSUMPTIONS) + ". A ratio above 1: our model is faster "
           "than the measurement. 'fits' is our memory estimate of the row's scenario as assumed"
           + ("; rows that do not fit by it (" + ", ".join(c.id for c in _cmp if not c.fits_in_memory) + ") ran with memory "
              "savings the row does not record (e.g. torchtune's optimizer step in backward)" if not all(c.fits_in_memory for c in _cmp) else "")
           + ".")

st.subheader("Many GPUs and serving")
st.markdown(
    """
**Per GPU over N data-parallel GPUs** (`engine/memory/parallel.py`, the Memory page's *Many GPUs* controls). From the one-GPU
estimate, each strategy divides some model states by N (Rajbhandari et al. 2020, *ZeRO*, sec. 5): ZeRO-1 the optimizer
states (P_os), ZeRO-2 and FSDP `SHARD_GRAD_OP` also the gradients (P_os+g), ZeRO-3 and FSDP `FULL_SHARD` also the
weights (P_os+g+p); DDP (= FSDP `NO_SHARD`) divides nothing. Activations and loss tensors belong to each GPU's own
micro batch and are **never divided**. Added per GPU: DDP's reducer buckets (`bucket_cap_mb=25`; together a copy of
every gradient unless `gradient_as_bucket_view=True`, PyTorch DDP docs); DeepSpeed's reduce bucket
(`reduce_bucket_size`, default 5e8 elements, DeepSpeed config docs); under ZeRO-3 / FSDP the gathered weights of the unit
in use plus the next one prefetched (at the start of backward: the LM head and the last decoder layer), and for FSDP one
unit's unsharded gradient. **Offload** moves optimizer states, step temporaries and gradient partitions (and with
ZeRO-3 / FSDP full shard the weights) to CPU memory: shown as CPU memory per node = offloaded bytes / N x GPUs per
node; NVMe (ZeRO-Infinity) is noted, not modelled. LoRA/QLoRA under FSDP/ZeRO-3: the frozen base (16-bit or 4-bit) is
sharded like any weight and gathered in its stored size; adapters and their states are sharded too. With DeepSpeed and
mixed precision the model runs in 16 bits and the fp32 master weights live in the (partitioned, offloadable) optimizer;
FSDP keeps Trainer's fp32 weights and autocast copies.

**DeepSpeed's own estimate** (`estimate_zero2_model_states_mem_needs`, `estimate_zero3_model_states_mem_needs_all_live`)
is shown beside ours: it counts model states only (18 B per parameter for ZeRO-3 plus 4 x the largest module), for a
fully trained model, with no activations, loss tensors or buckets.

**Serving** (`engine/memory/inference.py`, the Memory page's *Inference* technique): linear weights at the serving precision
(bf16/fp16 2 B, int8/FP8 1 B, 4-bit GPTQ/AWQ 0.53 B with group-128 scales; embeddings and LM head 16-bit) + KV cache
(2 x layers x KV heads x head_dim x dtype bytes per token, Llama 3.1 8B in bf16: 128 KiB; sliding-window layers hold at
most the window: Mistral 7B v0.1 all layers at 4,096, Gemma 2 every other layer) x concurrent sequences x context + one
layer's transient activations over a 2,048-token prefill chunk and the last tokens' fp32 logits. The longest context and
the most sequences that fit a GPU are found by search. One replica per GPU; tensor parallelism is not modelled.

**Against measurements** (`tests/test_parallel.py`): torchtune Llama 3.1 70B LoRA + FSDP on 8 GPUs 27.6 GiB (ours 33.5,
+21%, we count the full fp32 loss tensors torchtune chunks); 70B full FSDP + CPU offload 13.9 GiB (ours 18.2, +31%);
Llama 2 7B full FSDP on 4 x RTX 4090 22.9 GB (ours 17.2, -25%); Lightning Llama 2 7B / 13B LoRA + FSDP 22.2 / 35.6 GB
(ours 8.7 / 9.2: far under, unexplained, not tuned); torchtitan Llama 3.1 8B FSDP with selective checkpointing
82.4 GiB reserved, between our full-checkpointing (50.5) and no-checkpointing (160.7) estimates.
"""
)

st.subheader("Accuracy: our memory estimate against measured peaks")


@st.cache_resource(max_entries=1, show_spinner=False)
def _memory_validation():
    """validate_all() and its chart: pure functions of the bundled tables, the same for every visitor."""
    val = validate_all()
    points = [{
        "measured": r.measured_bytes / 2**30, "predicted": r.estimate_bytes / 2**30, "colour": r.source,
        "symbol": r.memory_kind,
        "hover": "<br>".join(plain(str(x)) for x in (
            f"{r.id} · {r.model_id} ({r.framework})", r.setting, f"{r.memory_kind}; error {r.error_pct:+.1f}%"
            + ("; target row" if r.target else ""), r.flags) if x),
    } for r in val.rows]
    figure = predicted_vs_measured_figure(points, quantity="peak memory", axis_unit="GiB", colour_title="Source",
                                          symbol_title="Memory kind")
    return val, figure


def _accuracy() -> None:
    """The validation table, its summaries and the rows we cannot express (numbers from engine.validation)."""
    try:
        _val, figure = _memory_validation()
    except EngineError as exc:
        st.error(f"Cannot compare with the measured peaks: {exc}")
        return
    st.plotly_chart(figure, width="stretch", key="memory_validation_chart")
    st.caption("Each published peak of data/measured_memory.csv against our estimate of the same memory kind (log-log; "
               "above the dashed line we over-estimate). Bands: within ±10% and ±25%. Hover for the row.")
    _t, _a = _val.target, _val.all_rows
    st.markdown(
        f"""
    `data/measured_memory.csv` carries over {len(_val.rows) + len(_val.not_expressible)} published peaks of training memory
    (torchtune, LitGPT, the transformers docs, ms-swift, the LlamaFactory paper, torchtitan, Megatron and pre-training
    papers), each with its source and locator, expressed in this engine's terms (catalog model, technique, precision,
    optimizer, batch, sequence, checkpointing, attention, LoRA, GPUs and strategy; what the source leaves unsaid is marked
    as assumed). Each row is compared with our estimate of **the same kind of memory** the source measured:
    `max_memory_allocated` with the tensor peak, `max_memory_reserved` with the peak plus the allocator's reserve,
    nvidia-smi's "used" with that plus the CUDA context; a row that does not say which is compared as allocated, flagged.

    **Target rows** ({_t.rows}): one GPU, the source's confidence tag *high*, a stated memory kind, a framework whose
    memory behaviour the engine models (Hugging Face stack, torchtune, LitGPT) and no technique the engine has no switch for
    (torch.compile, the optimizer step in backward, activation offloading, chunked losses other than Liger's, Unsloth,
    Float8). Median absolute error **{_t.median_abs_error_pct:.1f}%**, largest **{_t.max_abs_error_pct:.1f}%** ({_t.worst_id});
    the seed's `estimate_memory` on the same rows: median {_t.seed_median_abs_error_pct:.0f}%. The project's target is a
    median within 10% and every target row within 25%: {"met" if _t.meets_target else "**not met yet**"}.

    **All {_a.rows} expressible rows**: median {_a.median_abs_error_pct:.1f}%, largest {_a.max_abs_error_pct:.1f}% ({_a.worst_id});
    seed rule median {_a.seed_median_abs_error_pct:.0f}%.
    """
    )
    _off = _val.off_by_more_than(TARGET_MAX_ERROR_PCT)
    if _off:
        st.markdown(f"Target rows off by more than {TARGET_MAX_ERROR_PCT:g}%: " + "; ".join(
            f"{r.id} {r.model_id} ({r.framework}) {r.error_pct:+.0f}%" + (f" ({r.deviations})" if r.deviations else "")
            for r in _off) + ".")
    st.dataframe(pd.DataFrame([r.record() for r in _val.rows]), hide_index=True, width="stretch", key="validation_table")
    st.caption("Error = (ours - measured) / measured. 'seed rule' = the seed chapter's estimate_memory(params, batch, seq) on "
               "the same row (model states with fp32 Adam plus batch x seq x 4096 x 4 B, whatever the technique). Padded "
               "batches are estimated at the length the row states (the longest sample or the truncation).")
    with st.expander(f"Rows we cannot express ({len(_val.not_expressible)})"):
        st.dataframe(pd.DataFrame([n.model_dump() for n in _val.not_expressible]), hide_index=True, width="stretch",
                     key="validation_not_expressible")


_accuracy()

st.subheader("Accuracy: our memory estimate against fake-tensor traces")


def _traced() -> None:
    """The estimate beside every traced scenario of data/traced_scenarios.csv (numbers from engine.validation)."""
    try:
        rows, summary = validate_traced()
    except EngineError as exc:
        st.error(f"Cannot compare with the traced scenarios: {exc}")
        return
    st.markdown(
        f"""
    `data/traced_scenarios.csv` holds {summary.rows} training steps traced with the optional tracer (`engine/trace`,
    `pip install -e ".[trace]"`): the real transformers and PEFT modules built from the bundled configs of GPT-2,
    Llama 3.2 1B, Qwen2.5 0.5B and Mistral 7B, two steps run on fake CUDA tensors, every allocation counted as the CUDA
    caching allocator rounds it. They cover fp32, mixed bf16 and pure bf16, with and without gradient checkpointing,
    full fine-tuning and LoRA, SDPA and eager attention, two batch x sequence shapes and five optimizers. Our peak
    allocated bytes against the traced ones: median absolute error **{summary.median_abs_error_pct:.2f}%**, largest
    **{summary.max_abs_error_pct:.2f}%** ({summary.worst}); the project's target (every scenario within
    {TRACE_TARGET_MAX_ERROR_PCT:g}%, median within 2%): {"met" if summary.meets_target else "**not met**"}.
    """
    )
    st.dataframe(pd.DataFrame([{
        "model": r.model, "scenario": r.setting, "kernel": r.attention_kernel, "traced (GB)": round(r.traced_bytes / 1e9, 3),
        "ours (GB)": round(r.estimate_bytes / 1e9, 3), "error %": round(r.error_pct, 2), "traced peak": r.traced_phase,
        "our peak": r.estimate_phase.replace("_", " "),
    } for r in rows]), hide_index=True, width="stretch", key="traced_table")


_traced()

st.subheader("Not yet modelled")
for item in NOT_MODELLED:
    st.markdown(f"- {item}")

st.subheader("Sources")
st.markdown(
    """
- Seed chapters: "Capítulo 2: Requisitos Computacionales" and "Capítulo 3: Entrenamiento eficiente en memoria".
- Chowdhery et al. 2022, *PaLM*, appendix B (model FLOPs utilisation); Kaplan et al. 2020, *Scaling Laws*, sec. 2.1 (6N).
- Zheng et al. 2024, *LlamaFactory*, arXiv:2403.13372, Table 4; pytorch/torchtune README (measured tokens/s).
- Dettmers et al. 2023, *QLoRA: Efficient Finetuning of Quantized LLMs* (NF4, double quantization, paged optimizers).
- Dettmers et al. 2022, *8-bit Optimizers via Block-wise Quantization*.
- Hu et al. 2021, *LoRA: Low-Rank Adaptation of Large Language Models*.
- Korthikanti et al. 2022, *Reducing Activation Recomputation in Large Transformer Models* (activation accounting).
- Rajbhandari et al. 2020, *ZeRO* (16 bytes per parameter of model states with mixed-precision Adam).
- Shazeer & Stern 2018, *Adafactor*; Chen et al. 2023, *Symbolic Discovery of Optimization Algorithms* (Lion).
- Dettmers et al. 2022, *LLM.int8()*; Hsu et al. 2024, *Liger Kernel* (fused linear cross-entropy).
- transformers docs, *Model training anatomy* (CUDA context measured with NVML).
- transformers `modeling_<type>.py` (tensor shapes), PEFT `LoraConfig` / `prepare_model_for_kbit_training`,
  PyTorch autocast and SDPA kernel selection.
"""
)
