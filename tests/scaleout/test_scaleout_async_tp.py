"""nanotron's asynchronous TP linears (``tp_linear_async_communication`` with ``tp_mode: REDUCE_SCATTER``, on in
huggingface/nanotron@e24d2483 ``scripts/scaling_benchmarks.py``): each sequence-parallel collective runs beside the
one GEMM its linear computes meanwhile (``parallel/tensor_parallel/functional.py``): the column-parallel forward
all-gather beside the rank's own input shard's GEMM (1/TP of the linear's forward), the backward re-gather beside the
input-gradient GEMM, the input-gradient reduce-scatter beside the weight-gradient GEMM, the row-parallel
output-gradient all-gather beside 1/TP of its input-gradient GEMM; the row-parallel forward reduce-scatter blocks."""

from __future__ import annotations

import pytest

from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.comm_volumes import TP_WINDOWS, step_collectives
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.frameworks import framework
from engine.scaleout.layout import Layout
from engine.scaleout.partition import parameter_split
from engine.scaleout.rank_compute import _gemm_seconds, tp_windows
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario
from engine.time import collectives as cc
from engine.time.gemm import Gemm
from engine.time.rates import gpu_rates

LLAMA2 = architecture_from_config(config_from_catalog("meta-llama/Llama-2-7b-hf")[0])
H100 = find_gpu("H100 SXM")
SC = Scenario(seq_len=4096, micro_batch_size=1)
LAYOUT = Layout(tensor_parallel=8, data_parallel=1, sequence_parallel=True, global_batch_size=2)  # m = 2


def test_sequence_parallel_collectives_keep_megatron_counts_and_name_their_gemm():
    cols = [c for c in step_collectives(LLAMA2, LAYOUT, parameter_split(LLAMA2), 4096, 2, 8) if c.dimension == "tp"]
    gathers = sum(c.count for c in cols if c.kind == "all_gather")
    scatters = sum(c.count for c in cols if c.kind == "reduce_scatter")
    assert gathers == 6 * 32 * 2 and scatters == 4 * 32 * 2  # Korthikanti et al. 2022: 2 + 4 and 2 + 2 per block
    beside = {c.beside: c.count for c in cols if c.kind != "all_reduce"}  # 2 per block (attention, MLP) x 2 micro batches
    assert beside == {"column_forward": 128, "column_dgrad": 128, "row_dgrad": 128, "": 128, "column_wgrad": 128}
    assert set(beside) - {""} == set(TP_WINDOWS)


def test_windows_are_the_local_shard_or_the_whole_gemm():
    rates = gpu_rates(H100, "amp_bf16")
    wins = dict(zip(TP_WINDOWS, tp_windows(LLAMA2, SC, LAYOUT, 2, rates.matmul_flops, rates.hbm_bytes_per_s,
                                           rates.sm_count)))
    sec = lambda g: _gemm_seconds([g], rates.matmul_flops, rates.hbm_bytes_per_s, rates.sm_count)  # noqa: E731
    # Llama-2-7B: q, k, v 4096 -> 4096 each, gate and up 4096 -> 11008, o 4096 -> 4096, down 11008 -> 4096; 4096 tokens
    qkv_f = 3 * sec(Gemm("block", "forward", 4096, 512, 4096, 1.0, 2))
    assert wins["column_forward"][0] == pytest.approx(qkv_f / 8)
    assert wins["column_dgrad"][1] == pytest.approx(2 * sec(Gemm("block", "backward", 4096, 4096, 1376, 1.0, 2)))
    assert wins["column_wgrad"][1] == pytest.approx(2 * sec(Gemm("block", "backward", 4096, 1376, 4096, 1.0, 2)))
    assert wins["row_dgrad"][1] == pytest.approx(sec(Gemm("block", "backward", 4096, 1376, 4096, 1.0, 2)) / 8)
    assert tp_windows(LLAMA2, SC, Layout(data_parallel=8, global_batch_size=8), 2, 1e15, 3e12, 132) == ((0.0, 0.0),) * 4


def test_async_linears_hide_less_than_a_fused_overlap_and_more_than_none():
    cluster = Cluster(gpu=H100, nodes=1)
    fw = framework("nanotron").layout_settings(tp_comm_overlap=True)
    assert fw["async_tp_linears"] is True
    blocking = estimate_layout(LLAMA2, SC, LAYOUT, cluster, **framework("nanotron").layout_settings()).time
    nanotron = estimate_layout(LLAMA2, SC, LAYOUT, cluster, **fw).time
    fused = estimate_layout(LLAMA2, SC, LAYOUT, cluster, **{**fw, "async_tp_linears": False}).time
    assert fused.step_s < nanotron.step_s < blocking.step_s
    # What the async linears save: for each of the four collective kinds, half at attention's and half at the MLP's
    # linear, the part engine.time.collectives.exposed_seconds hides beside its window (2 micro batches).
    est = estimate_layout(LLAMA2, SC, LAYOUT, cluster, **fw)
    tp = {c.beside: c for c in est.collectives if c.dimension == "tp" and c.beside}
    from engine.scaleout.step_time import collective_seconds, compute_seconds
    st = compute_seconds(LLAMA2, SC, LAYOUT, H100, None, fused_kernels=True)[0]
    saved = 0.0
    for i, name in enumerate(TP_WINDOWS):
        s = collective_seconds(tp[name], cluster)
        saved += sum(s / 2 - cc.exposed_seconds(s / 2, 2 * w) for w in st.tp_windows[i])
    assert blocking.step_s - nanotron.step_s == pytest.approx(saved, rel=1e-6)
