"""LoRA under tensor parallelism (+ data parallelism / FSDP), NeMo Automodel's layout for its LoRA benchmarks
(docs/performance-summary.mdx: Llama 3 70B and Qwen2.5 32B at TP 2 x FSDP 4). Values computed by hand below."""

from __future__ import annotations

from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.comm_volumes import step_collectives
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.layout import Layout
from engine.scaleout.memory import context
from engine.scaleout.rank_compute import rank_gemms
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario

LLAMA70 = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-70B")[0])
ALL = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
LORA = Scenario.build(method="lora", lora_r=16, lora_targets=ALL, precision="bf16", seq_len=4096, micro_batch_size=2,
                      gradient_checkpointing=True)
# Llama-3.1-70B (hidden 8192, 8 KV heads of 128, MLP 28672, 80 layers): r (in + out) per adapted linear,
# q 8192+8192, k and v 8192+1024, o 8192+8192, gate and up 8192+28672, down 28672+8192.
ADAPTER_PARAMS = 80 * 16 * (16384 + 2 * 9216 + 16384 + 3 * 36864)


def test_lora_adapter_count_is_the_hand_count():
    assert context(LLAMA70, LORA, Layout(data_parallel=8)).estimate.trainable_parameters == ADAPTER_PARAMS


def test_lora_data_parallel_reduces_only_the_adapters_gradients():
    # DDP all-reduces the gradients of parameters that require them: the adapters' (fp32 buckets), not the 70B base's.
    # The old code all-reduced every parameter (70.6e9 x 4 B).
    layout = Layout(data_parallel=8)
    ctx = context(LLAMA70, LORA, layout)
    est = estimate_layout(LLAMA70, LORA, layout, ctx=ctx)
    dp = [c for c in est.collectives if c.dimension == "dp"]
    assert len(dp) == 1 and dp[0].kind == "all_reduce"
    assert abs(dp[0].message_bytes - 4 * ADAPTER_PARAMS) / (4 * ADAPTER_PARAMS) < 0.01


def test_lora_under_tensor_parallel_halves_the_adapter_gemms_per_rank():
    one = sum(g.flops for g, _, _ in rank_gemms(LLAMA70, LORA, Layout(), 2) if g.part == "lora")
    two = sum(g.flops for g, _, _ in rank_gemms(LLAMA70, LORA, Layout(tensor_parallel=2), 2) if g.part == "lora")
    assert one > 0 and abs(two / one - 0.5) < 1e-9


def test_lora_tp2_fsdp4_step_is_timed_and_fits_an_h100():
    layout = Layout.build(tensor_parallel=2, data_parallel=4, sequence_parallel=True, recompute="full", zero=3,
                          micro_batch_size=2, global_batch_size=32)
    est = estimate_layout(LLAMA70, LORA, layout, Cluster(gpu=find_gpu("H100 SXM"), nodes=1, gpus_per_node=8),
                          fused_kernels=True, tp_comm_overlap=True)
    # 35 GB of bf16 base per rank (70.6e9 x 2 B / TP 2, sharded / 4 by FSDP: 17.6 GB) plus activations: well under 80.
    assert est.memory.max_stage.peak_reserved_bytes < 80e9
    # Model FLOPs per token at least 4 x 70.6e9 (forward + input gradients, no weight gradients of the base):
    # tokens/s per GPU <= 989e12 (H100 SXM dense bf16) / (4 x 70.6e9) = 3,500.
    assert 500 < est.time.tokens_per_second_per_gpu < 3500


def test_engines_without_adapters_refuse_a_lora_layout():
    import pytest

    from engine.errors import ScenarioError
    from engine.scaleout.exports import export_layout
    # Megatron-LM's pretrain_gpt.py and torchtitan train every parameter: exporting a LoRA layout to them would
    # describe full training; DeepSpeed and accelerate are launchers around the PEFT script.
    with pytest.raises(ScenarioError, match="trains every parameter"):
        export_layout("megatron", LLAMA70, LORA, Layout(tensor_parallel=2))
    with pytest.raises(ScenarioError, match="trains every parameter"):
        export_layout("torchtitan", LLAMA70, LORA, Layout(data_parallel=8, zero=3))
    assert export_layout("accelerate", LLAMA70, LORA, Layout(data_parallel=8, zero=3))["engine"] == "accelerate"
