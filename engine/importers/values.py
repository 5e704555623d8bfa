"""Checked converters for config values, and the value tables several formats share (optimizer names, dtypes,
attention implementations, FSDP sharding).

A converter takes ``(value, key)`` and returns the setting's value, an :class:`~engine.importers.table.Unmodelled`
(this value cannot be modelled), or raises :class:`~engine.errors.TrainingConfigError` with ``key: must be ...
(got ...)``. Value names are those of the tools' sources (versions in ``docs/`` of each format module).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from engine.importers.table import SKIP, Several, Unmodelled, check
from engine.memory.parallel import Offload, Strategy
from engine.scenario.optimizer import Optimizer
from engine.scenario.peft import SAVEABLE
from engine.scenario.training import Attention
from engine.time.adapters import GALORE_UPDATE_PROJ_GAP  # the SVD period the time model amortises

Converter = Callable[[Any, str], Any]


MAX_VALUE = 10**15
"""Largest integer or number a converter takes: above every real setting (a dataset's tokens are at most ~10^13, a
GPU count ~10^5); ``num_processes: 1e30`` or ``num_train_epochs: 4.6e18`` is a typo, not a run to price."""


def integer(lo: int = 1) -> Converter:
    """An integer >= ``lo`` (a bool is not an integer; 4.0 is 4), at most :data:`MAX_VALUE`."""
    def convert(value: Any, key: str) -> int:
        ok = isinstance(value, int) and not isinstance(value, bool) or isinstance(value, float) and value.is_integer()
        check(ok and value >= lo, key, f"an integer >= {lo}", value)
        check(value <= MAX_VALUE, key, f"at most {MAX_VALUE:,} (no real setting is larger)", value)
        return int(value)
    return convert


def number(lo: float = 0.0, *, below: float | None = None) -> Converter:
    """A finite number >= ``lo`` (and < ``below``), at most :data:`MAX_VALUE`: YAML's ``.inf`` and ``.nan`` (and
    JSON's ``Infinity`` / ``NaN``, which Python's json reads) are refused."""
    def convert(value: Any, key: str) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        check(ok and value >= lo and (below is None or value < below), key,
              f"a number >= {lo}" + (f" and below {below}" if below is not None else ""), value)
        check(math.isfinite(value) and value <= MAX_VALUE, key, f"a finite number, at most {MAX_VALUE:,}", value)
        return float(value)
    return convert


def boolean(value: Any, key: str) -> bool:
    check(isinstance(value, bool), key, "true or false", value)
    return value


def negated(value: Any, key: str) -> bool:
    return not boolean(value, key)


def text(value: Any, key: str) -> str:
    check(isinstance(value, str) and value.strip() != "", key, "a text", value)
    return value.strip()


def names(value: Any, key: str) -> tuple[str, ...]:
    """Module names: a list of texts, or one comma-separated text."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    check(isinstance(value, list) and bool(value) and all(isinstance(v, str) and v.strip() for v in value), key,
          "a list of module names", value)
    return tuple(v.strip() for v in value)


def choice(options: dict[Any, Any]) -> Converter:
    """One of ``options`` (texts compared case-insensitively); the option's value is the setting (or Unmodelled)."""
    folded = {(k.lower() if isinstance(k, str) else k): v for k, v in options.items()}

    def convert(value: Any, key: str) -> Any:
        probe = value.strip().lower() if isinstance(value, str) else value
        check(not isinstance(probe, (dict, list)) and probe in folded, key,
              "one of " + ", ".join(str(k) for k in options), value)
        return folded[probe]
    return convert


# --- dtypes -------------------------------------------------------------------------------------------------------

DTYPES = {"bfloat16": "bf16", "bf16": "bf16", "torch.bfloat16": "bf16", "float16": "fp16", "fp16": "fp16",
          "half": "fp16", "torch.float16": "fp16", "float32": "fp32", "fp32": "fp32", "float": "fp32",
          "torch.float32": "fp32", "auto": "auto"}
"""``from_pretrained(dtype=...)`` spellings (transformers 4.57 / 5.24 accept the torch names and "auto")."""
dtype = choice(DTYPES)


# --- optimizers -----------------------------------------------------------------------------------------------------

def _unmodelled_optim(what: str) -> Unmodelled:
    return Unmodelled(f"{what}: its optimizer states are not modelled yet (the estimate would use other states)")


_GALORE_LAYERWISE = Unmodelled("layer-wise GaLore: each gradient is freed right after its own update, so the whole "
                               "model's gradients are never alive at once; not modelled (galore_adamw is)")
def record_names(field: str) -> dict[str, Optimizer]:
    """The names one tool gives the modelled optimizers, from their records' ``field`` (``trainer_imports``,
    ``torchtune_components``, ``deepspeed_types``): name -> optimizer. Raises ``ValueError`` when two records claim a
    name (the file would be ambiguous)."""
    names: dict[str, Optimizer] = {}
    for o in Optimizer:
        for name in getattr(o.record, field):
            if name in names:
                raise ValueError(f"optimizer name {name!r} ({field}) is claimed by {names[name].value} and {o.value}")
            names[name] = o
    return names


HF_OPTIMIZERS: dict[str, Any] = {
    "paged_lion_32bit": _unmodelled_optim("paged Lion 32-bit (states in unified memory)"),
    "paged_lion_8bit": _unmodelled_optim("paged 8-bit Lion (states in unified memory)"),
    "galore_adamw_8bit": Unmodelled("GaLore with 8-bit AdamW states (GaLoreAdamW8bit): not modelled (galore_adamw is)"),
    "galore_adafactor": Unmodelled("GaLore over Adafactor's factored states: not modelled (galore_adamw is)"),
    **{name: _GALORE_LAYERWISE for name in ("galore_adamw_layerwise", "galore_adamw_8bit_layerwise",
                                            "galore_adafactor_layerwise")},
    "adamw_torch_4bit": _unmodelled_optim("torchao 4-bit AdamW"), "adamw_torch_8bit": _unmodelled_optim("torchao 8-bit AdamW"),
    "adamw_torch_xla": _unmodelled_optim("AdamW on XLA"), "adamw_torch_npu_fused": _unmodelled_optim("AdamW on Ascend NPU"),
    "adamw_anyprecision": _unmodelled_optim("AnyPrecision AdamW"),
    "ademamix": _unmodelled_optim("AdEMAMix (three states)"), "ademamix_8bit": _unmodelled_optim("8-bit AdEMAMix"),
    "paged_ademamix_32bit": _unmodelled_optim("paged AdEMAMix"), "paged_ademamix_8bit": _unmodelled_optim("paged 8-bit AdEMAMix"),
    "adagrad": _unmodelled_optim("Adagrad (one state)"), "rmsprop": _unmodelled_optim("RMSprop (one state)"),
    "rmsprop_bnb": _unmodelled_optim("bitsandbytes RMSprop"), "rmsprop_bnb_8bit": _unmodelled_optim("8-bit RMSprop"),
    "rmsprop_bnb_32bit": _unmodelled_optim("32-bit RMSprop"),
    "lomo": Unmodelled("LOMO fuses the update into backward: no gradients are kept and no optimizer states; not modelled"),
    "adalomo": Unmodelled("AdaLomo: fused update in backward with factored second moments; not modelled"),
    "grokadamw": _unmodelled_optim("GrokAdamW"), "schedule_free_radam": _unmodelled_optim("schedule-free RAdam"),
    "schedule_free_adamw": _unmodelled_optim("schedule-free AdamW (z and exp_avg_sq)"),
    "schedule_free_sgd": _unmodelled_optim("schedule-free SGD"), "apollo_adamw": _unmodelled_optim("APOLLO (low-rank states)"),
    "apollo_adamw_layerwise": _unmodelled_optim("layer-wise APOLLO"), "stable_adamw": _unmodelled_optim("StableAdamW"),
    **record_names("trainer_imports"),  # last: an optimizer that becomes modelled wins over its unmodelled entry
}
"""transformers ``OptimizerNames`` (4.57.6 / 5.24.0) -> the engine's optimizer (the records' ``trainer_imports``), or
what cannot be modelled."""


def hf_optimizer(value: Any, key: str) -> Any:
    """A ``TrainingArguments.optim`` value (or one of axolotl's own optimizers, reported unmodelled)."""
    name = text(value, key).lower()
    if name in HF_OPTIMIZERS:
        return HF_OPTIMIZERS[name]
    return _unmodelled_optim(f"optimizer {name!r}")


def sgd_momentum(optimizer: Any, args: dict[str, str] | None) -> bool:
    """Whether ``optim: sgd`` with these ``optim_args`` is SGD with momentum (a ``momentum`` above 0): the optimizer
    whose record writes ``trainer_optim="sgd"`` with ``trainer_optim_args="momentum=0.9"``."""
    if args is None or optimizer is not Optimizer.SGD:
        return False
    text = args.get("momentum", "0") or "0"
    try:
        momentum = float(text)
    except ValueError:
        momentum = math.nan
    check(math.isfinite(momentum) and momentum >= 0, "optim_args", "momentum=<a number >= 0>", f"momentum={text}")
    return momentum > 0


def optim_args(value: Any, key: str) -> dict[str, str]:
    """``optim_args="k=v,k=v"`` (transformers parses it the same way) as a dict; axolotl also takes a mapping."""
    if isinstance(value, dict):
        return {str(k).strip(): str(v).strip() for k, v in value.items()}
    pairs = [p.strip() for p in text(value, key).split(",") if p.strip()]
    check(all("=" in p for p in pairs), key, "k=v pairs separated by commas", value)
    return {k.strip(): v.strip() for k, v in (p.split("=", 1) for p in pairs)}


# --- GaLore ------------------------------------------------------------------------------------------------------

_GALORE_EVERY_LINEAR = ("all-linear", "all_linear", "all")


def galore_targets(value: Any, key: str) -> Any:
    """GaLore's target modules (transformers ``optim_target_modules``: a name, a list of names or regexes, or
    ``all-linear``; axolotl ``all_linear``; LLaMA-Factory ``galore_target``, ``all`` or a comma list). The estimate
    projects every linear layer of the decoder blocks (:func:`engine.scenario.optimizer.galore_projected`), so the
    targets must cover them: ``all-linear``, or names that reach both the attention and the MLP (``attn`` and ``mlp``,
    the GaLore examples' spelling, or the seven Llama projections). Fewer targets keep full AdamW states on the rest."""
    if isinstance(value, str) and value.strip().lower() in _GALORE_EVERY_LINEAR:
        return "all-linear"
    targets = [t.lower() for t in names(value, key)]
    attention = any(w in t for t in targets for w in ("attn", "attention", "q_proj"))
    mlp = any(w in t for t in targets for w in ("mlp", "gate_proj", "up_proj", "down_proj", "fc1", "fc2"))
    llama = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    if llama <= set(targets) or (attention and mlp and not set(targets) & llama):
        return "every decoder linear"
    return Unmodelled(f"GaLore on {', '.join(targets)} only: the estimate projects every linear layer of the decoder "
                      "blocks, the others would keep full AdamW states; not modelled")


def galore_gap(value: Any, key: str) -> Any:
    """``update_proj_gap`` / ``galore_update_interval``: the SVD's period; only the default is what the time model
    amortises."""
    gap = integer()(value, key)
    return SKIP if gap == GALORE_UPDATE_PROJ_GAP else Unmodelled(
        f"an SVD every {gap} steps: the time model amortises GaLore's SVD over {GALORE_UPDATE_PROJ_GAP} steps")


def galore_proj_type(value: Any, key: str) -> Any:
    """``proj_type``: ``std`` (project on the smaller side, what the estimate models) or another side."""
    kind = text(value, key).lower()
    return SKIP if kind == "std" else Unmodelled(
        f"GaLore proj_type {kind}: a projector on another side than the smaller one; not modelled (std is)")


# --- PEFT ---------------------------------------------------------------------------------------------------------

def saveable(value: Any, key: str) -> Any:
    """``modules_to_save`` names (a list or a comma text): the ones the estimate can copy
    (:data:`engine.scenario.peft.SAVEABLE`), else what a copy of the others does, unmodelled."""
    listed = names(value, key)
    unknown = [n for n in listed if n not in SAVEABLE]
    if unknown:
        return Unmodelled(f"modules_to_save {', '.join(unknown)}: full trainable copies of these modules (weights, "
                          f"gradients, optimizer states); the estimate copies only {', '.join(sorted(SAVEABLE))}")
    return listed


def positive(value: Any, key: str) -> float:
    """A number above 0 (LoRA+'s learning-rate ratio)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    check(ok, key, "a number above 0", value)
    return float(value)


# --- attention --------------------------------------------------------------------------------------------------------

ATTENTION: dict[str, Any] = {
    "eager": Attention.EAGER, "sdpa": Attention.SDPA, "flash_attention_2": Attention.FLASH_ATTENTION_2,
    "flash_attention_3": Unmodelled("FlashAttention-3 kernels: not modelled (flash_attention_2 is the closest)"),
    "flex_attention": Unmodelled("FlexAttention (compiled block-sparse kernels): not modelled"),
}
"""``attn_implementation`` values of transformers 5.24 -> the engine's Attention."""
attention = choice(ATTENTION)


# --- FSDP and ZeRO --------------------------------------------------------------------------------------------------

SHARDING = {
    "full_shard": Strategy.FSDP_FULL_SHARD, "shard_grad_op": Strategy.FSDP_SHARD_GRAD_OP, "no_shard": Strategy.DDP,
    "1": Strategy.FSDP_FULL_SHARD, "2": Strategy.FSDP_SHARD_GRAD_OP, "3": Strategy.DDP,
    True: Strategy.FSDP_FULL_SHARD, False: Strategy.FSDP_SHARD_GRAD_OP,  # FSDP2 reshard_after_forward
    "hybrid_shard": Unmodelled("HYBRID_SHARD: full shard within a node, replicated across nodes; not modelled"),
    "hybrid_shard_zero2": Unmodelled("HYBRID_SHARD_ZERO2: shard-grad-op within a node, replicated across nodes; not modelled"),
    "4": Unmodelled("HYBRID_SHARD: full shard within a node, replicated across nodes; not modelled"),
    "5": Unmodelled("HYBRID_SHARD_ZERO2: shard-grad-op within a node, replicated across nodes; not modelled"),
}
"""FSDP sharding strategies (torch ``ShardingStrategy`` names and numbers 1-5; FSDP2 ``reshard_after_forward``)."""
_sharding = choice(SHARDING)


def sharding(value: Any, key: str) -> Any:
    return _sharding(str(value) if isinstance(value, int) and not isinstance(value, bool) else value, key)


def hf_fsdp(value: Any, key: str) -> Any:
    """``TrainingArguments.fsdp``: "full_shard auto_wrap offload" (or a list; 5.24 also ``true`` = full shard)."""
    if value is True:  # FSDP2 style: the sharding is fsdp_config.reshard_after_forward's (default true)
        return Several(strategy=Strategy.FSDP_FULL_SHARD, fsdp_by_reshard=True)
    words = value if isinstance(value, list) else str(value).split() if isinstance(value, str) else None
    check(words is not None and all(isinstance(w, str) for w in words), key, "FSDP options such as 'full_shard auto_wrap'", value)
    words = [w.lower() for w in words]
    out = Several()
    for word in words:
        if word in ("auto_wrap", ""):
            continue
        if word == "offload":
            out["offload"] = Offload.OPTIMIZER_AND_PARAMS  # CPUOffload(offload_params=True): weights, grads, optimizer step
            continue
        strategy = _sharding(word, key)
        if isinstance(strategy, Unmodelled):
            return strategy
        out["strategy"] = strategy
    if "offload" in out and "strategy" not in out:
        out["strategy"] = Strategy.FSDP_FULL_SHARD  # transformers' default sharding when only offload is given
    return out


def zero_stage(value: Any, key: str) -> Strategy:
    """DeepSpeed ``zero_optimization.stage`` 0-3 (0 = plain data parallel)."""
    stage = integer(0)(value, key)
    check(stage <= 3, key, "0, 1, 2 or 3", value)
    return (Strategy.DDP, Strategy.ZERO1, Strategy.ZERO2, Strategy.ZERO3)[stage]
