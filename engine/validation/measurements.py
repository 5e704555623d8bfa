"""The published and traced measurements the estimates are checked against, validated on load.

``data/throughput_measurements.csv``: published measured training tokens/s, one row per (model, method, GPU,
batch) with its source and locator (:func:`load_throughput_measurements`; compared with the time model by
:mod:`engine.validation.throughput`).
``data/measured_memory.csv``: published measured peaks of training memory, carried over from their sources with the
settings that express each run in the engine's terms (:func:`load_measured_memory`; compared with the memory
estimate by :mod:`engine.validation.memory`).
``data/traced_scenarios.csv``: exact fake-tensor traces of training steps (:func:`load_traced_scenarios`).

The files are read by :mod:`engine.files`; this module gives their rows a meaning.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.errors import CatalogError, validated_row
from engine.files import csv_rows, data_file, labelled_csv_rows
from engine.hardware.gpus import find_gpu
from engine.model.catalog import catalog_model
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Scenario
from engine.validation.run_configs import CONFIGS as RUN_CONFIGS


MEASUREMENTS_FILE = "throughput_measurements.csv"


FREEZE_METHOD = re.compile(r"freeze \(last (\d+) layers?(, enable_input_require_grads)?\)$")
"""A row's freeze-tuning method: "freeze (last N layers)", with ", enable_input_require_grads" when the run made the
embeddings' output require grad (backward through the frozen blocks: :mod:`engine.scenario.freeze`)."""


def freeze_setting(method: str) -> tuple[int, bool] | None:
    """(trainable layers, frozen input grads) of a row's freeze-tuning method text, None for any other method."""
    m = FREEZE_METHOD.match(method.strip())
    return (int(m.group(1)), bool(m.group(2))) if m else None


class ThroughputMeasurement(BaseModel):
    """One published training throughput: ``tokens_per_second`` of all ``num_gpus`` GPUs together.

    ``role``: ``fit`` (the rows the time model's fitted constants were checked on), ``holdout`` (rows added
    after, never used to choose a constant) or ``not_expressible`` (``why_not_expressible`` says what the model
    cannot represent; such a row may name a model or GPU outside the catalog and a method outside full/LoRA/QLoRA).
    The setting columns (precision, optimizer, attention, LoRA rank and targets, framework, fused kernels = torch
    .compile/Unsloth/Liger, or ``cuda_graphs``: torch.compile's reduce-overhead mode, fused and replayed as CUDA
    graphs; fused cross-entropy (Liger's), ``loss_implementation`` (the loss code the run ran, read from its config
    at the source's commit; blank: the framework's default, :data:`engine.scenario.training.FRAMEWORKS`), strategy,
    accumulation, activation offloading = the checkpointed blocks' inputs in
    CPU memory) are the row's, or assumptions the notes name (``strategy`` ``device_map``: the model split over the
    GPUs layer by layer, accelerate's naive model parallelism, one GPU busy at a time). A row's model is the bundled
    catalog's or one of :data:`engine.validation.run_configs.CONFIGS` (published architectures outside the catalog).
    ``locator`` says where in ``source`` the number is printed.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    role: Literal["fit", "holdout", "not_expressible"]
    source: str = Field(min_length=1)
    locator: str = Field(min_length=1)
    repo_id: str = Field(min_length=1)
    method: str = Field(min_length=1)
    micro_batch_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    gradient_checkpointing: bool
    gpu: str = Field(min_length=1)
    num_gpus: int = Field(ge=1)
    tokens_per_second: float = Field(gt=0)
    precision: str = "bf16"
    optimizer: str = "adamw_fused"
    attention: str = "sdpa"
    lora_r: int | None = None
    lora_targets: str = ""
    framework: str = "hf"
    fused_kernels: bool = False
    fused_cross_entropy: bool = False
    loss_implementation: LossImplementation | None = None
    strategy: str = "ddp"
    gradient_accumulation_steps: int = Field(1, ge=1)
    activation_offload: bool = False
    why_not_expressible: str = ""
    notes: str = ""

    cuda_graphs: bool = False

    @model_validator(mode="before")
    @classmethod
    def _graphs(cls, data: Any) -> Any:
        # fused_kernels "cuda_graphs": torch.compile(mode="reduce-overhead"), fused kernels replayed as CUDA graphs.
        if isinstance(data, dict) and str(data.get("fused_kernels", "")).strip().lower() == "cuda_graphs":
            return {**data, "fused_kernels": True, "cuda_graphs": True}
        return data

    @field_validator("lora_r", "loss_implementation", mode="before")
    @classmethod
    def _empty_rank(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _role(self) -> "ThroughputMeasurement":
        if self.expressible:
            if self.method not in ("full", "lora", "qlora") and freeze_setting(self.method) is None:
                raise ValueError(f"method {self.method!r} of an expressible row must be full, lora, qlora or "
                                 "'freeze (last N layers[, enable_input_require_grads])'")
            if self.why_not_expressible:
                raise ValueError("an expressible row has no why_not_expressible")
        elif not self.why_not_expressible.strip():
            raise ValueError("a not_expressible row needs why_not_expressible")
        return self

    @property
    def expressible(self) -> bool:
        """Whether the time model can represent the row (role fit or holdout)."""
        return self.role != "not_expressible"


@lru_cache(maxsize=1)
def load_throughput_measurements() -> tuple[ThroughputMeasurement, ...]:
    """Every row of ``data/throughput_measurements.csv``, in file order.

    Raises:
        CatalogError: an unreadable file, a bad row (named by its line, header = 1, and its id), a duplicate
            id, or an expressible row whose model is not bundled or whose GPU the catalog does not know.
    """
    out: list[ThroughputMeasurement] = []
    for label, row in labelled_csv_rows(MEASUREMENTS_FILE):
        m = validated_row(ThroughputMeasurement, row, label)
        if any(o.id == m.id for o in out):
            raise CatalogError(f"{label}: duplicate id")
        if m.expressible:
            try:
                if m.repo_id not in RUN_CONFIGS:
                    catalog_model(m.repo_id)
                find_gpu(m.gpu)
            except CatalogError as exc:
                raise CatalogError(f"{label}: {exc}") from None
        out.append(m)
    return tuple(out)


# --------------------------------------------------------------------------------------------------
# Published measured peaks of training memory (data/measured_memory.csv), for engine.validation.

MEASURED_MEMORY_FILE = "measured_memory.csv"

MemoryKind = Literal["allocated", "reserved", "device_used", "unknown", ""]
"""What a measured figure counts: ``allocated`` = ``torch.cuda.max_memory_allocated()`` (torchtune's "active"
too), ``reserved`` = ``max_memory_reserved()``, ``device_used`` = NVML / nvidia-smi "used" (reserved + CUDA
context), ``unknown`` = the source does not say; empty when the row has no memory figure."""


class MeasuredMemory(BaseModel):
    """One published peak of GPU memory during training, carried over from its source with the settings that
    express it in the engine's terms.

    ``source``, ``source_locator``, ``model_id``, ``measured_value`` (as printed, in ``unit``) and
    ``measured_memory_kind`` (the source's own words) are copied verbatim from the published tables.
    ``catalog_model`` is the bundled config with the same architecture (``catalog_note`` says why when the ids
    differ), ``framework`` one of hf / torchtune / litgpt / megatron / torchtitan / other. Scenario fields use the
    names of :class:`engine.scenario.training.Scenario`; ``strategy`` is ``none`` on one GPU, else an
    :class:`engine.memory.parallel.Strategy` value (or a parallelism the engine does not model). ``unmodelled`` lists,
    separated by ``"; "``, the memory-relevant techniques of the run the engine has no switch for (torch.compile,
    optimizer step in backward, activation offloading, losses without a loss implementation record, Unsloth, Float8,
    unknown padded lengths); ``loss_implementation`` the loss code the run ran (a
    :class:`~engine.scenario.loss.LossImplementation` value read from the run's config at the source's commit; blank:
    the framework's default); ``deviations`` the ways a framework implements a technique the engine has differently from
    the Hugging Face stack (adapter dtype, a classification loss instead of the vocabulary loss), which stay in the
    comparison and show in its error; ``assumptions`` the settings not stated by the source. ``expressible`` is False when no scenario can
    describe the row, and ``reason`` says why.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(pattern=r"^m\d{3}$")
    source: str = Field(min_length=1)
    source_locator: str = Field(min_length=1)
    model_id: str = Field(min_length=1)
    measured_value: float | None = None
    measured_memory_kind: str = ""
    catalog_model: str = ""
    catalog_note: str = ""
    framework: Literal["hf", "torchtune", "litgpt", "megatron", "torchtitan", "other"]
    method: str = ""
    precision: str = ""
    optimizer: str = ""
    micro_batch_size: int | None = Field(None, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    seq_len: int | None = Field(None, ge=1)
    seq_len_kind: Literal["packed", "fixed", "dynamic", ""] = ""
    gradient_checkpointing: bool | None = None
    attention: str = ""
    lora_r: int | None = Field(None, ge=1)
    lora_alpha: float | None = Field(None, gt=0)
    lora_targets: str = ""
    double_quant: bool | None = None
    prepare_kbit_training: bool | None = None
    fused_cross_entropy: bool = False
    loss_implementation: LossImplementation | None = None
    n_gpus: int = Field(1, ge=1)
    strategy: str = "none"
    offload: str = "none"
    memory_kind: MemoryKind = ""
    unit: Literal["GiB", "GB", ""] = ""
    confidence: Literal["high", "med", "low"]
    unmodelled: str = ""
    deviations: str = ""
    expressible: bool
    reason: str = ""
    assumptions: str = ""
    num_virtual_tokens: int | None = Field(None, ge=1)
    use_rslora: bool | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_none(cls, value: Any, info: Any) -> Any:
        # Empty CSV cells mean "not stated" for the optional numbers and switches.
        if value == "" and info.field_name in _OPTIONAL_NUMBERS:
            return None
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "MeasuredMemory":
        if self.expressible and (self.measured_value is None or not self.catalog_model or not self.unit):
            raise ValueError("an expressible row needs measured_value, unit and catalog_model")
        if not self.expressible and not self.reason:
            raise ValueError("a row that is not expressible needs a reason")
        return self

    @property
    def measured_bytes(self) -> float | None:
        """The measured figure in bytes (GiB = 2**30, GB = 1e9), or None when the row has none."""
        if self.measured_value is None:
            return None
        return self.measured_value * (2**30 if self.unit == "GiB" else 1e9)

    @property
    def unmodelled_features(self) -> tuple[str, ...]:
        """:attr:`unmodelled` split into its items."""
        return tuple(x.strip() for x in self.unmodelled.split(";") if x.strip())


_OPTIONAL_NUMBERS = {"measured_value", "micro_batch_size", "seq_len", "gradient_checkpointing", "lora_r", "lora_alpha",
                     "double_quant", "prepare_kbit_training", "num_virtual_tokens", "use_rslora",
                     "loss_implementation"}


PEFT_MEASURED_MEMORY_FILE = "peft_measured_memory.csv"
"""Published peaks of the PEFT methods (issue 18), in the schema of ``measured_memory.csv`` plus
``num_virtual_tokens`` and ``use_rslora``: PEFT's own method comparison (MetaMathQA, Llama-3.2-3B on one L40S)."""


@lru_cache(maxsize=1)
def load_measured_memory(filename: str = MEASURED_MEMORY_FILE) -> tuple[MeasuredMemory, ...]:
    """Every row of ``data/measured_memory.csv``, in file order (the order of the published reference table).

    Raises:
        CatalogError: an unreadable file, a bad row (named by its line, header = 1, and its id), a duplicate id,
            or an expressible row whose ``catalog_model`` is not bundled.
    """
    out: list[MeasuredMemory] = []
    for label, row in labelled_csv_rows(filename):
        m = validated_row(MeasuredMemory, row, label)
        if any(o.id == m.id for o in out):
            raise CatalogError(f"{label}: duplicate id")
        if m.expressible:
            try:
                catalog_model(m.catalog_model)
            except CatalogError as exc:
                raise CatalogError(f"{label}: {exc}") from None
        out.append(m)
    return tuple(out)




# --------------------------------------------------------------------------------------------------
# Traced scenarios (fake-tensor traces of training steps: the analytical engine's tensor-level check)

TRACED_SCENARIOS_FILE = "traced_scenarios.csv"
"""Written by ``scripts/trace_table.py`` with the optional ``[trace]`` extra (engine.trace)."""


class TracedScenario(BaseModel):
    """One traced training step: the model's config source, the scenario's fields (as text, parsed by
    :class:`~engine.scenario.training.Scenario`) and the traced steady-state peak of allocated bytes and its phase."""

    model_config = ConfigDict(frozen=True)

    model: str
    config_source: str
    scenario: dict[str, str]
    peak_allocated_bytes: int
    peak_phase: str
    attention_kernel: str
    versions: str


@lru_cache(maxsize=1)
def load_traced_scenarios() -> tuple[TracedScenario, ...]:
    """Every row of ``data/traced_scenarios.csv``.

    Raises:
        CatalogError: an unreadable file or a row without its peak.
    """
    out = []
    for i, row in csv_rows(data_file(TRACED_SCENARIOS_FILE)):
        try:
            out.append(TracedScenario(
                model=row["model"], config_source=row["config_source"],
                scenario={k: row[k] for k in Scenario.model_fields if row.get(k) not in (None, "")},
                peak_allocated_bytes=int(row["peak_allocated_bytes"]), peak_phase=row["peak_phase"],
                attention_kernel=row["attention_kernel"],
                versions=f"torch {row['torch_version']}, transformers {row['transformers_version']}, peft {row['peft_version']}",
            ))
        except (KeyError, ValueError, ValidationError) as exc:
            raise CatalogError(f"{TRACED_SCENARIOS_FILE} row {i}: {exc}") from None
    return tuple(out)
