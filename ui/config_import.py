"""Memory page section "Import a training config": upload or paste config files, see what was mapped, ignored and
unsupported, apply them to the sidebar, and open the other pages with the applied scenario.

The engine does the work (:func:`engine.importers.import_configs`); this widget only collects the files, shows the
result and writes the mapped values into the sidebar widgets' state. It writes them in the button's ``on_click``
callback, which Streamlit runs before the next run draws the widgets (a widget's state cannot change once drawn).
The named model goes into the model picker (the bundled catalog if it is there, else the Hub repo id field), so it is
read through the same path as a model picked by hand. The "open in" links carry the scenario in the URL that
:func:`ui.share.write_query_params` keeps up to date. Every text from a file is shown in a table cell or as code,
never as markdown.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from engine.errors import EngineError
from engine.importers import ImportResult, import_configs, model_repo
from engine.model.sources import catalog_choices
from engine.secrets import redact_tokens
from ui.formats import md_plain
from ui.peft_form import MORE_KEYS, MORE_OPTIONS

# Scenario field -> the sidebar widget's key (ui.scenario_form).
WIDGET_KEYS = {
    "method": "method", "precision": "precision", "optimizer": "optimizer", "micro_batch_size": "micro_batch_size",
    "seq_len": "seq_len", "gradient_accumulation_steps": "grad_accum", "gradient_checkpointing": "gradient_checkpointing",
    "attention": "attention", "lora_r": "lora_r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
    "quant_type": "quant_type", "double_quant": "double_quant", "prepare_kbit_training": "prepare_kbit",
    "fused_cross_entropy": "fused_ce", "framework": "framework",
    "loss_implementation": "loss_implementation", "transformers_version": "transformers_version",
    # PEFT methods and tricks (ui/peft_form.py)
    "num_virtual_tokens": "num_virtual_tokens", "modules_to_save": "modules_to_save", "use_rslora": "use_rslora",
    "galore_rank": "galore_rank", "liger_kernels": "liger_kernels", "torch_compile": "torch_compile", "gradient_checkpointing_offload": "gc_offload",
    "trainable_layers": "trainable_layers_n", "frozen_input_grads": "frozen_input_grads",
}
"""Scenario field -> its sidebar widget's key. ``loraplus_lr_ratio`` has none: it changes learning rates only (no memory
or time), so the sidebar does not ask for it."""
PARALLEL_KEYS = {"num_gpus": "num_gpus", "strategy": "strategy", "offload": "offload", "gpus_per_node": "gpus_per_node"}
"""Import field -> the sidebar's hardware widget key (ui.hardware), shared by every page."""
_APPLIED = "cfg_import_applied"
_PENDING_TARGETS = "_url_lora_targets"  # ui.share applies it once the model's module names are known
PAGES = (("pages/fit.py", "GPU fit"), ("pages/time_cost.py", "Time & cost"), ("pages/plans.py", "Plans"))


def _items() -> list[tuple[str, bytes]]:
    uploads = st.file_uploader("Config files (YAML or JSON; several describe one run)", type=["yaml", "yml", "json"],
                               accept_multiple_files=True, key="cfg_import_files")
    pasted = st.text_area("…or paste one", key="cfg_import_text", height=140,
                          placeholder="base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nmicro_batch_size: 2\n…")
    items = [(u.name, u.getvalue()) for u in uploads or []]
    if pasted.strip():
        items.append(("pasted config", pasted.encode("utf-8")))
    return items


def _apply(result: ImportResult) -> None:
    """on_click: the imported values into the sidebar widgets (runs before the next run draws them)."""
    state = st.session_state
    for field, value in result.fields.items():
        if field in WIDGET_KEYS:
            state[WIDGET_KEYS[field]] = list(value) if isinstance(value, tuple) else value  # multiselects take lists
    if any(WIDGET_KEYS.get(field) in MORE_KEYS for field in result.fields):
        state[MORE_OPTIONS] = True  # the sidebar draws what was applied there
    if "lora_targets" in result.fields:
        state[_PENDING_TARGETS] = list(result.fields["lora_targets"])
    for name, key in PARALLEL_KEYS.items():
        if name in result.parallel:
            state[key] = result.parallel[name]
    if "epochs" in result.dataset:
        state["tc_epochs"] = float(result.dataset["epochs"])
    if "packing" in result.dataset:
        state["tc_packing"] = bool(result.dataset["packing"])
    repo = result.model
    if repo:
        if repo in dict(catalog_choices()):
            state["model_source"], state["catalog_repo"] = "Catalog", repo
        else:
            state["model_source"], state["hub_repo_id"] = "Hub repo id", repo
            state["hub_revision"] = result.revision or ""
    state[_APPLIED] = (_settings(result), len(result.mapped))


def _settings(result: ImportResult) -> int:
    """The sidebar settings the files set (several keys may set one: ``bf16`` and ``fp16`` set the precision; one key
    may set several), counted the same way in the Mapped header and in the "Applied" message."""
    return len(result.fields) + len(result.parallel) + len(result.dataset) + bool(result.model)


def _show(result: ImportResult) -> None:
    st.caption("Read as: " + "; ".join(md_plain(f"{f['file']} = {f['format']} ({f['version']})") for f in result.files))
    if result.model:
        st.caption(f"Model named by the files: {md_plain(redact_tokens(result.model))}"
                   + (f" (revision {md_plain(redact_tokens(result.revision))})" if result.revision else ""))
    mapped = [{"key": k, "value used": str(v)} for k, v in result.mapped.items()]
    unsupported = [{"key": k, "effect (not modelled yet)": v} for k, v in result.unsupported.items()]
    left, right = st.columns(2)
    left.markdown(f"**Mapped** ({len(mapped)} keys, {_settings(result)} sidebar settings)")
    left.dataframe(pd.DataFrame(mapped, columns=["key", "value used"]), hide_index=True, width="stretch")
    right.markdown(f"**Unsupported** ({len(unsupported)}): they change memory or time in ways not modelled")
    right.dataframe(pd.DataFrame(unsupported, columns=["key", "effect (not modelled yet)"]), hide_index=True, width="stretch")
    with st.expander(f"Ignored ({len(result.ignored)}): no effect on memory or time"):
        st.code(", ".join(result.ignored) or "(none)", language=None)
    for note in result.notes:
        st.caption(f"Note: {md_plain(note)}")


def config_import_section() -> None:
    """The whole section, in an expander; a bad file shows one ``st.error`` here and leaves the page as it was."""
    applied = st.session_state.pop(_APPLIED, None)
    with st.expander("Import a training config (TrainingArguments / TRL, axolotl, LLaMA-Factory, torchtune, DeepSpeed, "
                     "accelerate, PEFT adapter_config.json, BitsAndBytesConfig)", expanded=applied is not None):
        if applied is not None:
            settings, keys = applied
            st.success(f"Applied {settings} sidebar settings from the {keys} mapped keys; settings the files do not "
                       "state keep their values.")
            st.caption("Open this scenario in:")
            cols = st.columns(len(PAGES))
            params: dict[str, Any] = st.query_params.to_dict()
            for col, (page, label) in zip(cols, PAGES):
                col.page_link(page, label=label, query_params=params)
        items = _items()
        if not items:
            st.caption("Files are read as data with yaml.safe_load / json (nothing is executed); the format is recognised "
                       "by content, not by the file name. Later files override earlier ones of the same format.")
            return
        try:
            result = import_configs(items)
            model_repo(result)  # a local path instead of a repo id is said now, not after applying
            result.scenario()  # every imported value within the scenario's bounds
        except EngineError as exc:
            st.error(f"Cannot import this config: {md_plain(exc)}")
            return
        _show(result)
        st.button("Apply to the sidebar", key="cfg_import_apply", on_click=_apply, args=(result,), type="primary")
