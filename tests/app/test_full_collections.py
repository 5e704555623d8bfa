"""ui.collector: the background thread's full collections free reference cycles that the app's raised collector
thresholds (ui.layout: gc.set_threshold(20_000, 20, 20)) leave for minutes (issue 26's soak)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest

from ui.collector import FULL_COLLECTION_INTERVAL_S, THREAD_NAME, _loop, start_full_collections


class _Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def test_a_cycle_is_freed_by_the_thread_within_its_interval():
    old = gc.get_threshold()
    gc.set_threshold(1_000_000, 1_000, 1_000)  # no automatic collection during the test
    stop = threading.Event()
    try:
        ref = weakref.ref(_Node())
        assert ref() is not None  # nothing collected it yet
        worker = threading.Thread(target=_loop, args=(0.05, stop), daemon=True)
        worker.start()
        deadline = time.monotonic() + 5.0
        while ref() is not None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ref() is None
    finally:
        stop.set()
        gc.set_threshold(*old)


def test_the_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be positive"):
        start_full_collections(0)


def test_the_app_starts_the_collector_thread():
    import ui.layout  # noqa: F401  (every page imports it; it tunes the collector and starts the thread)

    assert any(t.name == THREAD_NAME and t.is_alive() for t in threading.enumerate())
    assert FULL_COLLECTION_INTERVAL_S <= 30.0  # the interval the soak was measured at (README "Memory over a long run")
