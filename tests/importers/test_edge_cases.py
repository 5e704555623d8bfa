"""Edge cases of single keys, each against the tool's documented behaviour (formats.md names the source version)."""

from __future__ import annotations

import pytest

from engine.errors import TrainingConfigError
from engine.importers import import_configs
from engine.memory.parallel import Offload, Strategy
from engine.scenario.lora import ALL_LINEAR
from engine.scenario.optimizer import Optimizer
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Method, QuantType


def one(text: str, name: str = "config.yaml"):
    return import_configs([(name, text.encode())])


AXOLOTL = "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\n"


@pytest.mark.parametrize(("extra", "precision"), [
    ("bf16: auto\n", PrecisionMode.BF16),       # axolotl's default: bf16 where supported, model loaded in bf16
    ("", PrecisionMode.BF16),                   # bf16 absent = auto
    ("bf16: true\n", PrecisionMode.BF16),
    ("bf16: false\nfp16: true\n", PrecisionMode.FP16),
    ("bf16: auto\nfp16: true\n", PrecisionMode.FP16),  # an explicit fp16 wins over auto
    ("bf16: false\n", PrecisionMode.FP32),
])
def test_axolotl_bf16(extra, precision):
    assert one(AXOLOTL + extra).fields["precision"] is precision


def test_axolotl_lora_target_linear_is_all_linear_and_wins_over_a_list():
    r = one(AXOLOTL + "adapter: lora\nlora_target_linear: true\nlora_target_modules: [q_proj]\n")
    assert r.fields["lora_targets"] == (ALL_LINEAR,) and r.fields["method"] is Method.LORA


def test_axolotl_qlora_defaults_to_nf4_double_quant_and_bnb_kwargs_override():
    base = AXOLOTL + "adapter: qlora\nload_in_4bit: true\n"
    r = one(base)
    assert (r.fields["method"], r.fields["quant_type"], r.fields["double_quant"]) == (Method.QLORA, QuantType.NF4, True)
    r = one(base + "bnb_config_kwargs:\n  bnb_4bit_quant_type: fp4\n  bnb_4bit_use_double_quant: false\n")
    assert (r.fields["quant_type"], r.fields["double_quant"]) == (QuantType.FP4, False)


def test_axolotl_lora_over_int8():
    r = one(AXOLOTL + "adapter: lora\nload_in_8bit: true\n")
    assert (r.fields["method"], r.fields["quant_type"]) == (Method.QLORA, QuantType.INT8)


def test_axolotl_offload_checkpointing_is_checkpointing_with_offloaded_inputs():
    # axolotl 0.19: gradient_checkpointing: offload = checkpointing + activation_offloading (to CPU memory)
    r = one(AXOLOTL + "gradient_checkpointing: offload\n")
    assert r.fields["gradient_checkpointing"] is True and r.fields["gradient_checkpointing_offload"] is True
    r = one(AXOLOTL + "gradient_checkpointing: offload_disk\n")  # to disk: not the CPU offload the estimate models
    assert r.fields["gradient_checkpointing"] is True and "gradient_checkpointing_offload" not in r.fields
    assert "disk" in r.unsupported["gradient_checkpointing"]


TRL = "model_name_or_path: Qwen/Qwen3-0.6B\nmax_length: 1024\n"


@pytest.mark.parametrize(("extra", "fields"), [
    ("lora_target_modules: all-linear\nuse_peft: true\n", {"lora_targets": (ALL_LINEAR,), "method": Method.LORA}),
    ("use_peft: true\nload_in_4bit: true\n", {"method": Method.QLORA, "quant_type": QuantType.NF4}),
    ("use_peft: true\nload_in_8bit: true\n", {"method": Method.QLORA, "quant_type": QuantType.INT8}),
    ("", {"precision": PrecisionMode.AMP_BF16, "gradient_checkpointing": True}),  # TRL: bf16 on, fp32 ModelConfig dtype
    ("dtype: bfloat16\n", {"precision": PrecisionMode.BF16}),
    ("dtype: auto\n", {"precision": PrecisionMode.BF16}),
    ("fp16: true\n", {"precision": PrecisionMode.AMP_FP16}),
    ("dtype: float16\nbf16: false\n", {"precision": PrecisionMode.FP16}),
    ("bf16: false\n", {"precision": PrecisionMode.FP32}),
])
def test_trl_keys(extra, fields):
    r = one(TRL + extra)
    for key, value in fields.items():
        assert r.fields[key] == value, key


def test_max_seq_length_and_max_length_are_the_same_setting():
    # trl <= 0.19 spelled it max_seq_length; 0.16-0.19 accept both.
    assert one("model_name_or_path: a/b\nmax_seq_length: 4096\n").fields["seq_len"] == 4096
    assert one("model_name_or_path: a/b\nmax_seq_length: 4096\nmax_length: 4096\n").fields["seq_len"] == 4096


def test_deepspeed_auto_values_set_nothing_and_say_so():
    r = one('{"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",'
            ' "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}', "ds.json")
    assert r.fields == {} and r.parallel["strategy"] is Strategy.ZERO3
    assert "train_micro_batch_size_per_gpu" in r.ignored and any('"auto"' in n for n in r.notes)


def test_deepspeed_train_batch_size_gives_the_gpu_count():
    r = one('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,'
            ' "zero_optimization": {"stage": 1}}', "ds.json")
    assert r.parallel["num_gpus"] == 8  # 64 / (2 x 4)


def test_deepspeed_nvme_offload_is_unsupported():
    r = one('{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}, '
            '"offload_optimizer": {"device": "nvme"}}}', "ds.json")
    assert "ZeRO-Infinity" in r.unsupported["zero_optimization.offload_param.device"]


@pytest.mark.parametrize(("fsdp", "strategy", "offload"), [
    ('"full_shard auto_wrap"', Strategy.FSDP_FULL_SHARD, None),
    ('"shard_grad_op auto_wrap"', Strategy.FSDP_SHARD_GRAD_OP, None),
    ('["full_shard", "offload"]', Strategy.FSDP_FULL_SHARD, Offload.OPTIMIZER_AND_PARAMS),
    ('"no_shard"', Strategy.DDP, None),
])
def test_trainer_fsdp_strings(fsdp, strategy, offload):
    r = one(f'{{"per_device_train_batch_size": 1, "fsdp": {fsdp}}}', "args.json")
    assert r.parallel.get("strategy") is strategy and r.parallel.get("offload") is offload


def test_hybrid_shard_is_unsupported():
    r = one('{"per_device_train_batch_size": 1, "fsdp": "hybrid_shard auto_wrap"}', "args.json")
    assert "strategy" not in r.parallel and "HYBRID_SHARD" in r.unsupported["fsdp"]


def test_optimizers():
    assert one('{"per_device_train_batch_size": 1, "optim": "sgd", "optim_args": "momentum=0.9"}', "a.json"
               ).fields["optimizer"] is Optimizer.SGD_MOMENTUM


def test_trainer_galore_adamw_with_its_rank_and_targets():
    # transformers 5.24.0: optim galore_adamw, rank from optim_args (default 128), optim_target_modules needed
    r = one('{"per_device_train_batch_size": 1, "optim": "galore_adamw", "optim_args": "rank=256, update_proj_gap=200, '
            'scale=0.25, proj_type=std", "optim_target_modules": ["attn", "mlp"]}', "a.json")
    assert (r.fields["optimizer"], r.fields["galore_rank"]) == (Optimizer.GALORE_ADAMW, 256) and r.unsupported == {}
    r = one('{"per_device_train_batch_size": 1, "optim": "galore_adamw", "optim_target_modules": ["q_proj"]}', "a.json")
    assert "q_proj only" in r.unsupported["optim_target_modules"]
    r = one('{"per_device_train_batch_size": 1, "optim": "galore_adamw_layerwise"}', "a.json")
    assert "optimizer" not in r.fields and "layer-wise" in r.unsupported["optim"]
    r = one('{"per_device_train_batch_size": 1, "optim": "galore_adamw", "optim_args": "update_proj_gap=50"}', "a.json")
    assert "50 steps" in r.unsupported["optim_args.update_proj_gap"] and any("optim_target_modules" in n for n in r.notes)


def test_llamafactory_defaults_lora_rank_8_alpha_16_all_and_checkpointing():
    r = one("model_name_or_path: a/b\nstage: sft\n")
    assert (r.fields["method"], r.fields["lora_r"], r.fields["lora_alpha"], r.fields["lora_targets"]) == \
        (Method.LORA, 8, 16.0, (ALL_LINEAR,))
    assert r.fields["gradient_checkpointing"] is True and r.fields["seq_len"] == 2048


def test_llamafactory_full_bf16_is_mixed_and_pure_bf16_is_pure():
    base = "model_name_or_path: a/b\nfinetuning_type: full\n"
    assert one(base + "bf16: true\n").fields["precision"] is PrecisionMode.AMP_BF16
    assert one(base + "pure_bf16: true\n").fields["precision"] is PrecisionMode.BF16


def test_bnb_config_class_defaults_are_fp4_without_double_quant():
    r = one('{"load_in_4bit": true}', "bnb.json")
    assert (r.fields["quant_type"], r.fields["double_quant"]) == (QuantType.FP4, False)


def test_same_format_later_file_overrides_and_typed_overrides_win():
    a = ("a.yaml", b"base_model: x/y\nmicro_batch_size: 2\nsequence_len: 1024\n")
    b = ("b.yaml", b"base_model: x/y\nmicro_batch_size: 8\n")
    r = import_configs([a, b])
    assert r.fields["micro_batch_size"] == 8 and r.fields["seq_len"] == 1024
    assert r.scenario(overrides={"micro_batch_size": 3}).micro_batch_size == 3


def test_a_tools_default_gives_way_to_another_files_value():
    # TRL assumes bf16; a DeepSpeed file that says fp16 is not a conflict with that assumption.
    r = import_configs([("sft.yaml", TRL.encode()), ("ds.json", b'{"fp16": {"enabled": true}, "zero_optimization": {"stage": 2}}')])
    assert r.fields["precision"] is PrecisionMode.AMP_FP16


def test_model_config_json_with_a_quantization_config():
    r = one('{"model_type": "llama", "hidden_size": 4096, "quantization_config": {"quant_method": "bitsandbytes",'
            ' "load_in_4bit": true, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true}}', "config.json")
    assert r.fields["method"] is Method.QLORA and r.fields["quant_type"] is QuantType.NF4
    assert "hidden_size" in r.ignored


# --- PEFT methods and training tricks, per format (versions: formats.md / peft_methods.md) ----------------------------

def test_trainer_liger_kernel_config_overrides_the_defaults():
    # transformers 5.24.0 applies liger_kernel_config over the model's defaults, only with use_liger_kernel
    base = '{"per_device_train_batch_size": 1, "use_liger_kernel": true'
    r = one(base + "}", "a.json")
    assert r.fields["fused_cross_entropy"] is True and r.fields["liger_kernels"] is True
    r = one(base + ', "liger_kernel_config": {"fused_linear_cross_entropy": false, "swiglu": false}}', "a.json")
    assert r.fields["fused_cross_entropy"] is False and "liger_kernels" not in r.fields
    assert "RMSNorm" in r.unsupported["use_liger_kernel"]  # RMSNorm on (default) without SwiGLU: not modelled alone
    r = one('{"per_device_train_batch_size": 1, "liger_kernel_config": {"rms_norm": true}}', "a.json")
    assert "liger_kernels" not in r.fields and "liger_kernel_config.rms_norm" in r.ignored


def test_trainer_checkpointing_offload_only_under_checkpointing():
    on = one('{"per_device_train_batch_size": 1, "activation_checkpointing": true, '
             '"activation_checkpointing_kwargs": {"offload": true}}', "a.json")
    assert on.fields["gradient_checkpointing_offload"] is True
    off = one('{"per_device_train_batch_size": 1, "gradient_checkpointing_kwargs": {"offload": true}}', "a.json")
    assert "gradient_checkpointing_offload" not in off.fields and "gradient_checkpointing_kwargs.offload" in off.ignored


def test_trl_peft_keys_and_activation_offloading():
    # trl 1.16.0 ModelConfig: use_dora, use_rslora, lora_modules_to_save; SFTConfig activation_offloading
    r = one(TRL + "use_peft: true\nuse_dora: true\nuse_rslora: true\nlora_modules_to_save: [lm_head]\n"
            "activation_offloading: true\n")
    assert (r.fields["method"], r.fields["use_rslora"], r.fields["modules_to_save"]) == (Method.DORA, True, ("lm_head",))
    assert r.fields["gradient_checkpointing_offload"] is True  # TRL's checkpointing default is on
    r = one(TRL + "gradient_checkpointing: false\nactivation_offloading: true\n")
    assert "every saved activation" in r.unsupported["activation_offloading"]


def test_qdora_stays_qlora_and_says_so():
    r = one(TRL + "use_peft: true\nuse_dora: true\nload_in_4bit: true\n")
    assert r.fields["method"] is Method.QLORA and "QDoRA" in r.unsupported["use_dora"]


def test_modules_to_save_the_estimate_cannot_copy():
    r = one(AXOLOTL + "adapter: lora\nlora_modules_to_save: [score]\n")
    assert "modules_to_save" not in r.fields and "score" in r.unsupported["lora_modules_to_save"]


def test_axolotl_peft_keys_do_nothing_without_an_adapter():
    r = one(AXOLOTL + "peft_use_dora: true\nloraplus_lr_ratio: 16\n")
    assert r.fields["method"] is Method.FULL and "loraplus_lr_ratio" not in r.fields
    assert {"peft_use_dora", "loraplus_lr_ratio"} <= set(r.ignored)


def test_axolotl_liger_rms_norm_alone_and_removed_unsloth_keys():
    r = one(AXOLOTL + "liger_rms_norm: true\nunsloth_lora_mlp: true\n")
    assert "liger_kernels" not in r.fields and "RMSNorm" in r.unsupported["liger_rms_norm"]
    assert "removed in axolotl 0.19" in r.unsupported["unsloth_lora_mlp"]


def test_axolotl_activation_offloading_needs_checkpointing():
    with pytest.raises(TrainingConfigError, match="requires gradient_checkpointing"):
        one(AXOLOTL + "activation_offloading: true\n")


LF = "model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\n"


def test_llamafactory_lora_tricks():
    r = one(LF + "finetuning_type: lora\nuse_dora: true\nuse_rslora: true\nadditional_target: embed_tokens,lm_head\n"
            "loraplus_lr_ratio: 16.0\n")
    assert (r.fields["method"], r.fields["use_rslora"], r.fields["loraplus_lr_ratio"]) == (Method.DORA, True, 16.0)
    assert r.fields["modules_to_save"] == ("embed_tokens", "lm_head")


def test_llamafactory_galore_rules():
    full = LF + "finetuning_type: full\nuse_galore: true\n"
    r = one(full + "optim: adamw_torch\n")
    assert (r.fields["optimizer"], r.fields["galore_rank"]) == (Optimizer.GALORE_ADAMW, 16)  # galore_rank default 16
    assert "8-bit" in one(full + "optim: paged_adamw_8bit\n").unsupported["use_galore"]
    with pytest.raises(TrainingConfigError, match="Cannot use LoRA with GaLore"):
        one(LF + "use_galore: true\n")  # finetuning_type defaults to lora
    with pytest.raises(TrainingConfigError, match="adamw_torch"):
        one(full + "optim: lion_8bit\n")
    r = one(LF + "finetuning_type: full\ngalore_rank: 64\n")  # no use_galore: the GaLore keys do nothing
    assert "galore_rank" not in r.fields and "galore_rank" in r.ignored
    r = one(LF + "disable_gradient_checkpointing: true\nuse_unsloth_gc: true\n")
    assert "gradient_checkpointing_offload" not in r.fields and "use_unsloth_gc" in r.ignored


TT = ("model:\n  _component_: torchtune.models.llama3_2.lora_llama3_2_1b\n  lora_attn_modules: [q_proj, v_proj]\n"
      "  use_dora: true\nenable_activation_checkpointing: true\n")


def test_torchtune_dora_and_activation_offloading():
    # torchtune 0.6.1: the lora builders' use_dora; enable_activation_offloading needs activation checkpointing
    r = one(TT + "enable_activation_offloading: true\n")
    assert r.fields["method"] is Method.DORA and r.fields["gradient_checkpointing_offload"] is True
    with pytest.raises(TrainingConfigError, match="enable_activation_checkpointing"):
        one(TT.replace("enable_activation_checkpointing: true", "enable_activation_checkpointing: false")
            + "enable_activation_offloading: true\n")


@pytest.mark.parametrize(("doc", "key", "word"), [
    ('"peft_type": "PREFIX_TUNING", "num_virtual_tokens": 10, "prefix_projection": true', "prefix_projection", "MLP"),
    ('"peft_type": "P_TUNING", "num_virtual_tokens": 10, "encoder_reparameterization_type": "LSTM"',
     "encoder_reparameterization_type", "LSTM"),
    ('"peft_type": "P_TUNING", "num_virtual_tokens": 10, "token_dim": 2048, "encoder_hidden_size": 512',
     "encoder_hidden_size", "512"),
    ('"peft_type": "LOKR", "r": 8, "decompose_both": true', "decompose_both", "decompose_both"),
    ('"peft_type": "LOHA", "r": 8, "rank_dropout": 0.1', "rank_dropout", "dropout"),
    ('"peft_type": "IA3", "target_modules": ["k_proj", "v_proj", "down_proj"], "feedforward_modules": ["k_proj"]',
     "feedforward_modules", "input"),
])
def test_peft_method_details_the_estimate_cannot_model(doc, key, word):
    r = one("{" + doc + "}", "adapter_config.json")
    assert word in r.unsupported[key] and "method" in r.fields


def test_peft_defaults_per_method():
    # VeraConfig r 256, LoHaConfig r 8 / alpha 8, AdaLoraConfig init_r 12 (peft 0.21.2)
    assert one('{"peft_type": "VERA"}', "a.json").scenario().lora_r == 256
    assert one('{"peft_type": "LOHA"}', "a.json").scenario().lora_r == 8
    assert one('{"peft_type": "ADALORA", "r": 8}', "a.json").scenario().lora_r == 12
    sc = one('{"peft_type": "PROMPT_TUNING", "num_virtual_tokens": 200, "token_dim": 3072}', "a.json").scenario()
    assert (sc.method, sc.num_virtual_tokens) == (Method.PROMPT_TUNING, 200)
