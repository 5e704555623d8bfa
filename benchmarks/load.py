"""Load test: N concurrent sessions against a real ``streamlit run streamlit_app.py``, each changing widgets and
timing its reruns.

Each session speaks Streamlit's own protocol over the app's websocket (``/_stcore/stream``), as the browser does:
it sends ``BackMsg.rerun_script`` messages (``streamlit.proto.BackMsg_pb2``) carrying the widget states, and reads
``ForwardMsg`` messages (``streamlit.proto.ForwardMsg_pb2``) until ``script_finished``. The rerun latency is the time
from sending a widget change to its ``script_finished``. A session first loads a page, learns the widget ids from
the deltas, then loops until the time is up: a new micro batch size (and every few reruns the gradient checkpointing
toggle), on its page; with ``--pages all`` the sessions are spread over the pages with a widget sidebar (Memory,
GPU fit, Time & cost, Plans) and each also switches page now and then.

Errors: a rerun that shows an exception box (``Exception`` delta), an ``st.error``, a script that does not finish
successfully, a rerun not finished within ``--rerun-timeout``, or a broken connection.

The sessions open the app together; their first page loads are timed apart ("first page load"), and the measured
window starts once every session has loaded its page. ``--think`` adds a pause between a session's reruns, as a
person reading the result (0, the default, sends the next change as soon as a rerun finishes: the worst case).

Usage::

    python benchmarks/load.py                         # N = 1, 10, 25 for 20 s each, all pages, back to back
    python benchmarks/load.py --think 5               # each user changes something every 2.5-7.5 s
    python benchmarks/load.py --sessions 25 --duration 30 --pages memory
    python benchmarks/load.py --url http://127.0.0.1:8501   # an already running server

Prints one table (N, reruns, p50/p95/max rerun latency in ms, errors, and the CPU ms per rerun of the server, from
/proc when this script started it, and of this client, which shares the machine's cores) and, with ``--json FILE``,
writes it as JSON.
The websocket client is the ``websockets`` package, a dependency of Streamlit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[1]
WIDGET_PAGES = {"Memory": "memory", "GPU fit": "fit", "Time & cost": "time_cost", "Plans": "plans"}


# --- server -------------------------------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int, log_dir: Path) -> subprocess.Popen:
    """``streamlit run streamlit_app.py`` headless on 127.0.0.1:port; HF_ENDPOINT at a closed port (no network)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {"FINETUNE_FIT_PLANS_URL": f"sqlite:///{log_dir / 'plans.sqlite'}",  # a library of its own
           **os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    return subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=(log_dir / "stdout.txt").open("wb"), stderr=(log_dir / "stderr.txt").open("wb"),
    )


def wait_healthy(url: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not become healthy within {timeout_s} s")


# --- one session ----------------------------------------------------------------------------------------------------------


@dataclass
class Result:
    latencies_s: list[float] = field(default_factory=list)
    by_page: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    loads_s: list[float] = field(default_factory=list)  # first load of a session's page (not in the latencies)


class Session:
    """One browser-like session on the app's websocket."""

    def __init__(self, url: str, rerun_timeout_s: float, *, headers: dict[str, str] | None = None,
                 query_string: str = "") -> None:
        self.url, self.headers = url, dict(headers or {})
        self._stack = contextlib.ExitStack()
        self.ws = self._connect()
        self.rerun_timeout_s = rerun_timeout_s
        # The browser's URL query: sent with every rerun, and replaced by what the app writes (st.query_params), as
        # the browser's address bar is; a reconnect sends it to the new session.
        self.query_string = query_string
        self.pages: dict[str, str] = {}  # url path -> page_script_hash
        self.page_hash = ""
        self.widgets: dict[str, tuple[str, str]] = {}  # label -> (widget id, proto type)
        self.states: dict[str, tuple[str, object]] = {}  # widget id -> (value field, value)
        self.metrics: dict[str, str] = {}  # st.metric label -> value shown, of the last rerun

    def _connect(self):
        ws_url = self.url.replace("http://", "ws://").replace("https://", "wss://") + "/_stcore/stream"
        # same origin, as a browser on the app's page sends; a proxy's affinity cookie in ``headers``
        return self._stack.enter_context(connect(ws_url, subprotocols=["streamlit"], max_size=None, open_timeout=30,
                                                 origin=self.url, additional_headers=self.headers or None))

    def close(self) -> None:
        self._stack.close()

    def reconnect(self) -> None:
        """A new websocket, as the browser opens after its connection dropped (same cookie, same URL, same widget
        states): the server it reaches starts a fresh session."""
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.ws = self._connect()

    def rerun(self) -> tuple[float, list[str]]:
        """Send a rerun with the current widget states; return (seconds until script_finished, problems seen)."""
        msg = BackMsg()
        cs = msg.rerun_script
        cs.query_string = self.query_string
        cs.page_script_hash = self.page_hash
        for wid, (kind, value) in self.states.items():
            w = cs.widget_states.widgets.add()
            w.id = wid
            setattr(w, kind, value)
        start = time.perf_counter()
        self.ws.send(msg.SerializeToString())
        problems: list[str] = []
        widgets: dict[str, tuple[str, str]] = {}
        metrics: dict[str, str] = {}
        while True:
            left = self.rerun_timeout_s - (time.perf_counter() - start)
            if left <= 0:
                raise TimeoutError(f"rerun not finished within {self.rerun_timeout_s} s")
            fwd = ForwardMsg()
            fwd.ParseFromString(self.ws.recv(timeout=left))
            kind = fwd.WhichOneof("type")
            if kind == "page_info_changed":
                self.query_string = fwd.page_info_changed.query_string
            elif kind == "new_session":
                if not self.page_hash:
                    self.page_hash = fwd.new_session.page_script_hash
            elif kind == "navigation":  # st.navigation's pages: url path ("time_cost") -> script hash
                self.pages = {(p.url_pathname or ("memory" if p.is_default else p.page_name)): p.page_script_hash
                              for p in fwd.navigation.app_pages}
                # The page that ran: the root URL's landing page moves on to /memory, and later reruns must name
                # /memory itself, as the browser (whose URL has changed) does.
                self.page_hash = fwd.navigation.page_script_hash
            elif kind == "delta" and fwd.delta.WhichOneof("type") == "new_element":
                element = fwd.delta.new_element
                etype = element.WhichOneof("type")
                if etype == "exception":
                    problems.append(f"exception: {element.exception.type}: {element.exception.message[:200]}")
                elif etype == "alert" and element.alert.format == element.alert.ERROR:
                    problems.append(f"st.error: {element.alert.body[:200]}")
                elif etype == "metric":
                    metrics[element.metric.label] = element.metric.body
                elif etype is not None:
                    sub = getattr(element, etype)
                    if hasattr(sub, "id") and hasattr(sub, "label") and sub.id:
                        widgets[sub.label] = (sub.id, etype)
            elif kind == "script_finished":
                status = ForwardMsg.ScriptFinishedStatus.Name(fwd.script_finished)
                if status == "FINISHED_EARLY_FOR_RERUN":
                    continue
                if status != "FINISHED_SUCCESSFULLY":
                    problems.append(f"script finished: {status}")
                self.widgets = widgets or self.widgets
                self.metrics = metrics
                return time.perf_counter() - start, problems

    def set_widget(self, label: str, kind: str, value: object) -> None:
        wid, _ = self.widgets[label]
        self.states[wid] = (kind, value)

    def go_to(self, page: str) -> None:
        self.page_hash = self.pages[page]
        self.states.clear()  # widgets of the shell keep their values through session state


def run_session(url: str, page: str, window: list[float], rerun_timeout_s: float, switch: bool, seed: int,
                result: Result, lock: threading.Lock, think_s: float, ready: threading.Barrier) -> None:
    rng = random.Random(seed)
    pages = list(WIDGET_PAGES.values())
    try:
        session = Session(url, rerun_timeout_s)
    except Exception as exc:  # noqa: BLE001 - counted as an error of the load test
        with lock:
            result.errors.append(f"connect: {type(exc).__name__}: {exc}")
        ready.abort()
        return
    try:
        loaded, problems = session.rerun()  # first load of the default page
        if page != "memory":
            session.go_to(page)
            more, problems = session.rerun()
            loaded += more
        with lock:
            result.loads_s.append(loaded)
            result.errors.extend(problems)
        ready.wait()  # every session has loaded its page: the measured window starts
        deadline = window[0]
        i = 0
        if think_s:
            time.sleep(rng.uniform(0, think_s))  # users do not all click at the same instant
        while time.monotonic() < deadline:
            i += 1
            if switch and i % 7 == 0:
                page = rng.choice([p for p in pages if p != page])
                session.go_to(page)
            else:
                session.set_widget("Micro batch size", "int_value", rng.randint(1, 16))
                if i % 5 == 0:
                    session.set_widget("Gradient checkpointing", "bool_value", rng.random() < 0.5)
            elapsed, problems = session.rerun()
            if os.environ.get("LOAD_DEBUG") and elapsed > 1.0:
                print(f"slow rerun {elapsed:.2f}s page={page} i={i} at {time.monotonic() - deadline:+.1f}s",
                      file=sys.stderr)
            with lock:
                result.latencies_s.append(elapsed)
                result.by_page.setdefault(page, []).append(elapsed)
                result.errors.extend(problems)
            if think_s:
                time.sleep(rng.uniform(0.5 * think_s, 1.5 * think_s))  # the user reads the result
    except Exception as exc:  # noqa: BLE001
        with lock:
            result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        try:
            session.close()
        except Exception:  # noqa: BLE001
            pass


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def server_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc stat fields 14 and 15); 0 without a pid."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s() -> float:
    """User + system CPU seconds of this load client so far (it shares the machine's cores with the server)."""
    t = os.times()
    return t.user + t.system


def run_level(url: str, n: int, duration_s: float, pages: str, rerun_timeout_s: float, think_s: float = 0.0,
              pid: int | None = None) -> dict:
    """One level of ``n`` sessions; with ``pid`` (the server's), also the server's CPU ms per rerun over the window
    (from the start of the window until every session's last rerun answered, over the reruns timed)."""
    result, lock = Result(), threading.Lock()
    window: list[float] = []
    cpu: list[float] = []

    def start_window() -> None:
        window.append(time.monotonic() + duration_s)
        cpu.append(server_cpu_s(pid))
        cpu.append(_own_cpu_s())

    # The sessions open the app together (their first loads are timed apart); the measured window of duration_s
    # starts once all have loaded, so it shows a crowd working, not the crowd arriving.
    ready = threading.Barrier(n + 1, action=start_window)
    names = list(WIDGET_PAGES.values())
    threads = [
        threading.Thread(target=run_session, args=(url, names[i % len(names)] if pages == "all" else pages, window,
                                                   rerun_timeout_s, pages == "all", i, result, lock, think_s, ready),
                         daemon=True)
        for i in range(n)
    ]
    for t in threads:
        t.start()
    try:
        ready.wait(timeout=n * rerun_timeout_s)
    except threading.BrokenBarrierError:
        pass
    ready_at = time.monotonic()
    for t in threads:
        t.join(max(1.0, ready_at + duration_s + rerun_timeout_s + 30 - time.monotonic()))
    lat = result.latencies_s
    cpu_ms = (1e3 * (server_cpu_s(pid) - cpu[0]) / len(lat)) if (pid is not None and cpu and lat) else None
    client_ms = (1e3 * (_own_cpu_s() - cpu[1]) / len(lat)) if (cpu and lat) else None
    loads = result.loads_s
    return {
        "sessions": n, "think_s": think_s, "reruns": len(lat), "p50_ms": round(1e3 * percentile(lat, 50), 1),
        "p95_ms": round(1e3 * percentile(lat, 95), 1), "max_ms": round(1e3 * max(lat), 1) if lat else None,
        "mean_ms": round(1e3 * statistics.fmean(lat), 1) if lat else None, "errors": len(result.errors),
        "server_cpu_ms_per_rerun": round(cpu_ms, 1) if cpu_ms is not None else None,
        "client_cpu_ms_per_rerun": round(client_ms, 1) if client_ms is not None else None,
        "error_samples": sorted(set(result.errors))[:5],
        "load_p50_ms": round(1e3 * percentile(loads, 50), 1), "load_p95_ms": round(1e3 * percentile(loads, 95), 1),
        "by_page": {p: {"reruns": len(v), "p50_ms": round(1e3 * percentile(v, 50), 1),
                        "p95_ms": round(1e3 * percentile(v, 95), 1)} for p, v in sorted(result.by_page.items())},
    }


def check_widget_changes_the_estimate(url: str) -> None:
    """Sanity check of the protocol: a micro batch of 16 shows a larger peak memory than a micro batch of 1."""
    session = Session(url, 60.0)
    try:
        session.rerun()
        peaks = []
        for batch in (1, 16):
            session.set_widget("Micro batch size", "int_value", batch)
            _, problems = session.rerun()
            if problems:
                raise RuntimeError(f"the app reported {problems}")
            peaks.append(session.metrics["Peak memory"])
    finally:
        session.close()
    small, large = (float(p.split()[0].replace(",", "")) for p in peaks)
    if not large > small:
        raise RuntimeError(f"changing the micro batch did not change the peak memory: {peaks}")
    print(f"check: peak memory {peaks[0]} at micro batch 1 -> {peaks[1]} at 16")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="1,10,25", help="comma-separated session counts (default 1,10,25)")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per level (default 20)")
    parser.add_argument("--pages", default="all", choices=["memory", "fit", "time_cost", "plans", "all"],
                        help="page the sessions work on, or 'all' to spread them and switch pages (default all)")
    parser.add_argument("--think", type=float, default=0.0,
                        help="mean seconds a session waits between reruns, as a user reading the result (default 0: "
                             "back to back, the worst case)")
    parser.add_argument("--rerun-timeout", type=float, default=30.0, help="seconds before a rerun counts as failed")
    parser.add_argument("--url", help="an already running server (default: start one on a free port)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    args = parser.parse_args(argv)

    proc = None
    url = args.url
    if url is None:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        proc = start_server(port, Path(tempfile.mkdtemp(prefix="finetune-fit-load-")))
    try:
        wait_healthy(url)
        check_widget_changes_the_estimate(url)
        levels = [int(n) for n in args.sessions.split(",") if n.strip()]
        # Warm up: the first run of each page imports modules and fills the caches.
        run_level(url, 1, 3.0, "all", args.rerun_timeout)
        pid = proc.pid if proc is not None else None
        rows = [run_level(url, n, args.duration, args.pages, args.rerun_timeout, args.think, pid) for n in levels]
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"pages={args.pages} think={args.think:g}s duration={args.duration:g}s per level, {os.cpu_count()} CPUs")
    print(f"{'N':>4} {'reruns':>7} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'errors':>6}   first page load p50/p95 ms"
          "   CPU ms/rerun server, client")
    for r in rows:
        print(f"{r['sessions']:>4} {r['reruns']:>7} {r['p50_ms']:>8} {r['p95_ms']:>8} {r['max_ms']!s:>8} {r['errors']:>6}"
              f"   {r['load_p50_ms']}/{r['load_p95_ms']}   {r['server_cpu_ms_per_rerun'] or '-'}, {r['client_cpu_ms_per_rerun']}")
        for page, stats in r["by_page"].items():
            if len(r["by_page"]) > 1:
                print(f"       {page}: {stats['reruns']} reruns, p50 {stats['p50_ms']} ms, p95 {stats['p95_ms']} ms")
        for sample in r["error_samples"]:
            print(f"       error: {sample}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
