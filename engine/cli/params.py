"""``python -m engine params``: parameter counts by component, and with ``--model`` the checkpoint's own count."""

from __future__ import annotations

import argparse
from typing import Any

from engine.errors import EngineError
from engine.model.architecture import Architecture
from engine.cli.options import add_model_options, emit_json, fail, load_model


def add_parser(sub: Any) -> None:
    add_model_options(sub.add_parser("params", help="parameter counts by component (JSON)"))


def run(args: argparse.Namespace) -> int:
    """Print the counts as JSON; exit 2 on bad input."""
    try:
        arch, config, origin = load_model(args)
        out = _params_json(arch, origin)
        if origin.get("kind") == "hub":
            out["checkpoint"] = _checkpoint_json(arch, config, args)
    except EngineError as exc:
        return fail(exc)
    return emit_json(out)


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


def _checkpoint_json(arch: Architecture, config: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The checkpoint's safetensors count beside ours, with the difference explained."""
    from engine.model.checkpoint import explain_difference, fetch_checkpoint_count  # the Hub client: --model only
    from engine.model.hub import hub_timeout_s

    count = fetch_checkpoint_count(args.model, revision=args.revision, timeout_s=hub_timeout_s())
    if count.total is None:
        return {"total_parameters": None, "reason": count.reason}
    return {
        "total_parameters": count.total,
        "by_dtype": count.by_dtype,
        "files": count.files,
        "difference": count.total - arch.total_parameters,
        "explanations": explain_difference(arch, config, count.total),
    }

