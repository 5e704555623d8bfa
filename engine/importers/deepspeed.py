"""DeepSpeed config JSON (deepspeed 0.19.8 ``runtime/constants.py``, ``runtime/zero/config.py``,
``runtime/zero/offload_config.py``; Hugging Face's ``"auto"`` values as filled by transformers 4.57.6 / 5.24.0
``integrations/deepspeed.py``).

``zero_optimization.stage`` -> ZeRO-1/2/3 (0 = plain data parallel); ``offload_optimizer.device: cpu`` -> optimizer
offload, with ``offload_param.device: cpu`` (stage 3) -> optimizer and weights offloaded. ``bf16``/``fp16``
``enabled`` -> 16-bit compute with fp32 master weights in the optimizer (what the estimate models for DeepSpeed with
mixed precision). ``"auto"`` values take the Trainer's value: they set nothing here.
"""

from __future__ import annotations

from typing import Any

from engine.errors import ConflictingKeysError
from engine.importers.table import IGNORE, Handling, Map, Reading, Unmodelled, Unsupported, collect
from engine.importers.values import boolean, choice, integer, record_names, zero_stage
from engine.memory.parallel import Offload

FORMAT, VERSION = "DeepSpeed config", "0.19.8"
AUTO = "auto"


def _auto(convert: Any) -> Any:
    """A converter that lets Hugging Face's "auto" through (it sets nothing: the Trainer fills it in)."""
    def wrapped(value: Any, key: str) -> Any:
        return AUTO if value == AUTO else convert(value, key)
    return wrapped


def _enabled(kind: str) -> Any:
    def convert(value: Any, key: str) -> Any:
        return AUTO if value == AUTO else (kind if boolean(value, key) else "no")
    return convert


_DEVICE = choice({"none": "none", "cpu": "cpu",
                  "nvme": Unmodelled("ZeRO-Infinity: states on NVMe instead of CPU memory; not modelled (CPU offload is the "
                                     "closest: same GPU memory, no CPU memory)")})
_DS_OPTIMIZERS = {"lamb": Unmodelled("DeepSpeed LAMB: states not modelled"),
                  "onebitadam": Unmodelled("1-bit Adam (compressed communication): not modelled"),
                  "zerooneadam": Unmodelled("0/1 Adam: not modelled"), "onebitlamb": Unmodelled("1-bit LAMB: not modelled"),
                  "muadam": Unmodelled("MuAdam: not modelled"), "muadamw": Unmodelled("MuAdamW: not modelled"),
                  "musgd": Unmodelled("MuSGD: not modelled"),
                  **record_names("deepspeed_types")}  # the records' names win over an unmodelled entry

_NOT_MODELLED_ZERO3 = "ZeRO-3 gathering limit: the estimate gathers the largest unit plus one decoder layer, whatever this says"
KEYS: dict[str, Handling] = {
    "train_micro_batch_size_per_gpu": Map("micro_batch_size", _auto(integer())),
    "gradient_accumulation_steps": Map("gradient_accumulation_steps", _auto(integer())),
    "train_batch_size": Map("ds_train_batch_size", _auto(integer())),
    "bf16.enabled": Map("ds_bf16", _enabled("bf16")), "bfloat16.enabled": Map("ds_bf16", _enabled("bf16")),
    "fp16.enabled": Map("ds_fp16", _enabled("fp16")),
    "bf16.bf16_master_weights_and_grads": Unsupported("keeps master weights and gradients in bf16: no fp32 master copy "
                                                      "(the estimate counts 4 bytes per trainable parameter for it)"),
    "bf16.bf16_optimizer_states": Unsupported("optimizer states in bf16 instead of fp32: half their memory"),
    "bf16.*": IGNORE, "bfloat16.*": IGNORE, "fp16.*": IGNORE,
    "torch_autocast.enabled": Unsupported("torch autocast inside DeepSpeed instead of a 16-bit model: fp32 weights on the "
                                          "GPU; not modelled"),
    "torch_autocast.*": IGNORE,
    "zero_optimization.stage": Map("strategy", zero_stage),
    "zero_optimization.offload_optimizer.device": Map("ds_offload_optimizer", _DEVICE),
    "zero_optimization.offload_param.device": Map("ds_offload_param", _DEVICE),
    "zero_optimization.offload_optimizer.ratio": Unsupported("offloads only this fraction of the optimizer (partial "
                                                             "ZeRO-Offload); the estimate offloads all of it"),
    "zero_optimization.offload_optimizer.*": IGNORE, "zero_optimization.offload_param.*": IGNORE,
    # a value where DeepSpeed wants a mapping ("offload_param": "cpu"): zero_optimization.* would ignore it silently
    **{f"zero_optimization.{k}": Unsupported(f"a value, not a mapping such as {{\"device\": \"cpu\"}}: DeepSpeed's "
                                             f"config refuses it, and no {k.split('_')[1]} offload is estimated")
       for k in ("offload_optimizer", "offload_param")},
    "zero_optimization.cpu_offload": Unsupported("old spelling of optimizer offload (DeepSpeed < 0.3): use "
                                                 "offload_optimizer.device: cpu"),
    "zero_optimization.reduce_bucket_size": Unsupported(
        "size of the gradient reduce bucket (\"auto\" = hidden_size^2); the estimate uses DeepSpeed's default 5e8 "
        "elements, capped at the trainable parameter count"),
    "zero_optimization.stage3_prefetch_bucket_size": Unsupported(_NOT_MODELLED_ZERO3),
    "zero_optimization.prefetch_bucket_size": Unsupported(_NOT_MODELLED_ZERO3),
    "zero_optimization.stage3_param_persistence_threshold": Unsupported(
        "parameters under this size stay whole on every GPU (not sharded); not modelled"),
    "zero_optimization.stage3_max_live_parameters": Unsupported(_NOT_MODELLED_ZERO3),
    "zero_optimization.stage3_max_reuse_distance": Unsupported(_NOT_MODELLED_ZERO3),
    "zero_optimization.zero_quantized_weights": Unsupported("ZeRO++ quantized weight gathering: not modelled"),
    "zero_optimization.zero_quantized_gradients": Unsupported("ZeRO++ quantized gradients: not modelled"),
    "zero_optimization.zero_hpz_partition_size": Unsupported("ZeRO++ hierarchical partitioning: a secondary weight copy "
                                                             "per node; not modelled"),
    "zero_optimization.*": IGNORE,  # overlap_comm, contiguous_gradients, bucket sizes of ZeRO-1/2 gathers, ...
    "optimizer.type": Map("optimizer", choice(_DS_OPTIMIZERS)),
    "optimizer.*": IGNORE, "scheduler.*": IGNORE,
    "activation_checkpointing.*": IGNORE,  # Megatron-style deepspeed.checkpointing; Hugging Face models ignore it
    **{k: IGNORE for k in ("gradient_clipping", "steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer",
                           "prescale_gradients", "gradient_predivide_factor", "dump_state", "communication_data_type",
                           "zero_force_ds_cpu_optimizer", "seq_parallel_communication_data_type", "flops_profiler.*",
                           "tensorboard.*", "wandb.*", "csv_monitor.*", "comms_logger.*", "memory_breakdown",
                           "checkpoint.*", "data_types.*", "aio.*", "elasticity.*")},
    "pipeline.*": Unsupported("pipeline parallelism: not modelled"),
    "sequence_parallel_size": Unsupported("Ulysses sequence parallelism: not modelled"),
    "compression_training.*": Unsupported("DeepSpeed compression: not modelled"),
}


def matches(doc: dict[str, Any]) -> bool:
    """A DeepSpeed config: ZeRO settings, a DeepSpeed batch key, or a bf16/fp16 *object* (formats.md, decision 4)."""
    return (isinstance(doc.get("zero_optimization"), dict) or "train_micro_batch_size_per_gpu" in doc
            or "train_batch_size" in doc or any(isinstance(doc.get(k), dict) and "enabled" in doc[k] for k in ("bf16", "fp16")))


def _mixed(r: Reading) -> None:
    """bf16 / fp16 ``enabled``: one on -> that autocast dtype; both on -> a conflict; an "auto" -> the Trainer's."""
    bf16, fp16 = r.settings.pop("ds_bf16", None), r.settings.pop("ds_fp16", None)
    if bf16 == "bf16" and fp16 == "fp16":
        raise ConflictingKeysError("bf16.enabled and fp16.enabled are both true; DeepSpeed trains in one of them")
    on = next((v for v in (bf16, fp16) if v in ("bf16", "fp16")), None)
    key = r.sources.get("ds_bf16" if on == "bf16" or bf16 is not None else "ds_fp16", "bf16.enabled")
    if on:
        r.set("mixed", on, r.sources["ds_bf16" if on == "bf16" else "ds_fp16"])
    elif AUTO in (bf16, fp16):
        r.settings["mixed"], r.sources["mixed"] = AUTO, key
    elif bf16 is not None or fp16 is not None:
        r.set("mixed", "no", key)


def read(doc: dict[str, Any]) -> Reading:
    """Read a DeepSpeed config (a file, or the inline ``deepspeed`` dict of TrainingArguments/axolotl)."""
    r = collect(doc, KEYS, FORMAT, VERSION)
    _mixed(r)
    autos = [t for t, v in r.settings.items() if v == AUTO]
    for target in autos:
        key = r.sources[target]
        del r.settings[target]
        r.mapped.pop(key, None)
        r.ignored.append(key)
    if autos:
        r.notes.append("DeepSpeed \"auto\" values follow the TrainingArguments (give that file too, or the CLI flags)")
    opt, param = r.settings.pop("ds_offload_optimizer", "none"), r.settings.pop("ds_offload_param", "none")
    if param == "cpu" and opt != "cpu":
        r.unsupported["zero_optimization.offload_param.device"] = ("weights offloaded to CPU without the optimizer: not "
                                                                   "modelled (the estimate offloads the optimizer with them)")
    elif "ds_offload_optimizer" in r.sources or "ds_offload_param" in r.sources:
        r.settings["offload"] = Offload.OPTIMIZER_AND_PARAMS if param == "cpu" else Offload.OPTIMIZER if opt == "cpu" else Offload.NONE
    total = r.settings.pop("ds_train_batch_size", None)
    micro, accum = r.settings.get("micro_batch_size"), r.settings.get("gradient_accumulation_steps")
    if total is not None and micro and accum:
        if total % (micro * accum):
            raise ConflictingKeysError(f"train_batch_size {total} is not train_micro_batch_size_per_gpu x "
                                       f"gradient_accumulation_steps x GPUs ({micro} x {accum} x N); DeepSpeed refuses it")
        r.settings["num_gpus"] = total // (micro * accum)
    return r
