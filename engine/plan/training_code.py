"""A plan as Python source to copy: the ``TrainingArguments`` / ``BitsAndBytesConfig`` / ``LoraConfig`` (and a DeepSpeed
ZeRO-3 config for the zero3 strategy) that match it (:func:`training_code`); :mod:`engine.plan.config_export` writes the
same plan as config files, and :mod:`engine.plan.code_summary` says what this snippet is.
"""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError
from engine.model.architecture import Architecture
from engine.model.build import architecture_or_approximation
from engine.model.sources import config_from_catalog
from engine.plan.plans import Plan
from engine.scenario.lora import ALL_LINEAR, default_targets
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Framework, Method, QuantStorage, QuantType


def _bf16_fp16(precision: PrecisionMode) -> tuple[bool, bool]:
    """TrainingArguments (bf16, fp16) for a precision mode. Pure fp16 weights cannot use the fp16 GradScaler
    (it refuses fp16 gradients), so pure fp16 runs with both False."""
    return {
        PrecisionMode.FP32: (False, False), PrecisionMode.AMP_BF16: (True, False), PrecisionMode.AMP_FP16: (False, True),
        PrecisionMode.BF16: (True, False), PrecisionMode.FP16: (False, False),
    }[precision]


def _targets(plan: Plan, arch: Architecture | None) -> list[str] | str:
    if plan.lora_targets is not None:
        return ALL_LINEAR if plan.lora_targets == (ALL_LINEAR,) else list(plan.lora_targets)
    if arch is not None:
        return list(default_targets(arch))
    return ["q_proj", "k_proj", "v_proj", "o_proj"]


_ZERO_STAGES = {"zero1": 1, "zero2": 2, "zero3": 3}
_TORCH_DTYPES = {QuantStorage.BF16: "torch.bfloat16", QuantStorage.FP16: "torch.float16", QuantStorage.FP32: "torch.float32"}
_FSDP = {"fsdp_full_shard": "full_shard auto_wrap", "fsdp_shard_grad_op": "shard_grad_op auto_wrap"}


def zero_stage(plan: Plan) -> int | None:
    """The DeepSpeed ZeRO stage of the plan's strategy (None: not a ZeRO strategy)."""
    return _ZERO_STAGES.get(plan.strategy.value)


def zero3_config(plan: Plan) -> dict[str, Any]:
    """A DeepSpeed ZeRO config for the plan, stage 3 for zero3 (1/2 for zero1/zero2): ``"auto"`` values are filled in
    by the Trainer."""
    bf16, fp16 = _bf16_fp16(plan.precision)
    stage = zero_stage(plan) or 3
    zero: dict[str, Any] = {"stage": stage, "overlap_comm": True, "contiguous_gradients": True, "reduce_bucket_size": "auto"}
    if stage == 3:
        zero.update({"stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
                     "stage3_gather_16bit_weights_on_model_save": True})
    return {
        "zero_optimization": zero,
        "bf16": {"enabled": "auto" if bf16 else False},
        "fp16": {"enabled": "auto" if fp16 else False},
        "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": "auto",
        "gradient_clipping": "auto",
    }


def _arch_for_targets(plan: Plan, config: dict[str, Any] | None) -> Architecture | None:
    """The model's architecture when the plan's LoRA targets are the model's default (None when not needed or unknown)."""
    if plan.lora_targets is not None or plan.method is Method.FULL:
        return None
    try:
        return architecture_or_approximation(config if config is not None else config_from_catalog(plan.model_repo_id)[0])[0]
    except EngineError:
        return None


def _optimizer_code(plan: Plan) -> list[str]:
    """For an optimizer ``TrainingArguments(optim=...)`` cannot name (its record's ``trainer_optim`` is None): a
    comment that says so and the record's ``build_code`` (formatted with the plan's fields); nothing otherwise, so the
    snippet never names another optimizer in its place."""
    rec = plan.optimizer.record
    if rec.trainer_optim is not None:
        return []
    fields = {k: getattr(plan, k) for k in Plan.model_fields}
    return ["", f"# {rec.unnamed_note}", *(line.format(**fields) for line in rec.build_code)]


def training_code(plan: Plan, config: dict[str, Any] | None = None) -> str:
    """Python source with the ``BitsAndBytesConfig`` (QLoRA), ``LoraConfig`` (LoRA/QLoRA), DeepSpeed ZeRO-3 dict
    (zero3 strategy) and ``TrainingArguments`` matching ``plan``: a starting point to copy, not a full script.

    ``config`` (optional) resolves the default LoRA targets of the model; without it, the catalog copy is tried.
    """
    arch = _arch_for_targets(plan, config)
    bf16, fp16 = _bf16_fp16(plan.precision)
    dtype = {PrecisionMode.BF16: "torch.bfloat16", PrecisionMode.FP16: "torch.float16"}.get(plan.precision, "torch.float32")
    amp = plan.precision in (PrecisionMode.AMP_BF16, PrecisionMode.AMP_FP16)
    if plan.trainable_layers is not None and amp:  # freeze-tuning: load in 16 bits, upcast the trainable blocks below
        dtype = "torch.bfloat16" if plan.precision is PrecisionMode.AMP_BF16 else "torch.float16"
    lines = [
        f"# Plan {plan.name!r}: {plan.model_repo_id!r}, {plan.method.value}, {plan.precision.value}, "
        f"{plan.num_gpus} x {plan.gpu} ({plan.strategy.value})",
        "# Generated by finetune-fit as a starting point; check it against your transformers/peft versions.",
        *([f"# The plan's memory follows {plan.framework.value}; this code is the Hugging Face equivalent "
           "(PEFT keeps adapters in fp32, so its memory differs a little)."] if plan.framework is not Framework.HF else []),
        "import torch",
        "from transformers import AutoModelForCausalLM, TrainingArguments",
    ]
    if plan.method is Method.QLORA:
        lines.append("from transformers import BitsAndBytesConfig")
    if plan.method is not Method.FULL:
        lines.append("from peft import LoraConfig, get_peft_model" + (", prepare_model_for_kbit_training"
                                                                     if plan.method is Method.QLORA and plan.prepare_kbit_training else ""))
    lines.append("")
    load_kwargs = [f"    {plan.model_repo_id!r},"]
    if plan.model_revision:
        load_kwargs.append(f"    revision={plan.model_revision!r},")
    load_kwargs.append(f"    attn_implementation={plan.attention.value!r},")
    if plan.method is Method.QLORA:
        compute = "torch.float16" if plan.precision in (PrecisionMode.AMP_FP16, PrecisionMode.FP16) else (
            "torch.float32" if plan.precision is PrecisionMode.FP32 else "torch.bfloat16")
        if plan.quant_type is QuantType.INT8:
            lines += ["bnb_config = BitsAndBytesConfig(load_in_8bit=True)", ""]
        else:
            lines += [
                "bnb_config = BitsAndBytesConfig(",
                "    load_in_4bit=True,",
                f"    bnb_4bit_quant_type={plan.quant_type.value!r},",
                f"    bnb_4bit_use_double_quant={plan.double_quant!r},",
                f"    bnb_4bit_compute_dtype={compute},",
                *([f"    bnb_4bit_quant_storage={_TORCH_DTYPES[plan.quant_storage]},  # lets FSDP / ZeRO-3 shard the 4-bit base"]
                  if plan.quant_storage.is_float else []),
                ")",
                "",
            ]
        load_kwargs.append("    quantization_config=bnb_config,")
    load_kwargs.append(f"    torch_dtype={dtype},")
    lines += ["model = AutoModelForCausalLM.from_pretrained(", *load_kwargs, ")"]
    if plan.method is Method.QLORA and plan.prepare_kbit_training:
        lines.append(f"model = prepare_model_for_kbit_training(model, use_gradient_checkpointing={plan.gradient_checkpointing!r})")
    if plan.trainable_layers is not None:  # freeze-tuning, as LLaMA-Factory's _setup_freeze_tuning selects the blocks
        n = plan.trainable_layers
        lines += [
            f"# Freeze-tuning: only the last {n} decoder blocks train (LLaMA-Factory finetuning_type: freeze)",
            "layers = model.config.num_hidden_layers",
            f"trainable = tuple(f\".{{i}}.\" for i in range(max(0, layers - {n}), layers))",
            "for name, param in model.named_parameters():",
            "    param.requires_grad = any(t in name for t in trainable)",
            *(["    if param.requires_grad:  # mixed precision: the trainable blocks in fp32, the frozen rest 16-bit",
               "        param.data = param.data.float()"] if amp else []),
        ]
        if plan.frozen_input_grads:
            lines.append("model.enable_input_require_grads()  # backward also runs through the frozen blocks")
    if plan.method is not Method.FULL:
        lines += [
            "",
            "lora_config = LoraConfig(",
            f"    r={plan.lora_r!r},",
            f"    lora_alpha={plan.lora_alpha!r},",
            f"    lora_dropout={plan.lora_dropout!r},",
            f"    target_modules={_targets(plan, arch)!r},",
            "    bias='none',",
            "    task_type='CAUSAL_LM',",
            ")",
            "model = get_peft_model(model, lora_config)",
        ]
    if zero_stage(plan):
        lines += ["", f"deepspeed_config = {zero3_config(plan)!r}"]
    lines += [
        "",
        "training_args = TrainingArguments(",
        "    output_dir='out',",
        f"    per_device_train_batch_size={plan.micro_batch_size!r},",
        f"    gradient_accumulation_steps={plan.gradient_accumulation_steps!r},",
        f"    gradient_checkpointing={plan.gradient_checkpointing!r},",
        *(["    gradient_checkpointing_kwargs={'use_reentrant': False},  # frozen inputs: the trainable blocks still get grads"]
          if plan.gradient_checkpointing and plan.trainable_layers is not None and not plan.frozen_input_grads else []),
        f"    bf16={bf16!r},",
        f"    fp16={fp16!r},",
        *([f"    optim={plan.optimizer.hf_name!r},"] if plan.optimizer.hf_name else []),
        f"    num_train_epochs={plan.epochs!r},",
    ]
    if plan.optimizer.hf_optim_args:
        lines.append(f"    optim_args={plan.optimizer.hf_optim_args!r},")
    if plan.fused_cross_entropy:
        lines.append("    use_liger_kernel=True,  # fused linear cross-entropy (pip install liger-kernel)")
    if plan.torch_compile:
        lines.append("    torch_compile=True,")
    if zero_stage(plan):
        lines.append("    deepspeed=deepspeed_config,")
    elif plan.strategy.value in _FSDP:
        lines.append(f"    fsdp={_FSDP[plan.strategy.value]!r},")
    lines += [")", f"# max sequence length: {plan.seq_len} tokens (set it in your tokenizer / data collator or SFTConfig)."]
    lines += _optimizer_code(plan)
    if plan.num_gpus > 1:
        lines.append(f"# Launch on {plan.num_gpus} GPUs, e.g. `torchrun --nproc_per_node {plan.num_gpus} train.py`"
                     + (" (or `deepspeed`)." if zero_stage(plan) else f" ({plan.strategy.value})."))
    return "\n".join(lines) + "\n"
