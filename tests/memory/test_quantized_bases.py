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
