"""Tracer speed and memory targets (run by hand: ``python benchmarks/bench_trace.py``; needs the [trace] extra).

Targets (2 CPU cores):
- Llama-3.2-1B, b=1 s=2048 (full, bf16 autocast, fused AdamW): < 10 s wall and < 2 GB peak RSS of the worker;
- Llama-3.1-8B, b=1 s=2048: < 30 s wall.
Wall time is what a caller of ``trace_training_step`` waits (worker start, imports, model build on fake tensors,
two steps); RSS is the worker's peak resident memory (``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss``), each case
measured in a fresh process so that one case's peak does not hide another's. The first-ever run also compiles the
fake CUDA extension: its build time is measured separately (``--build``, into a temporary cache folder).
Exits non-zero when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = {
    "llama-1b": ("meta-llama/Llama-3.2-1B", dict(precision="amp_bf16", micro_batch_size=1, seq_len=2048), 10.0, 2.0),
    "llama-1b-lora-gc": ("meta-llama/Llama-3.2-1B", dict(precision="bf16", method="lora", gradient_checkpointing=True,
                                                         micro_batch_size=1, seq_len=2048), 10.0, 2.0),
    "llama-8b": ("meta-llama/Llama-3.1-8B", dict(precision="amp_bf16", micro_batch_size=1, seq_len=2048), 30.0, None),
}
"""name -> (catalog repo id, scenario fields, wall-time target s, RSS target GB or None)."""


def one(name: str) -> None:
    """Trace one case in this process's child worker; print its figures as JSON."""
    from engine.model.catalog import catalog_model
    from engine.scenario.training import Scenario
    from engine.trace import trace_training_step

    repo, fields, _, _ = CASES[name]
    t0 = time.perf_counter()
    res = trace_training_step(catalog_model(repo).config, Scenario.build(**fields))
    wall = time.perf_counter() - t0
    rss_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # Linux: kilobytes
    print(json.dumps({"case": name, "wall_s": round(wall, 2), "trace_s": res.trace_seconds, "worker_rss_gb": round(rss_kb / 1e6, 3),
                      "peak_allocated_gb": round(res.peak_allocated_bytes / 1e9, 3), "kernel": res.attention_kernel}))


def build_time() -> float:
    """Seconds to compile the fake CUDA extension from scratch (in a throwaway cache folder)."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, FINETUNE_FIT_CACHE=tmp)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "engine.trace.fake_cuda"], cwd=ROOT, env=env, check=True, capture_output=True)
        return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", choices=list(CASES), help=argparse.SUPPRESS)
    ap.add_argument("--build", action="store_true", help="also time a first build of the extension")
    args = ap.parse_args()
    if args.one:
        one(args.one)
        return 0
    failures = []
    if args.build:
        print(f"first build of the fake CUDA extension: {build_time():.1f} s")
    # Warm the extension cache so that the cases measure tracing, not compiling.
    subprocess.run([sys.executable, "-m", "engine.trace.fake_cuda"], cwd=ROOT, check=True, capture_output=True)
    for name, (_, _, wall_target, rss_target) in CASES.items():
        out = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, cwd=ROOT)
        if out.returncode != 0:
            failures.append(f"{name}: {out.stderr.strip().splitlines()[-1:]}")
            continue
        fig = json.loads(out.stdout.strip().splitlines()[-1])
        verdict = "ok"
        if fig["wall_s"] > wall_target or (rss_target and fig["worker_rss_gb"] > rss_target):
            verdict = "MISSED"
            failures.append(name)
        rss = f" (target < {rss_target} GB)" if rss_target else ""
        print(f"{name:18s} wall {fig['wall_s']:6.2f} s (target < {wall_target:.0f} s), trace {fig['trace_s']:.2f} s, "
              f"worker RSS {fig['worker_rss_gb']:.2f} GB{rss}, peak {fig['peak_allocated_gb']:.2f} GB, "
              f"{fig['kernel']}: {verdict}")
    for f in failures:
        print(f"target missed: {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
