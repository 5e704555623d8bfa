"""Command-line options of the PEFT methods and training tricks (issue 18): virtual tokens, ``modules_to_save``,
rsLoRA, LoRA+, GaLore's rank, Unsloth-style offloaded checkpointing, Liger's kernels and freeze-tuning's trainable
blocks (issue 23)."""

from __future__ import annotations

import argparse

from engine.cli.arg_types import finite_float
from engine.scenario.training import Scenario

PEFT_FIELDS = ("num_virtual_tokens", "modules_to_save", "use_rslora", "loraplus_lr_ratio", "galore_rank",
               "gradient_checkpointing_offload", "liger_kernels", "trainable_layers", "frozen_input_grads")
"""Scenario fields these options set (same names as the options, with dashes)."""


def add_peft_options(p: argparse.ArgumentParser) -> None:
    d = Scenario()
    g = p.add_argument_group("PEFT methods and training tricks")
    g.add_argument("--num-virtual-tokens", type=int, default=d.num_virtual_tokens, metavar="N",
                   help="prompt_tuning / prefix_tuning / p_tuning: virtual tokens (default: %(default)s)")
    g.add_argument("--modules-to-save", default=None, metavar="NAMES",
                   help="comma-separated modules trained in full beside the adapters: embed_tokens, lm_head (new tokens)")
    g.add_argument("--use-rslora", action="store_true", help="rsLoRA scaling alpha/sqrt(r) (no effect on memory or time)")
    g.add_argument("--loraplus-lr-ratio", type=finite_float, default=None, metavar="X",
                   help="LoRA+: lora_B's learning rate / lora_A's (no effect on memory or time)")
    g.add_argument("--galore-rank", type=int, default=d.galore_rank, metavar="N",
                   help="--optimizer galore_adamw: projection rank (default: %(default)s)")
    g.add_argument("--gradient-checkpointing-offload", action="store_true",
                   help="Unsloth-style checkpointing: layer inputs wait in CPU RAM (implies --gradient-checkpointing)")
    g.add_argument("--liger-kernels", action="store_true",
                   help="Liger Kernel's RMSNorm, SwiGLU and RoPE (the fused loss is --fused-cross-entropy)")
    g.add_argument("--trainable-layers", type=int, default=None, metavar="N",
                   help="freeze-tuning with --method full: only the last N decoder blocks train (LLaMA-Factory "
                        "finetuning_type: freeze, freeze_trainable_layers)")
    g.add_argument("--frozen-input-grads", action="store_true",
                   help="freeze-tuning: the embeddings' output requires grad (enable_input_require_grads), so backward "
                        "also runs through the frozen blocks")


def peft_fields(args: argparse.Namespace) -> dict:
    """The scenario fields of :func:`add_peft_options`' options (offload turns checkpointing on)."""
    out = {name: getattr(args, name) for name in PEFT_FIELDS}
    if args.gradient_checkpointing_offload:
        out["gradient_checkpointing"] = True
    return out
