"""Recognise each file's format by content, read it with its table, and combine the files into one import.

Several files (``trainer.yaml ds_zero3.json``) describe one run. Later files override earlier files *of the same
format* (a base config and an override); two files of *different* formats that state one setting differently are a
conflict (transformers itself refuses a DeepSpeed micro batch that differs from ``per_device_train_batch_size``). What a
tool assumes when its file is silent (TRL's bf16, LLaMA-Factory's LoRA rank 8) gives way to any file that states it.

The shared settings are then resolved into the Scenario's terms (:func:`resolve`): the precision from the weights'
dtype and the autocast dtype, the method from the adapter and the quantized base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from engine.errors import ConflictingKeysError, TrainingConfigError
import engine.importers.accelerate as accelerate
import engine.importers.axolotl as axolotl
import engine.importers.bnb as bnb
import engine.importers.deepspeed as deepspeed
import engine.importers.llamafactory as llamafactory
import engine.importers.peft as peft
import engine.importers.torchtune as torchtune
import engine.importers.trainer as trainer
from engine.importers.parse import parse_training_config, yaml_1_1_notes
from engine.importers.table import Reading
from engine.memory.parallel import Offload, Strategy
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import METHOD_LABELS, Method, QuantType, Scenario

FORMATS: tuple[tuple[str, Callable[[dict], bool], Callable[[dict], Reading]], ...] = (
    ("peft", peft.matches, peft.read),
    ("model_config", bnb.matches_model_config, bnb.read_model_config),
    ("bnb", bnb.matches, bnb.read),
    ("deepspeed", deepspeed.matches, deepspeed.read),
    ("accelerate", accelerate.matches, accelerate.read),
    ("torchtune", torchtune.matches, torchtune.read),
    ("llamafactory", llamafactory.matches, llamafactory.read),
    ("axolotl", axolotl.matches, axolotl.read),
    ("trainer", trainer.matches, trainer.read),
)
"""Detection order (formats.md, section 0): the first format whose ``matches`` holds reads the file."""

KNOWN = ("TrainingArguments / TRL SFTConfig, axolotl, LLaMA-Factory, torchtune, DeepSpeed, accelerate, PEFT "
         "adapter_config.json, BitsAndBytesConfig")

_PRECISION = {("fp32", "no"): PrecisionMode.FP32, ("fp32", "bf16"): PrecisionMode.AMP_BF16,
              ("fp32", "fp16"): PrecisionMode.AMP_FP16, ("bf16", "no"): PrecisionMode.BF16,
              ("bf16", "bf16"): PrecisionMode.BF16, ("fp16", "no"): PrecisionMode.FP16, ("fp16", "fp16"): PrecisionMode.FP16}
"""(weights' dtype, autocast dtype) -> precision mode (engine.scenario.precision): autocast over 16-bit weights computes
in their dtype, so it is the pure 16-bit mode."""


def read_one(doc: dict[str, Any], name: str) -> tuple[str, Reading]:
    """(format key, reading) of one parsed file. Raises TrainingConfigError for a format not recognised."""
    for key, matches, read in FORMATS:
        if matches(doc):
            return key, read(doc)
    raise TrainingConfigError(f"{name} is not a training config this importer recognises ({KNOWN}); none of their "
                              "distinguishing keys is there")


@dataclass
class ImportResult:
    """The combined import of one or more config files.

    ``fields``: Scenario fields the files set (enums as the engine's types); ``parallel``: ``strategy`` (Strategy),
    ``offload`` (Offload), ``num_gpus``, ``gpus_per_node`` where stated; ``dataset``: ``epochs``, ``packing`` where
    stated; ``model`` / ``revision``: the base model the files name (a Hub repo id, unresolved); ``mapped``: key ->
    value used; ``ignored``: keys without effect on memory or time; ``unsupported``: key -> its effect in words
    (keys are prefixed with the file name when several files are imported).
    """

    files: list[dict[str, str]] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)
    parallel: dict[str, Any] = field(default_factory=dict)
    dataset: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    revision: str | None = None
    model_key: str | None = None
    mapped: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def scenario(self, base: Scenario | None = None, overrides: dict[str, Any] | None = None) -> Scenario:
        """``base`` (default: the engine's defaults) with the imported fields, then ``overrides`` (explicit flags).

        Raises:
            ScenarioError: an imported value out of range (e.g. a sequence length of 10M), as Scenario.build.
        """
        start = base.model_dump() if base is not None else {}
        return Scenario.build(**{**start, **self.fields, **(overrides or {})})

    def to_json(self) -> dict[str, Any]:
        """The import as plain JSON values (enums by value)."""
        plain = lambda d: {k: getattr(v, "value", v) for k, v in d.items()}  # noqa: E731
        return {
            "files": self.files, "model": self.model, "revision": self.revision,
            "fields": {k: list(v) if isinstance(v, tuple) else getattr(v, "value", v) for k, v in self.fields.items()},
            "parallel": plain(self.parallel), "dataset": plain(self.dataset),
            "mapped": {k: list(v) if isinstance(v, tuple) else v for k, v in self.mapped.items()},
            "ignored": self.ignored, "unsupported": self.unsupported, "notes": self.notes,
        }


def import_configs(items: Sequence[tuple[str, bytes]]) -> ImportResult:
    """Import config files given as (name, bytes), in order (later files override earlier ones of the same format).

    Raises:
        TrainingConfigError: a file that does not parse or whose format is not recognised, a value of the wrong type.
        ConflictingKeysError: conflicting keys in a file, or files of different formats that disagree.
    """
    if not items:
        raise TrainingConfigError("no config file given")
    readings = []
    for name, data in items:
        fmt, reading = read_one(parse_training_config(data, name), name)
        reading.notes += yaml_1_1_notes(data)  # 010 read as 8, off as false: said, as the tools read them
        readings.append((name, fmt, reading))
    return combine(readings)


def combine(readings: Sequence[tuple[str, str, Reading]]) -> ImportResult:
    """Merge the readings (see the module docstring) and resolve them into Scenario terms."""
    settings: dict[str, Any] = {}
    origin: dict[str, tuple[str, str, str]] = {}  # target -> (file, format key, key)
    defaults: dict[str, Any] = {}
    out = ImportResult()
    prefix = len(readings) > 1
    for name, fmt, r in readings:
        out.files.append({"file": name, "format": r.format, "version": r.version})
        for target, value in r.settings.items():
            key = r.sources.get(target, target)
            if target in settings and settings[target] != value and origin[target][1] != fmt:
                other = origin[target]
                raise ConflictingKeysError(
                    f"{other[0]}: {other[2]} and {name}: {key} disagree ({_show(settings[target])} vs {_show(value)}); "
                    "make the files agree, or drop one")
            settings[target], origin[target] = value, (name, fmt, key)
        defaults.update(r.defaults)
        tag = (lambda k, n=name: f"{n}: {k}") if prefix else (lambda k: k)
        out.mapped.update({tag(k): v for k, v in r.mapped.items()})
        out.ignored += [tag(k) for k in r.ignored]
        out.unsupported.update({tag(k): v for k, v in r.unsupported.items()})
        out.notes += [f"{name}: {n}" if prefix else n for n in r.notes]
    if any(fmt == "deepspeed" for _, fmt, _ in readings):  # a DeepSpeed file named by path was given as well
        for key in [k for k in out.unsupported if k.endswith("deepspeed") or k.endswith("deepspeed_config_file")]:
            del out.unsupported[key]
            out.ignored.append(key)
    where = {t: f"{o[0]}: {o[2]}" if prefix else o[2] for t, o in origin.items()}
    resolve({**defaults, **settings}, where, out)
    return out


def _show(value: Any) -> str:
    return repr(getattr(value, "value", value))


def resolve(s: dict[str, Any], where: dict[str, str], out: ImportResult) -> None:
    """Turn the merged settings into Scenario fields, parallel and dataset settings, and the model reference."""
    _precision(s, where, out)
    _method(s, where, out)
    if s.pop("fsdp_activation_checkpointing", False):
        # FSDP does the checkpointing; transformers wants the Trainer's own flag off then, so it is no conflict.
        s["gradient_checkpointing"] = True
    for name in ("strategy", "offload", "num_gpus", "gpus_per_node"):
        if name in s:
            out.parallel[name] = s.pop(name)
    for name in ("epochs", "packing"):
        if name in s:
            out.dataset[name] = s.pop(name)
    out.model, out.revision = s.pop("model", None), s.pop("revision", None)
    out.model_key = where.get("model")
    hint = s.pop("tt_model_hint", None)
    if out.model is None and hint is not None:
        out.model, how = torchtune.model_from_hint(*hint)
        out.notes.append(f"model {out.model} from the {how}" if out.model else how)
        out.model_key = how.split(" ")[0] if out.model else None
    unknown = [k for k in s if k not in Scenario.model_fields]
    if unknown:  # a table maps to a target nothing resolves: a bug of the table, not of the user's file
        raise TrainingConfigError(f"internal: unresolved import settings {', '.join(unknown)}")
    out.fields.update(s)
    if out.parallel.get("offload") not in (None, Offload.NONE) and out.parallel.get("strategy") in (
            None, Strategy.DDP, Strategy.ZERO1, Strategy.ZERO2, Strategy.FSDP_SHARD_GRAD_OP) and \
            out.parallel.get("offload") is Offload.OPTIMIZER_AND_PARAMS:
        raise ConflictingKeysError("weights offloaded to CPU need ZeRO-3 or FSDP full shard; "
                                   f"the files give {getattr(out.parallel.get('strategy'), 'value', 'no sharding')}")


def _precision(s: dict[str, Any], where: dict[str, str], out: ImportResult) -> None:
    weights, mixed = s.pop("weights_dtype", None), s.pop("mixed", None)
    if weights is None and mixed is None:
        return
    if weights == "auto":
        out.notes.append("dtype auto: the checkpoint's own dtype, bf16 for the models bundled here, assumed")
        weights = "bf16"
    pair = (weights or "fp32", mixed or "no")
    if pair not in _PRECISION:
        raise ConflictingKeysError(f"{where.get('weights_dtype', 'dtype')} ({pair[0]} weights) and "
                                   f"{where.get('mixed', 'mixed precision')} ({pair[1]} autocast) disagree; keep one dtype")
    s["precision"] = _PRECISION[pair]


def _method(s: dict[str, Any], where: dict[str, str], out: ImportResult) -> None:
    adapter, q4, q8 = s.pop("adapter", None), s.pop("load_in_4bit", None), s.pop("load_in_8bit", None)
    dora = s.pop("use_dora", None)
    if q4 and q8:
        raise ConflictingKeysError(f"{where['load_in_4bit']} and {where['load_in_8bit']} are both true; a base is "
                                   "quantized to 4 or to 8 bits (transformers refuses both)")
    quantized = bool(q4 or q8)
    if q8:
        s["quant_type"] = QuantType.INT8
    elif q4 and s.get("quant_type") is QuantType.INT8:
        s["quant_type"] = QuantType.NF4
    if dora and adapter == "lora":
        if quantized:  # QDoRA: the engine's quantized base is QLoRA's only; the base dominates, so QLoRA is closer
            _unsupported(out, where["use_dora"], "DoRA over a quantized base (QDoRA): its magnitude vectors and "
                         "weight-norm work over the dequantized weights are not modelled; estimated as QLoRA")
        else:
            adapter = "dora"
    elif dora:
        out.notes.append(f"{where['use_dora']}: no LoRA adapter is trained, so DoRA has no effect")
    if adapter == "lora":
        s["method"] = Method.QLORA if quantized else Method.LORA
    elif adapter == "none":
        if quantized:
            raise TrainingConfigError(f"{where.get('load_in_4bit') or where.get('load_in_8bit')}: a 4-bit or 8-bit base "
                                      "cannot be fully fine-tuned; train an adapter (LoRA) on it")
        s["method"] = Method.FULL
    elif adapter is not None:  # another PEFT method (engine.scenario.peft)
        s["method"] = Method(adapter)
        if quantized:
            key = where.get("load_in_4bit") or where.get("load_in_8bit")
            _unsupported(out, key, f"a {'4' if q4 else '8'}-bit base under {METHOD_LABELS[s['method']]}: only QLoRA's "
                         "quantized base is modelled; the estimate keeps a 16-bit base")
            for name in ("quant_type", "double_quant", "quant_storage"):
                s.pop(name, None)
    elif quantized:
        s["method"] = Method.QLORA
        out.notes.append("a quantized base with no adapter named: QLoRA assumed (a 4/8-bit base trains only adapters)")


def _unsupported(out: ImportResult, key: str, effect: str) -> None:
    """Move ``key`` from mapped to unsupported (a value this combination of files cannot be modelled with)."""
    out.mapped.pop(key, None)
    out.unsupported[key] = effect
