"""Fit engine and fit page speed (run by hand: ``python benchmarks/bench_fit.py``; not part of the test suite).

Targets, so the GPU fit page stays interactive when a widget changes:
- the full matrix, every catalog model x every GPU x the techniques of engine.plan.fit.TECHNIQUES (10) (and each model's
  serving row): at least 10,000 cells in 100 ms, i.e. at most 10 us a cell, row estimates included. Wall time and this
  process's CPU time are both printed (on a shared machine the wall time includes other processes' turns); the target
  is checked on the CPU time;
- the what-fits search (largest micro batch and longest sequence) for one model on one GPU: reported;
- a rerun of pages/fit.py (AppTest, the whole script with both heatmaps, what fits and the seed table): < 300 ms.
Prints the figures (median of repeats) and exits non-zero when a target is missed.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import median_cpu_ms, median_ms  # noqa: E402
from engine.model.build import architecture_from_config  # noqa: E402
from engine.hardware.gpus import find_gpu, load_gpus  # noqa: E402
from engine.model.catalog import load_models  # noqa: E402
from engine.plan.fit import TECHNIQUES, _catalog_technique_scenario, model_matrix, technique_matrix, what_fits  # noqa: E402
from engine.memory.parallel import Strategy  # noqa: E402
from engine.scenario.training import Method, Scenario  # noqa: E402


def page_rerun_ms(repeat: int = 7) -> float:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "streamlit_app.py"), default_timeout=60).switch_page("pages/fit.py").run()
    assert not at.exception, [e.value for e in at.exception]
    seq = [2048, 4096]
    times = []
    for i in range(repeat):
        at.number_input(key="seq_len").set_value(seq[i % 2])  # a real change, so nothing is reused
        start = time.perf_counter()
        at.run()
        times.append((time.perf_counter() - start) * 1e3)
        assert not at.exception, [e.value for e in at.exception]
    return statistics.median(times)


def main() -> int:
    gpus = load_gpus()
    models = [(m.name, architecture_from_config(m.config)) for m in load_models()]
    base = Scenario()
    cells = len(models) * len(gpus) * len(TECHNIQUES)

    def full_matrix() -> None:
        _catalog_technique_scenario.cache_clear()  # every timed run starts cold: nothing kept from the previous one
        for _, arch in models:
            technique_matrix(arch, base, gpus)

    wall = median_ms(full_matrix, repeat=9)
    full = median_cpu_ms(full_matrix, repeat=9)
    print(f"full matrix: {len(models)} models x {len(gpus)} GPUs x {len(TECHNIQUES)} techniques = {cells:,} cells: "
          f"{wall:.1f} ms wall, {full:.1f} ms CPU = {1e3 * full / cells:.1f} us a cell = {1e4 * full / cells:.0f} ms per "
          "10,000 cells")
    one = median_ms(lambda: model_matrix(models, base, gpus, Strategy.ZERO3))
    print(f"models x GPUs for one scenario ({len(models) * len(gpus)} cells, ZeRO-3 fewest GPUs): {one:.1f} ms")

    worst_wf, worst_name = 0.0, ""
    lora = Scenario.build(method=Method.LORA, gradient_checkpointing=True)
    h100 = find_gpu("H100 SXM")
    for name, arch in models:
        t = median_ms(lambda: what_fits(arch, lora, h100), repeat=5)
        if t > worst_wf:
            worst_wf, worst_name = t, name
    llama = dict(models).get("Llama 3.1 8B")
    wf_llama = median_ms(lambda: what_fits(llama, lora, h100), repeat=5) if llama else float("nan")
    print(f"what fits on one H100 (LoRA; micro batch + sequence, binary search): Llama 3.1 8B {wf_llama:.1f} ms; "
          f"slowest model {worst_name} {worst_wf:.1f} ms")

    rerun = page_rerun_ms()
    print(f"pages/fit.py rerun after a scenario change (AppTest, {os.cpu_count()} CPUs): {rerun:.0f} ms")

    failures = [f"{name}: {value:.1f} ms > {target} ms"
                for name, value, target in (("10,000 cells", 1e4 * full / cells, 100), ("page rerun", rerun, 300))
                if value > target]
    print("OK" if not failures else "MISSED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
