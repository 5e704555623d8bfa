"""``python -m engine plan`` with a parallel layout (``--tensor-parallel`` ... as ``estimate`` takes them): one CSV row
of the layout's plan: the model, the scenario, the layout, its most loaded rank and its tokens/s, ``hours``,
``gpu_hours``, ``cost_usd_on_demand``, ``cost_usd_spot`` (:mod:`engine.plan.layout_cost`), the Scale out page's
"plan CSV" columns. Such a row is not a one-GPU plan: ``plan --input`` and the Plans page do not read it back, and say
so (:func:`engine.plan.csv_checks.layout_csv_problem`)."""

from __future__ import annotations

import argparse
from typing import Any

import engine.cli.scaleout as scaleout
from engine.model.architecture import Architecture
from engine.plan.cost import CHEAPEST_LISTED, Dataset
from engine.plan.layout_cost import layout_plans_csv, layout_run
from engine.errors import ScenarioError
from engine.plan.plan_names import name_problem
from engine.plan.plans import app_version, export_time
from engine.secrets import looks_like_token
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.fp8 import Fp8Recipe
from engine.scenario.training import Scenario


def layout_plan_csv(arch: Architecture, scenario: Scenario, dataset: Dataset, args: argparse.Namespace,
                    repo: str, fp8: Fp8Recipe | None = None) -> bytes:
    """The layout plan's CSV (see the module docstring).

    Raises:
        ScenarioError: as ``estimate`` with the same layout options (a layout the model cannot take, master weights
            with fp32 or a PEFT method, nodes the GPUs do not fill).
    """
    if args.name is not None:  # the one-GPU plan's name rules (engine.plan.plans.Plan), this row not being a Plan
        problem = name_problem(args.name) or ("looks like a Hugging Face token" if looks_like_token(args.name) else None)
        if problem:
            raise ScenarioError(f"--name: {problem}")
    scenario, note = scaleout.layout_scenario(scenario, args)
    layout, per_node = scaleout.layout_from_args(args, scenario, arch)
    cluster = scaleout.cluster_from_args(args, layout, per_node)
    settings = scaleout.layout_settings(args)
    est = estimate_layout(arch, scenario, layout, cluster, fp8, master_weights=args.master_weights, **settings)
    run = layout_run(est, cluster, dataset, scenario.seq_len, CHEAPEST_LISTED if args.price_source is None else args.price_source)
    worst = est.memory.max_stage
    row: dict[str, Any] = {
        "name": f"{repo.split('/')[-1]} {layout.label()}" if args.name is None else args.name, "model_repo_id": repo,
        **{k: v.value if hasattr(v, "value") else v for k, v in scenario.model_dump().items()
           if not isinstance(v, (list, tuple, dict))},
        **{f"layout_{k}": v.value if hasattr(v, "value") else v for k, v in layout.model_dump().items()
           if not isinstance(v, (list, tuple))},
        "master_weights": args.master_weights, "fp8_recipe": fp8.value if fp8 else None,
        "layout_framework": scaleout.framework_json(args, settings)["name"], "fused_kernels": settings["fused_kernels"],
        "tp_comm_overlap": settings["tp_comm_overlap"],
        "dataset_tokens_per_epoch": dataset.tokens_per_epoch(scenario.seq_len), "epochs": dataset.epochs, "runs": dataset.runs,
        "max_rank_peak_allocated_bytes": round(worst.peak_allocated_bytes),
        "max_rank_device_used_bytes": round(worst.device_used_bytes), "usable_memory_bytes": cluster.gpu.usable_memory_bytes,
        **run.record(), "precision_note": note,
        "app_version": app_version(), "exported_at": export_time(),
    }
    return layout_plans_csv([row])
