"""The fewest GPUs of a parallel plan, from each phase's byte sums: the fit matrices' fast path.

A fit matrix asks every row's :class:`engine.memory.parallel.ParallelPlan` for its fewest GPUs against every catalog
GPU: thousands of questions per page. :meth:`ParallelPlan.min_gpus` answers each by a bisection that re-sums every
phase's components at each probe; here each phase is summed once and the bound is solved for directly, then checked
against the exact per-GPU bytes, so the answers are the same numbers.
"""

from __future__ import annotations

import math

from engine.memory.parallel import MAX_GPUS, ParallelPlan, divides_memory


def phase_sums(plan: ParallelPlan) -> list[tuple[float, float, float]]:
    """(sharded, replicated, multi-GPU-only) bytes of each phase: :meth:`ParallelPlan.per_gpu_bytes` is
    ``max(sharded / n + replicated + (multi if n > 1 else 0))`` over these, summed once instead of at every call."""
    return [(p.sharded, p.replicated, sum(p.multi_gpu_parts.values())) for p in plan.phases]


def per_gpu_from_sums(sums: list[tuple[float, float, float]], n: int) -> float:
    """Per-GPU peak bytes at ``n`` GPUs from :func:`phase_sums`: the same floating-point operations, in the same order,
    as :meth:`engine.memory.parallel.PhaseSplit.gpu_bytes`, so the result is identical to ``per_gpu_bytes(n)``."""
    return max(s / n + r + (m if n > 1 else 0.0) for s, r, m in sums)


class FewestGpus:
    """:meth:`ParallelPlan.min_gpus` (same answers) for many tensor budgets of one plan: the plan's one-GPU and
    fewest-bytes-possible peaks are computed once, then each budget costs the bound below and one or two checks.

    Each phase needs ``n >= sharded / (budget - replicated - multi)``, so the fewest GPUs is the largest of those
    bounds, checked (and moved by one where rounding puts it off) against the exact per-GPU bytes."""

    __slots__ = ("sums", "one", "divides", "floor")

    def __init__(self, plan: ParallelPlan, sums: list[tuple[float, float, float]]) -> None:
        self.sums = sums
        self.one = per_gpu_from_sums(sums, 1)
        self.divides = divides_memory(plan.strategy)
        self.floor = per_gpu_from_sums(sums, MAX_GPUS) if self.divides else math.inf  # the most GPUs can do

    def at(self, budget: float) -> int | None:
        """The fewest GPUs whose per-GPU peak is within ``budget`` bytes (None: not even :data:`MAX_GPUS`)."""
        if self.one <= budget:
            return 1
        if self.floor > budget:
            return None
        sums = self.sums
        bound = 2
        for s, r, m in sums:
            room = budget - r - m
            if s > 0:
                bound = max(bound, min(MAX_GPUS, math.ceil(s / room)) if room > 0 else MAX_GPUS)
        n = bound
        while n < MAX_GPUS and per_gpu_from_sums(sums, n) > budget:
            n += 1
        while n > 2 and per_gpu_from_sums(sums, n - 1) <= budget:
            n -= 1
        return n

