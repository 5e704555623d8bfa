"""Sidebar inputs of a training scenario, returning a validated :class:`engine.scenario.training.Scenario`, the
Memory page's serving inputs, and the Time & cost page's inputs (dataset, MFU, scaling, price source:
:func:`time_cost_sidebar`). The GPUs themselves are the sidebar's hardware (:mod:`ui.hardware`)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

import streamlit as st

from engine.model.architecture import Architecture
from engine.hardware.gpus import Gpu
from ui.catalog_session import session_prices
from ui.hardware import Hardware, keep_choice
from ui.inputs import checked_number, valid_value
from engine.plan.cost import CHEAPEST_LISTED, PLAN_GPU_COUNTS, Dataset, price_source_names
from engine.errors import ScenarioError, explain_validation
from engine.scenario.lora import ALL_LINEAR, default_targets
from engine.scenario.optimizer import Optimizer
from engine.memory.inference import WEIGHT_LABELS, InferenceScenario, KvCacheDtype, WeightPrecision
from engine.memory.parallel import Strategy
from engine.scenario.precision import PrecisionMode, precision_spec
from engine.scenario.peft import uses_targets
from ui.peft_form import FRAMEWORK_LOSS, more_training_options, peft_inputs
from engine.scenario.training import METHOD_LABELS, Method, QuantType, Scenario, default_precision
from ui.formats import md_plain

OPTIMIZER_LABELS = {o: o.record.label for o in Optimizer}
"""The optimizer widget's labels: each optimizer's record (engine.scenario.optimizer.RECORDS)."""


def _init_defaults(arch: Architecture) -> None:
    """Seed widget state from the engine's Scenario defaults (widgets then take no default argument, so
    state kept across pages never conflicts with a widget default)."""
    d = Scenario()
    defaults = {
        "method": d.method, "precision": default_precision(st.session_state.get("method", d.method)), "optimizer": d.optimizer, "micro_batch_size": d.micro_batch_size,
        "seq_len": d.seq_len, "grad_accum": d.gradient_accumulation_steps, "gradient_checkpointing": d.gradient_checkpointing,
        "attention": d.attention, "lora_r": d.lora_r, "lora_alpha": d.lora_alpha, "lora_dropout": d.lora_dropout,
        "quant_type": d.quant_type, "double_quant": d.double_quant, "prepare_kbit": d.prepare_kbit_training,
        "fused_ce": d.fused_cross_entropy, "framework": d.framework,
        "loss_implementation": d.loss_implementation or FRAMEWORK_LOSS, "transformers_version": d.transformers_version,
        _targets_key(arch): list(default_targets(arch)),
    }
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


def _method_default_precision() -> None:
    # A new method starts at its usual precision (engine DEFAULT_PRECISION) until the user picks one.
    if not st.session_state.get("precision_chosen"):
        st.session_state["precision"] = default_precision(st.session_state["method"])


def _precision_chosen() -> None:
    st.session_state["precision_chosen"] = True


def _targets_key(arch: Architecture) -> str:
    # One key per set of module names: switching to a model with other names starts from its defaults.
    return "lora_targets_" + "_".join(arch.linear_target_names())


def scenario_sidebar(arch: Architecture) -> Scenario | None:
    """Draw the scenario inputs; return the Scenario, or None after an ``st.error`` saying what to fix. A number
    typed out of range is said so under its input, and the last valid value is used (:func:`ui.inputs.checked_number`)."""
    _init_defaults(arch)
    d = Scenario()
    with st.sidebar:
        st.header("Training scenario")
        method = st.radio("Method", list(Method), format_func=METHOD_LABELS.get, key="method", horizontal=True,
                          on_change=_method_default_precision)
        precision = st.selectbox(
            "Precision", list(PrecisionMode), format_func=lambda m: precision_spec(m).label, key="precision",
            on_change=_precision_chosen,
            help="Mixed precision keeps fp32 weights and runs matmuls in bf16/fp16 (Trainer bf16=True on an fp32 model); "
            "pure bf16 loads the model with torch_dtype=bfloat16.",
        )
        optimizer = st.selectbox("Optimizer", list(Optimizer), format_func=OPTIMIZER_LABELS.get, key="optimizer")
        c1, c2 = st.columns(2)
        micro_batch = checked_number(c1, "Micro batch size", "micro_batch_size", d.micro_batch_size, step=1, below=st)
        seq_len = checked_number(c2, "Sequence length", "seq_len", d.seq_len, step=256, below=st)
        accum = checked_number(st, "Gradient accumulation steps", "grad_accum", d.gradient_accumulation_steps, step=1)
        checkpointing = st.toggle("Gradient checkpointing", key="gradient_checkpointing")
        lora: dict = {}
        if uses_targets(method):
            st.subheader("Adapter (rank, targets)")
            c1, c2 = st.columns(2)
            lora["lora_r"] = checked_number(c1, "Rank r", "lora_r", d.lora_r, step=1, below=st)
            lora["lora_alpha"] = checked_number(c2, "Alpha", "lora_alpha", d.lora_alpha, step=1.0, below=st)
            lora["lora_dropout"] = checked_number(st, "Dropout", "lora_dropout", d.lora_dropout, step=0.01)
            names = arch.linear_target_names() + [ALL_LINEAR]
            lora["lora_targets"] = tuple(st.multiselect("Target modules", names, key=_targets_key(arch)))
        if method is Method.QLORA:
            st.subheader("Quantized base (bitsandbytes)")
            lora["quant_type"] = st.selectbox(
                "Quant type", list(QuantType), key="quant_type",
                format_func=lambda q: "LLM.int8 (8-bit)" if q is QuantType.INT8 else f"{q.value.upper()} (4-bit)")
            lora["double_quant"] = st.toggle("Double quantization", key="double_quant")
            lora["prepare_kbit_training"] = st.toggle(
                "prepare_model_for_kbit_training", key="prepare_kbit",
                help="PEFT's helper casts the non-quantized parameters (embeddings, norms, LM head) to fp32.",
            )
        lora.update(peft_inputs(method, optimizer))
        more = more_training_options(method, checkpointing)
    try:
        return Scenario.build(
            method=method, precision=precision, optimizer=optimizer, micro_batch_size=int(micro_batch),
            seq_len=int(seq_len), gradient_accumulation_steps=int(accum), gradient_checkpointing=checkpointing,
            **more, **lora,
        )
    except ScenarioError as exc:
        st.error(f"This scenario is not valid: {md_plain(exc)}")
        return None


# --------------------------------------------------------------------------------------------------
# Serving inputs


AS_STORED = "as_stored"
"""The weight-precision choice that serves a checkpoint in its stored format (``weight_precision=None``)."""

TRAINING, INFERENCE = "Fine-tuning", "Inference"
WORKLOADS = (TRAINING, INFERENCE)
"""The Memory page's workloads (widget ``mem_workload``, a URL parameter of the same name)."""


def inference_inputs(max_context: int | None) -> InferenceScenario | None:
    """Serving inputs drawn in the page: weight precision, KV cache dtype, concurrent sequences, context."""
    # "as stored" is a string, not None: Streamlit shows a selectbox whose value is None as "Choose an option".
    if st.session_state.get("inf_weight_precision") is None:
        st.session_state["inf_weight_precision"] = AS_STORED
    for key, value in (("inf_kv_dtype", KvCacheDtype.BF16),
                       ("inf_concurrency", 1), ("inf_seq_len", min(8192, max_context or 8192))):
        st.session_state.setdefault(key, value)
    c1, c2, c3, c4 = st.columns(4)
    wp = c1.selectbox("Weight precision", [AS_STORED, *WeightPrecision], key="inf_weight_precision",
                      format_func=lambda w: "as stored (bf16 if not quantized)" if w == AS_STORED else WEIGHT_LABELS[w],
                      help="A checkpoint stored quantized (its quantization_config: FP8, GPTQ, AWQ, bitsandbytes) is served as stored.")
    kv = c2.selectbox("KV cache dtype", list(KvCacheDtype), format_func=lambda k: k.value, key="inf_kv_dtype")
    conc = checked_number(c3, "Concurrent sequences", "inf_concurrency", 1, step=1, below=st)
    seq = checked_number(c4, "Context per sequence", "inf_seq_len", min(8192, max_context or 8192), step=1024,
                         help="Prompt + generated tokens of each sequence.", below=st)
    st.session_state.setdefault("inf_tp", 1)
    st.session_state.setdefault("inf_util", 0.9)
    c1, c2, _, _ = st.columns(4)
    tp = c1.selectbox("Tensor parallel (GPUs per replica)", [1, 2, 4, 8, 16], key="inf_tp",
                      help="vLLM tensor_parallel_size / TGI --num-shard: weights and KV heads split over these GPUs of the "
                           "sidebar's kind; the memory shown is one GPU's.")
    util = checked_number(c2, "GPU memory utilization", "inf_util", 0.9, step=0.05, below=st,
                          help="vLLM's gpu_memory_utilization (default 0.9): the share of each GPU's memory for weights, "
                               "activations and KV cache; the KV-cache budget and the most sequences use it.")
    try:
        return InferenceScenario.build(weight_precision=None if wp == AS_STORED else wp, kv_cache_dtype=kv, concurrency=int(conc),
                                       seq_len=int(seq), tensor_parallel=int(tp), gpu_memory_utilization=float(util))
    except ScenarioError as exc:
        st.error(f"This serving scenario is not valid: {md_plain(exc)}")
        return None


# --------------------------------------------------------------------------------------------------
# Time & cost inputs

SIZE_EXAMPLES = "Examples × average tokens"
SIZE_TOKENS = "Total tokens"


@dataclass(frozen=True)
class TimeCostInputs:
    """What the Time & cost sidebar returns: the dataset, the calibration measurement, the GPU plan and the prices."""

    dataset: Dataset
    measured_tokens_per_second: float | None  # "calibrate to my run": tokens/s measured for this plan, None = none
    fused_kernels: bool
    gpu: Gpu  # the sidebar's hardware (ui.hardware)
    num_gpus: int
    strategy: Strategy  # the hardware's strategy: used with more than one GPU and for the fewest GPUs
    price_source: str
    basis: str  # "on_demand" or "spot": the price the plan search and the curves rank by
    max_gpus: int  # largest GPU count the plan search tries


TC_MORE = "tc_more"
"""The Time & cost sidebar's "More run options" toggle (widget key and URL parameter): fused kernels, calibration and
the plan search's largest GPU count are drawn only while it is on; their values apply and stay in the link either way."""

# The seed chapter's example: 10,000 examples x 512 tokens, 3 epochs.
TC_DEFAULTS = {
    "tc_size_mode": SIZE_EXAMPLES, "tc_examples": 10_000, "tc_avg_tokens": 512.0, "tc_total_tokens": 5_120_000,
    "tc_epochs": 3.0, "tc_packing": True, "tc_runs": 1, "tc_measured": 0.0, "tc_fused": False,
    "tc_price_source": CHEAPEST_LISTED, "tc_basis": "on_demand", "tc_max_gpus": 8, TC_MORE: False,
}


def _init_time_cost_defaults() -> None:
    for key, value in TC_DEFAULTS.items():
        st.session_state.setdefault(key, value)


def time_cost_sidebar(hw: Hardware) -> TimeCostInputs | None:
    """Dataset, epochs, packing, runs, calibration, fused kernels and price source (sidebar), for the sidebar's
    hardware ``hw``.

    Returns None after an ``st.error`` when the dataset is not valid.
    """
    _init_time_cost_defaults()
    with st.sidebar:
        st.header("Dataset and run")
        mode = st.radio("Dataset size as", [SIZE_EXAMPLES, SIZE_TOKENS], key="tc_size_mode", horizontal=True)
        if mode == SIZE_EXAMPLES:
            c1, c2 = st.columns(2)
            examples = int(checked_number(c1, "Examples", "tc_examples", 10_000, step=1_000, below=st))
            avg = float(checked_number(c2, "Tokens / example", "tc_avg_tokens", 512.0, step=64.0, below=st,
                                             format="%.1f", help="The examples' mean length in tokens"))
            size: dict = {"examples": examples, "avg_tokens": avg}
        else:
            size = {"total_tokens": int(checked_number(st, "Tokens per epoch", "tc_total_tokens", 5_120_000,
                                                       step=1_000_000))}
        c1, c2 = st.columns(2)
        epochs = float(checked_number(c1, "Epochs", "tc_epochs", 3.0, step=1.0, below=st))
        runs = int(checked_number(c2, "Experimental runs", "tc_runs", 1, step=1, below=st))
        packing = st.toggle("Packing", key="tc_packing", disabled=mode != SIZE_EXAMPLES,
                            help="On: examples are concatenated into full sequences. Off: each example is padded to the "
                                 "sequence length, and the padding costs compute like real tokens.")
        # Drawn only while "More run options" is on (fewer widgets per rerun, issue 26); kept values apply either way.
        if st.toggle("More run options", key=TC_MORE,
                     help="Other fused kernels, calibration to a measured run, the plan search's largest GPU count. Hidden, "
                          "they keep their values, which apply and are in the link."):
            fused = st.toggle("Other fused kernels (Unsloth, Liger)", key="tc_fused",
                              help="Fused elementwise kernels other than torch.compile's: fewer bytes through memory and "
                                   "fewer kernel launches; the loss stays as the Memory page counts it. A compiled run is "
                                   "the sidebar's torch.compile (More training options), which memory and time both "
                                   "read and which fuses the kernels whatever this says.")
            measured = float(checked_number(
                st, "Calibrate to my run: measured tokens/s", "tc_measured", 0.0, step=100.0,
                help="Tokens/s you measured for this model, scenario and GPU plan (all GPUs together); 0 = none. The "
                     "model fits one factor (measured / predicted) and applies it to every plan on this page.",
            ))
            max_gpus = st.selectbox("Plan search: up to", list(PLAN_GPU_COUNTS), key="tc_max_gpus",
                                    format_func=lambda n: f"{n} GPU{'s' if n > 1 else ''}",
                                    help="Largest GPU count tried per GPU kind. Over 8 GPUs a plan spans nodes, linked by "
                                         "one 200 Gb/s InfiniBand NIC per GPU (assumed).")
        else:
            fused, max_gpus = st.session_state["tc_fused"], st.session_state["tc_max_gpus"]
            measured = float(valid_value("tc_measured") or 0.0)  # the last valid value, as the drawn input returns
            hidden = ([] if not fused else ["Other fused kernels on"]) + (
                [f"Calibrate to my run {measured:,.0f} tokens/s"] if measured else []) + (
                [f"Plan search up to {max_gpus} GPUs"] if max_gpus != TC_DEFAULTS["tc_max_gpus"] else [])
            if hidden:
                st.caption("Set under More run options: " + md_plain("; ".join(hidden)))
        st.header("Prices")
        sources = price_source_names(session_prices())
        keep_choice("tc_price_source", sources, CHEAPEST_LISTED)
        source = st.selectbox("Price source", sources, key="tc_price_source",
                              help="data/gpu_prices.csv: each price has its source and date. A GPU without a price in the "
                                   "chosen source gets no cost.")
        basis = st.radio("Rank plans by", ["on_demand", "spot"], key="tc_basis", horizontal=True,
                         format_func=lambda b: "on-demand price" if b == "on_demand" else "spot price")
    try:
        dataset = Dataset(**size, epochs=epochs, runs=runs, packing=packing if mode == SIZE_EXAMPLES else True)
    except ValueError as exc:  # pydantic's ValidationError too: shown as one line, without pydantic's links
        reason = explain_validation(exc, "dataset", all_errors=True) if isinstance(exc, ValidationError) else str(exc)
        st.error(f"This dataset is not valid: {md_plain(reason)}. Change it in the sidebar's 'Dataset and run' section.")
        return None
    return TimeCostInputs(
        dataset=dataset, measured_tokens_per_second=measured or None, fused_kernels=bool(fused),
        gpu=hw.gpu, num_gpus=hw.num_gpus, strategy=hw.strategy, price_source=source, basis=basis,
        max_gpus=int(max_gpus),
    )
