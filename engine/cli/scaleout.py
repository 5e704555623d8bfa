"""``python -m engine estimate`` with a parallel layout: ``--tensor-parallel N --pipeline-parallel N --context-parallel N
--expert-parallel N --sequence-parallel --recompute {none,selective,selective_op,full} --virtual-pipeline N --num-nodes N`` and
``--precision fp8 --fp8-recipe te|torchao|torchao_rowwise`` (:mod:`engine.scaleout`).

``--strategy`` ddp, zero1 (the distributed optimizer), zero2 / fsdp_shard_grad_op or zero3 / fsdp_full_shard shards
over DP x CP; ``--layout-framework NAME`` (:data:`engine.scaleout.frameworks.FRAMEWORKS`: generic, megatron, nemo,
torchtitan, nanotron) sets the framework's kernels, TP overlap default, DTensor TP, data-parallel sync, master weights
(full training of a 16-bit model) and FP8 recipe; ``--fused-kernels`` and ``--tp-comm-overlap`` turn the step time's
fused kernels and TP overlap on whatever the framework (``--tp-comm-overlap`` with a framework that has none exits 2;
``--fp8-recipe`` overrides its recipe); the JSON says which in ``layout_framework``; a dataset size
adds ``tokens_per_second``, ``hours``, ``gpu_hours``, ``cost_usd_on_demand``, ``cost_usd_spot``, each with its
cross-validated 80% band (``*_low`` / ``*_high``, ``band_note``: :mod:`engine.plan.layout_cost`). ``--master-weights`` with bf16 or amp_bf16 (fp16 or amp_fp16) is one run, Megatron-LM's
``--bf16`` (``--fp16``), said in ``precision_note``; with fp32 or a PEFT method it exits 2.

JSON adds ``per_rank`` (one entry per pipeline stage: ``stage``, ``peak_allocated_bytes``, ``components``),
``max_rank_peak_allocated_bytes``, ``megatron_estimate_bytes`` (Megatron-LM's own ``theoretical_memory_usage``
for the same settings) with the differences explained, the collectives of a step, the pipeline bubble and, with
``--gpu``, the fit and the step time (``--inter-node-gbits`` and ``--inter-node-fabric``, :data:`engine.time.fabrics
.FABRICS`, describe the network between nodes; the JSON names the fabric in ``inter_node_fabric``); ``--export`` adds
the launch settings of one engine.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from engine.cli.options import positive_float, positive_int
from engine.errors import ScenarioError
from engine.memory.parallel import Strategy
from engine.model.architecture import Architecture
from engine.scaleout.exports import EXPORTERS, export_layout
from engine.plan.verdict import fit_verdict
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, Framework, framework
from engine.scaleout.layout import Layout, Recompute, Schedule, require_model_limits
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Method, Scenario
from engine.time.fabrics import DEFAULT_FABRIC, FABRICS

if TYPE_CHECKING:  # the layout model is imported when a layout is asked for (a plain estimate starts faster)
    from engine.plan.cost import Dataset
    from engine.plan.layout_cost import LayoutRun
    from engine.scaleout.estimate import LayoutEstimate
    from engine.scaleout.step_time import Cluster

FP8 = "fp8"
_ZERO = {Strategy.DDP: 0, Strategy.ZERO1: 1, Strategy.ZERO2: 2, Strategy.FSDP_SHARD_GRAD_OP: 2, Strategy.ZERO3: 3,
         Strategy.FSDP_FULL_SHARD: 3}
_FLAGS = ("tensor_parallel", "pipeline_parallel", "context_parallel", "expert_parallel", "virtual_pipeline",
          "num_nodes", "recompute", "recompute_layers", "global_batch_size", "pipeline_schedule", "fp8_recipe",
          "export", "moe_capacity_factor", "inter_node_gbits", "inter_node_fabric", "layout_framework")


def add_scaleout_options(p: argparse.ArgumentParser) -> None:
    """The layout options, and ``fp8`` among the precisions."""
    precision = next(a for a in p._actions if a.dest == "precision")
    precision.choices = list(precision.choices) + [FP8]
    precision.help = (precision.help or "") + "; fp8 = FP8 matmuls on bf16-mixed training (with --fp8-recipe)"
    g = p.add_argument_group("parallel layout (Megatron-LM / torchtitan; per rank)")
    g.add_argument("--tensor-parallel", type=positive_int, default=None, metavar="N", help="TP degree (default 1)")
    g.add_argument("--pipeline-parallel", type=positive_int, default=None, metavar="N", help="PP stages (default 1)")
    g.add_argument("--context-parallel", type=positive_int, default=None, metavar="N", help="CP degree (default 1)")
    g.add_argument("--expert-parallel", type=positive_int, default=None, metavar="N", help="EP degree, inside DP x CP (default 1)")
    g.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism (needs TP > 1)")
    g.add_argument("--recompute", choices=[r.value for r in Recompute], default=None,
                   help="activation recomputation: none, selective (core attention, Megatron), selective_op (torchtitan's "
                        "op-level SAC: every second matmul and the attention output kept), full (default none)")
    g.add_argument("--recompute-layers", type=int, default=None, metavar="N",
                   help="with --recompute full: layers recomputed per stage (Megatron --recompute-num-layers, block)")
    g.add_argument("--virtual-pipeline", type=positive_int, default=None, metavar="N",
                   help="model chunks per pipeline rank (interleaved 1F1B)")
    g.add_argument("--pipeline-schedule", choices=[s.value for s in Schedule], default=None, help="default 1f1b")
    g.add_argument("--num-nodes", type=positive_int, default=None, metavar="N",
                   help="nodes of --gpus-per-node GPUs (default 8); DP = GPUs / (TP x PP x CP)")
    g.add_argument("--global-batch-size", type=positive_int, default=None, metavar="N",
                   help="sequences per step over all DP ranks (default micro batch x DP x accumulation steps)")
    g.add_argument("--moe-capacity-factor", type=positive_float, default=None, metavar="X", help="MoE capacity factor (default dropless)")
    g.add_argument("--inter-node-gbits", type=positive_float, default=None, metavar="G",
                   help="network per GPU between nodes, Gb/s (default: engine.scaleout.step_time.DEFAULT_INTER_NODE_GBITS)")
    g.add_argument("--inter-node-fabric", choices=list(FABRICS), default=None,
                   help="the network between nodes: infiniband (default: the fitted share of line rate, NCCL's 6.6 us "
                        "per network step) or efa (AWS EFA on p5: 0.83 of line rate, 23 us per step; engine.time.fabrics)")
    g.add_argument("--fp8-recipe", choices=[r.value for r in Fp8Recipe], default=None,
                   help="with --precision fp8: te (TransformerEngine), torchao (float8, tensorwise) or torchao_rowwise "
                        "(float8, row-wise scaling) (default te)")
    g.add_argument("--master-weights", action="store_true",
                   help="16-bit model + fp32 master weights and gradients (Megatron-LM --bf16 / --fp16, torchtitan FSDP2) "
                        "instead of the Hugging Face Trainer's autocast: --precision bf16 or amp_bf16 (the same run), fp16 or "
                        "amp_fp16, or fp8 (over bf16); refused with fp32 and with LoRA/QLoRA (exit 2)")
    g.add_argument("--tp-comm-overlap", action="store_true",
                   help="tensor-parallel collectives overlapped with the GEMMs (Megatron-LM --tp-comm-overlap, torchtitan AsyncTP)")
    g.add_argument("--layout-framework", choices=list(FRAMEWORKS), default=None, metavar="NAME",
                   help=f"the parallel training framework, {', '.join(FRAMEWORKS)} (default {DEFAULT_FRAMEWORK}; "
                        "--framework is the one-GPU training stack): its kernels, TP overlap, DTensor TP, "
                        "data-parallel sync, master weights and FP8 recipe (engine.scaleout.frameworks); --fused-kernels, "
                        "--tp-comm-overlap and --fp8-recipe still apply on top")
    g.add_argument("--export", choices=sorted(EXPORTERS), default=None, help="print launch settings for this engine")


def requested(args: argparse.Namespace) -> bool:
    """Whether the command line asks for a layout estimate."""
    return (args.precision == FP8 or args.sequence_parallel or args.master_weights or args.tp_comm_overlap
            or any(getattr(args, k) is not None for k in _FLAGS))


def take_fp8(args: argparse.Namespace) -> Fp8Recipe | None:
    """The FP8 recipe; ``--precision fp8`` becomes the mixed-bf16 scenario that FP8 matmuls run on."""
    if args.precision != FP8:
        if args.fp8_recipe is not None:
            raise ScenarioError("--fp8-recipe needs --precision fp8")
        return None
    args.precision, args.typed_precision = "amp_bf16", FP8
    return Fp8Recipe(args.fp8_recipe or framework(getattr(args, "layout_framework", None)).fp8_recipe.value)


def layout_settings(args: argparse.Namespace) -> dict[str, Any]:
    """:func:`engine.scaleout.estimate.estimate_layout`'s framework keywords (``fused_kernels``, ``tp_comm_overlap``,
    ``dtensor_tp``, ``dp_sync``): ``--layout-framework``'s (:meth:`engine.scaleout.frameworks.Framework.layout_settings`),
    with ``--fused-kernels`` and ``--tp-comm-overlap`` turning theirs on.

    Raises:
        ScenarioError: ``--tp-comm-overlap`` with a framework that cannot overlap its TP communication.
    """
    fw = framework(getattr(args, "layout_framework", None))
    return fw.layout_settings(args.fused_kernels, True if args.tp_comm_overlap else None)


def framework_json(args: argparse.Namespace, settings: dict[str, Any]) -> dict[str, Any]:
    """What the layout ran as: the framework's name and ``settings``, what it and the flags made
    (:func:`layout_settings` of the same ``args``)."""
    fw: Framework = framework(getattr(args, "layout_framework", None))
    return {"name": fw.name, "fused_kernels": settings["fused_kernels"], "tp_comm_overlap": settings["tp_comm_overlap"],
            "dtensor_tp": fw.dtensor_tp, "dp_sync": None if fw.dp_sync is None else fw.dp_sync._asdict(),
            "master_weights": args.master_weights, "zero_stages": list(fw.zero_stages),
            "methods": [m.value for m in fw.methods], "cost_balanced_stages": fw.cost_balanced_stages,
            "summary": fw.summary()}


def layout_scenario(scenario: Scenario, args: argparse.Namespace) -> tuple[Scenario, str | None]:
    """The scenario a layout trains and, with ``--master-weights``, the sentence that says what the precision means:
    ``bf16`` and ``amp_bf16`` name the same Megatron-LM ``--bf16`` run (:func:`engine.scaleout.memory.with_master_weights`,
    which also refuses fp32 and LoRA/QLoRA with master weights). A ``--layout-framework`` that trains with master weights
    (:class:`engine.scaleout.frameworks.Framework` ``master_weights``) turns them on (``args.master_weights``) where
    they apply: full training of a 16-bit model."""
    from engine.scaleout.memory import MASTER_PRECISION

    fw = framework(getattr(args, "layout_framework", None))
    by_framework = (not args.master_weights and bool(fw.master_weights) and scenario.method is Method.FULL
                    and scenario.precision in MASTER_PRECISION)
    if by_framework:
        args.master_weights = True
    if not args.master_weights:
        return scenario, None
    typed = getattr(args, "typed_precision", None) or scenario.precision.value
    from engine.scaleout.memory import with_master_weights

    scenario = with_master_weights(scenario, True)
    bits = "bf16" if scenario.precision is PrecisionMode.AMP_BF16 else "fp16"
    flag = f"--layout-framework {fw.name} (master weights)" if by_framework else "--master-weights"
    return scenario, (f"--precision {typed} {flag}: a {bits} model and activations with fp32 master "
                      f"weights, fp32 gradients and Adam states in the optimizer (Megatron-LM --{bits}); the scenario "
                      f"is shown as {scenario.precision.value}, the same run")


def layout_from_args(args: argparse.Namespace, scenario: Scenario, arch: Architecture | None = None) -> tuple[Layout, int]:
    """The layout and its GPU count from the options; with ``arch``, the model's own limits (no experts, more
    stages than layers) are checked first, as the Scale out page does (:func:`engine.scaleout.layout.require_model_limits`)."""
    if args.recompute_layers is not None and args.recompute != "full":
        raise ScenarioError("--recompute-layers counts the layers of full recompute: it needs --recompute full")
    tp, pp, cp = args.tensor_parallel or 1, args.pipeline_parallel or 1, args.context_parallel or 1
    if arch is not None:
        require_model_limits(arch, pp, args.expert_parallel or 1)
    per_node = getattr(args, "gpus_per_node", None) or 8  # the plan verb has no --gpus-per-node: nodes of 8
    if args.num_nodes is not None and args.num_gpus is not None and args.num_gpus != args.num_nodes * per_node:
        raise ScenarioError(f"--num-gpus {args.num_gpus} disagrees with --num-nodes x --gpus-per-node = {args.num_nodes * per_node}")
    world = args.num_gpus or (args.num_nodes * per_node if args.num_nodes else tp * pp * cp)
    if world % (tp * pp * cp):
        raise ScenarioError(f"{world} GPUs are not a multiple of TP x PP x CP = {tp * pp * cp}")
    strategy = Strategy(args.strategy or "ddp")
    if strategy not in _ZERO:
        raise ScenarioError(f"--strategy {strategy.value} with a parallel layout: use ddp, zero1 (distributed optimizer), "
                            "zero2 / fsdp_shard_grad_op or zero3 / fsdp_full_shard")
    dp = world // (tp * pp * cp)
    gbs = args.global_batch_size or scenario.micro_batch_size * dp * scenario.gradient_accumulation_steps
    layout = Layout.build(
        tensor_parallel=tp, pipeline_parallel=pp, context_parallel=cp, expert_parallel=args.expert_parallel or 1,
        data_parallel=dp, sequence_parallel=args.sequence_parallel, recompute=args.recompute or "none",
        recompute_layers=args.recompute_layers, virtual_pipeline=args.virtual_pipeline or 1,
        schedule=args.pipeline_schedule, zero=_ZERO[strategy], micro_batch_size=scenario.micro_batch_size,
        global_batch_size=gbs, moe_capacity_factor=args.moe_capacity_factor)
    if args.gradient_checkpointing:
        raise ScenarioError("with a parallel layout use --recompute full instead of --gradient-checkpointing")
    return layout, per_node


def cluster_from_args(args: argparse.Namespace, layout: Layout, per_node: int) -> Cluster:
    """The cluster ``--gpu``, ``--gpus-per-node``, ``--inter-node-gbits`` and ``--inter-node-fabric`` describe for
    ``layout``.

    Raises:
        ScenarioError: the layout's GPUs do not fill whole nodes of ``per_node``.
    """
    from engine.hardware.gpus import find_gpu  # the GPU catalog: only for a layout on a named GPU
    from engine.scaleout.step_time import DEFAULT_INTER_NODE_GBITS, Cluster

    if layout.world_size % per_node and layout.world_size > per_node:
        raise ScenarioError(f"{layout.world_size} GPUs do not fill nodes of {per_node} GPUs (--gpus-per-node {per_node}): "
                            f"use a multiple of {per_node} GPUs or at most {per_node}, or another --gpus-per-node")
    return Cluster(gpu=find_gpu(args.gpu), nodes=max(1, layout.world_size // per_node),
                   gpus_per_node=min(per_node, layout.world_size),
                   inter_node_gbits=DEFAULT_INTER_NODE_GBITS if args.inter_node_gbits is None else args.inter_node_gbits,
                   fabric=args.inter_node_fabric or DEFAULT_FABRIC)


def scaleout_json(arch: Architecture, scenario: Scenario, args: argparse.Namespace, fp8: Fp8Recipe | None,
                  dataset: Dataset | None = None) -> dict[str, Any]:
    """The layout's JSON fields (see the module docstring); with ``dataset`` (and ``--gpu``) its hours and cost."""
    from engine.scaleout.estimate import estimate_layout  # the layout model: only for a layout

    layout, per_node = layout_from_args(args, scenario, arch)
    if args.moe_capacity_factor is not None and not arch.num_experts:
        raise ScenarioError(f"--moe-capacity-factor: this {arch.model_type} model has no experts to route to")
    for flag in ("inter_node_gbits", "inter_node_fabric"):  # the network only enters the step time, on a GPU
        if args.gpu is None and getattr(args, flag) is not None:
            raise ScenarioError(f"--{flag.replace('_', '-')} sets the step time's network: it needs --gpu")
    cluster = None if args.gpu is None else cluster_from_args(args, layout, per_node)
    settings = layout_settings(args)
    est = estimate_layout(arch, scenario, layout, cluster, fp8, master_weights=args.master_weights, **settings)
    out = {**_memory_json(est, scenario.method.value), "layout_framework": framework_json(args, settings)}
    if cluster is not None:
        out.update(_fit_time_json(est, cluster))
        for col_json, col in zip(out["collectives"], est.collectives):  # the catalog's name of the link it crosses
            col_json["link_name"] = cluster.link(col).name
        if dataset is not None:
            from engine.plan.cost import CHEAPEST_LISTED
            from engine.plan.layout_cost import layout_run

            out.update(_time_cost_json(layout_run(est, cluster, dataset, scenario.seq_len,
                                                  CHEAPEST_LISTED if args.price_source is None else args.price_source), dataset, scenario))
    if args.export:
        out["export"] = export_layout(args.export, arch, scenario, layout, fp8)
    return out


def _memory_json(est: LayoutEstimate, method: str) -> dict[str, Any]:
    mem, meg, layout = est.memory, est.megatron, est.layout
    first, worst = mem.stages[0], mem.max_stage
    return {
        # The top-level memory fields are the most loaded rank's (as --strategy makes them per GPU); the one-GPU
        # estimate of the same scenario stays as single_gpu_total_bytes.
        "peak_allocated_bytes": round(worst.peak_allocated_bytes), "peak_reserved_bytes": round(worst.peak_reserved_bytes),
        "device_used_bytes": round(worst.device_used_bytes), "total_bytes": round(worst.peak_allocated_bytes),
        "peak_phase": worst.estimate.peak_phase, "components": {k: round(v) for k, v in worst.estimate.components.items()},
        "layout": {**layout.model_dump(mode="json"), "world_size": layout.world_size,
                   "micro_batches": layout.micro_batches, "label": layout.label()},
        "fp8_recipe": mem.fp8.value if mem.fp8 else None,
        "per_rank": [{
            "stage": s.stage, "layers": s.layers, "micro_batches_in_flight": s.in_flight,
            "parameters": round(s.parameters), "peak_allocated_bytes": round(s.peak_allocated_bytes),
            "peak_reserved_bytes": round(s.peak_reserved_bytes), "device_used_bytes": round(s.device_used_bytes),
            "nccl_bytes": round(s.nccl_bytes), "peak_phase": s.estimate.peak_phase,
            "components": {k: round(v) for k, v in s.estimate.components.items()},
            "formulas": {p.key: p.formula for p in s.estimate.parts},
        } for s in mem.stages],
        "max_rank_stage": mem.max_stage.stage,
        "max_rank_peak_allocated_bytes": round(mem.max_rank_peak_allocated_bytes),
        "megatron_estimate_bytes": round(meg.total_bytes),
        "megatron_estimate": {
            "weight_and_optimizer_bytes": round(meg.weight_and_optimizer_bytes),
            "activation_bytes": round(meg.activation_bytes or 0), "branch": meg.branch, "note": meg.note,
            "applies_to": meg.applies_to, "caveat": meg.caveat(method),
            "ours_first_stage_allocated_bytes": round(first.peak_allocated_bytes),
            "differences": [
                "ours counts the blocks' saved tensors module by module (engine.memory.activations; Hugging Face "
                "modules save more than Megatron's fused ones), the logits and loss, and the buffers",
                "Megatron ignores CP and shards its distributed optimizer over DP only (ours: / CP, and DP x CP)",
                "Megatron counts SwiGLU's MLP like a GeLU one (one f-wide tensor fewer) and no FP8 copies",
            ],
        },
        "bubble_fraction": est.bubble_fraction,
        "collectives": [{
            "dimension": c.dimension, "name": c.name, "kind": c.kind, "message_bytes": round(c.message_bytes),
            "count": c.count, "group_size": c.group_size, "link": c.link.value, "overlapped": c.overlapped,
            "bytes_per_rank": round(c.bytes_per_rank), "source": c.source,
        } for c in est.collectives],
        "tracer_cannot_check": TRACER_LIMITS,
    }


def _band_json(tokens_per_second: float, num_gpus: int) -> dict[str, Any]:
    """The cross-validated 80% band of a layout's tokens/s (engine.time.band, the multi-GPU rows; issue 23)."""
    from engine.plan.layout_cost import layout_band

    band = layout_band(num_gpus)
    low, high = band.tokens_per_second(tokens_per_second)
    return {"tokens_per_second_low": low, "tokens_per_second_high": high, "band_note": band.note}


def _fit_time_json(est: LayoutEstimate, cluster: Cluster) -> dict[str, Any]:
    worst = est.memory.max_stage
    t = est.time
    return {
        "gpu": {"name": cluster.gpu.name, "usable_memory_bytes": cluster.gpu.usable_memory_bytes},
        "inter_node_fabric": cluster.fabric,
        "num_gpus": est.layout.world_size,
        "fits": worst.device_used_bytes <= cluster.gpu.usable_memory_bytes,
        "verdict": fit_verdict(worst.peak_allocated_bytes, cluster.gpu.usable_memory_bytes).value,
        "headroom_bytes": round(cluster.gpu.usable_memory_bytes - worst.device_used_bytes),
        "step_time": None if t is None else {**t.model_dump(mode="json"), **_band_json(t.tokens_per_second, est.layout.world_size),
                                             "note": "engine.time's step-time model on the rank's shapes and links: "
                                                     "engine.scaleout.step_time (see its docstring)"},
    }


def _time_cost_json(run: LayoutRun, dataset: Dataset, scenario: Scenario) -> dict[str, Any]:
    """The one-GPU estimate's time and cost fields (``tokens_per_second`` of all GPUs, ``hours``, ``gpu_hours``,
    ``cost_usd_on_demand``, ``cost_usd_spot``, ``cost_reason``, the band of each as ``*_low`` / ``*_high`` and
    ``band_note``) for the layout, with ``time_cost``'s details."""
    r, price = run.run, run.price
    return {
        "tokens_per_second": r.tokens_per_second, "hours": r.hours, "gpu_hours": r.gpu_hours,
        "cost_usd_on_demand": r.cost_usd_on_demand, "cost_usd_spot": r.cost_usd_spot, "cost_reason": price.reason,
        **r.band_record(), "band_note": r.band_note,
        "time_cost": {
            "tokens": r.tokens, "tokens_per_epoch": dataset.tokens_per_epoch(scenario.seq_len), "epochs": dataset.epochs,
            "runs": dataset.runs, "num_gpus": run.num_gpus, "price_source": price.source,
            "on_demand_usd_per_gpu_hour": price.on_demand_usd_per_hour, "on_demand_source": price.on_demand_source,
            "spot_usd_per_gpu_hour": price.spot_usd_per_hour, "spot_source": price.spot_source, "price_date": price.date,
            "fits": run.fits, "verdict": run.verdict.value, "notes": list(run.notes),
        },
    }


def warn(out: dict[str, Any]) -> None:
    """Say at the top level what a reader of the numbers must know: no fit, a tight one, a large pipeline bubble."""
    warnings = out.setdefault("warnings", [])
    if out.get("fits") is False:
        warnings.append(f"the most loaded rank (stage {out['max_rank_stage']}) does not fit on {out['gpu']['name']}: "
                        "any step time below is for reference only")
    elif out.get("verdict") == "tight":
        warnings.append("tight: may not fit (the most loaded rank has under 10% of its peak to spare)")
    if out.get("bubble_fraction", 0.0) >= 0.25:
        warnings.append(f"the pipeline bubble is {out['bubble_fraction']:.0%} of the step: raise --global-batch-size "
                        "(more micro batches per step) or use --virtual-pipeline")


TRACER_LIMITS = [
    "the tracer runs one process on one (fake) GPU: it never builds TP/PP/CP/EP process groups, so the sharded "
    "parameter shapes, the pipeline's in-flight micro batches and the communication buffers are derived, not traced",
    "NCCL's buffers, the CUDA context and allocator fragmentation under many communicators are outside its counts",
    "Megatron/TransformerEngine fused kernels (and TE's FP8 weight cache) are not the Hugging Face modules it traces",
]
