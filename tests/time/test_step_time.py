"""The step-time model (issue 15): hand-checked pieces (GEMM roofline, collectives, rates), the attention kernel
SDPA would pick, the accuracy against every expressible published row (median and largest |error|, fit and
hold-out), and the trends the issue asks for.

Uses the bundled catalog (data/models), so it runs without ../shared/reference.
"""

from __future__ import annotations

import pytest

from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.scenario.training import Scenario
from engine.time import collectives as cc
from engine.scenario.peft import targeted
from engine.time.gemm import (
    Gemm, GemmTable, gemm_seconds, gemm_shapes, occupancy_flops, output_tiles, step_gemms, tile_efficiency,
)
from engine.time.rates import HBM_FRACTION, TRAINING_GEMM_EFFICIENCY, gpu_rates
from engine.time.step import CATEGORIES
from engine.time.throughput import calibrate, estimate_throughput
from engine.validation.throughput import compare_measurements, error_summary, not_expressible


def arch_of(repo_id: str):
    return architecture_from_config(catalog_model(repo_id).config)


LLAMA8 = arch_of("meta-llama/Llama-3.1-8B")
LLAMA3B = arch_of("meta-llama/Llama-3.2-3B")
A100 = find_gpu("A100 80GB")


def tps(arch, gpu, n=1, strategy=Strategy.DDP, **fields) -> float:
    sc = Scenario.build(**fields)
    return estimate_throughput(arch, sc, gpu, num_gpus=n, strategy=strategy,
                               estimate=estimate_memory(arch, sc, gpu)).tokens_per_second


# --- pieces by hand -------------------------------------------------------------------------------------------------


def test_rates_of_the_a100_and_the_l40s():
    a100 = gpu_rates(A100, Scenario().precision)
    assert a100.achievable_matmul_flops == 271.2e12  # measured MAMF (ml-engineering table)
    assert a100.matmul_flops == pytest.approx(271.2e12 * TRAINING_GEMM_EFFICIENCY)
    assert a100.hbm_bytes_per_s == pytest.approx(2_039e9 * HBM_FRACTION)
    l40s = gpu_rates(find_gpu("L40S"), Scenario().precision)  # no MAMF published: 0.80 x the 362.05 dense peak
    assert l40s.achievable_matmul_flops == pytest.approx(0.80 * 362.05e12) and "no published" in l40s.matmul_source


def test_rtx_4090_matmuls_run_at_their_measured_rate():
    """The RTX 4090's achievable matmul rate is a measurement, not 0.80 x the datasheet: torch.mm's best square shape
    on the four RTX 4090 24GB rows of zzc0721/torch-performance-test-data@bbb8e247 database.md (bf16 170.06, 173.31,
    162.39, 163.09 TFLOP/s: median 166.6), a little above the Ada whitepaper's 165.2 (rated at the 2520 MHz boost clock;
    GPU Boost runs higher). The old model gave 0.80 x 165.2 = 132.2."""
    r = gpu_rates(find_gpu("RTX 4090"), "bf16")
    assert r.achievable_matmul_flops == pytest.approx(166.6e12)
    assert r.matmul_flops == pytest.approx(166.6e12 * TRAINING_GEMM_EFFICIENCY)
    assert "measured" in r.matmul_source and r.peak.flops == pytest.approx(165.2e12)


def test_matmul_summary_says_the_rate_used_and_its_source_once():
    """Time & cost's caption: the rate the step uses, the gemm efficiency times the measured MAMF of the A100 SXM
    (271.2 TFLOP/s bf16, stas00/ml-engineering@744d01e1's table), its citation said once (not "measured (measured")."""
    r = gpu_rates(find_gpu("A100 80GB"), "bf16")
    assert r.matmul_summary.startswith(f"{271.2 * TRAINING_GEMM_EFFICIENCY:,.0f} TFLOP/s ({TRAINING_GEMM_EFFICIENCY:g} x 271 "
                                       "TFLOP/s, measured maximum achievable matmul (MAMF): stas00/ml-engineering@744d01e1")
    assert "measured (measured" not in r.matmul_summary and r.matmul_summary.count("measured") == 1


def test_gemm_roofline_and_tile_quantization():
    assert tile_efficiency(4096, 4096, 4096) == 1.0
    assert tile_efficiency(4096 + 1, 4096, 4096) == pytest.approx(4097 / 4224)  # one more row costs a whole tile
    big = Gemm("block", "forward", 4096, 4096, 4096, 1.0, 2)
    assert gemm_seconds(big, 200e12, 2e12) == pytest.approx(2 * 4096**3 / 200e12)  # compute-bound
    lora_a = Gemm("lora", "forward", 4096, 16, 4096, 1.0, 2)  # x @ A: rank 16, skinny
    traffic = (4096 * 4096 + 4096 * 16 + 4096 * 16) * 2 / 2e12
    assert gemm_seconds(lora_a, 1000e12, 2e12) == pytest.approx(traffic)  # bandwidth-bound
    # at 200 TFLOP/s the 16-wide output fills 1/8 of each 128-wide tile: compute, not traffic, sets the time
    assert gemm_seconds(lora_a, 200e12, 2e12) == pytest.approx(2 * 4096 * 16 * 4096 / (200e12 * 16 / 128))


def test_a_gemm_with_fewer_tiles_than_sms_runs_on_that_many_sms():
    # NVIDIA "Matrix Multiplication Background User's Guide", wave quantization: one 128 x 128 output tile per SM.
    # LoRA rank 128's x @ A at 512 tokens and k = 4096 is 4 x 1 tiles: 4 of an A100's 108 SMs each compute
    # 2 x 128 x 128 x 4096 FLOPs at 1/108 of the rate, 27 times its roofline (FLOPs / rate) time.
    sc = Scenario.build(method="lora", lora_r=128, lora_targets="q_proj", seq_len=512, micro_batch_size=1)
    arch = architecture_from_config(catalog_model("meta-llama/Llama-2-7b-hf").config)
    gemms = list(step_gemms(arch, sc, 2))
    x_a = next(g for g in gemms if g.part == "lora" and g.phase == "forward" and g.n == 128)
    assert (x_a.m, x_a.k, x_a.copies) == (512, 4096, 32)
    assert occupancy_flops(x_a) == 2 * 128 * 128 * 4096 * 32
    assert output_tiles(x_a) == 4 * 1  # ceil(512 / 128) x ceil(128 / 128), per copy
    assert output_tiles(x_a._replace(m=513, n=129)) == 5 * 2  # a partial tile is a whole thread block
    table = GemmTable(gemm_shapes(arch, False, targeted(arch, sc), 128), 2)
    work = table.work((512.0, 512.0))
    rate, bw = 217e12, 1.3e12
    free = sum(work.seconds(rate, bw))
    bound = sum(work.seconds(rate, bw, 108))
    # the step's other GEMMs (q/k/v/o/MLP and the LM head at 512 tokens: >= 128 tiles each) are not bound; the
    # difference is X @ A (k = 4096) and dY @ B^T (k = q_proj's 4096 outputs), and the weight gradients of A
    # (4096 x 128) and B (128 x 4096), 32 tiles over k = 512 tokens; 32 layers each, at 108 x per-tile FLOPs
    skinny = 2 * 32 * 2 * 128 * 128 * 4096
    roofline = 2 * 32 * max(2 * 512 * 128 * 4096 / rate, (512 * 4096 + 4096 * 128 + 512 * 128) * 2 / bw)
    wgrad = 2 * 32 * 2 * 128 * 128 * 512
    wgrad_roofline = 2 * 32 * max(2 * 4096 * 128 * 512 / rate, (4096 * 512 + 512 * 128 + 4096 * 128) * 2 / bw)
    assert bound - free == pytest.approx(108 * (skinny + wgrad) / rate - roofline - wgrad_roofline, rel=1e-9)


def test_ring_latency_counts_only_the_steps_that_cross_nodes():
    """NCCL's ring latency (NVIDIA/nccl src/graph/tuning.cc, the same in ROCm/rccl): ``baseLat + (nsteps - nInterSteps)
    x intraLat + nInterSteps x interLat`` with ``nInterSteps = 2 (nNodes - 1)`` for an all-reduce and ``nNodes - 1``
    for the others: only the hops between nodes pay the network's latency. Checked against nccl-tests on 32 AWS
    p5.48xlarge nodes (256 H100, EFA): a 32 MB all-reduce runs at 33.30 GB/s algbw, 1.01 ms
    (crazyguitar/aws-gpu-communication-benchmark@4fdb5a4f data/nccl_all_reduce.csv). The ring model with every one
    of the 510 steps at the network's 6.6 us (the old model) gave 3.4 ms; NCCL picks its tree there, so a ring-only
    model stays above the measurement, but within 2x."""
    gpu = find_gpu("H100 SXM")
    link = cc.data_parallel_link(gpu, 256)  # 32 nodes x 8
    assert link.nodes == 32
    n = 256
    expected_latency = 8.4e-6 + (2 * (n - 1) - 2 * 31) * 2.5e-6 + 2 * 31 * 6.6e-6
    size = 32 * 2**20
    t = cc.all_reduce_seconds(size, n, link)
    assert t == pytest.approx(expected_latency + 2 * (n - 1) / n * size / link.bus_bytes_per_s)
    measured = size / 33.30e9
    assert measured < t < 2 * measured
    # reduce-scatter / all-gather: n - 1 steps, k - 1 of them between nodes
    rs = cc.reduce_scatter_seconds(size, n, link)
    assert rs == pytest.approx(8.4e-6 + (n - 1 - 31) * 2.5e-6 + 31 * 6.6e-6 + (n - 1) / n * size / link.bus_bytes_per_s)
    # one node: no network step at all
    one = cc.data_parallel_link(gpu, 8)
    assert one.nodes == 1 and one.call_latency_s(14, one.inter_node_steps(14, True)) == pytest.approx(8.4e-6 + 14 * 2.5e-6)


def test_ring_collectives_by_hand():
    link = cc.Link(name="test", bus_bytes_per_s=100e9, latency_s=0.0, hop_latency_s=0.0)
    assert cc.all_reduce_seconds(8e9, 8, link) == pytest.approx(2 * 7 / 8 * 8e9 / 100e9)
    # NCCL's ring latency (src/graph/tuning.cc): base 8.4 us + 2.5 us per step inside a node; an 8-GPU all-reduce has
    # 14 steps: 43.4 us, the 43.8 us nccl-tests measures for 32 KiB on 8x A100 (ml-engineering network/README.md)
    small = cc.all_reduce_seconds(32 * 1024, 8, cc.Link(name="nvlink", bus_bytes_per_s=235e9))
    assert small == pytest.approx(8.4e-6 + 14 * 2.5e-6 + 2 * 7 / 8 * 32 * 1024 / 235e9)
    assert small == pytest.approx(43.8e-6, rel=0.03)
    assert cc.reduce_scatter_seconds(8e9, 8, link) == pytest.approx(7 / 8 * 8e9 / 100e9)
    assert cc.all_gather_seconds(8e9, 8, link) == cc.reduce_scatter_seconds(8e9, 8, link)
    assert cc.all_reduce_seconds(8e9, 1, link) == 0
    assert cc.exposed_seconds(1.0, 10.0) == pytest.approx(0.1) and cc.exposed_seconds(1.0, 0.0) == 1.0
    nvlink = cc.data_parallel_link(find_gpu("H100 SXM"), 8)
    assert nvlink.name == "NVLink" and nvlink.bus_bytes_per_s == pytest.approx(0.80 * 450e9)  # ~367 GB/s measured
    pcie = cc.data_parallel_link(find_gpu("L40S"), 8)
    assert pcie.name == "PCIe" and pcie.bus_bytes_per_s == 10e9  # 8 GPUs cross the CPU sockets
    assert cc.data_parallel_link(find_gpu("RTX 3090"), 2).name == "NVLink"  # the bridge links a pair only
    assert cc.data_parallel_link(find_gpu("RTX 3090"), 4).name == "PCIe"
    nodes = cc.data_parallel_link(find_gpu("A100 80GB"), 64)
    assert nodes.bus_bytes_per_s == pytest.approx(min(0.8 * 300e9, 8 * 24e9))  # a ring: every NIC of the node busy


def test_bus_bandwidth_across_nodes_matches_published_nccl_tests():
    """Ring busbw across nodes is the node's NICs, r x NIC, whatever the node count: "On an Nvidia DGX-A100 system
    we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW" (NVIDIA, github.com/NVIDIA/nccl/issues/812);
    4 nodes of 8 B200 with 8 x 50 GB/s EFA: 377-382 GB/s (stas00/ml-engineering@744d01e1 network/README.md). On 2
    nodes NCCL's tree all-reduce sends the payload over the network once, up to ~2x that (github.com/NVIDIA/nccl/
    issues/946); an all-to-all does not aggregate the NICs (github.com/NVIDIA/nccl-tests/issues/267)."""
    a100, b200 = find_gpu("A100 80GB"), find_gpu("B200")
    for n in (32, 128, 512):
        link = cc.data_parallel_link(a100, n)
        assert link.all_reduce_bus_bytes_per_s == pytest.approx(192e9, rel=0.01)  # 8 x 24 GB/s
        assert link.bus_bytes_per_s == pytest.approx(192e9, rel=0.01)
    four = cc.data_parallel_link(b200, 32, network_bytes_per_s=0.96 * 50e9)
    assert four.all_reduce_bus_bytes_per_s == pytest.approx(384e9) and 377e9 < four.all_reduce_bus_bytes_per_s < 382e9 * 1.02
    two = cc.data_parallel_link(a100, 16)
    assert two.bus_bytes_per_s == pytest.approx(192e9)  # reduce-scatter / all-gather: ring only
    assert two.all_reduce_bus_bytes_per_s == pytest.approx(min(0.8 * 300e9, 192e9 * 2 * 15 / 16))  # the tree, NVLink-bound
    assert two.all_to_all_bus_bytes_per_s == pytest.approx(24e9 * 15 / 8)  # 8 of 15 peers off the node, one NIC each
    # DP groups with TP 4 inside the node: 2 ranks (2 NICs) of the ring per node
    assert cc.data_parallel_link(a100, 64, gpus_per_node=2).bus_bytes_per_s == pytest.approx(2 * 24e9)


def test_breakdown_adds_up_and_mfu_hfu_are_results():
    sc = Scenario.build(method="full", precision="bf16", seq_len=2048, gradient_checkpointing=True)
    tp = estimate_throughput(LLAMA8, sc, find_gpu("H100 SXM"))
    assert set(tp.breakdown_s) == set(CATEGORIES)
    assert tp.step_time_s == pytest.approx(sum(tp.breakdown_s.values()))
    assert tp.tokens_per_second == pytest.approx(2048 / tp.step_time_s)
    # HFU counts the recompute: one more forward of the GEMMs and attention.
    assert tp.hfu > tp.mfu and tp.hfu / tp.mfu == pytest.approx(tp.step.executed_flops / tp.step.model_flops)
    assert 0.2 < tp.mfu < 0.8


def test_calibration_scales_every_plan():
    sc = Scenario.build(method="lora")
    raw = estimate_throughput(LLAMA8, sc, A100)
    cal = calibrate(raw.tokens_per_second / 2, raw)
    assert cal.factor == pytest.approx(0.5) and cal.raw_error == pytest.approx(1.0)
    other = estimate_throughput(LLAMA8, sc, find_gpu("H100 SXM"))
    scaled = estimate_throughput(LLAMA8, sc, find_gpu("H100 SXM"), calibration=cal.factor)
    assert scaled.tokens_per_second == pytest.approx(other.tokens_per_second / 2)
    assert scaled.step_time_s == pytest.approx(2 * other.step_time_s)
    with pytest.raises(ScenarioError):
        calibrate(raw.tokens_per_second * 20, raw)
    with pytest.raises(ScenarioError):
        calibrate(0, raw)


# --- the attention kernel (issue 16, item 3) -------------------------------------------------------------------------


def test_sdpa_on_a_v100_is_not_flash():
    v100 = find_gpu("V100 32GB")
    mha = arch_of("meta-llama/Llama-2-7b-hf")  # no grouped-query attention: memory-efficient takes it
    fp16 = Scenario.build(method="lora", precision="amp_fp16", attention="sdpa")
    assert estimate_memory(mha, fp16, v100).attention_kernel == "memory_efficient"
    assert estimate_memory(LLAMA8, fp16, v100).attention_kernel == "math"  # GQA: memory-efficient refuses enable_gqa
    assert estimate_memory(LLAMA8, fp16, A100).attention_kernel == "flash"
    assert estimate_throughput(mha, fp16, v100).attention_kernel == "memory_efficient"
    with pytest.raises(ScenarioError, match="Ampere"):
        estimate_memory(mha, Scenario.build(precision="amp_fp16", attention="flash_attention_2"), v100)


# --- accuracy against published runs -----------------------------------------------------------------------------------


KNOWN_MISSES = {
    # The LlamaFactory paper's Table 4 (1 x 512 packed, HF stack with Unsloth): 1.4-1.8x below the model at every size,
    # more than the eager host factor the other Hugging Face source (ms-swift) allows; kept, never dropped (issue 23).
    "LlamaFactory paper",
}
"""Sources whose rows may miss by more than 40% in sample; benchmarks/validate_time.py reports them cross-validated."""

KNOWN_MISS_ROWS = {
    # torchtune README @ 30b8519e8, RTX A6000: expressed with checkpointing off, as the README's own peaks say they ran
    # (LoRA 30.3 GiB on the A6000 against 16.2 GiB on the 4090 with the same config; full 37.4 against 18.9), they
    # still run 1.7x (LoRA) and 1.4x (full) faster than the model: the LoRA figure needs 91% of the card's dense
    # BF16 peak in matmuls alone, above its measured torch.mm maximum (123.3 TFLOP/s, zzc0721/torch-performance-test-data
    # database.md). Kept compared: a disagreeing row is evidence (see their notes).
    "torchtune-8b-lora-a6000", "torchtune-8b-full-a6000",
    "torchtune-l2-7b-lora-2x4090",  # low confidence: total or per GPU is inferred (see its notes)
}


def test_accuracy_against_every_expressible_row():
    # In sample (the fitted constants); the published, cross-validated figure is benchmarks/validate_time.py's.
    rows = compare_measurements()
    assert len(rows) >= 35
    summary = error_summary()
    assert summary.median_abs_error <= 0.15, summary
    off = [(r.id, round(r.error, 2)) for r in rows if abs(r.error) > 0.40 and r.source not in KNOWN_MISSES
           and r.id not in KNOWN_MISS_ROWS]
    assert not off, off
    assert error_summary("holdout").rows >= 30
    for m in not_expressible():
        assert len(m.why_not_expressible) > 20


# --- trends ---------------------------------------------------------------------------------------------------------------


def test_qlora_micro_batch_1_gains_tokens_per_second_from_1k_to_8k_on_an_a100():
    # The Hugging Face QLoRA recipe with TrainingArguments(bf16=True): autocast over prepare_model_for_kbit_training's
    # fp32 norms and embeddings (amp_bf16). Precision is explicit: the method's default is pure bf16 (issue 16 item 7).
    # Source of the trend: the fixed per-step work (launches, dequantization of every 4-bit weight) is spread over more
    # tokens as the sequence grows, until FlashAttention-2's s^2 work takes over: FA2's causal forward at head dim 128
    # rises from 191 to 333 TFLOP/s between 512 and 8k tokens and is flat after (Shah et al. 2024, arXiv:2407.08608,
    # sec. 4.1), while its FLOPs per token grow with s; so tokens/s rise from 1k to about 8k and fall again by 32k.
    base = dict(method="qlora", precision="amp_bf16", micro_batch_size=1, gradient_checkpointing=True,
                attention="flash_attention_2")
    by_len = {s: tps(LLAMA8, A100, seq_len=s, **base) for s in (1024, 8192, 32768)}
    assert by_len[8192] > 1.05 * by_len[1024]
    assert by_len[32768] < 0.85 * by_len[8192]


def test_eager_stack_steps_at_512_tokens_cost_more_per_token_than_at_4k():
    # Host time per kernel on the Hugging Face eager stack (Trainer + PEFT) is a fixed cost per step: at 512 tokens a
    # micro batch is launch-bound, at 4k it is compute-bound (Horace He, "Making Deep Learning Go Brrrr From First
    # Principles"; ms-swift's Benchmark.md rows at 512 and the LlamaFactory paper's Table 4 at 1 x 512 run at
    # MFU 0.12-0.30 on an A100, against 0.4-0.5 for packed 4k rows of torchtune on the same GPU).
    base = dict(method="lora", precision="bf16", micro_batch_size=1, gradient_checkpointing=True, framework="hf")
    per_token = {s: 1 / tps(LLAMA3B, A100, seq_len=s, **base) for s in (512, 4096)}
    assert per_token[512] > 1.3 * per_token[4096], per_token
    # ... and the HF stack's per-kernel host time is what makes it so: a plain PyTorch loop (torchtune) is closer.
    plain = {s: 1 / tps(LLAMA3B, A100, seq_len=s, **{**base, "framework": "torchtune"}) for s in (512, 4096)}
    assert per_token[512] / per_token[4096] > plain[512] / plain[4096]


def test_fsdp_tokens_per_gpu_fall_as_data_parallelism_grows_across_nodes():
    # One micro batch per step: FSDP all-gathers the weights and reduce-scatters the gradients every step over the
    # inter-node ring, whose latency grows with the ranks (NCCL ring: base + one hop per step, src/graph/tuning.cc) and
    # whose share of each GPU's 200 Gb/s NIC is at most 24 GB/s busbw (nccl-tests issue 119). torchtitan's Llama 3
    # 8B rows show the fall: 5762 tokens/s per GPU on 8 H100, 5605 on 128 (benchmarks/llama3_h100_202412_torchtitan.md).
    base = dict(method="full", precision="bf16", seq_len=2048, micro_batch_size=1, gradient_checkpointing=True)
    h100 = find_gpu("H100 SXM")
    per_gpu = [tps(LLAMA8, h100, n, Strategy.ZERO3, **base) / n for n in (8, 64, 512)]
    assert per_gpu[0] > per_gpu[1] > per_gpu[2], per_gpu


def test_qlora_micro_batch_1_is_bound_by_fixed_work_at_short_sequences():
    # At 512 -> 2k tokens the per-step dequantization and launch costs are spread over more tokens, whatever the
    # precision: tokens/s rise (the old FLOPs / (peak x MFU) rule had them fall from the first token).
    for precision in ("amp_bf16", "bf16"):
        base = dict(method="qlora", precision=precision, micro_batch_size=1, gradient_checkpointing=True)
        assert tps(LLAMA8, A100, seq_len=2048, **base) > 1.15 * tps(LLAMA8, A100, seq_len=512, **base), precision


def test_flash_attention_2_is_faster_than_eager_at_4k():
    base = dict(method="lora", precision="bf16", seq_len=4096, gradient_checkpointing=True)
    assert tps(LLAMA8, A100, attention="flash_attention_2", **base) > 1.2 * tps(LLAMA8, A100, attention="eager", **base)


def test_l40s_trains_a_3b_model_slower_than_an_a100_80gb():
    base = dict(method="full", precision="amp_bf16", seq_len=2048, optimizer="adamw")
    assert tps(LLAMA3B, find_gpu("L40S"), **base) < 0.9 * tps(LLAMA3B, A100, **base)


def test_checkpointing_costs_20_to_35_percent_for_full_fine_tuning():
    base = dict(method="full", precision="bf16", seq_len=2048, micro_batch_size=4)
    for arch in (LLAMA8, LLAMA3B):
        cost = 1 - tps(arch, A100, gradient_checkpointing=True, **base) / tps(arch, A100, **base)
        assert 0.20 <= cost <= 0.35, cost


def test_8_gpus_over_pcie_scale_worse_than_8_over_nvlink():
    base = dict(method="full", precision="bf16", seq_len=2048, micro_batch_size=2)

    def scaling(gpu, strategy):
        return tps(LLAMA8, gpu, 8, strategy, **base) / (8 * tps(LLAMA8, gpu, **base))

    for strategy in (Strategy.DDP, Strategy.ZERO3):
        nvlink, pcie = scaling(find_gpu("H100 SXM"), strategy), scaling(find_gpu("H100 PCIe"), strategy)
        assert pcie < nvlink - 0.1 and nvlink > 0.8, (strategy, nvlink, pcie)


def test_cli_v100_sdpa_does_not_say_flash():
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    args = [sys.executable, "-m", "engine", "estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--method",
            "lora", "--precision", "amp_fp16", "--gpu", "V100 32GB", "--attention", "sdpa", "--dataset-tokens", "1000000"]
    out = json.loads(subprocess.run(args, cwd=root, capture_output=True, text=True, timeout=60, check=True).stdout)
    assert out["attention_kernel"] == "memory_efficient" and out["time_cost"]["attention_kernel"] == "memory_efficient"
    assert "flash" not in json.dumps(out["assumptions"]).replace("flash needs", "")
    fa2 = subprocess.run(args[:-2] + ["--attention", "flash_attention_2"], cwd=root, capture_output=True, text=True, timeout=60)
    assert fa2.returncode == 2 and "Ampere" in fa2.stderr and len(fa2.stderr.strip().splitlines()) == 1


def test_fp32_adapters_beside_16_bit_compute_launch_their_casts():
    """Kernels per LoRA-adapted module in one forward (``engine.time.overhead.layer_kernels``), from the libraries'
    code: Unsloth's ``matmul_lora`` runs ``out += (X @ A.to(dtype)) @ (s * B.to(dtype))`` (unslothai/unsloth@b9d5ca5
    unsloth/kernels/fast_lora.py, the release LLaMA-Factory's paper ran, 2024-03-20): 6 kernels beside the base GEMM
    when LLaMA-Factory has cast the adapters to fp32 (model/adapter.py at 8963e89); PEFT's ``Linear.forward`` casts the
    input to the fp32 adapter's dtype and autocast casts it and A, B back for the two linears: 5 + 4 = 9. torchtune
    creates adapters in the weight dtype: 5 eager, 3 compiled (no casts). The old model counted 3 and 5 everywhere."""
    from engine.time.overhead import layer_kernels

    def per_module(fused: bool, **kw) -> float:
        lora = Scenario.build(method="lora", lora_targets="q_proj,v_proj", **kw)
        full = Scenario.build(method="full", **kw)
        return (layer_kernels(LLAMA8, lora, "flash", fused) - layer_kernels(LLAMA8, full, "flash", fused)) / 2

    for fused, hf_amp, hf_bf16, tune in ((True, 6, 6, 3), (False, 9, 7, 5)):
        assert per_module(fused, framework="hf", precision="amp_bf16") == hf_amp
        assert per_module(fused, framework="hf", precision="bf16") == hf_bf16
        assert per_module(fused, framework="torchtune", precision="bf16") == tune
        assert per_module(fused, framework="hf", precision="fp32") == (3 if fused else 5)  # fp32 compute: no casts


def test_bitsandbytes_optimizer_waits_for_the_gpu_after_every_tensor():
    """bitsandbytes' ``Optimizer8bit.step`` (the base of every bitsandbytes optimizer) calls
    ``torch.cuda.synchronize()`` after each parameter's ``update_step`` (bitsandbytes 0.41.0 to 0.43.3,
    bitsandbytes/optim/optimizer.py; 0.43.0 was the release of LLaMA-Factory's paper, March 2024): its Python loop and
    its kernels take turns, so the step is their sum. torch's foreach and fused steps launch asynchronously: the longer
    of the two. The old model took the longer of the two for bitsandbytes too."""
    from engine.scenario.optimizer import Optimizer
    from engine.time.overhead import PYTHON_SECONDS_PER_TENSOR

    # Through the step: a LoRA step on Llama-3.1-8B with 8-bit AdamW pays its whole host loop on top of the kernels
    # (rank 128 on every linear: 7 x 32 modules x 2 tensors), where fused AdamW's few launches hide under its kernels.
    def overhead_s(optimizer: str) -> float:
        sc = Scenario.build(method="lora", lora_r=128, lora_targets="all-linear", optimizer=optimizer,
                            micro_batch_size=1, seq_len=512, framework="hf")
        return estimate_throughput(LLAMA8, sc, A100, estimate=estimate_memory(LLAMA8, sc, A100)).breakdown_s["overhead"]

    assert overhead_s("adamw_8bit") - overhead_s("adamw_fused") == pytest.approx(448 * PYTHON_SECONDS_PER_TENSOR)

    from engine.time.overhead import optimizer_step_seconds

    gpu_s = 6.8e-3  # the 8-bit step's HBM traffic of Llama-2-7B's rank-128 adapters on an A100 (448 tensors)
    for bnb in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT, Optimizer.PAGED_ADAMW_32BIT, Optimizer.LION_8BIT):
        assert optimizer_step_seconds(bnb, 448, gpu_s) == pytest.approx(gpu_s + 448 * PYTHON_SECONDS_PER_TENSOR)
    assert optimizer_step_seconds(Optimizer.ADAFACTOR, 448, gpu_s) == pytest.approx(448 * PYTHON_SECONDS_PER_TENSOR)
    assert optimizer_step_seconds(Optimizer.ADAMW_FUSED, 448, gpu_s) == pytest.approx(gpu_s)


def test_node_mismatch_names_the_nodes_the_step_time_uses():
    # engine.time.step's ring: min(n, GPUS_PER_NODE = 8) GPUs per node (collectives.data_parallel_link's default)
    from engine.time.collectives import node_mismatch

    assert node_mismatch(16, None) is None and node_mismatch(16, 8) is None and node_mismatch(4, 4) is None
    assert node_mismatch(4, 16) is None  # 4 GPUs on one node of 16 slots: one node of 4 either way
    assert node_mismatch(2, 1) == ("time and cost put up to 8 GPUs on a node (NVLink or PCIe inside it, the network "
                                   "between), here 2, not the 1 per node given")
    assert "here 8, not the 4 per node" in node_mismatch(16, 4)


def test_qwen_v1_applies_rope_with_flash_attn_fused_rotary():
    """Qwen v1's remote code (Qwen/Qwen-7B-Chat ``modeling_qwen.py``) imports ``apply_rotary_emb_func`` from
    ``flash_attn.layers.rotary`` when flash-attn is installed and ``apply_rotary_pos_emb`` takes it for CUDA tensors:
    ``t.float()``, the one Triton rotary kernel, ``.type_as(t)``, for the query and the key: 6 kernels per block
    where the generic eager RoPE counts 10. Without flash-attn (SDPA) the eager path stays; a Llama block (transformers'
    own RoPE, no such import) keeps 10 either way."""
    from engine.time.overhead import FLASH_ROTARY_KERNELS, layer_kernels

    qwen = architecture_from_config(catalog_model("Qwen/Qwen-7B-Chat").config)
    fa2 = Scenario.build(method="full", framework="hf", precision="bf16", attention="flash_attention_2")
    sdpa = Scenario.build(method="full", framework="hf", precision="bf16", attention="sdpa")
    assert qwen.flash_rotary and not LLAMA8.flash_rotary
    assert FLASH_ROTARY_KERNELS == 6
    assert layer_kernels(qwen, sdpa, "flash", False) - layer_kernels(qwen, fa2, "flash", False) == 10 - 6
    assert layer_kernels(LLAMA8, sdpa, "flash", False) == layer_kernels(LLAMA8, fa2, "flash", False)
    # Through the step (the cached per-method work keys on the attention setting, not only on the kernel both pick):
    # a launch-bound LoRA step at 1 x 512 tokens, the ms-swift rows' setting, pays less host time with flash-attn.
    def overhead_s(attention: str) -> float:
        sc = Scenario.build(method="lora", lora_targets="c_attn", framework="hf", precision="bf16", micro_batch_size=1,
                            seq_len=512, attention=attention, gradient_checkpointing=True)
        return estimate_throughput(qwen, sc, A100, estimate=estimate_memory(qwen, sc, A100)).breakdown_s["overhead"]

    assert overhead_s("flash_attention_2") < overhead_s("sdpa") - 0.010
