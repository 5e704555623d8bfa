"""Rerun latency of every page after a widget change, as the browser sees it (run by hand; not part of the tests).

Starts ``streamlit run streamlit_app.py`` (or uses ``--url``), opens one session per page over the app's websocket
with the client of ``benchmarks/load.py`` (Streamlit's own ``BackMsg``/``ForwardMsg`` protocol, as the browser
speaks it), loads the page, then changes a widget ``--reruns`` times and times each rerun from the message sent to
the ``script_finished`` that answers it: the server's whole rerun, deltas serialised and sent, which is what keeps
a browser waiting (the browser's own drawing is not counted). The widgets: the micro batch size on every page with
the training sidebar (the sequence length on Scale out, whose layout takes only micro batches dividing its batch) (and every fifth rerun the gradient checkpointing toggle), the Model picker's model on the
pages without it (Model, GPUs & prices, Methodology). One session at a time: the figure is one user's rerun.

Target: p95 under 300 ms on every page (2 cores). Prints one line per page (p50, p95, max in ms, and, when it
started the server, the server's CPU time per rerun from /proc: on a shared machine the wall time moves with the
neighbours' load, the CPU time much less) and exits non-zero when a page misses it.

Usage::

    python benchmarks/bench_reruns.py                 # every page, 30 reruns each
    python benchmarks/bench_reruns.py --pages fit,memory --reruns 60
    python benchmarks/bench_reruns.py --cycle 10 --port 9190   # values seen before: the cache-hit path of load.py
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from engine.model.sources import catalog_choices  # noqa: E402
from load import Session, free_port, percentile, start_server, wait_healthy  # noqa: E402

PAGES = ("memory", "model", "fit", "time_cost", "plans", "scale_out", "gpus", "methodology")
TARGET_P95_MS = 300.0
# Scale out: the micro batch must divide the layout's global batch (64 over 8 data-parallel ranks by default), so the
# sequence length is the sidebar value changed there.
SEQUENCE_PAGES = ("scale_out",)


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc; fields 14 and 15 of its stat line)."""
    import os

    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _change(session: Session, page: str, i: int, cycle: int) -> None:
    """The i-th widget change of a page's timed reruns (module docstring); with ``cycle``, one of ``cycle`` values."""
    choices = dict(catalog_choices())  # the picker's options, formatted as its selectbox shows them
    models = [f"{choices[r]} · {r}" for r in ("Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B")]
    if cycle:
        i %= cycle
    if page in SEQUENCE_PAGES:
        session.set_widget("Sequence length", "int_value", 1024 + 128 * i)  # never seen before (without cycle)
    elif "Micro batch size" in session.widgets:
        session.set_widget("Micro batch size", "int_value", 2 + i)  # without cycle never seen before: no cache answers
        if i % 5 == 4:
            session.set_widget("Gradient checkpointing", "bool_value", i % 10 == 4)
    else:
        session.set_widget("Model", "string_value", models[i % 2])  # a selectbox sends the option as shown


def time_page(url: str, page: str, reruns: int, cpu: list[float] | None = None, pid: int | None = None,
              cycle: int = 0) -> list[float]:
    """Wall ms of each rerun; with ``pid``, the server's CPU seconds over the timed reruns appended to ``cpu``.
    ``cycle`` > 0: the changed value goes round ``cycle`` values seen in a first, untimed pass (the pages' caches
    answer, as for the load test's visitors), instead of a value never seen before."""
    session = Session(url, 60.0)
    try:
        session.rerun()  # the root URL: the landing page moves on to /memory
        if page != "memory":
            session.go_to(page)
            session.rerun()
        session.rerun()  # warm: caches of this page filled once, as after a visitor's first look
        times = []
        if cycle:
            for i in range(cycle):  # seen once, untimed: the timed reruns below find these values in the caches
                _change(session, page, i, cycle)
                session.rerun()
        start_cpu = cpu_seconds(pid) if pid is not None else 0.0
        for i in range(reruns):
            _change(session, page, i, cycle)
            elapsed, problems = session.rerun()
            if problems:
                raise RuntimeError(f"{page}: {problems}")
            times.append(elapsed * 1e3)
        if pid is not None and cpu is not None:
            cpu.append(cpu_seconds(pid) - start_cpu)
        return times
    finally:
        session.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", default=",".join(PAGES))
    parser.add_argument("--reruns", type=int, default=30)
    parser.add_argument("--url", help="an already running server (default: start one)")
    parser.add_argument("--cycle", type=int, default=0,
                        help="go round this many values seen before (cache hits) instead of new ones (default 0)")
    parser.add_argument("--port", type=int, help="the port of the server it starts (default: a free one)")
    args = parser.parse_args(argv)
    proc = None
    url = args.url
    if url is None:
        port = args.port or free_port()
        proc = start_server(port, Path(tempfile.mkdtemp(prefix="bench_reruns_")))
        url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url)
        missed = []
        for page in args.pages.split(","):
            cpu: list[float] = []
            times = time_page(url, page, args.reruns, cpu, proc.pid if proc is not None else None,
                              args.cycle)
            p50, p95, worst = percentile(times, 50), percentile(times, 95), max(times)
            per_rerun = f"  server CPU {cpu[0] / len(times) * 1e3:5.1f} ms/rerun" if cpu else ""
            print(f"{page:12s} reruns {len(times):3d}  p50 {p50:6.0f} ms  p95 {p95:6.0f} ms  max {worst:6.0f} ms{per_rerun}")
            if p95 > TARGET_P95_MS:
                missed.append(page)
        print("OK" if not missed else f"MISSED (p95 > {TARGET_P95_MS:.0f} ms): {', '.join(missed)}")
        return 1 if missed else 0
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
