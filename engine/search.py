"""Monotone search shared by the "what fits" answers (training sizes, serving context and concurrency)."""

from __future__ import annotations

from typing import Callable


def largest_true(pred: Callable[[int], bool], lo: int, hi: int) -> int | None:
    """Largest ``x`` in [lo, hi] with ``pred(x)``, for ``pred`` true up to some point and false after
    (monotone). None when ``pred(lo)`` is false. Doubling from ``lo`` then bisection: O(log hi) calls."""
    if not pred(lo):
        return None
    good, step = lo, 1
    bad = None
    while bad is None:  # gallop: lo, lo+1, lo+3, lo+7, ... until false or past hi
        probe = min(lo + 2 * step - 1, hi)
        if pred(probe):
            good = probe
            if probe == hi:
                return hi
            step *= 2
        else:
            bad = probe
    while bad - good > 1:
        mid = (good + bad) // 2
        if pred(mid):
            good = mid
        else:
            bad = mid
    return good
