"""Check the fake-tensor trace against a real GPU: ``torch.cuda.max_memory_allocated()`` of the same steps.

Needs a CUDA build of torch, a GPU and the [trace] extra (transformers, peft). For each scenario it
1. traces it (``engine.trace.trace_training_step``: fake tensors, the GPU's attention kernel emulated),
2. runs the same two Trainer-like steps for real on the GPU (random weights, native kernel choice, no
   emulation patches), resetting the peak statistics at the start of the second step, and
3. prints the traced steady-state peak, the real ``max_memory_allocated`` of that step, the real run counted
   by the tracer's own counter, and the difference (target: within 2%).
Exit status 1 when a difference exceeds ``--tolerance`` percent. ``--help`` works without a GPU.

Known, small, expected differences: cuBLAS/cuBLASLt workspaces come from the caching allocator on recent
torch (a few MiB, not tensors: invisible to the trace); flash attention's backward workspace (an fp32
``dq`` accumulator per layer, transient) is allocated inside the kernel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SCENARIOS = [
    ("meta-llama/Llama-3.2-1B", dict(precision="bf16", micro_batch_size=4, seq_len=1024)),
    ("meta-llama/Llama-3.2-1B", dict(precision="amp_bf16", gradient_checkpointing=True, micro_batch_size=4, seq_len=1024)),
    ("meta-llama/Llama-3.2-1B", dict(precision="bf16", method="lora", micro_batch_size=2, seq_len=1024)),
    ("Qwen/Qwen2.5-0.5B", dict(precision="amp_bf16", attention="sdpa", micro_batch_size=4, seq_len=1024)),
]
"""(catalog repo id, scenario fields): full bf16, bf16 autocast with checkpointing, LoRA, Qwen SDPA."""


def real_peak(config: dict, scenario) -> tuple[int, int]:
    """(max_memory_allocated of step 2, the tracer's count of the real step 2) for ``scenario`` on the GPU.

    Measured without the counting mode (an active dispatch mode makes autograd sum gradients out of place),
    then run again with it, counted the tracer's way (fake vs real on the GPU's own kernels)."""
    import torch

    from engine.trace import _request, step

    spec = _request(config, scenario)["scenario"]

    def on_step(n: int) -> None:
        if n == 2:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    out = step.run(config, spec, device="cuda", fake=False, emulate=False, on_step=on_step, count=False)
    torch.cuda.synchronize()
    measured = torch.cuda.max_memory_allocated()
    del out
    torch.cuda.empty_cache()
    out = step.run(config, spec, device="cuda", fake=False, emulate=False)
    counted = step.summarize(out)["peak_allocated_bytes"]
    del out
    torch.cuda.empty_cache()
    return measured, counted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tolerance", type=float, default=2.0, help="largest accepted difference, percent (default 2)")
    ap.add_argument("--only", type=int, default=None, help="run only scenario number N (0-based)")
    args = ap.parse_args(argv)

    import torch

    if not (torch.version.cuda and torch.cuda.is_available()):
        print("error: needs a CUDA build of torch and a GPU", file=sys.stderr)
        return 2
    from engine.model.catalog import catalog_model
    from engine.scenario.training import Scenario
    from engine.trace import trace_training_step

    print(f"{torch.cuda.get_device_name()} torch {torch.__version__}")
    header = f"{'model':24s} {'scenario':44s} {'trace GB':>9s} {'real GB':>9s} {'counted GB':>10s} {'diff %':>7s} kernel"
    print(header)
    worst = 0.0
    for i, (repo, fields) in enumerate(SCENARIOS):
        if args.only is not None and i != args.only:
            continue
        config = catalog_model(repo).config
        scenario = Scenario.build(**fields)
        traced = trace_training_step(config, scenario, timeout_s=600)
        measured, counted = real_peak(config, scenario)
        diff = 100.0 * (traced.peak_allocated_bytes - measured) / measured
        worst = max(worst, abs(diff))
        label = " ".join(f"{k}={v}" for k, v in fields.items())
        print(f"{repo.split('/')[-1]:24s} {label[:44]:44s} {traced.peak_allocated_bytes / 1e9:9.3f} {measured / 1e9:9.3f} "
              f"{counted / 1e9:10.3f} {diff:+7.2f} {traced.attention_kernel}")
    print(f"largest difference: {worst:.2f}% (tolerance {args.tolerance}%)")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    raise SystemExit(main())
