"""The fake-tensor tracer (engine/trace): exactness against real execution, known values, typed errors,
the attention-kernel rules, the CLI.

Tests needing torch/transformers/peft skip when they are missing, except under ``TRACE_REQUIRED=1``
(CI), where a missing package fails. Every trace of this module runs in ONE worker process (the
``replies`` fixture batches them) to keep the runtime low: tiny configs (hidden 64, 2 layers, vocab
1000) in tests/fixtures/trace/.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import EngineError, NotTraceableError, TraceError, TraceFailedError, TraceModelTypeError
from engine.scenario.training import Scenario
from engine.trace import _request, check_traceable, result_from_reply, tracer_available, worker_command
from engine.trace.compare import compare, difference_pct
from engine.trace.kernels import EAGER, FLASH, MATH, MEMORY_EFFICIENT, choose_kernel
from engine.trace.result import CATEGORIES, PHASES, TraceResult
from trace_support import need_trace_extra

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "trace"
BLOCK = 512


def _config(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# Scenarios traced once for the whole module: name -> (config, scenario fields, mode).
# "fake_vs_real" runs the same steps on fake CUDA tensors and for real on the CPU. Those cases avoid what
# differs by device on purpose: flash/memory-efficient kernels (CUDA-only; fp32 with GQA and eager run
# the math path on both), dropout (native_dropout on CUDA, a decomposition on the CPU) and foreach AdamW
# (its `step` counters live on the CPU when the parameters are on a GPU, so a CPU run counts them).
SMALL = dict(micro_batch_size=2, seq_len=32)
CASES = {
    "fvr_llama_fp32_sdpa_gqa": ("tiny_llama", dict(precision="fp32", attention="sdpa", optimizer="adamw_fused"), "fake_vs_real"),
    "fvr_gpt2_bf16_eager_sgd": ("tiny_gpt2", dict(precision="bf16", attention="eager", optimizer="sgd"), "fake_vs_real"),
    "fvr_qwen2_lora_fp32_gc": ("tiny_qwen2", dict(precision="fp32", method="lora", lora_dropout=0.0, gradient_checkpointing=True,
                                                 lora_targets="q_proj,k_proj,v_proj,o_proj"), "fake_vs_real"),
    "fvr_llama_bf16_eager_adafactor_gc": ("tiny_llama", dict(precision="bf16", attention="eager", optimizer="adafactor",
                                                            gradient_checkpointing=True), "fake_vs_real"),
    "fvr_qwen2_bf16_eager_ga2": ("tiny_qwen2", dict(precision="bf16", attention="eager", gradient_accumulation_steps=2), "fake_vs_real"),
    "known_fp32_fused": ("tiny_llama", dict(precision="fp32", optimizer="adamw_fused", micro_batch_size=1, seq_len=8), "trace"),
    "amp_llama": ("tiny_llama", dict(precision="amp_bf16", attention="sdpa", micro_batch_size=4, seq_len=128), "trace"),
    "bf16_llama": ("tiny_llama", dict(precision="bf16", attention="sdpa"), "trace"),
    "fp32_gpt2": ("tiny_gpt2", dict(precision="fp32", attention="sdpa"), "trace"),
    "eager_gpt2": ("tiny_gpt2", dict(precision="amp_bf16", attention="eager"), "trace"),
    "lora_qwen2_bf16": ("tiny_qwen2", dict(precision="bf16", method="lora"), "trace"),
    "fa2_llama": ("tiny_llama", dict(precision="bf16", attention="flash_attention_2"), "trace"),
    "unknown_type": ({"model_type": "no_such_model_xyz", "hidden_size": 64}, dict(precision="bf16"), "trace"),
}


@pytest.fixture(scope="module")
def replies() -> dict[str, dict]:
    need_trace_extra()
    batch = []
    for name, (cfg, fields, mode) in CASES.items():
        config = _config(cfg) if isinstance(cfg, str) else cfg
        req = _request(config, Scenario.build(**{**SMALL, **fields}))
        if mode == "fake_vs_real":
            req["mode"] = "fake_vs_real"
        batch.append(req)
    proc = subprocess.run(worker_command(), input=json.dumps({"batch": batch}), capture_output=True, text=True,
                          cwd=ROOT, timeout=600)
    lines = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == len(CASES), proc.stderr[-3000:]
    return dict(zip(CASES, lines))


def _result(replies: dict, name: str) -> TraceResult:
    return result_from_reply(replies[name])


# ------------------------------------------------------------------------------------------------
# Fake execution == real execution


@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[2] == "fake_vs_real"])
def test_fake_and_real_timelines_identical(replies, name):
    reply = replies[name]
    assert "error" not in reply, reply
    fake, real = reply["fake"], reply["real"]
    assert len(fake["timeline"]) > 200  # two steps of a real model, not an empty log
    assert fake["timeline"] == real["timeline"]
    for key in ("peak_allocated_bytes", "peak_phase", "phase_peaks", "breakdown", "first_step"):
        assert fake["result"][key] == real["result"][key], key


def test_fake_vs_real_covers_the_optimizers_and_phases(replies):
    results = [replies[n]["fake"]["result"] for n, c in CASES.items() if c[2] == "fake_vs_real"]
    assert any(r["breakdown"]["optimizer_states"] > 0 for r in results)
    assert {r["peak_phase"] for r in results} <= set(PHASES)
    lora = replies["fvr_qwen2_lora_fp32_gc"]["fake"]["result"]
    assert 0 < lora["trainable_parameters"] < lora["total_parameters"]


# ------------------------------------------------------------------------------------------------
# Values known independently


def _llama_param_sizes(cfg: dict) -> list[int]:
    """Element counts of tiny_llama's parameter tensors, from the config (transformers LlamaForCausalLM:
    embeddings, per layer q/k/v/o, gate/up/down and two RMSNorm weights, final norm, untied lm_head)."""
    h, i, v, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    per_layer = [h * h, kv * h, kv * h, h * h, i * h, i * h, h * i, h, h]
    return [v * h] + per_layer * layers + [h, v * h]


def _blocks(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK


def test_known_values_fp32_full_fused_adamw(replies):
    """fp32 full fine-tuning with AdamW(fused=True): at the optimizer-step peak the gradients are 4 bytes per
    parameter and the states twice that, each tensor rounded up to the CUDA allocator's 512-byte blocks, plus
    one fp32 ``step`` scalar per parameter tensor on the device (torch.optim.AdamW keeps ``step`` on the
    parameter's device when ``fused=True``; torch/optim/adamw.py ``_init_group``)."""
    res = _result(replies, "known_fp32_fused")
    sizes = _llama_param_sizes(_config("tiny_llama"))
    per_tensor = sum(_blocks(4 * n) for n in sizes)
    assert res.total_parameters == sum(sizes) == 202_048
    assert res.peak_phase == "optimizer"
    assert res.breakdown["gradients"] == per_tensor
    assert res.breakdown["optimizer_states"] == 2 * per_tensor + BLOCK * len(sizes)
    # Parameters plus the rotary embedding's two fp32 buffers (inv_freq, original_inv_freq: head_dim/2 floats).
    assert res.breakdown["parameters"] == per_tensor + 2 * BLOCK
    assert res.breakdown["activations"] == 0  # forward tensors all freed by the optimizer step
    assert sum(res.breakdown.values()) == res.peak_allocated_bytes
    # The first step has no states before step(): its peak is lower.
    assert res.first_step.peak_allocated_bytes < res.peak_allocated_bytes


def test_autocast_weight_copies_are_the_bf16_matmul_weights(replies):
    """Under bf16 autocast the fp32 weights of every matmul are cast once and cached (torch.autocast
    ``cache_enabled``): q/k/v/o, gate/up/down and lm_head, 2 bytes each; embeddings and norms are not cast."""
    res = _result(replies, "amp_llama")
    cfg = _config("tiny_llama")
    sizes = _llama_param_sizes(cfg)
    matmul = [n for n in sizes[1:-1] if n != cfg["hidden_size"]] + [sizes[-1]]
    assert res.peak_phase in ("forward", "backward")
    assert res.breakdown["weight_copies"] == sum(_blocks(2 * n) for n in matmul)
    assert res.attention_kernel == FLASH


def test_breakdowns_sum_to_the_peaks(replies):
    for name, (_, _, mode) in CASES.items():
        if mode != "trace" or "error" in replies[name]:
            continue
        res = _result(replies, name)
        assert set(res.breakdown) == set(CATEGORIES)
        assert sum(res.breakdown.values()) == res.peak_allocated_bytes > 0
        assert sum(res.first_step.breakdown.values()) == res.first_step.peak_allocated_bytes
        assert res.phase_peaks[res.peak_phase] == res.peak_allocated_bytes == max(res.phase_peaks.values())
        assert all(v % BLOCK == 0 for v in res.breakdown.values())
        assert res.versions["torch"].startswith("2.")


def test_lora_trains_only_the_adapters(replies):
    res = _result(replies, "lora_qwen2_bf16")
    cfg = _config("tiny_qwen2")
    # Default targets = every attention projection (engine.scenario.lora.default_targets): q, k, v, o of each layer,
    # r=16: r * (in + out) per module.
    h, kv = cfg["hidden_size"], cfg["num_key_value_heads"] * cfg["hidden_size"] // cfg["num_attention_heads"]
    per_layer = 16 * ((h + h) + (h + kv) + (h + kv) + (h + h))
    assert res.trainable_parameters == per_layer * cfg["num_hidden_layers"]
    # PEFT keeps adapters in fp32 (autocast_adapter_dtype): 2 Adam states x 4 bytes, per-tensor blocks, + steps.
    assert res.breakdown["optimizer_states"] >= 8 * res.trainable_parameters


# ------------------------------------------------------------------------------------------------
# Attention kernel


def test_kernel_rules():
    assert choose_kernel("bfloat16", 64, has_mask=False, q_heads=32, kv_heads=8) == FLASH  # GQA allowed in flash
    assert choose_kernel("float32", 64, has_mask=False, q_heads=32, kv_heads=8) == MATH  # fp32 + GQA
    assert choose_kernel("float32", 64, has_mask=False, q_heads=12, kv_heads=12) == MEMORY_EFFICIENT
    assert choose_kernel("bfloat16", 64, has_mask=True, q_heads=12, kv_heads=12) == MEMORY_EFFICIENT
    assert choose_kernel("bfloat16", 64, has_mask=True, q_heads=32, kv_heads=8) == MATH
    assert choose_kernel("float16", 512, has_mask=False, q_heads=8, kv_heads=8) == MEMORY_EFFICIENT  # > 256: no flash
    assert choose_kernel("bfloat16", 100, has_mask=False, q_heads=8, kv_heads=8) == MATH  # not a multiple of 8


def test_flash_backward_workspace_sizes():
    """FlashAttention-2 backward's transient buffers (flash_api.cpp mha_bwd): softmax_d fp32 (b, h, s rounded to
    128), dq_accum fp32 (b, s rounded to 128, h, head_dim rounded to 32) when seq_k > 256 at head_dim 64, and with
    GQA dk/dv expanded to every query head in the input dtype."""
    need_trace_extra()
    import torch

    from engine.trace.workspace import flash_backward_transients

    q = torch.empty(2, 32, 1000, 64, dtype=torch.bfloat16, device="meta")
    k = torch.empty(2, 8, 1000, 64, dtype=torch.bfloat16, device="meta")
    assert flash_backward_transients(q, q, k) == [4 * 2 * 32 * 1024, 4 * 2 * 1024 * 32 * 64, 2 * 1000 * 32 * 64 * 2,
                                                  2 * 1000 * 32 * 64 * 2]
    short = torch.empty(1, 4, 200, 64, dtype=torch.bfloat16, device="meta")
    assert flash_backward_transients(short, short, short) == [4 * 4 * 256]  # one block of keys, no GQA


def test_kernels_chosen_in_traces(replies):
    assert _result(replies, "bf16_llama").attention_kernel == FLASH
    assert _result(replies, "known_fp32_fused").attention_kernel == MATH  # fp32 with grouped-query attention
    assert _result(replies, "fp32_gpt2").attention_kernel == MEMORY_EFFICIENT
    assert _result(replies, "eager_gpt2").attention_kernel == EAGER
    assert replies["fvr_gpt2_bf16_eager_sgd"]["fake"]["result"]["attention_kernel"] == EAGER
    fa2 = _result(replies, "fa2_llama")
    assert fa2.attention_kernel == FLASH and "flash_attention_2" in fa2.notes[0]
    # flash_attention_2 is traced as SDPA's flash kernel: the same memory as the SDPA bf16 trace.
    assert fa2.peak_allocated_bytes == _result(replies, "bf16_llama").peak_allocated_bytes
    # Two steps x two layers, each through the router.
    assert _result(replies, "bf16_llama").kernel_calls == {FLASH: 4}


# ------------------------------------------------------------------------------------------------
# Errors


def test_unknown_model_type_is_a_typed_error(replies):
    with pytest.raises(TraceModelTypeError, match="no_such_model_xyz"):
        _result(replies, "unknown_type")
    assert issubclass(TraceModelTypeError, EngineError)


def test_failure_reply_is_a_typed_error():
    with pytest.raises(TraceFailedError, match="boom"):
        result_from_reply({"error": {"kind": "failed", "message": "RuntimeError: boom"}})


@pytest.mark.parametrize("fields, match", [
    (dict(method="qlora"), "QLoRA is not traceable"),
    (dict(optimizer="adamw_8bit"), "bitsandbytes"),
    (dict(optimizer="paged_adamw_8bit"), "bitsandbytes"),
])
def test_untraceable_scenarios(fields, match):
    with pytest.raises(NotTraceableError, match=match):
        check_traceable(Scenario.build(**fields), _config("tiny_llama"))
    assert issubclass(NotTraceableError, TraceError)


def test_other_stacks_and_fused_loss_are_not_traceable():
    if "framework" in Scenario.model_fields:
        with pytest.raises(NotTraceableError, match="litgpt"):
            check_traceable(Scenario.build(framework="litgpt"))
    if "fused_cross_entropy" in Scenario.model_fields:
        with pytest.raises(NotTraceableError, match="Liger"):
            check_traceable(Scenario.build(fused_cross_entropy=True))
    check_traceable(Scenario.build())  # the default scenario is traceable


def test_prequantized_checkpoint_is_not_traceable():
    cfg = {**_config("tiny_llama"), "quantization_config": {"quant_method": "gptq", "bits": 4}}
    with pytest.raises(NotTraceableError, match="gptq"):
        check_traceable(Scenario.build(), cfg)


def test_qlora_raises_before_any_work():
    """trace_training_step refuses QLoRA with the typed error (no worker is started)."""
    from engine.trace import trace_training_step

    ok, _ = tracer_available()
    if not ok:
        pytest.skip("extra not installed")
    with pytest.raises(NotTraceableError):
        trace_training_step(_config("tiny_llama"), Scenario.build(method="qlora"))


def test_engine_trace_package_does_not_import_torch():
    code = ("import sys, engine.trace, engine.trace.compare, engine.trace.result, engine.trace.kernels; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------------
# Comparison with the engine


def test_compare_maps_every_component(replies):
    from engine.model.build import architecture_from_config
    from engine.memory.estimate import estimate_memory

    cfg = _config("tiny_llama")
    scenario = Scenario.build(precision="amp_bf16", micro_batch_size=4, seq_len=128)
    est = estimate_memory(architecture_from_config(cfg), scenario)
    res = _result(replies, "amp_llama")
    cmp = compare(est, res)
    assert [r.key for r in cmp.rows][:4] == ["weights", "weight_copies", "gradients", "optimizer_states"]
    assert cmp.total.traced_bytes == res.peak_allocated_bytes
    assert cmp.total.estimate_bytes == pytest.approx(est.peak_allocated_bytes)
    assert sum(r.traced_bytes for r in cmp.rows) == res.peak_allocated_bytes
    assert sum(r.estimate_bytes for r in cmp.rows) == pytest.approx(est.total_bytes)
    weights = next(r for r in cmp.rows if r.key == "weights")
    # 202,048 fp32 parameters: the engine's 4 B/param vs the trace's per-tensor 512-byte blocks (+ rotary buffers).
    assert weights.estimate_bytes == 4 * 202_048
    assert 0 < weights.traced_bytes - weights.estimate_bytes < 21 * BLOCK + 2 * BLOCK
    assert cmp.unmapped == {}


def test_difference_pct():
    assert difference_pct(110, 100) == pytest.approx(10.0)
    assert difference_pct(0, 0) == 0.0
    assert difference_pct(5, 0) is None


# ------------------------------------------------------------------------------------------------
# CLI


def test_cli_trace_prints_json():
    need_trace_extra()
    cmd = [sys.executable, "-m", "engine", "trace", "--config", str(FIXTURES / "tiny_gpt2.json"), "--precision", "bf16",
           "--micro-batch-size", "1", "--seq-len", "16", "--optimizer", "sgd"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert isinstance(data["peak_allocated_bytes"], int) and data["peak_allocated_bytes"] > 0
    assert data["peak_allocated_bytes"] == sum(data["breakdown"].values())
    assert data["breakdown"]["optimizer_states"] == 0  # SGD without momentum keeps no state
    assert data["scenario"]["precision"] == "bf16"
    assert data["attention_kernel"] == FLASH


def test_cli_trace_untraceable_exits_2():
    cmd = [sys.executable, "-m", "engine", "trace", "--config", str(FIXTURES / "tiny_llama.json"), "--method", "qlora"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and len(out.stderr.strip().splitlines()) == 1
    assert "QLoRA" in out.stderr


# ------------------------------------------------------------------------------------------------
# The app's panel (ui/trace_panel.py)


def _panel_app(config_path: str, fields: dict, available: bool) -> None:
    import json as _json

    import engine.trace
    import ui.trace_panel as panel
    from engine.model.build import architecture_from_config
    from engine.memory.estimate import estimate_memory
    from engine.scenario.training import Scenario as _Scenario

    # The module stays imported between app runs of one pytest process: set the function both ways.
    panel.tracer_available = engine.trace.tracer_available if available else (
        lambda: (False, "torch not installed; install the tracer with: " + engine.trace.INSTALL_HINT))
    cfg = _json.loads(open(config_path).read())
    scenario = _Scenario.build(**fields)
    panel.trace_panel(cfg, scenario, estimate_memory(architecture_from_config(cfg), scenario), "GB")


def _app(fields: dict, available: bool = True):
    from streamlit.testing.v1 import AppTest

    return AppTest.from_function(_panel_app, args=(str(FIXTURES / "tiny_llama.json"), fields, available), default_timeout=300)


def test_panel_without_the_extra_explains_how_to_install():
    at = _app({}, available=False).run()
    assert not at.exception
    assert any('pip install -e ".[trace]"' in i.value for i in at.info)
    assert not at.button


def test_panel_untraceable_scenario_says_why():
    at = _app({"method": "qlora"}).run()
    assert not at.exception
    if not tracer_available()[0]:
        pytest.skip("extra not installed")
    assert any("QLoRA is not traceable" in i.value for i in at.info)
    assert not at.button


def test_panel_traces_on_click_and_compares():
    need_trace_extra()
    at = _app({"precision": "bf16", "micro_batch_size": 2, "seq_len": 32}).run()
    assert not at.exception and not at.dataframe  # nothing traced before the click
    at.button(key="trace_button").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Attention kernel"] == "flash"
    table = at.dataframe[0].value
    assert "Peak allocated" in list(table["component"])
    assert list(table.columns) == ["component", "estimate (GB)", "trace (GB)", "difference"]
    # A rerun reuses the session's result: no button, same table.
    at.run()
    assert not at.button and at.dataframe
