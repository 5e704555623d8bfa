"""``python -m engine estimate --method inference``: serving memory of one GPU (one tensor-parallel rank with
``--tensor-parallel N``), and with ``--gpu`` the fit, the KV-cache budget at ``--gpu-memory-utilization``, the most
concurrent sequences at ``--seq-len`` (``max_concurrency``) and prefill / decode tokens per second
(``decode_tokens_per_second``: :mod:`engine.plan.serving`)."""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.options import INFERENCE, SCENARIO_FIELDS
from engine.cli.peft_options import PEFT_FIELDS
from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.memory.inference import InferenceScenario, estimate_inference, kv_cache_bytes_per_token, sliding_window_layers
from engine.model.architecture import Architecture
from engine.plan.serving import serving_plan

_TRAINING_LAYOUT = ("pipeline_parallel", "context_parallel", "expert_parallel", "virtual_pipeline", "num_nodes",
                    "recompute", "recompute_layers", "global_batch_size", "pipeline_schedule", "fp8_recipe", "export",
                    "moe_capacity_factor", "inter_node_gbits", "inter_node_fabric", "layout_framework")
_TRAINING_ONLY = tuple(f for f in (*SCENARIO_FIELDS, *PEFT_FIELDS, "no_double_quant", "no_prepare_kbit", "gpus_per_node")
                       if f not in ("method", "seq_len"))
"""Options typed for a training step that a serving estimate never reads (``--micro-batch-size``, ``--lora-r``,
``--optimizer``, ...): refused by name, so ``--method inference --micro-batch-size 0`` is not an answer that
silently ignored it. ``--seq-len`` is the serving context."""


def inference_scenario(args: argparse.Namespace) -> InferenceScenario:
    """The serving scenario of the options; ScenarioError for a training-only option."""
    if args.strategy not in (None, "ddp") or args.offload not in (None, "none"):
        raise ScenarioError("--method inference serves replicas (with --tensor-parallel, split over GPUs as vLLM / TGI "
                            "do): --strategy and --offload do not apply")
    unread = sorted(set(_TRAINING_ONLY) & getattr(args, "typed", set()))
    if unread:
        raise ScenarioError("--method inference estimates serving: " + ", ".join("--" + k.replace("_", "-") for k in unread)
                            + (" is a training option" if len(unread) == 1 else " are training options")
                            + " (the serving options: --concurrency, --kv-cache-dtype, --weight-precision, "
                            "--tensor-parallel, --gpu-memory-utilization)")
    given = [k for k in _TRAINING_LAYOUT if getattr(args, k, None) is not None]
    given += [k for k in ("master_weights", "sequence_parallel", "tp_comm_overlap") if getattr(args, k, False)]
    if given:
        raise ScenarioError("serving models tensor parallelism only: " + ", ".join("--" + k.replace("_", "-") for k in given)
                            + " are training options")
    fields: dict[str, Any] = {"seq_len": args.seq_len}
    for name in ("concurrency", "kv_cache_dtype", "weight_precision", "tensor_parallel", "gpu_memory_utilization"):
        if getattr(args, name, None) is not None:
            fields[name] = getattr(args, name)
    return InferenceScenario.build(**fields)


def serving_json(arch: Architecture, origin: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The serving estimate's JSON (see the module docstring)."""
    isc = inference_scenario(args)
    est = estimate_inference(arch, isc)
    out: dict[str, Any] = {
        "source": origin,
        "scenario": {"method": INFERENCE, **isc.model_dump(mode="json")},
        "total_parameters": est.total_parameters,
        "trainable_parameters": 0,
        "components": {k: round(v) for k, v in est.components.items()},
        "total_bytes": round(est.total_bytes),
        "peak_phase": est.peak_phase,
        "phase_totals_bytes": {ph: round(est.phase_total(ph)) for ph in est.phases},
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(arch, isc.kv_cache_dtype, isc.tensor_parallel),
        "sliding_window_layers": sliding_window_layers(arch),
        "formulas": {p.key: p.formula for p in est.parts},
        "cpu_bytes": 0,
        "warnings": list(est.warnings),
        "assumptions": list(est.assumptions),
        "not_modelled": list(est.not_modelled),
    }
    if args.gpu is None:
        if args.num_gpus is not None or args.gpu_memory_utilization is not None:
            raise ScenarioError("--num-gpus and --gpu-memory-utilization need --gpu")
        return out
    gpu = find_gpu(args.gpu)
    plan = serving_plan(arch, isc, gpu, args.num_gpus, choose_tensor_parallel=args.tensor_parallel is None)
    isc, fit, lim, speed = plan.scenario, plan.fit, plan.limits, plan.speed
    est = plan.estimate
    out.update({
        "scenario": {"method": INFERENCE, **isc.model_dump(mode="json")},
        "components": {k: round(v) for k, v in est.components.items()}, "total_bytes": round(est.total_bytes),
        "formulas": {p.key: p.formula for p in est.parts},
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(arch, isc.kv_cache_dtype, isc.tensor_parallel),
        "gpu": {"name": gpu.name, "usable_memory_bytes": gpu.usable_memory_bytes, "memory_bytes": gpu.memory_bytes},
        "num_gpus": plan.num_gpus, "strategy": "tensor_parallel" if isc.tensor_parallel > 1 else "replicas",
        "tensor_parallel": isc.tensor_parallel, "replicas": plan.replicas,
        "per_gpu_weights_bytes": round(est.components["weights"]), "per_gpu_peak_bytes": round(fit.peak_bytes),
        "fits": fit.fits, "verdict": fit.verdict.value, "headroom_bytes": round(fit.headroom_bytes),
        "min_gpus": None, "min_tensor_parallel": plan.min_tensor_parallel, "gpu_warnings": list(fit.warnings),
        "gpu_memory_utilization": isc.gpu_memory_utilization, "memory_budget_bytes": round(lim.budget_bytes),
        "kv_cache_budget_bytes": round(lim.kv_cache_budget_bytes), "kv_cache_tokens": lim.kv_cache_tokens,
        "max_seq_len": lim.max_seq_len, "max_concurrency": lim.max_concurrency,
        # a rank that does not fit serves nothing: no throughput (serving_speed keeps the model's figures)
        "decode_tokens_per_second": plan.decode_tokens_per_second if fit.fits else None,
        "prefill_tokens_per_second": plan.prefill_tokens_per_second if fit.fits else None,
        "serving_speed": None if speed is None else {**speed.model_dump(mode="json"),
                                                    "note": "one replica; engine.time.serving (see its docstring)"},
        "serving_notes": list(plan.notes),
    })
    if not fit.fits:
        out["warnings"].append(f"one rank does not fit on {gpu.name} at tensor parallel {isc.tensor_parallel}"
                               + (f": serve with --tensor-parallel {plan.min_tensor_parallel}" if plan.min_tensor_parallel
                                  else "") + "; no tokens/s for it (serving_speed is for reference only)")
    return out
