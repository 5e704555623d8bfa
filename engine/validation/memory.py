"""Our memory estimate beside published measured peaks (``data/measured_memory.csv``).

For every row of the file that a scenario can express: the scenario it describes (model from the bundled
catalog, technique, precision, optimizer, micro batch, sequence length, checkpointing, attention, LoRA settings,
GPUs and strategy), our estimate of the **same kind of memory** the source measured, the error against the
measurement, and the seed chapter's quick rule on the same row for comparison.

Kinds of memory (``../shared/reference/README.md``; :class:`engine.memory.result.MemoryEstimate`):

- ``allocated`` (``torch.cuda.max_memory_allocated()``, torchtune's "active") -> ``peak_allocated_bytes``;
- ``reserved`` (``max_memory_reserved()``) -> ``peak_reserved_bytes`` (allocated + the allocator's reserve);
- ``device_used`` (NVML / nvidia-smi "used") -> ``device_used_bytes`` (reserved + CUDA context);
- ``unknown`` (the source does not say) -> ``peak_allocated_bytes``, and the row is flagged.

On N GPUs the per-GPU allocated peak comes from :func:`engine.memory.parallel.plan_parallel` and the reserve and CUDA
context are added to it by :func:`engine.memory.device.device_memory`. Units: GiB = 2**30 bytes, GB = 1e9 bytes, as each
row states. A padded (``dynamic``) batch is estimated at the length the row states (the longest sample or the
truncation length), and flagged.

**Target rows** (:func:`is_target_row`, the rows the issue's target applies to: median absolute error <= 10%, none
beyond 25%) are chosen by rule, before looking at errors:

1. one GPU (the single-GPU estimate is what is validated; multi-GPU rows add engine.memory.parallel's modelling);
2. the source's confidence tag is ``high`` (LlamaFactory's "high for numbers; med for workload shape" counts as
   medium: the batch shape our estimate needs is the uncertain part);
3. the memory kind is stated (allocated, reserved or nvidia-smi used), so like is compared with like;
4. the framework is one whose memory behaviour the engine models (:data:`MODELLED_FRAMEWORKS`): the Hugging Face
   stack (transformers, PEFT, bitsandbytes, Trainer; also LlamaFactory and ms-swift, built on it), torchtune
   and LitGPT. The engine counts the tensors that the PyTorch ops of a block save (RMSNorm's fp32 upcast, SDPA,
   the gated MLP's products) in the dtype each is stored in; torchtune's and LitGPT's single-device recipes build
   their blocks from the same ops and keep weights, gradients and torch AdamW states in bf16, which is the engine's
   pure-bf16 mode. torchtitan (FSDP2 with fp32 sharded weights, selective checkpointing, Float8) and Megatron
   (tensor/pipeline parallelism, fused kernels) runs are checked by engine.validation.scaleout against
   data/large_runs.csv with the per-rank model, not here;
5. the run used no technique the engine has no switch for (the row's ``unmodelled`` column: torch.compile, the
   optimizer step fused into backward, activation offloading, torchtune's chunked loss, Unsloth, Float8, padded
   batches of unknown length). A framework implementing a modelled technique differently (LoRA adapters kept in
   bf16, a classification loss instead of the vocabulary loss: the ``deviations`` column) stays in: the error shows
   what the difference costs.

All other expressible rows are validated and summarised too (:attr:`ValidationReport.all_rows`); rows that cannot
be expressed are listed with the reason (:attr:`ValidationReport.not_expressible`).
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from engine.model.build import architecture_from_config
from engine.validation.measurements import MeasuredMemory, load_measured_memory
from engine.model.catalog import catalog_model
from engine.errors import ScenarioError
from engine.memory.device import device_memory
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Offload, Strategy, plan_parallel
from engine.scenario.training import Scenario
from engine.memory.seed_rules import GIB, seed_estimate_memory

MODELLED_FRAMEWORKS = ("hf", "torchtune", "litgpt")
"""Frameworks whose memory behaviour the engine models (see the module docstring, rule 4)."""

TARGET_MEDIAN_ERROR_PCT = 10.0
"""Issue #5's target: median absolute error over the target rows, in percent."""
TARGET_MAX_ERROR_PCT = 25.0
"""Issue #5's target: no target row off by more than this, in percent."""

UNIT_BYTES = {"GiB": 2**30, "GB": 1e9}


def is_target_row(m: MeasuredMemory) -> bool:
    """Whether ``m`` is one of the rows the issue's target applies to (module docstring, rules 1-5)."""
    return (m.expressible and m.n_gpus == 1 and m.confidence == "high" and m.memory_kind in ("allocated", "reserved", "device_used")
            and m.framework in MODELLED_FRAMEWORKS and not m.unmodelled_features)


def row_scenario(m: MeasuredMemory) -> Scenario:
    """The :class:`~engine.scenario.training.Scenario` of one expressible row (fields the row leaves blank keep the
    scenario's defaults).

    Raises:
        ScenarioError: the row's settings do not validate.
    """
    fields: dict[str, object] = {
        "method": m.method, "precision": m.precision, "optimizer": m.optimizer,
        "gradient_accumulation_steps": m.gradient_accumulation_steps, "fused_cross_entropy": m.fused_cross_entropy,
        # The framework switch: LitGPT and torchtune keep adapters in the weight dtype, LitGPT's loss is chunked.
        "framework": m.framework if m.framework in ("litgpt", "torchtune") else "hf",
    }
    optional = {
        "micro_batch_size": m.micro_batch_size, "seq_len": m.seq_len, "gradient_checkpointing": m.gradient_checkpointing,
        "attention": m.attention or None, "lora_r": m.lora_r, "lora_alpha": m.lora_alpha,
        "lora_targets": m.lora_targets or None, "double_quant": m.double_quant,
        "prepare_kbit_training": m.prepare_kbit_training, "num_virtual_tokens": m.num_virtual_tokens,
        "use_rslora": m.use_rslora or None, "loss_implementation": m.loss_implementation,
    }
    fields.update({k: v for k, v in optional.items() if v is not None})
    return Scenario.build(**fields)


class RowValidation(BaseModel):
    """One measured row beside our estimate of the same memory kind. Sizes in bytes; ``*_value`` in the row's unit."""

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    source_locator: str
    model_id: str
    catalog_model: str
    framework: str
    method: str
    setting: str
    n_gpus: int
    memory_kind: str
    estimate_kind: str
    unit: str
    confidence: str
    target: bool
    flags: tuple[str, ...]
    measured_bytes: float
    estimate_bytes: float
    seed_bytes: float
    unmodelled: tuple[str, ...]
    deviations: str

    @property
    def measured_value(self) -> float:
        """The measurement in the row's unit."""
        return self.measured_bytes / UNIT_BYTES[self.unit]

    @property
    def estimate_value(self) -> float:
        """Our estimate in the row's unit."""
        return self.estimate_bytes / UNIT_BYTES[self.unit]

    @property
    def seed_value(self) -> float:
        """The seed's rule in the row's unit."""
        return self.seed_bytes / UNIT_BYTES[self.unit]

    @property
    def error_pct(self) -> float:
        """(estimate - measured) / measured, in percent: positive when we overestimate."""
        return 100.0 * (self.estimate_bytes - self.measured_bytes) / self.measured_bytes

    @property
    def seed_error_pct(self) -> float:
        """The seed rule's error on the same row, in percent."""
        return 100.0 * (self.seed_bytes - self.measured_bytes) / self.measured_bytes

    def record(self) -> dict[str, object]:
        """A flat row for a table or CSV (values in the row's unit)."""
        return {
            "id": self.id, "source": self.source, "model": self.model_id, "framework": self.framework,
            "setting": self.setting, "memory kind": self.memory_kind + (" (as allocated)" if self.memory_kind == "unknown" else ""),
            "unit": self.unit, "measured": round(self.measured_value, 2), "ours": round(self.estimate_value, 2),
            "error %": round(self.error_pct, 1), "seed rule": round(self.seed_value, 2),
            "seed error %": round(self.seed_error_pct, 1), "target row": self.target, "flags": ", ".join(self.flags),
            "not modelled": "; ".join(self.unmodelled), "deviations": self.deviations, "locator": self.source_locator,
        }


class NotExpressible(BaseModel):
    """A row no scenario can describe, and why."""

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    model_id: str
    reason: str


class ErrorSummary(BaseModel):
    """Absolute errors (percent) over a set of rows: median, largest and the row holding it; the seed's median."""

    model_config = ConfigDict(frozen=True)

    name: str
    rows: int
    median_abs_error_pct: float
    max_abs_error_pct: float
    worst_id: str
    seed_median_abs_error_pct: float

    @property
    def meets_target(self) -> bool:
        """Whether the issue's target (median <= 10%, every row within 25%) holds over these rows."""
        return self.median_abs_error_pct <= TARGET_MEDIAN_ERROR_PCT and self.max_abs_error_pct <= TARGET_MAX_ERROR_PCT


def summarize(name: str, rows: list[RowValidation] | tuple[RowValidation, ...]) -> ErrorSummary:
    """:class:`ErrorSummary` of ``rows``. Raises ``ValueError`` when ``rows`` is empty."""
    if not rows:
        raise ValueError(f"no rows to summarise for {name!r}")
    worst = max(rows, key=lambda r: abs(r.error_pct))
    return ErrorSummary(
        name=name, rows=len(rows), median_abs_error_pct=statistics.median(abs(r.error_pct) for r in rows),
        max_abs_error_pct=abs(worst.error_pct), worst_id=worst.id,
        seed_median_abs_error_pct=statistics.median(abs(r.seed_error_pct) for r in rows),
    )


class ValidationReport(BaseModel):
    """Every expressible row validated, the two summaries and the rows that cannot be expressed."""

    model_config = ConfigDict(frozen=True)

    rows: tuple[RowValidation, ...]
    not_expressible: tuple[NotExpressible, ...]

    @property
    def target_rows(self) -> tuple[RowValidation, ...]:
        """The rows of :func:`is_target_row`."""
        return tuple(r for r in self.rows if r.target)

    @property
    def target(self) -> ErrorSummary:
        """Summary over the target rows (high confidence, one GPU, modelled framework and techniques)."""
        return summarize("high-confidence, one GPU, modelled framework and techniques", self.target_rows)

    @property
    def all_rows(self) -> ErrorSummary:
        """Summary over every expressible row."""
        return summarize("all expressible rows", self.rows)

    def off_by_more_than(self, pct: float, target_only: bool = True) -> tuple[RowValidation, ...]:
        """Rows whose absolute error exceeds ``pct`` percent (target rows only unless ``target_only`` is False)."""
        pool = self.target_rows if target_only else self.rows
        return tuple(r for r in pool if abs(r.error_pct) > pct)


def _setting(m: MeasuredMemory, sc: Scenario) -> str:
    """A short description of the row's scenario: technique, precision, optimizer, batch x sequence, switches."""
    parts = [sc.method.value, sc.precision.value, sc.optimizer.value, f"{sc.micro_batch_size}x{sc.seq_len}"]
    if sc.gradient_accumulation_steps > 1:
        parts.append(f"GA {sc.gradient_accumulation_steps}")
    if sc.gradient_checkpointing:
        parts.append("checkpointing")
    parts.append(sc.attention.value)
    if sc.method.value != "full":
        parts.append(f"r{sc.lora_r} {m.lora_targets or 'attention'}")
    if sc.fused_cross_entropy:
        parts.append("fused CE")
    elif sc.loss_implementation is not None:
        parts.append(f"loss {sc.loss_implementation.value}")
    if m.n_gpus > 1:
        parts.append(f"{m.n_gpus} GPUs {m.strategy}" + (f" offload {m.offload}" if m.offload != "none" else ""))
    return ", ".join(parts)


def validate_row(m: MeasuredMemory) -> RowValidation:
    """Our estimate of the row's memory kind, in bytes, beside its measurement.

    Raises:
        ScenarioError: the row is not expressible (its ``reason`` in the message), or its scenario does not validate.
        CatalogError: its catalog model is not bundled.
    """
    if not m.expressible or m.measured_bytes is None:
        raise ScenarioError(f"{m.id} is not expressible: {m.reason}")
    arch = architecture_from_config(catalog_model(m.catalog_model).config)
    sc = row_scenario(m)
    est = estimate_memory(arch, sc)
    if m.n_gpus == 1:
        allocated, reserved, used = est.peak_allocated_bytes, est.peak_reserved_bytes, est.device_used_bytes
    else:
        plan = plan_parallel(est, arch, sc, Strategy(m.strategy), Offload(m.offload))
        dev = device_memory(plan.per_gpu_bytes(m.n_gpus))
        allocated, reserved, used = dev.allocated, dev.reserved, dev.device_used
    kind = m.memory_kind if m.memory_kind in ("reserved", "device_used") else "allocated"
    estimate = {"allocated": allocated, "reserved": reserved, "device_used": used}[kind]
    seed = seed_estimate_memory(est.total_parameters, sc.micro_batch_size, sc.seq_len,
                                "fp32" if sc.precision.value == "fp32" else "bf16").total_gib * GIB
    flags = []
    if m.memory_kind == "unknown":
        flags.append("memory kind not stated: compared as allocated")
    if m.seq_len_kind == "dynamic":
        flags.append("padded batches: estimated at the stated length")
    if m.assumptions:
        flags.append("settings assumed")
    return RowValidation(
        id=m.id, source=m.source, source_locator=m.source_locator, model_id=m.model_id, catalog_model=m.catalog_model,
        framework=m.framework, method=m.method, setting=_setting(m, sc), n_gpus=m.n_gpus, memory_kind=m.memory_kind,
        estimate_kind=kind, unit=m.unit, confidence=m.confidence, target=is_target_row(m), flags=tuple(flags),
        measured_bytes=m.measured_bytes, estimate_bytes=estimate, seed_bytes=seed, unmodelled=m.unmodelled_features,
        deviations=m.deviations,
    )


@lru_cache(maxsize=1)
def validate_all() -> ValidationReport:
    """:func:`validate_row` for every expressible row of ``data/measured_memory.csv`` (file order), and the rest
    listed with their reason.

    Raises:
        ScenarioError, CatalogError: an expressible row that the engine cannot estimate (a data error: fix the row).
    """
    rows, skipped = [], []
    for m in load_measured_memory():
        if m.expressible:
            rows.append(validate_row(m))
        else:
            skipped.append(NotExpressible(id=m.id, source=m.source, model_id=m.model_id, reason=m.reason))
    return ValidationReport(rows=tuple(rows), not_expressible=tuple(skipped))


__all__ = [
    "ErrorSummary", "MODELLED_FRAMEWORKS", "NotExpressible", "RowValidation", "TARGET_MAX_ERROR_PCT",
    "TARGET_MEDIAN_ERROR_PCT", "ValidationReport", "is_target_row", "row_scenario", "summarize", "validate_all",
    "validate_row",
]


# --------------------------------------------------------------------------------------------------
# Against fake-tensor traces (tensor level)

TRACE_TARGET_MAX_ERROR_PCT = 5.0
"""Issue #5's target against the traced scenarios: every scenario within 5% of the traced peak."""
TRACE_TARGET_MEDIAN_ERROR_PCT = 2.0
"""... and the median within 2%."""


class TracedValidation(BaseModel):
    """Our peak allocated bytes beside a traced one (engine.trace, data/traced_scenarios.csv)."""

    model_config = ConfigDict(frozen=True)

    model: str
    setting: str
    traced_bytes: float
    estimate_bytes: float
    traced_phase: str
    estimate_phase: str
    attention_kernel: str

    @property
    def error_pct(self) -> float:
        """(estimate - traced) / traced, in percent."""
        return 100.0 * (self.estimate_bytes / self.traced_bytes - 1.0)


class TracedSummary(BaseModel):
    """Absolute errors (percent) against the traces: count, median, largest and its row."""

    model_config = ConfigDict(frozen=True)

    rows: int
    median_abs_error_pct: float
    max_abs_error_pct: float
    worst: str

    @property
    def meets_target(self) -> bool:
        """Every row within :data:`TRACE_TARGET_MAX_ERROR_PCT`, median within :data:`TRACE_TARGET_MEDIAN_ERROR_PCT`."""
        return (self.max_abs_error_pct <= TRACE_TARGET_MAX_ERROR_PCT
                and self.median_abs_error_pct <= TRACE_TARGET_MEDIAN_ERROR_PCT)


@lru_cache(maxsize=1)
def validate_traced() -> tuple[tuple[TracedValidation, ...], TracedSummary]:
    """Every traced scenario of ``data/traced_scenarios.csv`` estimated with :func:`estimate_memory`.

    The trace counts every CUDA-caching-allocator block (512-byte rounding) of the second training step of the
    real transformers/PEFT modules on fake tensors; the estimate is compared as ``peak_allocated_bytes``.

    Raises:
        CatalogError: the table or a bundled config is missing.
    """
    from engine.validation.measurements import load_traced_scenarios

    out = []
    for t in load_traced_scenarios():
        sc = Scenario.build(**t.scenario)
        repo = t.config_source.removeprefix("catalog:")
        arch = architecture_from_config(catalog_model(repo).config)
        est = estimate_memory(arch, sc)
        out.append(TracedValidation(
            model=t.model, setting=_traced_setting(sc), traced_bytes=t.peak_allocated_bytes,
            estimate_bytes=est.peak_allocated_bytes, traced_phase=t.peak_phase, estimate_phase=est.peak_phase,
            attention_kernel=t.attention_kernel,
        ))
    worst = max(out, key=lambda r: abs(r.error_pct))
    summary = TracedSummary(rows=len(out), median_abs_error_pct=statistics.median(abs(r.error_pct) for r in out),
                            max_abs_error_pct=abs(worst.error_pct), worst=f"{worst.model}: {worst.setting}")
    return tuple(out), summary


def _traced_setting(sc: Scenario) -> str:
    parts = [sc.method.value, sc.precision.value, sc.optimizer.value, f"{sc.micro_batch_size}x{sc.seq_len}",
             sc.attention.value]
    if sc.gradient_checkpointing:
        parts.append("checkpointing")
    if sc.gradient_accumulation_steps > 1:
        parts.append(f"GA {sc.gradient_accumulation_steps}")
    return ", ".join(parts)
