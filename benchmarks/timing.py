"""Shared timing helper of the benchmark scripts."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def median_ms(fn: Callable[[], object], repeat: int = 30) -> float:
    """Median wall time of ``fn()`` over ``repeat`` calls, in milliseconds."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def median_cpu_ms(fn: Callable[[], object], repeat: int = 30) -> float:
    """Median CPU time of this process for ``fn()`` over ``repeat`` calls, in milliseconds: on a machine shared with
    other work, the wall time also counts the time other processes held the cores; this does not."""
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append((time.process_time() - start) * 1e3)
    return statistics.median(times)
