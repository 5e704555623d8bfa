"""Engine speed targets (run by hand: ``python benchmarks/bench_engine.py``; not part of the test suite).

Targets, so the app stays interactive when every widget change recomputes:
- architecture_from_config + estimate_memory for any bundled model: < 5 ms median;
- the 9-bar technique x precision sweep of the Memory page: < 50 ms median;
- a 671B-scale MoE config (256 experts, 61 layers): < 50 ms for the sweep;
- the step-time model on top of a memory estimate (estimate_throughput with the estimate given), for any bundled model
  with LoRA and full fine-tuning: < 50 us median, both for the first call of a new scenario (a sequence length not
  seen before, so nothing scenario-dependent is cached; the architecture's tables are) and for a repeated call (every
  plan of the plan search, every rerun that keeps the scenario). Printed per model beside the memory estimate alone;
  the first call on an architecture never seen (its tables built too) is reported.
Exits non-zero when a target is missed.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from timing import median_ms  # noqa: E402

from engine.model.build import architecture_from_config  # noqa: E402
from engine.model.catalog import load_models  # noqa: E402
from engine.memory.estimate import estimate_memory  # noqa: E402
from engine.scenario.training import Scenario  # noqa: E402
from engine.memory.sweep import sweep_techniques  # noqa: E402
from engine.hardware.gpus import find_gpu  # noqa: E402
from engine.time import step as time_step  # noqa: E402
from engine.time.throughput import estimate_throughput  # noqa: E402


NEW_SCENARIOS = 40
"""Distinct scenarios per model and method for the first-call figure (sequence lengths 256, 264, ...)."""


def _clear_time_caches() -> None:
    """Forget every cached work and per-architecture table of the time model (an architecture never seen)."""
    time_step._WORK.clear()
    tables = getattr(time_step, "_METHODS", None)  # absent before the per-architecture tables existed
    if tables is not None:
        tables.clear()


def _once_us(fn) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e6


def time_model_us(arch, method: str, gpu) -> tuple[float, float, float, float]:
    """Median microseconds for one model and method: (memory estimate alone, + time model first call for a new
    scenario, + time model repeated call, + time model first call on an architecture never seen)."""
    memory, first, fresh = [], [], []
    for i in range(NEW_SCENARIOS):
        sc = Scenario.build(method=method, seq_len=256 + 8 * i)
        memory.append(_once_us(lambda: estimate_memory(arch, sc, gpu)))
        est = estimate_memory(arch, sc, gpu)
        first.append(_once_us(lambda: estimate_throughput(arch, sc, gpu, estimate=est)))
        _clear_time_caches()
        fresh.append(_once_us(lambda: estimate_throughput(arch, sc, gpu, estimate=est)))
    repeated = median_ms(lambda: estimate_throughput(arch, sc, gpu, estimate=est), repeat=200) * 1e3
    return statistics.median(memory), statistics.median(first), repeated, statistics.median(fresh)


def time_model_table() -> tuple[float, float, float]:
    """Print the per-model table; return the worst (first call, repeated call, never-seen architecture) in us."""
    gpu = find_gpu("A100 80GB")
    print(f"\nstep-time model on an A100 80GB, median us ({NEW_SCENARIOS} new scenarios per cell):")
    print(f"{'':40s} {'LoRA: memory  +time 1st  +repeat':>34s}   {'full: memory  +time 1st  +repeat':>34s}")
    worst = [0.0, 0.0, 0.0]
    for model in load_models():
        arch = architecture_from_config(model.config)
        cells = []
        for method in ("lora", "full"):
            mem, first, rep, fresh = time_model_us(arch, method, gpu)
            worst = [max(worst[0], first), max(worst[1], rep), max(worst[2], fresh)]
            cells.append(f"{mem:12.1f} {first:9.1f} {rep:8.1f}")
        print(f"{model.repo_id:40s} {cells[0]:>34s}   {cells[1]:>34s}")
    return worst[0], worst[1], worst[2]


def main() -> int:
    scenario = Scenario.build(method="lora")
    failures = []
    worst_single, worst_sweep = 0.0, 0.0
    for model in load_models():
        single = median_ms(lambda: estimate_memory(architecture_from_config(model.config), scenario))
        arch = architecture_from_config(model.config)
        sweep = median_ms(lambda: sweep_techniques(arch, scenario), repeat=10)
        worst_single, worst_sweep = max(worst_single, single), max(worst_sweep, sweep)
        print(f"{model.repo_id:40s} single {single:6.2f} ms   sweep {sweep:6.2f} ms")
    big = {"model_type": "mixtral", "hidden_size": 7168, "intermediate_size": 2048, "num_hidden_layers": 61,
           "num_attention_heads": 128, "num_key_value_heads": 128, "vocab_size": 129280,
           "num_local_experts": 256, "num_experts_per_tok": 8}
    big_arch = architecture_from_config(big)
    big_sweep = median_ms(lambda: sweep_techniques(big_arch, scenario), repeat=10)
    print(f"671B-scale MoE ({big_arch.total_parameters / 1e9:.0f}B params) sweep {big_sweep:.2f} ms")
    first, repeated, fresh = time_model_table()
    print(f"step-time model on an estimate, worst model: {first:.1f} us first call (new scenario), {repeated:.1f} us "
          f"repeated; {fresh:.1f} us first call on an architecture never seen (reported)")
    for name, value, target in (("single", worst_single, 5), ("sweep", worst_sweep, 50), ("moe sweep", big_sweep, 50),
                                ("time model first call (ms)", first / 1e3, 0.05),
                                ("time model repeated call (ms)", repeated / 1e3, 0.05)):
        if value > target:
            failures.append(f"{name}: {value:.2f} ms > {target} ms")
    print("OK" if not failures else "MISSED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
