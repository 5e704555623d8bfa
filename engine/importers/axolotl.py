"""axolotl YAML (axolotl 0.19.0 ``utils/schemas/{config,peft,training,fsdp,enums}.py``, ``loaders/model.py``).

Model: ``base_model``. Method: ``adapter`` (absent = full fine-tuning; ``qlora`` requires ``load_in_4bit``;
``lora`` + ``load_in_8bit`` = LoRA over LLM.int8). For ``qlora`` axolotl builds ``BitsAndBytesConfig(nf4, double
quantization)`` and then applies ``bnb_config_kwargs``. Precision: ``bf16: true`` or ``auto`` (the default; bf16 on
GPUs that have it) loads the model in bf16, so full fine-tuning trains pure bf16 weights; ``fp16`` likewise fp16.
``lora_target_linear: true`` = every linear layer (PEFT's ``all-linear``).
"""

from __future__ import annotations

from typing import Any

from engine.errors import ConflictingKeysError, TrainingConfigError
import engine.importers.bnb as bnb
import engine.importers.deepspeed as deepspeed
from engine.importers.table import IGNORE, Handling, Map, Reading, Several, Sub, Unmodelled, Unsupported, check, collect
from engine.importers.trainer import _DS_FILE, COMPILE_EFFECT, finish_galore, liger_kernels
from engine.importers.values import (
    boolean, choice, galore_targets, hf_fsdp, hf_optimizer, integer, names, number, optim_args, positive, saveable,
    sgd_momentum, sharding, text,
)
from engine.memory.parallel import Offload, Strategy
from engine.scenario.lora import ALL_LINEAR
from engine.scenario.optimizer import Optimizer
from engine.scenario.training import Attention, QuantType

FORMAT, VERSION = "axolotl", "0.19.0"

_NO_EFFECT = """
tokenizer_type tokenizer_config tokenizer_use_fast tokenizer_legacy model_type model_config_type trust_remote_code
datasets test_datasets val_set_size dataset_prepared_path dataset_processes shuffle_merged_datasets
output_dir hub_model_id hub_strategy push_dataset_to_hub lr_scheduler learning_rate warmup_ratio warmup_steps
weight_decay adam_beta1 adam_beta2 adam_epsilon max_grad_norm logging_steps saves_per_epoch save_steps
save_strategy save_total_limit evals_per_epoch eval_steps eval_strategy eval_batch_size eval_sample_packing
special_tokens tokens chat_template seed strict wandb_project wandb_entity wandb_name wandb_watch wandb_log_model
wandb_run_id mlflow_tracking_uri resume_from_checkpoint auto_resume_from_checkpoints train_on_inputs group_by_length
early_stopping_patience local_rank xformers_attention_fallback plugins peft_init_lora_weights
loraplus_lr_embedding gradient_checkpointing_kwargs pad_to_sequence_len sample_packing_eff_est
sample_packing_group_size sample_packing_bin_size multipack_real_batches remove_unused_columns deepspeed_config
ddp_timeout ddp_bucket_cap_mb ddp_broadcast_buffers debug lora_fan_in_fan_out lora_model_dir tf32 warmup_steps
num_processes bnb_config_kwargs.bnb_4bit_compute_dtype bnb_config_kwargs.bnb_4bit_quant_storage
""".split()

ADAPTERS = {"lora": "lora", "qlora": "qlora",
            "llama-adapter": Unmodelled("LLaMA-Adapter (adaption prompts): not modelled")}


def _bf16(value: Any, key: str) -> str:
    """``bf16``: true, false or "auto" (axolotl's default: bf16 where the GPU has it)."""
    if value == "auto":
        return "auto"
    return "bf16" if boolean(value, key) else "off"


def _gc(value: Any, key: str) -> Any:
    """``gradient_checkpointing``: true/false, or the deprecated ``offload`` / ``offload_disk``, which axolotl 0.19
    turns into checkpointing plus ``activation_offloading: true`` / ``disk`` (``check_gradient_checkpointing_w_offload``)."""
    if isinstance(value, str) and value.lower() in ("offload", "offload_disk"):
        return Several(gradient_checkpointing=True, ax_offload=True if value.lower() == "offload" else "disk")
    check(isinstance(value, bool), key, "true, false, offload or offload_disk", value)
    return value


OFFLOADING = {True: True, False: False, "legacy": True, "hidden_states": True, "disk": "disk"}
"""``activation_offloading`` (requires checkpointing): ``true`` TRL's offloader, ``legacy`` axolotl's Unsloth-style
offloaded checkpointer, ``hidden_states`` the checkpoints' inputs; under checkpointing each leaves only the layer inputs
to move, to CPU memory. ``disk`` writes them to disk instead."""


KEYS: dict[str, Handling] = {
    **{k: IGNORE for k in _NO_EFFECT},
    "base_model": Map("model", text), "revision_of_model": Map("revision", text),
    "base_model_config": Unsupported("the model's config is read from this other path: pass it with --config"),
    "adapter": Map("ax_adapter", choice(ADAPTERS)),
    "load_in_4bit": Map("load_in_4bit", boolean), "load_in_8bit": Map("load_in_8bit", boolean),
    "gptq": Unsupported("a GPTQ-quantized base: its bytes per weight are not modelled for training"),
    "bnb_config_kwargs": Sub(lambda doc: bnb.read(doc, class_defaults=False), "bnb_config_kwargs must be a mapping"),
    "lora_r": Map("lora_r", integer()), "lora_alpha": Map("lora_alpha", number(0.0)),
    "lora_dropout": Map("lora_dropout", number(0.0, below=1.0)),
    "lora_target_modules": Map("ax_targets", names), "lora_target_linear": Map("ax_target_linear", boolean),
    "lora_modules_to_save": Map("modules_to_save", saveable),
    "peft_use_dora": Map("use_dora", boolean), "peft_use_rslora": Map("use_rslora", boolean),
    "loraplus_lr_ratio": Map("loraplus_lr_ratio", positive),
    "peft_layers_to_transform": Unsupported("adapters on these layers only: fewer trainable parameters than every layer"),
    "peft_autocast_adapter_dtype": Unsupported("false keeps the adapters in the model's dtype instead of fp32"),
    "sequence_len": Map("seq_len", integer()), "sample_packing": Map("packing", boolean),
    "micro_batch_size": Map("micro_batch_size", integer()),
    "gradient_accumulation_steps": Map("gradient_accumulation_steps", integer()),
    "batch_size": Unsupported("global batch: axolotl derives the accumulation steps from it (batch_size / micro batch / "
                              "GPUs); give gradient_accumulation_steps instead"),
    "num_epochs": Map("epochs", number(0.0)),
    "max_steps": Unsupported("training stops after this many steps: the time follows the steps, not the dataset size"),
    "optimizer": Map("optimizer", hf_optimizer), "optim_args": Map("optim_args", optim_args),
    "optim_target_modules": Map("galore_targets", galore_targets),
    "bf16": Map("ax_bf16", _bf16), "fp16": Map("ax_fp16", boolean),
    "bfloat16": Map("ax_load", choice({True: "bf16", False: "off"})),
    "float16": Map("ax_load", choice({True: "fp16", False: "off"})),
    "flash_attention": Map("ax_attn_flash", boolean), "sdp_attention": Map("ax_attn_sdp", boolean),
    "eager_attention": Map("ax_attn_eager", boolean),
    "xformers_attention": Unsupported("xformers memory-efficient attention: not modelled (sdpa is the closest)"),
    "flex_attention": Unsupported("FlexAttention: not modelled"),
    "s2_attention": Unsupported("shifted sparse attention (LongLoRA): not modelled"),
    "attn_implementation": Map("attention", choice({"eager": Attention.EAGER, "sdpa": Attention.SDPA,
                                                    "flash_attention_2": Attention.FLASH_ATTENTION_2})),
    "gradient_checkpointing": Map("gradient_checkpointing", _gc),
    "activation_offloading": Map("ax_offload", choice(OFFLOADING)),
    "deepspeed": Sub(deepspeed.read, _DS_FILE),
    "fsdp": Map("fsdp", hf_fsdp), "fsdp_version": IGNORE,
    "fsdp_config.reshard_after_forward": Map("ax_reshard", sharding),
    "fsdp_config.fsdp_reshard_after_forward": Map("ax_reshard", sharding),
    "fsdp_config.sharding_strategy": Map("ax_reshard", sharding),
    "fsdp_config.fsdp_sharding_strategy": Map("ax_reshard", sharding),
    "fsdp_config.offload_params": Map("ax_fsdp_offload", boolean),
    "fsdp_config.fsdp_offload_params": Map("ax_fsdp_offload", boolean),
    "fsdp_config.activation_checkpointing": Map("ax_fsdp_gc", boolean),
    "fsdp_config.fsdp_activation_checkpointing": Map("ax_fsdp_gc", boolean),
    "fsdp_config.*": IGNORE,
    # Unsupported first: "auto"'s own note (the converter's Unmodelled) replaces it
    "torch_compile": (Unsupported(COMPILE_EFFECT), Map("torch_compile", choice({True: True, False: False, "auto": Unmodelled(
        "auto: axolotl compiles when the installed torch supports it (2.5.1+), which the file does not say; set true or "
        "false")}))),
    "torch_compile_backend": IGNORE, "torch_compile_mode": IGNORE,
    "liger_fused_linear_cross_entropy": Map("fused_cross_entropy", boolean),
    "liger_cross_entropy": Unsupported("Liger's cross-entropy without the fused LM head: saves the fp32 copies of the "
                                       "logits, not the logits; not modelled"),
    "liger_rms_norm": Map("ax_liger_rms", boolean), "liger_rope": Map("ax_liger_rope", boolean),
    "liger_glu_activation": Map("ax_liger_glu", boolean), "liger_swiglu": Map("ax_liger_glu", boolean),  # old name
    "liger_layer_norm": Unsupported("Liger's LayerNorm kernel: saves less than torch's LayerNorm; not modelled (its "
                                    "RMSNorm is)"),
    "liger_rms_norm_gated": Unsupported("Liger's gated RMSNorm (RMSNorm x SiLU gate, linear-attention layers): not "
                                        "modelled"),
    "liger_use_token_scaling": IGNORE, "liger_kernel_impl": IGNORE,
    "cut_cross_entropy": Unsupported("cut cross-entropy never materialises the logits, like the fused cross-entropy "
                                     "switch (turn it on for a close estimate)"),
    "chunked_cross_entropy": Unsupported("chunked cross-entropy: logits in chunks, like the fused cross-entropy switch "
                                         "(turn it on for a close estimate)"),
    "chunked_cross_entropy_num_chunks": IGNORE,
    **{k: Unsupported("axolotl's fused LoRA kernels: less activation memory for the adapted MLP/attention; not modelled")
       for k in ("lora_mlp_kernel", "lora_qkv_kernel", "lora_o_kernel")},
    **{k: Unsupported("tensor/context/sequence parallelism or a sharded data-parallel mesh: not modelled")
       for k in ("tensor_parallel_size", "context_parallel_size", "dp_shard_size", "dp_replicate_size",
                 "sequence_parallel_degree", "tiled_mlp")},
    **{k: Unsupported("removed in axolotl 0.19, which refuses the file (use lora_mlp_kernel, lora_qkv_kernel, "
                      "lora_o_kernel); Unsloth's kernels are not modelled")
       for k in ("unsloth_cross_entropy_loss", "unsloth_lora_mlp", "unsloth_lora_qkv", "unsloth_lora_o",
                 "unsloth_rms_norm", "unsloth_rope")},
}


def matches(doc: dict[str, Any]) -> bool:
    """axolotl: ``base_model`` with one of its own keys (formats.md, decision 8)."""
    own = ("adapter", "sequence_len", "micro_batch_size", "num_epochs", "lora_r", "lora_target_linear", "sample_packing",
           "datasets")
    return "base_model" in doc and any(k in doc for k in own)


def read(doc: dict[str, Any]) -> Reading:
    r = collect(doc, KEYS, FORMAT, VERSION)
    s = r.settings
    adapter = s.pop("ax_adapter", None)
    if adapter == "qlora":
        if not s.get("load_in_4bit"):
            raise TrainingConfigError("adapter: qlora needs load_in_4bit: true (axolotl refuses it otherwise)")
        r.defaults.update(quant_type=QuantType.NF4, double_quant=True)  # axolotl's BitsAndBytesConfig before bnb_config_kwargs
    if adapter is not None or "ax_adapter" in r.sources:
        s["adapter"] = "lora" if adapter else "none"
    elif "adapter" in doc:  # adapter: null -> full fine-tuning
        s["adapter"] = "none"
    else:
        r.defaults["adapter"] = "none"
    if s.get("load_in_8bit") and adapter == "lora":
        s["quant_type"] = QuantType.INT8
    _targets(r)
    _precision(r)
    _attention(r)
    _liger(r)
    _peft_only(r, adapter)
    args = finish_galore(r, s.pop("optim_args", None), "optim_target_modules")
    if sgd_momentum(s.get("optimizer"), args):  # axolotl passes optim_args on to TrainingArguments
        s["optimizer"] = Optimizer.SGD_MOMENTUM
    elif args:
        r.unsupported["optim_args"] = "optimizer arguments beyond SGD's momentum are not modelled"
    s.pop("fsdp_by_reshard", None)
    reshard, offload, fsdp_gc = s.pop("ax_reshard", None), s.pop("ax_fsdp_offload", None), s.pop("ax_fsdp_gc", None)
    if "fsdp_config" in doc and not doc["fsdp_config"]:
        # axolotl turns FSDP on by a non-empty section (its checks read `if cfg.fsdp_config:`, falsy when empty)
        r.notes.append("fsdp_config is empty: axolotl enables FSDP only with settings in it; no FSDP assumed")
    if doc.get("fsdp_config"):
        s.setdefault("strategy", Strategy.FSDP_FULL_SHARD)
        if reshard is not None:
            s["strategy"] = reshard
        if offload is not None:
            s["offload"] = Offload.OPTIMIZER_AND_PARAMS if offload else Offload.NONE
        if fsdp_gc:
            s["gradient_checkpointing"] = True  # FSDP does the checkpointing instead of the Trainer
    _offload(r)
    r.defaults.update(seq_len=512, micro_batch_size=1, gradient_accumulation_steps=1, lora_dropout=0.0)
    return r


def _targets(r: Reading) -> None:
    linear, listed = r.settings.pop("ax_target_linear", None), r.settings.pop("ax_targets", None)
    if linear:
        r.settings["lora_targets"] = (ALL_LINEAR,)  # find_all_linear_names: every linear but the LM head (a union)
    elif listed:
        r.settings["lora_targets"] = listed


def _precision(r: Reading) -> None:
    s = r.settings
    bf16, fp16, load = s.pop("ax_bf16", None), s.pop("ax_fp16", None), s.pop("ax_load", None)
    if bf16 in ("bf16", "auto") and fp16:
        if bf16 == "bf16":
            raise ConflictingKeysError("bf16 and fp16 are both true; axolotl computes in one of them")
        bf16 = "off"  # bf16: auto gives way to an explicit fp16
    forced = load not in (None, "off")  # bfloat16/float16: true load the weights in that dtype, without AMP
    if bf16 is None:
        bf16 = "off" if fp16 else "auto"  # axolotl's default
        if bf16 == "auto" and not forced:
            r.notes.append("bf16 not given: axolotl's default 'auto' (bf16 on GPUs that support it) assumed")
    if bf16 == "auto" and not forced:
        r.notes.append("bf16: auto -> bf16 (GPUs since Ampere support it; older GPUs fall back to fp16)")
    if load == "fp16" and not fp16:
        r.notes.append("float16: true with fp16 off: the weights are loaded and trained in fp16 without autocast or a "
                       "gradient scaler (not Trainer(fp16=True))")
    kind = "bf16" if bf16 in ("bf16", "auto") else "fp16" if fp16 else "off"
    if load not in (None, "off"):
        s["weights_dtype"], s["mixed"] = load, "no"  # bfloat16/float16: true force the load dtype without AMP
    elif kind == "off":
        s["weights_dtype"], s["mixed"] = "fp32", "no"
    else:
        s["weights_dtype"], s["mixed"] = kind, kind  # axolotl loads the model in the AMP dtype
    r.sources.setdefault("weights_dtype", "bf16"), r.sources.setdefault("mixed", "bf16")


def _attention(r: Reading) -> None:
    flags = {Attention.FLASH_ATTENTION_2: r.settings.pop("ax_attn_flash", None),
             Attention.SDPA: r.settings.pop("ax_attn_sdp", None), Attention.EAGER: r.settings.pop("ax_attn_eager", None)}
    on = [a for a, v in flags.items() if v]
    if len(on) > 1:
        raise ConflictingKeysError(f"{' and '.join(a.value for a in on)} attention are all switched on; keep one")
    if on:
        r.set("attention", on[0], "flash_attention" if on[0] is Attention.FLASH_ATTENTION_2 else
              "sdp_attention" if on[0] is Attention.SDPA else "eager_attention")


def _offload(r: Reading) -> None:
    """``activation_offloading`` needs checkpointing (axolotl refuses it otherwise); to CPU memory it is the offloaded
    checkpointing the estimate models."""
    s = r.settings
    if "ax_offload" not in s:
        return
    how, key = s.pop("ax_offload"), r.sources["ax_offload"]
    if how and not s.get("gradient_checkpointing"):
        raise TrainingConfigError(f"{key}: activation_offloading requires gradient_checkpointing (axolotl refuses it "
                                  "otherwise)")
    if how == "disk":
        r.mapped.pop(key, None)
        r.unsupported[key] = ("checkpointed layer inputs offloaded to disk: off the GPU like the CPU offload, but the "
                              "copies go through the disk (time, no CPU RAM); not modelled")
    elif how:
        r.set("gradient_checkpointing_offload", True, key)


def _liger(r: Reading) -> None:
    """The Liger plugin's kernels (axolotl 0.19 ``integrations/liger/args.py``; ``liger_swiglu`` is the old name of
    ``liger_glu_activation``); the fused linear cross-entropy is its own key."""
    s = r.settings
    parts = {n: s.pop(n, None) for n in ("ax_liger_rms", "ax_liger_glu", "ax_liger_rope")}
    if all(v is None for v in parts.values()):
        return
    said = next(r.sources[n] for n, v in parts.items() if v is not None)
    pick = lambda n: (bool(parts[n]), r.sources.get(n, said))  # noqa: E731
    liger_kernels(r, pick("ax_liger_rms"), pick("ax_liger_glu"), pick("ax_liger_rope"))


_PEFT_ONLY = ("use_dora", "use_rslora", "loraplus_lr_ratio", "modules_to_save")


def _peft_only(r: Reading, adapter: Any) -> None:
    """axolotl reads the LoRA keys only when an adapter is trained (loaders/adapter.py): without one they do nothing."""
    if adapter:
        return
    for name in _PEFT_ONLY:
        if name in r.settings:
            r.settings.pop(name)
            key = r.sources[name]
            r.mapped.pop(key, None)
            r.ignored.append(key)
