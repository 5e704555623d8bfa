"""Sidebar inputs of the PEFT methods and training tricks (issue 18), and the sidebar's "More training options"
(issue 26); no formula here."""

from __future__ import annotations

from typing import Any

import streamlit as st

from engine.scenario.loss import LOSSES, TRANSFORMERS_VERSION_LABELS, LossImplementation, TransformersVersion, runs_as
from engine.scenario.optimizer import Optimizer
from engine.scenario.peft import PROMPT_METHODS, SAVEABLE
from engine.scenario.training import FRAMEWORK_LABELS, Attention, Framework, Method, Scenario
from ui.formats import md_plain
from ui.inputs import checked_number

MORE_OPTIONS = "more_options"
"""The toggle (widget key and URL parameter) that draws the less-used training inputs of :data:`MORE_KEYS`. Closed,
they are not drawn (each widget drawn costs the server and the browser on every rerun: issue 26), their values still
apply, stay in the session (ui.layout keeps them) and in the link, and any that is not at its default is listed
under the toggle."""

MORE_KEYS = ("attention", "framework", "torch_compile", "fused_ce", "loss_implementation", "transformers_version",
             "modules_to_save", "use_rslora", "liger_kernels", "gc_offload")
"""Widget keys of the inputs drawn only while :data:`MORE_OPTIONS` is on."""

FRAMEWORK_LOSS = "framework_default"
"""The loss box's option (and kept value) for "no loss implementation chosen": the framework's own loss
(``Scenario.loss_implementation`` None). Not None itself: Streamlit's selectbox sends a None value to the browser as
no selection, which shows its "Choose an option" placeholder instead of the loss in effect. Never in the URL (a link
without ``loss_implementation`` means it, as links always did)."""


def chosen_loss(value: Any) -> LossImplementation | None:
    """The Scenario's ``loss_implementation`` of the loss box's value: None for the framework's own
    (:data:`FRAMEWORK_LOSS`, or None as kept by older sessions and config imports)."""
    return None if value in (None, FRAMEWORK_LOSS) else LossImplementation(value)

_LABELS = {
    "attention": "Attention implementation", "framework": "Training framework", "torch_compile": "torch.compile",
    "fused_ce": "Fused cross-entropy (Liger)",
    "loss_implementation": "Loss implementation", "transformers_version": "transformers version",
    "modules_to_save": "Modules to save", "use_rslora": "rsLoRA scaling", "liger_kernels": "Liger RMSNorm / SwiGLU / RoPE",
    "gc_offload": "Offload checkpointed inputs to CPU",
}


def _more_defaults() -> dict[str, Any]:
    d = Scenario()
    return {"attention": d.attention, "framework": d.framework, "torch_compile": d.torch_compile,
            "fused_ce": d.fused_cross_entropy,
            "loss_implementation": d.loss_implementation or FRAMEWORK_LOSS, "transformers_version": d.transformers_version,
            "modules_to_save": [], "use_rslora": d.use_rslora, "liger_kernels": d.liger_kernels,
            "gc_offload": d.gradient_checkpointing_offload}


def _shown(key: str, value: Any) -> str:
    if key == "framework":
        return FRAMEWORK_LABELS[Framework(value)]
    if key == "loss_implementation":
        loss = chosen_loss(value)
        return "framework default" if loss is None else LOSSES[loss].label
    if key == "transformers_version":
        return TRANSFORMERS_VERSION_LABELS[TransformersVersion(value)]
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(value)
    return str(getattr(value, "value", value))


def more_training_options(method: Method, checkpointing: bool) -> dict[str, Any]:
    """The "More training options" toggle and, when on, its inputs; return their Scenario fields (from the session
    state while they are not drawn)."""
    defaults = _more_defaults()
    for key, value in defaults.items():
        st.session_state.setdefault(key, value)
    if st.session_state["loss_implementation"] is None:  # set so by a config import or the sidebar's first defaults
        st.session_state["loss_implementation"] = FRAMEWORK_LOSS
    st.session_state.setdefault(MORE_OPTIONS, False)
    more = st.toggle("More training options", key=MORE_OPTIONS,
                     help="Attention, training framework, torch.compile, loss, kernels, modules to save, rsLoRA. Hidden, they keep "
                          "their values, which apply and are in the link.")
    # the inputs that apply to this scenario (the others are neither drawn nor read into it)
    applies = {"modules_to_save": method is not Method.FULL, "use_rslora": bool(method.record.lora_pairs),
               "gc_offload": checkpointing}
    if more:
        values = _draw_more(applies)
    else:
        # by key: these are kept values (ui.layout), each read a dict lookup; a whole snapshot (to_dict) would
        # rebuild the value of every key of the session
        values = {key: st.session_state[key] for key in MORE_KEYS}
        unused = {"loss_implementation": bool(values["fused_ce"]), **{k: not a for k, a in applies.items()}}
        changed = [f"{_LABELS[k]} {_shown(k, v)}" for k, v in values.items()
                   if v != defaults[k] and not unused.get(k, False)]
        if changed:
            st.caption("Set under More training options: " + md_plain("; ".join(changed)))
    fused = bool(values["fused_ce"])
    out: dict[str, Any] = {
        "attention": values["attention"], "framework": values["framework"], "fused_cross_entropy": fused,
        "loss_implementation": None if fused else chosen_loss(values["loss_implementation"]),
        "transformers_version": values["transformers_version"], "liger_kernels": bool(values["liger_kernels"]),
        "torch_compile": bool(values["torch_compile"]),
    }
    if applies["modules_to_save"]:
        out["modules_to_save"] = tuple(values["modules_to_save"] or ()) or None
    if applies["use_rslora"]:
        out["use_rslora"] = bool(values["use_rslora"])
    if applies["gc_offload"]:
        out["gradient_checkpointing_offload"] = bool(values["gc_offload"])
    return out


def _framework_default(framework: Any, compiled: bool) -> str:
    """The label of "no loss implementation chosen": the loss the estimate counts for ``framework``, compiled or not
    (its record's loss as :func:`engine.scenario.loss.runs_as` runs it, which ``Scenario.loss`` reads too)."""
    return f"Framework default: {LOSSES[runs_as(Framework(framework).record.loss, compiled)].label}"


def _chosen_loss_label(loss: LossImplementation, compiled: bool) -> str:
    """A chosen loss's label; under torch.compile, where its framework compiles it, the form that is counted
    (:func:`engine.scenario.loss.runs_as`: torchtune's chunked loss runs compiled), so the choice never changes
    silently."""
    counted = runs_as(loss, compiled)
    return LOSSES[loss].label if counted is loss else f"{LOSSES[loss].label} -> compiled (torch.compile)"


def _draw_more(applies: dict[str, bool]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    values["attention"] = st.selectbox(_LABELS["attention"], list(Attention), format_func=lambda a: a.value,
                                       key="attention")
    values["framework"] = st.selectbox(
        _LABELS["framework"], list(Framework), format_func=FRAMEWORK_LABELS.get, key="framework",
        help="Which stack runs the step: it decides the adapters' dtype (PEFT keeps them in fp32), the loss "
        "(LitGPT: chunked, 16-bit logits; torchtune: CEWithChunkedOutputLoss, 8 chunks of 16-bit logits) and whether GELU is fused. Generated code is for Hugging Face.",
    )
    values["torch_compile"] = st.toggle(
        _LABELS["torch_compile"], key="torch_compile",
        help="The run is torch.compiled (TrainingArguments(torch_compile=True), torchtune compile: True, axolotl "
        "torch_compile). Memory counts the loss's compiled form where it is measured (torchtune's chunked loss: "
        "its chunks saved, no fp32 copy); the step time counts fused kernels. Every page reads this one switch.",
    )
    fused = values["fused_ce"] = st.toggle(
        _LABELS["fused_ce"], key="fused_ce",
        help="TrainingArguments(use_liger_kernel=True): the LM head and the loss run in chunks, so the "
        "batch x sequence x vocabulary logits and their fp32 gradients are never materialised.",
    )
    loss = values["loss_implementation"] = st.selectbox(
        _LABELS["loss_implementation"],
        [FRAMEWORK_LOSS, *(x for x in LossImplementation if x is not LossImplementation.LIGER)],
        format_func=lambda x: (_framework_default(values["framework"], values["torch_compile"]) if x == FRAMEWORK_LOSS
                               else _chosen_loss_label(LossImplementation(x), values["torch_compile"])),
        key="loss_implementation", disabled=fused,
        help="The cross-entropy code over the vocabulary (engine.memory.loss_paths): what it keeps "
        "per token and vocabulary entry. The Liger switch above is the fused linear cross-entropy.",
    )
    values["transformers_version"] = st.selectbox(
        _LABELS["transformers_version"], list(TransformersVersion),
        format_func=lambda v: TRANSFORMERS_VERSION_LABELS[TransformersVersion(v)],
        key="transformers_version", disabled=fused or chosen_loss(loss) not in (None, LossImplementation.HF),
        help="Releases whose loss path holds different tensors: up to 4.49 a shifted copy of the fp32 logits "
        "(micro batch > 1), up to 4.45 the upcast in the model's forward.",
    )
    state = st.session_state
    values["modules_to_save"] = state["modules_to_save"]
    if applies["modules_to_save"]:
        values["modules_to_save"] = st.multiselect(
            "Modules to save (trained in full)", sorted(SAVEABLE), key="modules_to_save",
            help="PEFT modules_to_save: a trainable copy of the embedding / LM head, e.g. after adding tokens.")
    values["use_rslora"] = state["use_rslora"]
    if applies["use_rslora"]:
        values["use_rslora"] = st.toggle("rsLoRA scaling (alpha / sqrt(r))", key="use_rslora",
                                         help="Changes the scaling only: no effect on memory or time.")
    values["liger_kernels"] = st.toggle(_LABELS["liger_kernels"], key="liger_kernels")
    values["gc_offload"] = state["gc_offload"]
    if applies["gc_offload"]:
        values["gc_offload"] = st.toggle(
            "Offload checkpointed inputs to CPU (Unsloth)", key="gc_offload",
            help="Unsloth-style: each checkpointed layer input waits in CPU RAM until its backward.")
    return values


def peft_inputs(method: Method, optimizer: Optimizer) -> dict:
    """Draw the method's own inputs that apply to ``method`` / ``optimizer``; return their Scenario fields."""
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
    if optimizer.record.galore:
        # 128: galore-torch's README rank
        out["galore_rank"] = int(checked_number(st, "GaLore rank", "galore_rank", 128, step=1))
    return out
