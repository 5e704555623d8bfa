"""Memory soak: one server, wave after wave of new visitors, its resident memory (RSS) sampled as they come and go.

Each wave is benchmarks/load.py's crowd (``--sessions`` visitors spread over the pages with the training sidebar,
changing the micro batch and the checkpointing toggle, switching pages) for ``--wave`` seconds; the next wave is new
sessions, so over 15 minutes at the defaults 25 x 30 waves = 750 sessions open and close. The server's caches are
bounded (pages/fit.py: 32 entries each, pages/time_cost.py: 128, 4 kinds x 32; the Hub reads: 256 configs; sessions
are dropped ``server.disconnectedSessionTTL`` after they close), so RSS must level off: the target is under 5% growth
from the end of the warm-up (``--warmup``, 5 minutes) to the end. The visitors try 32 scenarios (micro batch 1-16,
checkpointing on or off) on the default sections, so the caches they reach are full after about 2 minutes.

    python benchmarks/soak.py                          # 15 minutes
    python benchmarks/soak.py --minutes 6 --warmup 2   # a shorter look

Prints the RSS samples (MB) and the growth after the warm-up; exits 1 when it is 5% or more, or on load errors.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import free_port, run_level, start_server, wait_healthy  # noqa: E402

TARGET_GROWTH = 0.05


def rss_mb(pid: int) -> float:
    """Resident memory of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=5.0, help="minutes before the growth is measured (default 5)")
    parser.add_argument("--sessions", type=int, default=25, help="visitors per wave (default 25)")
    parser.add_argument("--wave", type=float, default=30.0, help="seconds per wave (default 30)")
    parser.add_argument("--think", type=float, default=2.0, help="mean seconds between a visitor's changes")
    args = parser.parse_args(argv)
    port = free_port()
    proc = start_server(port, Path(tempfile.mkdtemp(prefix="finetune-fit-soak-")))
    url = f"http://127.0.0.1:{port}"
    samples: list[tuple[float, float]] = []
    done = threading.Event()
    errors = 0
    samples_of_errors: set[str] = set()
    try:
        wait_healthy(url)
        start = time.monotonic()

        def sample() -> None:
            while not done.wait(10.0):
                samples.append((time.monotonic() - start, rss_mb(proc.pid)))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        waves = 0
        while time.monotonic() - start < 60 * args.minutes:
            row = run_level(url, args.sessions, args.wave, "all", 30.0, args.think)
            waves += 1
            errors += row["errors"]
            samples_of_errors.update(row["error_samples"])
        done.set()
        sampler.join()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    after = [(t, m) for t, m in samples if t >= 60 * args.warmup]
    if not after:
        print("no sample after the warm-up: run longer")
        return 1
    base, end = after[0][1], after[-1][1]
    growth = (end - base) / base
    print(f"{waves} waves x {args.sessions} sessions ({waves * args.sessions} sessions) in {args.minutes:g} min, "
          f"{errors} errors")
    for sample in sorted(samples_of_errors)[:5]:
        print(f"  error: {sample}")
    print("RSS MB every 10 s: " + " ".join(f"{m:.0f}" for _, m in samples))
    print(f"RSS at {after[0][0] / 60:.1f} min {base:.0f} MB, at the end {end:.0f} MB, max {max(m for _, m in samples):.0f}"
          f" MB: growth after the warm-up {growth:+.1%} (target < {TARGET_GROWTH:.0%})")
    return 0 if growth < TARGET_GROWTH and not errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
