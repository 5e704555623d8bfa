"""``python -m engine plan``: a plan (the estimate options) or a plans CSV (``--input``), recomputed, as plans CSV
(:mod:`engine.plan.plans`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.cli.options import (
    add_gpu_options, add_model_options, add_scenario_options, add_time_cost_options, dataset_from_args, emit_bytes,
    fail, flag_names, load_model, scenario_from_args, strategies,
)
import engine.cli.scaleout as scaleout
from engine.cli.gpu_name import warn_gpu_name
from engine.cli.plan_layout import layout_plan_csv
from engine.errors import CatalogError, EngineError, ScenarioError, explain_validation
from engine.hardware.gpus import find_gpu
from engine.model.sources import config_from_catalog, config_from_hub
from engine.plan.cost import CHEAPEST_LISTED, estimate_plan
from engine.plan.plans import Plan, evaluate_plan, plans_from_csv, plans_to_csv
from engine.time.throughput import calibrate


def add_parser(sub: Any) -> None:
    p = sub.add_parser("plan", help="a plan (the estimate options) or a plans CSV (--input), recomputed, as plans CSV")
    add_model_options(p)
    p._mutually_exclusive_groups[-1].required = False  # --input replaces --model/--config
    add_scenario_options(p)
    add_gpu_options(p)
    add_time_cost_options(p)
    scaleout.add_scaleout_options(p)  # a layout: one row of its plan (engine.cli.plan_layout)
    g = p.add_argument_group("plans CSV")
    g.add_argument("--input", metavar="CSV", default=None,
                   help="a plans CSV to re-validate and recompute (instead of --model/--config and the scenario options); "
                        "bad rows are listed on stderr; the file's app_version and exported_at are kept")
    g.add_argument("--output", metavar="FILE", default=None, help="write the CSV here (default: stdout)")
    g.add_argument("--name", default=None, help="the plan's name (default: model and method)")


def _plan_resolver(offline: bool):
    def resolve(repo_id: str, revision: str | None) -> dict[str, Any]:
        try:
            return config_from_catalog(repo_id)[0]
        except CatalogError:
            if offline:
                raise
            return config_from_hub(repo_id, revision=revision)[0]
    return resolve


def run(args: argparse.Namespace) -> int:
    """``python -m engine plan``: CSV on stdout or --output; exit 2 on bad input (or when no row of --input loads)."""
    try:
        if args.input:
            if args.model or args.config:
                raise ScenarioError("--input replaces --model/--config")
            try:
                data = Path(args.input).read_bytes()
            except OSError as exc:
                raise ScenarioError(f"cannot read {args.input}: {exc.strerror}") from None
            imported = plans_from_csv(data, _plan_resolver(args.offline))
            if imported.file_error:
                raise ScenarioError(f"{args.input}: {imported.file_error}")
            if not imported.plans:  # one line: why no row loaded
                raise ScenarioError(f"no plan in {args.input} loaded: "
                                    + "; ".join(f"row {e.row}: {e.reason}" for e in imported.errors))
            for warning in imported.warnings:
                print(f"warning: {warning}", file=sys.stderr)
            for err in imported.errors:
                print(f"row {err.row}: {err.reason}", file=sys.stderr)
            out = plans_to_csv(imported.plans, version=imported.app_version, exported_at=imported.exported_at)
        else:
            if not (args.model or args.config):
                raise ScenarioError("give --model or --config (or --input plans.csv)")
            arch, config, origin = load_model(args)
            layout = scaleout.requested(args)
            fp8 = scaleout.take_fp8(args) if layout else None  # --precision fp8: FP8 matmuls on mixed bf16
            scenario = scenario_from_args(args)
            if args.cuda_graphs:
                raise ScenarioError("--cuda-graphs: a saved plan does not carry it yet; time it with estimate")
            dataset = dataset_from_args(args, step_time_options=layout)
            if args.gpu is None or dataset is None:
                raise ScenarioError("a plan needs --gpu and a dataset size (--dataset-tokens, or --examples and --avg-tokens)")
            gpu = find_gpu(args.gpu)
            repo = args.model or origin.get("name") or "config.json"
            if layout:
                return emit_bytes(layout_plan_csv(arch, scenario, dataset, args, repo, fp8), args.output)
            factor = 1.0
            if args.measured_tokens_per_second is not None:  # calibrate to the user's run of this very plan
                raw = estimate_plan(arch, scenario, dataset, gpu, args.num_gpus or 1, strategies(args)[1],
                                    fused_kernels=args.fused_kernels).throughput
                factor = calibrate(args.measured_tokens_per_second, raw).factor
            try:
                plan = Plan(
                    name=f"{repo.split('/')[-1]} {scenario.method.value}" if args.name is None else args.name,
                    model_repo_id=repo,
                    model_revision=args.revision, **scenario.model_dump(), gpu=gpu.name, num_gpus=args.num_gpus or 1,
                    strategy=strategies(args)[1], dataset_total_tokens=dataset.total_tokens,
                    dataset_examples=dataset.examples, dataset_avg_tokens=dataset.avg_tokens, epochs=dataset.epochs,
                    packing=dataset.packing, runs=dataset.runs, calibration=factor,
                    fused_kernels=args.fused_kernels, price_source=CHEAPEST_LISTED if args.price_source is None else args.price_source,
                )
            except ValidationError as exc:  # the fields typed as such (--name, --num-gpus): said as their flags
                raise ScenarioError(flag_names(explain_validation(exc, all_errors=True), {"name", "num_gpus"})) from None
            out = plans_to_csv([(plan, evaluate_plan(plan, config))])
            warn_gpu_name(args)  # the CSV has the catalog name; stderr says how --gpu was read
    except EngineError as exc:
        return fail(exc)
    return emit_bytes(out, args.output)
