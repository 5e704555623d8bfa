"""Edge cases of single keys, each against the tool's documented behaviour (formats.md names the source version)."""

from __future__ import annotations

import pytest

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


def test_axolotl_offloaded_checkpointing_is_unsupported_not_plain_checkpointing():
    r = one(AXOLOTL + "gradient_checkpointing: offload\n")
    assert "gradient_checkpointing" not in r.fields and "CPU" in r.unsupported["gradient_checkpointing"]


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
    r = one('{"per_device_train_batch_size": 1, "optim": "galore_adamw"}', "a.json")
    assert "optimizer" not in r.fields and "GaLore" in r.unsupported["optim"]


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
