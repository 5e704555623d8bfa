"""The engine's estimate beside a trace, component by component (torch-free).

The engine (:func:`engine.memory.estimate.estimate_memory`) and the trace label memory differently, so the
comparison maps both onto common rows, each side taken at its own peak:

==========================  ==========================================  ==============================
row                         engine components                           trace categories
==========================  ==========================================  ==============================
weights                     ``weights``                                 ``parameters`` (and buffers)
weight copies               ``weight_copies``                           ``weight_copies`` (autocast
                                                                        casts of parameters)
gradients                   ``gradients``                               ``gradients``
optimizer states            ``optimizer_states``                        ``optimizer_states``
optimizer temporaries       ``optimizer_temporaries``                   ``optimizer_temporaries``
activations, logits, loss,  ``activations`` + ``recomputed_layer`` +   ``activations`` +
backward temporaries        ``logits_loss`` + ``logits_forward`` +      ``backward_temporaries``
                            ``gradient_temporaries``
==========================  ==========================================  ==============================

Why the last row merges: the trace labels by *when* a tensor was created, so the loss's gradient
tensors (which the engine counts in ``logits_loss``) and the activation gradients of the backward pass
are backward temporaries, while the logits and saved activations are forward-created; the engine splits
the same bytes by *what* they are. Their sum is comparable, the split is not.

Phases: the trace has three (forward, backward, optimizer); the engine's phases map onto them
(``forward`` -> forward; ``backward``, ``recompute``, ``backward_end`` -> backward; ``optimizer_step`` ->
optimizer), the estimate of a trace phase being the largest total of the engine phases mapped to it.
Engine components that no row maps (e.g. a future key) are listed in ``unmapped``, never dropped silently.
The difference is ``(estimate - traced) / traced`` in percent (positive: the engine over-estimates).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.trace.result import TraceResult

ROWS: tuple[tuple[str, str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("weights", "Weights", ("weights",), ("parameters",)),
    ("weight_copies", "Weight copies (autocast)", ("weight_copies",), ("weight_copies",)),
    ("gradients", "Gradients", ("gradients",), ("gradients",)),
    ("optimizer_states", "Optimizer states", ("optimizer_states",), ("optimizer_states",)),
    ("optimizer_temporaries", "Optimizer temporaries", ("optimizer_temporaries",), ("optimizer_temporaries",)),
    ("activations", "Activations, logits, loss, backward temporaries",
     ("activations", "recomputed_layer", "logits_loss", "logits_forward", "gradient_temporaries"),
     ("activations", "backward_temporaries")),
)
"""(key, label, engine component keys, trace categories) of each comparison row."""

ENGINE_TO_TRACE_PHASE = {"forward": "forward", "backward": "backward", "recompute": "backward", "backward_end": "backward",
                         "optimizer_step": "optimizer"}
"""Engine phase -> the trace phase it falls in."""
PHASE_LABELS = {"forward": "Forward", "backward": "Backward", "optimizer": "Optimizer step"}


class ComparisonRow(BaseModel):
    """One row: bytes estimated by the engine, bytes traced, difference in percent of the traced bytes."""

    model_config = ConfigDict(frozen=True)

    key: str
    label: str
    estimate_bytes: float
    traced_bytes: int
    difference_pct: float | None
    """``100 * (estimate - traced) / traced``; 0 when both are 0; None when only the trace is 0."""


class Comparison(BaseModel):
    """Engine estimate vs trace: component rows (each side at its peak), the peaks, the phase totals."""

    model_config = ConfigDict(frozen=True)

    rows: tuple[ComparisonRow, ...]
    total: ComparisonRow
    phases: tuple[ComparisonRow, ...]
    estimate_peak_phase: str
    """The engine's peak phase in the trace's terms (``forward``, ``backward`` or ``optimizer``)."""
    traced_peak_phase: str
    unmapped: dict[str, float]
    """Engine components at the peak that no row maps (e.g. quantized weights), by key."""

    def table(self) -> list[dict[str, Any]]:
        """Rows (components, then the total) as plain dicts, e.g. for a pandas DataFrame."""
        return [r.model_dump() for r in (*self.rows, self.total)]


def difference_pct(estimate: float, traced: float) -> float | None:
    """``100 * (estimate - traced) / traced``; 0.0 if both are 0; None if only ``traced`` is 0."""
    if traced == 0:
        return 0.0 if estimate == 0 else None
    return 100.0 * (estimate - traced) / traced


def _row(key: str, label: str, estimate: float, traced: int) -> ComparisonRow:
    return ComparisonRow(key=key, label=label, estimate_bytes=estimate, traced_bytes=traced,
                         difference_pct=difference_pct(estimate, traced))


def compare(estimate: Any, trace: TraceResult) -> Comparison:
    """Compare an :class:`engine.memory.result.MemoryEstimate` of a training scenario with its trace.

    ``estimate`` is duck-typed (``components``, ``peak_phase``, ``peak_allocated_bytes``, ``phase_total``)
    so this module imports neither torch nor the engine's memory model.
    """
    comps: dict[str, float] = dict(estimate.components)
    mapped = {k for _, _, keys, _ in ROWS for k in keys}
    rows = tuple(_row(key, label, sum(comps.get(k, 0.0) for k in ekeys), sum(trace.breakdown.get(c, 0) for c in tcats))
                 for key, label, ekeys, tcats in ROWS)
    total = _row("total", "Peak allocated", float(estimate.peak_allocated_bytes), trace.peak_allocated_bytes)
    engine_phases = [p for p in estimate.phases if p in ENGINE_TO_TRACE_PHASE]
    phases = []
    for phase, label in PHASE_LABELS.items():
        mine = [p for p in engine_phases if ENGINE_TO_TRACE_PHASE[p] == phase]
        if mine:
            phases.append(_row(phase, label, max(float(estimate.phase_total(p)) for p in mine), trace.phase_peaks.get(phase, 0)))
    peak = str(estimate.peak_phase)
    return Comparison(rows=rows, total=total, phases=tuple(phases), estimate_peak_phase=ENGINE_TO_TRACE_PHASE.get(peak, peak),
                      traced_peak_phase=trace.peak_phase,
                      unmapped={k: v for k, v in comps.items() if k not in mapped and v})
