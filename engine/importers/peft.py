"""PEFT ``adapter_config.json`` (peft 0.21.2 ``peft/config.py``, ``peft/tuners/*/config.py``; 0.17.1 for files without
``peft_version``), written by ``PeftModel.save_pretrained``: ``asdict(config)``, so a file holds its own method's keys.

``peft_type`` is the method (:data:`PEFT_TYPES`; ``LORA`` + ``use_dora`` is DoRA, ``use_rslora`` rsLoRA), base model
``base_model_name_or_path``. What each method's keys become (the scenario's ``lora_r`` is the method's rank):

- LoRA / DoRA: ``r``, ``lora_alpha``, ``lora_dropout``, ``target_modules`` (a list, or ``"all-linear"``; null = PEFT's
  per-model default); AdaLoRA the same with ``init_r`` as the rank (its tensors keep ``init_r``; ``target_r`` is only
  the budget the masks prune to). VeRA: ``r``, ``vera_dropout``. LoHa / LoKr: ``r``, ``alpha``.
- IA3: ``target_modules``; ``feedforward_modules`` must be the MLP output projections among them (the estimate
  scales those modules' input and every other module's output, PEFT's IA3 rule for its default mappings).
- Prompt / prefix / P-tuning: ``num_virtual_tokens``; ``token_dim``, ``num_layers``, ... are the model's own
  values, which the estimate reads from the model. Prefix tuning without ``prefix_projection``; P-tuning's MLP
  prompt encoder of width ``token_dim``.
- Every method: ``modules_to_save`` (trainable copies of ``embed_tokens`` / ``lm_head``).

What a method's file says beyond that (a projection, an LSTM encoder, LoKr's ``decompose_both``, ...) is reported
unsupported with its effect. The defaults, when a key is absent, are the config classes' (peft 0.21.2).
"""

from __future__ import annotations

from typing import Any

from engine.importers.table import IGNORE, SKIP, Handling, Map, Reading, Unmodelled, Unsupported, collect
from engine.importers.values import boolean, choice, integer, names, number, saveable, text
from engine.scenario.lora import ALL_LINEAR
from engine.scenario.methods import RECORDS

FORMAT, VERSION = "PEFT adapter_config.json", "peft 0.21.2"

_READ = [r for r in RECORDS.values() if r.peft_type and r.name == r.peft_type.lower()]
"""The methods a ``peft_type`` names (QLoRA and DoRA are LORA plus a quantization file or ``use_dora``)."""
PEFT_TYPES: dict[str, Any] = {
    **{r.peft_type: r.name for r in _READ if r.peft_type},
    "TRAINABLE_TOKENS": Unmodelled("trainable tokens: trains the embedding rows of chosen tokens; not modelled yet"),
}
"""``peft_type`` -> the engine's method (the records of :mod:`engine.scenario.methods`), or the effect in words."""

RANK_KEY = {r.name: r.rank_key for r in _READ if r.rank_key}
"""The key each method's rank comes from (AdaLoRA builds its tensors at ``init_r``); from the method records."""
ALPHA_KEY = {r.name: r.alpha_key for r in _READ if r.alpha_key}
DROPOUT_KEY = {r.name: r.dropout_key for r in _READ if r.dropout_key}
DEFAULTS = {r.name: dict(r.peft_defaults) for r in _READ if r.peft_defaults}
"""LoraConfig, AdaLoraConfig, VeraConfig, LoHaConfig, LoKrConfig, IA3Config defaults (peft 0.21.2; the records)."""
PROMPT_METHODS = tuple(r.name for r in _READ if r.prompt)
FEEDFORWARD_NAMES = ("down_proj", "fc2", "mlp.c_proj", "w2", "dense_4h_to_h")
"""The MLP output projections of the supported families (Llama/Qwen/Mistral ``down_proj``, Phi/OPT ``fc2``, GPT-2
``mlp.c_proj``, Mixtral ``w2``, Falcon ``dense_4h_to_h``): the modules IA3 scales on the input side."""


def is_feedforward_name(target: str) -> bool:
    """Whether a ``target_modules`` entry names an MLP output projection: one of :data:`FEEDFORWARD_NAMES`, or a path
    ending in one (``mlp.down_proj``, the IA3 default target the estimate writes; PEFT matches names by suffix)."""
    return target in FEEDFORWARD_NAMES or target.rsplit(".", 1)[-1] in FEEDFORWARD_NAMES


def _peft_type(value: Any, key: str) -> Any:
    name = text(value, key).upper()
    if name in PEFT_TYPES:
        return PEFT_TYPES[name]
    return Unmodelled(f"PEFT method {name}: not modelled (LoRA, DoRA, AdaLoRA, IA3, VeRA, LoHa, LoKr, prompt, prefix "
                      "and P-tuning are)")


def _targets(value: Any, key: str) -> tuple[str, ...]:
    return (ALL_LINEAR,) if value == ALL_LINEAR else names(value, key)


def _only(value: Any, what: str) -> Any:
    """A converter: ``value`` is what the estimate models (ignored), anything else is ``what``, unmodelled."""
    return lambda v, k: SKIP if v == value else Unmodelled(what)


KEYS: dict[str, Handling] = {
    "peft_type": Map("adapter", _peft_type),
    "base_model_name_or_path": Map("model", text), "revision": Map("revision", text),
    # Rank, scaling, dropout and targets: which key counts depends on the method (read()).
    **{k: Map(f"peft_{k}", integer()) for k in ("r", "init_r")},
    **{k: Map(f"peft_{k}", number(0.0)) for k in ("lora_alpha", "alpha")},
    **{k: Map(f"peft_{k}", number(0.0, below=1.0)) for k in ("lora_dropout", "vera_dropout")},
    "target_modules": Map("peft_targets", _targets), "feedforward_modules": Map("peft_feedforward", names),
    "use_dora": Map("use_dora", boolean), "use_rslora": Map("use_rslora", boolean),
    "modules_to_save": Map("modules_to_save", saveable),
    "num_virtual_tokens": Map("num_virtual_tokens", integer()),
    "token_dim": Map("peft_token_dim", integer()), "encoder_hidden_size": Map("peft_encoder_hidden", integer()),
    "encoder_reparameterization_type": Map("peft_encoder", _only("MLP", "P-tuning's LSTM prompt encoder (a bi-LSTM "
                                           "and a 2-layer MLP): not modelled (the MLP encoder is)")),
    "prefix_projection": Unsupported("prefix tuning with prefix_projection: an MLP builds the prefixes (more trainable "
                                     "parameters than n x layers x 2 x KV width); not modelled"),
    "decompose_both": Unsupported("LoKr with decompose_both: its first factor is also split in rank r; not modelled "
                                  "(the estimate keeps it full)"),
    "decompose_factor": Map("peft_factor", _only(-1, "LoKr with a decompose_factor: other factor shapes than the "
                                                 "near-square ones the estimate uses; not modelled")),
    "rank_dropout": Unsupported("LoHa/LoKr rank dropout: a mask over the delta weight's rows each step; not modelled"),
    "module_dropout": Unsupported("LoHa/LoKr module dropout: adapters skipped at random (less work); not modelled"),
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
    # Initialisation, saving and the model's own sizes (which the estimate reads from the model): no effect.
    **{k: IGNORE for k in ("task_type", "inference_mode", "auto_mapping", "peft_version", "fan_in_fan_out",
                           "init_lora_weights", "layers_pattern", "alpha_pattern", "megatron_config", "megatron_core",
                           "eva_config", "corda_config", "lora_ga_config", "qalora_group_size", "ensure_weight_tying",
                           "velora_config", "monteclora_config", "use_bdlora", "arrow_config", "kasa_config",
                           "init_weights", "init_ia3_weights", "projection_prng_key", "save_projection", "d_initial",
                           "use_effective_conv2d", "rank_dropout_scale", "num_transformer_submodules",
                           "num_attention_heads", "num_layers", "prompt_tuning_init", "prompt_tuning_init_text",
                           "tokenizer_name_or_path", "tokenizer_kwargs", "encoder_num_layers", "encoder_dropout")},
    # AdaLoRA's budget schedule and importance smoothing: the tensors (and the three importance buffers the estimate
    # counts) keep init_r whatever the budget.
    **{k: IGNORE for k in ("target_r", "tinit", "tfinal", "deltaT", "beta1", "beta2", "orth_reg_weight", "total_step")},
    "token_indices": Unsupported("part of the trainable-tokens configuration (peft_type)"),
}


def matches(doc: dict[str, Any]) -> bool:
    """A PEFT adapter config: ``peft_type`` (decision 1)."""
    return isinstance(doc.get("peft_type"), str)


def read(doc: dict[str, Any]) -> Reading:
    r = collect(doc, KEYS, FORMAT, VERSION)
    s = r.settings
    s.pop("peft_bias", None)
    private = {r.sources[t]: s.pop(t) for t in [t for t in s if t.startswith("peft_")]}  # file key -> value
    method = s.get("adapter")
    if method is None:  # a method that cannot be modelled: its rank, targets and sizes set nothing
        for target in ("num_virtual_tokens", "modules_to_save"):
            if target in s:
                s.pop(target)
                private[r.sources[target]] = None
        for key in private:
            r.mapped.pop(key, None)
            r.unsupported[key] = f"part of the {doc['peft_type']} configuration (peft_type), which is not modelled"
        return r
    wanted = {"lora_r": RANK_KEY.get(method), "lora_alpha": ALPHA_KEY.get(method),
              "lora_dropout": DROPOUT_KEY.get(method), "lora_targets": None if method in PROMPT_METHODS else "target_modules"}
    for target, key in wanted.items():
        if key in private:
            s[target] = private.pop(key)
            r.sources[target] = key
    if method == "ia3":
        _feedforward(r, private.pop("feedforward_modules", None))
    if method == "p_tuning":
        _encoder_width(r, private.pop("encoder_hidden_size", None), private.get("token_dim"))
    for key in private:  # keys this method does not use (AdaLoRA's inherited r, the model's token_dim)
        r.mapped.pop(key, None)
        r.ignored.append(key)
    r.defaults.update(DEFAULTS.get(method, {}))
    if method in PROMPT_METHODS and "num_virtual_tokens" not in s:
        r.notes.append("num_virtual_tokens not given: the estimate's default (20) assumed")
    if method not in PROMPT_METHODS and "lora_targets" not in s:
        r.notes.append("target_modules null: PEFT's default for the model type (the estimate's per-method default: the "
                       "attention projections; IA3's key, value and MLP output projections)")
    return r


def _feedforward(r: Reading, ff: Any) -> None:
    """IA3's ``feedforward_modules`` must be the MLP output projections among the targets (the estimate's rule)."""
    if ff is None:
        return
    targets = set(r.settings.get("lora_targets") or ff)
    every = ALL_LINEAR in targets  # all-linear: the MLP output projections are among them
    if not (all(map(is_feedforward_name, ff)) if every else set(ff) == {t for t in targets if is_feedforward_name(t)}):
        r.mapped.pop("feedforward_modules", None)
        r.unsupported["feedforward_modules"] = (
            "IA3 scales the input of these modules: the estimate scales the input of the MLP's output projection "
            f"({', '.join(FEEDFORWARD_NAMES)}) and the output of every other target; not modelled")


def _encoder_width(r: Reading, width: Any, dim: Any) -> None:
    """P-tuning's MLP encoder is ``token_dim`` wide in the estimate (PEFT's default ``encoder_hidden_size``)."""
    if width is not None and dim is not None and width != dim:
        r.mapped.pop("encoder_hidden_size", None)
        r.unsupported["encoder_hidden_size"] = (f"a {width}-wide P-tuning encoder: the estimate's MLP is token_dim "
                                                f"({dim}) wide; not modelled")
    elif width is not None:
        r.mapped.pop("encoder_hidden_size", None)
        r.ignored.append("encoder_hidden_size")
