"""What the GPU really holds beyond tensors (allocator reserve, CUDA context, paged states), the optimizers
added for issue #5 (paged 32-bit AdamW, Lion, SGD with momentum) and the fused cross-entropy option.

Each expected value is written out from its source, not taken from the engine.
"""

import json

import pytest

from engine.model.build import architecture_from_config
from engine.cli import main
from engine.plan.fit import check_fit
from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.memory.logits import liger_chunk_tokens
from engine.memory.device import tensor_budget
from engine.scenario.optimizer import Optimizer
from engine.scenario.training import Scenario
from reference import reference_config, require_reference

require_reference()

LLAMA8 = architecture_from_config(reference_config("meta-llama/Llama-3.1-8B"))
P8 = 8_030_261_248  # unique parameters, ../shared/reference/configs/param_counts.json
VOCAB, HIDDEN = 128_256, 4_096
CONTEXT = 1343 * 2**20  # transformers docs "Model training anatomy": 1343 MB used by NVML right after init


def full_bf16(optimizer: str, **kw) -> Scenario:
    return Scenario.build(precision="bf16", optimizer=optimizer, seq_len=1, **kw)


def test_allocated_reserved_and_nvidia_smi():
    e = estimate_memory(LLAMA8, full_bf16("adamw_fused"))
    # pure bf16 + fused AdamW at the optimizer step: 2 + 2 + 4 B/param
    assert e.peak_allocated_bytes == e.total_bytes == 8 * P8
    assert e.peak_reserved_bytes == pytest.approx(8 * P8 * 1.10)  # +10% caching-allocator reserve
    assert e.device_used_bytes == pytest.approx(8 * P8 * 1.10 + CONTEXT)
    assert {p.key: p.bytes for p in e.overheads} == pytest.approx({"allocator_reserve": 0.8 * P8, "cuda_context": CONTEXT})
    # the budget for tensors is the inverse: what is left after the context, shrunk by the reserve
    assert tensor_budget(80 * 2**30) == pytest.approx((80 * 2**30 - CONTEXT) / 1.1)
    assert tensor_budget(1.0) == 0.0


def test_fit_counts_what_nvidia_smi_shows():
    # 8 B/param x 8.03B = 64.2 GB of tensors: 72.1 GB with the reserve and context, under the 80 GiB of an
    # A100 80GB (81,920 MiB, nvidia-smi) but not under a 40 GiB card.
    sc = full_bf16("adamw_fused")
    fit = check_fit(LLAMA8, sc, find_gpu("A100 80GB"))
    assert fit.fits and fit.device_used_bytes == pytest.approx(8 * P8 * 1.1 + CONTEXT)
    assert fit.headroom_bytes == pytest.approx(81_920 * 2**20 - (8 * P8 * 1.1 + CONTEXT))
    # A case whose tensors fit but whose nvidia-smi total does not: LoRA on the bf16 base at 800 tokens
    # (about 24 GB of tensors) on an RTX 4090 (24,564 MiB = 25.76 GB in nvidia-smi).
    tight = find_gpu("RTX 4090")
    sc = Scenario.build(method="lora", precision="bf16", seq_len=800)
    lora = estimate_memory(LLAMA8, sc)
    assert lora.peak_allocated_bytes < 24_564 * 2**20 < lora.peak_allocated_bytes * 1.1 + CONTEXT
    assert not check_fit(LLAMA8, sc, tight).fits


def test_paged_adamw_32bit_states_are_fp32_and_outside_torchs_allocator():
    e = estimate_memory(LLAMA8, full_bf16("paged_adamw_32bit"))
    # bitsandbytes creates 32-bit states as float32 whatever the parameter dtype: 2 x 4 B/param
    assert e.components_at("optimizer_step")["optimizer_states"] == 8 * P8
    assert e.pageable_bytes == 8 * P8
    # max_memory_allocated does not see cudaMallocManaged memory; nvidia-smi does while it is resident
    assert e.peak_allocated_bytes == e.total_bytes - 8 * P8 == 4 * P8
    assert e.device_used_bytes == pytest.approx(4 * P8 * 1.1 + 8 * P8 + CONTEXT)
    assert not estimate_memory(LLAMA8, full_bf16("adamw_8bit")).pageable_bytes


def test_lion_and_sgd_momentum_state_sizes():
    states = {o: estimate_memory(LLAMA8, full_bf16(o)).components_at("optimizer_step")["optimizer_states"]
              for o in ("lion_32bit", "sgd_momentum", "sgd", "lion_8bit")}
    assert states["lion_32bit"] == 4 * P8  # one fp32 momentum (Chen et al. 2023, Algorithm 2)
    assert states["sgd_momentum"] == 2 * P8  # torch SGD momentum_buffer = clone of the bf16 gradient
    assert states["sgd"] == 0
    # 8-bit Lion: one uint8 state + an fp32 absmax per 256 elements; tensors under 4,096 elements stay fp32.
    expected = 0.0
    for g in LLAMA8.tensors:
        n = g.numel
        expected += g.count * (4 * n if n < 4096 else n + -(-n // 256) * 4)
    assert states["lion_8bit"] == expected
    assert Optimizer.SGD_MOMENTUM.hf_name == "sgd" and Optimizer.SGD_MOMENTUM.hf_optim_args == "momentum=0.9"


def test_fused_cross_entropy_replaces_the_vocabulary_sized_tensors():
    lora = dict(method="lora", precision="bf16", seq_len=2048)
    plain = estimate_memory(LLAMA8, Scenario.build(**lora))
    fused = estimate_memory(LLAMA8, Scenario.build(**lora, fused_cross_entropy=True))
    assert plain.components_at("backward")["logits_loss"] == 12 * 2048 * VOCAB
    # Liger: chunk = next_pow2(ceil(2048 / ceil(128256 / 4096))) = next_pow2(64) = 64 tokens
    assert liger_chunk_tokens(2048, VOCAB, HIDDEN) == 64
    assert liger_chunk_tokens(3000, VOCAB, HIDDEN) == 128  # ceil(3000 / 32) = 94 -> 128
    assert fused.components_at("backward")["logits_loss"] == 2048 * HIDDEN * 2 + 64 * VOCAB * (2 + 4)
    # full fine-tuning: the LM head's gradient is created in the forward (bf16 weights: 2 B)
    full = estimate_memory(LLAMA8, Scenario.build(precision="bf16", seq_len=2048, fused_cross_entropy=True))
    assert full.components_at("backward")["logits_loss"] == 2048 * HIDDEN * 2 + 64 * VOCAB * 6 + VOCAB * HIDDEN * 2


def test_cli_estimate_reports_the_three_memory_kinds(capsys):
    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--precision", "bf16", "--seq-len", "1",
                 "--optimizer", "paged_adamw_8bit"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_phase"] == "optimizer_step"
    assert out["peak_allocated_bytes"] == out["total_bytes"] - out["pageable_bytes"]
    assert out["peak_reserved_bytes"] == round(out["peak_allocated_bytes"] * 1.1)
    assert out["device_used_bytes"] == pytest.approx(out["peak_reserved_bytes"] + out["pageable_bytes"] + CONTEXT, abs=2)
    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--fused-cross-entropy"]) == 0
    assert json.loads(capsys.readouterr().out)["scenario"]["fused_cross_entropy"] is True


def test_llm_int8_base_weights():
    # LLM.int8: 1 B per weight + one fp32 scale per output row (bitsandbytes Int8Params.SCB); the rest of
    # the model is cast to fp32 by prepare_model_for_kbit_training; LoRA adapters (r=16 on q,k,v,o) in fp32.
    e = estimate_memory(LLAMA8, Scenario.build(method="qlora", quant_type="int8", precision="bf16", seq_len=1))
    linear = [g for g in LLAMA8.tensors if g.linear]
    quantized = sum(g.count * (g.numel + g.shape[0] * 4) for g in linear)
    others = sum(g.parameters for g in LLAMA8.tensors if not g.linear) * 4
    adapters = 32 * 16 * ((4096 + 4096) * 2 + (4096 + 1024) * 2) * 4
    assert e.components["weights"] == pytest.approx(quantized + others + adapters)
    nf4 = estimate_memory(LLAMA8, Scenario.build(method="qlora", precision="bf16", seq_len=1))
    assert nf4.components["weights"] < e.components["weights"]


def test_first_step_has_no_optimizer_states_before_its_step():
    # LoRA at 2,048 tokens peaks at the start of backward; in the first step the (fp32 AdamW) states of the
    # adapters do not exist yet there: 2 x 4 B x adapter parameters less. Full bf16 at 1 token peaks in the
    # step, where the first step equals the steady state.
    lora = estimate_memory(LLAMA8, Scenario.build(method="lora", precision="bf16", seq_len=2048))
    assert lora.peak_phase == "backward"
    assert lora.first_step_peak_bytes == lora.total_bytes - 8 * lora.trainable_parameters
    full = estimate_memory(LLAMA8, full_bf16("adamw_fused"))
    assert full.peak_phase == "optimizer_step" and full.first_step_peak_bytes == full.total_bytes


def test_litgpt_framework_dtypes_and_loss():
    # LitGPT bf16-true: adapters are bf16 like every parameter (2 B; PEFT: 4 B), the loss keeps 16-bit logits and
    # their log-softmax (2 x 2 B per token and vocabulary entry; transformers: 12 B in fp32).
    kw = dict(method="lora", precision="bf16", seq_len=512, optimizer="adamw_fused")
    hf = estimate_memory(LLAMA8, Scenario.build(**kw))
    lit = estimate_memory(LLAMA8, Scenario.build(**kw, framework="litgpt"))
    adapters = hf.trainable_parameters
    assert lit.trainable_parameters == adapters
    assert hf.components_at("optimizer_step")["optimizer_states"] == 8 * adapters
    assert lit.components_at("optimizer_step")["optimizer_states"] == 4 * adapters  # torch AdamW: zeros_like(bf16 param)
    assert lit.components_at("backward")["logits_loss"] == 4 * 512 * VOCAB
    assert hf.components_at("backward")["logits_loss"] == 12 * 512 * VOCAB
    # phi-2 (gelu_new): LitGPT's fused F.gelu saves its input only, transformers' NewGELUActivation five tensors:
    # 3 x 2 B x intermediate (10,240) per token and layer (32 layers) less.
    from engine.model.catalog import catalog_model

    phi2 = architecture_from_config(catalog_model("microsoft/phi-2").config)  # bundled published config.json
    sc = dict(method="lora", precision="bf16", seq_len=512, lora_targets="q_proj,v_proj", lora_r=16)
    diff = (estimate_memory(phi2, Scenario.build(**sc)).components["activations"]
            - estimate_memory(phi2, Scenario.build(**sc, framework="litgpt")).components["activations"])
    # and PEFT's fp32 adapters save fp32 copies (4 B, LitGPT 2 B) of the input (2,560) and of lora_A's output (r)
    assert diff == 32 * 512 * (3 * 2 * 10_240 + 2 * 2 * (2560 + 16))


def test_cli_memory_kinds_are_per_gpu_with_a_strategy(capsys):
    # Reviewer's case: with --strategy the three memory kinds must describe one GPU of the plan, like total_bytes.
    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--gpu", "A100 80GB", "--num-gpus", "4",
                 "--strategy", "zero3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["peak_allocated_bytes"] == out["total_bytes"] < out["single_gpu_total_bytes"]
    assert out["peak_reserved_bytes"] == round(out["total_bytes"] * 1.1)
    assert out["device_used_bytes"] == pytest.approx(out["total_bytes"] * 1.1 + CONTEXT, abs=2)
    assert out["headroom_bytes"] == pytest.approx(81_920 * 2**20 - out["device_used_bytes"], abs=2)


def test_cli_first_step_peak_is_per_gpu_with_a_strategy(capsys):
    # README check finding: with --strategy the first step's peak must describe one GPU too, never above its peak.
    for n in ("1", "4", "8"):
        assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--gpu", "A100 80GB", "--num-gpus", n,
                     "--strategy", "zero3"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert out["first_step_peak_bytes"] <= out["total_bytes"], n
    # ZeRO-3 on 8 GPUs: each GPU holds 1/8 of the states in every phase; before the first optimizer step they do not exist.
    states, totals = out["components"]["optimizer_states"], out["phase_totals_bytes"]
    expected = max(t - (states if ph != "optimizer_step" else 0) for ph, t in totals.items())
    assert states > 0 and out["first_step_peak_bytes"] == pytest.approx(expected, abs=2)
    assert out["first_step_peak_bytes"] < out["total_bytes"]
