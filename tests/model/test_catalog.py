"""Bundled data: model catalog (data/models) and GPU list (data/gpus.csv)."""

import pytest

from engine.model.build import architecture_from_config
from engine.hardware.gpus import find_gpu, load_gpus
from engine.model.catalog import load_models
from engine.errors import CatalogError
from engine.model.hub import MAX_CONFIG_BYTES
from engine.model.sources import parse_config_bytes
from engine.errors import ConfigError
from reference import AVAILABLE, MISSING_REASON, param_counts, reference_config


def test_catalog_has_the_popular_models_with_repo_ids():
    ids = {m.repo_id for m in load_models()}
    assert len(ids) >= 12
    for rid in ["meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.2-1B", "mistralai/Mistral-7B-v0.1", "Qwen/Qwen2.5-7B",
                "Qwen/Qwen3-8B", "google/gemma-2-2b", "microsoft/Phi-3-mini-4k-instruct", "HuggingFaceTB/SmolLM2-135M",
                "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "openai-community/gpt2"]:
        assert rid in ids


# Bundled models that ../shared/reference does not cover, with their official total and its source.
EXTRA_TOTALS = {
    # Hub safetensors total of meta-llama/Llama-3.2-3B ("3.21B params"): 3,212,749,824 (tied embeddings).
    "meta-llama/Llama-3.2-3B": 3_212_749_824,
    # The four below: exact in-memory totals checked in tests/test_architectures_more.py, which names each source.
    "Qwen/Qwen3-30B-A3B": 30_532_122_624,
    "google/gemma-3-1b-pt": 999_885_952,
    "deepseek-ai/DeepSeek-V2-Lite": 15_706_484_224,
    "microsoft/phi-2": 2_779_683_840,
    # Added for the measured-memory validation (data/measured_memory.csv); sources in tests/test_validation.py.
    "Qwen/Qwen-7B-Chat": 7_721_324_544,
    "Qwen/Qwen-1_8B-Chat": 1_836_828_672,
    "Qwen/Qwen-14B-Chat": 14_167_290_880,
    "01-ai/Yi-34B-Chat": 34_388_917_248,
    "google-bert/bert-large-uncased": 335_174_458,
    "microsoft/phi-1_5": 1_418_270_720,
    "stabilityai/stablelm-base-alpha-3b": 3_637_321_728,
    "meta-llama/Llama-3.1-405B": 405_853_388_800,
}


@pytest.mark.skipif(not AVAILABLE, reason=MISSING_REASON)
@pytest.mark.parametrize("model", load_models(), ids=lambda m: m.repo_id)
def test_bundled_config_is_the_published_one(model):
    # The bundled copy must match ../shared/reference (published config.json fields) and count exactly.
    total = architecture_from_config(model.config).total_parameters
    if model.repo_id in EXTRA_TOTALS:
        assert total == EXTRA_TOTALS[model.repo_id]
        return
    assert model.config == reference_config(model.repo_id)
    assert total == param_counts()[model.repo_id]["unique_parameters"]


def test_gpu_names_resolve_forgivingly():
    assert find_gpu("a100 80gb").memory_gib == 80
    assert find_gpu("A100-40GB").memory_gib == 40
    assert find_gpu("H100 SXM").name == "NVIDIA H100 80GB"
    assert find_gpu("rtx_4090").memory_bytes == 24 * 2**30
    with pytest.raises(CatalogError, match="closest"):
        find_gpu("A100 81")
    assert len(load_gpus()) >= 15


def test_parse_config_bytes_rejects_bad_uploads():
    assert parse_config_bytes(b'{"model_type": "llama"}') == {"model_type": "llama"}
    assert parse_config_bytes(b'\xef\xbb\xbf{"model_type": "llama"}') == {"model_type": "llama"}  # UTF-8 BOM
    for bad, msg in [(b"not json", "not valid JSON"), (b"[1, 2]", "JSON object"), (b"\xff\xfe\x00", "UTF-8"),
                     (b" " * (MAX_CONFIG_BYTES + 1), "at most"),
                     (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")]:
        with pytest.raises(ConfigError, match=msg):
            parse_config_bytes(bad)
