"""Visitors asking for the same repo while the Hub hangs share one read and one timeout (engine.model.hub.shared_read,
used by fetch_config_shared and the app's public-config cache), against the local Hub stub (tests/hubstub.py).
Before: the app's cached read served concurrent callers one at a time (st.cache_data's per-key lock; a failure is
not cached), so three visitors sent three requests and were answered after one, two and three timeouts."""

from __future__ import annotations

import threading
import time

import pytest

from engine.errors import HubUnavailableError
from engine.model.hub import fetch_config_shared, shared_read
from engine.model.sources import config_from_catalog
from hubstub import StubRepo

TIMEOUT_S = 1.0
HANG_S = 6.0  # the stub answers long after every caller's timeout


def three_at_once(call):
    """Three threads calling ``call`` together: (outcomes, seconds until the last one was answered)."""
    barrier = threading.Barrier(3)
    out: list = [None] * 3

    def run(i):
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            out[i] = exc

    start = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out, time.monotonic() - start


def test_three_callers_of_a_hung_hub_share_one_request_and_one_timeout(hub_stub):
    hub_stub.add("acme/hung", StubRepo(config={"model_type": "llama"}, delay_s=HANG_S))
    out, elapsed = three_at_once(lambda: fetch_config_shared("acme/hung", token=False, timeout_s=TIMEOUT_S))
    assert all(isinstance(e, HubUnavailableError) and e.reason == f"no answer within {TIMEOUT_S:g} s" for e in out), out
    assert len(hub_stub.requests_for("acme/hung")) == 1  # one read for the three
    assert elapsed < 2.5 * TIMEOUT_S  # one timeout (and its slack), not three in turn


def test_the_apps_cached_public_read_shares_the_flight(hub_stub, monkeypatch):
    from ui.model_picker import _public_config

    hub_stub.add("acme/hung", StubRepo(config={"model_type": "llama"}, delay_s=HANG_S))
    monkeypatch.setenv("FINETUNE_FIT_HUB_TIMEOUT", str(TIMEOUT_S))
    out, elapsed = three_at_once(lambda: _public_config("acme/hung", None, hub_stub.url))
    assert all(isinstance(e, HubUnavailableError) for e in out), out
    assert len(hub_stub.requests_for("acme/hung")) == 1
    assert elapsed < 2.5 * TIMEOUT_S


def test_a_shared_answer_is_each_callers_own_copy(hub_stub):
    config = config_from_catalog("Qwen/Qwen2.5-0.5B")[0]
    hub_stub.add("acme/slow", StubRepo(config=config, delay_s=0.5))
    out, _ = three_at_once(lambda: fetch_config_shared("acme/slow", token=False, timeout_s=5))
    assert all(o == config for o in out) and len({id(o) for o in out}) == 3
    assert len(hub_stub.requests_for("acme/slow")) == 1


def test_different_repos_and_later_calls_are_separate_reads():
    calls = []
    assert shared_read(("k", 1), lambda: calls.append(1) or "a") == "a"
    assert shared_read(("k", 1), lambda: calls.append(2) or "b") == "b"  # nothing remembered after a flight
    with pytest.raises(ValueError, match="boom"):
        shared_read(("k", 2), lambda: (_ for _ in ()).throw(ValueError("boom")))
    assert calls == [1, 2]
