"""One layout, estimated: per-rank memory of every stage, Megatron-LM's own figure beside it, the collectives of
a step and (with a cluster) the step time on engine.time's model. The entry point of the CLI and the Scale out page."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture
from engine.errors import ScenarioError
from engine.scaleout.comm_volumes import Collective, DataParallelSync, bubble_fraction, step_collectives
from engine.scaleout.fp8 import Fp8Recipe, check_fp8_gpu
from engine.scaleout.layout import ZERO_CHOICES, ZERO_STAGES, Layout, Recompute
from engine.scaleout.megatron import MegatronEstimate, departures, megatron_estimate
from engine.scaleout.stage_split import framework_split
from engine.scaleout.memory import Context, ScaleoutMemory, context, scaleout_memory
from engine.scaleout.step_time import Cluster, StepTime, step_time
from engine.scenario.training import METHOD_LABELS, Method, Scenario

ALL_METHODS: tuple[Method, ...] = tuple(Method)
"""Every fine-tuning method: what a framework runs unless its record says fewer
(:attr:`engine.scaleout.frameworks.Framework.methods`)."""

class LayoutEstimate(BaseModel):
    """Everything estimated for one layout. ``time`` is None without a cluster."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    layout: Layout
    memory: ScaleoutMemory
    megatron: MegatronEstimate
    collectives: tuple[Collective, ...]
    bubble_fraction: float
    time: StepTime | None = None


def megatron_for(arch: Architecture, scenario: Scenario, layout: Layout) -> MegatronEstimate:
    """Megatron-LM's formula for the same settings, with what it counts that this layout does not hold."""
    meg = megatron_estimate(
        arch, seq_len=scenario.seq_len, micro_batch=layout.micro_batch_size, tp=layout.tensor_parallel,
        pp=layout.pipeline_parallel, dp=layout.data_parallel, cp=layout.context_parallel,
        sequence_parallel=layout.sequence_parallel, selective=layout.recompute is Recompute.SELECTIVE,
        distributed_optimizer=layout.zero >= 1, virtual=layout.virtual_pipeline if layout.virtual_pipeline > 1 else None,
        micro_batches=layout.micro_batches if layout.global_batch_size else None, ep=layout.expert_parallel,
        etp=layout.expert_tensor_parallel)
    return meg.model_copy(update={"counts_more": departures(
        zero=layout.zero, shards=layout.optimizer_shards, recompute=layout.recompute.value,
        context_parallel=layout.context_parallel)})


def check_zero_stage(zero: int, zero_stages: tuple[int, ...], framework: str = "the framework") -> None:
    """Refuse a ZeRO stage the framework (named ``framework`` in the message) does not run.

    Raises:
        ScenarioError: ``zero`` is not in ``zero_stages`` (the message names the stages it runs).
    """
    if zero not in zero_stages:
        # each stage as the page's "Data-parallel sharding" box names it (ZeRO-0 is its "DDP")
        runs = " or ".join(ZERO_CHOICES[z] if "ZeRO" in ZERO_CHOICES[z] else f"ZeRO-{z} ({ZERO_CHOICES[z]})"
                           for z in zero_stages)
        raise ScenarioError(f"ZeRO-{zero}: {framework} runs {runs} only (its data-parallel sharding); pick one of "
                            "those or another framework")


def check_method(method: Method, methods: tuple[Method, ...], framework: str = "the framework") -> None:
    """Refuse a fine-tuning method the framework (named ``framework`` in the message) does not run.

    Raises:
        ScenarioError: ``method`` is not in ``methods`` (the message names the methods it runs).
    """
    if method not in methods:
        runs = " or ".join(METHOD_LABELS[m] for m in methods)
        raise ScenarioError(f"{METHOD_LABELS[method]}: not a method {framework} runs (it runs: {runs}); pick one of "
                            "those or another framework")


def check_schedule(layout: Layout, interleaved_schedule: bool, framework: str = "the framework") -> None:
    """Refuse virtual pipeline stages (the interleaved schedule) where the framework has no such schedule.

    Raises:
        ScenarioError: ``layout.virtual_pipeline`` above 1 and ``interleaved_schedule`` False.
    """
    if layout.virtual_pipeline > 1 and not interleaved_schedule:
        raise ScenarioError(f"Virtual stages {layout.virtual_pipeline}: {framework} has no interleaved pipeline schedule "
                            "(its schedules: all-forward-all-backward and 1F1B); use 1 virtual stage or another framework")


def estimate_layout(arch: Architecture, scenario: Scenario, layout: Layout, cluster: Cluster | None = None,
                    fp8: Fp8Recipe | None = None, ctx: Context | None = None, master_weights: bool = False,
                    fused_kernels: bool = False, tp_comm_overlap: bool = False, dtensor_tp: bool = False,
                    fp8_all_gather: bool | None = None, dp_sync: DataParallelSync | None = None,
                    async_tp_linears: bool = False, zero_stages: tuple[int, ...] = ZERO_STAGES,
                    methods: tuple[Method, ...] = ALL_METHODS, cost_balanced_stages: bool = False,
                    interleaved_schedule: bool = True, framework_label: str = "the framework") -> LayoutEstimate:
    """Memory, Megatron's formula, collectives and (with ``cluster``) step time of ``layout``. ``master_weights``: the
    16-bit model with fp32 master weights of Megatron-LM / torchtitan (:class:`engine.scaleout.memory.Context`);
    ``fused_kernels`` (torch.compile, Megatron-LM's fused kernels) and ``tp_comm_overlap`` (Megatron-LM
    ``--tp-comm-overlap``, torchtitan AsyncTP): see :func:`engine.scaleout.step_time.step_time`; ``dtensor_tp``: TP
    as PyTorch DTensor (torchtitan) runs it (:func:`engine.scaleout.comm_volumes.model_parallel_collectives`);
    ``fp8_all_gather``: FSDP2 / TP all-gathers in FP8 (default: with torchao's tensorwise float8; its rowwise recipe,
    ``Fp8Recipe.TORCHAO_ROWWISE``, gathers in bf16: torchtitan's float8 converter enables the FP8 all-gather for
    tensorwise scaling only); ``dp_sync``: the framework's data-parallel sync where it is not the default
    (:class:`engine.scaleout.comm_volumes.DataParallelSync`): its collectives and the memory it holds (a ``ctx``
    passed in brings its own); ``async_tp_linears``: the TP overlap is nanotron's asynchronous TP linears
    (:func:`engine.scaleout.step_time.comm_sums`); ``zero_stages``: the ZeRO stages the framework runs
    (:attr:`engine.scaleout.frameworks.Framework.zero_stages`); ``methods``: the fine-tuning methods it runs
    (:attr:`engine.scaleout.frameworks.Framework.methods`); ``cost_balanced_stages``: a layout with pipeline stages
    and no split of its own gets the framework's cost-balanced one (:func:`engine.scaleout.stage_split.framework_split`);
    the estimate's ``layout`` carries the split it ran; ``interleaved_schedule``: whether the framework has the
    interleaved schedule (virtual stages); ``framework_label``: the framework's name in a refusal.

    Raises:
        ScenarioError: the scenario's method is not one of ``methods``, the layout's ZeRO stage is not one of
            ``zero_stages``, the layout does not fit the model (see
            :func:`engine.scaleout.memory.check_layout`), FP8
            on a GPU without FP8 (:func:`engine.scaleout.fp8.check_fp8_gpu`), or master weights with fp32 or a PEFT
            method (:func:`engine.scaleout.memory.with_master_weights`; bf16 and amp_bf16 are the same run with them),
            a cost-balanced split that leaves a stage empty (:func:`engine.scaleout.stage_split.cost_balanced_layers`),
            or virtual stages under a framework without the interleaved schedule (:func:`check_schedule`).
    """
    fp8 = Fp8Recipe.of(fp8)
    check_method(scenario.method, methods, framework_label)
    check_zero_stage(layout.zero, zero_stages, framework_label)
    check_schedule(layout, interleaved_schedule, framework_label)
    layout = framework_split(arch, layout, cost_balanced_stages)
    if cluster is not None:
        check_fp8_gpu(fp8, cluster.gpu)
    ctx = ctx or context(arch, scenario, layout, fp8, master_weights, dp_sync)
    mem = scaleout_memory(arch, scenario, layout, fp8, ctx)
    stage = mem.max_stage.stage
    per_node = cluster.gpus_per_node if cluster else layout.world_size
    trainable = 1.0 if scenario.method is Method.FULL else min(1.0, ctx.estimate.trainable_parameters / ctx.split.total)
    cols = step_collectives(arch, layout, ctx.split, scenario.seq_len, ctx.spec.compute_bytes, per_node, stage,
                            fp8_all_gather=(fp8 is not None and fp8.gathers_in_fp8) if fp8_all_gather is None else fp8_all_gather,
                            trainable_fraction=trainable, dtensor_tp=dtensor_tp, dp_sync=dp_sync)
    time = None
    if cluster is not None:
        time = step_time(arch, layout, cluster, cols, ctx, mem.max_stage.parameters, fp8, fused_kernels=fused_kernels,
                         tp_comm_overlap=tp_comm_overlap, async_tp_linears=async_tp_linears)
    return LayoutEstimate(layout=layout, memory=mem, megatron=megatron_for(arch, scenario, layout),
                          collectives=tuple(cols), bubble_fraction=bubble_fraction(layout), time=time)
