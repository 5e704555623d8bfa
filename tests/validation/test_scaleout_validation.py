"""Parallel layouts against the published large runs of data/large_runs.csv: every row compared or explained."""

from __future__ import annotations

import csv

import pytest

from engine.files import data_file
from engine.validation.scaleout import validate_large_runs


@pytest.fixture(scope="module")
def val():
    return validate_large_runs()


def test_every_row_is_compared_or_explained(val):
    ids = {r["id"] for r in csv.DictReader(data_file("large_runs.csv").open(encoding="utf-8"))}
    assert {r.id for r in val.rows} | {n.id for n in val.not_expressible} == ids
    assert all(n.reason for n in val.not_expressible)


def test_megatron_h100_weak_scaling_mfu(val):
    # Megatron-LM README H100 table (MFU 41-49 %): the provisional step time's one constant was chosen on these rows.
    rows = [r for r in val.rows if r.id.startswith("megatron_h100_")]
    assert len(rows) == 9
    errs = sorted(abs(r.error_pct) for r in rows)
    assert errs[len(errs) // 2] < 10  # median
    # the 70B-462B rows, where TP and PP communication and the bubble matter, within 12 %
    assert all(abs(r.error_pct) < 12 for r in rows if r.id.split("_")[-1] in ("70B", "119B", "177B", "314B", "462B"))


def test_full_recompute_memory_rows(val):
    # torchtitan Llama 3.1 8B with full AC and CP 1-8 at 32k-262k tokens: 84 GiB reserved; ours within 10 %.
    rows = [r for r in val.rows if r.id.startswith("tt_8b_cp") and r.metric.startswith("memory")]
    assert len(rows) == 4
    assert all(abs(r.error_pct) < 10 for r in rows)


def test_nemo_fp8_throughput(val):
    rows = {r.id: r for r in val.rows if r.id.startswith("nemo_")}
    assert abs(rows["nemo_25.02_GPT3-175B_512"].error_pct) < 10


def test_torchtitan_op_sac_memory_rows(val):
    # torchtitan Llama 3.1 8B FSDP2 with op-level SAC (torchtitan Tables 1 and 3, torchao's float8 table): 47.6-82.4
    # GiB reserved; ours within 10 % (it was 79-129 % over when "selective" meant Korthikanti's attention core only).
    ids = ("tt_8b_8gpu_", "tt_8b_128gpu_", "torchao_h100_8b_")
    rows = [r for r in val.rows if r.id.startswith(ids) and r.metric.startswith("memory")]
    assert len(rows) == 9
    assert all(abs(r.error_pct) < 10 for r in rows)


def test_torchtitan_fsdp_pp_memory_rows(val):
    # 405B on 512 GPUs, FSDP 8 x TP 8 x PP 8 (+ CP): 72.7-84.9 GiB. Without the stage kept gathered and the fp32
    # gradients accumulated unsharded we were 67-71 % under; now within 25 % (still under, see the Methodology page).
    rows = [r for r in val.rows if r.id.startswith("tt_405b") and r.metric.startswith("memory")]
    assert len(rows) == 6
    assert all(-25 < r.error_pct < 0 for r in rows)
    n, median, _ = val.summary("memory")
    assert n == 23 and median < 10
