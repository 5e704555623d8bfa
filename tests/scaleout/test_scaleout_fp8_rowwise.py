"""torchao's row-wise float8 recipe as modelled (engine/scaleout/fp8.py): the rescale pass after its slow-accumulation
backward GEMMs (torchao PR #1325, issue #2184), 16-bit all-gathers (torchtitan's float8 converter gathers in FP8 for
tensorwise scaling only) and async TP's unfused all-gather-matmuls (pytorch/pytorch#149990). Expected values are
worked out from those sources by hand, not read back from the code under test."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.exports import export_layout
from engine.scaleout.fp8 import Fp8Recipe, fp8_cast_bytes
from engine.scaleout.layout import Layout
from engine.scaleout.rank_compute import rank_gemms
from engine.scaleout.step_time import Cluster, collective_seconds
from engine.scenario.training import Scenario
from engine.time.rates import gpu_rates

H100 = find_gpu("H100 SXM")
LLAMA31_8B = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
SC = Scenario(seq_len=8192, micro_batch_size=2, precision="amp_bf16")
TP8 = Layout(tensor_parallel=8, sequence_parallel=True, recompute="selective_op", micro_batch_size=2)
CLUSTER = Cluster(gpu=H100, nodes=1)


def test_rowwise_backward_adds_one_read_and_write_of_each_backward_gemm_output():
    # x = 100 input elements, w = 10 weight elements, dy = 40 output-gradient elements, bf16 (c = 2).
    # tensorwise (torchao): forward (2c+1)(x+w) = 550; backward (2c+1)dy + (c+1)(x+w+dy) = 200 + 450 = 650.
    assert fp8_cast_bytes(Fp8Recipe.TORCHAO, 2, 100, 10, 40, 1) == (550, 650)
    # row-wise: + read 2 and write 2 bytes per element of the input gradient (x-sized) and weight gradient (w-sized)
    assert fp8_cast_bytes(Fp8Recipe.TORCHAO_ROWWISE, 2, 100, 10, 40, 1) == (550, 650 + 4 * 110)


def _est(fp8, **kw):
    return estimate_layout(LLAMA31_8B, SC, TP8, CLUSTER, fp8, master_weights=True, fused_kernels=True,
                           dtensor_tp=True, **kw)


def test_rowwise_memory_bound_time_is_tensorwise_plus_the_rescale_pass():
    # The same run with tensorwise scaling and 16-bit all-gathers differs only by the rescale bytes over HBM:
    # per block and micro batch, 2c (x + w) for each FP8 GEMM (x = m k, w = n k of its forward shape), 32 blocks.
    tensor = _est(Fp8Recipe.TORCHAO, fp8_all_gather=False).time
    row = _est(Fp8Recipe.TORCHAO_ROWWISE).time
    extra = sum(2 * 2 * (g.m * g.k + g.n * g.k) * g.copies
                for g, is8, _ in rank_gemms(LLAMA31_8B, SC, TP8, 2) if is8 and g.phase == "forward")
    bw = gpu_rates(H100, "amp_bf16").hbm_bytes_per_s
    assert row.breakdown_s["memory_bound"] - tensor.breakdown_s["memory_bound"] == pytest.approx(32 * extra / bw,
                                                                                              rel=1e-9)
    assert row.breakdown_s["matmul"] == pytest.approx(tensor.breakdown_s["matmul"], rel=1e-12)


def test_async_tp_leaves_the_rowwise_all_gathers_exposed():
    # pytorch#149990: with row-wise scales async TP fuses the matmul-reduce-scatters only; the TP all-gathers stay
    # on the critical path. Tensorwise (same 16-bit collectives) hides them under the GEMMs.
    row = _est(Fp8Recipe.TORCHAO_ROWWISE, tp_comm_overlap=True)
    tensor = _est(Fp8Recipe.TORCHAO, fp8_all_gather=False, tp_comm_overlap=True)
    gathers = sum(collective_seconds(c, CLUSTER) for c in row.collectives
                  if c.dimension == "tp" and c.kind == "all_gather")
    assert gathers > 0
    assert row.time.breakdown_s["communication"] >= gathers * (1 - 1e-12)
    assert tensor.time.breakdown_s["communication"] < 0.5 * gathers


def test_rowwise_exports():
    text = export_layout("torchtitan", LLAMA31_8B, SC, TP8.model_copy(update={"zero": 3}), Fp8Recipe.TORCHAO_ROWWISE)["text"]
    assert 'recipe_name = "rowwise"' in text and "enable_fsdp_float8_all_gather = false" in text
    with pytest.raises(ScenarioError, match="row-wise"):
        export_layout("megatron", LLAMA31_8B, SC, TP8.model_copy(update={"recompute": "full"}), Fp8Recipe.TORCHAO_ROWWISE)


def test_cli_takes_the_rowwise_recipe(capsys):
    # `--fp8-recipe torchao_rowwise` reaches the estimate and the JSON names it; row-wise's backward rescale pass
    # adds HBM time to the same layout (this small step is launch-bound, so the step itself may not move).
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "8", "--num-nodes", "1",
            "--gpu", "H100 SXM", "--precision", "fp8", "--master-weights", "--fp8-recipe"]
    outs = {}
    for recipe in ("torchao", "torchao_rowwise"):
        assert main([*base, recipe]) == 0
        outs[recipe] = json.loads(capsys.readouterr().out)
    assert outs["torchao_rowwise"]["fp8_recipe"] == "torchao_rowwise"
    hbm = lambda o: o["step_time"]["breakdown_s"]["memory_bound"]  # noqa: E731
    assert hbm(outs["torchao_rowwise"]) > hbm(outs["torchao"])


FSDP8 = Layout(data_parallel=8, zero=3, global_batch_size=8, recompute="full")


def _dp_all_gather_bytes(fp8) -> float:
    cols = estimate_layout(LLAMA31_8B, Scenario(seq_len=8192), FSDP8, CLUSTER, fp8, master_weights=True).collectives
    return sum(c.message_bytes * c.count for c in cols if c.dimension == "dp" and c.kind == "all_gather")


@pytest.mark.parametrize("name, member", [("te", Fp8Recipe.TE), ("torchao", Fp8Recipe.TORCHAO),
                                          ("torchao_rowwise", Fp8Recipe.TORCHAO_ROWWISE)])
def test_a_recipe_named_by_its_string_is_that_recipe(name, member):
    # The enum is a str Enum, so "torchao" == Fp8Recipe.TORCHAO, but an identity check would treat the string as no
    # known recipe: the tensorwise all-gathers would silently move 16-bit weights.
    assert Fp8Recipe.of(name) is member
    assert _est(name) == _est(member)


def test_tensorwise_fsdp_all_gathers_move_one_byte_weights_when_named_by_string():
    # torchtitan's float8 converter gathers FSDP2 shards in FP8 for tensorwise scaling (enable_fsdp_float8_all_gather):
    # the block linears' weights (all of Llama 3.1 8B's weights but the embedding, the output layer and the norms)
    # move 1 byte instead of bf16's 2; the rowwise recipe gathers in bf16.
    bf16, rowwise = _dp_all_gather_bytes(None), _dp_all_gather_bytes("torchao_rowwise")
    tensorwise = _dp_all_gather_bytes("torchao")
    assert rowwise == pytest.approx(bf16)
    block_linear = 32 * (4096 * (4096 + 2 * 1024 + 4096) + 3 * 4096 * 14336)  # q, k, v, o; gate, up, down per block
    gathers = 2  # FSDP gathers each block's weights for the forward and again for the backward (full recompute too)
    assert bf16 - tensorwise == pytest.approx(gathers * block_linear * (2 - 1), rel=1e-12)


def test_an_unknown_recipe_name_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="unknown FP8 recipe 'torchAO'"):
        estimate_layout(LLAMA31_8B, SC, TP8, CLUSTER, "torchAO")
