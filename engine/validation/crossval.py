"""Leave-one-source-out cross-validation of the step-time model's fitted constants.

The model has a few global constants (:class:`engine.time.constants.TimeConstants`); everything else comes from named
sources. Fitting them on every published row and quoting the error on the same rows flatters the model, so the figure
the product publishes is the leave-one-source-out (LOSO) error: for each source (a publisher's table: torchtune's
README, the LlamaFactory paper, torchtitan's benchmarks ...), refit the constants on every *other* source's rows and
predict the left-out source's rows with them. A source's rows share a stack, a cluster and a way of measuring, so
leaving out one row at a time would still let its siblings tune the constants for it.

The fit is a search over a small grid of candidate values (:data:`GRID`). Its objective (:func:`objective`) is the
mean |log(predicted / measured)| with each row weighted 1 / sqrt(rows of its source), so that a source publishing 30
rows of one cluster counts more than one with 2 but does not outvote every other source. Ties (a constant no
training row depends on) go to the prior value, :data:`engine.time.constants.FITTED`.

Cost: a row is evaluated only on the constants it depends on (:func:`prediction_table` perturbs each constant once
per row to find out), so the table is tens of evaluations per row, not the whole grid.

Pure: ``predict(row, constants) -> float`` is passed in; nothing here reads a file.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Hashable, Sequence

from engine.time.constants import FITTED, TimeConstants

GRID: dict[str, tuple[float, ...]] = {
    "gemm_efficiency": (0.70, 0.75, 0.80, 0.85, 0.90),
    "eager_host_factor": (1.0, 1.5, 2.0, 2.5, 3.0, 4.0),
    "attention_efficiency": (0.5, 0.6, 0.7, 0.8, 1.0),
    "network_efficiency": (0.5, 0.7, 0.96),
    "power_exponent": (1 / 3, 0.5, 0.75, 1.0),
}
"""Candidate values of each fitted constant: GEMM efficiency around the MAMF table's realised share; the eager host
factor from a plain loop (1) to 3x; the attention share of the FA papers' rates; the NCCL share of the NIC's line rate
(0.96 = nccl-tests' 24 of 25 GB/s on one 200G NIC; 0.5-0.7 for busy fabrics); the power-cap exponent from the
DVFS prior 1/3 to linear in power."""


@dataclass(frozen=True, slots=True)
class Row:
    """One published measurement: ``id``, ``source`` (the LOSO group), ``multi_gpu`` (reported apart), ``measured``
    (tokens/s, MFU or TFLOP/s: any figure proportional to throughput), ``key`` (what ``predict`` needs) and
    ``hf_stack`` (the Hugging Face Trainer + PEFT stack: its own band group)."""

    id: str
    source: str
    multi_gpu: bool
    measured: float
    key: Hashable
    hf_stack: bool = False


@dataclass(frozen=True, slots=True)
class Table:
    """Predictions of every row at every grid point: ``points`` (the constants), ``predicted[r][p]``."""

    rows: tuple[Row, ...]
    points: tuple[TimeConstants, ...]
    predicted: tuple[tuple[float, ...], ...]

    @property
    def prior(self) -> int:
        """Index of the grid point nearest :data:`~engine.time.constants.FITTED` (the tie-break)."""
        return min(range(len(self.points)), key=lambda i: _distance(self.points[i], FITTED))


def grid_points(grid: dict[str, tuple[float, ...]] = GRID) -> tuple[TimeConstants, ...]:
    """Every combination of ``grid``'s values, as constants (fields not in ``grid`` keep FITTED's value)."""
    names = list(grid)
    return tuple(FITTED.with_values(**dict(zip(names, values))) for values in itertools.product(*grid.values()))


def prediction_table(rows: Sequence[Row], predict: Callable[[Row, TimeConstants], float],
                     grid: dict[str, tuple[float, ...]] = GRID) -> Table:
    """:class:`Table` of ``predict`` over ``grid``, evaluating each row only on the constants it depends on.

    A row depends on a constant when setting it to its lowest or highest grid value (the others at FITTED) changes the
    prediction by more than 1e-9 (relative).
    """
    points = grid_points(grid)
    out = []
    for row in rows:
        base = predict(row, FITTED)
        relevant = [name for name, values in grid.items()
                    if any(abs(predict(row, FITTED.with_values(**{name: v})) / base - 1) > 1e-9 for v in (values[0], values[-1]))]
        memo: dict[tuple, float] = {}
        preds = []
        for point in points:
            sub = tuple(getattr(point, name) for name in relevant)
            if sub not in memo:
                memo[sub] = predict(row, FITTED.with_values(**dict(zip(relevant, sub)))) if relevant else base
            preds.append(memo[sub])
        out.append(tuple(preds))
    return Table(rows=tuple(rows), points=points, predicted=tuple(out))


def objective(table: Table, use: Sequence[int]) -> list[float]:
    """The fit's loss at every grid point over rows ``use``: sum of |log(predicted / measured)| x 1/sqrt(rows of the
    row's source among ``use``)."""
    counts: dict[str, int] = defaultdict(int)
    for r in use:
        counts[table.rows[r].source] += 1
    loss = [0.0] * len(table.points)
    for r in use:
        w = 1.0 / math.sqrt(counts[table.rows[r].source])
        m = table.rows[r].measured
        for p, pred in enumerate(table.predicted[r]):
            loss[p] += w * abs(math.log(pred / m))
    return loss


def fit(table: Table, use: Sequence[int]) -> int:
    """Index of the grid point with the least :func:`objective` over ``use`` (ties within 1e-12: the nearest the prior)."""
    loss = objective(table, use)
    best = min(loss)
    tied = [i for i, v in enumerate(loss) if v <= best + 1e-12]
    return min(tied, key=lambda i: _distance(table.points[i], FITTED))


def _distance(a: TimeConstants, b: TimeConstants) -> float:
    return sum(abs(x - y) / max(abs(y), 1e-9) for x, y in zip(a.as_dict().values(), b.as_dict().values()))


@dataclass(frozen=True, slots=True)
class Result:
    """Cross-validation of one table: per row the in-sample and the out-of-source error (predicted / measured - 1),
    the in-sample constants, and per source the constants refitted without it."""

    table: Table
    in_sample: int
    in_sample_error: tuple[float, ...]
    loso_error: tuple[float, ...]
    refit: dict[str, TimeConstants]

    def summary(self, multi_gpu: bool | None = None, source: str | None = None, loso: bool = True) -> "Summary":
        """:class:`Summary` over the rows matching ``multi_gpu`` (None: all) and ``source`` (None: all)."""
        errs = self.loso_error if loso else self.in_sample_error
        sel = [(self.table.rows[i], errs[i]) for i in range(len(errs))
               if (multi_gpu is None or self.table.rows[i].multi_gpu == multi_gpu)
               and (source is None or self.table.rows[i].source == source)]
        return Summary.of(sel)


@dataclass(frozen=True, slots=True)
class Summary:
    """Rows, median and largest |error|, the worst row's id."""

    rows: int
    median_abs_error: float
    max_abs_error: float
    worst: str

    @staticmethod
    def of(pairs: Sequence[tuple[Row, float]]) -> "Summary":
        if not pairs:
            return Summary(0, 0.0, 0.0, "")
        worst = max(pairs, key=lambda p: abs(p[1]))
        return Summary(len(pairs), statistics.median(abs(e) for _, e in pairs), abs(worst[1]), worst[0].id)


def cross_validate(table: Table) -> Result:
    """Fit on every row (in-sample), then per source refit without it and predict its rows (LOSO)."""
    n = len(table.rows)
    everything = list(range(n))
    best = fit(table, everything)
    in_err = tuple(table.predicted[r][best] / table.rows[r].measured - 1 for r in everything)
    loso = [0.0] * n
    refit: dict[str, TimeConstants] = {}
    for source in sorted({row.source for row in table.rows}):
        held = [r for r in everything if table.rows[r].source == source]
        rest = [r for r in everything if table.rows[r].source != source]
        p = fit(table, rest) if rest else table.prior
        refit[source] = table.points[p]
        for r in held:
            loso[r] = table.predicted[r][p] / table.rows[r].measured - 1
    return Result(table=table, in_sample=best, in_sample_error=in_err, loso_error=tuple(loso), refit=refit)
