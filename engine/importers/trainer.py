"""Hugging Face ``TrainingArguments`` (transformers 4.57.6 / 5.24.0) and TRL ``SFTConfig`` + ``ModelConfig``
(trl 0.15.2 - 1.16.0), as JSON (``to_json_string()``) or YAML (``HfArgumentParser`` / ``trl sft --config``).

Precision (formats.md, note P): ``bf16``/``fp16`` switch on autocast only; the weights' dtype is the script's
``from_pretrained(dtype=...)``. TRL's ``dtype`` (ModelConfig, default ``float32``) or ``model_init_kwargs.dtype``
says it; a bare TrainingArguments file does not, and the import assumes fp32 weights (mixed precision), as
transformers 4.57 loads them, and says so (transformers 5 loads ``dtype="auto"``, often bf16).

TRL defaults used when its file is silent (trl 1.16.0 ``SFTConfig``): ``bf16`` true unless ``fp16``,
``gradient_checkpointing`` true, ``max_length`` 1024. The sequence-length key was ``max_seq_length`` up to trl 0.19
and is ``max_length`` from 0.16 on; both are read (different values in one file are a conflict).
"""

from __future__ import annotations

from typing import Any

from engine.errors import ConflictingKeysError
import engine.importers.bnb as bnb
import engine.importers.deepspeed as deepspeed
from engine.importers.table import IGNORE, only_if_true, Handling, Map, Reading, Sub, Unmodelled, Unsupported, collect
from engine.importers.values import (
    attention, boolean, choice, dtype, galore_gap, galore_proj_type, galore_targets, hf_fsdp, hf_optimizer, integer,
    names, number, optim_args, saveable, sgd_momentum, sharding, text,
)
from engine.memory.parallel import Offload, Strategy
from engine.scenario.optimizer import Optimizer
from engine.scenario.training import QuantType

FORMAT_HF, FORMAT_TRL = "TrainingArguments", "TRL SFTConfig"
VERSION_HF, VERSION_TRL = "transformers 4.57.6 / 5.24.0", "trl 0.15.2 - 1.16.0"

_DS_FILE = ("names a DeepSpeed config file (ZeRO stage, offload, precision): import that file as well "
            "(--from-config this.yaml ds_config.json)")
_FSDP_CONFIG_FILE = "names an FSDP config file: import its settings as well (an accelerate config, or inline fsdp_config)"

# Keys of TrainingArguments (5.24.0 dataclass fields, 4.57.6's removed ones too) with no effect on memory or time.
_NO_EFFECT = """
output_dir overwrite_output_dir learning_rate lr_scheduler_type lr_scheduler_kwargs warmup_steps warmup_ratio
weight_decay adam_beta1 adam_beta2 adam_epsilon average_tokens_across_devices max_grad_norm label_smoothing_factor
bf16_full_eval fp16_full_eval fp16_opt_level fp16_backend half_precision_backend torch_compile_backend torch_compile_mode
use_cache neftune_noise_alpha logging_dir logging_strategy logging_steps logging_first_step log_on_each_node
logging_nan_inf_filter include_num_input_tokens_seen include_tokens_per_second log_level log_level_replica disable_tqdm
report_to run_name project trackio_space_id trackio_bucket_id trackio_static_space_id eval_strategy evaluation_strategy
eval_steps eval_delay per_device_eval_batch_size per_gpu_eval_batch_size prediction_loss_only eval_on_start
eval_do_concat_batches eval_use_gather_object eval_accumulation_steps include_for_metrics include_inputs_for_metrics
batch_eval_metrics save_only_model save_strategy save_steps save_on_each_node save_total_limit save_safetensors
enable_jit_checkpoint push_to_hub hub_token hub_private_repo hub_model_id hub_strategy hub_always_push hub_revision
push_to_hub_model_id push_to_hub_organization push_to_hub_token load_best_model_at_end metric_for_best_model
greater_is_better ignore_data_skip restore_callback_states_from_checkpoint full_determinism seed data_seed
accelerator_config dataloader_drop_last dataloader_num_workers dataloader_pin_memory dataloader_persistent_workers
dataloader_prefetch_factor dataloader_multiprocessing_context dataloader_in_order remove_unused_columns label_names
length_column_name ddp_find_unused_parameters ddp_bucket_cap_mb ddp_broadcast_buffers ddp_static_graph ddp_backend
ddp_timeout debug skip_memory_metrics do_train do_eval do_predict resume_from_checkpoint local_rank _n_gpu
past_index jit_mode_eval use_ipex use_mps_device tpu_num_cores tpu_metrics_debug mp_parameters ray_scope
gradient_checkpointing_kwargs.use_reentrant activation_checkpointing_kwargs.use_reentrant split_batches
dispatch_batches eval_do_concat_batches optim_target_modules_kwargs torchdynamo use_legacy_prediction_loop
group_by_length_column hub_private include_num_input_tokens_seen_per_device fsdp_min_num_params
fsdp_transformer_layer_cls_to_wrap
""".split()

# TRL SFTConfig / ModelConfig keys with no effect on memory or time.
_TRL_NO_EFFECT = """
dataset_name dataset_config dataset_train_split dataset_test_split dataset_streaming dataset_text_field
dataset_kwargs dataset_num_proc eos_token pad_token chat_template_path completion_only_loss assistant_only_loss
loss_type packing_strategy pad_to_multiple_of eval_packing shuffle_dataset lora_task_type
trust_remote_code model_revision_hub use_kernels num_of_sequences chars_per_token dataset_batch_size
model_init_kwargs.trust_remote_code model_init_kwargs.revision model_init_kwargs.use_cache
model_init_kwargs.low_cpu_mem_usage model_init_kwargs.device_map bnb_4bit_quant_storage padding_free
""".split()

COMPILE_EFFECT = ("torch.compile of the model's layers: its saved activations (often fewer than eager's) are counted as "
                  "eager; the loss's compiled form and the step time's fused kernels are modelled (torch_compile)")
"""What a compiled run's estimate does not model (the importers' ``torch_compile`` / ``compile`` entries)."""

HF_KEYS: dict[str, Handling] = {
    **{k: IGNORE for k in _NO_EFFECT},
    "per_device_train_batch_size": Map("micro_batch_size", integer()),
    "per_gpu_train_batch_size": Map("micro_batch_size", integer()),
    "gradient_accumulation_steps": Map("gradient_accumulation_steps", integer()),
    "num_train_epochs": Map("epochs", number(0.0)),
    "max_steps": Map("max_steps", integer(-1)),
    "bf16": Map("hf_bf16", boolean), "fp16": Map("hf_fp16", boolean),
    "tf32": Unsupported("TF32 matmuls for the fp32 work: faster than the peak the time model uses for fp32"),
    "optim": Map("optimizer", hf_optimizer), "optim_args": Map("optim_args", optim_args),
    "optim_target_modules": Map("galore_targets", galore_targets),
    "gradient_checkpointing": Map("gradient_checkpointing", boolean),
    "activation_checkpointing": Map("gradient_checkpointing", boolean),
    "gradient_checkpointing_kwargs.offload": Map("gc_offload", boolean),
    "activation_checkpointing_kwargs.offload": Map("gc_offload", boolean),
    "gradient_checkpointing_kwargs.every_n_layers": Unsupported("checkpoints only every n-th layer: more activations kept "
                                                                "than full checkpointing; not modelled"),
    "activation_checkpointing_kwargs.every_n_layers": Unsupported("checkpoints only every n-th layer: more activations "
                                                                  "kept than full checkpointing; not modelled"),
    "torch_compile": (Map("torch_compile", boolean), Unsupported(COMPILE_EFFECT)),
    "use_liger_kernel": Map("liger", boolean), "use_liger": Map("liger", boolean),
    "liger_kernel_config.fused_linear_cross_entropy": Map("liger_flce", boolean),
    "liger_kernel_config.rms_norm": Map("liger_rms_norm", boolean),
    "liger_kernel_config.swiglu": Map("liger_glu", boolean), "liger_kernel_config.geglu": Map("liger_glu", boolean),
    "liger_kernel_config.rope": Map("liger_rope", boolean),
    "liger_kernel_config.cross_entropy": Unsupported("Liger's cross-entropy without the fused LM head: saves the fp32 "
                                                     "copies of the logits, not the logits; not modelled"),
    "liger_kernel_config.*": Unsupported("a Liger kernel option the estimate does not model (it models the fused "
                                         "linear cross-entropy, RMSNorm and SwiGLU/GeGLU)"),
    "deepspeed": Sub(deepspeed.read, _DS_FILE),
    "fsdp": Map("fsdp", hf_fsdp),
    "fsdp_config": Unsupported(_FSDP_CONFIG_FILE),  # a path; an inline dict is walked (fsdp_config.*)
    "fsdp_config.version": IGNORE, "fsdp_config.fsdp_version": IGNORE,
    "fsdp_config.reshard_after_forward": Map("fsdp_reshard", sharding),
    "fsdp_config.fsdp_reshard_after_forward": Map("fsdp_reshard", sharding),
    "fsdp_config.cpu_offload": Map("fsdp_offload", boolean), "fsdp_config.fsdp_cpu_offload": Map("fsdp_offload", boolean),
    "fsdp_config.offload_params": Map("fsdp_offload", boolean),
    "fsdp_config.fsdp_offload_params": Map("fsdp_offload", boolean),
    "fsdp_config.activation_checkpointing": Map("fsdp_activation_checkpointing", only_if_true),
    "fsdp_config.fsdp_activation_checkpointing": Map("fsdp_activation_checkpointing", only_if_true),
    "fsdp_config.*": IGNORE,  # wrap policy, prefetch, state dict type, cpu_ram_efficient_loading, ...
    "torch_empty_cache_steps": Unsupported("empties the CUDA cache every N steps: a lower reserved peak (not the "
                                           "allocated one), about 10% slower"),
    "auto_find_batch_size": Unsupported("halves the micro batch on out-of-memory until a step fits: the run may use a "
                                        "smaller micro batch than this file says"),
    "group_by_length": Unsupported("batches examples of similar length: less padding, so fewer tokens processed than "
                                   "padding each to the sequence length"),
    "train_sampling_strategy": Unsupported("a length-grouping sampler changes the padding: fewer tokens processed than "
                                           "padding each example to the sequence length"),
    "use_cpu": Unsupported("trains on the CPU: no GPU memory estimate applies"),
    "no_cuda": Unsupported("trains on the CPU: no GPU memory estimate applies"),
    "parallelism_config.*": Unsupported("tensor/context/sequence parallelism (accelerate ParallelismConfig): not modelled"),
}
"""TrainingArguments keys (transformers 5.24.0 field names and 4.57.6's)."""

TRL_KEYS: dict[str, Handling] = {
    **{k: IGNORE for k in _TRL_NO_EFFECT},
    "max_length": Map("seq_len", integer()), "max_seq_length": Map("seq_len", integer()),
    "packing": Map("packing", boolean),
    "activation_offloading": Map("act_offload", boolean),
    "model_init_kwargs.dtype": Map("weights_dtype", dtype), "model_init_kwargs.torch_dtype": Map("weights_dtype", dtype),
    "model_init_kwargs.attn_implementation": Map("attention", attention),
    "model_init_kwargs.quantization_config": Sub(bnb.read, "a quantization config object is needed here"),
    "model_name_or_path": Map("model", text), "model_revision": Map("revision", text),
    "dtype": Map("weights_dtype", dtype), "torch_dtype": Map("weights_dtype", dtype),
    "attn_implementation": Map("attention", attention),
    "use_peft": Map("adapter", choice({True: "lora", False: "none"})),
    "lora_r": Map("lora_r", integer()), "lora_alpha": Map("lora_alpha", number(0.0)),
    "lora_dropout": Map("lora_dropout", number(0.0, below=1.0)),
    "lora_target_modules": Map("lora_targets", names),
    "lora_target_parameters": Unsupported("LoRA on parameters (e.g. MoE expert weights) rather than linear modules: "
                                          "not modelled"),
    "lora_modules_to_save": Map("modules_to_save", saveable),
    "use_dora": Map("use_dora", boolean), "use_rslora": Map("use_rslora", boolean),
    "load_in_4bit": Map("load_in_4bit", boolean), "load_in_8bit": Map("load_in_8bit", boolean),
    "bnb_4bit_quant_type": Map("quant_type", choice(bnb.QUANT_TYPES)),
    "use_bnb_nested_quant": Map("double_quant", boolean),
}
"""TRL SFTConfig and ModelConfig keys (trl 1.16.0; ``max_seq_length`` of trl <= 0.19)."""

KEYS: dict[str, Handling] = {**HF_KEYS, **TRL_KEYS}
_TRL_ONLY = ("max_length", "max_seq_length", "packing", "padding_free", "packing_strategy", "dataset_text_field",
             "completion_only_loss", "assistant_only_loss", "activation_offloading", "model_init_kwargs", "use_peft",
             "model_name_or_path", "dataset_name", "use_bnb_nested_quant", "lora_target_modules")
_HF_MARKERS = ("per_device_train_batch_size", "gradient_accumulation_steps", "optim", "output_dir",
               "lr_scheduler_type", "num_train_epochs")


def is_trl(doc: dict[str, Any]) -> bool:
    return any(k in doc for k in _TRL_ONLY)


def matches(doc: dict[str, Any]) -> bool:
    """TrainingArguments or SFTConfig: their trainer keys, or TRL's own (formats.md, decisions 9 and 10)."""
    return is_trl(doc) or any(k in doc for k in _HF_MARKERS)


def read(doc: dict[str, Any]) -> Reading:
    """Read TrainingArguments / SFTConfig (+ ModelConfig) keys."""
    trl = is_trl(doc)
    r = collect(doc, KEYS, FORMAT_TRL if trl else FORMAT_HF, VERSION_TRL if trl else VERSION_HF)
    finish_trainer_keys(r, hf_file=not trl)
    if trl:
        r.defaults.setdefault("gradient_checkpointing", True)
        r.defaults.setdefault("seq_len", 1024)
        if "weights_dtype" not in r.settings:
            r.defaults["weights_dtype"] = "fp32"  # ModelConfig.dtype default "float32" (trl 1.16.0)
        if "mixed" not in r.settings:
            r.defaults["mixed"] = "bf16"  # SFTConfig.bf16 None -> not fp16
        if r.settings.get("load_in_4bit"):  # ModelConfig: bnb_4bit_quant_type "nf4", use_bnb_nested_quant False
            r.defaults.update(quant_type=QuantType.NF4, double_quant=False)
        r.notes.append("TRL >= 1.0 computes the loss through a tiled LM head (no full logits): turn on the fused "
                       "cross-entropy for a closer estimate if your TRL does")
    finish_offload(r)
    return r


def finish_trainer_keys(r: Reading, hf_file: bool) -> None:
    """Combine the TrainingArguments keys that act together: bf16/fp16, optim + optim_args, FSDP, max_steps.

    Shared with the formats that embed TrainingArguments keys (LLaMA-Factory). ``hf_file``: a bare TrainingArguments
    file, whose weights' dtype is unknown (note P).
    """
    bf16, fp16 = r.settings.pop("hf_bf16", None), r.settings.pop("hf_fp16", None)
    if bf16 and fp16:
        raise ConflictingKeysError("bf16 and fp16 are both true; a run computes in one of them (transformers refuses both)")
    if bf16 is not None or fp16 is not None:
        r.set("mixed", "bf16" if bf16 else "fp16" if fp16 else "no", "bf16" if bf16 is not None else "fp16")
        if hf_file and (bf16 or fp16) and "weights_dtype" not in r.settings:
            r.defaults["weights_dtype"] = "fp32"
            r.notes.append("The weights' dtype is the script's from_pretrained(dtype=...), not in this file: fp32 weights "
                           "with autocast assumed (transformers 4.57; transformers 5 loads dtype='auto', often bf16: "
                           "pick pure bf16 then)")
    args = finish_galore(r, r.settings.pop("optim_args", None), "optim_target_modules")
    finish_liger(r)
    if sgd_momentum(r.settings.get("optimizer"), args):
        r.settings["optimizer"] = Optimizer.SGD_MOMENTUM
    elif args:
        r.unsupported["optim_args"] = "optimizer arguments beyond SGD's momentum are not modelled"
    reshard, offload = r.settings.pop("fsdp_reshard", None), r.settings.pop("fsdp_offload", None)
    by_reshard = r.settings.pop("fsdp_by_reshard", False)
    if reshard is not None and by_reshard:
        r.settings["strategy"] = reshard
    elif reshard is not None and r.settings.get("strategy") in (Strategy.FSDP_FULL_SHARD, Strategy.FSDP_SHARD_GRAD_OP):
        r.set("strategy", reshard, r.sources["fsdp_reshard"])
    if offload is not None:
        r.set("offload", Offload.OPTIMIZER_AND_PARAMS if offload else Offload.NONE, "fsdp_config.cpu_offload")
    steps = r.settings.pop("max_steps", None)
    if steps is not None and steps > 0:
        r.mapped.pop("max_steps", None)
        r.unsupported["max_steps"] = (f"training stops after {steps} optimizer steps: the time follows the steps, not the "
                                      "dataset size and epochs; give the dataset as steps x global batch x sequence length tokens")


def finish_galore(r: Reading, args: dict[str, str] | None, targets_key: str) -> dict[str, str] | None:
    """``optim: galore_adamw``: its rank and SVD period from ``optim_args`` (transformers 4.57.6 / 5.24.0 read
    ``rank``, ``update_proj_gap``, ``scale``, ``proj_type``; rank 128 by default, as the Scenario's), its targets
    checked. Returns the optimizer arguments left for the other optimizers (None when GaLore took them)."""
    s = r.settings
    targets = s.pop("galore_targets", None)
    if not (isinstance(s.get("optimizer"), Optimizer) and s["optimizer"].record.galore):
        if targets is not None:
            r.mapped.pop(targets_key, None)
            if any(k in r.unsupported for k in ("optim", "optimizer")):
                r.unsupported[targets_key] = "part of the optimizer's configuration (optim), which is not modelled"
            else:
                r.ignored.append(targets_key)  # read by GaLore and APOLLO only
        return args
    if targets is None and targets_key not in r.unsupported:
        r.notes.append(f"{targets_key} not given: transformers refuses GaLore without it; every linear layer of the "
                       "decoder blocks assumed")
    for name, value in (args or {}).items():
        key = f"optim_args.{name}"
        if name == "rank":
            r.set("galore_rank", integer()(_number(value), key), key)
            continue
        done = {"update_proj_gap": galore_gap, "proj_type": galore_proj_type}.get(name)
        result = done(_number(value) if name == "update_proj_gap" else value, key) if done else None
        if isinstance(result, Unmodelled):
            r.unsupported[key] = result.effect
        elif done is None and name != "scale":  # the scale only multiplies the update
            r.unsupported[key] = "a GaLore argument the estimate does not model"
    return None


def _number(value: str) -> Any:
    try:
        return int(value)
    except ValueError:
        return value


def finish_liger(r: Reading) -> None:
    """``use_liger_kernel``: transformers applies the model's Liger patch with its defaults (rope, rms_norm, swiglu
    and fused_linear_cross_entropy on, cross_entropy off: liger-kernel 0.8.5), overridden by ``liger_kernel_config``
    (transformers 5.24.0 ``integrations/liger.py``); without ``use_liger_kernel`` the config does nothing."""
    s = r.settings
    on = s.pop("liger", None)
    parts = {name: s.pop(name, None) for name in ("liger_flce", "liger_rms_norm", "liger_glu", "liger_rope")}
    config_keys = [r.sources[n] for n, v in parts.items() if v is not None]
    if not on:
        for key in config_keys:
            r.mapped.pop(key, None)
            r.ignored.append(key)
        if on is False:
            r.set("fused_cross_entropy", False, r.sources["liger"])
            r.set("liger_kernels", False, r.sources["liger"])
        return
    key = r.sources["liger"]
    flce = parts["liger_flce"]
    r.set("fused_cross_entropy", True if flce is None else flce, key if flce is None else r.sources["liger_flce"])
    pick = lambda n: (True, key) if parts[n] is None else (parts[n], r.sources[n])  # noqa: E731
    liger_kernels(r, pick("liger_rms_norm"), pick("liger_glu"), pick("liger_rope"))


def liger_kernels(r: Reading, rms: tuple[bool, str], glu: tuple[bool, str], rope: tuple[bool, str]) -> None:
    """Liger's RMSNorm, SwiGLU/GeGLU and RoPE kernels, each (on, the key that says so): the scenario's
    ``liger_kernels`` models RMSNorm and the gated activation together (RoPE fuses in place, no memory term), so one
    without the other is reported rather than given the other's saving."""
    if rms[0] and glu[0]:
        r.set("liger_kernels", True, rms[1])
        return
    for (on, key), name in ((rms, "RMSNorm"), (glu, "SwiGLU/GeGLU"), (rope, "RoPE")):
        if on:
            r.unsupported[key] = (f"Liger's {name} kernel without its RMSNorm and SwiGLU together: the estimate's Liger "
                                  "switch models those two at once; not modelled alone")
    if not rms[0] and not glu[0]:
        r.set("liger_kernels", False, rms[1])


def finish_offload(r: Reading, default_gc: bool | None = None) -> None:
    """Offloaded checkpointing (transformers 5.24 ``activation_checkpointing_kwargs.offload``: the recompute's saved
    inputs in pinned host memory; TRL ``activation_offloading``, which under checkpointing leaves only those inputs
    to offload): ``gradient_checkpointing_offload`` when checkpointing is on. ``activation_offloading`` without
    checkpointing moves every saved activation, which is not modelled; the transformers flag then does nothing."""
    s = r.settings
    gc = s.get("gradient_checkpointing", r.defaults.get("gradient_checkpointing", default_gc))
    for name in ("gc_offload", "act_offload"):
        if name not in s:
            continue
        on, key = s.pop(name), r.sources[name]
        if on and gc:
            r.set("gradient_checkpointing_offload", True, key)
        elif on and name == "act_offload":
            r.mapped.pop(key, None)
            r.unsupported[key] = ("every saved activation moved to CPU memory (no checkpointing): fewer activations on "
                                  "the GPU, more host traffic; not modelled (with gradient_checkpointing it is)")
        elif on:
            r.mapped.pop(key, None)
            r.ignored.append(key)  # checkpointing off: nothing to offload
