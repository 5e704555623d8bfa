"""FSDP's collectives one call per FSDP unit (:func:`engine.scaleout.comm_volumes.data_parallel_collectives`): each
transformer block is its own unit and the model the root (torchtitan ``apply_fsdp``; llm-foundry@8c8dd48f
``llmfoundry/models/mpt/modeling_mpt.py`` ``_fsdp_wrap_fn`` returns True for each ``MPTBlock``); "The root FSDP state
has its value [reshard_after_forward] specially set to False" (PyTorch ``fully_shard`` docstring), so backward
gathers every unit but the root. And the MPT rows of data/large_runs.csv built as the llm-foundry README's models."""

from __future__ import annotations

import pytest

from engine.files import labelled_csv_rows
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.scaleout.comm_volumes import step_collectives
from engine.scaleout.layout import Layout
from engine.scaleout.partition import parameter_split
from engine.scaleout.step_time import Cluster, collective_seconds
from engine.time import collectives as cc
from engine.validation.scaleout import _arch

GPT_1B = architecture_from_config({"model_type": "gpt2", "n_embd": 2048, "n_layer": 24, "n_head": 16,
                                   "vocab_size": 50368, "n_positions": 2048, "tie_word_embeddings": True})


def _dp(layout: Layout):
    cols = step_collectives(GPT_1B, layout, parameter_split(GPT_1B), 2048, 2, 8)
    return {c.kind: c for c in cols if c.dimension == "dp"}


def test_fsdp_gathers_and_reduces_once_per_unit_and_micro_batch():
    m, L = 3, GPT_1B.num_layers
    layout = Layout(data_parallel=512, zero=3, micro_batch_size=4, global_batch_size=4 * 512 * m)
    cols = _dp(layout)
    ag, rs = cols["all_gather"], cols["reduce_scatter"]
    # 24 blocks + the root: 25 gathers in forward, 24 in backward, 25 reduce-scatters, every micro batch
    assert ag.count == m * (2 * L + 1) == 147 and rs.count == m * (L + 1) == 75
    # the bytes moved are the whole model's bf16 weights twice (forward + backward) and its fp32 gradients once
    params = GPT_1B.total_parameters
    assert ag.message_bytes * ag.count == pytest.approx(2 * m * 2 * params, rel=1e-9)  # the tied head once
    assert rs.message_bytes * rs.count == pytest.approx(m * 4 * params, rel=1e-9)


def test_fsdp_units_pay_the_ring_latency_per_call():
    # 512 ranks on 64 nodes: each unit's all-gather pays NCCL's ring latency of 511 steps, 63 of them over the network
    # (8.4 + 448 x 2.5 + 63 x 6.6 us = 1.54 ms, NCCL src/graph/tuning.cc baseLat / hwLat): 147 calls a step is
    # 0.23 s of latency on top of the bandwidth term a single call would pay
    layout = Layout(data_parallel=512, zero=3, micro_batch_size=4, global_batch_size=4 * 512 * 3)
    ag = _dp(layout)["all_gather"]
    cluster = Cluster(gpu=find_gpu("H100 SXM"), nodes=64)
    one_call = collective_seconds(ag._replace(message_bytes=ag.message_bytes * ag.count, count=1), cluster)
    per_call = cc.CALL_LATENCY_S + 448 * cc.HOP_LATENCY_S["intra"] + 63 * cc.HOP_LATENCY_S["network"]
    assert per_call == pytest.approx(1.5442e-3, rel=1e-4)
    assert collective_seconds(ag, cluster) - one_call == pytest.approx((ag.count - 1) * per_call, rel=1e-6)


def test_fsdp_with_pp_gathers_each_unit_of_the_stage_once_per_step():
    layout = Layout(pipeline_parallel=2, data_parallel=8, zero=3, micro_batch_size=1, global_batch_size=64)
    cols = step_collectives(GPT_1B, layout, parameter_split(GPT_1B), 2048, 2, 8, stage=0)
    dp = {c.kind: c for c in cols if c.dimension == "dp"}
    assert dp["all_gather"].count == dp["reduce_scatter"].count == 12 + 1  # the stage's 12 blocks + its root


def test_mpt_rows_build_the_readme_models():
    # llm-foundry@8c8dd48f scripts/train/benchmarking/README.md NumParams at sequence 2048: biases (no_bias False),
    # learned positions (learned_pos_emb True, alibi False) and a tied head (tie_word_embeddings True) by MPTConfig
    # default, which the pretrain yamls leave
    published = {"llmfoundry_mpt_1b_8gpu_2048": 1315950592, "llmfoundry_mpt_7b_8gpu_2048": 6658859008,
                 "llmfoundry_mpt_760m_8gpu_2048": None, "llmfoundry_mpt_70b_512gpu_2048": 64862437376}
    rows = {row["id"]: row for _, row in labelled_csv_rows("large_runs.csv") if row["id"] in published}
    assert len(rows) == 4
    for rid, count in published.items():
        arch, assumed = _arch(rows[rid], 2048)
        assert arch.tie_word_embeddings and "tied embedding" in assumed
        if count:
            assert arch.total_parameters == count
