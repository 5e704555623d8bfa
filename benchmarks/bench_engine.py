"""Engine speed targets (run by hand: ``python benchmarks/bench_engine.py``; not part of the test suite).

Targets, so the app stays interactive when every widget change recomputes:
- architecture_from_config + estimate_memory for any bundled model: < 5 ms median;
- the 9-bar technique x precision sweep of the Memory page: < 50 ms median;
- a 671B-scale MoE config (256 experts, 61 layers): < 50 ms for the sweep;
- the step-time model on top of a memory estimate (estimate_throughput with the estimate given), for any bundled model
  with LoRA and full fine-tuning: < 50 us median once the scenario's work is cached (every plan of the plan search,
  every rerun that keeps the scenario); the first call for a new scenario (work not cached) is reported.
Exits non-zero when a target is missed.
"""

from __future__ import annotations

import sys
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


def time_model_us() -> tuple[float, float]:
    """Worst median (warm, cold) microseconds of estimate_throughput over the bundled models, LoRA and full."""
    gpu = find_gpu("A100 80GB")
    warm = cold = 0.0
    for model in load_models():
        arch = architecture_from_config(model.config)
        for sc in (Scenario.build(method="lora"), Scenario.build(method="full")):
            est = estimate_memory(arch, sc, gpu)

            def first() -> None:
                time_step._WORK.clear()
                estimate_throughput(arch, sc, gpu, estimate=est)

            estimate_throughput(arch, sc, gpu, estimate=est)
            warm = max(warm, median_ms(lambda: estimate_throughput(arch, sc, gpu, estimate=est), repeat=200) * 1e3)
            cold = max(cold, median_ms(first, repeat=50) * 1e3)
    return warm, cold


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
    warm, cold = time_model_us()
    print(f"step-time model on an estimate: {warm:.1f} us (work cached), {cold:.1f} us (new scenario), worst model")
    for name, value, target in (("single", worst_single, 5), ("sweep", worst_sweep, 50), ("moe sweep", big_sweep, 50),
                                ("time model (ms)", warm / 1e3, 0.05)):
        if value > target:
            failures.append(f"{name}: {value:.2f} ms > {target} ms")
    print("OK" if not failures else "MISSED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
