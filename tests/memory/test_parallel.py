"""Many GPUs (engine/memory/parallel.py): DDP, ZeRO-1/2/3, FSDP, offload, DeepSpeed's own estimator, measured rows."""

from __future__ import annotations

import csv
import json

import pytest

from engine.model.architecture import Architecture
from engine.model.build import architecture_from_config
from engine.cli import main
from engine.errors import ScenarioError
from engine.plan.fit import check_fit
from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.memory.weights import quantized_bytes_per_param
from engine.memory.parallel import (
    DEEPSPEED_BUCKET_ELEMENTS, Offload, Strategy, decoder_layer_parameters, deepspeed_estimate,
    deepspeed_zero2_model_states, deepspeed_zero3_model_states, largest_gathered_unit, plan_parallel,
)
from engine.scenario.training import Scenario
from engine.model.sources import config_from_catalog
from reference import REFERENCE, require_reference

P_LLAMA_8B = 8_030_261_248
VOCAB, HIDDEN = 128_256, 4_096
LM_HEAD = VOCAB * HIDDEN
GiB = 2**30


def arch_of(repo_id: str) -> Architecture:
    return architecture_from_config(config_from_catalog(repo_id)[0])


@pytest.fixture(scope="module")
def llama() -> Architecture:
    return arch_of("meta-llama/Llama-3.1-8B")


def pure_bf16_step() -> Scenario:
    """Pure bf16 full fine-tuning, fused AdamW, one token: weights 2 + gradients 2 + states 4 B per parameter."""
    return Scenario.build(method="full", precision="bf16", optimizer="adamw_fused", micro_batch_size=1, seq_len=1)


# --- acceptance: ZeRO-3 divides model states by 8 and adds the gathered layer; DDP does not divide ----------------


def test_zero3_on_8_gpus_divides_model_states_by_8_and_adds_the_gathered_layer(llama):
    sc = pure_bf16_step()
    est = estimate_memory(llama, sc)
    plan = plan_parallel(est, llama, sc, Strategy.ZERO3)
    layer = decoder_layer_parameters(llama)
    assert largest_gathered_unit(llama)[0] == LM_HEAD
    step = plan.components_per_gpu(8) if plan.peak_phase(8) == "optimizer_step" else None
    assert step is not None
    assert step["weights"] == 2 * P_LLAMA_8B / 8
    assert step["gradients"] == 2 * P_LLAMA_8B / 8
    assert step["optimizer_states"] == 4 * P_LLAMA_8B / 8
    assert step["comm_buckets"] == 2 * DEEPSPEED_BUCKET_ELEMENTS  # reduce_bucket_size 5e8 x bf16
    backward = next(p for p in plan.phases if p.phase == "backward").gpu_parts(8)
    assert backward["gathered_weights"] == 2 * (LM_HEAD + layer)  # LM head in use + next layer prefetched, bf16
    assert "weight_copies" not in backward or backward["weight_copies"] == 0
    assert plan.per_gpu_bytes(8) == pytest.approx(8 * P_LLAMA_8B / 8 + 2 * DEEPSPEED_BUCKET_ELEMENTS)
    # FSDP FULL_SHARD shards the same states; its extra buffer is one unit's unsharded gradient, not a 5e8 bucket.
    fsdp = plan_parallel(est, llama, sc, Strategy.FSDP_FULL_SHARD).components_per_gpu(8)
    assert fsdp["weights"] == step["weights"] and fsdp["optimizer_states"] == step["optimizer_states"]
    assert fsdp["comm_buckets"] == pytest.approx(2 * LM_HEAD)  # the LM-head unit's bf16 gradient, all trainable


def test_ddp_does_not_divide_and_adds_gradient_buckets(llama):
    sc = pure_bf16_step()
    est = estimate_memory(llama, sc)
    plan = plan_parallel(est, llama, sc, Strategy.DDP)
    assert plan.per_gpu_bytes(1) == est.total_bytes  # one GPU: no DDP wrapper, the single-GPU estimate
    grads = est.parts_by_key["gradients"].bytes
    for n in (2, 8, 64):
        assert plan.per_gpu_bytes(n) == est.total_bytes + grads  # reducer buckets = a copy of the gradients
        assert plan.components_per_gpu(n)["weights"] == est.components["weights"]
    assert plan.min_gpus(est.total_bytes - 1) is None


@pytest.mark.parametrize("strategy, sharded", [
    (Strategy.ZERO1, {"optimizer_states"}),
    (Strategy.ZERO2, {"optimizer_states", "gradients"}),
    (Strategy.FSDP_SHARD_GRAD_OP, {"optimizer_states", "gradients"}),
    (Strategy.ZERO3, {"optimizer_states", "gradients", "weights"}),
    (Strategy.FSDP_FULL_SHARD, {"optimizer_states", "gradients", "weights"}),
])
def test_each_stage_partitions_its_states(llama, strategy, sharded):
    """Rajbhandari et al. 2020 sec. 5: P_os (ZeRO-1), P_os+g (ZeRO-2), P_os+g+p (ZeRO-3)."""
    sc = pure_bf16_step()
    est = estimate_memory(llama, sc)
    step = next(p for p in plan_parallel(est, llama, sc, strategy).phases if p.phase == "optimizer_step").gpu_parts(4)
    single = est.components_at("optimizer_step")
    for key in ("weights", "gradients", "optimizer_states"):
        assert step[key] == (single[key] / 4 if key in sharded else single[key]), key


@pytest.mark.parametrize("strategy", list(Strategy))
def test_activations_never_divide_by_the_data_parallel_size(llama, strategy):
    sc = Scenario.build(method="full", precision="bf16", micro_batch_size=4, seq_len=4096)
    est = estimate_memory(llama, sc)
    assert est.peak_phase == "backward"
    plan = plan_parallel(est, llama, sc, strategy)
    for n in (1, 2, 8, 256):
        backward = next(p for p in plan.phases if p.phase == "backward").gpu_parts(n)
        assert backward["activations"] == est.components_at("backward")["activations"]
        assert backward["logits_loss"] == est.components_at("backward")["logits_loss"]


def test_per_gpu_peak_never_grows_with_more_gpus(llama):
    sc = Scenario.build(method="full", gradient_checkpointing=True)
    est = estimate_memory(llama, sc)
    for strategy in Strategy:
        plan = plan_parallel(est, llama, sc, strategy)
        peaks = [plan.per_gpu_bytes(n) for n in range(2, 40)]
        assert all(a >= b for a, b in zip(peaks, peaks[1:])), strategy


# --- offload -------------------------------------------------------------------------------------------------------


def test_offload_moves_states_to_cpu_and_leaves_buffers_and_activations(llama):
    sc = Scenario.build(method="full", precision="bf16", optimizer="adamw_fused", seq_len=1024, gradient_checkpointing=True)
    est = estimate_memory(llama, sc)
    states = sum(est.parts_by_key[k].bytes for k in ("optimizer_states", "optimizer_temporaries", "gradients"))
    opt = plan_parallel(est, llama, sc, Strategy.ZERO3, Offload.OPTIMIZER)
    gpu = opt.components_per_gpu(8)
    assert gpu["weights"] == est.parts_by_key["weights"].bytes / 8
    assert "optimizer_states" not in gpu and "gradients" not in gpu
    assert opt.cpu_bytes_per_gpu(8) == pytest.approx(states / 8)
    everything = plan_parallel(est, llama, sc, Strategy.ZERO3, Offload.OPTIMIZER_AND_PARAMS)
    gpu = everything.components_per_gpu(8)
    assert set(gpu) >= {"activations", "logits_loss", "gathered_weights", "comm_buckets"} and "weights" not in gpu
    assert everything.cpu_bytes_per_gpu(8) == pytest.approx((states + est.parts_by_key["weights"].bytes) / 8)
    # CPU memory per node: the offloaded shards of the node's GPUs (2 nodes x 4 GPUs: half of it each).
    assert everything.cpu_bytes_per_node(8, 4) == pytest.approx(everything.cpu_bytes_per_gpu(8) * 4)
    assert everything.per_gpu_bytes(8) < opt.per_gpu_bytes(8) < plan_parallel(est, llama, sc, Strategy.ZERO3).per_gpu_bytes(8)


@pytest.mark.parametrize("strategy, offload", [
    (Strategy.DDP, Offload.OPTIMIZER), (Strategy.ZERO2, Offload.OPTIMIZER_AND_PARAMS),
    (Strategy.FSDP_FULL_SHARD, Offload.OPTIMIZER), (Strategy.FSDP_SHARD_GRAD_OP, Offload.OPTIMIZER_AND_PARAMS),
])
def test_offload_a_strategy_does_not_offer_is_an_error(llama, strategy, offload):
    sc = pure_bf16_step()
    with pytest.raises(ScenarioError):
        plan_parallel(estimate_memory(llama, sc), llama, sc, strategy, offload)


# --- LoRA / QLoRA under FSDP -------------------------------------------------------------------------------------


def test_qlora_under_fsdp_shards_the_4bit_base_and_gathers_4bit_units(llama):
    # bnb_4bit_quant_storage=bfloat16, as the FSDP-QLoRA guides set it (the uint8 default is replicated:
    # tests/memory/test_quantized_bases.py).
    sc = Scenario.build(method="qlora", precision="amp_bf16", seq_len=512, gradient_checkpointing=True, quant_storage="bf16")
    est = estimate_memory(llama, sc)
    plan = plan_parallel(est, llama, sc, Strategy.FSDP_FULL_SHARD)
    backward = next(p for p in plan.phases if p.phase == "backward").gpu_parts(8)
    assert backward["weights"] == pytest.approx(est.parts_by_key["weights"].bytes / 8)
    per = quantized_bytes_per_param(sc.double_quant)
    assert backward["gathered_weights"] == pytest.approx((LM_HEAD + decoder_layer_parameters(llama)) * per)
    # The dequantized 16-bit weight being multiplied stays (a temporary, not autocast's cache).
    assert backward["weight_copies"] == est.components_at("backward")["weight_copies"] > 0


# --- DeepSpeed's own estimator ------------------------------------------------------------------------------------


def test_deepspeed_zero3_estimator_reproduces_its_printed_t5_small_figures():
    """estimate_zero3_model_states_mem_needs_all_live(t5-small, 1 node, 1 GPU) prints (GiB, DeepSpeed's 'GB'):
    1.52 | 0.06 (offload_param=cpu, offload_optimizer=cpu, zero_init=1), 1.35 | 0.17 (offload_optimizer only),
    0.09 | 1.08 (no offload, zero_init=1), 0.34 | 1.08 (zero_init=0). t5-small: 60,506,624 parameters, largest
    module the shared embedding 32,128 x 512 (deepspeed.runtime.zero.stage3, formula read from stage3.py)."""
    total, largest = 60_506_624, 32_128 * 512
    cases = [((True, True, True), 1.52, 0.06), ((True, False, True), 1.35, 0.17), ((False, False, True), 0.09, 1.08),
             ((False, False, False), 0.34, 1.08)]
    for (cpu_off, param_off, zero_init), cpu_gib, gpu_gib in cases:
        cpu, gpu, _ = deepspeed_zero3_model_states(total, largest, 1, 1, cpu_off, param_off, zero_init)
        assert round(cpu / GiB, 2) == cpu_gib and round(gpu / GiB, 2) == gpu_gib


def test_deepspeed_zero2_estimator_formula():
    """estimate_zero2_model_states_mem_needs (deepspeed.runtime.zero.stage_1_and_2, DeepSpeed >= 0.14.3 after PR
    5099): 2P + 18P/N on the GPU without offload (was 4P + 16P/N), 2P with it; CPU 4P x GPUs/node x 1.5, or
    max(4 x GPUs, 16) x P x 1.5 with offload."""
    p = 1_000_000_000
    assert deepspeed_zero2_model_states(p, 8, 1, cpu_offload=False) == (int(p * 4 * 8 * 1.5), 2 * p + 18 * p // 8)
    assert deepspeed_zero2_model_states(p, 8, 1, cpu_offload=False)[1] == 4_250_000_000  # the old formula: 6e9
    assert deepspeed_zero2_model_states(p, 8, 1, cpu_offload=True) == (int(p * 32 * 1.5), 2 * p)
    assert deepspeed_zero2_model_states(p, 2, 1, cpu_offload=True) == (int(p * 16 * 1.5), 2 * p)


def test_our_zero2_keeps_the_16bit_gradient_partition_and_matches_deepspeeds_multipliers(llama):
    """DeepSpeed ZeRO-2 with bf16 (Trainer bf16=True under DeepSpeed), full fine-tuning of Llama 3.1 8B on 8 GPUs: at
    the optimizer step each GPU holds the 16-bit weights (2P), its partition of the 16-bit gradients (2P/8), the fp32
    gradient partition the step upcasts (4P/8), fp32 master weights (4P/8) and AdamW's states (8P/8): 2P + 18P/8,
    DeepSpeed's own multipliers (PR 5099), plus our reduce bucket in 16 bits. ZeRO-1 keeps every 16-bit gradient."""
    sc = Scenario.build(method="full", precision="amp_bf16", optimizer="adamw_fused", seq_len=512)
    est = estimate_memory(llama, sc)
    step = next(p for p in plan_parallel(est, llama, sc, Strategy.ZERO2).phases if p.phase == "optimizer_step").gpu_parts(8)
    assert step["weights"] == 2 * P_LLAMA_8B
    assert step["gradients"] == pytest.approx(2 * P_LLAMA_8B / 8)
    assert step["master_gradients"] == pytest.approx(4 * P_LLAMA_8B / 8)
    assert step["master_weights"] == pytest.approx(4 * P_LLAMA_8B / 8)
    assert step["optimizer_states"] == pytest.approx(8 * P_LLAMA_8B / 8)
    model_states = sum(step[k] for k in ("weights", "gradients", "master_gradients", "master_weights", "optimizer_states"))
    _, ds_gpu = deepspeed_zero2_model_states(P_LLAMA_8B, 8, 1, cpu_offload=False)
    assert model_states == pytest.approx(ds_gpu, abs=8)
    assert step["comm_buckets"] == 2 * DEEPSPEED_BUCKET_ELEMENTS  # 5e8 elements of 16-bit gradients
    zero1 = next(p for p in plan_parallel(est, llama, sc, Strategy.ZERO1).phases if p.phase == "optimizer_step").gpu_parts(8)
    assert zero1["gradients"] == 2 * P_LLAMA_8B and zero1["master_gradients"] == pytest.approx(4 * P_LLAMA_8B / 8)


def test_deepspeed_estimate_beside_ours_counts_model_states_only(llama):
    """Full fine-tuning of Llama 3.1 8B, ZeRO-3 on 8 GPUs, no offload: DeepSpeed gives 18 B/param / 8 + 4 x the
    largest module (LM head): 18.8 GiB. Ours, 20.8 GiB at 2,048 tokens with checkpointing: the same bf16 weights +
    fp32 masters + AdamW states sharded (14 B/param / 8, gradients not yet alive at the start of backward), plus
    activations, loss tensors, gathered units and the reduce bucket, which DeepSpeed's model-state estimate omits."""
    ds = deepspeed_estimate(llama, Strategy.ZERO3, Offload.NONE, 8)
    assert ds is not None and ds.gpu_bytes_per_gpu == 4 * LM_HEAD + int(18 * P_LLAMA_8B / 8)
    assert deepspeed_estimate(llama, Strategy.DDP, Offload.NONE, 8) is None
    sc = Scenario.build(method="full", seq_len=2048, gradient_checkpointing=True)
    ours = plan_parallel(estimate_memory(llama, sc), llama, sc, Strategy.ZERO3).per_gpu_bytes(8)
    assert ours > ds.gpu_bytes_per_gpu


# --- CLI ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", [s.value for s in Strategy])
def test_cli_accepts_every_strategy_and_gives_per_gpu_values(capsys, strategy):
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--precision", "bf16", "--seq-len", "512",
            "--gpu", "H100 SXM", "--num-gpus", "8", "--strategy", strategy]
    assert main(base) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("components", "total_bytes", "peak_phase", "phase_totals_bytes", "cpu_bytes", "per_gpu_peak_bytes",
                "single_gpu_total_bytes", "deepspeed_estimate", "fits", "min_gpus"):
        assert key in out, key
    assert out["strategy"] == strategy and out["cpu_bytes"] == 0
    assert sum(out["components"].values()) == pytest.approx(out["total_bytes"], abs=10)
    assert out["total_bytes"] == out["per_gpu_peak_bytes"]
    assert (out["deepspeed_estimate"] is not None) == (strategy in ("zero2", "zero3"))


def test_cli_offload_gives_cpu_bytes_per_node(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--gpu", "A100 40GB", "--num-gpus", "16",
            "--gpus-per-node", "8", "--strategy", "zero3"]
    assert main(base + ["--offload", "optimizer_and_params"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["offload"] == "optimizer_and_params" and out["cpu_bytes"] == pytest.approx(8 * out["cpu_bytes_per_gpu"], abs=8)
    assert out["cpu_bytes"] > 0 and "weights" not in out["components"]
    assert main(base[:-4] + ["--strategy", "ddp", "--offload", "optimizer"]) == 2
    assert "offload needs ZeRO or FSDP" in capsys.readouterr().err
    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--offload", "optimizer"]) == 2


# --- measured multi-GPU rows (../shared/reference/measured.csv) ----------------------------------------------------


def _measured() -> list[dict[str, str]]:
    require_reference()
    with open(REFERENCE / "measured.csv", newline="") as f:
        return [r for r in csv.DictReader(f) if r["n_gpus"] not in ("", "1") and r["measured_peak_gb"]]


def _row(rows, model: str, technique: str, n: str) -> dict[str, str]:
    return next(r for r in rows if r["model_id"] == model and r["technique"] == technique and r["n_gpus"] == n)


def _per_gpu(repo: str, n: int, strategy: Strategy, offload: Offload = Offload.NONE, **kw) -> float:
    arch = arch_of(repo)
    sc = Scenario.build(**kw)
    return plan_parallel(estimate_memory(arch, sc), arch, sc, strategy, offload).per_gpu_bytes(n)


def test_measured_torchtune_llama31_70b_lora_fsdp_8_gpus():
    """torchtune README, Llama 3.1 70B LoRA + FSDP, 8 x A100, bs 2, packed 2048, AC on: 27.6 GiB per GPU
    ('Peak Memory per GPU', kind not stated). Ours: 33.5 GiB, 21% over. Expected direction: torchtune uses
    chunked cross-entropy (we count 6.3 GB of fp32 vocabulary-sized loss tensors) and compile."""
    row = _row(_measured(), "meta-llama/Llama-3.1-70B-Instruct", "LoRA + FSDP", "8")
    measured = float(row["measured_peak_gb"]) * GiB
    ours = _per_gpu("meta-llama/Llama-3.1-70B", 8, Strategy.FSDP_FULL_SHARD, method="lora", precision="bf16",
                    optimizer="adamw", lora_r=16, lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                    lora_dropout=0.0, micro_batch_size=2, seq_len=2048, gradient_checkpointing=True)
    assert 1.0 < ours / measured < 1.3


def test_measured_torchtune_llama31_70b_full_fsdp_cpu_offload_8_gpus():
    """torchtune README, Llama 3.1 70B full FT, FSDP + CPU offload (fused AdamW), 8 x A100: 13.9 GiB per GPU.
    Ours: 18.2 GiB, 31% over: the same chunked-loss difference, and our 2.1 GB LM-head gradient buffer."""
    row = _row(_measured(), "meta-llama/Llama-3.1-70B-Instruct", "full FT, FSDP (full shard) + CPU offload", "8")
    measured = float(row["measured_peak_gb"]) * GiB
    ours = _per_gpu("meta-llama/Llama-3.1-70B", 8, Strategy.FSDP_FULL_SHARD, Offload.OPTIMIZER_AND_PARAMS, method="full",
                    precision="bf16", optimizer="adamw_fused", micro_batch_size=2, seq_len=2048, gradient_checkpointing=True)
    assert 1.0 < ours / measured < 1.5


def test_measured_torchtune_llama2_7b_full_fsdp_4_gpus():
    """torchtune README (2024-04), Llama 2 7B full FT + FSDP, 4 x RTX 4090, bs 2, alpaca truncated at 512, AC on:
    22.9 GB per GPU (kind not stated). Ours at the 512 cap: 17.2 GB, 25% UNDER. Not tuned: the run's optimizer
    (fp32 states over bf16 weights), allocator reserve if 'reserved', and dynamic lengths are unknown."""
    row = _row(_measured(), "meta-llama/Llama-2-7b-hf", "full FT + FSDP", "4")
    measured = float(row["measured_peak_gb"]) * 1e9
    ours = _per_gpu("meta-llama/Llama-2-7b-hf", 4, Strategy.FSDP_FULL_SHARD, method="full", precision="bf16",
                    optimizer="adamw", micro_batch_size=2, seq_len=512, gradient_checkpointing=True)
    assert 0.7 < ours / measured < 0.8


def test_measured_lightning_llama2_lora_fsdp_are_far_above_our_estimate():
    """Lightning/lit-gpt rows, torch.cuda.max_memory_allocated()/1e9: Llama 2 7B LoRA + FSDP on 2 x A100 40GB,
    22.18 GB; 13B on 4 GPUs, 35.57 GB (the same memory kind we model). Ours: 8.7 GB and 9.2 GB, 2.5x and 3.8x
    UNDER. We do not know why and do not tune to it: a fully sharded bf16 base cannot need 22 GB; the numbers
    (and the note that 13B OOMs on 2 GPUs) suggest the frozen base was not sharded or kept in fp32 in that
    setup. Recorded as a known disagreement; the bound only asserts the direction."""
    rows = _measured()
    for model, n, ratio_max in (("meta-llama/Llama-2-7b-hf", "2", 0.45), ("meta-llama/Llama-2-13b-hf", "4", 0.3)):
        row = _row(rows, model, "LoRA + FSDP", n)
        measured = float(row["measured_peak_gb"]) * 1e9
        ours = _per_gpu(model, int(n), Strategy.FSDP_FULL_SHARD, method="lora", precision="bf16", optimizer="adamw",
                        lora_r=8, lora_targets="q_proj,v_proj", micro_batch_size=1, seq_len=1304, gradient_checkpointing=True)
        assert ours / measured < ratio_max


def test_measured_torchtitan_llama31_8b_fsdp_lies_between_full_and_no_checkpointing():
    """torchtitan, Llama 3.1 8B, FSDP2 on 8 x H100, bs 2 x 8192, selective (op) activation checkpointing:
    82.4 GiB max reserved. We model full or no checkpointing, not selective: ours with full checkpointing is
    50.5 GiB and without 160.7 GiB; the measured value lies between, as it should. (fp32 master + bf16 params,
    modelled as autocast with fp32 weights; reserved includes the allocator's cache, which we do not model.)"""
    row = _row(_measured(), "meta-llama/Llama-3.1-8B", "full training, FSDP", "8")
    measured = float(row["measured_peak_gb"]) * GiB
    kw = dict(method="full", precision="amp_bf16", optimizer="adamw", micro_batch_size=2, seq_len=8192)
    low = _per_gpu("meta-llama/Llama-3.1-8B", 8, Strategy.FSDP_FULL_SHARD, gradient_checkpointing=True, **kw)
    high = _per_gpu("meta-llama/Llama-3.1-8B", 8, Strategy.FSDP_FULL_SHARD, gradient_checkpointing=False, **kw)
    assert low < measured < high


def test_fit_engine_takes_the_new_strategies(llama):
    sc = Scenario.build(method="full", gradient_checkpointing=True)
    gpu = find_gpu("A100 80GB")
    ddp = check_fit(llama, sc, gpu, Strategy.DDP, 8)
    z2 = check_fit(llama, sc, gpu, Strategy.ZERO2, 8)
    z3 = check_fit(llama, sc, gpu, Strategy.ZERO3, 8, offload=Offload.OPTIMIZER)
    assert ddp.peak_bytes > z2.peak_bytes > z3.peak_bytes and z3.cpu_bytes_per_gpu > 0
    assert sum(z3.components.values()) == pytest.approx(z3.peak_bytes)


def test_deepspeed_mixed_precision_keeps_16bit_weights_and_partitioned_fp32_masters(llama):
    """DeepSpeed bf16: a 16-bit model on the GPU and fp32 master weights inside the (partitioned) optimizer; no
    autocast copies. FSDP keeps Trainer's fp32 weights and autocast copies."""
    sc = Scenario.build(method="full", precision="amp_bf16", optimizer="adamw_fused", seq_len=512)
    est = estimate_memory(llama, sc)
    z1 = next(p for p in plan_parallel(est, llama, sc, Strategy.ZERO1).phases if p.phase == "optimizer_step").gpu_parts(8)
    assert z1["weights"] == 2 * P_LLAMA_8B and z1["master_weights"] == 4 * P_LLAMA_8B / 8
    assert "weight_copies" not in z1
    off = plan_parallel(est, llama, sc, Strategy.ZERO2, Offload.OPTIMIZER)
    assert "master_weights" not in off.components_per_gpu(8)
    assert off.cpu_bytes_per_gpu(8) >= 4 * P_LLAMA_8B / 8
    fsdp = next(p for p in plan_parallel(est, llama, sc, Strategy.FSDP_SHARD_GRAD_OP).phases if p.phase == "backward").gpu_parts(8)
    assert fsdp["weights"] == 4 * P_LLAMA_8B and fsdp["weight_copies"] > 0
