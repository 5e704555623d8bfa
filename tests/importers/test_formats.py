"""Each format's importer on the example configs of tests/fixtures/training_configs (versions in its README).

Expected values are read off the files and the tools' documented behaviour (/work/research/configs/formats.md, which
names the source and version of each rule): e.g. axolotl's ``bf16: auto`` loads bf16 weights (pure bf16), a bare
TrainingArguments ``bf16: true`` is autocast over fp32 weights, torchtune's ``output_proj`` is Hugging Face's ``o_proj``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.importers import import_configs, parse_training_config
from engine.memory.parallel import Offload, Strategy
from engine.scenario.lora import ALL_LINEAR
from engine.scenario.loss import LossImplementation
from engine.scenario.optimizer import Optimizer
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Attention, Framework, Method, QuantType

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "training_configs"
SEVEN = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def imported(*names: str):
    return import_configs([(n, (FIXTURES / n).read_bytes()) for n in names])


CASES = [
    ("trainer_args.json", "TrainingArguments", None,
     dict(micro_batch_size=4, gradient_accumulation_steps=4, precision=PrecisionMode.AMP_BF16,
          optimizer=Optimizer.PAGED_ADAMW_8BIT, gradient_checkpointing=True, fused_cross_entropy=False),
     {}, {"epochs": 2.0}, {"tf32"}),
    ("trainer_args_v5.json", "TrainingArguments", None,
     dict(micro_batch_size=1, gradient_accumulation_steps=16, precision=PrecisionMode.AMP_BF16,
          optimizer=Optimizer.ADAMW_FUSED, gradient_checkpointing=True, fused_cross_entropy=True, liger_kernels=True),
     {"strategy": Strategy.FSDP_SHARD_GRAD_OP, "offload": Offload.NONE}, {"epochs": 1.0}, set()),
    ("sft_config.yaml", "TRL SFTConfig", "Qwen/Qwen2.5-7B-Instruct",
     dict(method=Method.QLORA, precision=PrecisionMode.BF16, quant_type=QuantType.NF4, double_quant=True, lora_r=32,
          lora_alpha=64.0, lora_dropout=0.05, lora_targets=(ALL_LINEAR,), micro_batch_size=2, seq_len=4096,
          gradient_accumulation_steps=8, gradient_checkpointing=True, attention=Attention.FLASH_ATTENTION_2,
          optimizer=Optimizer.ADAMW_FUSED),
     {}, {"epochs": 1.0, "packing": True}, set()),
    ("sft_config_trl015.yaml", "TRL SFTConfig", "meta-llama/Llama-3.2-1B",
     dict(seq_len=2048, precision=PrecisionMode.BF16, attention=Attention.SDPA, micro_batch_size=8,
          gradient_accumulation_steps=2, gradient_checkpointing=False, optimizer=Optimizer.ADAMW_8BIT),
     {}, {"epochs": 3.0, "packing": False}, set()),
    ("axolotl_qlora.yaml", "axolotl", "meta-llama/Llama-3.1-8B-Instruct",
     dict(method=Method.QLORA, quant_type=QuantType.NF4, double_quant=True, lora_r=16, lora_alpha=32.0, lora_dropout=0.05,
          lora_targets=(ALL_LINEAR,), optimizer=Optimizer.PAGED_ADAMW_8BIT, precision=PrecisionMode.BF16,
          micro_batch_size=2, seq_len=4096, gradient_accumulation_steps=4, gradient_checkpointing=True,
          attention=Attention.FLASH_ATTENTION_2),
     {}, {"epochs": 1.0, "packing": True}, set()),
    ("axolotl_lora_fsdp.yaml", "axolotl", "Qwen/Qwen2.5-14B-Instruct",
     dict(method=Method.LORA, lora_r=32, lora_alpha=64.0, lora_targets=SEVEN, precision=PrecisionMode.BF16,
          optimizer=Optimizer.ADAMW_FUSED, fused_cross_entropy=True, liger_kernels=True, micro_batch_size=1,
          seq_len=8192, gradient_checkpointing=True, attention=Attention.SDPA),
     {"strategy": Strategy.FSDP_FULL_SHARD, "offload": Offload.NONE}, {"epochs": 2.0, "packing": True}, set()),
    # axolotl 0.19.0: peft_use_dora -> DoRA, peft_use_rslora, lora_modules_to_save, loraplus_lr_ratio; the Liger plugin's
    # RMSNorm + GLU (+ RoPE) kernels; activation_offloading: legacy under checkpointing = offloaded layer inputs.
    ("axolotl_dora_liger.yaml", "axolotl", "meta-llama/Llama-3.2-3B",
     dict(method=Method.DORA, lora_r=16, lora_alpha=32.0, lora_dropout=0.05, lora_targets=("q_proj", "k_proj", "v_proj",
          "o_proj"), use_rslora=True, modules_to_save=("embed_tokens", "lm_head"), loraplus_lr_ratio=16.0,
          liger_kernels=True, fused_cross_entropy=True, gradient_checkpointing=True, gradient_checkpointing_offload=True,
          precision=PrecisionMode.BF16, attention=Attention.FLASH_ATTENTION_2, micro_batch_size=2, seq_len=2048),
     {}, {"epochs": 1.0, "packing": True}, set()),
    ("llamafactory_lora.yaml", "LLaMA-Factory", "Qwen/Qwen2.5-7B-Instruct",
     dict(method=Method.LORA, lora_r=16, lora_alpha=32.0, lora_dropout=0.05, lora_targets=(ALL_LINEAR,),
          precision=PrecisionMode.BF16, optimizer=Optimizer.ADAMW, fused_cross_entropy=True, micro_batch_size=2,
          seq_len=4096, gradient_accumulation_steps=8, gradient_checkpointing=True, attention=Attention.FLASH_ATTENTION_2,
          liger_kernels=True),
     {}, {"epochs": 3.0, "packing": False}, set()),
    ("llamafactory_qlora.yaml", "LLaMA-Factory", "meta-llama/Meta-Llama-3-8B-Instruct",
     dict(method=Method.QLORA, quant_type=QuantType.NF4, double_quant=True, lora_r=8, lora_alpha=16.0,
          lora_targets=(ALL_LINEAR,), optimizer=Optimizer.PAGED_ADAMW_8BIT, precision=PrecisionMode.BF16,
          micro_batch_size=1, seq_len=2048, gradient_checkpointing=True, gradient_checkpointing_offload=True,
          attention=Attention.SDPA),
     {}, {"epochs": 3.0}, {"max_samples"}),
    # LLaMA-Factory 0.9.5: use_galore + optim adamw_torch = GaLoreAdamW at galore_rank over every linear ("all").
    ("llamafactory_galore.yaml", "LLaMA-Factory", "meta-llama/Llama-3.2-1B",
     dict(method=Method.FULL, optimizer=Optimizer.GALORE_ADAMW, galore_rank=128, precision=PrecisionMode.BF16,
          fused_cross_entropy=True, liger_kernels=True, gradient_checkpointing=True, gradient_checkpointing_offload=True,
          micro_batch_size=4, seq_len=1024, gradient_accumulation_steps=4, attention=Attention.FLASH_ATTENTION_2),
     {}, {"epochs": 1.0}, set()),
    ("torchtune_lora.yaml", "torchtune recipe", "meta-llama/Llama-3.1-8B-Instruct",
     dict(method=Method.LORA, lora_r=16, lora_alpha=32.0, lora_targets=SEVEN, precision=PrecisionMode.BF16,
          optimizer=Optimizer.ADAMW_FUSED, loss_implementation=LossImplementation.TORCHTUNE_CHUNKED, micro_batch_size=4,
          seq_len=4096, gradient_accumulation_steps=4, gradient_checkpointing=True, attention=Attention.SDPA,
          framework=Framework.TORCHTUNE),
     {}, {"epochs": 1.0, "packing": True}, set()),
    ("torchtune_qlora.yaml", "torchtune recipe", "meta-llama/Llama-3.1-8B-Instruct",
     dict(method=Method.QLORA, quant_type=QuantType.NF4, lora_r=8, lora_alpha=16.0,
          lora_targets=("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), precision=PrecisionMode.BF16,
          micro_batch_size=2, seq_len=2048, gradient_accumulation_steps=8, framework=Framework.TORCHTUNE,
          loss_implementation=LossImplementation.TORCHTUNE_CHUNKED),
     {}, {"epochs": 1.0, "packing": False}, set()),
    ("torchtune_full.yaml", "torchtune recipe", "meta-llama/Llama-3.1-8B-Instruct",
     dict(method=Method.FULL, precision=PrecisionMode.BF16, optimizer=Optimizer.PAGED_ADAMW_8BIT, micro_batch_size=2,
          seq_len=2048, gradient_accumulation_steps=1, gradient_checkpointing=True,
          # compile: True: the run is compiled (its chunked loss runs as torchtune_chunked_compiled: Scenario.loss)
          torch_compile=True),
     {}, {"epochs": 1.0, "packing": True}, {"optimizer_in_bwd", "compile"}),
    ("ds_zero2.json", "DeepSpeed config", None, {}, {"strategy": Strategy.ZERO2, "offload": Offload.NONE}, {},
     {"zero_optimization.reduce_bucket_size"}),
    ("ds_zero3_offload.json", "DeepSpeed config", None,
     dict(micro_batch_size=1, gradient_accumulation_steps=16, precision=PrecisionMode.AMP_BF16,
          optimizer=Optimizer.ADAMW_FUSED),
     {"strategy": Strategy.ZERO3, "offload": Offload.OPTIMIZER_AND_PARAMS}, {},
     {"zero_optimization.stage3_param_persistence_threshold", "zero_optimization.reduce_bucket_size"}),
    ("accelerate_fsdp.yaml", "accelerate config", None, dict(precision=PrecisionMode.AMP_BF16, gradient_checkpointing=True),
     {"strategy": Strategy.FSDP_FULL_SHARD, "offload": Offload.OPTIMIZER_AND_PARAMS, "num_gpus": 8, "gpus_per_node": 8},
     {}, set()),
    ("accelerate_fsdp2.yaml", "accelerate config", None, dict(precision=PrecisionMode.AMP_BF16),
     {"strategy": Strategy.FSDP_FULL_SHARD, "offload": Offload.NONE, "num_gpus": 16, "gpus_per_node": 8}, {}, set()),
    ("accelerate_deepspeed.yaml", "accelerate config", None,
     dict(precision=PrecisionMode.AMP_BF16, gradient_accumulation_steps=4),
     {"strategy": Strategy.ZERO3, "offload": Offload.OPTIMIZER, "num_gpus": 4, "gpus_per_node": 4}, {}, set()),
    ("adapter_config_lora.json", "PEFT adapter_config.json", "meta-llama/Llama-3.1-8B-Instruct",
     dict(method=Method.LORA, lora_r=16, lora_alpha=32.0, lora_dropout=0.05, lora_targets=SEVEN), {}, {}, set()),
    # peft 0.21.2 LoraConfig with use_dora + use_rslora + modules_to_save
    ("adapter_config_dora.json", "PEFT adapter_config.json", "Qwen/Qwen2.5-7B",
     dict(method=Method.DORA, lora_r=32, lora_alpha=16.0, lora_dropout=0.0, use_rslora=True,
          lora_targets=("q_proj", "k_proj", "v_proj", "o_proj"), modules_to_save=("embed_tokens", "lm_head")),
     {}, {}, set()),
    # IA3Config: feedforward_modules = the MLP output projection among the targets (the estimate's rule)
    ("adapter_config_ia3.json", "PEFT adapter_config.json", "meta-llama/Llama-3.2-3B",
     dict(method=Method.IA3, lora_targets=("k_proj", "v_proj", "down_proj")), {}, {}, set()),
    # PrefixTuningConfig without prefix_projection; token_dim / num_layers are GPT-2's own sizes
    ("adapter_config_prefix.json", "PEFT adapter_config.json", "openai-community/gpt2",
     dict(method=Method.PREFIX_TUNING, num_virtual_tokens=30), {}, {}, set()),
    ("adapter_config_vera.json", "PEFT adapter_config.json", "meta-llama/Llama-3.2-3B",
     dict(method=Method.VERA, lora_r=256, lora_dropout=0.0, lora_targets=("q_proj", "v_proj")), {}, {}, set()),
    ("adapter_config_lokr.json", "PEFT adapter_config.json", "meta-llama/Llama-3.2-3B",
     dict(method=Method.LOKR, lora_r=32, lora_alpha=64.0, lora_targets=("q_proj", "v_proj")), {}, {}, set()),
    # AdaLoRA's tensors are built at init_r (64), not LoraConfig's inherited r (8) nor the budget target_r (32)
    ("adapter_config_adalora.json", "PEFT adapter_config.json", "Qwen/Qwen2.5-0.5B",
     dict(method=Method.ADALORA, lora_r=64, lora_alpha=32.0, lora_dropout=0.1, lora_targets=("q_proj", "v_proj")),
     {}, {}, set()),
    ("adapter_config_ptuning.json", "PEFT adapter_config.json", "meta-llama/Llama-3.2-1B",
     dict(method=Method.P_TUNING, num_virtual_tokens=20), {}, {}, set()),
    ("bnb_config.json", "BitsAndBytesConfig", None, dict(method=Method.QLORA, quant_type=QuantType.NF4, double_quant=True),
     {}, {}, set()),
]


@pytest.mark.parametrize(("name", "fmt", "model", "fields", "parallel", "dataset", "unsupported"), CASES,
                         ids=[c[0] for c in CASES])
def test_each_format_maps_its_example(name, fmt, model, fields, parallel, dataset, unsupported):
    r = imported(name)
    assert r.files[0]["format"] == fmt
    assert r.model == model
    for key, value in fields.items():
        assert r.fields.get(key) == value, (key, r.fields.get(key), value)
    assert r.parallel == parallel
    assert r.dataset == dataset
    assert unsupported <= set(r.unsupported), set(r.unsupported)
    # Every unsupported key says its effect; no key is in two lists at once except a Map + Unsupported pair.
    assert all(len(effect) > 20 for effect in r.unsupported.values())
    assert not set(r.ignored) & set(r.mapped)
    # Nothing of the file is silently dropped: every top-level key is reported (itself or keys under it).
    doc = parse_training_config((FIXTURES / name).read_bytes(), name)
    reported = [*r.mapped, *r.ignored, *r.unsupported]
    for key in doc:
        assert any(k == key or k.startswith(key + ".") for k in reported), key
    r.scenario()  # and the result is a valid Scenario


def test_a_method_that_cannot_be_modelled_sets_no_method():
    # TRAINABLE_TOKENS (peft 0.21.2 TrainableTokensConfig): its target_modules are no adapter targets.
    r = import_configs([("a.json", b'{"peft_type": "TRAINABLE_TOKENS", "task_type": "CAUSAL_LM", '
                                   b'"target_modules": ["embed_tokens"], "token_indices": [0, 1]}')])
    assert "method" not in r.fields and "lora_targets" not in r.fields
    assert "trainable tokens" in r.unsupported["peft_type"] and "target_modules" in r.unsupported


def test_adalora_ignores_the_inherited_r():
    r = imported("adapter_config_adalora.json")
    assert r.mapped["init_r"] == 64 and "r" in r.ignored and "target_r" in r.ignored


def test_trainer_and_deepspeed_files_combine():
    # TrainingArguments gives the batch and precision; the DeepSpeed file with "auto" values the ZeRO stage.
    r = imported("trainer_args.json", "ds_zero2.json")
    assert r.fields["micro_batch_size"] == 4 and r.fields["precision"] is PrecisionMode.AMP_BF16
    assert r.parallel["strategy"] is Strategy.ZERO2
    assert "trainer_args.json: per_device_train_batch_size" in r.mapped  # keys named by file when several files


def test_torchtune_checkpoint_dir_names_the_model():
    r = imported("torchtune_lora.yaml")
    assert r.model == "meta-llama/Llama-3.1-8B-Instruct"  # /tmp/Meta-Llama-3.1-8B-Instruct/ (renamed on the Hub)
    assert any("checkpoint_dir" in n for n in r.notes)
