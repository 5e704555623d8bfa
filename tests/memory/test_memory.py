"""Memory estimate: component values computed by hand, and behaviours the traces established.

Trace figures come from ../shared/reference/tracing-notes.md ("What the traces showed").
"""

import pytest

from engine.model.build import architecture_from_config
from engine.errors import ConfigError, ScenarioError
from engine.memory.estimate import estimate_memory
from engine.memory.weights import quantized_bytes_per_param
from engine.scenario.optimizer import Optimizer, optimizer_state_bytes
from engine.model.architecture import TensorGroup
from engine.scenario.training import Scenario
from engine.model.sources import config_from_catalog
from reference import reference_config, require_reference

require_reference()

LLAMA8 = architecture_from_config(reference_config("meta-llama/Llama-3.1-8B"))
P8 = 8_030_261_248  # param_counts.json
TOKENS_H = 2048 * 4096  # seq x hidden for micro batch 1


def est(arch=LLAMA8, **kw):
    # torch's foreach AdamW unless a test says otherwise (the Trainer default, fused, has no step temporaries).
    return estimate_memory(arch, Scenario.build(**{"optimizer": "adamw", **kw}))


def test_components_sum_to_total():
    for kw in [{}, {"method": "lora"}, {"method": "qlora"}, {"precision": "fp32", "gradient_accumulation_steps": 4}]:
        e = est(**kw)
        assert sum(e.components.values()) == pytest.approx(e.total_bytes)
        assert e.total_bytes == max(e.phase_total("backward"), e.phase_total("optimizer_step"))


def test_full_finetune_bytes_per_parameter_at_the_step():
    # Pure bf16 + torch AdamW: 2 (weights) + 2 (grads) + 4 (bf16 states) + 2 (foreach temporaries) = 10 B/param.
    e = est(precision="bf16")
    assert e.peak_phase == "optimizer_step"
    assert e.total_bytes == 10 * P8
    # Mixed precision with fp32 weights: 4 + 4 + 8 + 4 = 20 B/param at the step (traced: "20 bytes/parameter").
    assert est(precision="amp_bf16").phase_total("optimizer_step") == 20 * P8
    # Fused AdamW has no step temporaries: 16 B/param, the ZeRO paper's model-state count.
    assert est(precision="amp_bf16", optimizer="adamw_fused").phase_total("optimizer_step") == 16 * P8
    # Autocast caches bf16 copies of the linear weights (every tensor but the embedding table): +2 B each.
    copies = est(precision="amp_bf16").components_at("backward")["weight_copies"]
    assert copies == 2 * (P8 - 128_256 * 4_096 - (32 * 2 + 1) * 4_096)


def test_lora_trainable_parameters_match_peft():
    # PEFT print_trainable_parameters for Llama-3-8B, r=16 on q,k,v,o:
    # "trainable params: 13,631,488 || all params: 8,043,892,736"
    e = est(method="lora", lora_r=16, lora_targets="q_proj,k_proj,v_proj,o_proj")
    assert e.trainable_parameters == 13_631_488
    assert e.total_parameters + e.trainable_parameters == 8_043_892_736
    # Adapters are fp32: gradients 4 B, AdamW states 8 B per adapter parameter.
    assert e.parts_by_key["gradients"].bytes == 4 * 13_631_488
    assert e.parts_by_key["optimizer_states"].bytes == 8 * 13_631_488


def test_lora_unknown_target_is_a_typed_error():
    with pytest.raises(ScenarioError, match="available: q_proj"):
        est(method="lora", lora_targets="c_attn")


def test_qlora_weights():
    # NF4 + double quantization: 0.5 + 1/64 + 4/(64*256) bytes per quantized weight (QLoRA paper sec. 3).
    assert quantized_bytes_per_param(True) == pytest.approx(0.515869140625)
    assert quantized_bytes_per_param(False) == 0.5625
    e = est(method="qlora", lora_targets="q_proj,k_proj,v_proj,o_proj")
    linear = 32 * (2 * 4_096 * 4_096 + 2 * 4_096 * 1_024 + 3 * 4_096 * 14_336)
    other = P8 - linear  # embeddings, LM head, norms: fp32 after prepare_model_for_kbit_training
    expected = linear * quantized_bytes_per_param(True) + other * 4 + 13_631_488 * 4
    assert e.parts_by_key["weights"].bytes == pytest.approx(expected)


def test_qlora_is_not_always_smaller_than_lora():
    # Qwen2.5-0.5B: a 136M-parameter tied embedding (28% of the model) becomes fp32 under
    # prepare_model_for_kbit_training and the residual stream turns fp32, so QLoRA needs more than bf16 LoRA.
    qwen = architecture_from_config(reference_config("Qwen/Qwen2.5-0.5B"))
    lora = estimate_memory(qwen, Scenario.build(method="lora", precision="bf16"))
    qlora = estimate_memory(qwen, Scenario.build(method="qlora", precision="bf16"))
    assert lora.peak_phase == qlora.peak_phase == "backward"
    assert qlora.total_bytes > lora.total_bytes
    # ...while for Llama-3.1-8B its weights are under half of bf16 LoRA's (7.86 GB vs 16.1 GB).
    q8, l8 = est(method="qlora", precision="bf16"), est(method="lora", precision="bf16")
    assert q8.parts_by_key["weights"].bytes < 0.5 * l8.parts_by_key["weights"].bytes


def test_activations_per_layer_match_traces():
    # Traced: ~53 B x seq x batch x hidden per Llama layer in pure bf16 with SDPA, ~63 in bf16 autocast.
    for precision, traced in (("bf16", 53), ("amp_bf16", 63)):
        e = est(precision=precision)
        per_layer = (e.parts_by_key["activations"].bytes - _head(precision)) / 32 / TOKENS_H
        assert per_layer == pytest.approx(traced, rel=0.05)


def _head(precision):
    # Final RMSNorm (fp32 upcast 4 + normalised copy) + LM head input, per token x hidden.
    return (4 + 2 + 2) * TOKENS_H if precision == "bf16" else (4 + 4 + 2) * TOKENS_H


def test_logits_and_loss_are_12_bytes_per_vocab_entry():
    # Traced: "about 12 x batch x seq x vocab bytes at the start of backward".
    e = est(micro_batch_size=2, seq_len=1024)
    assert e.parts_by_key["logits_loss"].bytes == 12 * 2 * 1024 * 128_256


def test_gradient_checkpointing_keeps_layer_inputs_only():
    full = est(precision="bf16").parts_by_key["activations"].bytes
    e = est(precision="bf16", gradient_checkpointing=True)
    one_layer = (full - _head("bf16")) / 32
    # Saved through the forward and at the start of backward: each block's input (bf16) and the head's input.
    assert e.parts_by_key["activations"].bytes == pytest.approx(32 * 2 * TOKENS_H + _head("bf16"))
    # One block's tensors again while its backward runs, once the loss gradients are freed (traced: the
    # recompute never coincides with the vocabulary-sized loss tensors).
    assert e.parts_by_key["recomputed_layer"].bytes == pytest.approx(one_layer)
    assert e.parts_by_key["recomputed_layer"].phases == ("recompute",)
    assert "recompute" not in e.parts_by_key["logits_loss"].phases


def test_eager_attention_grows_with_seq_squared():
    # Eager keeps fp32 softmax (4 B) + its bf16 cast (2 B) per head x seq^2 (traced: "about 6 bytes").
    def extra(s):
        eager = est(precision="bf16", attention="eager", seq_len=s).parts_by_key["activations"].bytes
        sdpa = est(precision="bf16", attention="sdpa", seq_len=s).parts_by_key["activations"].bytes
        return eager - sdpa
    s = 1024
    # Eager also saves k and v repeated to all 32 heads (2 x (4,096 - 1,024) more bf16 values per token) and no
    # fp32 log-sum-exp (4 B x 32 heads).
    linear_part = 32 * s * (2 * 2 * (4_096 - 1_024) - 4 * 32)
    assert extra(s) == pytest.approx(32 * 6 * 32 * s * s + linear_part)


def test_fp32_gqa_falls_back_to_math_kernel():
    assert est(precision="fp32").attention_kernel == "math"
    assert est(precision="bf16").attention_kernel == "flash"
    llama2 = architecture_from_config(reference_config("meta-llama/Llama-2-7b-hf"))  # no GQA
    assert estimate_memory(llama2, Scenario.build(precision="fp32")).attention_kernel == "memory_efficient"


def test_gradient_accumulation_keeps_gradients_in_backward():
    one = est(precision="bf16", seq_len=8192, micro_batch_size=4)
    accum = est(precision="bf16", seq_len=8192, micro_batch_size=4, gradient_accumulation_steps=8)
    assert one.peak_phase == "backward" and one.components["gradients"] == 0
    assert accum.components["gradients"] == 2 * P8
    assert accum.total_bytes == one.total_bytes + 2 * P8


def test_optimizer_states():
    big = TensorGroup(name="w", shape=(4_096, 4_096), count=1, role="mlp")
    small = TensorGroup(name="n", shape=(2_048,), count=3, role="norms")
    # bitsandbytes 8-bit: 2 x (1 B + 4 B per 256-element block); fp32 states under 4,096 elements.
    assert optimizer_state_bytes([(big, 2)], Optimizer.ADAMW_8BIT) == 2 * (16_777_216 + 65_536 * 4)
    assert optimizer_state_bytes([(small, 2)], Optimizer.ADAMW_8BIT) == 3 * 2 * 2_048 * 4
    # torch AdamW: zeros_like(param) twice.
    assert optimizer_state_bytes([(big, 2)], Optimizer.ADAMW) == 2 * 16_777_216 * 2
    # Adafactor: fp32 row + column vectors for a matrix, a full vector for 1-D.
    assert optimizer_state_bytes([(big, 2), (small, 2)], Optimizer.ADAFACTOR) == 4 * 8_192 + 4 * 3 * 2_048
    assert optimizer_state_bytes([(big, 2)], Optimizer.SGD) == 0


def test_default_optimizer_is_the_trainer_default():
    # transformers 5.x TrainingArguments(optim="adamw_torch_fused"): 16 B/param at the step in mixed precision.
    e = estimate_memory(LLAMA8, Scenario.build())
    assert Scenario().optimizer.hf_name == "adamw_torch_fused"
    assert e.phase_total("optimizer_step") == 16 * P8


def test_scenario_validation():
    for bad in [{"micro_batch_size": 0}, {"seq_len": 10_000_000}, {"method": "bitfit"}, {"lora_r": 0},
                {"precision": "fp32", "attention": "flash_attention_2"}, {"optimizer": "adam"}]:
        with pytest.raises(ScenarioError):
            Scenario.build(**bad)


def test_671b_scale_still_computes_fast():
    import time

    cfg = {**reference_config("mistralai/Mixtral-8x7B-v0.1"), "num_local_experts": 256, "num_hidden_layers": 61,
           "hidden_size": 7_168, "intermediate_size": 2_048, "num_attention_heads": 128, "num_key_value_heads": 128}
    start = time.perf_counter()
    e = estimate_memory(architecture_from_config(cfg), Scenario.build(method="qlora"))
    assert e.total_bytes > 0 and time.perf_counter() - start < 2.0


def test_qlora_weight_copies():
    # bitsandbytes dequantizes one weight at a time (largest: 14,336 x 4,096 MLP matrix, bf16), and autocast's bf16
    # cast of the fp32 LM head (128,256 x 4,096) is saved for backward.
    e = est(method="qlora")
    assert e.parts_by_key["weight_copies"].bytes == 2 * 14_336 * 4_096 + 2 * 128_256 * 4_096
    # Without prepare_model_for_kbit_training the 16-bit LM head needs no cast.
    e = est(method="qlora", precision="bf16", prepare_kbit_training=False)
    assert e.parts_by_key["weight_copies"].bytes == 2 * 14_336 * 4_096


def test_warnings_for_settings_a_real_run_would_regret():
    # Llama-3.1-8B: max_position_embeddings 131,072; k_proj is 4,096 -> 1,024.
    assert any("max_position_embeddings (131,072)" in w for w in est(seq_len=262_144).warnings)
    assert any("min(in, out) = 1,024" in w for w in est(method="lora", lora_r=2048).warnings)
    assert any("unscale FP16" in w for w in est(precision="fp16").warnings)
    assert est().warnings == ()


def test_context_warning_follows_the_position_encoding():
    # Rotary positions can be stretched (rope_scaling); GPT-2's 1,024 and BERT's 512 learned rows cannot.
    long = est(seq_len=262_144).warnings[0]
    assert "needs RoPE scaling" in long
    for repo, limit in (("openai-community/gpt2", 1_024), ("google-bert/bert-large-uncased", 512)):
        arch = architecture_from_config(config_from_catalog(repo)[0])
        warning = estimate_memory(arch, Scenario.build(seq_len=2 * limit)).warnings[0]
        assert f"max_position_embeddings ({limit:,})" in warning and "RoPE" not in warning
        assert f"no row past position {limit - 1:,}" in warning


def test_gpt2_default_lora_target_is_c_attn_only():
    # PEFT's default for gpt2 is ["c_attn"]; "c_proj" would also select the MLP's c_proj.
    from engine.scenario.lora import default_targets

    gpt2 = architecture_from_config(reference_config("openai-community/gpt2"))
    assert default_targets(gpt2) == ("c_attn",)
    assert default_targets(LLAMA8) == ("q_proj", "k_proj", "v_proj", "o_proj")


def test_units():
    from engine.units import fmt_bytes, to_unit

    assert to_unit(2**30, "GiB") == 1 and to_unit(10**9, "GB") == 1
    assert fmt_bytes(80 * 2**30, "GiB") == "80.00 GiB"
    assert fmt_bytes(12_345 * 10**9, "GB") == "12.35 TB"
    assert fmt_bytes(20_000 * 2**40, "GiB") == "19.53 PiB"


def test_vision_tower_is_frozen_weight_memory():
    # llava-1.5-7b: the CLIP tower and projector are counted as frozen weights (pure bf16: 2 B each).
    from pathlib import Path
    import json

    cfg = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "llava-hf__llava-1.5-7b-hf.json").read_text())
    arch = architecture_from_config(cfg)
    assert arch.vision_parameters > 300_000_000
    full = estimate_memory(arch, Scenario.build(precision="bf16"))
    assert full.parts_by_key["weights"].bytes == 2 * arch.total_parameters
    assert full.trainable_parameters == arch.language_parameters


def test_prequantized_checkpoint_keeps_its_stored_format():
    # A GPTQ 4-bit, group-128 checkpoint of Llama-3.1-8B: block linears at 0.5 + 2/128 + 0.5/128 B, the rest bf16.
    cfg = {**reference_config("meta-llama/Llama-3.1-8B"),
           "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}}
    arch = architecture_from_config(cfg)
    assert arch.stored_quantization.method == "gptq"
    e = estimate_memory(arch, Scenario.build(method="lora", precision="bf16", lora_targets="q_proj,k_proj,v_proj,o_proj"))
    linear = 32 * (2 * 4_096 * 4_096 + 2 * 4_096 * 1_024 + 3 * 4_096 * 14_336)
    expected = linear * (0.5 + 2 / 128 + 0.5 / 128) + (P8 - linear) * 2 + 13_631_488 * 4
    assert e.parts_by_key["weights"].bytes == pytest.approx(expected)
    with pytest.raises(ScenarioError, match="stored quantized"):
        estimate_memory(arch, Scenario.build(method="full"))


def test_unsupported_model_type_gets_an_approximate_architecture():
    from engine.model.build import approximate_architecture

    cfg = {**reference_config("meta-llama/Llama-3.1-8B"), "model_type": "exaone_like"}
    arch = approximate_architecture(cfg)
    assert arch.approximate_from == "exaone_like" and arch.total_parameters == P8  # same sizes, Llama layout
    with pytest.raises(ConfigError):
        approximate_architecture({"model_type": "mystery"})
