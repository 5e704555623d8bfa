"""CUDA-graph replay (torch.compile(mode="reduce-overhead")): the passes take their GPU time only.

Source of the case: stas00/ml-engineering training/performance/README.md @ 744d01e1, 'torch.compile' tables: Llama 3.2
1B, bf16, SDPA, 1 x 512 on a B200, checkpointing: eager forward+backward 48.8 ms (launch-bound), reduce-overhead 8.1 ms.
"""

from __future__ import annotations

from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.scenario.training import Scenario
from engine.time.overhead import STEP_SECONDS, optimizer_host_seconds
from engine.time.throughput import estimate_throughput

LLAMA1B = architecture_from_config(catalog_model("meta-llama/Llama-3.2-1B").config)
B200 = find_gpu("B200")
SC = Scenario.build(method="full", precision="bf16", optimizer="adamw", micro_batch_size=1, seq_len=512,
                    gradient_checkpointing=True, framework="torchtune")


def test_graphs_leave_no_per_kernel_host_time():
    fused = estimate_throughput(LLAMA1B, SC, B200, fused_kernels=True).step.breakdown_s
    graphs = estimate_throughput(LLAMA1B, SC, B200, fused_kernels=True, cuda_graphs=True).step.breakdown_s
    # The same GPU work; only the host's launches of the forward and backward go (the optimizer's host loop and the
    # per-step work stay): overhead = STEP_SECONDS + the optimizer's host time beyond its GPU time.
    for k in ("matmul", "attention", "memory_bound", "optimizer"):
        assert graphs[k] == fused[k]
    # (engine.time.overhead.optimizer_host_seconds: torch AdamW's foreach loop over every parameter tensor).
    host = optimizer_host_seconds(SC.optimizer, sum(g.count for g in LLAMA1B.tensors))
    assert abs(graphs["overhead"] - (STEP_SECONDS + max(0.0, host - graphs["optimizer"]))) < 1e-12
    # This step is launch-bound even compiled: the source's torch.compile() forward+backward takes 12.6 ms and its
    # reduce-overhead one 8.1 ms, so graphs remove about 4.5 ms of the passes' host time (within 50% here).
    removed = fused["overhead"] - graphs["overhead"]
    assert 0.5 * 4.5e-3 < removed < 1.5 * 4.5e-3, removed


def test_cli_times_cuda_graphs_and_refuses_them_where_not_modelled(capsys):
    import json

    from engine.cli import main
    args = ["estimate", "--model", "meta-llama/Llama-3.2-1B", "--offline", "--gpu", "B200", "--method", "full",
            "--precision", "bf16", "--seq-len", "512", "--gradient-checkpointing", "--optimizer", "adamw",
            "--framework", "torchtune", "--dataset-tokens", "1000000"]
    assert main([*args, "--fused-kernels"]) == 0
    fused = json.loads(capsys.readouterr().out)
    assert main([*args, "--cuda-graphs"]) == 0
    graphs = json.loads(capsys.readouterr().out)
    assert graphs["time_cost"]["cuda_graphs"] and graphs["time_cost"]["fused_kernels"]  # graphs imply fused kernels
    # --cuda-graphs is torch.compile(mode="reduce-overhead"): a compiled scenario (torchtune's compiled chunked loss)
    compiled = SC.model_copy(update={"torch_compile": True})
    assert graphs["scenario"]["torch_compile"] is True
    assert graphs["tokens_per_second"] == estimate_throughput(LLAMA1B, compiled, B200, fused_kernels=True,
                                                              cuda_graphs=True).tokens_per_second
    assert graphs["tokens_per_second"] > fused["tokens_per_second"]
    assert main(["plan", *args[1:], "--cuda-graphs"]) == 2  # a saved plan does not carry it: refused, not dropped
    assert "cuda-graphs" in capsys.readouterr().err
