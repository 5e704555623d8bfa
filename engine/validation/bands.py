"""The time model's bands (:mod:`engine.time.band`) from its leave-one-source-out cross-validation: which rows are
comparable, the factors of each group, and how many published measurements a band holds.

Each row's ratio is ``measured / LOSO prediction`` (its source left out of the fit). The calibrated factors use each
row's ratio over its source's median ratio: what is left once a user's own measurement has fixed the level.
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from engine.time.band import GROUPS, BandRow, band_factors, group_of
from engine.validation.crossval import Result


def row_groups(result: Result) -> list[str]:
    """The band group of each row of ``result`` (in table order)."""
    return [group_of(2 if r.multi_gpu else 1, r.hf_stack) for r in result.table.rows]


def band_table(result: Result) -> list[BandRow]:
    """One :class:`~engine.time.band.BandRow` per group of :data:`~engine.time.band.GROUPS` (a group without rows
    gets the band of all rows)."""
    ratios = [1.0 / (1.0 + e) for e in result.loso_error]  # measured / predicted
    return band_rows(row_groups(result), [r.source for r in result.table.rows], ratios)


def band_rows(groups: list[str], sources: list[str], ratios: list[float]) -> list[BandRow]:
    """:func:`band_table` from each row's group, source and measured / LOSO-predicted ratio."""
    by_source: dict[str, list[float]] = defaultdict(list)
    for src, q in zip(sources, ratios):
        by_source[src].append(q)
    median = {s: statistics.median(v) for s, v in by_source.items()}
    within = [q / median[src] for src, q in zip(sources, ratios)]
    out = []
    for g in GROUPS:
        idx = [i for i, gi in enumerate(groups) if gi == g] or list(range(len(groups)))
        low, high = band_factors([ratios[i] for i in idx])
        clow, chigh = band_factors([within[i] for i in idx])
        out.append(BandRow(group=g, rows=len(idx), sources=len({sources[i] for i in idx}), low=low, high=high,
                           calibrated_low=clow, calibrated_high=chigh))
    return out


def coverage(result: Result, table: list[BandRow]) -> float:
    """Share of rows whose measurement lies inside its group's band around its LOSO prediction."""
    by_group = {b.group: b for b in table}
    inside = 0
    for i, g in enumerate(row_groups(result)):
        ratio = 1.0 / (1.0 + result.loso_error[i])
        b = by_group[g]
        inside += b.low <= ratio <= b.high
    return inside / len(result.loso_error)
