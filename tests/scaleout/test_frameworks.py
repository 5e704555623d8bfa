"""The framework registry (:mod:`engine.scaleout.frameworks`) and ``--layout-framework`` on the command line: one record per
framework, looked up by name, its settings reaching the layout estimate as :func:`estimate_layout` takes them.
Values: nanotron's DP sync as huggingface/nanotron@e24d2483 runs it (``NANOTRON_DP_SYNC``'s docstring; its own
checks in tests/scaleout/test_scaleout_dp_sync.py), Megatron-LM's fused kernels and ``--bf16`` master weights,
torchtitan's torchao float8."""

from __future__ import annotations

import csv
import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.files import data_file
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.comm_volumes import DataParallelSync
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.frameworks import DEFAULT_FRAMEWORK, FRAMEWORKS, NANOTRON_DP_SYNC, Framework, framework
from engine.scaleout.layout import ZERO_STAGES, Layout
from engine.scaleout.search import search_layouts
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Method, Scenario
from engine.time.overhead import SECONDS_PER_KERNEL

LLAMA = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
# Llama 3.1 8B, TP 4 x DP 32 on 16 nodes of H100, ZeRO-1 (the distributed optimizer), micro batch 1, 128 sequences
BASE = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "4", "--num-nodes", "16",
        "--gpu", "H100 80GB", "--strategy", "zero1", "--seq-len", "4096", "--global-batch-size", "128"]


def cli(capsys, *extra: str) -> dict:
    code = main([*BASE, *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_lookup_by_name_and_the_default():
    assert framework(None) is framework("generic") is FRAMEWORKS[DEFAULT_FRAMEWORK]
    assert framework("Nanotron").dp_sync is NANOTRON_DP_SYNC
    assert NANOTRON_DP_SYNC == DataParallelSync(bucket_bytes=25 * 2**20, zero1_all_reduce=True, gather_copies=True,
                                                tensors_per_layer=6, half_gradients_per_backward=True)
    generic = framework("generic")
    assert (generic.fused_kernels, generic.dtensor_tp, generic.dp_sync, generic.tp_comm_overlap) == (False, False, None, False)
    assert framework("megatron").fused_kernels and framework("nemo").fused_kernels and framework("nanotron").fused_kernels
    assert not framework("torchtitan").fused_kernels  # torch.compile is opt-in (compile.enable = false)
    assert framework("torchtitan").dtensor_tp and framework("torchtitan").fp8_recipe is Fp8Recipe.TORCHAO
    assert list(FRAMEWORKS)[0] == "generic" and {"megatron", "nemo", "torchtitan", "nanotron"} <= set(FRAMEWORKS)


def test_unknown_framework_is_a_scenario_error_naming_the_known_ones():
    with pytest.raises(ScenarioError, match="unknown framework 'deepspeed-chat': one of generic, megatron"):
        framework("deepspeed-chat")


def test_every_value_that_differs_from_generic_names_its_source():
    generic = framework("generic")
    for fw in FRAMEWORKS.values():
        for field in ("fused_kernels", "dtensor_tp", "dp_sync", "tp_comm_overlap", "master_weights", "fp8_recipe",
                      "zero_stages"):
            if getattr(fw, field) != getattr(generic, field):
                assert fw.source(field), f"{fw.name}.{field} has no source"
        assert isinstance(fw, Framework) and fw.summary().startswith(fw.label)


def test_validation_rows_name_a_registered_framework():
    rows = list(csv.DictReader(data_file("large_runs.csv").open(encoding="utf-8")))
    assert all(r["framework"] in FRAMEWORKS for r in rows)
    by_id = {r["id"]: r["framework"] for r in rows}
    assert by_id["nanotron_3.57b_64n"] == "nanotron" and by_id["tt_70b_async"] == "torchtitan"
    assert by_id["megatron_h100_7.1B"] == "megatron" and by_id["korthikanti_22B"] == "megatron"
    assert by_id["nemo_24.12_LLAMA3-70B_64"] == "nemo" and by_id["llama3_405b_t4_r1"] == "generic"


def test_cli_nanotron_runs_its_dp_sync(capsys):
    nano = cli(capsys, "--layout-framework", "nanotron")
    generic = cli(capsys, "--master-weights", "--fused-kernels")
    assert nano["layout_framework"]["name"] == "nanotron" and nano["layout_framework"]["master_weights"]  # nanotron: bf16 + fp32
    sc = Scenario(seq_len=4096, precision="amp_bf16")
    layout = Layout(tensor_parallel=4, data_parallel=32, zero=1, micro_batch_size=1, global_batch_size=128)
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=16, gpus_per_node=8)
    est = estimate_layout(LLAMA, sc, layout, cluster, master_weights=True, fused_kernels=True, dp_sync=NANOTRON_DP_SYNC)
    assert nano["step_time"]["step_s"] == pytest.approx(est.time.step_s, rel=1e-12)
    # ZeRO-1 the nanotron way: the fp32 gradients all-reduced (not reduce-scattered), the bf16 weights all-gathered
    # through update_output's copy loop, both after the compute
    dp = lambda out: [c["kind"] for c in out["collectives"] if c["dimension"] == "dp"]  # noqa: E731
    assert dp(generic) == ["reduce_scatter", "all_gather"] and dp(nano) == ["all_reduce", "all_gather"]
    assert not any(c["overlapped"] for c in nano["collectives"] if c["dimension"] == "dp")
    # at least the host copies: (32 blocks x 6 tensors + embedding, final norm, head) x 32 DP ranks kernels
    copies = (32 * 6 + 3) * 32 * SECONDS_PER_KERNEL
    assert nano["step_time"]["step_s"] - generic["step_time"]["step_s"] > copies


def test_cli_framework_defaults_and_explicit_flags(capsys):
    megatron = cli(capsys, "--layout-framework", "megatron")
    assert megatron["layout_framework"]["fused_kernels"] and megatron["layout_framework"]["master_weights"]
    assert "master_weights" in megatron["per_rank"][0]["components"]  # Megatron-LM --bf16: fp32 master copy
    assert megatron["precision_note"].startswith("--precision amp_bf16 --layout-framework megatron (master weights)")
    plain = cli(capsys, "--layout-framework", "generic")
    assert not plain["layout_framework"]["fused_kernels"] and not plain["layout_framework"]["master_weights"]
    overlap = cli(capsys, "--layout-framework", "megatron", "--tp-comm-overlap")  # the flag turns it on
    assert overlap["layout_framework"]["tp_comm_overlap"] and overlap["step_time"]["step_s"] < megatron["step_time"]["step_s"]
    fp8 = cli(capsys, "--layout-framework", "torchtitan", "--precision", "fp8")
    assert fp8["fp8_recipe"] == "torchao" and fp8["layout_framework"]["dtensor_tp"]  # torchtitan's float8 is torchao's
    assert cli(capsys, "--layout-framework", "torchtitan", "--precision", "fp8", "--fp8-recipe", "te")["fp8_recipe"] == "te"


def test_cli_unknown_framework_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main([*BASE, "--layout-framework", "deepspeed-chat"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_nanotron_runs_zero_0_and_1_only():
    # huggingface/nanotron@06e39568 src/nanotron/helpers.py init_optimizer_and_grad_accumulator: zero_stage 0 is the
    # plain optimizer, any stage above 0 the ZeroDistributedOptimizer (optimizer states sharded: ZeRO-1); no stage
    # shards gradients or parameters, so ZeRO-2 / ZeRO-3 are not nanotron runs
    nano = framework("nanotron")
    assert nano.zero_stages == (0, 1) and framework("generic").zero_stages == ZERO_STAGES == (0, 1, 2, 3)
    assert "ZeRO-0/1 only" in nano.summary() and "ZeRO" not in framework("megatron").summary()
    settings = nano.layout_settings()
    assert settings["zero_stages"] == (0, 1)
    sc = Scenario(seq_len=4096, precision="amp_bf16")
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=16, gpus_per_node=8)
    for zero in (2, 3):
        layout = Layout(tensor_parallel=4, data_parallel=32, zero=zero, micro_batch_size=1, global_batch_size=128)
        with pytest.raises(ScenarioError, match=f"ZeRO-{zero}: nanotron runs ZeRO-0 \\(DDP\\) or ZeRO-1 / distributed optimizer only"):
            estimate_layout(LLAMA, sc, layout, cluster, master_weights=True, **settings)
        estimate_layout(LLAMA, sc, layout, cluster, master_weights=True,
                        **framework("torchtitan").layout_settings())  # another framework runs it


def test_cli_nanotron_with_zero3_exits_2_naming_the_stages(capsys):
    code = main([*BASE[:BASE.index("--strategy")], "--strategy", "zero3", *BASE[BASE.index("--strategy") + 2:],
                 "--layout-framework", "nanotron"])
    err = capsys.readouterr().err
    assert code == 2 and "ZeRO-3: nanotron runs ZeRO-0 (DDP) or ZeRO-1 / distributed optimizer only" in err and "Traceback" not in err
    assert cli(capsys, "--layout-framework", "nanotron")["layout_framework"]["zero_stages"] == [0, 1]


@pytest.mark.parametrize("method", ["lora", "qlora"])
def test_nanotron_runs_full_training_only(method):
    # A fresh user's run: the Scale out page estimated nanotron with QLoRA without a word. nanotron has no adapter or
    # quantized-weight code (huggingface/nanotron@2411b022), so its record runs full fine-tuning only and the estimate
    # refuses another method in words, as it refuses a ZeRO stage nanotron does not run.
    nano = framework("nanotron")
    assert nano.methods == (Method.FULL,) and "nanotron@2411b022" in nano.source("methods")
    assert nano.summary().endswith("ZeRO-0/1 only, Full fine-tuning only")
    assert framework("generic").methods == tuple(Method) and "only" not in framework("torchtitan").summary()
    sc = Scenario(method=method, seq_len=4096)
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=1, gpus_per_node=8)
    layout = Layout(data_parallel=8, zero=1, micro_batch_size=1, global_batch_size=8)
    label = {"lora": "LoRA", "qlora": "QLoRA"}[method]
    with pytest.raises(ScenarioError, match=f"^{label}: not a method nanotron runs \\(it runs: Full fine-tuning\\); "
                                            "pick one of those or another framework$"):
        estimate_layout(LLAMA, sc, layout, cluster, **nano.layout_settings())
    with pytest.raises(ScenarioError, match=f"^{label}: not a method nanotron runs"):
        search_layouts(LLAMA, sc, cluster, 8, **nano.layout_settings())
    estimate_layout(LLAMA, sc, layout, cluster, **framework("generic").layout_settings())  # another framework runs it


def test_cli_nanotron_with_qlora_exits_2_naming_the_method(capsys):
    code = main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "qlora", "--num-gpus", "8",
                 "--gpu", "H100 80GB", "--layout-framework", "nanotron"])
    err = capsys.readouterr().err
    assert code == 2 and "QLoRA: not a method nanotron runs (it runs: Full fine-tuning)" in err and "Traceback" not in err
    assert cli(capsys, "--layout-framework", "nanotron")["layout_framework"]["methods"] == ["full"]


def test_search_with_nanotron_tries_its_stages_only():
    sc = Scenario(seq_len=2048, precision="amp_bf16", micro_batch_size=1)
    small = architecture_from_config(config_from_catalog("meta-llama/Llama-3.2-1B")[0])
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=1, gpus_per_node=8)
    nano = search_layouts(small, sc, cluster, 16, master_weights=True, **framework("nanotron").layout_settings())
    generic = search_layouts(small, sc, cluster, 16, master_weights=True, **framework("generic").layout_settings())
    assert {c.layout.zero for c in nano if c.layout is not None} == {0, 1}
    assert {c.layout.zero for c in generic if c.layout is not None} == {0, 1, 2, 3}


def test_nanotron_has_no_interleaved_schedule():
    """nanotron's pipeline engines are all-forward-all-backward and 1F1B only (huggingface/nanotron@2411b022
    parallel/pipeline_parallel/engine.py): virtual stages are refused in words naming nanotron, the search does not try
    them, and another framework still runs them."""
    nano = framework("nanotron")
    assert not nano.interleaved_schedule and "OneForwardOneBackwardPipelineEngine" in nano.source("interleaved_schedule")
    assert "no interleaved pipeline schedule" in nano.summary()
    sc = Scenario(seq_len=2048, micro_batch_size=1)
    small = architecture_from_config(config_from_catalog("meta-llama/Llama-3.2-1B")[0])  # 16 layers
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=1, gpus_per_node=8)
    layout = Layout(pipeline_parallel=2, virtual_pipeline=2, data_parallel=4, zero=1, micro_batch_size=1,
                    global_batch_size=16)
    with pytest.raises(ScenarioError, match=r"^Virtual stages 2: nanotron has no interleaved pipeline schedule \(its "
                                            r"schedules: all-forward-all-backward and 1F1B\); use 1 virtual stage or "
                                            r"another framework$"):
        estimate_layout(small, sc, layout, cluster, master_weights=True, **nano.layout_settings())
    estimate_layout(small, sc, layout, cluster, master_weights=True, **framework("megatron").layout_settings())
    found = search_layouts(small, sc, cluster, 16, master_weights=True, **nano.layout_settings())
    assert found and all(c.layout.virtual_pipeline == 1 for c in found)
    generic = search_layouts(small, sc, cluster, 16, master_weights=True, **framework("generic").layout_settings())
    assert any(c.layout.virtual_pipeline == 2 for c in generic)
