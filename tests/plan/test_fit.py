"""Fit engine (engine/plan/fit.py) and the minimal multi-GPU model (engine/memory/parallel.py)."""

from __future__ import annotations

import random

import pytest

import engine.plan.fit as fit_module
from engine.model.architecture import Architecture
from engine.model.build import architecture_from_config
from engine.model.catalog import load_models
from engine.errors import ScenarioError
from engine.plan.fit import TECHNIQUES, check_fit, largest_true, model_matrix, precision_advice, technique_matrix, what_fits
from engine.plan.largest import SEED_LARGEST_MODEL, compare_with_seed, seed_largest_model_table, seed_size_range
from engine.hardware.gpus import find_gpu, load_gpus
from engine.memory.estimate import estimate_memory
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import MAX_GPUS, Strategy, decoder_layer_parameters, largest_gathered_unit, plan_parallel
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Method, Scenario
from engine.model.sources import config_from_catalog

LLAMA_8B = "meta-llama/Llama-3.1-8B"
P_LLAMA_8B = 8_030_261_248  # unique parameters of Llama 3.1 8B (../shared/reference/configs/param_counts.json)
VOCAB = 128_256
HIDDEN = 4_096
A100_40 = 40_960 * 2**20  # published nvidia-smi total of A100-SXM4-40GB, bytes
A100_80 = 81_920 * 2**20
CONTEXT = 1343 * 2**20  # CUDA context: 1343 MB (MiB) used after init (transformers docs, "Model training anatomy")


def device_used(peak: float) -> float:
    """What nvidia-smi would show: the tensor peak + a 10% allocator reserve + the CUDA context
    (engine.memory.device.ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES), written out independently."""
    return peak * 1.1 + CONTEXT


def arch_of(repo_id: str) -> Architecture:
    return architecture_from_config(config_from_catalog(repo_id)[0])


@pytest.fixture(scope="module")
def llama() -> Architecture:
    return arch_of(LLAMA_8B)


@pytest.fixture(scope="module")
def catalog() -> list[tuple[str, Architecture]]:
    return [(m.name, architecture_from_config(m.config)) for m in load_models()]


def pure_bf16_step(**kw) -> Scenario:
    """Pure bf16 full fine-tuning with fused AdamW and a 1-token sequence: the optimizer step is the peak
    and holds weights 2 + gradients 2 + AdamW states 2 x 2 = 8 bytes per parameter (engine.scenario.optimizer)."""
    return Scenario.build(method=Method.FULL, precision=PrecisionMode.BF16, optimizer=Optimizer.ADAMW_FUSED,
                          micro_batch_size=1, seq_len=1, **kw)


# --- hand-checked verdicts -------------------------------------------------------------------------------------------------


def test_hand_checked_pure_bf16_full_finetune_on_one_gpu(llama):
    assert llama.total_parameters == P_LLAMA_8B
    expected_peak = 8 * P_LLAMA_8B  # 64,242,089,984 bytes
    est = estimate_memory(llama, pure_bf16_step())
    assert est.peak_phase == "optimizer_step" and est.total_bytes == expected_peak

    on_80 = check_fit(llama, pure_bf16_step(), find_gpu("A100 80GB"))
    assert on_80.fits and on_80.peak_bytes == expected_peak
    assert on_80.headroom_bytes == pytest.approx(A100_80 - device_used(expected_peak)) == 13_824_809_369.6
    assert on_80.min_gpus == 1

    on_40 = check_fit(llama, pure_bf16_step(), find_gpu("A100 40GB"))
    assert not on_40.fits and on_40.headroom_bytes == pytest.approx(A100_40 - device_used(expected_peak))
    assert on_40.min_gpus is None  # DDP: every GPU holds everything
    assert not check_fit(llama, pure_bf16_step(), find_gpu("A100 40GB"), Strategy.DDP, num_gpus=4).fits


def test_hand_checked_zero3_sharding(llama):
    sc = pure_bf16_step()
    est = estimate_memory(llama, sc)
    # Gathered unit: the untied LM head (128,256 x 4,096) is larger than a decoder layer; bf16 = 2 bytes.
    # q, o (4,096 x 4,096), k, v (1,024 x 4,096), gate, up, down (4,096 x 14,336), two RMSNorm weights:
    assert decoder_layer_parameters(llama) == 2 * HIDDEN * HIDDEN + 2 * 1024 * HIDDEN + 3 * HIDDEN * 14_336 + 2 * HIDDEN
    assert largest_gathered_unit(llama)[0] == VOCAB * HIDDEN
    # In use at the start of backward: the LM head; prefetched: the last decoder layer (bf16 = 2 bytes).
    gathered = 2 * (VOCAB * HIDDEN + decoder_layer_parameters(llama))
    bucket = 2 * 500_000_000  # DeepSpeed reduce_bucket_size default 5e8 elements x bf16 gradient
    logits = 12 * 1 * VOCAB  # fp32 log-softmax + two gradients, batch 1 x 1 token
    assert est.components_at("backward")["logits_loss"] == logits
    act = est.components_at("backward")["activations"]

    def by_hand(n: int) -> float:
        step = 8 * P_LLAMA_8B / n + bucket  # weights, gradients and states all sharded
        backward = 6 * P_LLAMA_8B / n + act + logits + gathered + bucket  # no gradients yet (no accumulation)
        return max(step, backward)

    plan = plan_parallel(est, llama, sc, Strategy.ZERO3)
    for n in (1, 2, 3, 8, 64):
        assert plan.per_gpu_bytes(n) == pytest.approx(by_hand(n), rel=1e-12)
    two = check_fit(llama, sc, find_gpu("A100 40GB"), Strategy.ZERO3, num_gpus=2)
    assert two.fits and two.min_gpus == 2 and two.peak_phase == "optimizer_step"
    assert two.headroom_bytes == pytest.approx(A100_40 - device_used(4 * P_LLAMA_8B + bucket)) == 5_108_285_900.8
    assert not check_fit(llama, sc, find_gpu("A100 40GB"), Strategy.ZERO3, num_gpus=1).fits


def test_min_gpus_is_the_boundary_of_a_monotone_per_gpu_peak(catalog):
    arch = dict(catalog)["Llama 3.1 70B"]
    sc = Scenario.build(method=Method.FULL, gradient_checkpointing=True)
    plan = plan_parallel(estimate_memory(arch, sc), arch, sc, Strategy.ZERO3)
    peaks = [plan.per_gpu_bytes(n) for n in range(1, 65)]
    assert all(a >= b for a, b in zip(peaks, peaks[1:]))
    for name in ("H100 SXM", "A100 40GB", "RTX 4090", "MI300X"):
        usable = find_gpu(name).usable_memory_bytes
        n = plan.min_gpus(usable)
        assert n is not None and n > 1
        assert plan.per_gpu_bytes(n) <= usable < plan.per_gpu_bytes(n - 1)
    assert plan.min_gpus(1.0) is None  # nothing fits in one byte, even on 1,024 GPUs
    ddp = plan_parallel(estimate_memory(arch, sc), arch, sc, Strategy.DDP)
    # DDP never divides memory; from 2 GPUs on it adds the reducer's gradient-sized buckets.
    assert ddp.per_gpu_bytes(2) == ddp.per_gpu_bytes(MAX_GPUS) == ddp.per_gpu_bytes(1) + ddp.bucket_bytes


def test_num_gpus_out_of_range_is_a_scenario_error(llama):
    for n in (0, MAX_GPUS + 1):
        with pytest.raises(ScenarioError, match="num_gpus"):
            check_fit(llama, Scenario(), find_gpu("H100 SXM"), Strategy.ZERO3, num_gpus=n)


def test_bf16_on_a_gpu_without_bf16_suggests_fp16(llama):
    for name in ("T4", "V100 16GB", "V100 32GB"):
        advice = check_fit(llama, Scenario.build(method=Method.QLORA), find_gpu(name)).warnings
        assert len(advice) == 1 and "no bf16" in advice[0] and "fp16" in advice[0]
        assert precision_advice(find_gpu(name), Scenario.build(precision=PrecisionMode.BF16))
        assert not precision_advice(find_gpu(name), Scenario.build(precision=PrecisionMode.AMP_FP16))
    assert not check_fit(llama, Scenario(), find_gpu("A100 80GB")).warnings


# --- matrices ----------------------------------------------------------------------------------------------------------------


def test_model_matrix_estimates_each_model_once_and_agrees_with_check_fit(catalog, monkeypatch):
    calls = []
    real = fit_module.estimate_memory
    monkeypatch.setattr(fit_module, "estimate_memory", lambda a, s: calls.append(1) or real(a, s))
    gpus = load_gpus()
    sc = Scenario.build(method=Method.LORA, lora_targets="q_proj,v_proj")  # GPT-2 has no q_proj: falls back
    m = model_matrix(catalog, sc, gpus, Strategy.ZERO3)
    assert len(calls) == len(catalog)  # one estimate per model, whatever the number of GPUs
    assert m.gpus == tuple(g.name for g in gpus) and len(m.rows) == len(catalog)
    gpt2 = next(r for r in m.rows if r.label.startswith("GPT-2"))
    assert gpt2.error is None and "attention projections" in gpt2.note
    monkeypatch.setattr(fit_module, "estimate_memory", real)
    arch = dict(catalog)
    for row in m.rows[::5]:
        for j in (0, 7, len(gpus) - 1):
            ref = check_fit(arch[row.label], row.scenario, gpus[j], Strategy.ZERO3)
            cell = row.cells[j]
            assert (cell.fits, cell.headroom_bytes, cell.min_gpus) == (ref.fits, ref.headroom_bytes, ref.min_gpus)
            assert ref.fits == (device_used(ref.peak_bytes) <= ref.usable_memory_bytes)
    assert len(m.records()) == len(catalog) * len(gpus)


def test_technique_matrix_rows(llama):
    gpus = load_gpus()
    m = technique_matrix(llama, Scenario(), gpus)
    assert [r.label for r in m.rows] == [t.label for t in TECHNIQUES] + ["Inference · bf16 serving"] and len(TECHNIQUES) == 10
    serving = m.rows[-1]
    # Serving Llama-3.1-8B in bf16 with 2,048 tokens of KV cache (128 KiB/token = 256 MiB): about 15.4 GiB, so one
    # replica fits a 24 GB card and not a 16 GB T4.
    assert serving.cells[m.gpus.index("NVIDIA RTX 4090")].fits and not serving.cells[m.gpus.index("NVIDIA T4")].fits
    m = m.model_copy(update={"rows": m.rows[:-1]})
    peak = {r.label: r.estimate.total_bytes for r in m.rows}
    assert peak["QLoRA · 4-bit base"] < peak["LoRA · bf16 base"] < peak["Full · pure bf16"] < peak["Full · mixed bf16"] < peak["Full · fp32"]
    assert peak["Full · mixed bf16 + 8-bit AdamW"] < peak["Full · mixed bf16"]
    zero3 = m.rows[-1]
    assert zero3.strategy is Strategy.ZERO3 and all(r.strategy is Strategy.DDP for r in m.rows[:-1])
    a100 = m.gpus.index("NVIDIA A100 40GB")
    # Mixed bf16 at 2,048 tokens under DeepSpeed ZeRO-3: a bf16 model (2 B) + fp32 master weights (4 B) + AdamW
    # states (8 B) shard at the start of backward, but ~20 GB of activations, logits, gathered units and the 5e8
    # bucket stay on every GPU, so 40 GB GPUs need 8: 7 leave 39.2 GB of tensors per GPU, which with the
    # allocator reserve (10%) and the CUDA context (1.3 GiB) exceed 40 GiB; 8 leave 37.2 GB.
    assert m.rows[1].cells[a100].min_gpus is None and zero3.cells[a100].min_gpus == 8
    t4 = m.gpus.index("NVIDIA T4")
    assert m.rows[0].cells[t4].warning is None  # fp32 runs anywhere
    assert "bf16" in m.rows[1].cells[t4].warning


def test_technique_rows_that_cannot_run_keep_their_reason(llama):
    base = Scenario.build(attention="flash_attention_2")  # flash attention is 16-bit only: the fp32 row is invalid
    m = technique_matrix(llama, base, load_gpus())
    assert "flash_attention_2" in m.rows[0].error and not m.rows[0].cells
    assert all(r.cells for r in m.rows[1:])


# --- what fits ---------------------------------------------------------------------------------------------------------------


def test_largest_true_finds_the_boundary():
    rng = random.Random(7)
    for _ in range(300):
        hi = rng.randint(1, 5000)
        edge = rng.randint(0, hi + 3)
        calls = []
        got = largest_true(lambda x: calls.append(x) or x <= edge, 1, hi)
        assert got == (None if edge < 1 else min(edge, hi))
        assert len(calls) <= 2 * hi.bit_length() + 3  # logarithmic


@pytest.mark.parametrize(
    ("repo", "method", "gpu", "strategy", "n"),
    [(LLAMA_8B, Method.LORA, "A100 80GB", Strategy.DDP, 1), (LLAMA_8B, Method.QLORA, "RTX 4090", Strategy.DDP, 1),
     ("Qwen/Qwen2.5-7B", Method.FULL, "H100 SXM", Strategy.ZERO3, 4)],
)
def test_what_fits_answers_fit_and_the_next_size_does_not(repo, method, gpu, strategy, n):
    arch = arch_of(repo)
    sc = Scenario.build(method=method, gradient_checkpointing=True)
    g = find_gpu(gpu)
    wf = what_fits(arch, sc, g, strategy, n)
    for limit, field in ((wf.micro_batch, "micro_batch_size"), (wf.seq_len, "seq_len")):
        assert limit.value is not None and limit.next_value == limit.value + 1
        at = check_fit(arch, sc.model_copy(update={field: limit.value}), g, strategy, n)
        above = check_fit(arch, sc.model_copy(update={field: limit.value + 1}), g, strategy, n)
        assert at.fits and not above.fits, (field, limit)
        assert (at.peak_bytes, above.peak_bytes) == (limit.peak_bytes, limit.next_peak_bytes)


def test_what_fits_reports_nothing_and_caps():
    big = arch_of("meta-llama/Llama-3.1-70B")
    wf = what_fits(big, Scenario.build(method=Method.FULL), find_gpu("T4"))
    assert wf.micro_batch.value is None and wf.seq_len.value is None
    small = arch_of("HuggingFaceTB/SmolLM2-135M")
    wf = what_fits(small, Scenario.build(method=Method.LORA, gradient_checkpointing=True), find_gpu("H200"))
    assert wf.seq_len.value == wf.seq_len.cap == small.max_position_embeddings and wf.seq_len.next_value is None
    assert wf.seq_len.capped_by == "the model's context length"


# --- the seed's largest-model table ------------------------------------------------------------------------------------------


def test_seed_sizes_and_comparison():
    assert seed_size_range("7B") == (7e9, 7e9) and seed_size_range("30-40B") == (30e9, 40e9)
    assert compare_with_seed(1_235_814_400, "1B") == "same"  # Llama 3.2 1B
    assert compare_with_seed(8_030_261_248, "3B") == "larger"
    assert compare_with_seed(2_506_172_416, "3B") == "smaller"
    assert compare_with_seed(None, "3B") == "nothing fits" and compare_with_seed(10, None) == "no seed number"


def test_seed_table_is_recomputed_for_every_seed_line(catalog):
    common = dict(micro_batch_size=1, seq_len=2048, gradient_checkpointing=True)
    rows = seed_largest_model_table(catalog, Scenario.build(method=Method.FULL, **common),
                                    Scenario.build(method=Method.LORA, precision=PrecisionMode.BF16, **common), load_gpus())
    assert [r.seed for r in rows] == list(SEED_LARGEST_MODEL) and len(rows) == 8
    assert [(r.seed.seed_label, r.seed.seed_full, r.seed.seed_efficient) for r in rows[:5]] == [
        ("RTX 3090", "1B", "3B"), ("RTX 4090", "1B", "3B"), ("A100-40GB", "3B", "7B"), ("A100-80GB", "7B", "13B"),
        ("H100", "7B", "13B")]
    assert [(r.seed.num_gpus, r.seed.seed_efficient) for r in rows[5:]] == [(2, "7-13B"), (4, "30-40B"), (8, "70B")]
    assert all(r.strategy is Strategy.DDP for r in rows[:5]) and all(r.strategy is Strategy.ZERO3 for r in rows[5:])
    by = {r.seed.seed_label: r for r in rows}
    assert by["A100-80GB"].full.parameters >= by["A100-40GB"].full.parameters
    assert by["8× H100"].efficient.parameters >= by["H100"].efficient.parameters
    for r in rows:  # each answer really fits, on that many GPUs
        assert device_used(r.efficient.peak_bytes) <= find_gpu(r.seed.gpu).usable_memory_bytes


# --- command line ------------------------------------------------------------------------------------------------------------


def test_cli_estimate_with_a_gpu_adds_the_fit(capsys):
    import json

    from engine.cli import main

    base = ["estimate", "--model", LLAMA_8B, "--offline", "--precision", "bf16", "--seq-len", "1"]
    assert main(base + ["--gpu", "a100-40gb", "--num-gpus", "2", "--strategy", "zero3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["gpu"] == {"name": "NVIDIA A100 40GB", "usable_memory_bytes": A100_40, "memory_bytes": 40 * 2**30}
    assert (out["fits"], out["headroom_bytes"], out["min_gpus"], out["num_gpus"], out["strategy"]) == (
        True, round(A100_40 - device_used(4 * P_LLAMA_8B + 2 * 500_000_000)), 2, 2, "zero3")  # + DeepSpeed's 5e8-element bf16 bucket
    assert main(base + ["--gpu", "A100 80GB"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["fits"], out["headroom_bytes"], out["min_gpus"]) == (True, round(A100_80 - device_used(8 * P_LLAMA_8B)), 1)


def test_cli_unknown_gpu_exits_2_with_the_closest_names(capsys):
    from engine.cli import main

    assert main(["estimate", "--model", LLAMA_8B, "--offline", "--gpu", "A100 81"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'A100 81'" in err and "closest: NVIDIA A100 80GB" in err
    assert main(["estimate", "--model", LLAMA_8B, "--offline", "--num-gpus", "2"]) == 2
    assert "need --gpu" in capsys.readouterr().err
