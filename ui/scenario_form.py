"""Sidebar inputs of a training scenario, returning a validated :class:`engine.scenario.Scenario`."""

from __future__ import annotations

import streamlit as st

from engine.architecture import Architecture
from engine.catalog import Gpu, load_gpus
from engine.errors import ScenarioError
from engine.lora import ALL_LINEAR, default_targets
from engine.optimizer import Optimizer
from engine.precision import PrecisionMode, precision_spec
from engine.scenario import METHOD_LABELS, Attention, Method, QuantType, Scenario
from engine.units import Unit

OPTIMIZER_LABELS = {
    Optimizer.ADAMW: "AdamW (torch, foreach: adamw_torch)",
    Optimizer.ADAMW_FUSED: "AdamW (torch, fused: Trainer default)",
    Optimizer.ADAMW_8BIT: "8-bit AdamW (bitsandbytes)",
    Optimizer.PAGED_ADAMW_8BIT: "Paged 8-bit AdamW (bitsandbytes)",
    Optimizer.ADAFACTOR: "Adafactor (transformers)",
    Optimizer.SGD: "SGD (no momentum)",
}


def _init_defaults(arch: Architecture) -> None:
    """Seed widget state from the engine's Scenario defaults (widgets then take no default argument, so
    state kept across pages never conflicts with a widget default)."""
    d = Scenario()
    defaults = {
        "method": d.method, "precision": d.precision, "optimizer": d.optimizer, "micro_batch_size": d.micro_batch_size,
        "seq_len": d.seq_len, "grad_accum": d.gradient_accumulation_steps, "gradient_checkpointing": d.gradient_checkpointing,
        "attention": d.attention, "lora_r": d.lora_r, "lora_alpha": d.lora_alpha, "lora_dropout": d.lora_dropout,
        "quant_type": d.quant_type, "double_quant": d.double_quant, "prepare_kbit": d.prepare_kbit_training,
        _targets_key(arch): list(default_targets(arch)),
    }
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)


def _targets_key(arch: Architecture) -> str:
    # One key per set of module names: switching to a model with other names starts from its defaults.
    return "lora_targets_" + "_".join(arch.linear_target_names())


def scenario_sidebar(arch: Architecture) -> Scenario | None:
    """Draw the scenario inputs; return the Scenario, or None after an ``st.error`` saying what to fix."""
    _init_defaults(arch)
    with st.sidebar:
        st.header("Training scenario")
        method = st.radio("Method", list(Method), format_func=METHOD_LABELS.get, key="method", horizontal=True)
        precision = st.selectbox(
            "Precision", list(PrecisionMode), format_func=lambda m: precision_spec(m).label, key="precision",
            help="Mixed precision keeps fp32 weights and runs matmuls in bf16/fp16 (Trainer bf16=True on an fp32 model); "
            "pure bf16 loads the model with torch_dtype=bfloat16.",
        )
        optimizer = st.selectbox("Optimizer", list(Optimizer), format_func=OPTIMIZER_LABELS.get, key="optimizer")
        c1, c2 = st.columns(2)
        micro_batch = c1.number_input("Micro batch size", min_value=1, max_value=65_536, step=1, key="micro_batch_size")
        seq_len = c2.number_input("Sequence length", min_value=1, max_value=2_097_152, step=256, key="seq_len")
        accum = st.number_input("Gradient accumulation steps", min_value=1, max_value=1_000_000, step=1, key="grad_accum")
        checkpointing = st.toggle("Gradient checkpointing", key="gradient_checkpointing")
        attention = st.selectbox("Attention implementation", list(Attention), format_func=lambda a: a.value, key="attention")
        lora: dict = {}
        if method is not Method.FULL:
            st.subheader("LoRA")
            c1, c2 = st.columns(2)
            lora["lora_r"] = c1.number_input("Rank r", min_value=1, max_value=65_536, step=1, key="lora_r")
            lora["lora_alpha"] = c2.number_input("Alpha", min_value=1.0, step=1.0, key="lora_alpha")
            lora["lora_dropout"] = st.number_input("Dropout", min_value=0.0, max_value=0.99, step=0.01, key="lora_dropout")
            names = arch.linear_target_names() + [ALL_LINEAR]
            lora["lora_targets"] = tuple(st.multiselect("Target modules", names, key=_targets_key(arch)))
        if method is Method.QLORA:
            st.subheader("4-bit quantization")
            lora["quant_type"] = st.selectbox("Quant type", list(QuantType), format_func=lambda q: q.value.upper(), key="quant_type")
            lora["double_quant"] = st.toggle("Double quantization", key="double_quant")
            lora["prepare_kbit_training"] = st.toggle(
                "prepare_model_for_kbit_training", key="prepare_kbit",
                help="PEFT's helper casts the non-quantized parameters (embeddings, norms, LM head) to fp32.",
            )
    try:
        return Scenario.build(
            method=method, precision=precision, optimizer=optimizer, micro_batch_size=int(micro_batch),
            seq_len=int(seq_len), gradient_accumulation_steps=int(accum), gradient_checkpointing=checkpointing,
            attention=attention, **lora,
        )
    except ScenarioError as exc:
        st.error(f"This scenario is not valid: {exc}")
        return None


def display_sidebar() -> tuple[Gpu | None, Unit]:
    """GPU for the reference line and the byte unit (GB = 1e9, GiB = 2**30)."""
    with st.sidebar:
        st.header("Display")
        gpus = load_gpus()
        names = ["(none)"] + [g.name for g in gpus]
        st.session_state.setdefault("gpu", "NVIDIA A100 80GB")
        st.session_state.setdefault("unit", "GiB")
        chosen = st.selectbox("GPU memory line", names, key="gpu")
        unit: Unit = st.radio("Unit", ["GB", "GiB"], horizontal=True, key="unit",
                              help="GB = 10^9 bytes (cloud spec sheets, the seed chapters); GiB = 2^30 bytes (torch.cuda, nvidia-smi).")
    gpu = next((g for g in gpus if g.name == chosen), None)
    return gpu, unit
