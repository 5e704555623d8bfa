"""``python -m engine trace``: an exact fake-tensor trace of two training steps (:mod:`engine.trace`, the optional
``[trace]`` extra)."""

from __future__ import annotations

import argparse
from typing import Any

from engine.cli.options import add_model_options, add_scenario_options, emit_json, fail, load_model, positive_int, scenario_from_args
from engine.errors import EngineError
from engine.trace import trace_training_step


def add_parser(sub: Any) -> None:
    p = sub.add_parser("trace", help="trace two training steps on fake tensors (needs the [trace] extra): measured peak (JSON, bytes)")
    add_model_options(p)
    add_scenario_options(p)
    p.add_argument("--timeout", type=positive_int, default=300, metavar="S", help="stop the trace after S seconds (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """``python -m engine trace``: the trace as JSON, steady-state peak as ``peak_allocated_bytes``; exit 2 on bad
    input, a scenario that cannot be traced, a missing extra or a failed trace."""
    try:
        _, config, origin = load_model(args)
        scenario = scenario_from_args(args)
        result = trace_training_step(config, scenario, timeout_s=args.timeout)
    except EngineError as exc:
        return fail(exc)
    out = {"source": origin, "scenario": scenario.model_dump(mode="json"), **result.model_dump(mode="json")}
    return emit_json(out)
