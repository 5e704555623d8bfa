"""Sidebar inputs of the PEFT methods and training tricks (issue 18); no formula here."""

from __future__ import annotations

import streamlit as st

from engine.scenario.optimizer import Optimizer
from engine.scenario.peft import PROMPT_METHODS, SAVEABLE
from engine.scenario.training import Method
from ui.inputs import checked_number


def peft_inputs(method: Method, optimizer: Optimizer, checkpointing: bool) -> dict:
    """Draw the inputs that apply to ``method`` / ``optimizer``; return their Scenario fields."""
    out: dict = {}
    if method in PROMPT_METHODS:
        # 20: PEFT examples' num_virtual_tokens
        out["num_virtual_tokens"] = int(checked_number(st, "Virtual tokens", "num_virtual_tokens", 20, step=1))
    if method is Method.FULL:
        # Freeze-tuning (LLaMA-Factory finetuning_type: freeze): 0 = every parameter trains.
        n = int(checked_number(st, "Trainable blocks (freeze-tuning: the last N; 0 = all)", "trainable_layers_n", 0,
                               step=1, help="Full fine-tuning of the last N decoder blocks only; the embeddings, the "
                                            "other blocks and the LM head stay frozen (LLaMA-Factory "
                                            "freeze_trainable_layers)."))
        out["trainable_layers"] = n or None
        if n:
            out["frozen_input_grads"] = st.toggle(
                "Backward through the frozen blocks (enable_input_require_grads)", key="frozen_input_grads",
                help="LLaMA-Factory before April 2024 made the embeddings' output require grad: every block is "
                     "then checkpointed and runs its input gradient; now only the trainable blocks do.")
    if method is not Method.FULL:
        saved = st.multiselect("Modules to save (trained in full)", sorted(SAVEABLE), key="modules_to_save",
                               help="PEFT modules_to_save: a trainable copy of the embedding / LM head, e.g. after adding tokens.")
        out["modules_to_save"] = tuple(saved) or None
    if method.record.lora_pairs:
        out["use_rslora"] = st.toggle("rsLoRA scaling (alpha / sqrt(r))", key="use_rslora",
                                      help="Changes the scaling only: no effect on memory or time.")
    if optimizer.record.galore:
        # 128: galore-torch's README rank
        out["galore_rank"] = int(checked_number(st, "GaLore rank", "galore_rank", 128, step=1))
    with st.expander("Kernels and offload"):
        out["liger_kernels"] = st.toggle("Liger RMSNorm / SwiGLU / RoPE", key="liger_kernels")
        if checkpointing:
            out["gradient_checkpointing_offload"] = st.toggle(
                "Offload checkpointed inputs to CPU (Unsloth)", key="gc_offload",
                help="Unsloth-style: each checkpointed layer input waits in CPU RAM until its backward.")
    return out
