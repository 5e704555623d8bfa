"""Layout search speed: every TP x PP x CP x EP x DP layout of a cluster, timed (target: thousands in well under a second).

Run: ``python benchmarks/bench_scaleout.py``. Prints layouts searched, how many fit, seconds and microseconds per layout.
"""

from __future__ import annotations

import time

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.hardware.gpus import find_gpu  # noqa: E402
from engine.model.build import architecture_from_config  # noqa: E402
from engine.model.sources import config_from_catalog
from engine.scaleout.search import search_layouts
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario

CASES = (("meta-llama/Llama-3.1-8B", 2, 128), ("meta-llama/Llama-3.1-70B", 4, 256), ("meta-llama/Llama-3.1-405B", 16, 512),
         ("mistralai/Mixtral-8x7B-v0.1", 4, 256))


def main() -> None:
    for repo, nodes, gbs in CASES:
        arch = architecture_from_config(config_from_catalog(repo)[0])
        cluster = Cluster(gpu=find_gpu("H100 SXM"), nodes=nodes)
        start = time.perf_counter()
        found = search_layouts(arch, Scenario(seq_len=4096), cluster, gbs)
        dt = time.perf_counter() - start
        print(f"{repo:32s} {nodes:3d} x 8 H100, gbs {gbs}: {len(found):6d} layouts, {sum(c.fits for c in found):5d} fit, "
              f"{dt:.3f} s ({dt / len(found) * 1e6:.0f} us/layout)")


if __name__ == "__main__":
    main()
