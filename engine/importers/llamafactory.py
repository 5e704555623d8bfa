"""LLaMA-Factory YAML (llamafactory 0.9.5 ``hparams/{finetuning_args,model_args,data_args,parser}.py``,
``model/adapter.py``, ``model/model_utils/{quantization,attention,checkpointing}.py``).

LLaMA-Factory takes every TrainingArguments key verbatim (``per_device_train_batch_size``, ``bf16``, ``optim``,
``deepspeed``, ...) beside its own. Its defaults, used when the file is silent: ``finetuning_type: lora``,
``lora_rank`` 8, ``lora_alpha`` = 2 x rank, ``lora_target: all`` (every linear but the LM head), ``cutoff_len`` 2048,
gradient checkpointing on (``disable_gradient_checkpointing: false``), ``quantization_type: nf4`` with
``double_quantization: true``. Precision: ``bf16``/``fp16`` set the compute dtype the model is loaded in; trainable
parameters are then cast to fp32 unless ``pure_bf16``. So LoRA/QLoRA keep a 16-bit base (pure bf16 in the estimate's
terms, adapters fp32), full fine-tuning trains fp32 weights under autocast (mixed bf16), ``pure_bf16`` pure bf16.
"""

from __future__ import annotations

from typing import Any

from engine.errors import TrainingConfigError
from engine.importers.table import IGNORE, Handling, Map, Reading, Unmodelled, Unsupported, collect
from engine.importers.trainer import HF_KEYS, finish_offload, finish_trainer_keys
from engine.importers.values import (
    boolean, choice, galore_gap, galore_proj_type, galore_targets, integer, negated, number, positive, saveable, text,
)
from engine.scenario.optimizer import Optimizer
from engine.scenario.lora import ALL_LINEAR
from engine.scenario.training import Attention, QuantType

FORMAT, VERSION = "LLaMA-Factory", "0.9.5"

_NO_EFFECT = """
trust_remote_code template dataset dataset_dir eval_dataset preprocessing_num_workers overwrite_cache
max_samples_eval val_size tokenized_path streaming buffer_size mix_strategy interleave_probs plot_loss
adapter_name_or_path cache_dir use_fast_tokenizer resize_vocab split_special_tokens new_special_tokens
model_revision hf_hub_token ms_hub_token om_hub_token print_param_status create_new_adapter pissa_init pissa_iter
pissa_convert loraplus_lr_embedding use_reentrant_gc neat_packing train_on_prompt
mask_history default_system enable_thinking tool_format export_dir export_size export_device export_quantization_bit
export_legacy_format export_hub_model_id infer_backend do_sample temperature top_p max_new_tokens lora_rank_pattern
quantization_device_map rope_scaling shift_attn mixture_of_depths moe_aux_loss_coef disable_shuffling
freeze_vision_tower freeze_multi_modal_projector image_max_pixels video_max_pixels ddp_timeout
""".split()

FINETUNING = {"lora": "lora", "full": "none",
              "freeze": "freeze",  # full fine-tuning of the last freeze_trainable_layers blocks (engine.scenario.freeze)
              "oft": Unmodelled("OFT (orthogonal fine-tuning) adapters: not modelled")}
STAGES = {"sft": "sft", "pt": "pt",
          **{s: Unmodelled(f"{s} stage: a reference or reward model (or value head) beside the trained one; not modelled")
             for s in ("rm", "ppo", "dpo", "kto")}}
FLASH_ATTN = {"auto": "auto", "disabled": Attention.EAGER, "sdpa": Attention.SDPA, "fa2": Attention.FLASH_ATTENTION_2,
              "fa3": Unmodelled("FlashAttention-3: not modelled (fa2 is the closest)")}
QUANT_METHODS = {"bnb": "bnb", "bitsandbytes": "bnb",
                 **{m: Unmodelled(f"{m} quantization: its bytes per weight are not modelled for training (bitsandbytes is)")
                    for m in ("gptq", "awq", "aqlm", "quanto", "eetq", "hqq", "mxfp4", "fp8")}}


def _lora_target(value: Any, key: str) -> tuple[str, ...]:
    """``lora_target``: ``all`` or a comma list of module names."""
    names = tuple(t.strip() for t in text(value, key).split(",") if t.strip())
    return (ALL_LINEAR,) if names == ("all",) else names


def _unsupported(effect: str) -> Unsupported:
    return Unsupported(effect)


KEYS: dict[str, Handling] = {
    **HF_KEYS,
    **{k: IGNORE for k in _NO_EFFECT},
    "model_name_or_path": Map("model", text),
    "stage": Map("lf_stage", choice(STAGES)),
    "finetuning_type": Map("lf_finetuning", choice(FINETUNING)),
    "lora_rank": Map("lora_r", integer()), "lora_alpha": Map("lora_alpha", number(0.0)),
    "lora_dropout": Map("lora_dropout", number(0.0, below=1.0)), "lora_target": Map("lora_targets", _lora_target),
    "additional_target": Map("modules_to_save", saveable),
    "use_dora": Map("use_dora", boolean), "use_rslora": Map("use_rslora", boolean),
    "loraplus_lr_ratio": Map("loraplus_lr_ratio", positive),
    "quantization_bit": Map("lf_bits", choice({4: 4, 8: 8, **{b: Unmodelled(f"{b}-bit (HQQ) quantization: not modelled")
                                                            for b in (1, 2, 3, 5, 6)}})),
    "quantization_method": Map("lf_quant_method", choice(QUANT_METHODS)),
    "quantization_type": Map("quant_type", choice({"nf4": QuantType.NF4, "fp4": QuantType.FP4})),
    "double_quantization": Map("double_quant", boolean),
    "cutoff_len": Map("seq_len", integer()), "packing": Map("packing", boolean),
    "flash_attn": Map("lf_flash_attn", choice(FLASH_ATTN)),
    "pure_bf16": Map("lf_pure_bf16", boolean),
    "disable_gradient_checkpointing": Map("gradient_checkpointing", negated),
    "use_unsloth_gc": Map("lf_unsloth_gc", boolean),
    # apply_liger_kernel with the model's defaults: fused linear cross-entropy, RMSNorm, SwiGLU, RoPE
    "enable_liger_kernel": (Map("fused_cross_entropy", boolean), Map("liger_kernels", boolean)),
    "use_unsloth": _unsupported("Unsloth's kernels and offloaded checkpointing: less memory and time; not modelled"),
    "upcast_layernorm": _unsupported("norm weights in fp32: slightly more weight memory; not modelled"),
    "upcast_lmhead_output": _unsupported("fp32 LM head output: the logits in fp32 from the start; not modelled"),
    "max_samples": _unsupported("caps the dataset at this many examples: the time follows it; give the dataset size "
                                "as examples x average tokens"),
    "freeze_trainable_layers": Map("lf_freeze_layers", integer()),
    "freeze_trainable_modules": Map("lf_freeze_modules", choice({"all": "all"})),
    "freeze_extra_modules": _unsupported("freeze tuning: extra modules trained; not modelled"),
    "use_galore": Map("lf_galore", boolean), "galore_rank": Map("lf_galore_rank", integer()),
    "galore_target": Map("lf_galore_target", galore_targets),
    "galore_update_interval": Map("lf_galore_gap", galore_gap), "galore_proj_type": Map("lf_galore_proj", galore_proj_type),
    "galore_scale": IGNORE,  # multiplies the update only
    "galore_layerwise": Map("lf_galore_layerwise", boolean),
    **{k: _unsupported(f"{k.removeprefix('use_')}: its optimizer states are not modelled")
       for k in ("use_apollo", "use_badam", "use_adam_mini", "use_muon")},
    "use_llama_pro": _unsupported("LLaMA Pro: adds and trains expanded blocks; not modelled"),
    "badam_mode": IGNORE, "badam_start_block": IGNORE, "badam_switch_mode": IGNORE, "badam_switch_interval": IGNORE,
    "apollo_target": IGNORE, "apollo_rank": IGNORE, "apollo_scale": IGNORE,
}


def matches(doc: dict[str, Any]) -> bool:
    """LLaMA-Factory: its own method/data keys (formats.md, decision 7)."""
    return any(k in doc for k in ("finetuning_type", "stage", "lora_target", "lora_rank", "quantization_bit",
                                  "cutoff_len", "template"))


def read(doc: dict[str, Any]) -> Reading:
    r = collect(doc, KEYS, FORMAT, VERSION)
    finish_trainer_keys(r, hf_file=False)
    s = r.settings
    s.pop("lf_freeze_modules", None)
    freeze_layers = s.pop("lf_freeze_layers", None)  # read with finetuning_type freeze only
    s.pop("lf_stage", None)
    finetuning = s.pop("lf_finetuning", None)
    if finetuning is None and "finetuning_type" not in r.unsupported:
        r.defaults["adapter"] = "lora"  # LLaMA-Factory's default finetuning_type
        finetuning = "lora"
    elif finetuning == "freeze":
        # _setup_freeze_tuning (src/llamafactory/model/adapter.py): the last freeze_trainable_layers blocks (default
        # 2), freeze_trainable_modules "all"; its current checkpointing keeps frozen blocks out of the graph.
        s["adapter"] = "none"
        if freeze_layers is None:
            r.defaults["trainable_layers"] = freeze_layers = 2
        s["trainable_layers"] = freeze_layers
    elif finetuning is not None:
        s["adapter"] = finetuning
        if finetuning == "none":  # the adapter setting's word for no adapter; the key's value, as written, is "full"
            r.mapped["finetuning_type"] = "full"
    method_quant = s.pop("lf_quant_method", "bnb")
    bits = s.pop("lf_bits", None)
    if bits is not None and method_quant == "bnb":
        s["load_in_4bit" if bits == 4 else "load_in_8bit"] = True
        if bits == 8:
            s["quant_type"] = QuantType.INT8
        r.defaults.update(quant_type=QuantType.NF4, double_quant=True)
    if finetuning == "lora":
        r.defaults.update(lora_r=8, lora_targets=(ALL_LINEAR,), lora_dropout=0.0)
        r.defaults["lora_alpha"] = float(2 * s.get("lora_r", 8))  # lora_alpha None -> lora_rank * 2
    attn = s.pop("lf_flash_attn", None)
    if attn == "auto":
        r.notes.append("flash_attn: auto leaves transformers' default (sdpa)")
        s["attention"] = Attention.SDPA
    elif attn is not None:
        s["attention"] = attn
    r.defaults.update(seq_len=2048, gradient_checkpointing=True)
    _precision(r, finetuning)
    _galore(r, finetuning)
    unsloth_gc = s.pop("lf_unsloth_gc", None)
    if unsloth_gc is not None:
        s["gc_offload"] = unsloth_gc  # used only when checkpointing is on (model_utils/checkpointing.py)
        r.sources["gc_offload"] = "use_unsloth_gc"
    finish_offload(r, default_gc=True)
    return r


GALORE_OPTIM = {Optimizer.ADAMW: Optimizer.GALORE_ADAMW,
                Optimizer.ADAMW_8BIT: "GaLoreAdamW8bit (8-bit states of the projected gradients)",
                Optimizer.PAGED_ADAMW_8BIT: "GaLoreAdamW8bit (8-bit states of the projected gradients)",
                Optimizer.ADAFACTOR: "GaLoreAdafactor (factored states of the projected gradients)"}
"""``optim`` -> the optimizer ``use_galore`` builds (llamafactory 0.9.5 ``train/trainer_utils.py``
``_create_galore_optimizer``; any other ``optim`` raises there)."""


def _galore(r: Reading, finetuning: str | None) -> None:
    """``use_galore``: GaLore over the ``galore_target`` linears at ``galore_rank`` (16 by default), full fine-tuning
    only (LLaMA-Factory refuses it with LoRA); with ``galore_layerwise`` and ``optim: adamw_8bit``, one GaLoreAdamW8bit
    per parameter stepped inside backward (``galore_adamw_8bit_layerwise``)."""
    s = r.settings
    on = s.pop("lf_galore", None)
    keys = {n: r.sources.get(n) for n in ("lf_galore_rank", "lf_galore_target", "lf_galore_layerwise")}
    rank, _ = s.pop("lf_galore_rank", None), s.pop("lf_galore_target", None)
    layerwise = s.pop("lf_galore_layerwise", None)
    if not on:
        for key in filter(None, keys.values()):
            r.mapped.pop(key, None)
            r.ignored.append(key)
        return
    if finetuning != "none":
        raise TrainingConfigError("use_galore: LLaMA-Factory refuses GaLore with LoRA ('Cannot use LoRA with GaLore'); "
                                  "set finetuning_type: full")
    optim = s.get("optimizer")
    if optim is None:
        r.notes.append("use_galore without optim: GaLoreAdamW (optim adamw_torch) assumed; LLaMA-Factory raises for "
                       "transformers' default adamw_torch_fused, so name adamw_torch")
        optim = Optimizer.ADAMW
    built = GALORE_OPTIM.get(optim)
    if layerwise:  # one GaLore optimizer per parameter, stepped in its post-accumulate-grad hook
        built = (Optimizer.GALORE_ADAMW_8BIT_LAYERWISE if optim is Optimizer.ADAMW_8BIT
                 else f"layer-wise {built.record.label if isinstance(built, Optimizer) else built}"
                 if built is not None else None)
    if built is None:
        raise TrainingConfigError(f"use_galore: LLaMA-Factory builds GaLore for optim adamw_torch, adamw_8bit, "
                                  f"paged_adamw_8bit or adafactor only (got {getattr(optim, 'value', optim)})")
    if not isinstance(built, Optimizer):
        r.mapped.pop("use_galore", None)
        r.unsupported["use_galore"] = (f"{built}: not modelled (GaLore over adamw_torch is, and layer-wise over "
                                       "adamw_8bit)")
        return
    s["optimizer"] = built
    r.sources["optimizer"] = "use_galore"
    s["galore_rank"] = rank if rank is not None else 16  # FinetuningArguments.galore_rank default
    r.sources["galore_rank"] = keys["lf_galore_rank"] or "use_galore"


def _precision(r: Reading, finetuning: str | None) -> None:
    """The compute dtype is the load dtype; trainable parameters are upcast to fp32 unless pure_bf16."""
    s = r.settings
    pure = s.pop("lf_pure_bf16", None)
    mixed = s.get("mixed")
    if pure:
        s["weights_dtype"], s["mixed"] = "bf16", "bf16"
    elif mixed in ("bf16", "fp16"):
        # LoRA: the frozen base stays in the compute dtype (adapters fp32, as PEFT); full: weights upcast to fp32.
        s["weights_dtype"] = mixed if finetuning == "lora" else "fp32"
    elif mixed == "no":
        s["weights_dtype"] = "fp32"
    r.sources.setdefault("weights_dtype", "pure_bf16" if pure else "bf16")
