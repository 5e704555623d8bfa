"""The key tables: how each key of a format is handled, and the walk that applies a table to a parsed file.

Every format module has ONE table, ``KEYS: dict[str, Handling]``, from a key (nested keys joined with dots:
``zero_optimization.stage``; ``prefix.*`` covers a whole subtree) to its handling:

- :class:`Map` ``(target, convert)``: the key sets a setting. ``target`` is a field of
  :class:`~engine.scenario.training.Scenario` or one of the import's own settings (:data:`SETTINGS`); ``convert``
  checks the value's type and turns it into the setting's value (or returns :class:`Unmodelled` when this *value*
  cannot be modelled, e.g. ``optim: galore_adamw``).
- :data:`IGNORE`: the key does not change memory or time (logging, saving, learning rate, ...).
- :class:`Unsupported` ``(effect)``: the key changes memory or time in a way the estimate cannot model yet; the
  effect is said in words. It counts only when the key is switched on (``false``, ``0``, ``null``, ``none`` and empty
  values are ignored).
- :class:`Sub` ``(reader)``: the value is a config of another format (DeepSpeed inline in TrainingArguments,
  ``bnb_config_kwargs`` in axolotl), read by that format's table.
- a tuple of handlings: all of them (LLaMA-Factory's ``enable_liger_kernel`` maps the fused loss and Liger's other
  kernels).

A key the table does not know is reported in ``unsupported`` (its effect is unchecked), never silently dropped. Mapping
a key later (a new Scenario field) is a change of its table entry from ``Unsupported`` to ``Map``, as DoRA's
``use_dora`` became ``Map("use_dora", boolean)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Union

from engine.errors import ConflictingKeysError, TrainingConfigError

SETTINGS = {
    "mixed": "torch.autocast / DeepSpeed 16-bit compute: 'bf16', 'fp16' or 'no'",
    "weights_dtype": "dtype the model is loaded in (from_pretrained dtype): 'bf16', 'fp16', 'fp32' or 'auto'",
    "adapter": "'lora', 'none' (full fine-tuning) or another PEFT method's name ('ia3', 'prefix_tuning', ...)",
    "use_dora": "LoRA's use_dora: the LoRA adapter becomes DoRA (QLoRA's quantized base keeps QLoRA, DoRA reported)",
    "load_in_4bit": "bitsandbytes 4-bit base", "load_in_8bit": "bitsandbytes LLM.int8 base",
    "strategy": "multi-GPU strategy (engine.memory.parallel.Strategy)", "offload": "CPU offload (Offload)",
    "fsdp_activation_checkpointing": "FSDP checkpoints each wrapped layer (true only): checkpointing on whatever the Trainer's flag",
    "num_gpus": "data-parallel GPUs", "gpus_per_node": "GPUs per node", "epochs": "passes over the dataset",
    "packing": "examples packed into full sequences", "model": "Hub repo id of the base model", "revision": "its revision",
}
"""Settings an import can carry beside the Scenario's fields (:mod:`engine.importers.resolve` combines them)."""

OFF = (None, False, 0, "", "none", "no", "false", "null")


@dataclass(frozen=True)
class Unmodelled:
    """Returned by a converter: this value of the key cannot be modelled (``effect`` says what it does)."""

    effect: str


SKIP = object()
"""Returned by a converter: this value sets nothing (``fsdp_activation_checkpointing: false`` leaves the Trainer's
``gradient_checkpointing`` as it is); the key is listed as ignored."""


def only_if_true(value: Any, key: str) -> Any:
    """A bool that turns a setting on when true and leaves it alone when false."""
    check(isinstance(value, bool), key, "true or false", value)
    return True if value else SKIP


class Several(dict):
    """Returned by a converter: several targets set by one key (``fsdp: "full_shard offload"``)."""


@dataclass(frozen=True)
class Map:
    target: str
    convert: Callable[[Any, str], Any] = lambda value, key: value


@dataclass(frozen=True)
class Ignore:
    pass


IGNORE = Ignore()


@dataclass(frozen=True)
class Unsupported:
    effect: str


@dataclass(frozen=True)
class Sub:
    """Read the value (a mapping) with another format's ``read``; a string value (a file path) is ``on_text``."""

    read: Callable[[dict[str, Any]], "Reading"]
    on_text: str


Handling = Union[Map, Ignore, Unsupported, Sub, tuple]


@dataclass
class Reading:
    """What one file (or an inline part of one) says.

    ``settings``: target -> value, stated by the file; ``defaults``: target -> value the tool assumes when the file
    is silent (weaker than any file's stated value); ``sources``: target -> the key that set it. ``mapped``: key ->
    value used; ``ignored``: keys with no effect on memory or time; ``unsupported``: key -> effect in words.
    """

    format: str = ""
    version: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    mapped: dict[str, Any] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    unsupported: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def set(self, target: str, value: Any, key: str) -> None:
        """Set ``target`` from ``key``; two keys of this file giving it different values are a conflict."""
        if target in self.settings and self.settings[target] != value:
            raise ConflictingKeysError(
                f"{self.sources[target]} and {key} disagree ({_show(self.settings[target])} vs {_show(value)}); keep one")
        self.settings[target] = value
        self.sources.setdefault(target, key)

    def merge(self, other: "Reading", prefix: str) -> None:
        """Fold an inline reading (keys under ``prefix``) into this one."""
        for target, value in other.settings.items():
            self.set(target, value, f"{prefix}.{other.sources.get(target, target)}")
        for target, value in other.defaults.items():
            self.defaults.setdefault(target, value)
        self.mapped.update({f"{prefix}.{k}": v for k, v in other.mapped.items()})
        self.ignored += [f"{prefix}.{k}" for k in other.ignored]
        self.unsupported.update({f"{prefix}.{k}": v for k, v in other.unsupported.items()})
        self.notes += other.notes


def _show(value: Any) -> str:
    return repr(getattr(value, "value", value))


def is_off(value: Any) -> bool:
    """Whether a value switches its key off (no effect): false, 0, null, 'none', 'no', empty."""
    if isinstance(value, (list, dict, tuple)):
        return not value
    if isinstance(value, str):
        return value.strip().lower() in OFF
    return value in OFF


def flatten(doc: dict[str, Any], table: dict[str, Handling], prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, value) pairs; a mapping is walked into unless the table maps, ignores or sub-reads its key as a
    whole (an ``Unsupported`` entry of the key covers its scalar form, e.g. a file path)."""
    out: list[tuple[str, Any]] = []
    for key, value in doc.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and not isinstance(table.get(path), (Map, Ignore, Sub)):
            out += flatten(value, table, path + ".")
        else:
            out.append((path, value))
    return out


def lookup(table: dict[str, Handling], key: str) -> Handling | None:
    """The handling of ``key``: its own entry, else the nearest ``prefix.*`` entry above it."""
    if key in table:
        return table[key]
    parts = key.split(".")
    for n in range(len(parts) - 1, 0, -1):
        wildcard = ".".join(parts[:n]) + ".*"
        if wildcard in table:
            return table[wildcard]
    return None


def apply(reading: Reading, key: str, value: Any, handling: Handling) -> None:
    """Apply one handling of ``key`` = ``value`` to ``reading``."""
    if isinstance(handling, tuple):
        for h in handling:
            apply(reading, key, value, h)
    elif isinstance(handling, Ignore):
        reading.ignored.append(key)
    elif isinstance(handling, Unsupported):
        if is_off(value):
            reading.ignored.append(key)
        else:
            reading.unsupported[key] = handling.effect
    elif isinstance(handling, Sub):
        if isinstance(value, dict):
            reading.merge(handling.read(value), key)
        elif value is None:
            reading.ignored.append(key)
        else:
            reading.unsupported[key] = handling.on_text
    elif value is None:
        reading.ignored.append(key)  # null: the tool's default
    else:
        converted = handling.convert(value, key)
        if converted is SKIP:
            reading.ignored.append(key)
        elif isinstance(converted, Unmodelled):
            reading.unsupported[key] = converted.effect
        elif isinstance(converted, Several):
            for target, one in converted.items():
                reading.set(target, one, key)
            reading.mapped[key] = {t: getattr(v, "value", v) for t, v in converted.items()}
        else:
            reading.set(handling.target, converted, key)
            reading.mapped[key] = getattr(converted, "value", converted)


def collect(doc: dict[str, Any], table: dict[str, Handling], fmt: str, version: str) -> Reading:
    """Walk ``doc`` with ``table``: each key mapped, ignored or reported unsupported (unknown keys too).

    Raises:
        TrainingConfigError: a value of the wrong type (the converter's message).
        ConflictingKeysError: two keys setting one target to different values.
    """
    reading = Reading(format=fmt, version=version)
    for key, value in flatten(doc, table):
        handling = lookup(table, key)
        if handling is None and value in (None, {}) and any(k.startswith(key + ".") for k in table):
            reading.ignored.append(key)  # "fsdp_config:" with nothing under it: a section left empty
            continue
        if handling is None:
            reading.unsupported[key] = f"not a key this importer knows for {fmt} {version}: its effect is not checked"
            continue
        apply(reading, key, value, handling)
    reading.ignored = [k for k in reading.ignored if k not in reading.mapped]  # a Map + Unsupported pair, switched off
    return reading


def check(condition: bool, key: str, what: str, value: Any) -> None:
    """Raise the one-line type error of a key: ``key: must be WHAT (got VALUE)``."""
    if not condition:  # the value cut to a line: a 100,000-character string is not quoted whole
        text = repr(value)
        shown = text if len(text) <= 60 else f"{text[:60]}... ({len(text):,} characters)"
        raise TrainingConfigError(f"{key}: must be {what} (got {shown})")
