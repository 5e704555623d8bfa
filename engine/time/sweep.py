"""Where the time goes, across techniques and shapes: the step-time model over the Memory page's technique sweep,
and tokens/s against sequence length and micro batch size."""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict

from engine.errors import ScenarioError
from engine.hardware.gpus import Gpu
from engine.memory.estimate import estimate_memory
from engine.memory.sweep import sweep_techniques
from engine.model.architecture import Architecture
from engine.scenario.training import Scenario
from engine.time.throughput import Throughput, estimate_throughput

SEQ_LENS: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192, 16384)
"""Sequence lengths of :func:`shape_sweep`."""
MICRO_BATCHES: tuple[int, ...] = (1, 2, 4, 8)
"""Micro batch sizes of :func:`shape_sweep`."""


class TechniqueTime(BaseModel):
    """One (method, precision) of the technique sweep: its one-GPU :class:`Throughput`, or why there is none."""

    model_config = ConfigDict(frozen=True)

    label: str
    is_current: bool
    throughput: Throughput | None = None
    error: str | None = None


def time_by_technique(arch: Architecture, base: Scenario, gpu: Gpu, *, calibration: float = 1.0,
                      fused_kernels: bool = False) -> list[TechniqueTime]:
    """The step of each (method, precision) of :func:`engine.memory.sweep.sweep_techniques` on one ``gpu``."""
    out = []
    for row in sweep_techniques(arch, base):
        if row.estimate is None:
            out.append(TechniqueTime(label=row.label, is_current=row.is_current, error=row.error))
            continue
        sc = Scenario.build(**{**base.model_dump(), "method": row.method, "precision": row.precision})
        try:
            tp = estimate_throughput(arch, sc, gpu, calibration=calibration, fused_kernels=fused_kernels,
                                     estimate=estimate_memory(arch, sc, gpu))
            out.append(TechniqueTime(label=row.label, is_current=row.is_current, throughput=tp))
        except ScenarioError as exc:
            out.append(TechniqueTime(label=row.label, is_current=row.is_current, error=str(exc)))
    return out


def shape_sweep(arch: Architecture, base: Scenario, gpu: Gpu, *, seq_lens: Sequence[int] = SEQ_LENS,
                micro_batches: Sequence[int] = MICRO_BATCHES, calibration: float = 1.0,
                fused_kernels: bool = False) -> dict[int, list[tuple[int, float]]]:
    """One-GPU tokens/s of ``base`` at each micro batch size (keys) and sequence length: ``{mbs: [(seq, tps)]}``.
    Shapes that make no valid scenario are left out (memory fit is not checked: see the Fit page)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for mbs in micro_batches:
        points = []
        for s in seq_lens:
            try:
                sc = Scenario.build(**{**base.model_dump(), "micro_batch_size": mbs, "seq_len": s})
                est = estimate_memory(arch, sc, gpu)
                points.append((s, estimate_throughput(arch, sc, gpu, calibration=calibration, fused_kernels=fused_kernels,
                                                      estimate=est).tokens_per_second))
            except ScenarioError:
                continue
        out[mbs] = points
    return out
