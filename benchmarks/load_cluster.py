"""Load test of the team deployment: N replicas behind nginx with one plan library (deploy/cluster.py), S visitors,
one replica killed mid-run.

Each visitor is benchmarks/load.py's websocket client with a browser's habits: it gets the proxy's affinity cookie
first, keeps the URL the app writes (``st.query_params``) and sends it with every rerun, and when its connection
drops it reconnects (same cookie, same URL, same widget states) until a replica answers. Each visitor opens its own
scenario by link (a micro batch and a method of its own), saves one plan on the Plans page, then changes the micro
batch back to back on the Memory page. Half-way through the measured window replica 0 is SIGKILLed.

Reported: visitors whose replica died and whether each one's scenario came back (the query string and the peak
memory after the reconnect equal those before), plans saved and found in the database afterwards (read with
ui.plan_store.PlanStore directly), rerun latency before and after the kill, reconnect time, and the throughput
(reruns/s) of the replicas before the kill against one replica alone with the same visitors. Exits 1 when a saved
plan is missing or a visitor's scenario was not restored.

    python benchmarks/load_cluster.py                       # 3 replicas, 50 visitors, 30 s, PostgreSQL
    python benchmarks/load_cluster.py --replicas 2 --sessions 10 --duration 10 --database sqlite
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "deploy"), str(ROOT / "benchmarks")]

from cluster import Cluster  # noqa: E402
from load import Session, percentile  # noqa: E402

MODEL = "Qwen/Qwen2.5-0.5B"


def affinity_cookie(url: str) -> dict[str, str]:
    """The proxy's cookie for a new visitor, as the browser gets it with the page."""
    with urllib.request.urlopen(url + "/", timeout=30) as r:
        cookies = [h.split(";")[0] for h in r.headers.get_all("Set-Cookie") or []]
    return {"Cookie": "; ".join(cookies)} if cookies else {}


@dataclass
class Visitor:
    index: int
    plan_name: str = ""
    saved: bool = False
    dropped: bool = False
    restored: bool | None = None
    reconnect_s: float | None = None
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (monotonic end, seconds)
    errors: list[str] = field(default_factory=list)


def _rerun(session: Session) -> float:
    elapsed, problems = session.rerun()
    if problems:
        raise RuntimeError("; ".join(problems))
    return elapsed


def _reconnect(session: Session, deadline_s: float = 90.0) -> float:
    start = time.monotonic()
    while True:
        try:
            session.reconnect()
            return time.monotonic() - start
        except Exception:  # noqa: BLE001 - no replica answered yet: the browser retries too
            if time.monotonic() - start > deadline_s:
                raise
            time.sleep(0.5)


def visit(url: str, v: Visitor, run_id: str, stop_at: list[float], ready: threading.Barrier, save: bool,
          use_cookie: bool) -> None:
    batch = 1 + v.index % 8
    method = ("full", "lora", "qlora")[v.index % 3]
    try:
        session = Session(url, 60.0, headers=affinity_cookie(url) if use_cookie else None,
                          query_string=f"model={MODEL}&method={method}&micro_batch_size={batch}")
        _rerun(session)  # the visitor's link: the Memory page
        if save:
            session.go_to("plans")
            _rerun(session)
            v.plan_name = f"load {run_id} visitor {v.index}"
            session.set_widget("Plan name", "string_value", v.plan_name)
            session.set_widget("Save plan", "trigger_value", True)
            _rerun(session)
            v.saved = True
            session.go_to("memory")
            _rerun(session)
    except Exception as exc:  # noqa: BLE001
        v.errors.append(f"start: {type(exc).__name__}: {exc}")
        ready.abort()
        return
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        return
    i = 0
    while time.monotonic() < stop_at[0]:
        i += 1
        before_query, before_peak = session.query_string, session.metrics.get("Peak memory")
        session.set_widget("Micro batch size", "int_value", 1 + (batch + i) % 8)
        try:
            v.latencies.append((time.monotonic(), _rerun(session)))
            continue
        except Exception as exc:  # noqa: BLE001 - the replica died under us (or the rerun failed)
            if v.dropped:
                v.errors.append(f"{type(exc).__name__}: {exc}")
                return
            v.dropped = True
        try:
            # The browser's state at the drop: the URL of the last finished run and that run's widget values.
            session.query_string = before_query
            session.set_widget("Micro batch size", "int_value", int(parse_qs(before_query)["micro_batch_size"][0]))
            v.reconnect_s = _reconnect(session)
            _rerun(session)
            v.restored = parse_qs(session.query_string) == parse_qs(before_query) \
                and session.metrics.get("Peak memory") == before_peak
        except Exception as exc:  # noqa: BLE001
            v.errors.append(f"reconnect: {type(exc).__name__}: {exc}")
            v.restored = False
            return
    session.close()


def run_phase(url: str, sessions: int, duration_s: float, run_id: str, *, save: bool, use_cookie: bool,
              kill=None) -> tuple[list[Visitor], float]:
    """Visitors on ``url`` for ``duration_s`` once all have started; ``kill()`` runs half-way. Returns the visitors
    and the window's start."""
    visitors = [Visitor(i) for i in range(sessions)]
    stop_at: list[float] = []
    started: list[float] = []
    ready = threading.Barrier(sessions + 1, action=lambda: (started.append(time.monotonic()),
                                                            stop_at.append(time.monotonic() + duration_s)))
    threads = [threading.Thread(target=visit, args=(url, v, run_id, stop_at, ready, save, use_cookie), daemon=True)
               for v in visitors]
    for t in threads:
        t.start()
    ready.wait(timeout=600)
    if kill is not None:
        time.sleep(duration_s / 2)
        kill()
    for t in threads:
        t.join(duration_s + 150)
    return visitors, started[0]


def latency_ms(values: list[float]) -> dict[str, float | int]:
    return {"reruns": len(values), "p50_ms": round(1e3 * percentile(values, 50), 1),
            "p95_ms": round(1e3 * percentile(values, 95), 1),
            "max_ms": round(1e3 * max(values), 1) if values else float("nan")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--duration", type=float, default=30.0, help="seconds of each measured window (default 30)")
    parser.add_argument("--database", default="postgres", help="postgres (started here), sqlite, or a URL")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)

    import sqlalchemy as sa

    from ui.plan_store import PlanStore

    run_id = uuid.uuid4().hex[:6]
    with Cluster(args.replicas, database=args.database, env={"HF_HUB_OFFLINE": "1"}) as cluster:
        for i in range(args.replicas):  # warm every replica (imports, caches), as a deployment is before visitors
            run_phase(cluster.replica_url(i), 2, 2.0, run_id, save=False, use_cookie=False)
        # One replica alone, the same visitors (directly, no proxy): the baseline.
        single, t0 = run_phase(cluster.replica_url(args.replicas - 1), args.sessions, args.duration / 2, run_id,
                               save=False, use_cookie=False)
        one = [s for v in single for end, s in v.latencies if end <= t0 + args.duration / 2]
        # All replicas through the proxy, replica 0 killed half-way.
        killed_at: list[float] = []

        def kill() -> None:
            killed_at.append(time.monotonic())
            cluster.kill_replica(0)

        crowd, t1 = run_phase(cluster.url, args.sessions, args.duration, run_id, save=True, use_cookie=True, kill=kill)
        store = PlanStore(sa.create_engine(cluster.database_url))
        found = {p.plan.name for p in store.plans()}
        store.engine.dispose()

    cut = killed_at[0]
    before = [s for v in crowd for end, s in v.latencies if end <= cut]
    after = [s for v in crowd for end, s in v.latencies if end > cut]
    saved = [v.plan_name for v in crowd if v.saved]
    lost = [n for n in saved if n not in found]
    dropped = [v for v in crowd if v.dropped]
    unrestored = [v.index for v in dropped if not v.restored]
    ratio = (len(before) / (cut - t1)) / (len(one) / (args.duration / 2)) if one else float("nan")
    result = {
        "replicas": args.replicas, "sessions": args.sessions, "database": cluster.database_url.split("://")[0],
        "cpus": os.cpu_count(), "plans_saved": len(saved), "plans_found": len(saved) - len(lost), "plans_lost": len(lost),
        "sessions_on_killed_replica": len(dropped), "sessions_restored": len(dropped) - len(unrestored),
        "sessions_not_restored": unrestored,
        "reconnect_p50_s": round(percentile([v.reconnect_s for v in dropped if v.reconnect_s is not None], 50), 2),
        "reconnect_max_s": round(max([v.reconnect_s for v in dropped if v.reconnect_s is not None], default=0.0), 2),
        "one_replica": latency_ms(one) | {"reruns_per_s": round(len(one) / (args.duration / 2), 1)},
        "before_kill": latency_ms(before) | {"reruns_per_s": round(len(before) / (cut - t1), 1)},
        "after_kill": latency_ms(after), "throughput_ratio": round(ratio, 2),
        "errors": sorted({e for v in crowd for e in v.errors})[:5],
    }
    print(f"{args.replicas} replicas behind nginx, {args.sessions} visitors, plans in {result['database']}, "
          f"{result['cpus']} CPUs; replica 0 killed after {cut - t1:.1f} s of {args.duration:g} s")
    print(f"plans: {result['plans_saved']} saved, {result['plans_found']} found afterwards, {len(lost)} lost")
    print(f"visitors on the killed replica: {len(dropped)}, scenario restored after reconnecting: "
          f"{len(dropped) - len(unrestored)} (reconnect p50 {result['reconnect_p50_s']} s, max {result['reconnect_max_s']} s)")
    for label in ("one_replica", "before_kill", "after_kill"):
        r = result[label]
        print(f"{label:>12}: {r['reruns']} reruns, p50 {r['p50_ms']} ms, p95 {r['p95_ms']} ms, max {r['max_ms']} ms"
              + (f", {r['reruns_per_s']} reruns/s" if "reruns_per_s" in r else ""))
    print(f"throughput {args.replicas} replicas vs 1: {result['throughput_ratio']}x")
    for e in result["errors"]:
        print(f"  error: {e}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 1 if lost or unrestored else 0


if __name__ == "__main__":
    raise SystemExit(main())
