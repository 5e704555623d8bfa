"""One scenario evaluated across techniques and precisions (the side-by-side chart).

Every combination reuses the user's other settings (batch, sequence, optimizer, checkpointing, LoRA
rank and targets); combinations the scenario rules out (e.g. flash attention in fp32) are returned with
their reason instead of an estimate, never silently dropped.
"""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture
from engine.errors import ScenarioError
from engine.memory.result import MemoryEstimate
from engine.memory.estimate import estimate_memory
from engine.scenario.precision import PrecisionMode, precision_spec
from engine.scenario.training import METHOD_LABELS, Method, Scenario

METHOD_SHORT = {**METHOD_LABELS, Method.FULL: "Full FT"}

DEFAULT_METHODS = (Method.FULL, Method.LORA, Method.QLORA)
DEFAULT_PRECISIONS = (PrecisionMode.FP32, PrecisionMode.AMP_BF16, PrecisionMode.BF16)


class SweepRow(BaseModel):
    """One (method, precision) cell: its estimate, or why it was not computed."""

    model_config = ConfigDict(frozen=True)

    method: Method
    precision: PrecisionMode
    label: str
    estimate: MemoryEstimate | None = None
    error: str | None = None
    is_current: bool = False


def sweep_techniques(
    arch: Architecture,
    base: Scenario,
    methods: Sequence[Method] = DEFAULT_METHODS,
    precisions: Sequence[PrecisionMode] = DEFAULT_PRECISIONS,
) -> list[SweepRow]:
    """Estimate ``base`` with each method x precision; the base's own pair is flagged ``is_current``. A PEFT method
    beyond the defaults (DoRA, IA3, ...) that ``base`` uses is added after them, so the chart shows it too."""
    if base.method not in methods:
        methods = (*methods, base.method)
    rows = []
    for method in methods:
        for precision in precisions:
            label = f"{METHOD_SHORT[method]} · {precision_spec(precision).short}"
            current = method is base.method and precision is base.precision
            try:
                scenario = Scenario.build(**{**base.model_dump(), "method": method, "precision": precision})
                rows.append(SweepRow(method=method, precision=precision, label=label, estimate=estimate_memory(arch, scenario), is_current=current))
            except ScenarioError as exc:
                rows.append(SweepRow(method=method, precision=precision, label=label, error=str(exc), is_current=current))
    return rows
