"""Serving over several GPUs (issue 24 item 7): tensor-parallel ranks, the KV-cache budget at vLLM's
gpu_memory_utilization, the most concurrent sequences, and prefill / decode tokens per second.

Published figures (vLLM):
- vLLM PR #12569 (github.com/vllm-project/vllm/pull/12569, its description's log): ``vllm serve
  neuralmagic/Meta-Llama-3.1-70B-Instruct-quantized.w8a8 --max-model-len 2048 --gpu-memory-utilization 0.98`` on one
  80 GB GPU logs "Loading model weights took 67.7229 GB" (vLLM's GB are GiB: bytes / 2**30) and "# GPU blocks: 1381",
  "Maximum concurrency for 2048 tokens per request: 10.79x" (1381 blocks x 16 tokens / 2048).
- vLLM PR #11000 (github.com/vllm-project/vllm/pull/11000): ``benchmark_latency.py --model meta-llama/Meta-Llama-3-8B
  --batch-size 1`` (32 prompt tokens, 128 generated: the script's defaults) "Avg latency: 0.9447 seconds", 135.5
  generated tokens per second; the PR does not name the GPU (an A100 or H100 80 GB class part).
"""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.memory.inference import InferenceScenario, estimate_inference, inference_limits, kv_cache_bytes_per_token
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.plan.serving import serving_plan
from engine.time.rates import gpu_rates
from engine.time.serving import serving_speed
from engine.scenario.precision import PrecisionMode

LLAMA_70B = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-70B")[0])
LLAMA_8B = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])


def test_70b_fp16_over_two_a100s_fits_with_half_the_weights_per_gpu(capsys):
    args = ["estimate", "--model", "meta-llama/Llama-3.1-70B", "--offline", "--method", "inference",
            "--weight-precision", "fp16", "--gpu", "A100 80GB", "--seq-len", "4096"]
    assert main(args) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["fits"] is False and one["decode_tokens_per_second"] is None and one["min_tensor_parallel"] == 2
    for extra in (["--tensor-parallel", "2"], ["--num-gpus", "2"]):  # TGI shards over the GPUs it is given
        assert main([*args, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["fits"] is True and out["tensor_parallel"] == 2 and out["num_gpus"] == 2
        # 70.55B parameters x 2 B / 2 ranks (the linears, embedding and LM head split; the norms whole)
        assert out["per_gpu_weights_bytes"] == pytest.approx(70.555e9, rel=1e-3)
        assert out["max_concurrency"] >= 1 and out["decode_tokens_per_second"] > 0
        assert out["kv_cache_bytes_per_token"] == 80 * 2 * 4 * 128 * 2  # 4 of the 8 KV heads per rank


def test_kv_heads_split_then_replicate():
    per_tok = {t: kv_cache_bytes_per_token(LLAMA_70B, tp=t) for t in (1, 2, 8, 16)}
    assert per_tok[1] == 327_680 and per_tok[2] == per_tok[1] // 2 and per_tok[8] == per_tok[1] // 8
    assert per_tok[16] == per_tok[8]  # vLLM replicates a KV head when TP exceeds the KV heads
    with pytest.raises(ScenarioError, match="attention heads"):
        estimate_inference(LLAMA_70B, InferenceScenario(tensor_parallel=3))


def test_vllm_w8a8_70b_weights_and_kv_cache_budget():
    # vLLM PR #12569: 67.7229 GiB of weights, 1381 x 16 = 22,096 cache tokens at gpu_memory_utilization 0.98.
    isc = InferenceScenario(weight_precision="int8", seq_len=2048, gpu_memory_utilization=0.98)
    gpu = find_gpu("H100 80GB")
    weights = estimate_inference(LLAMA_70B, isc).components["weights"] / 2**30
    assert weights == pytest.approx(67.7229, rel=5e-3)
    lim = inference_limits(LLAMA_70B, isc, gpu.usable_memory_bytes)
    assert lim.budget_bytes == pytest.approx(gpu.usable_memory_bytes * 0.98 - 1343 * 2**20)
    # ours 13.8x: vLLM's profile run reserves about 1.8 GiB more (its activation peak at max_num_batched_tokens and
    # the sampler's logits) than our one-layer workspace; an overestimate under 35%, said in the report
    ratio = (lim.kv_cache_tokens / 2048) / 10.79
    assert 1.0 < ratio < 1.35, ratio
    assert lim.max_concurrency == int(lim.kv_cache_tokens // 2048) or lim.max_concurrency == int(lim.kv_cache_tokens // 2048) - 1


def test_decode_is_bandwidth_bound_and_brackets_vllms_measurement():
    isc = InferenceScenario(concurrency=1, seq_len=160)  # 32 prompt + 128 generated tokens
    speeds = {g: serving_speed(LLAMA_8B, isc, find_gpu(g)) for g in ("A100 80GB", "H100 80GB")}
    for g, s in speeds.items():
        rates = gpu_rates(find_gpu(g), PrecisionMode.BF16)
        comps = estimate_inference(LLAMA_8B, isc).components
        assert s.decode_bound == "memory bandwidth"
        assert s.decode_step_s == pytest.approx((comps["weights"] + comps["kv_cache"]) / rates.hbm_bytes_per_s, rel=1e-12)
    # vLLM PR #11000: 128 tokens in 0.9447 s at batch 1 on an 80 GB A100/H100-class GPU
    published = 128 / 0.9447
    assert speeds["A100 80GB"].decode_tokens_per_second < published < speeds["H100 80GB"].decode_tokens_per_second
    # a larger batch reads the weights once for every sequence: tokens/s grows almost with the batch
    eight = serving_speed(LLAMA_8B, isc.model_copy(update={"concurrency": 8}), find_gpu("H100 80GB"))
    assert 7.5 < eight.decode_tokens_per_second / speeds["H100 80GB"].decode_tokens_per_second <= 8


def test_tensor_parallel_decode_adds_the_all_reduces():
    isc = InferenceScenario(concurrency=1, seq_len=1024, tensor_parallel=2)
    s = serving_speed(LLAMA_70B, isc, find_gpu("A100 80GB"))
    assert s.link == "NVLink" and s.tensor_parallel_comm_s > 0
    one_rank = estimate_inference(LLAMA_70B, isc).components
    rates = gpu_rates(find_gpu("A100 80GB"), PrecisionMode.BF16)
    assert s.decode_step_s == pytest.approx((one_rank["weights"] + one_rank["kv_cache"]) / rates.hbm_bytes_per_s
                                            + s.tensor_parallel_comm_s, rel=1e-12)
    plan = serving_plan(LLAMA_70B, isc, find_gpu("A100 80GB"), num_gpus=4)
    assert plan.replicas == 2 and plan.decode_tokens_per_second == pytest.approx(2 * s.decode_tokens_per_second)
