"""Does a fine-tuning scenario fit on a GPU, how many GPUs does it need, and what is the most that fits.

A scenario fits when what ``nvidia-smi`` would show at its peak fits the GPU's usable memory,
:attr:`engine.hardware.gpus.Gpu.usable_memory_bytes` (the device total nvidia-smi / rocm-smi report): the tensor peak
of :func:`engine.memory.estimate.estimate_memory` (the steady-state ``torch.cuda.max_memory_allocated()``, split per
GPU by :mod:`engine.memory.parallel`) plus the caching allocator's reserve and the CUDA context
(:class:`engine.memory.device.DeviceMemory`). Equivalently, the tensor peak must stay within
:func:`engine.memory.device.tensor_budget` of the device, which is what the searches compare against. Paged
optimizer states count as resident (a fit that relies on eviction to CPU RAM is not reported as a fit).

- :func:`check_fit`: verdict (fits / tight / does_not_fit, :mod:`engine.plan.verdict`), headroom (usable minus peak; negative = shortfall) and the fewest GPUs with
  a strategy.
- :func:`fit_matrix` and its two uses, :func:`model_matrix` (models x GPUs) and :func:`technique_matrix`
  (techniques x GPUs): each row is estimated once and compared with every GPU, since the memory of a
  single-GPU run does not depend on which GPU it runs on.
- :func:`what_fits`: the largest micro batch and the longest sequence that fit, by a monotone search
  (peak memory never decreases when the batch or the sequence grows).
- :func:`largest_fitting_model`: the seed chapter's "largest model per GPU" recomputed over a model list.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field

from engine.model.architecture import Architecture
from engine.errors import ScenarioError
from engine.hardware.gpus import Gpu
from engine.scenario.lora import resolve_targets
from engine.memory.result import MemoryEstimate
from engine.memory.components import Phase
from engine.memory.device import device_memory, tensor_budget
from engine.memory.estimate import estimate_memory
from engine.scenario.optimizer import Optimizer
from engine.memory.inference import InferenceScenario, estimate_inference
from engine.search import largest_true
from engine.plan.verdict import Verdict, fit_verdict
from engine.memory.parallel import MAX_GPUS, Offload, ParallelPlan, Strategy, plan_parallel
from engine.plan.fewest import FewestGpus, per_gpu_from_sums, phase_sums
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import MAX_MICRO_BATCH, MAX_SEQ_LEN, Method, Scenario

BF16_MODES = (PrecisionMode.BF16, PrecisionMode.AMP_BF16)
_BF16 = Scenario(precision=PrecisionMode.BF16)  # stands for every bf16 scenario in precision_advice


def precision_advice(gpu: Gpu, scenario: Scenario | InferenceScenario) -> tuple[str, ...]:
    """Plain-words warnings when the scenario's number format does not run on ``gpu``.

    bf16 needs Ampere or newer (NVIDIA) / CDNA2 or newer (AMD); T4 (Turing) and V100 (Volta) have none:
    PyTorch then emulates bf16 matmuls slowly or refuses them. Mixed fp16 has the same memory here.
    """
    if isinstance(scenario, InferenceScenario):
        weights = scenario.weight_precision.value if scenario.weight_precision else "bf16"
        if "bf16" in (weights, scenario.kv_cache_dtype.value) and not gpu.bf16:
            return (f"{gpu.name} has no bf16 support; serve in fp16 instead (same memory).",)
        return ()
    if scenario.precision in BF16_MODES and not gpu.bf16:
        fix = "mixed fp16 (precision amp_fp16, Trainer fp16=True)"
        return (f"{gpu.name} has no bf16 support; use {fix} instead: same memory, runs on its tensor cores.",)
    return ()


class FitResult(BaseModel):
    """Verdict for one scenario on ``num_gpus`` GPUs of one kind. Sizes in bytes (per GPU)."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    usable_memory_bytes: int
    strategy: Strategy
    num_gpus: int
    peak_bytes: float
    peak_phase: Phase
    fits: bool
    headroom_bytes: float
    min_gpus: int | None
    verdict: Verdict = Verdict.FITS
    """fits / tight / does_not_fit (:mod:`engine.plan.verdict`); ``fits`` is ``verdict.fits``."""
    warnings: tuple[str, ...] = ()
    offload: Offload = Offload.NONE
    components: dict[str, float] = Field(default_factory=dict)
    cpu_bytes_per_gpu: float = 0.0
    device_used_bytes: float = 0.0


def check_fit(
    arch: Architecture,
    scenario: Scenario | InferenceScenario,
    gpu: Gpu,
    strategy: Strategy = Strategy.DDP,
    num_gpus: int = 1,
    estimate: MemoryEstimate | None = None,
    offload: Offload = Offload.NONE,
) -> FitResult:
    """Fit of ``scenario`` on ``num_gpus`` x ``gpu`` with ``strategy``.

    ``peak_bytes`` is the per-GPU tensor peak (allocated); ``device_used_bytes`` adds the allocator reserve and the
    CUDA context; ``headroom_bytes`` = usable memory - device used (negative: the shortfall); ``min_gpus`` = fewest GPUs
    of this kind that fit with ``strategy`` (None: not even :data:`engine.memory.parallel.MAX_GPUS`; with DDP,
    None whenever one GPU is too small). Pass ``estimate`` to reuse an estimate of the same scenario.
    An :class:`~engine.memory.inference.InferenceScenario` is served as one replica per GPU (its memory does not
    divide over GPUs). ``components`` are the per-GPU bytes at the peak; ``cpu_bytes_per_gpu`` the CPU memory
    of one rank's offloaded states.

    Raises:
        ScenarioError: ``num_gpus`` outside 1..MAX_GPUS, LoRA targets that match nothing in ``arch``, or an
            offload the strategy does not offer.
    """
    if not 1 <= num_gpus <= MAX_GPUS:
        raise ScenarioError(f"num_gpus: must be between 1 and {MAX_GPUS} (got {num_gpus})")
    if isinstance(scenario, InferenceScenario):
        est = estimate if estimate is not None else estimate_inference(arch, scenario)
        plan = plan_parallel(est, arch, scenario, Strategy.DDP)  # type: ignore[arg-type]
        strategy, offload = Strategy.DDP, Offload.NONE
    else:
        est = estimate if estimate is not None else estimate_memory(arch, scenario)
        plan = plan_parallel(est, arch, scenario, strategy, offload)
    peak = plan.per_gpu_bytes(num_gpus)
    usable = gpu.usable_memory_bytes
    used = device_memory(peak).device_used
    return FitResult(
        gpu=gpu.name,
        usable_memory_bytes=usable,
        strategy=strategy,
        num_gpus=num_gpus,
        peak_bytes=peak,
        device_used_bytes=used,
        peak_phase=plan.peak_phase(num_gpus),
        fits=peak <= tensor_budget(usable),
        verdict=fit_verdict(peak, usable),
        headroom_bytes=usable - used,
        min_gpus=plan.min_gpus(tensor_budget(usable)),
        warnings=precision_advice(gpu, scenario),
        offload=offload,
        components=plan.components_per_gpu(num_gpus),
        cpu_bytes_per_gpu=plan.cpu_bytes_per_gpu(num_gpus),
    )


# --------------------------------------------------------------------------------------------------
# Matrices


class FitCell(BaseModel):
    """One row x GPU cell: single-GPU verdict and headroom, and the fewest GPUs with the row's strategy."""

    model_config = ConfigDict(frozen=True)

    fits: bool
    peak_bytes: float
    peak_phase: Phase
    headroom_bytes: float
    min_gpus: int | None
    per_gpu_bytes_at_min: float | None
    warning: str | None = None
    verdict: Verdict = Verdict.FITS


class MatrixRow(BaseModel):
    """One model or technique: its estimate (or why there is none) and one cell per GPU."""

    model_config = ConfigDict(frozen=True)

    label: str
    strategy: Strategy
    scenario: Scenario | None = None
    estimate: MemoryEstimate | None = None
    error: str | None = None
    note: str | None = None
    parameters: int | None = None
    cells: tuple[FitCell, ...] = ()


class FitMatrix(BaseModel):
    """Rows x GPUs. ``gpus`` are catalog names; ``usable_bytes`` their usable memory, in the same order."""

    model_config = ConfigDict(frozen=True)

    gpus: tuple[str, ...]
    usable_bytes: tuple[int, ...]
    rows: tuple[MatrixRow, ...]

    def records(self) -> list[dict[str, Any]]:
        """One flat record per cell (for a table or a CSV download); sizes in bytes."""
        out = []
        for row in self.rows:
            for gpu, usable, cell in zip(self.gpus, self.usable_bytes, row.cells or [None] * len(self.gpus)):
                out.append({
                    "row": row.label,
                    "gpu": gpu,
                    "usable_bytes": usable,
                    "peak_bytes_one_gpu": round(cell.peak_bytes) if cell else None,
                    "fits_one_gpu": cell.fits if cell else None,
                    "verdict_one_gpu": cell.verdict.value if cell else None,
                    "headroom_bytes_one_gpu": round(cell.headroom_bytes) if cell else None,
                    "min_gpus_strategy": row.strategy.value,  # the strategy of min_gpus only (the CLI's name)
                    "min_gpus": cell.min_gpus if cell else None,
                    "per_gpu_bytes_at_min_gpus": round(cell.per_gpu_bytes_at_min) if cell and cell.per_gpu_bytes_at_min else None,
                    "warning": (cell.warning if cell else row.error) or "",
                })
        return out


def _cells(plan: ParallelPlan, scenario: Scenario, gpus: Sequence[tuple[int, float, tuple[str, ...]]]) -> tuple[FitCell, ...]:
    """One cell per GPU, given as (usable bytes, tensor budget, advice for a bf16 scenario). The row's numbers (its
    one-GPU peak and what nvidia-smi would show) are computed once; GPUs with the same usable memory and advice share
    one (immutable) cell. This is the matrix path: thousands of cells per page."""
    sums = phase_sums(plan)
    fewest = FewestGpus(plan, sums)
    one, phase = fewest.one, plan.peak_phase(1)
    used = device_memory(one).device_used
    bf16 = scenario.precision in BF16_MODES  # the only advice precision_advice gives a training scenario
    memo: dict[tuple[int, tuple[str, ...]], FitCell] = {}
    cells = []
    for usable, budget, bf16_advice in gpus:
        advice = bf16_advice if bf16 else ()
        cell = memo.get((usable, advice))
        if cell is None:
            n = fewest.at(budget)
            cell = memo[(usable, advice)] = FitCell(
                fits=one <= budget, verdict=fit_verdict(one, usable, budget), peak_bytes=one, peak_phase=phase, headroom_bytes=usable - used, min_gpus=n,
                per_gpu_bytes_at_min=per_gpu_from_sums(sums, n) if n else None, warning=advice[0] if advice else None,
            )
        cells.append(cell)
    return tuple(cells)


class MatrixInput(BaseModel):
    """One row to evaluate: a label, an architecture, a scenario and a strategy."""

    model_config = ConfigDict(frozen=True)

    label: str
    arch: Architecture
    scenario: Scenario
    strategy: Strategy = Strategy.DDP
    note: str | None = None


def fit_matrix(rows: Sequence[MatrixInput], gpus: Sequence[Gpu]) -> FitMatrix:
    """Estimate each row once, then compare it with every GPU (pure arithmetic per cell).

    A row whose scenario cannot be estimated (e.g. LoRA targets missing from that model) keeps its error
    and no cells.
    """
    # Once per matrix, not per row: each GPU's usable memory, tensor budget and advice to a bf16 scenario.
    budgets = [(g.usable_memory_bytes, tensor_budget(g.usable_memory_bytes), precision_advice(g, _BF16)) for g in gpus]
    totals: dict[int, int] = {}  # total parameters by architecture: several rows share one
    out = []
    for r in rows:
        parameters = totals.setdefault(id(r.arch), r.arch.total_parameters)
        try:
            est = estimate_memory(r.arch, r.scenario)
        except ScenarioError as exc:
            out.append(MatrixRow(label=r.label, strategy=r.strategy, scenario=r.scenario, error=str(exc), note=r.note,
                                 parameters=parameters))
            continue
        plan = plan_parallel(est, r.arch, r.scenario, r.strategy)
        out.append(MatrixRow(label=r.label, strategy=r.strategy, scenario=r.scenario, estimate=est, note=r.note,
                             parameters=parameters, cells=_cells(plan, r.scenario, budgets)))
    return FitMatrix(gpus=tuple(g.name for g in gpus), usable_bytes=tuple(g.usable_memory_bytes for g in gpus), rows=tuple(out))


def scenario_for_model(arch: Architecture, scenario: Scenario) -> tuple[Scenario, str | None]:
    """The scenario adapted to ``arch``: LoRA targets named for another model fall back to this model's
    default targets (its attention projections), with a note."""
    if scenario.method is Method.FULL or scenario.lora_targets is None:
        return scenario, None
    try:
        resolve_targets(arch, scenario.lora_targets)
        return scenario, None
    except ScenarioError:
        return scenario.model_copy(update={"lora_targets": None}), "LoRA targets not in this model: its attention projections used"


def model_matrix(
    models: Sequence[tuple[str, Architecture]], scenario: Scenario, gpus: Sequence[Gpu], strategy: Strategy = Strategy.DDP
) -> FitMatrix:
    """Models x GPUs for one scenario (``models``: (label, architecture) pairs)."""
    rows = []
    for label, arch in models:
        sc, note = scenario_for_model(arch, scenario)
        rows.append(MatrixInput(label=label, arch=arch, scenario=sc, strategy=strategy, note=note))
    return fit_matrix(rows, gpus)


class Technique(BaseModel):
    """A named way to fine-tune: scenario fields it sets and the multi-GPU strategy it implies."""

    model_config = ConfigDict(frozen=True)

    key: str
    label: str
    overrides: dict[str, Any] = Field(default_factory=dict)
    strategy: Strategy = Strategy.DDP


TECHNIQUES: tuple[Technique, ...] = (
    Technique(key="full_fp32", label="Full · fp32", overrides={"method": Method.FULL, "precision": PrecisionMode.FP32}),
    Technique(key="full_mixed", label="Full · mixed bf16", overrides={"method": Method.FULL, "precision": PrecisionMode.AMP_BF16}),
    Technique(key="full_bf16", label="Full · pure bf16", overrides={"method": Method.FULL, "precision": PrecisionMode.BF16}),
    Technique(key="full_ckpt", label="Full · mixed bf16 + grad. checkpointing",
              overrides={"method": Method.FULL, "precision": PrecisionMode.AMP_BF16, "gradient_checkpointing": True}),
    Technique(key="full_8bit", label="Full · mixed bf16 + 8-bit AdamW",
              overrides={"method": Method.FULL, "precision": PrecisionMode.AMP_BF16, "optimizer": Optimizer.ADAMW_8BIT}),
    Technique(key="lora", label="LoRA · bf16 base", overrides={"method": Method.LORA, "precision": PrecisionMode.BF16}),
    Technique(key="qlora", label="QLoRA · 4-bit base", overrides={"method": Method.QLORA, "precision": PrecisionMode.BF16}),
    Technique(key="dora", label="DoRA · bf16 base", overrides={"method": Method.DORA, "precision": PrecisionMode.BF16}),
    Technique(key="full_galore", label="Full · pure bf16 + GaLore AdamW",
              overrides={"method": Method.FULL, "precision": PrecisionMode.BF16, "optimizer": Optimizer.GALORE_ADAMW}),
    Technique(key="full_zero3", label="Full · mixed bf16, ZeRO-3 (min GPUs)",
              overrides={"method": Method.FULL, "precision": PrecisionMode.AMP_BF16}, strategy=Strategy.ZERO3),
)
"""The techniques x GPUs rows. Each keeps the user's other settings (batch, sequence, accumulation,
attention, LoRA rank and targets) and sets what its label says; the optimizer is the user's unless set."""


def technique_scenario(base: Scenario, technique: Technique) -> Scenario:
    """``base`` with ``technique``'s fields. Raises ``ScenarioError`` when the combination is invalid."""
    if technique in TECHNIQUES:
        return _catalog_technique_scenario(base, technique.key)
    return Scenario.build(**{**base.model_dump(), **technique.overrides})


@functools.lru_cache(maxsize=256)
def _catalog_technique_scenario(base: Scenario, key: str) -> Scenario:
    # Pure (frozen inputs, frozen result): every model of a matrix asks for the same few scenarios.
    technique = next(t for t in TECHNIQUES if t.key == key)
    return Scenario.build(**{**base.model_dump(), **technique.overrides})


def technique_matrix(
    arch: Architecture, base: Scenario, gpus: Sequence[Gpu], techniques: Sequence[Technique] = TECHNIQUES
) -> FitMatrix:
    """Techniques x GPUs for one model; combinations the scenario rules out keep their reason as the row error."""
    rows: list[MatrixInput] = []
    errors: dict[int, MatrixRow] = {}
    for i, t in enumerate(techniques):
        try:
            sc, note = scenario_for_model(arch, technique_scenario(base, t))
            rows.append(MatrixInput(label=t.label, arch=arch, scenario=sc, strategy=t.strategy, note=note))
        except ScenarioError as exc:
            errors[i] = MatrixRow(label=t.label, strategy=t.strategy, error=str(exc), parameters=arch.total_parameters)
    matrix = fit_matrix(rows, gpus)
    ok = iter(matrix.rows)
    ordered = tuple(errors[i] if i in errors else next(ok) for i in range(len(techniques)))
    return matrix.model_copy(update={"rows": ordered + (_serving_row(arch, base, gpus),)})


def _serving_row(arch: Architecture, base: Scenario, gpus: Sequence[Gpu]) -> MatrixRow:
    """Serving the model in bf16 (KV cache for the scenario's micro batch x sequence length): one replica
    per GPU, so it fits on one GPU or on none; the fewest GPUs is 1 or None."""
    label = "Inference · bf16 serving"
    try:
        isc = InferenceScenario.build(concurrency=base.micro_batch_size, seq_len=base.seq_len)
    except ScenarioError as exc:
        return MatrixRow(label=label, strategy=Strategy.DDP, error=str(exc), parameters=arch.total_parameters)
    est = estimate_inference(arch, isc)
    total, phase, used = est.total_bytes, est.peak_phase, est.device_used_bytes  # once, not per GPU
    memo: dict[tuple[int, tuple[str, ...]], FitCell] = {}  # GPUs alike in memory and advice share a cell
    cells = []
    for gpu in gpus:
        usable, advice = gpu.usable_memory_bytes, precision_advice(gpu, isc)
        cell = memo.get((usable, advice))
        if cell is None:
            fits = total <= tensor_budget(usable)
            cell = memo[(usable, advice)] = FitCell(
                fits=fits, verdict=fit_verdict(total, usable), peak_bytes=total, peak_phase=phase, headroom_bytes=usable - used, min_gpus=1 if fits else None,
                per_gpu_bytes_at_min=total if fits else None, warning=advice[0] if advice else None)
        cells.append(cell)
    return MatrixRow(label=label, strategy=Strategy.DDP, estimate=est, parameters=arch.total_parameters,
                     note=f"{isc.concurrency} sequence(s) x {isc.seq_len:,} tokens of KV cache", cells=tuple(cells))


# --------------------------------------------------------------------------------------------------
# What fits


class SizeLimit(BaseModel):
    """The largest value of one size that fits, with the per-GPU peak there and one step above."""

    model_config = ConfigDict(frozen=True)

    field: str
    value: int | None
    peak_bytes: float | None
    next_value: int | None
    next_peak_bytes: float | None
    cap: int
    capped_by: str


class WhatFits(BaseModel):
    """Largest micro batch (at the scenario's sequence length) and longest sequence (at its micro batch)."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    usable_memory_bytes: int
    tensor_budget_bytes: float
    strategy: Strategy
    num_gpus: int
    micro_batch: SizeLimit
    seq_len: SizeLimit


def _limit(
    arch: Architecture, scenario: Scenario, field: str, cap: int, capped_by: str,
    peak: Callable[[Scenario], float], usable: float,
) -> SizeLimit:
    cache: dict[int, float] = {}

    def peak_at(x: int) -> float:
        if x not in cache:
            cache[x] = peak(scenario.model_copy(update={field: x}))
        return cache[x]

    best = largest_true(lambda x: peak_at(x) <= usable, 1, cap)
    # When even 1 does not fit, "one more" is 1 itself, so the page can show the peak that does not fit.
    nxt = 1 if best is None else (best + 1 if best < cap else None)
    return SizeLimit(
        field=field, value=best, peak_bytes=peak_at(best) if best else None, next_value=nxt,
        next_peak_bytes=peak_at(nxt) if nxt else None, cap=cap, capped_by=capped_by,
    )


def what_fits(
    arch: Architecture, scenario: Scenario, gpu: Gpu, strategy: Strategy = Strategy.DDP, num_gpus: int = 1
) -> WhatFits:
    """Largest micro batch size and longest sequence length that fit on ``num_gpus`` x ``gpu``.

    Each is searched with the other size held at the scenario's value. The sequence search stops at the
    model's ``max_position_embeddings`` when the config gives one (else at the engine's limit); the batch
    search at the engine's limit. ``value`` is None when even 1 does not fit; ``next_value`` (one more) is
    None when the value reached the cap.

    Raises:
        ScenarioError: LoRA targets that match nothing in ``arch``; ``num_gpus`` out of range.
    """
    if not 1 <= num_gpus <= MAX_GPUS:
        raise ScenarioError(f"num_gpus: must be between 1 and {MAX_GPUS} (got {num_gpus})")

    def peak(sc: Scenario) -> float:
        return plan_parallel(estimate_memory(arch, sc), arch, sc, strategy).per_gpu_bytes(num_gpus)

    usable = tensor_budget(gpu.usable_memory_bytes)  # the searches compare tensor peaks
    context = arch.max_position_embeddings
    seq_cap, seq_by = (min(context, MAX_SEQ_LEN), "the model's context length") if context else (MAX_SEQ_LEN, "the engine's limit")
    return WhatFits(
        gpu=gpu.name, usable_memory_bytes=gpu.usable_memory_bytes, tensor_budget_bytes=usable, strategy=strategy,
        num_gpus=num_gpus, micro_batch=_limit(arch, scenario, "micro_batch_size", MAX_MICRO_BATCH, "the engine's limit", peak, usable),
        seq_len=_limit(arch, scenario, "seq_len", seq_cap, seq_by, peak, usable),
    )
