"""Command line: ``python -m engine params|estimate|plan|trace ...`` printing JSON (``plan``: CSV), for scripts and CI.

``trace`` runs the optional fake-tensor tracer (:mod:`engine.trace`, the ``[trace]`` extra).

``estimate --gpu NAME`` adds the memory fit; with a dataset size as well (``--dataset-tokens`` or ``--examples``
and ``--avg-tokens``) it adds the training time and cost (:mod:`engine.throughput`, :mod:`engine.cost`).

A thin layer over the engine, in the manner of accelerate's ``estimate-memory``: parse options, call the
engine, print JSON. Bad input exits with status 2 and one line on stderr; a token is read from
``HF_TOKEN`` by huggingface_hub and never printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Sequence

from pydantic import ValidationError

from engine.architecture import Architecture, architecture_or_approximation
from engine.checkpoint import explain_difference, fetch_checkpoint_count
from engine.cost import CHEAPEST_LISTED, Dataset, estimate_plan
from engine.errors import EngineError, ScenarioError, explain_validation
from engine.fit import check_fit
from engine.gpus import find_gpu
from engine.lora import resolve_targets
from engine.memory import PHASES, estimate_memory
from engine.optimizer import Optimizer
from engine.inference import (
    InferenceScenario, KvCacheDtype, WeightPrecision, estimate_inference, inference_limits, kv_cache_bytes_per_token,
    sliding_window_layers,
)
from engine.parallel import Offload, Strategy, deepspeed_estimate, device_memory_per_gpu, plan_parallel
from engine.precision import PrecisionMode
from engine.scenario import Attention, Framework, Method, QuantType, Scenario
from engine.seed_rules import seed_quick_rule
from engine.sources import config_from_catalog, config_from_file, config_from_hub
from engine.throughput import DEFAULT_MFU, DEFAULT_SCALING_EFFICIENCY, seed_throughput


class _Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {message}\n")


def _add_model_options(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", metavar="PATH", help="path to a model's config.json")
    src.add_argument("--model", metavar="REPO_ID", help="Hugging Face Hub repo id (config.json is read from the Hub; HF_TOKEN unlocks gated repos)")
    p.add_argument("--revision", default=None, help="branch, tag or commit of --model (default: main)")
    p.add_argument("--offline", action="store_true", help="with --model: use the bundled catalog copy, no network")


def _add_scenario_options(p: argparse.ArgumentParser) -> None:
    d = Scenario()  # the engine's defaults, so the CLI and the app start from the same scenario
    p.add_argument("--method", choices=[m.value for m in Method], default=d.method.value, help=f"full fine-tuning, LoRA or QLoRA (default: {d.method.value})")
    p.add_argument("--precision", choices=[m.value for m in PrecisionMode], default=d.precision.value,
                   help="fp32; amp_bf16/amp_fp16 = mixed precision with fp32 weights; bf16/fp16 = pure 16-bit weights (default: %(default)s)")
    p.add_argument("--optimizer", choices=[o.value for o in Optimizer], default=d.optimizer.value, help="optimizer (default: %(default)s; adamw is torch foreach)")
    p.add_argument("--micro-batch-size", type=int, default=d.micro_batch_size, metavar="N", help="sequences per forward pass per GPU (default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, metavar="N", help="tokens per sequence (default: %(default)s)")
    p.add_argument("--gradient-accumulation-steps", type=int, default=d.gradient_accumulation_steps, metavar="N", help="micro batches per optimizer step (default: %(default)s)")
    p.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward")
    p.add_argument("--attention", choices=[a.value for a in Attention], default=d.attention.value, help="attn_implementation (default: %(default)s)")
    p.add_argument("--lora-r", type=int, default=d.lora_r, metavar="N", help="LoRA rank (default: %(default)s)")
    p.add_argument("--lora-alpha", type=float, default=d.lora_alpha, metavar="A", help="LoRA alpha (default: %(default)s; no effect on memory)")
    p.add_argument("--lora-dropout", type=float, default=d.lora_dropout, metavar="P", help="LoRA dropout (default: %(default)s)")
    p.add_argument("--lora-targets", default=None, metavar="NAMES",
                   help="comma-separated target modules, e.g. q_proj,v_proj, or all-linear (default: the attention projections)")
    p.add_argument("--quant-type", choices=[q.value for q in QuantType], default=d.quant_type.value, help="QLoRA base quantization: 4-bit nf4/fp4 or 8-bit int8 (LLM.int8) (default: %(default)s)")
    p.add_argument("--no-double-quant", action="store_true", help="QLoRA without double quantization")
    p.add_argument("--no-prepare-kbit", action="store_true", help="QLoRA without prepare_model_for_kbit_training (no fp32 upcast)")
    p.add_argument("--framework", choices=[f.value for f in Framework], default=d.framework.value,
                   help="training stack: hf = transformers + PEFT + Trainer; litgpt; torchtune (default: %(default)s)")
    p.add_argument("--fused-cross-entropy", action="store_true",
                   help="chunked LM head + loss (Liger Kernel, TrainingArguments(use_liger_kernel=True)): no vocabulary-sized logits")


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of ``python -m engine``."""
    parser = _Parser(prog="python -m engine", description="Fine-tuning GPU memory estimates from a Hugging Face config.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    params = sub.add_parser("params", help="parameter counts by component (JSON)")
    _add_model_options(params)
    est = sub.add_parser("estimate", help="peak training memory by component (JSON, bytes)")
    _add_model_options(est)
    _add_scenario_options(est)
    _add_gpu_options(est)
    _add_parallel_inference_options(est)
    _add_time_cost_options(est)
    _add_plan_parser(sub)
    _add_trace_parser(sub)
    return parser


def _load(args: argparse.Namespace) -> tuple[Architecture, dict[str, Any], dict[str, Any]]:
    """The architecture, the config dict and where it came from."""
    if args.config:
        config, origin = config_from_file(args.config)
    elif args.offline:
        config, origin = config_from_catalog(args.model)
    else:
        config, origin = config_from_hub(args.model, revision=args.revision)
        if origin.notice:
            print(f"notice: {origin.notice}", file=sys.stderr)
    arch, approximation = architecture_or_approximation(config)
    if approximation:
        print(f"notice: {approximation}", file=sys.stderr)
    return arch, config, origin.model_dump(exclude_none=True)


def _params_json(arch: Architecture, origin: dict[str, Any]) -> dict[str, Any]:
    counts = arch.parameter_counts
    return {
        "source": origin,
        "model_type": arch.approximate_from or arch.model_type,
        "approximate": arch.approximate_from is not None,
        "total_parameters": counts["total"],
        "active_parameters": arch.active_parameters,
        "components": {k: v for k, v in counts.items() if k != "total"},
        "sizes": {
            "hidden_size": arch.hidden_size,
            "num_layers": arch.num_layers,
            "num_attention_heads": arch.num_attention_heads,
            "num_key_value_heads": arch.num_key_value_heads,
            "head_dim": arch.head_dim,
            "intermediate_size": arch.intermediate_size,
            "vocab_size": arch.vocab_size,
            "tie_word_embeddings": arch.tie_word_embeddings,
            "num_experts": arch.num_experts,
        },
        "lora_target_modules": arch.linear_target_names(),
    }


# Options whose name (dashes as underscores) is the Scenario field's name.
_SCENARIO_FIELDS = (
    "method", "precision", "optimizer", "micro_batch_size", "seq_len", "gradient_accumulation_steps",
    "gradient_checkpointing", "attention", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "quant_type",
    "fused_cross_entropy", "framework",
)


def _checkpoint_json(arch: Architecture, config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The checkpoint's safetensors count beside ours, with the difference explained."""
    count = fetch_checkpoint_count(args.model, revision=args.revision)
    if count.total is None:
        return {"total_parameters": None, "reason": count.reason}
    return {
        "total_parameters": count.total,
        "by_dtype": count.by_dtype,
        "files": count.files,
        "difference": count.total - arch.total_parameters,
        "explanations": explain_difference(arch, config, count.total),
    }


def _scenario(args: argparse.Namespace) -> Scenario:
    return Scenario.build(
        **{name: getattr(args, name) for name in _SCENARIO_FIELDS},
        double_quant=not args.no_double_quant,
        prepare_kbit_training=not args.no_prepare_kbit,
    )


def _estimate_json(arch: Architecture, origin: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    est = estimate_memory(arch, scenario)
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


def _add_gpu_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", metavar="NAME", default=None,
                   help="check the fit on this GPU (e.g. 'A100 80GB', 'H100 SXM', 'RTX 4090'); adds gpu, fits, headroom_bytes, min_gpus")
    p.add_argument("--num-gpus", type=_positive_int, default=None, metavar="N", help="GPUs of that kind (with --gpu; default 1)")
    p.add_argument("--strategy", choices=[s.value for s in Strategy], default=None,
                   help="multi-GPU strategy (with --gpu): ddp = every GPU holds everything; zero1/zero2/zero3 = DeepSpeed ZeRO "
                        "stages; fsdp_full_shard = ZeRO-3, fsdp_shard_grad_op = ZeRO-2 (default: ddp)")


def _fit_json(arch: Architecture, scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """The fit fields for --gpu (per-GPU bytes); an unknown GPU raises CatalogError naming the closest ones."""
    gpu = find_gpu(args.gpu)
    fit = check_fit(arch, scenario, gpu, Strategy(args.strategy or "ddp"), args.num_gpus or 1,
                    offload=Offload(getattr(args, "offload", None) or "none"))
    return {
        "gpu": {"name": gpu.name, "usable_memory_bytes": gpu.usable_memory_bytes, "memory_bytes": gpu.memory_bytes},
        "num_gpus": fit.num_gpus,
        "strategy": fit.strategy.value,
        "per_gpu_peak_bytes": round(fit.peak_bytes),
        "fits": fit.fits,
        "headroom_bytes": round(fit.headroom_bytes),
        "min_gpus": fit.min_gpus,
        "gpu_warnings": list(fit.warnings),
    }


# --------------------------------------------------------------------------------------------------
# estimate: many GPUs (ZeRO/FSDP/offload) and serving (--method inference), engine.parallel / engine.inference

INFERENCE = "inference"


def _add_parallel_inference_options(p: argparse.ArgumentParser) -> None:
    method = next(a for a in p._actions if a.dest == "method")
    method.choices = list(method.choices) + [INFERENCE]
    method.help = "full fine-tuning, LoRA, QLoRA, or inference (serving memory) (default: %(default)s)"
    g = p.add_argument_group("many GPUs (with --gpu)")
    g.add_argument("--offload", choices=[o.value for o in Offload], default=None,
                   help="move optimizer states (and with zero3/fsdp_full_shard, weights) to CPU memory (default: none)")
    g.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                   help="GPUs per node, for the CPU memory per node of offload (default: min(num GPUs, 8))")
    s = p.add_argument_group("serving (--method inference; --seq-len is the context per sequence)")
    s.add_argument("--concurrency", type=int, default=None, metavar="N", help="sequences served at once (default 1)")
    s.add_argument("--kv-cache-dtype", choices=[k.value for k in KvCacheDtype], default=None, help="KV cache element type (default bf16)")
    s.add_argument("--weight-precision", choices=[w.value for w in WeightPrecision], default=None,
                   help="serving precision of the linear weights: bf16, fp16, int8, fp8, int4 (GPTQ/AWQ group 128) (default bf16)")


def _gpus_per_node(args: argparse.Namespace) -> int:
    n = args.num_gpus or 1
    per = args.gpus_per_node or min(n, 8)
    if per < 1:
        raise ScenarioError(f"--gpus-per-node: must be at least 1 (got {per})")
    return per


def _per_gpu_json(arch: Architecture, scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """Per-GPU components/totals (same keys as the one-GPU estimate), CPU memory of offload, DeepSpeed's estimate."""
    strategy, offload, n = Strategy(args.strategy or "ddp"), Offload(args.offload or "none"), args.num_gpus or 1
    est = estimate_memory(arch, scenario)
    plan = plan_parallel(est, arch, scenario, strategy, offload)
    per_node = _gpus_per_node(args)
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
        "comm_buckets": plan.bucket_note or None,
        "deepspeed_estimate": None if ds is None else {
            "function": ds.function, "gpu_bytes_per_gpu": ds.gpu_bytes_per_gpu, "cpu_bytes_per_node": ds.cpu_bytes_per_node,
            "note": ds.note,
        },
    }


def _inference_json(arch: Architecture, origin: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    if args.strategy not in (None, "ddp") or args.offload not in (None, "none"):
        raise ScenarioError("--method inference serves one replica per GPU: --strategy and --offload do not apply")
    fields: dict[str, Any] = {"seq_len": args.seq_len}
    for name in ("concurrency", "kv_cache_dtype", "weight_precision"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    isc = InferenceScenario.build(**fields)
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
        "kv_cache_bytes_per_token": kv_cache_bytes_per_token(arch, isc.kv_cache_dtype),
        "sliding_window_layers": sliding_window_layers(arch),
        "formulas": {p.key: p.formula for p in est.parts},
        "cpu_bytes": 0,
        "warnings": list(est.warnings),
        "assumptions": list(est.assumptions),
        "not_modelled": list(est.not_modelled),
    }
    if args.gpu is not None:
        gpu = find_gpu(args.gpu)
        fit = check_fit(arch, isc, gpu, Strategy.DDP, args.num_gpus or 1, estimate=est)
        lim = inference_limits(arch, isc, gpu.usable_memory_bytes)
        out.update({
            "gpu": {"name": gpu.name, "usable_memory_bytes": gpu.usable_memory_bytes, "memory_bytes": gpu.memory_bytes},
            "num_gpus": fit.num_gpus, "strategy": "replicas", "per_gpu_peak_bytes": round(fit.peak_bytes), "fits": fit.fits,
            "headroom_bytes": round(fit.headroom_bytes), "min_gpus": fit.min_gpus, "gpu_warnings": list(fit.warnings),
            "max_seq_len": lim.max_seq_len, "max_concurrency": lim.max_concurrency,
        })
    elif args.num_gpus is not None:
        raise ScenarioError("--num-gpus needs --gpu")
    return out


def _add_time_cost_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("time and cost (with --gpu and a dataset size)")
    g.add_argument("--dataset-tokens", type=int, default=None, metavar="N", help="tokens in one epoch of the dataset")
    g.add_argument("--examples", type=int, default=None, metavar="N", help="examples in the dataset (with --avg-tokens)")
    g.add_argument("--avg-tokens", type=float, default=None, metavar="T", help="average tokens per example (with --examples)")
    g.add_argument("--epochs", type=float, default=None, metavar="E", help="passes over the dataset (default 1)")
    g.add_argument("--no-packing", action="store_true",
                   help="pad every example to --seq-len (with --examples): the padding is processed too")
    g.add_argument("--runs", type=int, default=None, metavar="N", help="experimental runs to pay for (default 1)")
    g.add_argument("--mfu", type=float, default=None, metavar="X",
                   help=f"fraction of the GPU's dense peak achieved on the executed FLOPs (default {DEFAULT_MFU}: median of "
                        "published Hugging Face-stack measurements, see the Methodology page)")
    g.add_argument("--scaling-efficiency", type=float, default=None, metavar="X",
                   help="fraction of linear speed-up kept on more than one GPU (default: " + ", ".join(
                       f"{k.value} {v}" for k, v in DEFAULT_SCALING_EFFICIENCY.items()) + ")")
    g.add_argument("--price-source", default=None, metavar="NAME",
                   help=f"a source of data/gpu_prices.csv, e.g. 'RunPod Community Cloud', or 'cheapest' (default: {CHEAPEST_LISTED})")


_TIME_COST_OPTIONS = ("dataset_tokens", "examples", "avg_tokens", "epochs", "runs", "mfu", "scaling_efficiency", "price_source")


def _dataset(args: argparse.Namespace) -> Dataset | None:
    """The dataset of the time/cost options, None when no size is given; ScenarioError on a bad combination."""
    if args.dataset_tokens is None and args.examples is None and args.avg_tokens is None:
        if any(getattr(args, k) is not None for k in _TIME_COST_OPTIONS) or args.no_packing:
            raise ScenarioError("time and cost options need a dataset size: --dataset-tokens N, or --examples N --avg-tokens T")
        return None
    if args.dataset_tokens is not None and (args.examples is not None or args.avg_tokens is not None):
        raise ScenarioError("give the dataset as --dataset-tokens, or as --examples and --avg-tokens, not both")
    if args.dataset_tokens is None and (args.examples is None or args.avg_tokens is None):
        raise ScenarioError("--examples and --avg-tokens go together")
    fields: dict[str, Any] = {"total_tokens": args.dataset_tokens, "examples": args.examples, "avg_tokens": args.avg_tokens,
                              "packing": not args.no_packing}
    if args.epochs is not None:
        fields["epochs"] = args.epochs
    if args.runs is not None:
        fields["runs"] = args.runs
    try:
        return Dataset(**fields)
    except ValidationError as exc:
        raise ScenarioError(explain_validation(exc, "dataset")) from None


def _time_cost_json(arch: Architecture, scenario: Scenario, dataset: Dataset, args: argparse.Namespace) -> dict[str, Any]:
    """tokens_per_second (all GPUs), hours, gpu_hours and costs, with the details in ``time_cost``."""
    gpu = find_gpu(args.gpu)
    strategy = Strategy(args.strategy or "ddp")
    plan = estimate_plan(
        arch, scenario, dataset, gpu, args.num_gpus or 1, strategy,
        mfu=DEFAULT_MFU if args.mfu is None else args.mfu, scaling_efficiency=args.scaling_efficiency,
        price_source=args.price_source or CHEAPEST_LISTED,
    )
    tp, run, price = plan.throughput, plan.run, plan.price
    seed = seed_throughput(arch.active_parameters / 1e9, gpu, plan.num_gpus)
    return {
        "tokens_per_second": tp.tokens_per_second,
        "hours": run.hours,
        "gpu_hours": run.gpu_hours,
        "cost_usd_on_demand": run.cost_usd_on_demand,
        "cost_usd_spot": run.cost_usd_spot,
        "cost_reason": price.reason,
        "time_cost": {
            "tokens": run.tokens,
            "tokens_per_epoch": dataset.tokens_per_epoch(scenario.seq_len),
            "padding_waste": dataset.padding_waste(scenario.seq_len),
            "epochs": dataset.epochs,
            "runs": dataset.runs,
            "mfu": tp.mfu,
            "scaling_efficiency": tp.scaling_efficiency,
            "peak_flops": tp.peak.flops,
            "peak_dtype": tp.peak.dtype,
            "flops_per_token": tp.flops.total,
            "per_gpu_tokens_per_second": tp.per_gpu_tokens_per_second,
            "step_seconds": {"compute": tp.step.compute_s, "dequantize": tp.step.dequantize_s, "optimizer": tp.step.optimizer_s},
            "price_source": price.source,
            "on_demand_usd_per_gpu_hour": price.on_demand_usd_per_hour,
            "on_demand_source": price.on_demand_source,
            "spot_usd_per_gpu_hour": price.spot_usd_per_hour,
            "spot_source": price.spot_source,
            "fits": plan.fits,
            "seed_rule": None if seed is None else {
                "tokens_per_second": seed.tokens_per_second,
                "hours": dataset.tokens_per_epoch(scenario.seq_len) * dataset.epochs * dataset.runs / seed.tokens_per_second / 3600,
                "rule": seed.rule,
            },
            "notes": list(plan.notes) + ([] if plan.fits else ["this plan does not fit in memory: time and cost for reference only"]),
        },
    }


def _warn_if_not_fitting(out: dict[str, Any], args: argparse.Namespace) -> None:
    """Say at the top level when the plan does not fit (times and costs are then for reference only)."""
    if out.get("fits") is not False:
        return
    strategy = args.strategy or "ddp"
    fewest = out.get("min_gpus")
    advice = (f"the fewest that fit with {strategy} is {fewest}" if fewest
              else f"no count fits with {strategy}" + ("; try --strategy zero3" if strategy == "ddp" else ""))
    out.setdefault("warnings", []).append(
        f"does not fit on {args.num_gpus or 1} x {args.gpu}: {advice}; any time and cost below are for reference only"
    )


def _positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or unreachable source)."""
    args = build_parser().parse_args(argv)
    if args.command == "plan":
        return _plan_main(args)
    if args.command == "trace":
        return _trace_main(args)
    try:
        arch, config, origin = _load(args)
        if args.command == "params":
            out = _params_json(arch, origin)
            if origin.get("kind") == "hub":
                out["checkpoint"] = _checkpoint_json(arch, config, args)
        elif args.method == INFERENCE:
            if _dataset(args) is not None:
                raise ScenarioError("time and cost options are for training, not --method inference")
            out = _inference_json(arch, origin, args)
        else:
            if any(getattr(args, k) is not None for k in ("concurrency", "kv_cache_dtype", "weight_precision")):
                raise ScenarioError("--concurrency, --kv-cache-dtype and --weight-precision need --method inference")
            scenario = _scenario(args)
            dataset = _dataset(args)
            out = _estimate_json(arch, origin, scenario)
            if args.gpu is not None:
                out.update(_fit_json(arch, scenario, args))
                out.update(_per_gpu_json(arch, scenario, args))
                if dataset is not None:
                    if args.offload not in (None, "none"):
                        raise ScenarioError("time and cost do not model offload (CPU optimizer steps); drop --offload or the dataset size")
                    out.update(_time_cost_json(arch, scenario, dataset, args))
                _warn_if_not_fitting(out, args)
            elif args.offload is not None or args.gpus_per_node is not None:
                raise ScenarioError("--offload and --gpus-per-node need --gpu")
            elif args.num_gpus is not None or args.strategy is not None:
                raise ScenarioError("--num-gpus and --strategy need --gpu")
            elif dataset is not None:
                raise ScenarioError("a dataset size needs --gpu to estimate time and cost")
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader left; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


# --------------------------------------------------------------------------------------------------
# plan: the scenario (or a plans CSV) as plans CSV rows (engine.plans)


def _add_plan_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="a plan (the estimate options) or a plans CSV (--input), recomputed, as plans CSV")
    _add_model_options(p)
    p._mutually_exclusive_groups[-1].required = False  # --input replaces --model/--config
    _add_scenario_options(p)
    _add_gpu_options(p)
    _add_time_cost_options(p)
    g = p.add_argument_group("plans CSV")
    g.add_argument("--input", metavar="CSV", default=None,
                   help="a plans CSV to re-validate and recompute (instead of --model/--config and the scenario options); "
                        "bad rows are listed on stderr; the file's app_version and exported_at are kept")
    g.add_argument("--output", metavar="FILE", default=None, help="write the CSV here (default: stdout)")
    g.add_argument("--name", default=None, help="the plan's name (default: model and method)")


def _plan_resolver(offline: bool):
    from engine.sources import config_from_catalog
    from engine.errors import CatalogError

    def resolve(repo_id: str, revision: str | None) -> dict[str, Any]:
        try:
            return config_from_catalog(repo_id)[0]
        except CatalogError:
            if offline:
                raise
            return config_from_hub(repo_id, revision=revision)[0]
    return resolve


def _plan_main(args: argparse.Namespace) -> int:
    """``python -m engine plan``: CSV on stdout or --output; exit 2 on bad input (or when no row of --input loads)."""
    from pathlib import Path

    from engine.plans import Plan, evaluate_plan, plans_from_csv, plans_to_csv

    try:
        if args.input:
            if args.model or args.config:
                raise ScenarioError("--input replaces --model/--config")
            try:
                data = Path(args.input).read_bytes()
            except OSError as exc:
                raise ScenarioError(f"cannot read {args.input}: {exc.strerror}") from None
            imported = plans_from_csv(data, _plan_resolver(args.offline))
            for err in imported.errors:
                print(f"row {err.row}: {err.reason}", file=sys.stderr)
            if not imported.plans:
                raise ScenarioError("no plan in the file loaded")
            out = plans_to_csv(imported.plans, version=imported.app_version, exported_at=imported.exported_at)
        else:
            if not (args.model or args.config):
                raise ScenarioError("give --model or --config (or --input plans.csv)")
            arch, config, origin = _load(args)
            scenario = _scenario(args)
            dataset = _dataset(args)
            if args.gpu is None or dataset is None:
                raise ScenarioError("a plan needs --gpu and a dataset size (--dataset-tokens, or --examples and --avg-tokens)")
            gpu = find_gpu(args.gpu)
            repo = args.model or origin.get("name") or "config.json"
            try:
                plan = Plan(
                    name=args.name or f"{repo.split('/')[-1]} {scenario.method.value}", model_repo_id=repo,
                    model_revision=args.revision, **scenario.model_dump(), gpu=gpu.name, num_gpus=args.num_gpus or 1,
                    strategy=Strategy(args.strategy or "ddp"), dataset_total_tokens=dataset.total_tokens,
                    dataset_examples=dataset.examples, dataset_avg_tokens=dataset.avg_tokens, epochs=dataset.epochs,
                    packing=dataset.packing, runs=dataset.runs, mfu=DEFAULT_MFU if args.mfu is None else args.mfu,
                    scaling_efficiency=args.scaling_efficiency, price_source=args.price_source or CHEAPEST_LISTED,
                )
            except ValidationError as exc:
                raise ScenarioError(explain_validation(exc, all_errors=True)) from None
            out = plans_to_csv([(plan, evaluate_plan(plan, config))])
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.output:
        Path(args.output).write_bytes(out)
        return 0
    try:
        sys.stdout.buffer.write(out) if hasattr(sys.stdout, "buffer") else sys.stdout.write(out.decode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


# --------------------------------------------------------------------------------------------------
# trace: an exact fake-tensor trace of two training steps (engine.trace, the optional [trace] extra)


def _add_trace_parser(sub: Any) -> None:
    p = sub.add_parser("trace", help="trace two training steps on fake tensors (needs the [trace] extra): measured peak (JSON, bytes)")
    _add_model_options(p)
    _add_scenario_options(p)
    p.add_argument("--timeout", type=_positive_int, default=300, metavar="S", help="stop the trace after S seconds (default: %(default)s)")


def _trace_main(args: argparse.Namespace) -> int:
    """``python -m engine trace``: the trace as JSON, steady-state peak as ``peak_allocated_bytes``; exit 2 on bad
    input, a scenario that cannot be traced, a missing extra or a failed trace."""
    from engine.trace import trace_training_step

    try:
        _, config, origin = _load(args)
        scenario = _scenario(args)
        result = trace_training_step(config, scenario, timeout_s=args.timeout)
    except EngineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = {"source": origin, "scenario": scenario.model_dump(mode="json"), **result.model_dump(mode="json")}
    try:
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0
