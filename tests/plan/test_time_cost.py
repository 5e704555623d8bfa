"""Training time and cost (GitHub issues 8 and 15): FLOPs per token on hand-checked cases, the seed rule and the seed's
time and cost examples, prices never invented, the plan search (only plans that fit), the Pareto front, the
comparison with published measurements, calibration and the CLI options.

Uses the bundled catalog (data/models), so it runs without ../shared/reference.
Seed: ../shared/seeds/000_e5ea2c620e992cc5.txt, "Ejemplos de Throughput", "Ejemplo de Cálculo de Tiempo",
"Precios de GPU (Aproximados)" and "Ejemplo de Cálculo de Costos".
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.model.build import architecture_from_config
from engine.validation.throughput import compare_measurements, measurement_scenario
from engine.model.catalog import catalog_model
from engine.validation.measurements import freeze_setting, load_throughput_measurements
from engine.plan.cost import (
    CHEAPEST_LISTED, PLAN_GPU_COUNTS, Dataset, dataset_sweep, estimate_plan, pareto_front, price_source_names, quote_price,
    run_cost, search_plans,
)
from engine.errors import CatalogError, ScenarioError
from engine.plan.fit import check_fit
from engine.hardware.gpus import GpuPrice, find_gpu, load_gpus
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.scenario.training import Scenario
from engine.time.throughput import (
    estimate_throughput, flops_per_token, matmul_parameters, peak_flops_for, seed_throughput, seed_tokens_per_second,
    seed_training_hours,
)

ROOT = Path(__file__).resolve().parents[2]
SEED_SOURCE = "seed chapter (approx.)"


def arch_of(repo_id: str):
    return architecture_from_config(catalog_model(repo_id).config)


LLAMA8 = arch_of("meta-llama/Llama-3.1-8B")
# Llama-3.1-8B (config.json): 32 layers, hidden 4096, 8 KV heads x 128, MLP 14336, vocab 128256, untied LM head.
LLAMA8_MATMUL = 32 * (2 * 4_096 * 4_096 + 2 * 4_096 * 1_024 + 3 * 4_096 * 14_336) + 128_256 * 4_096
LORA_QKVO_R16 = 13_631_488  # PEFT print_trainable_parameters, Llama-3-8B r=16 on q,k,v,o


# --- FLOPs per token (the display rule; the step-time model is tested in tests/time/) ---------------------------------


def test_flops_per_token_by_hand_llama_8b_lora():
    f = flops_per_token(LLAMA8, Scenario.build(method="lora", precision="bf16", seq_len=2_048))
    assert f.total == 4 * LLAMA8_MATMUL + 12 * 32 * 4_096 * 2_048 + 6 * LORA_QKVO_R16 == 33_321_648_128


def test_moe_uses_active_parameters():
    mixtral = arch_of("mistralai/Mixtral-8x7B-v0.1")
    # Routed experts at top-2 of 8: matmul weights = active parameters minus the embedding (32,000 x 4,096) and norms.
    n = matmul_parameters(mixtral)
    assert n == mixtral.active_parameters - 32_000 * 4_096 - (2 * 32 + 1) * 4_096
    assert n < 0.3 * mixtral.total_parameters
    assert flops_per_token(mixtral, Scenario.build(method="lora", seq_len=1_024)).dense == 4 * n


def test_peak_follows_the_compute_dtype():
    a100, t4, b200 = find_gpu("A100 80GB"), find_gpu("T4"), find_gpu("B200")
    assert peak_flops_for(a100, Scenario.build(precision="fp32").precision).flops == 19.5e12  # no TF32 by default
    assert peak_flops_for(a100, Scenario.build(precision="amp_fp16").precision).flops == 312e12
    t4_peak = peak_flops_for(t4, Scenario.build(precision="amp_bf16").precision)
    assert t4_peak.flops == 65e12 and t4_peak.dtype == "fp16" and "no bf16" in t4_peak.note  # flagged, fp16 used
    assert peak_flops_for(b200, Scenario.build(precision="fp32").precision).flops is None
    with pytest.raises(ScenarioError, match="fp32"):
        estimate_throughput(LLAMA8, Scenario.build(precision="fp32"), b200)


# --- the seed rule and the seed's examples ------------------------------------------------------------------------------


def test_seed_rule_resolves_gpu_names_through_the_catalog():
    for name in ("A100-40GB", "NVIDIA A100 40GB", "a100 40gb"):
        assert seed_tokens_per_second(7, name) == 1_000
    assert seed_tokens_per_second(7, find_gpu("A100 40GB")) == 1_000
    assert seed_tokens_per_second(8.03, "H100 SXM") == 2_000  # 8B is "7B" give or take nominal rounding
    assert seed_tokens_per_second(13, "A100-80GB") == 500
    assert seed_tokens_per_second(70.55, "H100 SXM", 8) == 800
    # Other GPUs are not the seed's: the PCIe parts, a 1-GPU 70B line, unknown names.
    assert seed_tokens_per_second(7, "A100 40GB PCIe") is None
    assert seed_tokens_per_second(7, "H100 PCIe") is None
    assert seed_tokens_per_second(7, "H100 SXM", 2) is None
    assert seed_tokens_per_second(7, "no such gpu") is None
    assert seed_tokens_per_second(7, "H100") == 2_000  # the catalog's GPU for "H100" is the SXM board, the seed's
    # Far from every listed size: scaled by listed / model size, and says so.
    small = seed_throughput(1.24, "H100 SXM")
    assert small is not None and small.scaled and small.tokens_per_second == pytest.approx(2_000 * 7 / 1.24)
    assert "scaled" in small.rule


def test_seed_time_and_cost_examples_through_the_price_catalog():
    tps = seed_tokens_per_second(7, "A100-40GB")
    assert tps == 1_000
    # 10,000 examples x 512 tokens x 3 epochs at 1,000 tokens/s = 15,360 s = 4.3 h.
    run = run_cost(Dataset(examples=10_000, avg_tokens=512, epochs=3), 512, tps)
    assert run.tokens == 15_360_000 and round(run.hours, 1) == 4.3 == round(seed_training_hours(5_120_000, 3, tps), 1)
    price = quote_price("A100-40GB", SEED_SOURCE)
    assert (price.on_demand_usd_per_hour, price.spot_usd_per_hour) == (4.00, 1.20) and price.reason is None
    assert (price.per_hour("on_demand"), price.per_hour("spot")) == (4.00, 1.20)  # the price of each basis
    assert (price.source_of("on_demand"), price.source_of("spot")) == (price.on_demand_source, price.spot_source)
    four_hours = Dataset(total_tokens=4 * 3_600 * 1_000)
    one = run_cost(four_hours, 512, tps, 1, price.on_demand_usd_per_hour, price.spot_usd_per_hour)
    assert one.hours == 4 and one.cost_usd_on_demand == 16 and one.cost_usd_spot == pytest.approx(4.80)
    five = run_cost(four_hours.model_copy(update={"runs": 5}), 512, tps, 1, price.on_demand_usd_per_hour, price.spot_usd_per_hour)
    assert five.cost_usd_on_demand == 80 and five.cost_usd_spot == pytest.approx(24)


# --- datasets and prices ------------------------------------------------------------------------------------------------


def test_dataset_scaling_and_sweep():
    d = Dataset(examples=1_000, avg_tokens=256, packing=False, epochs=2)
    assert d.dataset_tokens == 256_000 and d.scaled(10).examples == 10_000
    points = dataset_sweep(d, 1_024, 1_000.0, 2, 3.0, None, factors=(0.1, 1, 10))
    assert [p.tokens for _, p in points] == [204_800, 2_048_000, 20_480_000]  # padded to 1,024, 2 epochs
    assert points[2][1].cost_usd_on_demand == pytest.approx(10 * points[1][1].cost_usd_on_demand)
    assert all(r.cost_usd_spot is None for _, r in points)
    assert Dataset(total_tokens=5).scaled(0.01).total_tokens == 1


def test_prices_are_never_invented():
    names = price_source_names()
    assert names[0] == CHEAPEST_LISTED and SEED_SOURCE in names and "RunPod Community Cloud" in names
    missing = quote_price("RTX 3090", "RunPod Community Cloud")
    assert missing.on_demand_usd_per_hour is None and missing.spot_usd_per_hour is None
    assert "no price for NVIDIA RTX 3090" in missing.reason
    assert quote_price("RTX 3090").on_demand_usd_per_hour is None  # no source lists it at all
    cheapest = quote_price("A100 80GB")  # the lowest on-demand row of any source, with that row's spot (none)
    assert cheapest.on_demand_usd_per_hour == 1.39 and cheapest.on_demand_source == "RunPod Community Cloud"
    assert cheapest.spot_usd_per_hour is None and "lists no spot price" in cheapest.reason
    with pytest.raises(CatalogError, match="unknown price source"):
        quote_price("A100 80GB", "seed chapter")
    assert quote_price("A100 80GB", " SEED CHAPTER (APPROX.) ").spot_usd_per_hour == 1.80
    sc = Scenario.build(method="lora", precision="bf16")
    plan = estimate_plan(LLAMA8, sc, Dataset(total_tokens=10**6), find_gpu("RTX 3090"), price_source="RunPod Secure Cloud")
    assert plan.run.cost_usd_on_demand is None and plan.run.cost_usd_spot is None and plan.run.hours > 0


# --- the plan search ----------------------------------------------------------------------------------------------------


def _price(gpu: str, usd: float) -> GpuPrice:
    return GpuPrice(gpu=gpu, source_name="test", on_demand_usd_per_hour=usd, date=dt.date(2026, 1, 1), url="test")


def test_a_plan_that_does_not_fit_is_never_offered_as_cheapest():
    # A T4 at $0.01/h would be by far the cheapest way to process the tokens, but 8B LoRA on a bf16 base needs more
    # than its 16 GB, and DDP does not divide memory: it must not be offered; the A100 80GB at $10/h is.
    sc = Scenario.build(method="lora", precision="bf16", seq_len=2_048)
    data = Dataset(examples=10_000, avg_tokens=512, epochs=3)
    t4, a100 = find_gpu("T4"), find_gpu("A100 80GB")
    prices = [_price("NVIDIA T4", 0.01), _price("NVIDIA A100 80GB", 10.0)]
    trap = estimate_plan(LLAMA8, sc, data, t4, 1, Strategy.DDP, price_source="test", prices=prices)
    assert not trap.fits
    search = search_plans(LLAMA8, sc, data, gpus=[t4, a100], strategy=Strategy.DDP, price_source="test", prices=prices)
    assert search.cheapest is not None and search.cheapest.gpu == a100.name and search.cheapest.fits
    assert trap.run.cost_usd_on_demand < search.cheapest.run.cost_usd_on_demand  # cheaper, but it does not fit
    assert all(p.gpu != t4.name for p in search.plans) and all(p.fits for p in search.plans)
    assert [e.gpu for e in search.excluded] == [t4.name] and "does not fit" in search.excluded[0].reason
    assert [p.num_gpus for p in search.for_gpu(a100.name)] == list(PLAN_GPU_COUNTS)
    assert search.cheapest.num_gpus == 1  # DDP's scaling efficiency makes more GPUs cost more


@pytest.mark.parametrize("strategy", list(Strategy))
def test_plan_search_lists_exactly_the_plans_that_fit(strategy):
    sc = Scenario.build(method="full", precision="amp_bf16", seq_len=2_048)
    est = estimate_memory(LLAMA8, sc)
    search = search_plans(LLAMA8, sc, Dataset(total_tokens=10**8), strategy=strategy, estimate=est)
    listed = {(p.gpu, p.num_gpus) for p in search.plans}
    for gpu in load_gpus():
        for n in PLAN_GPU_COUNTS:
            # one GPU trains without sharding (engine.plan.cost.estimate_plan): its fit is plain single-GPU training
            fits = check_fit(LLAMA8, sc, gpu, strategy if n > 1 else Strategy.DDP, n,
                             estimate=estimate_memory(LLAMA8, sc, gpu)).fits  # the GPU decides the attention kernel
            assert ((gpu.name, n) in listed) == fits, (gpu.name, n)
    assert search.plans and search.fastest == min(search.plans, key=lambda p: p.run.hours)
    priced = [p for p in search.plans if p.cost("on_demand") is not None]
    assert search.cheapest == min(priced, key=lambda p: (p.cost("on_demand"), p.run.hours))
    records = search.records()
    assert len(records) == len(search.plans) and sum(r["cheapest"] for r in records) == 1


def test_pareto_front():
    sc = Scenario.build(method="lora", precision="bf16")
    search = search_plans(LLAMA8, sc, Dataset(total_tokens=10**8), strategy=Strategy.ZERO3, price_source=SEED_SOURCE)
    priced = [p for p in search.plans if p.cost("on_demand") is not None]
    front = list(search.pareto)
    assert front and front == pareto_front(search.plans)

    def dominates(a, b):
        ca, cb = a.cost("on_demand"), b.cost("on_demand")
        return a.run.hours <= b.run.hours and ca <= cb and (a.run.hours < b.run.hours or ca < cb)

    for f in front:
        assert not any(dominates(p, f) for p in priced)
    for p in priced:
        assert p in front or any(dominates(f, p) for f in front)
    assert search.cheapest in front and front[0].run.hours == min(p.run.hours for p in priced)
    # Spot ranking uses spot prices (the seed chapter lists them).
    spot = search_plans(LLAMA8, sc, Dataset(total_tokens=10**8), price_source=SEED_SOURCE, basis="spot")
    assert spot.cheapest is not None and spot.cheapest.run.cost_usd_spot is not None


def test_plans_say_which_link_carries_the_traffic():
    sc = Scenario.build(method="lora", precision="bf16")
    plan = estimate_plan(LLAMA8, sc, Dataset(total_tokens=10**8), find_gpu("RTX 4090"), 4, Strategy.ZERO3)
    assert "PCIe (no peer-to-peer" in " ".join(plan.notes)
    node = estimate_plan(LLAMA8, sc, Dataset(total_tokens=10**8), find_gpu("H100 SXM"), 8, Strategy.ZERO3)
    assert node.throughput.step.link.startswith("NVLink")
    # two nodes: ZeRO-3's reduce-scatters and all-gathers are rings (NCCL has no tree for them), whose node crossing
    # runs at the node's 8 NICs, 8 x 200 Gb/s x 0.96 = 192 GB/s (NVIDIA in NVIDIA/nccl#812: 192 GB/s on DGX-A100s
    # with 8 x 200 Gb/s), below H100 NVLink's 450 GB/s x 0.8 = 360: the network carries the traffic
    big = estimate_plan(LLAMA8, sc, Dataset(total_tokens=10**8), find_gpu("H100 SXM"), 16, Strategy.ZERO3)
    assert big.throughput.step.link == "InfiniBand between 2 nodes"


# --- published measurements -------------------------------------------------------------------------------------------


def test_comparison_with_published_measurements():
    rows = compare_measurements()
    assert len(rows) == sum(m.expressible for m in load_throughput_measurements()) >= 15
    for r in rows:
        assert r.measured_tokens_per_second > 0 and r.predicted_tokens_per_second > 0
        assert r.error == pytest.approx(r.predicted_tokens_per_second / r.measured_tokens_per_second - 1)
        assert 0 < r.mfu <= r.hfu < 1 and r.source and r.locator
        assert sum(r.step_time_breakdown_s.values()) > 0
    assert {r.role for r in rows} == {"fit", "holdout"}


def test_measurement_scenarios_follow_the_rows():
    for m in load_throughput_measurements():
        if not m.expressible:
            assert m.why_not_expressible
            continue
        sc = measurement_scenario(m)
        freeze = freeze_setting(m.method)  # "freeze (last N layers...)": full fine-tuning of the last N blocks
        method = "full" if freeze else m.method
        assert (sc.method.value, sc.micro_batch_size, sc.seq_len, sc.gradient_checkpointing, sc.optimizer.value) == (
            method, m.micro_batch_size, m.seq_len, m.gradient_checkpointing, m.optimizer)
        assert (sc.trainable_layers, sc.frozen_input_grads) == (freeze or (None, False))


# --- command line -------------------------------------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


LORA_8B = ("estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "lora", "--precision", "bf16")


def test_cli_time_and_cost():
    proc = cli(*LORA_8B, "--gpu", "A100 40GB", "--examples", "10000", "--avg-tokens", "512", "--epochs", "3",
               "--price-source", SEED_SOURCE)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["fits"] is True
    sc = Scenario.build(method="lora", precision="bf16")
    expected = estimate_throughput(LLAMA8, sc, find_gpu("A100 40GB")).tokens_per_second
    assert out["tokens_per_second"] == pytest.approx(expected)
    assert out["hours"] == pytest.approx(15_360_000 / expected / 3_600) and out["gpu_hours"] == out["hours"]
    assert out["cost_usd_on_demand"] == pytest.approx(4.00 * out["gpu_hours"])
    assert out["cost_usd_spot"] == pytest.approx(1.20 * out["gpu_hours"]) and out["cost_reason"] is None
    assert out["time_cost"]["tokens"] == 15_360_000
    assert out["step_time_s"] == pytest.approx(sum(out["step_time_breakdown_s"].values()))
    assert set(out["step_time_breakdown_s"]) == {"matmul", "attention", "memory_bound", "dequantization", "optimizer",
                                                 "communication", "overhead"}
    assert 0 < out["mfu"] <= out["hfu"] < 1 and out["calibration"] is None
    assert round(out["time_cost"]["seed_rule"]["hours"], 1) == 4.3  # the seed's 7B on A100-40GB line


def test_cli_multi_gpu_calibration_and_missing_price():
    args = (*LORA_8B, "--gpu", "RTX 3090", "--num-gpus", "2", "--strategy", "zero3", "--dataset-tokens", "1000000",
            "--price-source", "RunPod Community Cloud")
    raw = json.loads(cli(*args).stdout)
    proc = cli(*args, "--measured-tokens-per-second", "1500")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["cost_usd_on_demand"] is None and out["cost_usd_spot"] is None
    assert "no price for NVIDIA RTX 3090" in out["cost_reason"]
    assert out["tokens_per_second"] == pytest.approx(1500)  # calibrated to the user's run of this plan
    assert out["calibration"]["factor"] == pytest.approx(1500 / raw["tokens_per_second"])
    assert out["calibration"]["raw_error"] == pytest.approx(raw["tokens_per_second"] / 1500 - 1)
    assert out["hours"] == pytest.approx(raw["hours"] * raw["tokens_per_second"] / 1500)
    assert out["time_cost"]["link"] == "NVLink"  # two RTX 3090 on their NVLink bridge
    assert out["gpu_hours"] == pytest.approx(2 * out["hours"])
    assert "--dataset-tokens" in cli("estimate", "--help").stdout


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--dataset-tokens", "1000"], "needs --gpu"),
        (["--gpu", "H100 SXM", "--examples", "10"], "--avg-tokens"),
        (["--gpu", "H100 SXM", "--measured-tokens-per-second", "3000"], "dataset size"),
        (["--gpu", "H100 SXM", "--dataset-tokens", "10", "--examples", "3", "--avg-tokens", "5"], "not both"),
        (["--gpu", "H100 SXM", "--dataset-tokens", "1000", "--measured-tokens-per-second", "0"], "must be positive"),
        (["--gpu", "H100 SXM", "--dataset-tokens", "1000", "--measured-tokens-per-second", "99"], "check that the measured run"),
        (["--gpu", "H100 SXM", "--dataset-tokens", "0"], "--dataset-tokens: Input should be greater than or equal to 1"),
        (["--gpu", "H100 SXM", "--dataset-tokens", "1000", "--price-source", "nowhere"], "unknown price source"),
    ],
)
def test_cli_bad_time_cost_options(extra, needle):
    proc = cli(*LORA_8B, *extra)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr


def test_every_plan_record_and_the_cli_json_carry_the_prices_date(capsys):
    """A price is given with its date (data/gpu_prices.csv: the seed chapter's H100 row is dated 2026-11-29, the date
    the seeds were received; RunPod Community Cloud's 2026-09-25, its transcription)."""
    from engine.cli import main

    sc = Scenario.build(method="lora")
    seed = estimate_plan(LLAMA8, sc, Dataset(total_tokens=10**6), find_gpu("H100 SXM"), price_source="seed chapter (approx.)")
    runpod = estimate_plan(LLAMA8, sc, Dataset(total_tokens=10**6), find_gpu("H100 SXM"), price_source="RunPod Community Cloud")
    assert seed.record()["price_date"] == "2026-11-29" and runpod.record()["price_date"] == "2026-09-25"
    assert main(["estimate", "--offline", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--gpu", "H100 SXM",
                 "--dataset-tokens", "1000000", "--price-source", "RunPod Community Cloud"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["time_cost"]["price_date"] == "2026-09-25", out.get("time_cost")


def test_truncation_note_reads_huge_datasets_in_trillions():
    # 10^12 examples x 10^7 tokens = 10^19 tokens = 10,000,000 T; cut to 2,048 tokens each: 2.048 x 10^15 = 2,048 T per
    # epoch (a fresh user saw "10,000,000,000,000.00M tokens" before)
    (note,) = Dataset(examples=10**12, avg_tokens=10**7).token_notes(2048)
    assert "= 10,000,000.0T tokens of data give 2,048.0T tokens per epoch; 9,997,952.0T (100%)" in note
