"""Serving memory (engine/memory/inference.py): KV cache hand checks, sliding windows, weights, limits, fit, CLI."""

from __future__ import annotations

import json

import pytest

from engine.model.architecture import Architecture
from engine.model.build import architecture_from_config
from engine.cli import main
from engine.plan.fit import check_fit
from engine.hardware.gpus import find_gpu
from engine.memory.inference import (
    InferenceScenario, KvCacheDtype, WeightPrecision, estimate_inference, inference_limits, kv_cache_bytes,
    kv_cache_bytes_per_token, sliding_window_layers,
)
from engine.model.sources import config_from_catalog


def arch_of(repo_id: str) -> Architecture:
    return architecture_from_config(config_from_catalog(repo_id)[0])


@pytest.fixture(scope="module")
def llama() -> Architecture:
    return arch_of("meta-llama/Llama-3.1-8B")


def test_llama31_8b_kv_cache_is_128_kib_per_token(llama):
    # 2 (K and V) x 32 layers x 8 kv heads x 128 head_dim x 2 B (bf16)
    assert kv_cache_bytes_per_token(llama) == 2 * 32 * 8 * 128 * 2 == 131_072 == 128 * 1024
    assert kv_cache_bytes_per_token(llama, KvCacheDtype.FP8) == 65_536
    # 16 sequences x 8,192 tokens = 131,072 tokens x 128 KiB = 16 GiB
    assert kv_cache_bytes(llama, 8192, 16) == 16 * 2**30


def test_mistral_v01_caps_every_layer_at_its_4096_window():
    m = arch_of("mistralai/Mistral-7B-v0.1")
    assert m.sliding_window == 4096 and sliding_window_layers(m) == 32
    per_token = 2 * 32 * 8 * 128 * 2
    assert kv_cache_bytes(m, 2048) == 2048 * per_token
    assert kv_cache_bytes(m, 32_768) == kv_cache_bytes(m, 4096) == 4096 * per_token


def test_gemma2_alternates_sliding_and_global_layers():
    g = arch_of("google/gemma-2-2b")
    # 26 layers, 4 kv heads x 256 head_dim; layers 0, 2, ..., 24 slide (window 4,096), 13 are global.
    assert (g.num_layers, g.num_key_value_heads, g.head_dim, g.sliding_window) == (26, 4, 256, 4096)
    assert sliding_window_layers(g) == 13
    per_layer_token = 2 * 4 * 256 * 2
    assert kv_cache_bytes(g, 8192) == per_layer_token * (13 * 8192 + 13 * 4096)
    assert kv_cache_bytes(g, 1000) == per_layer_token * 26 * 1000


def test_weights_at_the_serving_precision(llama):
    lin = sum(t.parameters for t in llama.tensors if t.linear)
    other = llama.total_parameters - lin
    for wp, b in ((WeightPrecision.BF16, 2), (WeightPrecision.INT8, 1), (WeightPrecision.FP8, 1),
                  (WeightPrecision.INT4, 0.5 + 4 / 128)):
        est = estimate_inference(llama, InferenceScenario(weight_precision=wp))
        assert est.components["weights"] == pytest.approx(lin * b + other * 2)
    assert estimate_inference(llama, InferenceScenario()).components["weights"] == 2 * llama.total_parameters


def test_inference_estimate_is_one_phase_with_kv_and_workspace(llama):
    est = estimate_inference(llama, InferenceScenario(concurrency=4, seq_len=4096))
    assert est.phases == ("inference",) and est.peak_phase == "inference"
    assert set(est.components) == {"weights", "kv_cache", "activation_workspace"}
    assert est.components["kv_cache"] == 4 * 4096 * 131_072
    assert 0 < est.components["activation_workspace"] < 1e9
    assert est.total_bytes == sum(est.components.values())


def test_limits_are_the_largest_context_and_concurrency_that_fit(llama):
    isc = InferenceScenario(concurrency=16, seq_len=8192)
    usable = find_gpu("H100 SXM").usable_memory_bytes
    lim = inference_limits(llama, isc, usable)
    at = lambda **kw: estimate_inference(llama, isc.model_copy(update=kw)).total_bytes  # noqa: E731
    assert at(seq_len=lim.max_seq_len) <= usable < at(seq_len=lim.max_seq_len + 1)
    assert at(concurrency=lim.max_concurrency) <= usable < at(concurrency=lim.max_concurrency + 1)
    # Weights 16.06 GB; ~128 KiB per token: roughly (85.5 - 16.1) GB / 131,072 B = ~530k tokens in total.
    assert 500_000 < lim.max_concurrency * 8192 < 540_000


def test_fit_engine_accepts_an_inference_scenario(llama):
    isc = InferenceScenario(concurrency=80, seq_len=8192)  # 80 GiB of KV cache + 16 GB weights
    fit = check_fit(llama, isc, find_gpu("H100 SXM"))
    assert not fit.fits and fit.peak_phase == "inference" and fit.min_gpus is None  # replicas do not pool memory
    assert check_fit(llama, isc, find_gpu("H200")).fits
    assert check_fit(llama, isc.model_copy(update={"kv_cache_dtype": KvCacheDtype.FP8}), find_gpu("H100 SXM")).fits


def test_cli_method_inference(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--method", "inference", "--seq-len", "8192"]
    assert main(base + ["--concurrency", "16", "--kv-cache-dtype", "fp8", "--weight-precision", "int4", "--gpu", "L40S"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("components", "total_bytes", "peak_phase", "cpu_bytes", "kv_cache_bytes_per_token", "fits",
                "max_seq_len", "max_concurrency", "headroom_bytes"):
        assert key in out, key
    assert out["kv_cache_bytes_per_token"] == 65_536 and out["components"]["kv_cache"] == 16 * 8192 * 65_536
    assert out["scenario"]["method"] == "inference" and out["cpu_bytes"] == 0
    assert main(base + ["--strategy", "zero3", "--gpu", "H100 SXM"]) == 2
    assert main(["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--concurrency", "4"]) == 2
    assert "need --method inference" in capsys.readouterr().err


# --- issue 16 item 1: serving reads the checkpoint's stored format ---------------------------------------------------

from pathlib import Path  # noqa: E402

QUANTIZED = Path(__file__).resolve().parents[1] / "fixtures" / "quantized"
FP8_CONFIG = QUANTIZED / "neuralmagic__Meta-Llama-3.1-8B-Instruct-FP8.json"  # published quantization_config (README)


def test_fp8_checkpoint_is_served_at_its_stored_one_byte_per_weight():
    arch = architecture_from_config(json.loads(FP8_CONFIG.read_text()))
    assert arch.stored_quantization.method == "compressed-tensors" and arch.stored_quantization.bytes_per_param == 1.0
    # Llama-3.1-8B: 32 x (2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 14336) = 6,979,321,856 block-linear weights at
    # 1 B (FP8, one scale per tensor); the other 1,050,939,392 (embeddings, LM head, norms) stay bf16.
    linear = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert linear == 6_979_321_856
    other = 8_030_261_248 - linear
    est = estimate_inference(arch, InferenceScenario())
    assert est.components["weights"] == linear * 1 + other * 2 == 9_081_200_640  # about 9.1 GB, not 16.1 GB
    # An explicit serving precision does not turn the stored FP8 weights into bf16: the stored format loads, and
    # the estimate says the choice was ignored.
    explicit = estimate_inference(arch, InferenceScenario(weight_precision=WeightPrecision.BF16))
    assert explicit.components["weights"] == est.components["weights"]
    assert any("served as stored" in w for w in explicit.warnings)


def test_cli_inference_of_a_stored_fp8_checkpoint(capsys):
    assert main(["estimate", "--config", str(FP8_CONFIG), "--method", "inference"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["components"]["weights"] == 9_081_200_640
    assert "as stored in the checkpoint" in out["formulas"]["weights"]
