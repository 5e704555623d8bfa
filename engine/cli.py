"""Command line: ``python -m engine params|estimate ...`` printing JSON, for scripts and CI.

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
from engine.errors import EngineError, ScenarioError
from engine.fit import check_fit
from engine.gpus import find_gpu
from engine.lora import resolve_targets
from engine.memory import PHASES, estimate_memory
from engine.optimizer import Optimizer
from engine.parallel import Strategy
from engine.precision import PrecisionMode
from engine.scenario import Attention, Method, QuantType, Scenario
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
    p.add_argument("--quant-type", choices=[q.value for q in QuantType], default=d.quant_type.value, help="QLoRA 4-bit type (default: %(default)s)")
    p.add_argument("--no-double-quant", action="store_true", help="QLoRA without double quantization")
    p.add_argument("--no-prepare-kbit", action="store_true", help="QLoRA without prepare_model_for_kbit_training (no fp32 upcast)")


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
    _add_time_cost_options(est)
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
    p.add_argument("--num-gpus", type=int, default=None, metavar="N", help="GPUs of that kind (with --gpu; default 1)")
    p.add_argument("--strategy", choices=[s.value for s in Strategy], default=None,
                   help="multi-GPU strategy (with --gpu): ddp = every GPU holds everything; zero3 = ZeRO-3/FSDP full shard (default: ddp)")


def _fit_json(arch: Architecture, scenario: Scenario, args: argparse.Namespace) -> dict[str, Any]:
    """The fit fields for --gpu (per-GPU bytes); an unknown GPU raises CatalogError naming the closest ones."""
    gpu = find_gpu(args.gpu)
    fit = check_fit(arch, scenario, gpu, Strategy(args.strategy or "ddp"), args.num_gpus or 1)
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
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"]) or "dataset"
        raise ScenarioError(f"{where}: {err['msg'].removeprefix('Value error, ')} (got {err.get('input')!r})") from None


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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 2 bad input or unreachable source)."""
    args = build_parser().parse_args(argv)
    try:
        arch, config, origin = _load(args)
        if args.command == "params":
            out = _params_json(arch, origin)
            if origin.get("kind") == "hub":
                out["checkpoint"] = _checkpoint_json(arch, config, args)
        else:
            scenario = _scenario(args)
            dataset = _dataset(args)
            out = _estimate_json(arch, origin, scenario)
            if args.gpu is not None:
                out.update(_fit_json(arch, scenario, args))
                if dataset is not None:
                    out.update(_time_cost_json(arch, scenario, dataset, args))
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
