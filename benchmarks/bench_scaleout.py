"""Layout search speed: every TP x PP x CP x EP x DP layout of a cluster (run by hand: ``python
benchmarks/bench_scaleout.py``; not part of the test suite).

Target, so the Scale out page's search answers while the user waits: every case below (thousands to tens of
thousands of layouts each) searched in under 0.5 s on the 2-core development machine. Each case runs 5 times, a
new search each time as the page runs one after a change: the search's own memos start empty, the engine's
per-function caches (GEMM tables of a rank, ring links) stay warm as they do in a running app. The median of this
process's CPU time is checked (on a shared machine the wall time also counts other processes' turns); the median
wall time and the first search's CPU time (those caches cold, as after the app starts) are printed beside it.
Prints layouts searched, how many fit, seconds and microseconds per layout, and exits non-zero when a case misses
the target.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.hardware.gpus import find_gpu  # noqa: E402
from engine.model.build import architecture_from_config  # noqa: E402
from engine.model.sources import config_from_catalog  # noqa: E402
from engine.scaleout.search import search_layouts  # noqa: E402
from engine.scaleout.step_time import Cluster  # noqa: E402
from engine.scenario.training import Scenario  # noqa: E402

CASES = (("meta-llama/Llama-3.1-8B", 2, 128), ("meta-llama/Llama-3.1-70B", 4, 256), ("meta-llama/Llama-3.1-405B", 16, 512),
         ("mistralai/Mixtral-8x7B-v0.1", 4, 256))
TARGET_S = 0.5
REPEAT = 5


def main() -> int:
    failures = []
    for repo, nodes, gbs in CASES:
        arch = architecture_from_config(config_from_catalog(repo)[0])
        cluster = Cluster(gpu=find_gpu("H100 SXM"), nodes=nodes)
        walls, cpus = [], []
        for _ in range(REPEAT):
            start, cpu = time.perf_counter(), time.process_time()
            found = search_layouts(arch, Scenario(seq_len=4096), cluster, gbs)
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - start)
        cpu, wall = statistics.median(cpus), statistics.median(walls)
        print(f"{repo:32s} {nodes:3d} x 8 H100, gbs {gbs}: {len(found):6d} layouts, {sum(c.fits for c in found):5d} fit, "
              f"{cpu:.3f} s CPU ({cpu / len(found) * 1e6:.0f} us/layout), {wall:.3f} s wall, first {cpus[0]:.3f} s CPU")
        if cpu > TARGET_S:
            failures.append(f"{repo}: {cpu:.3f} s > {TARGET_S} s")
    print(f"({os.cpu_count()} CPUs) " + ("OK" if not failures else "MISSED: " + "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
