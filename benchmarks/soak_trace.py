"""Where a soak's memory goes: the soak's waves against a server that runs under ``tracemalloc``, snapshots compared.

The server is ``streamlit run streamlit_app.py`` as benchmarks/load.py starts it, but inside a small wrapper that
starts ``tracemalloc`` (``--frames`` frames per allocation) and, every ``--every`` seconds, runs a full collection and
dumps a snapshot (``tracemalloc.Snapshot.dump``) to ``--out``. The driver runs benchmarks/soak.py's waves meanwhile.
At the end the snapshots at ``--base`` and ``--at`` minutes are compared grouped by traceback, and the tracebacks
that grew most are printed. tracemalloc counts every Python allocation, also the blocks ``gc.get_objects`` does not
see (str, bytes, int, float).

    python benchmarks/soak_trace.py --minutes 11 --sessions 10 --base 4 --at 10
    python benchmarks/soak_trace.py --compare OUT/snap-004.pickle OUT/snap-010.pickle   # compare two saved ones

tracemalloc makes the server about 2-3x slower and bigger: use it to find what grows, not to measure RSS (soak.py).
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import ROOT, free_port, run_level, wait_healthy  # noqa: E402


def runtime_stats() -> str:
    """Streamlit's per-session stores in this server process (private attributes, read only; Streamlit 1.67): open
    sessions, closed ones kept for reconnecting, the media manager's sessions and files (bytes held), the lazy dataframe
    sources and the uploaded files."""
    try:
        from streamlit import runtime

        rt = runtime.get_instance()
        mgr, media = rt._session_mgr, rt.media_file_mgr
        files = media._storage._files_by_id
        held = sum(len(f.content) for f in list(files.values()))
        return (f"sessions {len(mgr._active_session_info_by_id)} stored {len(mgr._session_storage._cache._data)} "
                f"media-sessions {len(media._files_by_session_and_coord)} media-files {len(files)} "
                f"({held / 2**20:.1f} MiB) deferred {len(media._deferred_callables)} "
                f"df-sources {len(rt.dataframe_source_mgr._sources)} "
                f"uploads {sum(len(v) for v in rt.uploaded_file_mgr.file_storage.values())}")
    except Exception as exc:  # noqa: BLE001 - a look inside private state, best effort
        return f"runtime ? ({type(exc).__name__}: {exc})"


def heap_stats() -> str:
    """One line of where this process's memory is (this process): RSS, glibc malloc (mallinfo2: from the OS, in use,
    free, mmapped chunks), Python's allocated blocks, Arrow's memory pool and the live threads. Sizes in MiB."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    mi = libc.mallinfo2()
    rss = next(int(line.split()[1]) / 1024 for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmRSS:"))
    arrow = "-"
    if "pyarrow" in sys.modules:
        pool = sys.modules["pyarrow"].default_memory_pool()
        arrow = f"{pool.backend_name} {pool.bytes_allocated() / 2**20:.1f} (max {pool.max_memory() / 2**20:.1f})"
    mib = 2**20
    return (runtime_stats() + " " +f"rss {rss:.0f} malloc-arena {mi.arena / mib:.0f} in-use {mi.uordblks / mib:.0f} free {mi.fordblks / mib:.0f}"
            f" mmapped {mi.hblkhd / mib:.0f} ({mi.hblks}) py-blocks {sys.getallocatedblocks()} arrow {arrow}"
            f" threads {threading.active_count()}")


def serve(out: Path, frames: int, every_s: float, argv: list[str]) -> None:
    """In the server process: tracemalloc on (``frames`` > 0), a snapshot every ``every_s`` seconds and a line of
    :func:`heap_stats` every 10 s to ``out/stats.txt``, then Streamlit's own CLI."""
    if frames:
        tracemalloc.start(frames)
    start = time.monotonic()

    def stats() -> None:
        with (out / "stats.txt").open("a") as f:
            while True:
                time.sleep(10)
                f.write(f"{time.monotonic() - start:6.0f} s {heap_stats()}\n")
                f.flush()

    threading.Thread(target=stats, daemon=True).start()

    def dump() -> None:
        n = 0
        while True:
            n += 1
            time.sleep(max(0.0, start + n * every_s - time.monotonic()))
            gc.collect()
            if frames:
                snap = tracemalloc.take_snapshot()
                snap.dump(str(out / f"snap-{round(n * every_s / 60):03d}.pickle"))
            traced, _ = tracemalloc.get_traced_memory()
            print(f"snapshot {n} at {time.monotonic() - start:.0f} s: {traced / 2**20:.1f} MiB traced, after a full "
                  f"collection: {len(gc.get_objects())} gc objects, {heap_stats()}", file=sys.stderr, flush=True)

    threading.Thread(target=dump, daemon=True).start()
    from streamlit.web.cli import main as streamlit_main

    sys.argv = ["streamlit", "run", "streamlit_app.py", *argv]
    streamlit_main()


def compare(base: Path, at: Path, top: int, frames: int) -> None:
    """Print the tracebacks whose traced memory grew most from ``base`` to ``at`` (sizes in KiB)."""
    a, b = tracemalloc.Snapshot.load(str(base)), tracemalloc.Snapshot.load(str(at))
    noise = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")]
    a, b = a.filter_traces(noise), b.filter_traces(noise)
    ta = sum(s.size for s in a.statistics("filename"))
    tb = sum(s.size for s in b.statistics("filename"))
    print(f"traced {ta / 2**20:.1f} -> {tb / 2**20:.1f} MiB ({(tb - ta) / 2**20:+.1f})")
    for kind in ("filename", "lineno"):
        print(f"--- by {kind}")
        for s in b.compare_to(a, kind)[:top]:
            print(f"{s.size_diff / 1024:+9.0f} KiB {s.count_diff:+7d} blocks  now {s.size / 1024:8.0f} KiB  "
                  f"{s.traceback[0]}")
    print("--- by traceback")
    for s in b.compare_to(a, "traceback")[:top]:
        print(f"{s.size_diff / 1024:+9.0f} KiB {s.count_diff:+7d} blocks  now {s.size / 1024:8.0f} KiB")
        for line in s.traceback.format(limit=frames, most_recent_first=True):
            print("    " + line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)  # internal: run as the traced server
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("BASE", "AT"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--frames", type=int, default=15)
    parser.add_argument("--every", type=float, default=60.0, help="seconds between snapshots (default 60)")
    parser.add_argument("--minutes", type=float, default=11.0)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--wave", type=float, default=30.0)
    parser.add_argument("--think", type=float, default=2.0)
    parser.add_argument("--base", type=int, default=4, help="minute of the base snapshot (default 4)")
    parser.add_argument("--at", type=int, default=10, help="minute of the later snapshot (default 10)")
    parser.add_argument("--top", type=int, default=25)
    args, rest = parser.parse_known_args(argv)
    if args.serve:
        serve(args.serve, args.frames, args.every, rest)
        return 0
    if args.compare:
        compare(*args.compare, args.top, args.frames)
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="finetune-fit-trace-"))
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = {"FINETUNE_FIT_PLANS_URL": f"sqlite:///{out / 'plans.sqlite'}", **os.environ,
           "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}", "HF_HUB_DISABLE_TELEMETRY": "1"}
    env.pop("HF_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve", str(out), "--frames", str(args.frames),
         "--every", str(args.every), "--server.address", "127.0.0.1", "--server.port", str(port),
         "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=(out / "stdout.txt").open("wb"), stderr=(out / "stderr.txt").open("wb"))
    url = f"http://127.0.0.1:{port}"
    errors = waves = 0
    try:
        wait_healthy(url, 120)
        start = time.monotonic()
        while time.monotonic() - start < 60 * args.minutes:
            row = run_level(url, args.sessions, args.wave, "all", 300.0, args.think)
            waves += 1
            errors += row["errors"]
            print(f"wave {waves} at {(time.monotonic() - start) / 60:.1f} min: {row['reruns']} reruns, "
                  f"{row['errors']} errors {row['error_samples'][:2]}", flush=True)
        time.sleep(5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(f"{waves} waves x {args.sessions} sessions, {errors} errors; snapshots in {out}")
    base, at = out / f"snap-{args.base:03d}.pickle", out / f"snap-{args.at:03d}.pickle"
    if base.exists() and at.exists():
        compare(base, at, args.top, args.frames)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
