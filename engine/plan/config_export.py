"""A plan as the config files of the tools users train with, each one re-importable to the same scenario.

:func:`config_files` writes, for a :class:`~engine.plan.plans.Plan`: a TRL ``SFTConfig`` YAML (TrainingArguments keys
plus TRL's ModelConfig: ``trl sft --config``), a PEFT ``adapter_config.json`` (the method's config class: LoRA with
``use_dora`` / ``use_rslora``, AdaLoRA, IA3, VeRA, LoHa, LoKr, prompt / prefix / P-tuning with ``num_virtual_tokens``;
``modules_to_save``), a ``BitsAndBytesConfig`` JSON (QLoRA), a DeepSpeed JSON (ZeRO strategies), an accelerate config YAML (more than one GPU: FSDP, DeepSpeed or DDP
launch), an axolotl YAML and a LLaMA-Factory YAML. Key names and values are those :mod:`engine.importers` reads
(versions there); importing a file gives back the plan's settings that the format can say. What a format cannot say
(axolotl always loads the model in the autocast dtype, so "mixed bf16 with fp32 weights" has no axolotl spelling) is
listed in :attr:`ConfigFile.lost` and in a comment at the top of the file, never silently changed.

The trainer formats say DoRA (``use_dora`` / ``peft_use_dora``), rsLoRA, ``modules_to_save`` (``lora_modules_to_save``,
``additional_target``), LoRA+ (axolotl, LLaMA-Factory), GaLore (``optim: galore_adamw`` + ``optim_target_modules`` and
``optim_args`` rank; LLaMA-Factory ``use_galore``), offloaded checkpointing (TRL / axolotl ``activation_offloading``,
LLaMA-Factory ``use_unsloth_gc``) and Liger's kernels (``use_liger_kernel`` + ``liger_kernel_config``, the axolotl
plugin's switches, ``enable_liger_kernel``); the PEFT methods beyond LoRA/DoRA only the adapter file can say.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import yaml

from engine.importers.peft import FEEDFORWARD_NAMES, is_feedforward_name
from engine.memory.parallel import Strategy
from engine.plan.plans import Plan, app_version
from engine.plan.training_code import _targets, zero3_config
from engine.scenario.lora import ALL_LINEAR
from engine.scenario.optimizer import Optimizer
from engine.scenario.peft import PROMPT_METHODS
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import METHOD_LABELS, Attention, Framework, Method, QuantType

_TORCH_DTYPE = {PrecisionMode.BF16: "bfloat16", PrecisionMode.FP16: "float16"}
_FSDP = {Strategy.FSDP_FULL_SHARD: "full_shard auto_wrap", Strategy.FSDP_SHARD_GRAD_OP: "shard_grad_op auto_wrap"}
_ZERO = {Strategy.ZERO1: 1, Strategy.ZERO2: 2, Strategy.ZERO3: 3}


@dataclass(frozen=True)
class ConfigFile:
    """One exported file: ``name`` (file name), ``format`` (tool), ``text``, ``lost`` (plan settings it cannot say)."""

    name: str
    format: str
    text: str
    lost: tuple[str, ...] = ()


def _mixed(precision: PrecisionMode) -> tuple[bool, bool]:
    """TrainingArguments (bf16, fp16): autocast over fp32 weights, or over 16-bit weights of that dtype."""
    return (precision in (PrecisionMode.AMP_BF16, PrecisionMode.BF16), precision is PrecisionMode.AMP_FP16)


_LORA_ADAPTERS = tuple(m for m in Method if m.record.trainer_formats)
"""Methods the trainer formats (TRL's ModelConfig, axolotl, LLaMA-Factory) build: a LoraConfig, DoRA by a flag (the
method records' ``trainer_formats``)."""


def optimizer_keys(plan: Plan, export: str, key: str = "optim") -> tuple[dict[str, Any], list[str]]:
    """The keys that name the plan's optimizer in ``export`` (one of :data:`engine.scenario.optimizer.EXPORTS`) and
    what that file cannot say about it, both from the optimizer's record: ``key`` (``optim``; axolotl ``optimizer``)
    = ``trainer_optim`` with ``optim_args`` = ``trainer_optim_args``. An optimizer the Trainer cannot name gets no key
    (never another optimizer's name) and its ``unnamed_note`` in the lost list; ``export_notes[export]`` adds what
    else the format cannot say."""
    rec = plan.optimizer.record
    lost = [f"optimizer {rec.name} ({rec.export_notes[export]})"] if export in rec.export_notes else []
    if rec.trainer_optim is None:
        return {}, [f"optimizer {rec.name} ({rec.unnamed_note})", *lost]
    body: dict[str, Any] = {key: rec.trainer_optim}
    if rec.trainer_optim_args:
        body["optim_args"] = rec.trainer_optim_args
    return body, lost


def _common_lost(plan: Plan, *, gpus: bool = True, loraplus: bool = False, freeze: bool = False) -> list[str]:
    """What a trainer format cannot say: another framework, another PEFT method than LoRA/DoRA, LoRA+ where the
    format has no key for it, freeze-tuning where it has none (``freeze``: LLaMA-Factory has; the optimizer's own
    gaps: :func:`optimizer_keys`)."""
    lost = []
    if plan.trainable_layers is not None and not freeze:
        lost.append(f"freeze-tuning of the last {plan.trainable_layers} blocks (LLaMA-Factory finetuning_type: freeze; "
                    "this format trains every parameter)")
    if plan.frozen_input_grads:
        lost.append("backward through the frozen blocks (enable_input_require_grads: older LLaMA-Factory behaviour)")
    if plan.method is not Method.FULL and plan.method not in _LORA_ADAPTERS:
        lost.append(f"method {plan.method.value} ({METHOD_LABELS[plan.method]}: this tool's config builds LoRA/DoRA "
                    "adapters only; see adapter_config.json)")
    if plan.loraplus_lr_ratio is not None and not loraplus:
        lost.append(f"LoRA+ loraplus_lr_ratio {plan.loraplus_lr_ratio:g} (peft.optimizers.create_loraplus_optimizer; "
                    "no memory or time effect)")
    if plan.framework is not Framework.HF:
        lost.append(f"framework {plan.framework.value} (this file is for the Hugging Face stack)")
    if plan.method is Method.QLORA and not plan.prepare_kbit_training:
        lost.append("prepare_kbit_training off (the tools call it for a quantized base)")
    if gpus and plan.num_gpus > 1:
        lost.append(f"{plan.num_gpus} GPUs (set by the launcher: see the accelerate config)")
    return lost


def _yaml(header: str, lost: list[str], body: dict[str, Any]) -> str:
    lines = [f"# {header}", f"# Exported by finetune-fit {app_version()}: a starting point; check it against your versions."]
    if lost:
        lines.append("# Not expressible in this format (the import will not see them): " + "; ".join(lost))
    return "\n".join(lines) + "\n" + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)


def _deepspeed(plan: Plan) -> dict[str, Any] | None:
    return zero3_config(plan) if plan.strategy in _ZERO else None


def sft_config(plan: Plan, targets: list[str] | str) -> ConfigFile:
    """TRL ``SFTConfig`` + ``ModelConfig`` YAML (trl 1.16.0 key names; ``max_length``)."""
    bf16, fp16 = _mixed(plan.precision)
    lost = _common_lost(plan)
    body: dict[str, Any] = {"model_name_or_path": plan.model_repo_id}
    if plan.model_revision:
        body["model_revision"] = plan.model_revision
    body.update(dtype=_TORCH_DTYPE.get(plan.precision, "float32"), attn_implementation=plan.attention.value)
    if plan.method in _LORA_ADAPTERS:
        body.update(use_peft=True, lora_r=plan.lora_r, lora_alpha=plan.lora_alpha, lora_dropout=plan.lora_dropout,
                    lora_target_modules=targets, use_dora=plan.method is Method.DORA, use_rslora=plan.use_rslora)
        if plan.modules_to_save:
            body["lora_modules_to_save"] = list(plan.modules_to_save)
    if plan.method is Method.QLORA:
        if plan.quant_type is QuantType.INT8:
            body["load_in_8bit"] = True
        else:
            body.update(load_in_4bit=True, bnb_4bit_quant_type=plan.quant_type.value, use_bnb_nested_quant=plan.double_quant)
    body.update(output_dir="out", max_length=plan.seq_len, packing=plan.packing,
                per_device_train_batch_size=plan.micro_batch_size,
                gradient_accumulation_steps=plan.gradient_accumulation_steps, num_train_epochs=plan.epochs,
                bf16=bf16, fp16=fp16, gradient_checkpointing=plan.gradient_checkpointing)
    optim, optim_lost = optimizer_keys(plan, "trl")
    body.update(optim)
    lost += optim_lost
    if plan.optimizer.record.galore:  # transformers refuses GaLore without its target modules
        body.update(optim_args=f"rank={plan.galore_rank}", optim_target_modules="all-linear")
    body.update(_hf_liger(plan))
    if plan.torch_compile:
        body["torch_compile"] = True
    if plan.gradient_checkpointing_offload:
        body["activation_offloading"] = True  # TRL: under checkpointing, the layer inputs wait in CPU memory
    if _deepspeed(plan):
        body["deepspeed"] = _deepspeed(plan)
    elif plan.strategy in _FSDP:
        body["fsdp"] = _FSDP[plan.strategy]
    return ConfigFile("sft_config.yaml", "TRL SFTConfig (TrainingArguments)",
                      _yaml(f"TRL SFTConfig for `trl sft --config sft_config.yaml` (plan {plan.name!r})", lost, body), tuple(lost))


def _hf_liger(plan: Plan) -> dict[str, Any]:
    """``use_liger_kernel`` (the model's Liger patch: fused linear cross-entropy, RMSNorm, SwiGLU, RoPE) and the
    ``liger_kernel_config`` that switches off what the plan does not use (transformers 5.24.0)."""
    if not (plan.fused_cross_entropy or plan.liger_kernels):
        return {"use_liger_kernel": False}
    off = {} if plan.liger_kernels else {"rms_norm": False, "swiglu": False, "rope": False}
    if not plan.fused_cross_entropy:
        off["fused_linear_cross_entropy"] = False
    return {"use_liger_kernel": True, **({"liger_kernel_config": off} if off else {})}


PEFT_TYPES = {m: m.record.peft_type for m in Method if m.record.peft_type}
"""The engine's PEFT methods -> ``peft_type`` (peft 0.21.2 ``PeftType``; the method records)."""


def _method_keys(plan: Plan, targets: list[str] | str) -> dict[str, Any]:
    """The keys of the method's own config class (peft 0.21.2 ``tuners/*/config.py``), as ``asdict`` writes them."""
    m, r = plan.method, plan.lora_r
    if m in PROMPT_METHODS:
        extra = {Method.PROMPT_TUNING: {"prompt_tuning_init": "RANDOM"},
                 Method.PREFIX_TUNING: {"prefix_projection": False},
                 Method.P_TUNING: {"encoder_reparameterization_type": "MLP"}}[m]
        return {"num_virtual_tokens": plan.num_virtual_tokens, **extra}
    keys: dict[str, Any] = {"target_modules": targets}
    if m in (Method.LORA, Method.QLORA, Method.DORA):
        keys.update(r=r, lora_alpha=plan.lora_alpha, lora_dropout=plan.lora_dropout, bias="none",
                    use_rslora=plan.use_rslora, use_dora=m is Method.DORA)
    elif m is Method.ADALORA:  # the tensors keep init_r; target_r is the budget the masks prune to
        keys.update(init_r=r, target_r=min(8, r), lora_alpha=plan.lora_alpha, lora_dropout=plan.lora_dropout,
                    total_step=None)
    elif m is Method.IA3:
        ff = [t for t in FEEDFORWARD_NAMES if t == "down_proj"] if targets == ALL_LINEAR else \
            [t for t in targets if is_feedforward_name(t)]
        keys.update(feedforward_modules=ff, init_ia3_weights=True)
    elif m is Method.VERA:
        keys.update(r=r, vera_dropout=plan.lora_dropout, projection_prng_key=0, save_projection=True, d_initial=0.1)
    else:  # LoHa, LoKr
        keys.update(r=r, alpha=plan.lora_alpha, rank_dropout=0.0, module_dropout=0.0)
        if m is Method.LOKR:
            keys.update(decompose_both=False, decompose_factor=-1)
    return keys


def adapter_config(plan: Plan, targets: list[str] | str) -> ConfigFile:
    """PEFT ``adapter_config.json`` of the plan's method (peft 0.21.2: ``LoraConfig`` with ``use_dora`` /
    ``use_rslora``, ``AdaLoraConfig``, ``IA3Config``, ``VeraConfig``, ``LoHaConfig``, ``LoKrConfig``,
    ``PromptTuningConfig``, ``PrefixTuningConfig``, ``PromptEncoderConfig``)."""
    body = {"peft_type": PEFT_TYPES[plan.method], "task_type": "CAUSAL_LM", "base_model_name_or_path": plan.model_repo_id,
            "revision": plan.model_revision, **_method_keys(plan, targets),
            "modules_to_save": list(plan.modules_to_save) if plan.modules_to_save else None, "inference_mode": False}
    lost = ["AdaLoRA total_step: set it to the run's optimizer steps (PEFT requires it)"] \
        if plan.method is Method.ADALORA else []
    return ConfigFile("adapter_config.json", f"PEFT {body['peft_type']} config", json.dumps(body, indent=2) + "\n",
                      tuple(lost))


def bnb_config(plan: Plan) -> ConfigFile:
    """``BitsAndBytesConfig`` as JSON (its ``to_dict()`` keys, transformers 4.57.6 / 5.24.0)."""
    if plan.quant_type is QuantType.INT8:
        body: dict[str, Any] = {"quant_method": "bitsandbytes", "load_in_8bit": True, "load_in_4bit": False}
    else:
        compute = "float16" if plan.precision in (PrecisionMode.AMP_FP16, PrecisionMode.FP16) else (
            "float32" if plan.precision is PrecisionMode.FP32 else "bfloat16")
        body = {"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
                "bnb_4bit_quant_type": plan.quant_type.value, "bnb_4bit_use_double_quant": plan.double_quant,
                "bnb_4bit_compute_dtype": compute, "bnb_4bit_quant_storage": "uint8"}
    return ConfigFile("bnb_config.json", "BitsAndBytesConfig", json.dumps(body, indent=2) + "\n")


def deepspeed_config(plan: Plan) -> ConfigFile:
    """DeepSpeed JSON for a ZeRO strategy (``"auto"`` values are filled in by the Trainer)."""
    return ConfigFile("ds_config.json", "DeepSpeed", json.dumps(zero3_config(plan), indent=2) + "\n")


def accelerate_config(plan: Plan) -> ConfigFile:
    """accelerate config YAML (accelerate 1.15.0): the launch over ``num_gpus`` GPUs of one node."""
    mixed = {PrecisionMode.AMP_BF16: "bf16", PrecisionMode.BF16: "bf16", PrecisionMode.AMP_FP16: "fp16"}.get(plan.precision, "no")
    body: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "machine_rank": 0, "main_training_function": "main",
                            "mixed_precision": mixed, "num_machines": 1, "num_processes": plan.num_gpus, "use_cpu": False}
    lost = []
    if plan.strategy in _FSDP:
        body["distributed_type"] = "FSDP"
        body["fsdp_config"] = {"fsdp_version": 2, "fsdp_reshard_after_forward": plan.strategy is Strategy.FSDP_FULL_SHARD,
                               "fsdp_offload_params": False, "fsdp_activation_checkpointing": plan.gradient_checkpointing,
                               "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                               "fsdp_cpu_ram_efficient_loading": True}
    elif plan.strategy in _ZERO:
        body["distributed_type"] = "DEEPSPEED"
        body["deepspeed_config"] = {"zero_stage": _ZERO[plan.strategy], "offload_optimizer_device": "none",
                                    "offload_param_device": "none", "gradient_accumulation_steps": plan.gradient_accumulation_steps}
    else:
        body["distributed_type"] = "MULTI_GPU" if plan.num_gpus > 1 else "NO"
    if plan.precision in (PrecisionMode.BF16, PrecisionMode.FP16):
        lost.append("16-bit weights (accelerate sets the autocast dtype only; the script loads the weights)")
    return ConfigFile("accelerate_config.yaml", "accelerate",
                      _yaml(f"accelerate config for `accelerate launch --config_file accelerate_config.yaml` (plan {plan.name!r})",
                            lost, body), tuple(lost))


_AXOLOTL_ATTENTION = {Attention.FLASH_ATTENTION_2: "flash_attention", Attention.SDPA: "sdp_attention",
                      Attention.EAGER: "eager_attention"}


def axolotl_config(plan: Plan, targets: list[str] | str) -> ConfigFile:
    """axolotl YAML (axolotl 0.19.0 schema)."""
    lost = _common_lost(plan, loraplus=True)
    body: dict[str, Any] = {"base_model": plan.model_repo_id}
    if plan.model_revision:
        body["revision_of_model"] = plan.model_revision
    if plan.method is Method.QLORA:
        if plan.quant_type is QuantType.INT8:
            body.update(adapter="lora", load_in_8bit=True)
        else:
            body.update(adapter="qlora", load_in_4bit=True,
                        bnb_config_kwargs={"bnb_4bit_quant_type": plan.quant_type.value,
                                           "bnb_4bit_use_double_quant": plan.double_quant})
    elif plan.method in (Method.LORA, Method.DORA):
        body["adapter"] = "lora"
    if plan.method in _LORA_ADAPTERS:
        body.update(lora_r=plan.lora_r, lora_alpha=plan.lora_alpha, lora_dropout=plan.lora_dropout)
        if targets == ALL_LINEAR:
            body["lora_target_linear"] = True
        else:
            body["lora_target_modules"] = targets
        body.update(peft_use_dora=plan.method is Method.DORA, peft_use_rslora=plan.use_rslora)
        if plan.modules_to_save:
            body["lora_modules_to_save"] = list(plan.modules_to_save)
        if plan.loraplus_lr_ratio is not None:
            body["loraplus_lr_ratio"] = plan.loraplus_lr_ratio
    body.update(datasets=[{"path": "REPLACE/with-your-dataset", "type": "alpaca"}], output_dir="./outputs/out",
                sequence_len=plan.seq_len, sample_packing=plan.packing, micro_batch_size=plan.micro_batch_size,
                gradient_accumulation_steps=plan.gradient_accumulation_steps, num_epochs=plan.epochs)
    optim, optim_lost = optimizer_keys(plan, "axolotl", key="optimizer")  # axolotl passes optim_args to the Trainer
    body.update(optim)
    lost += optim_lost
    if plan.optimizer.record.galore:
        body.update(optim_target_modules="all_linear", optim_args={"rank": plan.galore_rank})
    # axolotl loads the model in the autocast dtype: mixed precision over fp32 weights has no spelling.
    if plan.precision in (PrecisionMode.AMP_BF16, PrecisionMode.AMP_FP16):
        lost.append(f"{plan.precision.value}: axolotl loads the weights in the 16-bit dtype (pure 16-bit here)")
    body["bf16"] = plan.precision in (PrecisionMode.BF16, PrecisionMode.AMP_BF16)
    body["fp16"] = plan.precision in (PrecisionMode.FP16, PrecisionMode.AMP_FP16)
    body[_AXOLOTL_ATTENTION[plan.attention]] = True
    body["gradient_checkpointing"] = plan.gradient_checkpointing
    if plan.gradient_checkpointing_offload:
        body["activation_offloading"] = True  # axolotl 0.19 (it requires gradient_checkpointing)
    if plan.torch_compile:
        body["torch_compile"] = True
    if plan.fused_cross_entropy or plan.liger_kernels:
        body["plugins"] = ["axolotl.integrations.liger.LigerPlugin"]
    if plan.liger_kernels:
        body.update(liger_rope=True, liger_rms_norm=True, liger_glu_activation=True)
    if plan.fused_cross_entropy:
        body["liger_fused_linear_cross_entropy"] = True
    if _deepspeed(plan):
        body["deepspeed"] = _deepspeed(plan)
    elif plan.strategy in _FSDP:
        body["fsdp_version"] = 2
        body["fsdp_config"] = {"reshard_after_forward": plan.strategy is Strategy.FSDP_FULL_SHARD, "offload_params": False,
                               "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "state_dict_type": "SHARDED_STATE_DICT"}
    return ConfigFile("axolotl.yaml", "axolotl",
                      _yaml(f"axolotl config for `axolotl train axolotl.yaml` (plan {plan.name!r})", lost, body), tuple(lost))


_LF_ATTENTION = {Attention.FLASH_ATTENTION_2: "fa2", Attention.SDPA: "sdpa", Attention.EAGER: "disabled"}


def llamafactory_config(plan: Plan, targets: list[str] | str) -> ConfigFile:
    """LLaMA-Factory YAML (llamafactory 0.9.5)."""
    lost = _common_lost(plan, loraplus=True, freeze=True)
    lora = plan.method in _LORA_ADAPTERS
    freeze = plan.trainable_layers is not None
    body: dict[str, Any] = {"model_name_or_path": plan.model_repo_id, "flash_attn": _LF_ATTENTION[plan.attention],
                            "stage": "sft", "do_train": True,
                            "finetuning_type": "lora" if lora else "freeze" if freeze else "full"}
    if freeze:  # _setup_freeze_tuning: the last freeze_trainable_layers blocks, every module of them
        body.update(freeze_trainable_layers=plan.trainable_layers, freeze_trainable_modules="all")
    if plan.model_revision:
        lost.append(f"revision {plan.model_revision} (model_revision is not read back)")
    if lora:
        body.update(lora_rank=plan.lora_r, lora_alpha=plan.lora_alpha, lora_dropout=plan.lora_dropout,
                    lora_target="all" if targets == ALL_LINEAR else ",".join(targets),
                    use_dora=plan.method is Method.DORA, use_rslora=plan.use_rslora)
        if plan.modules_to_save:
            body["additional_target"] = ",".join(plan.modules_to_save)
        if plan.loraplus_lr_ratio is not None:
            body["loraplus_lr_ratio"] = plan.loraplus_lr_ratio
    if plan.optimizer.record.galore:  # use_galore builds GaLoreAdamW for optim adamw_torch, GaLoreAdamW8bit for adamw_8bit
        body.update(use_galore=True, galore_target="all", galore_rank=plan.galore_rank)
        if plan.optimizer.record.layerwise:
            body["galore_layerwise"] = True
    if plan.method is Method.QLORA:
        body.update(quantization_bit=8 if plan.quant_type is QuantType.INT8 else 4, quantization_method="bnb")
        if plan.quant_type is not QuantType.INT8:
            body.update(quantization_type=plan.quant_type.value, double_quantization=plan.double_quant)
    body.update(dataset="REPLACE_with_your_dataset", template="default", cutoff_len=plan.seq_len, packing=plan.packing,
                output_dir="saves/out", per_device_train_batch_size=plan.micro_batch_size,
                gradient_accumulation_steps=plan.gradient_accumulation_steps, num_train_epochs=plan.epochs)
    if plan.optimizer is Optimizer.GALORE_ADAMW:  # use_galore (above) builds GaLoreAdamW for optim adamw_torch
        optim, optim_lost = {"optim": Optimizer.ADAMW.hf_name}, []
    elif plan.optimizer is Optimizer.GALORE_ADAMW_8BIT_LAYERWISE:  # ... and GaLoreAdamW8bit for optim adamw_8bit
        optim, optim_lost = {"optim": Optimizer.ADAMW_8BIT.hf_name}, []
    else:
        optim, optim_lost = optimizer_keys(plan, "llamafactory")
    body.update(optim)
    lost += optim_lost
    # The compute dtype is the load dtype; a LoRA base stays 16-bit, full fine-tuning upcasts unless pure_bf16.
    p = plan.precision
    if lora and p in (PrecisionMode.AMP_BF16, PrecisionMode.AMP_FP16):
        lost.append(f"{p.value}: LLaMA-Factory loads a LoRA base in the 16-bit dtype (pure 16-bit here)")
    if not lora and p is PrecisionMode.FP16:
        lost.append("pure fp16 full fine-tuning (LLaMA-Factory upcasts trainable weights to fp32)")
    body["bf16"] = p in (PrecisionMode.AMP_BF16, PrecisionMode.BF16) and not (not lora and p is PrecisionMode.BF16)
    body["fp16"] = p in (PrecisionMode.AMP_FP16, PrecisionMode.FP16)
    if not lora and p is PrecisionMode.BF16:
        body["pure_bf16"] = True
    body["disable_gradient_checkpointing"] = not plan.gradient_checkpointing
    if plan.gradient_checkpointing_offload:
        body["use_unsloth_gc"] = True
    if plan.torch_compile:
        body["torch_compile"] = True  # a TrainingArguments key LLaMA-Factory passes through
    # enable_liger_kernel patches the fused linear cross-entropy and the other kernels together
    body["enable_liger_kernel"] = plan.fused_cross_entropy and plan.liger_kernels
    if plan.fused_cross_entropy != plan.liger_kernels:
        lost.append("fused cross-entropy without Liger's other kernels, or the reverse (enable_liger_kernel switches "
                    "both)")
    if _deepspeed(plan):
        body["deepspeed"] = _deepspeed(plan)
    elif plan.strategy in _FSDP:
        body["fsdp"] = _FSDP[plan.strategy]
    return ConfigFile("llamafactory.yaml", "LLaMA-Factory",
                      _yaml(f"LLaMA-Factory config for `llamafactory-cli train llamafactory.yaml` (plan {plan.name!r})",
                            lost, body), tuple(lost))


def config_files(plan: Plan, config: dict[str, Any] | None = None) -> list[ConfigFile]:
    """Every config file that describes ``plan`` (adapter and quantization files only where the method has them;
    DeepSpeed for ZeRO strategies; accelerate for more than one GPU or a sharded strategy).

    ``config`` (optional) resolves the default LoRA targets of the model, as :func:`engine.plan.training_code.training_code`.
    """
    from engine.plan.training_code import _arch_for_targets
    from engine.scenario.peft import method_default_targets

    arch = _arch_for_targets(plan, config)
    targets = _targets(plan, arch)
    if plan.method is Method.IA3 and plan.lora_targets is None and arch is not None:
        targets = list(method_default_targets(arch, plan.method))  # PEFT's IA3 default, not the attention projections
    files = [sft_config(plan, targets)]
    if plan.method is not Method.FULL:
        files.append(adapter_config(plan, targets))
    if plan.method is Method.QLORA:
        files.append(bnb_config(plan))
    if plan.strategy in _ZERO:
        files.append(deepspeed_config(plan))
    if plan.num_gpus > 1 or plan.strategy is not Strategy.DDP:
        files.append(accelerate_config(plan))
    files += [axolotl_config(plan, targets), llamafactory_config(plan, targets)]
    return files
