"""Settings published multi-GPU runs use, written as a user writes them (issue 24, items 1-5, 9, 10).

Each test failed on the code before the issue: ``--precision bf16 --master-weights`` dropped the master weights,
``--fused-kernels`` / ZeRO-2 / a dataset size with a layout exited 2, the interleaved schedule's last stage counted the
logits of (v - 1) x PP + 1 micro batches, accelerate's export of ZeRO-1 wrote plain replication, the torchtitan refusal
named no option of the page, and an MI300X's links were "NVLink".
"""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.plan.cost import Dataset, quote_price, run_cost
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.exports import export_layout
from engine.scaleout.layout import ZERO_CHOICES, Layout, Schedule
from engine.scaleout.memory import _logits_in_flight, scaleout_memory
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario
from engine.time.collectives import data_parallel_link

LLAMA = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
BASE = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "4", "--num-nodes", "1",
        "--gpu", "H100 80GB"]


def cli(capsys, *extra: str) -> tuple[int, dict | None, str]:
    code = main([*BASE, *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


# 1. Every --precision x --master-weights combination means one thing or exits 2 with the reason.
@pytest.mark.parametrize("typed, same_as", [("bf16", "amp_bf16"), ("fp16", "amp_fp16")])
def test_pure_16_bit_with_master_weights_is_megatrons_run(capsys, typed, same_as):
    _, pure, _ = cli(capsys, "--precision", typed, "--master-weights")
    _, amp, _ = cli(capsys, "--precision", same_as, "--master-weights")
    assert pure["per_rank"] == amp["per_rank"]
    assert pure["scenario"]["precision"] == same_as and typed in pure["precision_note"]
    # fp32 master weights of this rank's share: 8.03B parameters / TP 4 x 4 B (Megatron --bf16: 2 + 4 + 12 B/param)
    rank = pure["per_rank"][0]
    assert rank["components"]["master_weights"] == pytest.approx(rank["parameters"] * 4, rel=1e-9)
    _, dropped, _ = cli(capsys, "--precision", typed)
    assert "master_weights" not in dropped["per_rank"][0]["components"]  # without the flag: pure 16 bits, no copy
    assert pure["max_rank_peak_allocated_bytes"] > 1.7 * dropped["max_rank_peak_allocated_bytes"]


@pytest.mark.parametrize("extra, reason", [
    (["--precision", "fp32"], "fp32 already"),
    (["--method", "lora"], "trains adapters only"),
    (["--method", "qlora"], "trains adapters only"),
])
def test_master_weights_refused_where_they_mean_nothing(capsys, extra, reason):
    # Data parallel only (8 GPUs, no TP), which LoRA/QLoRA layouts may use: the flag was silently dropped there.
    code = main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--num-nodes", "1", "--gpu", "H100 80GB",
                 *extra, "--master-weights"])
    assert code == 2 and reason in capsys.readouterr().err


# 2. --fused-kernels and --tp-comm-overlap reach the step time of a layout.
def test_fused_kernels_and_tp_overlap_are_passed_through(capsys):
    plain = cli(capsys, "--master-weights")[1]["step_time"]
    fused = cli(capsys, "--master-weights", "--fused-kernels")[1]["step_time"]
    overlap = cli(capsys, "--master-weights", "--tp-comm-overlap")[1]["step_time"]
    sc = Scenario(precision="amp_bf16")
    layout = Layout(tensor_parallel=4, data_parallel=2)
    cluster = Cluster(gpu=find_gpu("H100 80GB"), nodes=1, gpus_per_node=8)
    engine = estimate_layout(LLAMA, sc, layout, cluster, master_weights=True, fused_kernels=True).time
    assert fused["step_s"] == pytest.approx(engine.step_s, rel=1e-12) and fused["step_s"] < plain["step_s"]
    assert overlap["step_s"] < plain["step_s"]


# 3. ZeRO-2 / FSDP SHARD_GRAD_OP with a layout: the gradients are sharded too, the 16-bit weights are not.
@pytest.mark.parametrize("strategy", ["zero2", "fsdp_shard_grad_op"])
def test_zero2_shards_gradients_over_dp(strategy):
    sc = Scenario(precision="amp_bf16", seq_len=2048)
    by_zero = {z: scaleout_memory(LLAMA, sc, Layout(tensor_parallel=2, data_parallel=4, zero=z), master_weights=True)
               .stages[0].estimate.parts_by_key for z in (1, 2)}
    one, two = by_zero[1], by_zero[2]
    assert two["gradients"].bytes == pytest.approx(one["gradients"].bytes / 4, rel=1e-12)  # DP 4 (Rajbhandari sec. 5.2)
    assert two["weights"].bytes == one["weights"].bytes
    assert two["master_weights"].bytes == one["master_weights"].bytes
    code = main([*BASE[:-2], "--tensor-parallel", "2", "--gpu", "H100 80GB", "--strategy", strategy, "--master-weights"])
    assert code == 0
    export = export_layout("megatron", LLAMA, sc, Layout(tensor_parallel=2, data_parallel=4, zero=2))["text"]
    assert "--data-parallel-sharding-strategy optim_grads " in export + " "
    toml = export_layout("torchtitan", LLAMA, sc, Layout(tensor_parallel=2, data_parallel=4, zero=2))["text"]
    assert 'fsdp_reshard_after_forward = "never"' in toml and "data_parallel_shard_degree = 4" in toml


# 4. A dataset size with a layout: hours, GPU-hours and cost as one GPU's plan has them.
def test_dataset_tokens_with_a_layout_gives_hours_and_cost(capsys):
    code, out, _ = cli(capsys, "--master-weights", "--dataset-tokens", "2000000000", "--price-source", "cheapest")
    assert code == 0
    tps = out["step_time"]["tokens_per_second"]
    assert out["tokens_per_second"] == tps
    quote = quote_price(find_gpu("H100 80GB"))
    expected = run_cost(Dataset(total_tokens=2_000_000_000), 2048, tps, 8, quote.on_demand_usd_per_hour,
                        quote.spot_usd_per_hour)
    assert out["hours"] == pytest.approx(2e9 / tps / 3600, rel=1e-12)
    assert out["gpu_hours"] == pytest.approx(out["hours"] * 8, rel=1e-12)
    assert out["cost_usd_on_demand"] == pytest.approx(expected.cost_usd_on_demand, rel=1e-12)
    assert out["cost_usd_spot"] == expected.cost_usd_spot
    assert "cost_usd_spot" in out and out["time_cost"]["num_gpus"] == 8


def test_a_dataset_with_a_layout_needs_a_gpu(capsys):
    code = main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "2",
                 "--dataset-tokens", "1000"])
    assert code == 2 and "--gpu" in capsys.readouterr().err


# 5. Interleaved 1F1B: only the last chunk's finished, not yet backpropagated micro batches hold the logits.
def test_interleaved_last_stage_holds_one_micro_batch_of_logits():
    # Megatron-LM schedules.py at d98e8a64 on the last rank: (v - 1) x PP warm-up forwards on chunks 0 .. v - 2, then
    # each forward of chunk v - 1 is followed by its own backward (get_model_chunk_id(k, forward=False) = v - 1 - ...).
    assert _logits_in_flight(12, 96, 8, Schedule.INTERLEAVED) == 1
    assert _logits_in_flight(4, 8, 2, Schedule.INTERLEAVED) == 1
    assert _logits_in_flight(4, 8, 1, Schedule.GPIPE) == 8
    # Nemotron-4-340B (NVIDIA 2024, tech report sec. 2.2: TP 8 x PP 12, interleaved, mb 1, seq 4096, trained on H100
    # 80GB): 96 layers, h 18432, 96 heads, 8 KV heads, squared-ReLU MLP of 73728, vocabulary 256,000, untied.
    arch = architecture_from_config({"model_type": "starcoder2", "hidden_size": 18432, "intermediate_size": 73728,
                                     "num_attention_heads": 96, "num_key_value_heads": 8, "num_hidden_layers": 96,
                                     "vocab_size": 256000, "max_position_embeddings": 4096, "tie_word_embeddings": False,
                                     "use_bias": False, "hidden_act": "relu2"})
    sc = Scenario(seq_len=4096, micro_batch_size=1, precision="amp_bf16")
    lay = Layout(tensor_parallel=8, pipeline_parallel=12, data_parallel=64, virtual_pipeline=8, sequence_parallel=True,
                 recompute="selective", zero=1, micro_batch_size=1, global_batch_size=768)
    last = scaleout_memory(arch, sc, lay, master_weights=True).stages[-1]
    one_gpu_logits = scaleout_memory(arch, sc, Layout(), master_weights=True).stages[0].estimate.parts_by_key["logits_loss"]
    assert last.estimate.parts_by_key["logits_loss"].bytes == pytest.approx(one_gpu_logits.bytes / 8, rel=1e-12)
    assert last.device_used_bytes < find_gpu("H100 80GB").usable_memory_bytes  # it trained (was 124.5 GiB of logits)


# 9. Exports refuse what the engine cannot say; the torchtitan refusal names the page's options.
def test_accelerate_refuses_zero1_and_torchtitan_names_the_options():
    sc = Scenario(precision="amp_bf16")
    with pytest.raises(ScenarioError, match="no ZeRO-1"):
        export_layout("accelerate", LLAMA, sc, Layout(data_parallel=8, zero=1))
    assert "dp_shard_size: 8" in export_layout("accelerate", LLAMA, sc, Layout(data_parallel=8, zero=2))["text"]
    with pytest.raises(ScenarioError) as exc:
        export_layout("torchtitan", LLAMA, sc, Layout(data_parallel=8, zero=1))
    assert f'"{ZERO_CHOICES[0]}"' in str(exc.value) and f'"{ZERO_CHOICES[3]}"' in str(exc.value)
    assert "--strategy zero3" in str(exc.value)


# 10. The link is named from the catalog: MI300X's Infinity Fabric (xGMI), not NVLink.
def test_mi300x_link_is_infinity_fabric(capsys):
    assert data_parallel_link(find_gpu("MI300X"), 8).name == "Infinity Fabric (xGMI)"
    assert data_parallel_link(find_gpu("H100 80GB"), 8).name == "NVLink"
    code = main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "8",
                 "--num-nodes", "1", "--gpu", "MI300X", "--master-weights"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert {c["link_name"] for c in out["collectives"] if c["dimension"] == "tp"} == {"Infinity Fabric (xGMI)"}


# 6. QLoRA under FSDP / ZeRO-3 without a named bnb_4bit_quant_storage: the recipe's compute dtype, said.
@pytest.mark.parametrize("strategy", ["fsdp_full_shard", "zero3"])
def test_qlora_under_full_sharding_defaults_to_a_float_storage(capsys, strategy):
    args = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "qlora", "--seq-len", "512",
            "--gradient-checkpointing", "--gpu", "A100 80GB", "--num-gpus", "8", "--strategy", strategy]
    assert main(args) == 0
    default = json.loads(capsys.readouterr().out)
    assert main([*args, "--quant-storage", "bf16"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert main([*args, "--quant-storage", "uint8"]) == 0
    uint8 = json.loads(capsys.readouterr().out)
    assert default["peak_allocated_bytes"] == bf16["peak_allocated_bytes"] < uint8["peak_allocated_bytes"]
    assert default["replicated_quantized_weights"] is None and uint8["replicated_quantized_weights"]
    assert "bnb_4bit_quant_storage set to bf16" in default["quant_storage_note"] and bf16["quant_storage_note"] is None
    # the replicated 4-bit base less its 1/8 shard is what the float storage saves per GPU
    assert uint8["peak_allocated_bytes"] - default["peak_allocated_bytes"] > 0.8 * 7 / 8 * uint8["replicated_quantized_weights_bytes"]


def test_megatrons_formula_is_said_to_be_for_full_training_with_lora(capsys):
    args = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--num-nodes", "1", "--gpu", "H100 80GB"]
    assert main([*args, "--method", "lora"]) == 0
    lora = json.loads(capsys.readouterr().out)["megatron_estimate"]
    assert "for full training" in lora["caveat"] and "lora" in lora["caveat"]
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["megatron_estimate"]["caveat"] is None


def test_plan_with_a_layout_writes_its_hours_and_cost(capsys):
    import csv
    import io

    args = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "2", "--num-nodes", "1",
            "--gpu", "H100 80GB", "--master-weights", "--strategy", "zero2", "--dataset-tokens", "1000000000"]
    assert main(args) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert len(rows) == 1 and rows[0]["layout_zero"] == "2" and rows[0]["layout_tensor_parallel"] == "2"
    assert main(["estimate", *args[1:]]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("tokens_per_second", "hours", "gpu_hours", "cost_usd_on_demand"):
        assert float(rows[0][key]) == pytest.approx(out[key], rel=1e-6), key
    assert rows[0]["cost_usd_spot"] == ("" if out["cost_usd_spot"] is None else rows[0]["cost_usd_spot"])
