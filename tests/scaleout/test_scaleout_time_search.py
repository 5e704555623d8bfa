"""Communication volumes, the pipeline bubble, the step time, the layout search and the exports."""

from __future__ import annotations

import json
import tomllib

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.comm_volumes import Link, bubble_fraction, ring_bytes_per_rank, step_collectives
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.exports import export_layout
from engine.scaleout.layout import Layout
from engine.scaleout.partition import parameter_split
from engine.scaleout.search import pareto_front, rejection_summary, search_layouts
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario

LLAMA2 = architecture_from_config(config_from_catalog("meta-llama/Llama-2-7b-hf")[0])
H100 = find_gpu("H100 SXM")


def test_bubble_fraction():
    assert bubble_fraction(Layout(pipeline_parallel=4, global_batch_size=8)) == pytest.approx(3 / 11)
    assert bubble_fraction(Layout(pipeline_parallel=4, virtual_pipeline=2, global_batch_size=8)) == pytest.approx(3 / 19)
    assert bubble_fraction(Layout(data_parallel=2, global_batch_size=8)) == 0.0


def test_ring_volumes():
    assert ring_bytes_per_rank("all_reduce", 100.0, 4) == 150.0
    assert ring_bytes_per_rank("all_gather", 100.0, 4) == 75.0
    assert ring_bytes_per_rank("p2p", 100.0, 2) == 100.0


def test_tp_all_reduces_per_layer_and_links():
    layout = Layout(tensor_parallel=8, data_parallel=4, global_batch_size=8)  # m = 2
    cols = step_collectives(LLAMA2, layout, parameter_split(LLAMA2), 4096, 2, gpus_per_node=8)
    tp = next(c for c in cols if c.name.startswith("tensor-parallel all-reduces"))
    assert tp.message_bytes == 4096 * 4096 * 2  # s x b x h x 2 B
    assert tp.count == 4 * 32 * 2  # 2 forward + 2 backward per block, per micro batch
    assert tp.link is Link.INTRA_NODE
    dp = next(c for c in cols if c.dimension == "dp")
    assert dp.link is Link.INTER_NODE and dp.kind == "all_reduce"


def test_step_time_adds_the_bubble_and_reports_mfu():
    sc = Scenario(seq_len=4096)
    cluster = Cluster(gpu=H100, nodes=1)
    flat = estimate_layout(LLAMA2, sc, Layout(data_parallel=8, zero=1, global_batch_size=64), cluster).time
    piped = estimate_layout(LLAMA2, sc, Layout(pipeline_parallel=2, data_parallel=4, zero=1, global_batch_size=64), cluster).time
    assert piped.bubble_fraction == pytest.approx(1 / 17)  # m = 64 / 4 = 16: (2 - 1) / (16 + 2 - 1)
    assert piped.bubble_s > 0 and flat.bubble_s == 0
    assert 0 < flat.mfu < 1 and flat.tokens_per_second == pytest.approx(64 * 4096 / flat.step_s)


def test_search_finds_fitting_layouts_and_explains_the_rest():
    a = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-70B")[0])
    cluster = Cluster(gpu=H100, nodes=4)
    found = search_layouts(a, Scenario(seq_len=4096), cluster, global_batch=64)
    fits = [c for c in found if c.fits]
    assert len(found) > 1000 and fits
    assert all(c.device_bytes <= H100.usable_memory_bytes for c in fits)
    # 70B with Adam needs > 1.2 TB of model states: no single node of 8 x 80 GB holds it
    assert not any(c.fits and c.layout.world_size <= 8 for c in found)
    assert "out of memory" in rejection_summary(found)
    front = pareto_front(found)
    assert front and all(f.fits for f in front)
    for f in front:  # nobody beats a front member on both time and cost
        assert not any(c.tokens_per_second > f.tokens_per_second and c.gpu_hours_per_million_tokens < f.gpu_hours_per_million_tokens
                       for c in fits)


def test_exports_name_the_engines_settings():
    sc = Scenario(seq_len=4096)
    layout = Layout(tensor_parallel=2, pipeline_parallel=2, data_parallel=2, sequence_parallel=True, recompute="selective",
                    zero=1, global_batch_size=64)
    meg = export_layout("megatron", LLAMA2, sc, layout)["text"]
    for flag in ("--tensor-model-parallel-size 2", "--pipeline-model-parallel-size 2", "--sequence-parallel",
                 "--recompute-granularity selective", "--use-distributed-optimizer", "--global-batch-size 64"):
        assert flag in meg
    fsdp = Layout(tensor_parallel=2, data_parallel=4, sequence_parallel=True, zero=3, global_batch_size=8)
    toml = tomllib.loads(export_layout("torchtitan", LLAMA2, sc, fsdp)["text"])
    assert toml["parallelism"]["tensor_parallel_degree"] == 2 and toml["parallelism"]["data_parallel_shard_degree"] == 4
    ds = json.loads(export_layout("deepspeed", LLAMA2, sc, Layout(data_parallel=8, zero=3, global_batch_size=16))["text"])
    assert ds["train_batch_size"] == 16 and ds["zero_optimization"]["stage"] == 3 and ds["gradient_accumulation_steps"] == 2
    with pytest.raises(ScenarioError, match="ZeRO-2/3"):
        export_layout("deepspeed", LLAMA2, sc, Layout(pipeline_parallel=2, zero=3, global_batch_size=2))
    with pytest.raises(ScenarioError, match="no pipeline"):
        export_layout("accelerate", LLAMA2, sc, Layout(pipeline_parallel=2, global_batch_size=2))


def test_cli_estimate_with_a_layout(capsys):
    rc = main(["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--seq-len", "4096", "--tensor-parallel", "2",
               "--pipeline-parallel", "2", "--num-gpus", "8", "--sequence-parallel", "--recompute", "selective",
               "--strategy", "zero1", "--global-batch-size", "64", "--gpu", "H100 SXM"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert [r["stage"] for r in out["per_rank"]] == [0, 1]
    assert out["max_rank_peak_allocated_bytes"] == max(r["peak_allocated_bytes"] for r in out["per_rank"])
    assert out["megatron_estimate_bytes"] == round(26_655.5546875 * 2**20)
    assert out["per_rank"][0]["peak_allocated_bytes"] > out["per_rank"][1]["peak_allocated_bytes"]
    assert out["step_time"]["provisional"] is False
    assert out["step_time"]["step_s"] == pytest.approx(sum(out["step_time"]["breakdown_s"].values()))


def test_cli_one_gpu_layout_matches_plain_estimate(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--seq-len", "1024"]
    main(base)
    plain = json.loads(capsys.readouterr().out)
    main(base + ["--tensor-parallel", "1"])
    layout = json.loads(capsys.readouterr().out)
    assert layout["max_rank_peak_allocated_bytes"] == plain["peak_allocated_bytes"]


def test_cli_fp8_and_bad_layouts(capsys):
    rc = main(["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--precision", "fp8", "--fp8-recipe", "te"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["fp8_recipe"] == "te" and out["per_rank"][0]["components"]["fp8_weight_cache"] > 0
    assert main(["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--tensor-parallel", "3"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not divide the 32 attention heads" in err
    assert main(["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--fp8-recipe", "te"]) == 2
