"""Launch settings for the engines that run a layout: Megatron-LM arguments, a torchtitan TOML, a DeepSpeed JSON and
an accelerate FSDP YAML. The product estimates; these engines train (it never simulates a distributed runtime).

Setting names and defaults as the engines spell them at the versions named in :data:`VERSIONS` (read from their
sources: Megatron-LM ``megatron/training/arguments.py``, torchtitan ``torchtitan/config/job_config.py``, DeepSpeed
``docs/_pages/config-json.md``, accelerate ``examples/config_yaml_templates``). An engine that cannot express a
layout says why instead of emitting a wrong file: DeepSpeed's pipeline engine rejects ZeRO-2/3 and has no CP/EP
flag here; accelerate's FSDP plugin has no pipeline or expert parallelism and no ZeRO-1; torchtitan no ZeRO-1.
"""

from __future__ import annotations

import json

from engine.errors import ScenarioError
from engine.model.architecture import Architecture
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.layout import Layout, Recompute, Schedule, zero_choice
from engine.scenario.training import Method, Scenario

VERSIONS = {
    "megatron": "Megatron-LM core_v0.14.0 (23e00ed0); same flag names at d98e8a64",
    "torchtitan": "torchtitan v0.2.2 (73a0e697)",
    "deepspeed": "DeepSpeed config-json at edaa7221 (0.17-0.18 series)",
    "accelerate": "accelerate at 16cb6eb8 (FSDP2 + parallelism_config)",
}


def megatron_args(arch: Architecture, sc: Scenario, layout: Layout, fp8: Fp8Recipe | None) -> str:
    """``pretrain_gpt.py`` arguments for the layout (model-size flags included)."""
    a = [f"--tensor-model-parallel-size {layout.tensor_parallel}", f"--pipeline-model-parallel-size {layout.pipeline_parallel}",
         f"--context-parallel-size {layout.context_parallel}", f"--micro-batch-size {layout.micro_batch_size}",
         f"--global-batch-size {layout.global_batch_size or layout.micro_batch_size * layout.data_parallel}",
         f"--seq-length {sc.seq_len}", f"--num-layers {arch.num_layers}", f"--hidden-size {arch.hidden_size}",
         f"--num-attention-heads {arch.num_attention_heads}", f"--ffn-hidden-size {arch.dense_intermediate_size or arch.intermediate_size}",
         "--bf16"]
    if arch.num_key_value_heads != arch.num_attention_heads:
        a += ["--group-query-attention", f"--num-query-groups {arch.num_key_value_heads}"]
    if arch.mlp == "gated":
        a.append("--swiglu")
    if arch.norm != "layernorm":
        a.append("--normalization RMSNorm")
    if not arch.tie_word_embeddings:
        a.append("--untie-embeddings-and-output-weights")
    if layout.sequence_parallel:
        a.append("--sequence-parallel")
    if layout.virtual_pipeline > 1:
        a.append(f"--num-virtual-stages-per-pipeline-rank {layout.virtual_pipeline}")
    if layout.layers_per_stage and layout.pipeline_parallel > 1:
        a += [f"--decoder-first-pipeline-num-layers {layout.layers_per_stage[0]}",
              f"--decoder-last-pipeline-num-layers {layout.layers_per_stage[-1]}"]
    if arch.num_experts:
        a += [f"--num-experts {arch.num_experts}", f"--moe-router-topk {arch.experts_per_token}",
              f"--moe-ffn-hidden-size {arch.intermediate_size}", f"--expert-model-parallel-size {layout.expert_parallel}",
              f"--expert-tensor-parallel-size {layout.expert_tensor_parallel}", "--moe-grouped-gemm",
              f"--moe-token-dispatcher-type {'alltoall' if layout.expert_parallel > 1 else 'allgather'}"]
        if layout.moe_capacity_factor:
            a.append(f"--moe-expert-capacity-factor {layout.moe_capacity_factor:g}")
    if layout.recompute is Recompute.SELECTIVE_OP:
        raise ScenarioError("torchtitan's op-level selective checkpointing has no Megatron-LM setting: choose selective "
                            "(core attention, --recompute-granularity selective) or full")
    if layout.recompute is Recompute.SELECTIVE:
        a.append("--recompute-granularity selective")
    elif layout.recompute is Recompute.FULL:
        n = layout.recompute_layers
        a += ["--recompute-granularity full"] + ([f"--recompute-method block --recompute-num-layers {n}"] if n is not None
                                                 else ["--recompute-method uniform --recompute-num-layers 1"])
    if layout.zero == 1:
        a += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif layout.zero in (2, 3):  # Megatron-FSDP: optim_grads = ZeRO-2, optim_grads_params = ZeRO-3
        a += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy "
              + ("optim_grads_params" if layout.zero == 3 else "optim_grads")]
    else:
        a.append("--overlap-grad-reduce")
    if fp8 is Fp8Recipe.TORCHAO_ROWWISE:
        raise ScenarioError("Megatron-LM has no row-wise float8 recipe like torchao's: export for torchtitan, or "
                            "choose the te or torchao (tensorwise) recipe")
    if fp8 is not None:
        a += ["--fp8-format hybrid", "--fp8-recipe delayed" if fp8 is Fp8Recipe.TE else "--fp8-recipe tensorwise"]
    return "\n".join(f"{x} \\" for x in a).rstrip(" \\")


def torchtitan_toml(arch: Architecture, sc: Scenario, layout: Layout, fp8: Fp8Recipe | None) -> str:
    """The ``[training]``, ``[parallelism]``, ``[activation_checkpoint]`` (and float8) sections of a torchtitan TOML."""
    if layout.zero == 1:
        raise ScenarioError("torchtitan shards with FSDP2 or replicates; it has no ZeRO-1 / distributed optimizer: "
                            f"choose {zero_choice(0, 2, 3)}")
    schedule = {Schedule.ONE_F_ONE_B: "1F1B", Schedule.INTERLEAVED: "Interleaved1F1B", Schedule.GPIPE: "GPipe"}[layout.schedule]
    shard, replicate = (layout.data_parallel, 1) if layout.zero >= 2 else (1, layout.data_parallel)
    lines = ["[training]", f"local_batch_size = {layout.micro_batch_size * layout.micro_batches}",
             f"global_batch_size = {layout.global_batch_size or layout.micro_batch_size * layout.data_parallel}",
             f"seq_len = {sc.seq_len}", 'mixed_precision_param = "bfloat16"', 'mixed_precision_reduce = "float32"', "",
             "[parallelism]", f"data_parallel_replicate_degree = {replicate}", f"data_parallel_shard_degree = {shard}",
             f"tensor_parallel_degree = {layout.tensor_parallel}", f"pipeline_parallel_degree = {layout.pipeline_parallel}",
             f'pipeline_parallel_schedule = "{schedule}"', f"pipeline_parallel_microbatch_size = {layout.micro_batch_size}",
             f"context_parallel_degree = {layout.context_parallel}", f"expert_parallel_degree = {layout.expert_parallel}",
             f"expert_tensor_parallel_degree = {layout.expert_tensor_parallel}",
             # ZeRO-2: FSDP2 keeps the gathered parameters after forward (reshard_after_forward=False)
             *(['fsdp_reshard_after_forward = "never"'] if layout.zero == 2 else []), "",
             "[activation_checkpoint]"]
    if layout.recompute is Recompute.SELECTIVE:
        # torchtitan has no attention-core-only recompute; its SDPA (flash) keeps no s x s scores, so Korthikanti's
        # selective saves nothing over "none" there.
        lines += ["# Korthikanti's selective recompute has no torchtitan setting; with flash SDPA it equals none",
                  'mode = "none"']
    elif layout.recompute is Recompute.SELECTIVE_OP:
        lines += ['mode = "selective"', 'selective_ac_option = "op"']
    else:
        lines.append(f'mode = "{layout.recompute.value}"')
    if fp8 is not None:
        rowwise = fp8 is Fp8Recipe.TORCHAO_ROWWISE
        lines += ["", "[model]", 'converters = ["quantize.linear.float8"]', "", "[quantize.linear.float8]",
                  f'recipe_name = "{rowwise and "rowwise" or "tensorwise"}"',
                  # torchtitan's converter gathers in FP8 with tensorwise scaling only
                  f"enable_fsdp_float8_all_gather = {'true' if layout.zero == 3 and not rowwise else 'false'}",
                  f"precompute_float8_dynamic_scale_for_fsdp = {'true' if layout.zero == 3 and not rowwise else 'false'}",
                  'filter_fqns = ["output"]']
    return "\n".join(lines) + "\n"


def deepspeed_json(arch: Architecture, sc: Scenario, layout: Layout, fp8: Fp8Recipe | None) -> str:
    """A DeepSpeed config (data parallel with ZeRO, optional pipeline via ``PipelineModule``)."""
    if layout.context_parallel > 1 or layout.expert_parallel > 1 or layout.tensor_parallel > 1:
        raise ScenarioError("this DeepSpeed export covers ZeRO data parallelism and pipelines; TP/CP/EP need "
                            "Megatron-DeepSpeed or Megatron-LM: export to Megatron-LM instead")
    if layout.pipeline_parallel > 1 and layout.zero > 1:
        raise ScenarioError("DeepSpeed's pipeline engine rejects ZeRO-2/3 (ZeRO-1 only)")
    cfg = {
        "train_batch_size": layout.global_batch_size or layout.micro_batch_size * layout.data_parallel,
        "train_micro_batch_size_per_gpu": layout.micro_batch_size,
        "gradient_accumulation_steps": layout.micro_batches,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": layout.zero, "overlap_comm": True, "contiguous_gradients": True},
        "activation_checkpointing": {"partition_activations": False, "contiguous_memory_optimization": False},
    }
    if layout.pipeline_parallel > 1:
        cfg["pipeline"] = {"stages": layout.pipeline_parallel, "partition": "parameters",
                           "activation_checkpoint_interval": 1 if layout.recompute is Recompute.FULL else 0}
    return json.dumps(cfg, indent=2) + "\n"


def accelerate_yaml(arch: Architecture, sc: Scenario, layout: Layout, fp8: Fp8Recipe | None) -> str:
    """An accelerate config for FSDP2 with ``parallelism_config`` (DP shard / replicate, TP, CP)."""
    if layout.pipeline_parallel > 1 or layout.expert_parallel > 1:
        raise ScenarioError("accelerate's FSDP plugin has no pipeline or expert parallelism: export to Megatron-LM or torchtitan instead")
    if layout.zero == 1:
        # FSDP shards parameters and gradients together or not at all: no optimizer-states-only setting exists, and
        # dp_shard_size 1 would train plain replication (every rank a full Adam state), not the ZeRO-1 estimated.
        raise ScenarioError("accelerate's FSDP plugin has no ZeRO-1 (optimizer states only): choose "
                            f"{zero_choice(0, 2, 3)}, or export to DeepSpeed (stage 1)")
    shard, replicate = (layout.data_parallel, 1) if layout.zero >= 2 else (1, layout.data_parallel)
    return "\n".join([
        "distributed_type: FSDP", f"mixed_precision: {'fp8' if fp8 else 'bf16'}", f"num_processes: {layout.world_size}",
        # ZeRO-2 = FSDP SHARD_GRAD_OP: sharded, not resharded after forward; DDP: one shard, dp_replicate_size ranks
        "fsdp_config:", "  fsdp_version: 2", f"  fsdp_reshard_after_forward: {'true' if layout.zero == 3 else 'false'}",
        "  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP",
        f"  fsdp_activation_checkpointing: {'true' if layout.recompute is Recompute.FULL else 'false'}",
        "  fsdp_state_dict_type: SHARDED_STATE_DICT", "parallelism_config:",
        f"  parallelism_config_dp_replicate_size: {replicate}", f"  parallelism_config_dp_shard_size: {shard}",
        f"  parallelism_config_tp_size: {layout.tensor_parallel}", f"  parallelism_config_cp_size: {layout.context_parallel}",
    ]) + "\n"


EXPORTERS = {"megatron": megatron_args, "torchtitan": torchtitan_toml, "deepspeed": deepspeed_json,
             "accelerate": accelerate_yaml}


TRAIN_EVERY_PARAMETER = ("megatron", "torchtitan")
"""Engines whose training scripts have no PEFT adapters: a LoRA layout is refused, never exported as full training."""


def export_layout(engine: str, arch: Architecture, sc: Scenario, layout: Layout, fp8: Fp8Recipe | None = None) -> dict[str, str]:
    """{"engine", "version", "text"} of one engine's settings. Raises ScenarioError when it cannot express the layout."""
    fp8 = Fp8Recipe.of(fp8)
    if engine not in EXPORTERS:
        raise ScenarioError(f"unknown engine {engine!r}: one of {', '.join(sorted(EXPORTERS))}")
    if engine in TRAIN_EVERY_PARAMETER and sc.method is not Method.FULL:
        raise ScenarioError(f"{engine} trains every parameter (pretrain_gpt.py / torchtitan's train.py have no PEFT "
                            f"adapters): a {sc.method.value} layout is not one of its settings; LoRA under tensor "
                            "parallelism runs in NeMo Automodel; --export deepspeed or accelerate for data parallelism")
    return {"engine": engine, "version": VERSIONS[engine], "text": EXPORTERS[engine](arch, sc, layout, fp8)}
