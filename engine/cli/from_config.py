"""``estimate --from-config FILE [FILE ...]``: the scenario, model, GPUs and strategy from training config files.

Precedence, lowest first: the engine's defaults, what a tool assumes when its file is silent, the files in order
(later files of the same format override earlier ones; different formats that disagree are an error), then the flags
the user typed (``args.typed``, not argparse's defaults). The model: ``--model``/``--config`` if given, else the one
the files name, read through the Hub (or the bundled catalog with ``--offline``). The files' GPU count, strategy and
offload apply with ``--gpu`` (without it they are only echoed); their epochs apply with a dataset size.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from engine.cli.options import SCENARIO_FIELDS, load_model
from engine.errors import ScenarioError, TrainingConfigError
from engine.importers import ImportResult, import_configs, load_imported_model
from engine.importers.parse import read_config_bytes
from engine.model.architecture import Architecture
from engine.model.build import architecture_or_approximation
from engine.scenario.training import Scenario
from engine.secrets import redact_tokens

_PARALLEL = ("strategy", "offload", "num_gpus", "gpus_per_node")


def import_files(paths: list[str]) -> ImportResult:
    """Read (bounded) and combine the files, in order."""
    return import_configs([read_config_bytes(path)[::-1] for path in paths])


def overrides_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """Scenario fields of the flags the user typed."""
    typed = getattr(args, "typed", set())
    out = {name: getattr(args, name) for name in SCENARIO_FIELDS if name in typed}
    if "no_double_quant" in typed:
        out["double_quant"] = False
    if "no_prepare_kbit" in typed:
        out["prepare_kbit_training"] = False
    return out


def imported_run(args: argparse.Namespace) -> tuple[Architecture, dict[str, Any], Scenario, dict[str, Any]]:
    """(architecture, origin, scenario, the ``import`` JSON) of ``--from-config``; sets the files' GPU and dataset
    settings on ``args`` where the user typed none.

    Raises:
        TrainingConfigError, ConflictingKeysError: a file that cannot be imported, conflicting files; no model named
            and none given. ScenarioError: an imported value out of range. Hub/catalog errors of the named model.
    """
    result = import_files(args.from_config)
    typed = getattr(args, "typed", set())
    if args.config or args.model:
        arch, _, origin = load_model(args)
    else:
        loaded = load_imported_model(result, offline=args.offline)
        if loaded is None:
            raise TrainingConfigError("the config files name no model: give --model REPO_ID or --config PATH as well")
        config, source = loaded
        if source.notice:
            print(f"notice: {redact_tokens(source.notice)}", file=sys.stderr)
        arch, approximation = architecture_or_approximation(config)
        if approximation:
            print(f"notice: {redact_tokens(approximation)}", file=sys.stderr)
        origin = source.model_dump(exclude_none=True)
    overrides = overrides_from_flags(args)
    scenario = result.scenario(overrides=overrides)
    out = result.to_json()
    out["overridden_by_flags"] = sorted(k for k in overrides if k in result.fields and result.fields[k] != overrides[k])
    applied = []
    if args.gpu is not None:
        for name in _PARALLEL:
            if name in result.parallel and name not in typed:
                setattr(args, name, getattr(result.parallel[name], "value", result.parallel[name]))
                applied.append(name)
    elif result.parallel:
        out["notes"].append("the files' GPUs and strategy apply with --gpu NAME (per-GPU memory, fit, time and cost)")
    sized = args.dataset_tokens is not None or args.examples is not None
    if sized and "epochs" in result.dataset and "epochs" not in typed:
        args.epochs, _ = result.dataset["epochs"], applied.append("epochs")
    if sized and result.dataset.get("packing") is False and "no_packing" not in typed and args.examples is not None:
        args.no_packing, _ = True, applied.append("packing")
    out["applied"] = applied
    if args.method == "inference":
        raise ScenarioError("--from-config imports a training run; --method inference does not apply to it")
    return arch, origin, scenario, out
