"""torchtune recipe YAML (torchtune 0.6.1: ``recipes/configs/llama3_1/8B_{lora,qlora,full}_single_device.yaml``,
``recipes/lora_finetune_single_device.py``, ``torchtune/models/*/_model_builders.py``).

Model: there is no Hub id in a recipe. ``model._component_`` names a builder (``...lora_llama3_1_8b``) and the weights
come from ``checkpointer.checkpoint_dir``; the importer takes the directory's name when it is a known repo's name
(``/tmp/Meta-Llama-3.1-8B-Instruct`` -> ``meta-llama/Llama-3.1-8B-Instruct``), else the builder's base model
(:data:`BUILDERS`). Method from the builder: ``lora_*`` LoRA, ``qlora_*`` QLoRA (NF4 base, torchao), else full.
``dtype`` is the dtype of every parameter (adapters too: the torchtune framework). ``loss._component_`` names its
loss implementation record (:data:`LOSSES`): ``CEWithChunkedOutputLoss`` is ``torchtune_chunked`` (8 chunks of 16-bit
logits, each upcast on its own; this importer mapped it to Liger's fused linear cross-entropy before, an approximation
that dropped the 16-bit logit chunks and log-softmaxes the recipe keeps), ``torch.nn.CrossEntropyLoss`` is
``torchtune_ce`` (0.3+: the model upcasts its whole output). With ``compile: True`` the recipe compiles the chunked
loss's per-chunk cross-entropy (``training.compile_loss``): ``compile`` is ``Scenario.torch_compile``, so
CEWithChunkedOutputLoss, named or left to the framework's default, runs as ``torchtune_chunked_compiled`` (the
``compiled_form`` of its record in :data:`engine.scenario.loss.LOSSES`, ``Scenario.loss``) for memory and time alike;
the compiled model layers' activations stay counted as eager (said as unsupported). Attention is SDPA.
"""

from __future__ import annotations

import re
from typing import Any

from engine.errors import TrainingConfigError
from engine.importers.table import IGNORE, Handling, Map, Reading, Unmodelled, Unsupported, collect
from engine.importers.values import boolean, choice, integer, names, number, record_names, text
from engine.importers.trainer import COMPILE_EFFECT
from engine.scenario.loss import LossImplementation
from engine.scenario.optimizer import Optimizer
from engine.scenario.training import Attention, Framework, QuantType

FORMAT, VERSION = "torchtune recipe", "0.6.1"

BUILDERS = {
    "llama3_2_1b": "meta-llama/Llama-3.2-1B", "llama3_2_3b": "meta-llama/Llama-3.2-3B",
    "llama3_1_8b": "meta-llama/Llama-3.1-8B", "llama3_1_70b": "meta-llama/Llama-3.1-70B",
    "llama3_1_405b": "meta-llama/Llama-3.1-405B", "llama3_8b": "meta-llama/Meta-Llama-3-8B",
    "llama3_70b": "meta-llama/Meta-Llama-3-70B", "llama2_7b": "meta-llama/Llama-2-7b-hf",
    "llama2_13b": "meta-llama/Llama-2-13b-hf", "llama2_70b": "meta-llama/Llama-2-70b-hf",
    "qwen2_5_0_5b": "Qwen/Qwen2.5-0.5B", "qwen2_5_1_5b_base": "Qwen/Qwen2.5-1.5B", "qwen2_5_3b": "Qwen/Qwen2.5-3B",
    "qwen2_5_7b_base": "Qwen/Qwen2.5-7B", "qwen2_5_7b_instruct": "Qwen/Qwen2.5-7B-Instruct",
    "qwen2_5_14b_base": "Qwen/Qwen2.5-14B", "qwen2_5_72b_base": "Qwen/Qwen2.5-72B",
    "qwen3_0_6b_base": "Qwen/Qwen3-0.6B-Base", "qwen3_8b_base": "Qwen/Qwen3-8B-Base",
    "gemma_2b": "google/gemma-2b", "gemma_7b": "google/gemma-7b", "gemma2_2b": "google/gemma-2-2b",
    "mistral_7b": "mistralai/Mistral-7B-v0.1", "phi3_mini": "microsoft/Phi-3-mini-4k-instruct",
}
"""torchtune 0.6.1 model builders (without the ``lora_``/``qlora_`` prefix) -> the Hub repo of their weights."""

HF_NAMES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}
"""torchtune's attention module names -> Hugging Face's (``output_proj`` is ``o_proj``)."""
MLP_NAMES = ("gate_proj", "up_proj", "down_proj")  # torchtune w1, w3, w2

OPTIMIZERS = {
    "torchao.optim.adamw8bit": Unmodelled("torchao 8-bit AdamW: not modelled"),
    "torchao.optim.adamw4bit": Unmodelled("torchao 4-bit AdamW: not modelled"),
    **record_names("torchtune_components"),  # torch AdamW is the foreach one unless optimizer.fused; SGD takes momentum
}
LOSSES = {"torchtune.modules.loss.cewithchunkedoutputloss": LossImplementation.TORCHTUNE_CHUNKED,
          "torch.nn.crossentropyloss": LossImplementation.TORCHTUNE_CE,
          "torchtune.modules.loss.linearcrossentropyloss": Unmodelled(
              "LinearCrossEntropyLoss (after 0.6.1): the output projection and the loss in chunks inside the loss; "
              "not modelled")}
"""torchtune 0.6.1's loss components -> the loss implementation record of the code they run
(engine.memory.loss_paths)."""
DTYPES = {"bf16": "bf16", "fp32": "fp32", "bfloat16": "bf16", "float32": "fp32"}

_NO_EFFECT = """
output_dir seed shuffle resume_from_checkpoint save_adapter_weights_only log_every_n_steps log_peak_memory_stats
device low_cpu_ram clip_grad_norm custom_sharded_layers fsdp_cpu_offload_params tokenizer._component_ tokenizer.path
tokenizer.prompt_template checkpointer.checkpoint_files checkpointer.recipe_checkpoint checkpointer.output_dir
checkpointer.model_type checkpointer.adapter_checkpoint checkpointer._component_ run_val_every_n_steps
""".split()

KEYS: dict[str, Handling] = {
    **{k: IGNORE for k in _NO_EFFECT},
    "model._component_": Map("tt_builder", text),
    "model.lora_attn_modules": Map("tt_attn_modules", names),
    "model.apply_lora_to_mlp": Map("tt_mlp", boolean),
    "model.apply_lora_to_output": Unsupported("LoRA on the output projection (lm_head): its adapter, gradients and "
                                              "optimizer states are not modelled yet"),
    "model.lora_rank": Map("lora_r", integer()), "model.lora_alpha": Map("lora_alpha", number(0.0)),
    "model.lora_dropout": Map("lora_dropout", number(0.0, below=1.0)),
    "model.use_dora": Map("use_dora", boolean),
    "model.quantize_base": Map("load_in_4bit", boolean),
    "model.*": IGNORE,
    "tokenizer.max_seq_len": Map("seq_len", integer()),
    "tokenizer.*": IGNORE,
    "dataset.packed": Map("packing", boolean), "dataset.*": IGNORE,
    "batch_size": Map("micro_batch_size", integer()),
    "gradient_accumulation_steps": Map("gradient_accumulation_steps", integer()),
    "epochs": Map("epochs", number(0.0)),
    "max_steps_per_epoch": Unsupported("caps the steps of each epoch: the time follows the steps, not the dataset size"),
    "optimizer._component_": Map("tt_optimizer", choice(OPTIMIZERS)),
    "optimizer.fused": Map("tt_fused", boolean), "optimizer.momentum": Map("tt_momentum", number(0.0)),
    "optimizer.*": IGNORE,
    "optimizer_in_bwd": Unsupported("the optimizer steps inside backward, each gradient freed after its update: the "
                                    "whole model's gradients are never alive at once; not modelled"),
    "loss._component_": Map("loss_implementation", choice(LOSSES)),
    "loss.num_output_chunks": IGNORE, "loss.*": IGNORE,
    "lr_scheduler.*": IGNORE, "metric_logger.*": IGNORE, "profiler.*": IGNORE,
    "dtype": Map("tt_dtype", choice(DTYPES)),
    "enable_activation_checkpointing": Map("gradient_checkpointing", boolean),
    "enable_activation_offloading": Map("tt_offload", boolean),
    "compile": (Map("torch_compile", boolean), Unsupported(COMPILE_EFFECT)),
    "checkpointer.checkpoint_dir": Map("tt_checkpoint_dir", text),
    "checkpointer.*": IGNORE,
    "tensor_parallel_dim": Unsupported("tensor parallelism: not modelled"),
    "data_parallel_shard_dim": Unsupported("a sharded data-parallel mesh: not modelled"),
}


def matches(doc: dict[str, Any]) -> bool:
    """A torchtune recipe: a ``_component_`` key under ``model``, ``optimizer``, ``checkpointer`` (decision 6)."""
    return any(isinstance(doc.get(k), dict) and "_component_" in doc[k] for k in ("model", "checkpointer", "optimizer", "loss"))


def read(doc: dict[str, Any]) -> Reading:
    r = collect(doc, KEYS, FORMAT, VERSION)
    s = r.settings
    s["framework"] = Framework.TORCHTUNE
    s["attention"] = Attention.SDPA
    builder = s.pop("tt_builder", "").rsplit(".", 1)[-1]
    base = re.sub(r"^(q?lora)_", "", builder)
    if builder.startswith("qlora_"):
        s["adapter"], s["load_in_4bit"] = "lora", True
        # torchao's NF4Tensor: 64-value blocks whose scales are themselves quantized to int8 in blocks of 256 (the
        # QLoRA paper's double quantization).
        s.update(quant_type=QuantType.NF4, double_quant=True)
    elif builder.startswith("lora_"):
        s["adapter"] = "lora"
    elif builder:
        s["adapter"] = "none"
    if s.pop("load_in_4bit", False) or s.get("load_in_4bit"):
        s["load_in_4bit"] = True
    attn, mlp = s.pop("tt_attn_modules", None), s.pop("tt_mlp", None)
    if attn is not None or mlp:
        targets = [HF_NAMES.get(a, a) for a in (attn or ())] + (list(MLP_NAMES) if mlp else [])
        s["lora_targets"] = tuple(targets)
    opt, fused, momentum = s.pop("tt_optimizer", None), s.pop("tt_fused", None), s.pop("tt_momentum", None)
    if opt is Optimizer.ADAMW:
        s["optimizer"] = Optimizer.ADAMW_FUSED if fused else Optimizer.ADAMW
    elif opt is Optimizer.SGD and momentum:
        s["optimizer"] = Optimizer.SGD_MOMENTUM
    elif opt is not None:
        s["optimizer"] = opt
    dtype = s.pop("tt_dtype", None)
    if dtype is not None:
        s["weights_dtype"], s["mixed"] = dtype, "no"
    _offload(r)
    if s.get("use_dora") and s.get("adapter") == "lora":
        r.notes.append("model.use_dora: torchtune's DoRALinear, estimated with PEFT 0.21's DoRA forward (its magnitude "
                       "vectors, weight norm and temporaries)")
    checkpoint_dir = s.pop("tt_checkpoint_dir", None)
    r.settings["tt_model_hint"] = (checkpoint_dir, base)
    if "seq_len" not in s:
        r.notes.append("tokenizer.max_seq_len not set: torchtune does not truncate; the sequence length is yours to give")
    return r


def model_from_hint(checkpoint_dir: str | None, builder: str) -> tuple[str | None, str]:
    """(Hub repo id, how it was found) from the checkpoint directory's name and the model builder.

    The directory is named after the repo ``tune download`` fetched (``/tmp/Meta-Llama-3.1-8B-Instruct``): when its
    name starts with the builder's base model name, the repo is the builder's owner / that name (Meta renamed
    ``Meta-Llama-3.1-*`` to ``Llama-3.1-*`` on the Hub). Otherwise the builder's base model. (None, why) when neither.
    """
    repo = BUILDERS.get(builder)
    folder = (checkpoint_dir or "").rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1]
    if repo and folder:
        owner, base = repo.split("/")
        name = re.sub(r"^Meta-(Llama-3\.[12])", r"\1", folder)
        if name.lower().startswith(base.lower()):
            return f"{owner}/{name}", f"checkpointer.checkpoint_dir {checkpoint_dir!r}"
    if repo:
        return repo, f"model._component_ builder {builder!r}"
    return None, (f"model._component_ builder {builder!r} and checkpoint_dir {checkpoint_dir!r} name no model this "
                  "importer knows")


def _offload(r: Reading) -> None:
    """``enable_activation_offloading``: torchtune's OffloadActivations moves every saved tensor to CPU memory, and the
    recipe refuses it without activation checkpointing, so what moves are the checkpointed layer inputs (the
    offloaded checkpointing the estimate models; torchtune 0.6.1 ``lora_finetune_single_device.py``)."""
    s = r.settings
    if not s.pop("tt_offload", False):
        return
    if not s.get("gradient_checkpointing"):
        raise TrainingConfigError("enable_activation_offloading: torchtune refuses it without "
                                  "enable_activation_checkpointing: true")
    r.set("gradient_checkpointing_offload", True, "enable_activation_offloading")
