"""Frozen bases stored quantized (GPTQ, AWQ, FP8, bitsandbytes) and QLoRA's 4-bit base: their stored format under
mixed precision (issue 16 item 2) and over many GPUs, where FSDP / ZeRO-3 shard only float parameters (item 6).

Fixtures: tests/fixtures/quantized/README.md names the published quantization_config of each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy, plan_parallel
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scenario.training import Scenario

QUANTIZED = Path(__file__).resolve().parents[1] / "fixtures" / "quantized"


def fixture_arch(name: str):
    return architecture_from_config(json.loads((QUANTIZED / f"{name}.json").read_text()))


def test_prequantized_base_under_mixed_precision_keeps_its_stored_format():
    # issue 16 item 2: Qwen-7B-Chat-Int4 (GPTQ 4-bit, group 128; tests/fixtures/quantized/README.md) with LoRA under
    # mixed fp16 (DeepSpeed fp16 / Trainer fp16=True). Block linears: 32 x (4096 x 12288 + 4096^2 + 3 x 4096 x 11008)
    # = 6,476,005,376 weights at 0.5 + 2/128 + 0.5/128 B; embeddings, LM head and norms (1,245,319,168) at 2 B, as
    # the GPTQ loader leaves them (torch_dtype float16): about 5.5 GiB, the same as in pure fp16, never 4 B.
    arch = fixture_arch("Qwen__Qwen-7B-Chat-Int4")
    linear = 32 * (4096 * 3 * 4096 + 4096 * 4096 + 3 * 4096 * 11008)
    assert linear == 6_476_005_376 and arch.total_parameters == 7_721_324_544
    packed = linear * (0.5 + 2 / 128 + 0.5 / 128)
    for precision in ("amp_fp16", "amp_bf16", "fp16"):
        sc = Scenario.build(method="lora", precision=precision)
        est = estimate_memory(arch, sc)
        adapters = est.trainable_parameters * 4  # PEFT's fp32 adapters
        expected = packed + (7_721_324_544 - linear) * 2 + adapters
        assert est.parts_by_key["weights"].bytes == pytest.approx(expected), precision
        assert est.parts_by_key["weights"].bytes < 6 * 2**30
        # DeepSpeed ZeRO-2 with mixed fp16/bf16 runs the model in 16 bits (fp32 masters in the optimizer): the packed
        # linears stay as stored (was 14.4 GiB per GPU: every parameter at 2 B). Pure fp16 keeps the estimate's weights.
        zero2 = plan_parallel(est, arch, sc, Strategy.ZERO2).components_per_gpu(2)["weights"]
        sixteen_bit = packed + (7_721_324_544 - linear + est.trainable_parameters) * 2
        assert zero2 == pytest.approx(sixteen_bit if precision.startswith("amp") else expected), precision
        assert zero2 < 6 * 2**30


# --- item 6: quantized bases over many GPUs --------------------------------------------------------------------------

LLAMA_8B = config_from_catalog("meta-llama/Llama-3.1-8B")[0]
# Llama-3.1-8B's block linears: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336)
LINEAR_8B = 6_979_321_856
GPTQ_BPP = 0.5 + 2 / 128 + 0.5 / 128


def _llama(quantization_config=None):
    cfg = dict(LLAMA_8B)
    if quantization_config is not None:
        cfg["quantization_config"] = quantization_config
    return architecture_from_config(cfg)


def test_gptq_lora_under_fsdp_replicates_the_packed_base_and_uses_more_per_gpu_than_lora_on_8_gpus():
    # Public reports (e.g. GPTQ-LoRA vs LoRA under FSDP on 8 GPUs) show the quantized run using more memory per GPU:
    # FSDP shards the bf16 base 8 ways (16.06 GB / 8 = 2.0 GB), but GPTQ's qweight/qzeros/scales are int32 buffers,
    # which FSDP does not shard, so each GPU holds all 6,979,321,856 packed weights at 0.5195 B (3.63 GB).
    sc = Scenario.build(method="lora", precision="bf16", seq_len=512, gradient_checkpointing=True)
    lora_arch, gptq_arch = _llama(), _llama({"quant_method": "gptq", "bits": 4, "group_size": 128})
    lora = plan_parallel(estimate_memory(lora_arch, sc), lora_arch, sc, Strategy.FSDP_FULL_SHARD)
    gptq = plan_parallel(estimate_memory(gptq_arch, sc), gptq_arch, sc, Strategy.FSDP_FULL_SHARD)
    assert gptq.replicated_quantized_bytes == pytest.approx(LINEAR_8B * GPTQ_BPP)
    assert "replicated on every GPU" in gptq.replicated_note and "buffers" in gptq.replicated_note
    assert lora.replicated_quantized_bytes == 0 and lora.replicated_note == ""
    backward = next(p for p in gptq.phases if p.phase == "backward").gpu_parts(8)
    est = estimate_memory(gptq_arch, sc)
    float_part = est.parts_by_key["weights"].bytes - LINEAR_8B * GPTQ_BPP
    assert backward["weights"] == pytest.approx(LINEAR_8B * GPTQ_BPP + float_part / 8)
    assert gptq.per_gpu_bytes(8) > lora.per_gpu_bytes(8)
    assert gptq.per_gpu_bytes(1) < lora.per_gpu_bytes(1)  # on one GPU the 4-bit base is of course smaller
    # ZeRO-3 partitions parameters, not buffers, either.
    zero3 = plan_parallel(est, gptq_arch, sc, Strategy.ZERO3)
    assert zero3.replicated_quantized_bytes == pytest.approx(LINEAR_8B * GPTQ_BPP)


def test_qlora_shards_its_4bit_base_only_with_a_float_quant_storage():
    arch = _llama()
    default = Scenario.build(method="qlora", precision="bf16", seq_len=512, gradient_checkpointing=True)
    assert default.quant_storage.value == "uint8"  # transformers' BitsAndBytesConfig default
    est = estimate_memory(arch, default)
    nf4_dq = 0.5 + 1 / 64 + 4 / (64 * 256)
    packed = LINEAR_8B * nf4_dq
    uint8_sc = Scenario.build(**{**default.model_dump(), "quant_storage": "uint8"})  # named: kept (issue 24 item 6)
    uint8 = plan_parallel(est, arch, uint8_sc, Strategy.FSDP_FULL_SHARD)
    assert uint8.replicated_quantized_bytes == pytest.approx(packed) and "--quant-storage bf16" in uint8.replicated_note
    bf16_sc = Scenario.build(**{**default.model_dump(), "quant_storage": "bf16"})
    sharded = plan_parallel(estimate_memory(arch, bf16_sc), arch, bf16_sc, Strategy.FSDP_FULL_SHARD)
    assert sharded.replicated_quantized_bytes == 0
    b_uint8 = next(p for p in uint8.phases if p.phase == "backward").gpu_parts(8)["weights"]
    b_bf16 = next(p for p in sharded.phases if p.phase == "backward").gpu_parts(8)["weights"]
    assert b_bf16 == pytest.approx(est.parts_by_key["weights"].bytes / 8)
    assert b_uint8 - b_bf16 == pytest.approx(packed * 7 / 8)


def test_stored_formats_say_whether_fsdp_can_shard_them():
    from engine.model.quantization import stored_quantization

    def q(qc):
        return stored_quantization({"quantization_config": qc})

    assert not q({"quant_method": "gptq", "bits": 4}).shardable
    assert not q({"quant_method": "awq", "bits": 4}).shardable
    assert not q({"quant_method": "bitsandbytes", "load_in_4bit": True}).shardable
    assert q({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_storage": "bfloat16"}).shardable
    assert not q({"quant_method": "bitsandbytes", "load_in_8bit": True}).shardable
    assert q({"quant_method": "fp8", "weight_block_size": [128, 128]}).shardable
    fp8 = json.loads((QUANTIZED / "neuralmagic__Meta-Llama-3.1-8B-Instruct-FP8.json").read_text())
    assert stored_quantization(fp8).shardable and stored_quantization(fp8).bytes_per_param == 1.0


def test_cli_says_which_quantized_weights_are_replicated(capsys):
    from engine.cli import main

    cfg = QUANTIZED / "Qwen__Qwen-7B-Chat-Int4.json"
    assert main(["estimate", "--config", str(cfg), "--method", "lora", "--precision", "bf16", "--gpu", "A100 80GB",
                 "--num-gpus", "8", "--strategy", "fsdp_full_shard"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["replicated_quantized_weights_bytes"] == round(6_476_005_376 * GPTQ_BPP)
    assert "replicated on every GPU" in out["replicated_quantized_weights"]


def test_torchtune_qlora_shards_its_nf4_base_under_fsdp():
    # torchtune's QLoRA keeps the base as torchao NF4Tensors, which FSDP2 shards (its 8-GPU Llama-3.1-405B QLoRA run,
    # data/measured_memory.csv m008, fits 8 x 80 GB only so).
    sc = Scenario.build(method="qlora", precision="bf16", framework="torchtune", seq_len=512)
    arch = _llama()
    assert plan_parallel(estimate_memory(arch, sc), arch, sc, Strategy.FSDP_FULL_SHARD).replicated_quantized_bytes == 0
