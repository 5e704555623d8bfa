"""The scale-out step time on engine.time's model: the one-GPU case equals engine.time's step, the rank's GEMM
shapes under TP / CP / EP, and the collectives over the cluster's links."""

from __future__ import annotations

import pytest

from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.comm_volumes import Collective, Link
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.layout import Layout
from engine.scaleout.memory import effective_scenario
from engine.scaleout.rank_compute import rank_gemms
from engine.scaleout.step_time import Cluster, collective_seconds
from engine.scenario.training import Scenario
from engine.time import collectives as cc
from engine.time.rates import fp8_matmul_flops, gpu_rates
from engine.time.step import step_time as one_gpu_step

H100 = find_gpu("H100 SXM")
A100 = find_gpu("A100 80GB")


def _arch(repo: str):
    return architecture_from_config(config_from_catalog(repo)[0])


@pytest.mark.parametrize("repo", ["meta-llama/Llama-3.2-1B", "mistralai/Mixtral-8x7B-v0.1"])
@pytest.mark.parametrize("precision", ["amp_bf16", "bf16"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_one_gpu_layout_is_engine_time_step(repo, precision, recompute):
    # TP = PP = CP = EP = DP = 1: the layout's step is engine.time.step.step_time's for the same scenario (its
    # micro batch, its micro batches as accumulation steps, full recompute as gradient checkpointing).
    arch = _arch(repo)
    sc = Scenario(seq_len=2048, micro_batch_size=2, precision=precision)
    layout = Layout(micro_batch_size=2, global_batch_size=8, recompute=recompute)
    ours = estimate_layout(arch, sc, layout, Cluster(gpu=H100, nodes=1, gpus_per_node=1)).time
    esc = effective_scenario(sc, layout)
    ref = one_gpu_step(arch, esc, estimate_memory(arch, esc, H100), H100, gpu_rates(H100, esc.precision))
    assert ours.step_s == pytest.approx(ref.total_s, rel=1e-12)
    for key in ("matmul", "attention", "memory_bound", "optimizer", "overhead"):
        assert ours.breakdown_s[key] == pytest.approx(ref.breakdown_s[key], rel=1e-12)
    assert ours.bubble_s == 0 and ours.breakdown_s["communication"] == 0
    assert ours.mfu == pytest.approx(ref.model_flops / ref.total_s / gpu_rates(H100, esc.precision).peak.flops, rel=1e-12)


def test_tensor_parallel_splits_columns_and_rows():
    arch = _arch("meta-llama/Llama-2-7b-hf")
    sc = Scenario(seq_len=4096)
    shapes = {(g.m, g.n, g.k) for g, _, _ in rank_gemms(arch, sc, Layout(tensor_parallel=8), 2) if g.phase == "forward"}
    assert (4096, 512, 4096) in shapes  # q/k/v: column-parallel, n / 8
    assert (4096, 4096, 512) in shapes  # o_proj: row-parallel, k / 8
    assert (4096, 11008 // 8, 4096) in shapes and (4096, 4096, 11008 // 8) in shapes  # gate/up and down
    cp = {(g.m, g.n, g.k) for g, _, _ in rank_gemms(arch, sc, Layout(context_parallel=4), 2) if g.phase == "forward"}
    assert (1024, 4096, 4096) in cp  # CP: a quarter of the tokens


def test_expert_parallel_feeds_fewer_experts_more_tokens():
    arch = _arch("mistralai/Mixtral-8x7B-v0.1")  # 8 experts, top-2
    sc = Scenario(seq_len=4096)
    ep8 = [g for g, _, _ in rank_gemms(arch, sc, Layout(expert_parallel=8, data_parallel=8), 2)
           if g.phase == "forward" and g.n == arch.intermediate_size]
    one = [g for g, _, _ in rank_gemms(arch, sc, Layout(), 2) if g.phase == "forward" and g.n == arch.intermediate_size]
    assert {g.m for g in ep8} == {4096 * 2 * 8 / 8} and {g.copies for g in ep8} == {1.0}  # one expert, 8 ranks' tokens
    assert {g.m for g in one} == {4096 * 2 / 8} and {g.copies for g in one} == {8.0}
    assert sum(g.flops for g in ep8) == pytest.approx(sum(g.flops for g in one))  # same work, fatter GEMMs


def test_collectives_use_engine_time_ring_formulas_and_links():
    cluster = Cluster(gpu=H100, nodes=4)
    tp = Collective("tp", "x", "all_reduce", 1e9, 10, 8, Link.INTRA_NODE, False, "", 8)
    nvlink = H100.nvlink_gbps_per_direction * 1e9 * cc.NVLINK_BUS_EFFICIENCY
    assert collective_seconds(tp, cluster) == pytest.approx(2 * 7 / 8 * 1e10 / nvlink + 10 * (cc.CALL_LATENCY_S + 14 * 2.5e-6))
    # DP over 4 nodes, one rank per node: every hop crosses the 400 Gb/s NIC (at engine.time's 24/25 bus efficiency)
    dp = Collective("dp", "x", "reduce_scatter", 1e9, 1, 4, Link.INTER_NODE, True, "", 1)
    assert collective_seconds(dp, cluster) == pytest.approx(3 / 4 * 1e9 / (50e9 * 0.96) + cc.CALL_LATENCY_S + 3 * 6.6e-6)
    # 32 ranks, 8 per node over 4 nodes: the ring crosses nodes 4 times in 31 hops, NVLink-bound
    wide = dp._replace(group_size=32, ranks_per_node=8)
    assert cluster.link(wide).bus_bytes_per_s == pytest.approx(min(nvlink, 50e9 * 0.96 * 31 / 3))
    pcie = Cluster(gpu=find_gpu("L40S"), nodes=1)
    assert pcie.link(tp).name.startswith("PCIe")


def test_fp8_gemms_run_at_the_fp8_rate():
    arch = _arch("meta-llama/Llama-3.1-8B")
    sc = Scenario(seq_len=8192, micro_batch_size=1)
    cluster = Cluster(gpu=H100, nodes=1)
    layout = Layout(data_parallel=8, zero=3, global_batch_size=8, recompute="full")
    bf16 = estimate_layout(arch, sc, layout, cluster, master_weights=True).time
    fp8 = estimate_layout(arch, sc, layout, cluster, fp8="torchao", master_weights=True).time
    assert fp8_matmul_flops(H100) == pytest.approx(1979e12 * 0.72 * 0.80)
    assert fp8.breakdown_s["matmul"] < 0.75 * bf16.breakdown_s["matmul"]  # block GEMMs 1.8x faster, LM head not
    assert fp8.breakdown_s["memory_bound"] > bf16.breakdown_s["memory_bound"]  # the casts and amax passes
    assert fp8.step_s < bf16.step_s


def test_recompute_costs_in_order():
    arch = _arch("meta-llama/Llama-3.1-8B")
    sc = Scenario(seq_len=8192)
    cluster = Cluster(gpu=H100, nodes=1)
    steps = {r: estimate_layout(arch, sc, Layout(data_parallel=8, zero=3, global_batch_size=8, recompute=r), cluster,
                                master_weights=True).time.step_s for r in ("none", "selective", "selective_op", "full")}
    assert steps["none"] < steps["selective"] < steps["selective_op"] < steps["full"]
    assert 1.2 < steps["full"] / steps["none"] < 1.4  # a forward again: about a third of forward + backward


def test_pipeline_paced_by_its_slowest_stage():
    arch = _arch("meta-llama/Llama-2-7b-hf")
    sc = Scenario(seq_len=4096)
    t = estimate_layout(arch, sc, Layout(pipeline_parallel=4, data_parallel=2, zero=1, global_batch_size=32),
                        Cluster(gpu=A100, nodes=1), master_weights=True).time
    assert t.slowest_stage == 3  # the last stage also runs the LM head and the loss over 32k tokens
    assert sum(t.breakdown_s.values()) == pytest.approx(t.step_s)


def test_tp_comm_overlap_hides_tp_collectives_under_the_gemms():
    arch = _arch("meta-llama/Llama-3.1-70B")
    sc = Scenario(seq_len=4096)
    layout = Layout(tensor_parallel=8, data_parallel=4, sequence_parallel=True, zero=1, global_batch_size=16)
    cluster = Cluster(gpu=H100, nodes=4)
    plain = estimate_layout(arch, sc, layout, cluster, master_weights=True).time
    over = estimate_layout(arch, sc, layout, cluster, master_weights=True, tp_comm_overlap=True).time
    tp = plain.comm_s["tp"]
    assert over.comm_s == plain.comm_s  # the same bytes move
    assert plain.breakdown_s["communication"] >= tp  # on the critical path
    # engine.time.collectives.exposed_seconds: at least (1 - OVERLAP) of it stays exposed
    assert over.breakdown_s["communication"] - (plain.breakdown_s["communication"] - tp) >= (1 - cc.OVERLAP) * tp * 0.999
    assert over.step_s < plain.step_s


@pytest.mark.parametrize("framework,fused", [("hf", False), ("torchtune", True)])
def test_one_gpu_layout_keeps_occupancy_and_compiled_backward(framework, fused):
    # LoRA rank 128 at 512 tokens: X A and dY B^T are (512, 128) outputs, 4 tiles of 128 x 128 on an A100's 108 SMs
    # (NVIDIA's "Matrix Multiplication Background User's Guide", wave quantization), and torchtune's compile: True
    # runs the backward at 1.7x its forward's host time (ml-engineering's compiled Llama 3.2 1B cells). A one-GPU
    # layout must time both as engine.time.step does: before, the layout used the plain roofline and eager 4.0x.
    arch = _arch("meta-llama/Llama-3.2-1B")
    sc = Scenario(method="lora", lora_r=128, seq_len=512, micro_batch_size=1, precision="bf16", framework=framework)
    layout = Layout(micro_batch_size=1, global_batch_size=1)
    ours = estimate_layout(arch, sc, layout, Cluster(gpu=A100, nodes=1, gpus_per_node=1), fused_kernels=fused).time
    esc = effective_scenario(sc, layout)
    ref = one_gpu_step(arch, esc, estimate_memory(arch, esc, A100), A100, gpu_rates(A100, esc.precision),
                       fused_kernels=fused)
    assert ours.breakdown_s["matmul"] == pytest.approx(ref.breakdown_s["matmul"], rel=1e-12)
    if framework != "hf":  # the Hugging Face stack's eager host factor and Trainer step are engine.time's alone
        assert ours.step_s == pytest.approx(ref.total_s, rel=1e-12)
        assert ours.breakdown_s["overhead"] == pytest.approx(ref.breakdown_s["overhead"], rel=1e-12)
