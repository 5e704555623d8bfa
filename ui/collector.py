"""A full garbage collection every few seconds in a long-running server, from one background thread.

The app raises the collector's thresholds (ui.layout): with Streamlit's ``postScriptGC`` off and generation 0 collected
every 20,000 allocations, a full (generation 2) collection came only every few minutes, and Python 3.11 also skips one
until the objects moved into generation 2 since the last exceed a quarter of those kept (CPython's ``gcmodule.c``,
``long_lived_pending``). What only a full collection frees piled up meanwhile: every closed session that Streamlit
drops after ``server.disconnectedSessionTTL`` (its session state, widget metadata and element tree are reference
cycles, old enough to be in generation 2), and the Arrow buffers and DataFrames of reruns caught in cycles. Each pile
was a new high-water mark of the heap, and freed memory stays resident (pymalloc returns an arena only when all of it
is free, glibc's heap is fragmented), so the server's RSS climbed 7-9 MB a minute under the 15-minute soak while the
objects alive after a full collection stayed flat (benchmarks/soak_trace.py, README "Memory over a long run").

One full collection every :data:`FULL_COLLECTION_INTERVAL_S` seconds bounds that pile to what 30 s of traffic leaves;
it costs one collection of the non-frozen heap (tens of milliseconds to a few hundred under load) per interval, where
Streamlit's own ``postScriptGC`` ran one after every rerun of every session.
"""

from __future__ import annotations

import gc
import threading
import time

FULL_COLLECTION_INTERVAL_S = 30.0
"""Seconds between full collections (soak: RSS +2% from minute 4 to 10 at 30 s, +16-26% from minute 5 to 15 without)."""

THREAD_NAME = "finetune-fit-full-gc"

_started: threading.Thread | None = None
_lock = threading.Lock()
last_collection: dict[str, float] = {}
"""Of the latest full collection by the thread: ``at`` (``time.monotonic()``, s), ``seconds`` it took, ``freed``
(objects found unreachable)."""


def _loop(interval_s: float, stop: threading.Event) -> None:
    while not stop.wait(interval_s):
        t0 = time.perf_counter()
        freed = gc.collect()
        last_collection.update(at=time.monotonic(), seconds=time.perf_counter() - t0, freed=float(freed))


def start_full_collections(interval_s: float = FULL_COLLECTION_INTERVAL_S,
                           stop: threading.Event | None = None) -> threading.Thread:
    """Start (once per process; later calls return the running thread) a daemon thread that runs ``gc.collect()``
    every ``interval_s`` seconds until ``stop`` is set.

    Raises:
        ValueError: ``interval_s`` is not positive.
    """
    global _started
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, got {interval_s}")
    with _lock:
        if _started is not None and _started.is_alive():
            return _started
        _started = threading.Thread(target=_loop, args=(interval_s, stop or threading.Event()), name=THREAD_NAME,
                                    daemon=True)
        _started.start()
        return _started
