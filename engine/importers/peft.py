"""PEFT ``adapter_config.json`` (peft 0.21.2 ``peft/config.py``, ``peft/tuners/lora/config.py``; 0.17.1 for files
without ``peft_version``), written by ``PeftModel.save_pretrained``.

``peft_type: LORA`` -> LoRA with ``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules`` (a list, or
``"all-linear"``; null = PEFT's per-model default, the attention projections in the estimate), base model
``base_model_name_or_path``. The other PEFT methods (and DoRA, ``modules_to_save``) are reported unsupported, each
with its effect, through :data:`PEFT_TYPES` and the table below.
"""

from __future__ import annotations

from typing import Any

from engine.importers.table import IGNORE, Handling, Map, Reading, Unmodelled, Unsupported, collect
from engine.importers.values import choice, integer, names, number, text
from engine.scenario.lora import ALL_LINEAR

FORMAT, VERSION = "PEFT adapter_config.json", "peft 0.21.2"

PEFT_TYPES: dict[str, Any] = {
    "LORA": "lora",
    "ADALORA": Unmodelled("AdaLoRA: SVD-style adapters starting at init_r and pruned to target_r, with an orthogonality "
                          "regulariser; not modelled yet"),
    "IA3": Unmodelled("IA3: learned scaling vectors on the targeted activations (very few trainable parameters); not "
                      "modelled yet"),
    "VERA": Unmodelled("VeRA: shared frozen random matrices with trained scaling vectors; not modelled yet"),
    "LOHA": Unmodelled("LoHa: Hadamard product of two low-rank pairs per layer; not modelled yet"),
    "LOKR": Unmodelled("LoKr: Kronecker-product adapters; not modelled yet"),
    "PROMPT_TUNING": Unmodelled("prompt tuning: trained virtual tokens lengthen every sequence; not modelled yet"),
    "PREFIX_TUNING": Unmodelled("prefix tuning: trained key/value prefixes in every layer lengthen attention; not "
                                "modelled yet"),
    "P_TUNING": Unmodelled("P-tuning: virtual tokens from a prompt encoder (MLP/LSTM) lengthen every sequence; not "
                           "modelled yet"),
    "TRAINABLE_TOKENS": Unmodelled("trainable tokens: trains the embedding rows of chosen tokens; not modelled yet"),
}
"""``peft_type`` -> the engine's method, or the method's effect in words (the PEFT-methods work maps them)."""


def _targets(value: Any, key: str) -> tuple[str, ...]:
    return (ALL_LINEAR,) if value == ALL_LINEAR else names(value, key)


_DORA = ("DoRA: a magnitude vector per adapted layer and a weight-norm computation in every forward (more memory and "
         "time than LoRA); not modelled yet")
_VIRTUAL = "virtual tokens lengthen every sequence (more activations and attention); not modelled yet"
KEYS: dict[str, Handling] = {
    "peft_type": Map("adapter", lambda v, k: PEFT_TYPES.get(text(v, k).upper()) or choice(PEFT_TYPES)(v, k)),
    "base_model_name_or_path": Map("model", text), "revision": Map("revision", text),
    "r": Map("lora_r", integer()), "lora_alpha": Map("lora_alpha", number(0.0)),
    "lora_dropout": Map("lora_dropout", number(0.0, below=1.0)), "target_modules": Map("lora_targets", _targets),
    "use_dora": Unsupported(_DORA),
    "modules_to_save": Unsupported("modules_to_save: full trainable copies of these modules (weights, gradients, "
                                   "optimizer states); not modelled yet"),
    "trainable_token_indices": Unsupported("trains the embedding rows of these tokens: not modelled yet"),
    "layers_to_transform": Unsupported("adapters on these layers only: fewer trainable parameters than every layer"),
    "exclude_modules": Unsupported("these modules get no adapter: fewer trainable parameters than the targets imply"),
    "rank_pattern": Unsupported("other ranks for some modules: trainable parameters differ from r x targets"),
    "bias": Map("peft_bias", choice({"none": "none", "all": Unmodelled("bias='all': every bias trainable; not modelled"),
                                     "lora_only": Unmodelled("bias='lora_only': the adapted layers' biases trainable; "
                                                             "not modelled")})),
    "lora_bias": Unsupported("a trainable bias on lora_B: not modelled"),
    "target_parameters": Unsupported("LoRA on parameters (e.g. MoE experts) rather than linear modules: not modelled"),
    "layer_replication": Unsupported("replicated layers share weights with their own adapters: not modelled"),
    "use_qalora": Unsupported("QA-LoRA (group-pooled adapters over a quantized base): not modelled"),
    "loftq_config": Unsupported("LoftQ initialisation quantizes the base itself: memory follows its bits"),
    "alora_invocation_tokens": Unsupported("activated LoRA: adapters only after these tokens; not modelled"),
    "runtime_config.ephemeral_gpu_offload": Unsupported("ephemeral GPU offload of CPU-resident adapters: not modelled"),
    "runtime_config.*": IGNORE,
    **{k: IGNORE for k in ("task_type", "inference_mode", "auto_mapping", "peft_version", "fan_in_fan_out", "use_rslora",
                           "init_lora_weights", "layers_pattern", "alpha_pattern", "megatron_config", "megatron_core",
                           "eva_config", "corda_config", "lora_ga_config", "qalora_group_size", "ensure_weight_tying",
                           "velora_config", "monteclora_config", "use_bdlora", "arrow_config", "kasa_config",
                           "init_weights")},
    # Keys of the other PEFT methods: part of a method reported through peft_type.
    **{k: Unsupported(_VIRTUAL) for k in ("num_virtual_tokens", "token_dim", "num_transformer_submodules",
                                          "num_attention_heads", "num_layers", "prefix_projection", "encoder_hidden_size",
                                          "encoder_reparameterization_type", "encoder_num_layers", "encoder_dropout",
                                          "prompt_tuning_init", "prompt_tuning_init_text", "tokenizer_name_or_path",
                                          "tokenizer_kwargs")},
    **{k: Unsupported("part of the IA3 configuration (peft_type)") for k in ("feedforward_modules", "init_ia3_weights")},
    **{k: Unsupported("part of the VeRA configuration (peft_type)") for k in ("projection_prng_key", "save_projection",
                                                                             "vera_dropout", "d_initial")},
    **{k: Unsupported("part of the LoHa/LoKr configuration (peft_type)")
       for k in ("alpha", "rank_dropout", "module_dropout", "use_effective_conv2d", "decompose_both", "decompose_factor",
                 "rank_dropout_scale")},
    **{k: Unsupported("part of the AdaLoRA configuration (peft_type)")
       for k in ("init_r", "target_r", "tinit", "tfinal", "deltaT", "beta1", "beta2", "orth_reg_weight", "total_step")},
    "token_indices": Unsupported("part of the trainable-tokens configuration (peft_type)"),
}


def matches(doc: dict[str, Any]) -> bool:
    """A PEFT adapter config: ``peft_type`` (decision 1)."""
    return isinstance(doc.get("peft_type"), str)


def read(doc: dict[str, Any]) -> Reading:
    r = collect(doc, KEYS, FORMAT, VERSION)
    r.settings.pop("peft_bias", None)
    if "peft_type" in r.unsupported:  # not LoRA: r / target_modules belong to that method, not to a LoRA
        for target, key in list(r.sources.items()):
            if target in ("lora_r", "lora_alpha", "lora_dropout", "lora_targets"):
                r.settings.pop(target, None)
                r.mapped.pop(key, None)
                r.unsupported[key] = f"part of the {doc['peft_type']} configuration (peft_type)"
    if r.settings.get("adapter") == "lora":
        r.defaults.update(lora_r=8, lora_alpha=8.0, lora_dropout=0.0)  # LoraConfig's defaults (peft 0.21.2)
        if "lora_targets" not in r.settings:
            r.notes.append("target_modules null: PEFT's default for the model type (the attention projections here)")
    return r
