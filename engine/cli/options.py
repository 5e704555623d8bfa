"""Options and helpers shared by the verbs of ``python -m engine``: the model source, the scenario, the GPU,
many GPUs and serving, time and cost; loading the model; writing JSON or CSV.

Bad input is reported as one line on stderr with exit status 2 (:class:`Parser`, :func:`fail`).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from engine.errors import ScenarioError, explain_validation
from engine.secrets import redact_tokens
from engine.memory.inference import KvCacheDtype, WeightPrecision
from engine.memory.parallel import Offload, Strategy
from engine.model.architecture import Architecture
from engine.model.build import architecture_or_approximation
from engine.plan.strategy import DEFAULT_STRATEGY, training_strategy
from engine.scenario.loss import LossImplementation, TransformersVersion
from engine.scenario.optimizer import Optimizer
from engine.scenario.precision import PrecisionMode
from engine.cli.arg_types import finite_float, gpu_count, positive_float, positive_int  # noqa: F401 - the verbs' types, re-exported
from engine.cli.peft_options import add_peft_options, peft_fields
from engine.scenario.training import DEFAULT_PRECISION, Attention, Framework, Method, QuantStorage, QuantType, Scenario

INFERENCE = "inference"
"""The ``--method`` value of a serving estimate (not a training method)."""


class Parser(argparse.ArgumentParser):
    """argparse that reports errors as one line on stderr and exit status 2: a token-looking word redacted, a quoted
    value of more than 60 characters (``--seq-len`` with 5,000 digits) cut to its start and length."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"error: {short_values(redact_tokens(message))}\n")


_LONG_QUOTED = re.compile(r"'([^'\s]{60,})'")


def short_values(message: str) -> str:
    """``message`` with every quoted value over 60 characters cut: ``'99999999999999999999...' (5,000 characters)``."""
    return _LONG_QUOTED.sub(lambda m: f"'{m.group(1)[:20]}...' ({len(m.group(1)):,} characters)", message)


def add_model_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """--config / --model (one of them required, unless ``required`` is False: a training config may name the model)."""
    src = p.add_mutually_exclusive_group(required=required)
    src.add_argument("--config", metavar="PATH", help="path to a model's config.json")
    src.add_argument("--model", metavar="REPO_ID", help="Hugging Face Hub repo id (config.json is read from the Hub; HF_TOKEN unlocks gated repos)")
    p.add_argument("--revision", default=None, help="branch, tag or commit of --model (default: main)")
    p.add_argument("--offline", action="store_true", help="with --model: use the bundled catalog copy, no network")


def add_scenario_options(p: argparse.ArgumentParser) -> None:
    d = Scenario()  # the engine's defaults, so the CLI and the app start from the same scenario
    p.add_argument("--method", choices=[m.value for m in Method], default=d.method.value, help=f"full fine-tuning, LoRA, QLoRA or another PEFT method (default: {d.method.value})")
    p.add_argument("--precision", choices=[m.value for m in PrecisionMode], default=None,
                   help="fp32; amp_bf16/amp_fp16 = mixed precision with fp32 weights; bf16/fp16 = pure 16-bit weights "
                        "(no fp32 copy; with a layout's --master-weights, bf16 and amp_bf16 are both Megatron-LM's --bf16: a "
                        "bf16 model with fp32 master weights and gradients, fp16 and amp_fp16 its --fp16) "
                        "(default: the method's usual one: " + ", ".join(f"{m.value} {p.value}" for m, p in DEFAULT_PRECISION.items()) + ")")
    p.add_argument("--optimizer", choices=[o.value for o in Optimizer], default=d.optimizer.value, help="optimizer (default: %(default)s; adamw is torch foreach)")
    p.add_argument("--micro-batch-size", type=int, default=d.micro_batch_size, metavar="N", help="sequences per forward pass per GPU (default: %(default)s)")
    p.add_argument("--seq-len", type=int, default=d.seq_len, metavar="N", help="tokens per sequence (default: %(default)s)")
    p.add_argument("--gradient-accumulation-steps", type=int, default=d.gradient_accumulation_steps, metavar="N", help="micro batches per optimizer step (default: %(default)s)")
    p.add_argument("--gradient-checkpointing", action="store_true", help="recompute activations in backward")
    p.add_argument("--attention", choices=[a.value for a in Attention], default=d.attention.value, help="attn_implementation (default: %(default)s)")
    p.add_argument("--lora-r", type=int, default=d.lora_r, metavar="N", help="LoRA rank (default: %(default)s)")
    p.add_argument("--lora-alpha", type=finite_float, default=d.lora_alpha, metavar="A", help="LoRA alpha (default: %(default)s; no effect on memory)")
    p.add_argument("--lora-dropout", type=finite_float, default=d.lora_dropout, metavar="P", help="LoRA dropout (default: %(default)s)")
    p.add_argument("--lora-targets", default=None, metavar="NAMES",
                   help="comma-separated target modules, e.g. q_proj,v_proj, or all-linear (default: the attention projections)")
    p.add_argument("--quant-type", choices=[q.value for q in QuantType], default=d.quant_type.value, help="QLoRA base quantization: 4-bit nf4/fp4 or 8-bit int8 (LLM.int8) (default: %(default)s)")
    p.add_argument("--no-double-quant", action="store_true", help="QLoRA without double quantization")
    p.add_argument("--quant-storage", choices=[q.value for q in QuantStorage], default=None,
                   help="QLoRA bnb_4bit_quant_storage: FSDP/ZeRO-3 shard the 4-bit base only in a float dtype, e.g. bf16 "
                        f"(default: {d.quant_storage.value}, as transformers; under zero3 / fsdp_full_shard the compute dtype, "
                        "as the FSDP-QLoRA recipe, said in quant_storage_note)")
    p.add_argument("--no-prepare-kbit", action="store_true", help="QLoRA without prepare_model_for_kbit_training (no fp32 upcast)")
    p.add_argument("--framework", choices=[f.value for f in Framework], default=d.framework.value,
                   help="training stack: hf = transformers + PEFT + Trainer; litgpt; torchtune (default: %(default)s)")
    p.add_argument("--fused-cross-entropy", action="store_true",
                   help="chunked LM head + loss (Liger Kernel, TrainingArguments(use_liger_kernel=True)): no vocabulary-sized logits")
    p.add_argument("--loss-implementation", choices=[x.value for x in LossImplementation], default=None,
                   help="the cross-entropy code: hf, liger (= --fused-cross-entropy), litgpt_chunked, torchtune_chunked, "
                        "torchtune_chunked_compiled (its recipes with compile: True), torchtune_ce, torchtune_ce_v02, "
                        "megatron, torchtitan, inplace_fused (default: the framework's default: transformers' loss "
                        "for hf, LitGPT's for litgpt, torchtune_chunked for torchtune; --torch-compile turns "
                        "torchtune_chunked into torchtune_chunked_compiled)")
    p.add_argument("--torch-compile", action="store_true",
                   help="the run is torch.compiled (TrainingArguments(torch_compile=True), torchtune compile: True): "
                        "memory counts the loss's compiled form (torchtune's chunked loss: torchtune_chunked_compiled) "
                        "and the step time fused kernels, the same run for both")
    p.add_argument("--transformers-version", default=d.transformers_version.value, metavar="VERSION",
                   help="transformers release whose loss path the hf loss follows, e.g. 4.41.2, or a range: "
                        + ", ".join(v.value for v in TransformersVersion) + " (default: %(default)s)")
    add_peft_options(p)


SCENARIO_FIELDS = (
    "method", "precision", "optimizer", "micro_batch_size", "seq_len", "gradient_accumulation_steps",
    "gradient_checkpointing", "attention", "lora_r", "lora_alpha", "lora_dropout", "lora_targets", "quant_type",
    "fused_cross_entropy", "framework", "quant_storage", "loss_implementation", "transformers_version",
    "torch_compile",
)


def scenario_from_args(args: argparse.Namespace) -> Scenario:
    """The scenario of the typed options.

    Raises:
        ScenarioError: an invalid value, named by its flag (``--micro-batch-size: Input should be ...``), not by the
            Scenario field the engine's message names.
    """
    fields = {name: getattr(args, name) for name in SCENARIO_FIELDS}
    # --cuda-graphs is torch.compile(mode="reduce-overhead"): a compiled run, for memory as for time
    fields["torch_compile"] = bool(fields["torch_compile"] or getattr(args, "cuda_graphs", False))
    if fields["quant_storage"] is None:  # unset: the multi-GPU split picks it (engine.memory.qlora_storage)
        del fields["quant_storage"]
    fields.update(peft_fields(args))
    try:
        scenario = Scenario.build(
            **fields,
            double_quant=not args.no_double_quant,
            prepare_kbit_training=not args.no_prepare_kbit,
        )
    except ScenarioError as exc:
        raise ScenarioError(flag_names(str(exc), fields)) from None
    unread = unread_options(scenario, getattr(args, "typed", set()))
    if unread:
        raise ScenarioError(", ".join(unread) + f" {'does' if len(unread) == 1 else 'do'} not apply to "
                            f"{_what(scenario, unread)}: drop {'it' if len(unread) == 1 else 'them'}, or choose the method or "
                            "optimizer that reads them")
    return scenario


def unread_options(scenario: Scenario, typed: set[str]) -> list[str]:
    """The typed options that ``scenario`` never reads (``--quant-type int8 --method lora``: a LoRA on a 16-bit base,
    not the 8-bit base the flag asks for), as flags. Which method reads what comes from its record
    (:class:`engine.scenario.methods.MethodRecord`: ``rank_key``, ``alpha_key``, ``dropout_key``, ``prompt``,
    ``lora_pairs``); the quantized base's options are QLoRA's, GaLore's rank its optimizer's."""
    record = scenario.method.record
    peft = scenario.method is not Method.FULL
    reads = {
        "lora_r": record.rank_key is not None, "lora_alpha": record.alpha_key is not None,
        "lora_dropout": record.dropout_key is not None, "lora_targets": peft and not record.prompt,
        "use_rslora": record.lora_pairs, "loraplus_lr_ratio": record.lora_pairs, "num_virtual_tokens": record.prompt,
        **{k: scenario.method is Method.QLORA for k in ("quant_type", "quant_storage", "no_double_quant", "no_prepare_kbit")},
        "galore_rank": scenario.optimizer.record.galore,
    }
    return ["--" + k.replace("_", "-") for k, read in reads.items() if not read and k in typed]


def _what(scenario: Scenario, unread: list[str]) -> str:
    if unread == ["--galore-rank"]:
        return f"--optimizer {scenario.optimizer.value}"
    return f"--method {scenario.method.value}" + (f" with --optimizer {scenario.optimizer.value}"
                                                  if "--galore-rank" in unread else "")


def flag_names(message: str, fields: Any) -> str:
    """``message`` with each ``field:`` that starts one of its "; "-joined parts written as its flag (``--seq-len:``):
    every option of these fields is the field's name with dashes (:data:`SCENARIO_FIELDS`, ``PEFT_FIELDS``)."""
    parts = message.split("; ")
    for i, part in enumerate(parts):
        field = part.split(":", 1)[0]
        if field in fields and ":" in part:
            parts[i] = "--" + field.replace("_", "-") + part[len(field):]
    return "; ".join(parts)


def add_gpu_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu", metavar="NAME", default=None,
                   help="check the fit on this GPU (e.g. 'A100 80GB', 'H100 SXM', 'RTX 4090'; a family name such as 'A100' "
                        "reads as the catalog's GPU for it, the A100 80GB, with a warning naming the others; one that is no "
                        "GPU's alias, such as 'A100 SXM', is refused with them); adds gpu, fits, headroom_bytes, min_gpus")
    p.add_argument("--num-gpus", type=gpu_count, default=None, metavar="N", help="GPUs of that kind (with --gpu; default 1)")
    p.add_argument("--strategy", choices=[s.value for s in Strategy], default=None,
                   help="multi-GPU strategy (with --gpu): ddp = every GPU holds everything; zero1/zero2/zero3 = DeepSpeed ZeRO "
                        "stages; fsdp_full_shard = ZeRO-3, fsdp_shard_grad_op = ZeRO-2 (default: zero3, as the app; one GPU without "
                        "--offload trains without sharding whatever the strategy, which then sets only min_gpus)")


def add_parallel_inference_options(p: argparse.ArgumentParser) -> None:
    method = next(a for a in p._actions if a.dest == "method")
    method.choices = list(method.choices) + [INFERENCE]
    method.help = "full fine-tuning, LoRA, QLoRA, or inference (serving memory) (default: %(default)s)"
    g = p.add_argument_group("many GPUs (with --gpu)")
    g.add_argument("--offload", choices=[o.value for o in Offload], default=None,
                   help="move optimizer states (and with zero3/fsdp_full_shard, weights) to CPU memory (default: none)")
    g.add_argument("--gpus-per-node", type=positive_int, default=None, metavar="N",
                   help="GPUs per node, for the CPU memory per node of offload (default: min(num GPUs, 8))")
    s = p.add_argument_group("serving (--method inference; --seq-len is the context per sequence; --tensor-parallel N "
                             "splits one replica over N GPUs, vLLM tensor_parallel_size / TGI --num-shard; --num-gpus "
                             "alone takes the fewest that fit)")
    s.add_argument("--concurrency", type=int, default=None, metavar="N", help="sequences served at once (default 1)")
    s.add_argument("--kv-cache-dtype", choices=[k.value for k in KvCacheDtype], default=None, help="KV cache element type (default bf16)")
    s.add_argument("--gpu-memory-utilization", type=finite_float, default=None, metavar="X",
                   help="with --gpu: vLLM's gpu_memory_utilization, the share of the GPU's memory for weights, activations "
                        "and KV cache (vLLM's default 0.9; default here: all of the usable memory, as TGI)")
    s.add_argument("--weight-precision", choices=[w.value for w in WeightPrecision], default=None,
                   help="serving precision of the linear weights: bf16, fp16, int8, fp8, int4 (GPTQ/AWQ group 128) (default: as the "
                        "checkpoint stores them (its quantization_config), bf16 when not quantized)")


def strategies(args: argparse.Namespace) -> tuple[Strategy, Strategy]:
    """(the strategy asked, the one the run uses): ``--strategy`` or :data:`~engine.plan.strategy.DEFAULT_STRATEGY`;
    one GPU without offload trains plainly (:func:`~engine.plan.strategy.training_strategy`, as the app)."""
    asked = Strategy(args.strategy) if args.strategy else DEFAULT_STRATEGY
    return asked, training_strategy(asked, args.num_gpus or 1, Offload(getattr(args, "offload", None) or "none"))


def gpus_per_node(args: argparse.Namespace) -> int:
    n = args.num_gpus or 1
    per = args.gpus_per_node or min(n, 8)
    if per < 1:
        raise ScenarioError(f"--gpus-per-node: must be at least 1 (got {per})")
    return per


def add_time_cost_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("time and cost (with --gpu and a dataset size)")
    g.add_argument("--dataset-tokens", type=int, default=None, metavar="N", help="tokens in one epoch of the dataset")
    g.add_argument("--examples", type=int, default=None, metavar="N", help="examples in the dataset (with --avg-tokens)")
    g.add_argument("--avg-tokens", type=finite_float, default=None, metavar="T", help="average tokens per example (with --examples)")
    g.add_argument("--epochs", type=finite_float, default=None, metavar="E", help="passes over the dataset (default 1)")
    g.add_argument("--no-packing", action="store_true",
                   help="pad every example to --seq-len (with --examples): the padding is processed too")
    g.add_argument("--runs", type=int, default=None, metavar="N", help="experimental runs to pay for (default 1)")
    g.add_argument("--measured-tokens-per-second", type=finite_float, default=None, metavar="X",
                   help="calibrate to your run: the tokens/s you measured for this configuration (all GPUs together); "
                        "the step-time model's prediction is scaled by measured / predicted")
    g.add_argument("--fused-kernels", action="store_true",
                   help="the run uses other fused kernels: Unsloth's or Liger's (fused elementwise ops: fewer bytes "
                        "and launches; a compiled run is --torch-compile, which memory reads too)")
    g.add_argument("--cuda-graphs", action="store_true",
                   help="torch.compile(mode='reduce-overhead'): the fused forward and backward replayed as CUDA graphs, "
                        "no per-kernel launch time (implies --torch-compile and --fused-kernels)")
    g.add_argument("--price-source", default=None, metavar="NAME",
                   help=f"a source of data/gpu_prices.csv, e.g. 'RunPod Community Cloud', or 'cheapest' (default: the cheapest listed "
                        "price of any source)")


TIME_COST_OPTIONS = ("dataset_tokens", "examples", "avg_tokens", "epochs", "runs", "measured_tokens_per_second", "price_source")


def dataset_from_args(args: argparse.Namespace, step_time_options: bool = False) -> Any:
    """The dataset of the time/cost options (an :class:`engine.plan.cost.Dataset`), None when no size is given;
    ScenarioError on a bad combination. ``step_time_options``: the estimate has a step time without a dataset (a
    parallel layout), so ``--fused-kernels`` alone is one of its settings, not a time-and-cost option; ``--cuda-graphs``
    is timed for one GPU and data parallelism only, so a layout refuses it."""
    if args.cuda_graphs and step_time_options:
        raise ScenarioError("--cuda-graphs is timed for one GPU and data-parallel runs, not for parallel layouts")
    if args.dataset_tokens is None and args.examples is None and args.avg_tokens is None:
        if (any(getattr(args, k) is not None for k in TIME_COST_OPTIONS) or args.no_packing
                or ((args.fused_kernels or args.cuda_graphs) and not step_time_options)):
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
    from engine.plan.cost import Dataset  # here: a memory estimate needs none of the time model

    try:
        return Dataset(**fields)
    except ValidationError as exc:  # said by the flag when the user typed it (epochs may come from --from-config)
        message = explain_validation(exc, "dataset")
        for field, dest in _DATASET_FLAGS.items():
            if message.startswith(field + ":") and dest in getattr(args, "typed", ()):
                message = "--" + dest.replace("_", "-") + message[len(field):]
        raise ScenarioError(message) from None


_DATASET_FLAGS = {"total_tokens": "dataset_tokens", "examples": "examples", "avg_tokens": "avg_tokens",
                  "epochs": "epochs", "runs": "runs"}
"""The Dataset's fields and the options that set them (the message names the option, as for the scenario)."""


def load_model(args: argparse.Namespace) -> tuple[Architecture, dict[str, Any], dict[str, Any]]:
    """The architecture, the config dict and where it came from."""
    # Here, not at the top: the Hub client (huggingface_hub, httpx) is imported only when a source needs it.
    from engine.model.sources import config_from_catalog, config_from_file, config_from_hub

    if args.config:
        config, origin = config_from_file(args.config)
    elif args.offline:
        config, origin = config_from_catalog(args.model)
    else:
        config, origin = config_from_hub(args.model, revision=args.revision)
        if origin.notice:
            print(f"notice: {redact_tokens(origin.notice)}", file=sys.stderr)
    arch, approximation = architecture_or_approximation(config)
    if approximation:
        print(f"notice: {redact_tokens(approximation)}", file=sys.stderr)
    return arch, config, origin.model_dump(exclude_none=True)



def emit_json(out: Any) -> int:
    """Print ``out`` as indented JSON on stdout; a reader that left (``| head``) is not an error. Returns 0."""
    return emit_bytes((redact_tokens(json.dumps(out, indent=2)) + "\n").encode("utf-8"))


def emit_bytes(data: bytes, path: str | None = None) -> int:
    """Write ``data`` to ``path`` or stdout; a closed pipe on stdout is silenced. Returns 0."""
    if path:
        Path(path).write_bytes(data)
        return 0
    try:
        sys.stdout.buffer.write(data) if hasattr(sys.stdout, "buffer") else sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. piped into `head`: the reader left; silence the flush at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


def fail(exc: Exception) -> int:
    """The one-line error on stderr and exit status 2."""
    print(f"error: {short_values(redact_tokens(str(exc)))}", file=sys.stderr)
    return 2
