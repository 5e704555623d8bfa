"""``python -m engine estimate``: peak training memory by component (JSON, bytes); with ``--gpu`` the fit and the
per-GPU split of a multi-GPU strategy; with a dataset size the training time and cost; a parallel layout
(:mod:`engine.cli.scaleout`) its per-rank memory, step time and, with a dataset, hours and cost; ``--method inference``
gives serving memory, over tensor-parallel GPUs, and its speed instead (:mod:`engine.cli.serving`).
"""

from __future__ import annotations

import argparse
from typing import Any

import engine.cli.scaleout as scaleout  # by full path: engine.cli's __init__ imports this module
from engine.cli.options import (
    INFERENCE, add_gpu_options, add_model_options, add_parallel_inference_options, add_scenario_options,
    add_time_cost_options, dataset_from_args, emit_json, fail, gpus_per_node, load_model, scenario_from_args, strategies,
)
from engine.cli.gpu_name import warn_gpu_name
from engine.errors import EngineError, ScenarioError
from engine.memory.components import PHASES
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import MAX_GPUS, Offload, deepspeed_estimate, device_memory_per_gpu, plan_parallel
from engine.memory.seed_rules import seed_quick_rule
from engine.model.architecture import Architecture
from engine.plan.verdict import SAFETY_MARGIN_FRACTION, Verdict
from engine.scenario.lora import resolve_targets
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Method, Scenario


def add_parser(sub: Any) -> None:
    est = sub.add_parser("estimate", help="peak training memory by component (JSON, bytes)")
    add_model_options(est, required=False)
    est.add_argument("--from-config", nargs="+", metavar="FILE", default=None,
                     help="training config files (TrainingArguments/TRL, axolotl, LLaMA-Factory, torchtune, DeepSpeed, "
                          "accelerate, PEFT adapter_config.json, BitsAndBytesConfig), recognised by content; later files "
                          "and typed flags override earlier values; the JSON gains 'import' (mapped/ignored/unsupported)")
    add_scenario_options(est)
    add_gpu_options(est)
    add_parallel_inference_options(est)
    add_time_cost_options(est)
    scaleout.add_scaleout_options(est)  # --tensor-parallel ... --precision fp8 (engine.cli.scaleout)


def run(args: argparse.Namespace) -> int:
    """Print the estimate as JSON; exit 2 on bad input or an unreachable source."""
    try:
        imported = None
        if args.from_config:
            from engine.cli.from_config import imported_run  # the importers: only for --from-config

            arch, origin, imported_scenario, imported = imported_run(args)
        elif not (args.config or args.model):
            raise ScenarioError("give --model REPO_ID, --config PATH, or --from-config FILE naming the model")
        else:
            arch, _, origin = load_model(args)
        if args.method == INFERENCE:
            if dataset_from_args(args) is not None:
                raise ScenarioError("time and cost options are for training, not --method inference")
            from engine.cli.serving import serving_json  # the serving plan: only for --method inference

            out = serving_json(arch, origin, args)
        elif scaleout.requested(args):
            fp8 = scaleout.take_fp8(args)
            scenario, precision_note = scaleout.layout_scenario(scenario_from_args(args), args)
            dataset = dataset_from_args(args, step_time_options=True)
            if dataset is not None and args.gpu is None:
                raise ScenarioError("a dataset size needs --gpu to estimate time and cost")
            out = _estimate_json(arch, origin, scenario)
            out["single_gpu_total_bytes"] = out["total_bytes"]
            if precision_note:
                out["precision_note"] = precision_note
            out.update(scaleout.scaleout_json(arch, scenario, args, fp8, dataset))
            scaleout.warn(out)
        else:
            if any(getattr(args, k) is not None for k in ("concurrency", "kv_cache_dtype", "weight_precision",
                                                          "gpu_memory_utilization")):
                raise ScenarioError("--concurrency, --kv-cache-dtype, --weight-precision and --gpu-memory-utilization "
                                    "need --method inference")
            scenario = imported_scenario if imported is not None else scenario_from_args(args)
            dataset = dataset_from_args(args)
            if (args.num_gpus or 1) > MAX_GPUS:  # said by the flag (the fit's own error names its field)
                raise ScenarioError(f"--num-gpus: must be between 1 and {MAX_GPUS:,} for {args.strategy or 'a strategy'} "
                                    f"(got {args.num_gpus:,}); a parallel layout (--tensor-parallel ...) takes more")
            out = _estimate_json(arch, origin, scenario, _gpu(args))
            if imported is not None:
                out["import"] = imported
            if args.gpu is not None:
                out.update(_fit_json(arch, scenario, args))
                out.update(_per_gpu_json(arch, scenario, args))
                if dataset is not None:
                    if args.offload not in (None, "none"):
                        raise ScenarioError("time and cost do not model offload (CPU optimizer steps); drop --offload or the dataset size")
                    _check_nodes_of_the_time_model(args)
                    out.update(_time_cost_json(arch, scenario, dataset, args))
                _warn_if_not_fitting(out, args)
            elif args.offload is not None or args.gpus_per_node is not None:
                raise ScenarioError("--offload and --gpus-per-node need --gpu")
            elif args.num_gpus is not None or args.strategy is not None:
                raise ScenarioError("--num-gpus and --strategy need --gpu")
            elif dataset is not None:
                raise ScenarioError("a dataset size needs --gpu to estimate time and cost")
        warn_gpu_name(args, out)  # "A100" read as the A100 80GB: said on stderr and in warnings
    except EngineError as exc:
        return fail(exc)
    return emit_json(out)


def _check_nodes_of_the_time_model(args: argparse.Namespace) -> None:
    """The step time's data-parallel ring puts min(GPUs, 8) GPUs on a node (``engine.time.step``); GPUs per node that
    say otherwise (2 GPUs on nodes of 1: a network ring, timed over NVLink) would give another run's time. Refused,
    naming where the count came from (the flag or an imported file's num_machines)."""
    from engine.time.collectives import node_mismatch

    why = node_mismatch(args.num_gpus or 1, args.gpus_per_node)
    if why is None:
        return
    where = "--gpus-per-node" if "gpus_per_node" in getattr(args, "typed", ()) else "the imported files' GPUs per node"
    raise ScenarioError(f"{where} ({args.gpus_per_node}): {why}; drop the dataset size for the memory alone, or give a "
                        "layout (--tensor-parallel 1 --num-nodes N) whose cluster models the nodes")


def _estimate_json(arch: Architecture, origin: dict[str, Any], scenario: Scenario, gpu: Any = None) -> dict[str, Any]:
    est = estimate_memory(arch, scenario, gpu)
    # The seed's full fine-tuning rule (model states only), for comparison whatever the method.
    seed_precision = "fp32" if scenario.precision is PrecisionMode.FP32 else "bf16"
    seed = seed_quick_rule(arch.total_parameters, seed_precision)
    return {
        "source": origin,
        "scenario": scenario.model_dump(mode="json"),
        "total_parameters": est.total_parameters,
        "trainable_parameters": est.trainable_parameters,
        "components": {k: round(v) for k, v in est.components.items()},
        "total_bytes": round(est.total_bytes),
        "peak_phase": est.peak_phase,
        # What torch.cuda.max_memory_allocated / max_memory_reserved and nvidia-smi would report at the peak.
        "peak_allocated_bytes": round(est.peak_allocated_bytes),
        "peak_reserved_bytes": round(est.peak_reserved_bytes),
        "device_used_bytes": round(est.device_used_bytes),
        "overheads": {p.key: round(p.bytes) for p in est.overheads},
        "pageable_bytes": round(est.pageable_bytes),
        "first_step_peak_bytes": round(est.first_step_peak_bytes),
        "phase_totals_bytes": {ph: round(est.phase_total(ph)) for ph in PHASES},
        "attention_kernel": est.attention_kernel,
        "bytes_per_parameter": est.bytes_per_parameter,
        "formulas": {p.key: p.formula for p in est.parts},
        "seed_full_finetune_rule": {
            "rule": "fp32: 4+4+8 B/param" if seed_precision == "fp32" else "bf16 mixed: 2+2+8 B/param",
            "total_bytes": round(seed.total_bytes),
        },
        "lora_targets_resolved": [lin.module for lin in resolve_targets(arch, scenario.lora_targets)]
        if scenario.method is not Method.FULL else None,
        "warnings": list(est.warnings),
        "assumptions": list(est.assumptions),
        "not_modelled": list(est.not_modelled),
    }


def _gpu(args: argparse.Namespace) -> Any:
    """The catalog GPU of ``--gpu``, or None without it; an unknown name raises CatalogError naming the closest ones.
    The catalog is imported here, not at the top: an estimate without ``--gpu`` never loads it (bench_cli_start)."""
    if args.gpu is None:
        return None
    from engine.hardware.gpus import find_gpu

    return find_gpu(args.gpu)


def _fit_json(arch: Architecture, scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """The fit fields for --gpu (per-GPU bytes); an unknown GPU raises CatalogError naming the closest ones."""
    from engine.plan.fit import check_fit  # the fit model: only with --gpu

    gpu = _gpu(args)
    asked, used = strategies(args)
    est = estimate_memory(arch, scenario, gpu)
    fit = check_fit(arch, scenario, gpu, used, args.num_gpus or 1,
                    offload=Offload(getattr(args, "offload", None) or "none"), estimate=est)
    min_gpus = fit.min_gpus if used is asked else check_fit(arch, scenario, gpu, asked, 1, estimate=est).min_gpus
    return {
        "gpu": {"name": gpu.name, "usable_memory_bytes": gpu.usable_memory_bytes, "memory_bytes": gpu.memory_bytes},
        "num_gpus": fit.num_gpus,
        "strategy": fit.strategy.value,
        "per_gpu_peak_bytes": round(fit.peak_bytes),
        "fits": fit.fits,
        "verdict": fit.verdict.value,
        "headroom_bytes": round(fit.headroom_bytes),
        "min_gpus": min_gpus,
        "min_gpus_strategy": asked.value,
        "gpu_warnings": list(fit.warnings),
    }


def _per_gpu_json(arch: Architecture, scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """Per-GPU components/totals (same keys as the one-GPU estimate), CPU memory of offload, DeepSpeed's estimate."""
    (_, strategy), offload, n = strategies(args), Offload(args.offload or "none"), args.num_gpus or 1
    est = estimate_memory(arch, scenario, _gpu(args))
    plan = plan_parallel(est, arch, scenario, strategy, offload)
    per_node = gpus_per_node(args)
    ds = deepspeed_estimate(arch, strategy, offload, n, per_node)
    device = device_memory_per_gpu(est, plan, n)
    return {
        "single_gpu_total_bytes": round(est.total_bytes),
        "components": {k: round(v) for k, v in plan.components_per_gpu(n).items()},
        "total_bytes": round(plan.per_gpu_bytes(n)),
        "peak_allocated_bytes": round(device.allocated),
        "peak_reserved_bytes": round(device.reserved),
        "device_used_bytes": round(device.device_used),
        "overheads": {p.key: round(p.bytes) for p in device.components()},
        "pageable_bytes": round(device.pageable),
        "first_step_peak_bytes": round(plan.first_step_per_gpu_bytes(n)),
        "peak_phase": plan.peak_phase(n),
        "phase_totals_bytes": {p.phase: round(p.gpu_bytes(n)) for p in plan.phases},
        "offload": offload.value,
        "gpus_per_node": per_node,
        "cpu_bytes": round(plan.cpu_bytes_per_node(n, per_node)),
        "cpu_bytes_per_gpu": round(plan.cpu_bytes_per_gpu(n)),
        "gathered_unit": plan.gathered_unit or None,
        "replicated_quantized_weights_bytes": round(plan.replicated_quantized_bytes),
        "replicated_quantized_weights": plan.replicated_note or None,
        "quant_storage_note": plan.storage_note or None,
        "comm_buckets": plan.bucket_note or None,
        "deepspeed_estimate": None if ds is None else {
            "function": ds.function, "gpu_bytes_per_gpu": ds.gpu_bytes_per_gpu, "cpu_bytes_per_node": ds.cpu_bytes_per_node,
            "note": ds.note,
        },
    }


def _time_cost_json(arch: Architecture, scenario: Scenario, dataset: Any, args: argparse.Namespace) -> dict[str, Any]:
    """tokens_per_second (all GPUs), hours, costs, the step time by category, MFU and HFU; details in ``time_cost``.

    ``--measured-tokens-per-second`` calibrates: the raw prediction of this plan is compared with it and the factor
    measured / predicted scales every time and tokens/s below."""
    from engine.plan.cost import CHEAPEST_LISTED, estimate_plan  # the time model: only with a dataset size
    from engine.time.band import band_for
    from engine.time.throughput import calibrate, seed_throughput

    gpu = _gpu(args)
    _, strategy = strategies(args)
    kwargs: dict[str, Any] = {"fused_kernels": args.fused_kernels or args.cuda_graphs, "cuda_graphs": args.cuda_graphs,
                              "price_source": CHEAPEST_LISTED if args.price_source is None else args.price_source}
    plan = estimate_plan(arch, scenario, dataset, gpu, args.num_gpus or 1, strategy, **kwargs)
    calibration = None
    if args.measured_tokens_per_second is not None:
        calibration = calibrate(args.measured_tokens_per_second, plan.throughput)
        plan = estimate_plan(arch, scenario, dataset, gpu, args.num_gpus or 1, strategy, calibration=calibration.factor, **kwargs)
    tp, run, price = plan.throughput, plan.run, plan.price
    seed = seed_throughput(arch.active_parameters / 1e9, gpu, plan.num_gpus)
    return {
        "tokens_per_second": tp.tokens_per_second,
        "hours": run.hours,
        "gpu_hours": run.gpu_hours,
        "cost_usd_on_demand": run.cost_usd_on_demand,
        "cost_usd_spot": run.cost_usd_spot,
        "cost_reason": price.reason,
        **run.band_record(),
        "band": {"low": tp.band.low, "high": tp.band.high, "group": tp.band.group, "rows": tp.band.rows,
                 "sources": tp.band.sources, "calibrated": tp.band.calibrated, "note": tp.band.note},
        "step_time_s": tp.step_time_s,
        "step_time_breakdown_s": dict(tp.breakdown_s),
        "mfu": tp.mfu,
        "hfu": tp.hfu,
        "calibration": None if calibration is None else {
            "measured_tokens_per_second": calibration.measured_tokens_per_second,
            "predicted_tokens_per_second": calibration.predicted_tokens_per_second,
            "factor": calibration.factor,
            "raw_error": calibration.raw_error,
            "band_narrowed_by": tp.band.narrowing_from(band_for(plan.num_gpus, tp.hf_stack)),
        },
        "time_cost": {
            "tokens": run.tokens,
            "tokens_per_epoch": dataset.tokens_per_epoch(scenario.seq_len),
            "padding_waste": dataset.padding_waste(scenario.seq_len),
            "truncated_tokens": dataset.truncated_tokens(scenario.seq_len),
            "epochs": dataset.epochs,
            "runs": dataset.runs,
            "tokens_per_step": tp.step.tokens * plan.num_gpus,
            "attention_kernel": tp.attention_kernel,
            "link": tp.step.link,
            "fused_kernels": tp.fused_kernels,
            "loss_implementation": tp.loss.value if tp.loss else None,
            "cuda_graphs": args.cuda_graphs,
            "peak_flops": tp.peak.flops,
            "peak_dtype": tp.peak.dtype,
            "matmul_flops": tp.rates.matmul_flops,
            "matmul_source": tp.rates.matmul_source,
            "hbm_bytes_per_s": tp.rates.hbm_bytes_per_s,
            "flops_per_token": tp.executed_flops_per_token,
            "per_gpu_tokens_per_second": tp.per_gpu_tokens_per_second,
            "price_source": price.source,
            "on_demand_usd_per_gpu_hour": price.on_demand_usd_per_hour,
            "on_demand_source": price.on_demand_source,
            "spot_usd_per_gpu_hour": price.spot_usd_per_hour,
            "spot_source": price.spot_source,
            "price_date": price.date,
            "fits": plan.fits,
            "verdict": plan.verdict.value,
            "seed_rule": None if seed is None else {
                "tokens_per_second": seed.tokens_per_second,
                "hours": dataset.tokens_per_epoch(scenario.seq_len) * dataset.epochs * dataset.runs / seed.tokens_per_second / 3600,
                "rule": seed.rule,
            },
            "notes": list(plan.notes) + ([] if plan.fits else ["this plan does not fit in memory: time and cost for reference only"]),
        },
    }


def _warn_if_not_fitting(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Say at the top level when the plan does not fit (times and costs are then for reference only), or fits with
    less than the safety margin to spare (:mod:`engine.plan.verdict`), on the catalog GPU ``--gpu`` was read as."""
    if out.get("verdict") == Verdict.TIGHT.value:
        out.setdefault("warnings", []).append(
            f"tight: may not fit on {args.num_gpus or 1} x {out['gpu']['name']}: {out.get('headroom_bytes', 0):,} bytes to spare, less "
            f"than the {SAFETY_MARGIN_FRACTION:.0%} of the peak by which the allocator's reserve can exceed the modelled one")
        return
    if out.get("fits") is not False:
        return
    strategy = strategies(args)[0].value
    fewest = out.get("min_gpus")
    advice = (f"the fewest that fit with {strategy} is {fewest}" if fewest
              else f"no count fits with {strategy}" + ("; try --strategy zero3" if strategy == "ddp" else ""))
    out.setdefault("warnings", []).append(
        f"does not fit on {args.num_gpus or 1} x {out['gpu']['name']}: {advice}; any time and cost below are for reference only"
    )

