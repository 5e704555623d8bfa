"""The run's torch.compile is one Scenario fact (``torch_compile``) that the step time reads as the memory estimate
does: fused elementwise kernels, a compiled backward's launches and the loss's compiled form (torchtune's chunked
loss -> ``torchtune_chunked_compiled``); the step time's other fused kernels (Unsloth, Liger) compile no loss."""

from __future__ import annotations

import pytest

from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Scenario
from engine.time.memory_bound import runs_fused
from engine.time.overhead import BACKWARD_HOST_FACTOR, COMPILED_BACKWARD_HOST_FACTOR, backward_host_factor
from engine.time.throughput import estimate_throughput

LLAMA31_8B = architecture_from_config(catalog_model("meta-llama/Llama-3.1-8B").config)
H100 = find_gpu("H100 SXM")
TORCHTUNE = dict(framework="torchtune", method="lora", micro_batch_size=2, seq_len=2048)


def test_compile_switch_is_the_stated_compiled_run():
    """torchtune + torch_compile times exactly as the measured rows state a compiled torchtune run (the compiled
    loss named, fused kernels on), and names the loss the memory estimate counts."""
    switch = Scenario.build(**TORCHTUNE, torch_compile=True)
    stated = Scenario.build(**TORCHTUNE, loss_implementation="torchtune_chunked_compiled")
    on = estimate_throughput(LLAMA31_8B, switch, H100)
    assert on.tokens_per_second == estimate_throughput(LLAMA31_8B, stated, H100, fused_kernels=True).tokens_per_second
    assert on.fused_kernels and on.loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED
    assert on.loss is switch.loss
    assert estimate_memory(LLAMA31_8B, switch, H100).assumptions[0].endswith(
        "loss: torchtune CEWithChunkedOutputLoss (8 chunks), compiled")


def test_other_fused_kernels_do_not_compile_the_loss():
    """--fused-kernels / the Time & cost page's "Other fused kernels" without torch_compile: fused elementwise chains,
    the eager chunked loss (as the memory estimate counts it); the compiled run is faster by the loss's passes."""
    eager = Scenario.build(**TORCHTUNE)
    fused = estimate_throughput(LLAMA31_8B, eager, H100, fused_kernels=True)
    assert fused.fused_kernels and fused.loss is LossImplementation.TORCHTUNE_CHUNKED is eager.loss
    compiled = estimate_throughput(LLAMA31_8B, Scenario.build(**TORCHTUNE, torch_compile=True), H100)
    assert compiled.step.breakdown_s["memory_bound"] < fused.step.breakdown_s["memory_bound"]
    plain = estimate_throughput(LLAMA31_8B, eager, H100)
    assert not plain.fused_kernels and plain.tokens_per_second < fused.tokens_per_second


def test_runs_fused_and_the_compiled_backward():
    assert runs_fused(Scenario(torch_compile=True)) and runs_fused(Scenario(), True) and not runs_fused(Scenario())
    # the Hugging Face stack: Unsloth / Liger keep autograd's eager backward; a compiled run (Trainer torch_compile)
    # launches its AOTAutograd backward
    assert backward_host_factor(True, True) == BACKWARD_HOST_FACTOR
    assert backward_host_factor(True, True, compiled=True) == COMPILED_BACKWARD_HOST_FACTOR
    assert backward_host_factor(False, True) == COMPILED_BACKWARD_HOST_FACTOR
    hf = Scenario.build(method="lora", micro_batch_size=2, seq_len=2048)
    compiled = estimate_throughput(LLAMA31_8B, hf.model_copy(update={"torch_compile": True}), H100)
    assert compiled.loss is LossImplementation.HF  # transformers' loss has no measured compiled form: as it is
    assert compiled.tokens_per_second >= estimate_throughput(LLAMA31_8B, hf, H100, fused_kernels=True).tokens_per_second


@pytest.mark.parametrize("fused", [False, True])
def test_the_compile_flag_reaches_the_parallel_step(fused):
    """Scale out's ranks read the same switch (engine.scaleout.rank_compute.stage_compute)."""
    from engine.scaleout.layout import Layout
    from engine.scaleout.rank_compute import stage_compute

    layout = Layout(tensor_parallel=2)
    eager = Scenario.build(**TORCHTUNE)
    on = stage_compute(LLAMA31_8B, eager.model_copy(update={"torch_compile": True}), layout, H100, 0, None, "flash", fused)
    off = stage_compute(LLAMA31_8B, eager, layout, H100, 0, None, "flash", True)
    # fused either way; the compiled run's loss keeps its chunks on chip (fewer memory-bound bytes at the head)
    assert on.breakdown_s["memory_bound"] < off.breakdown_s["memory_bound"]
