"""Stored quantization formats read from quantization_config (bytes per weight computed by hand)."""

import pytest

from engine.errors import ConfigError
from engine.model.quantization import stored_quantization


def test_gptq_and_awq_4bit_group_128():
    # 4/8 B packed + fp16 scale per 128 weights (2/128) + 4-bit zero per 128 (0.5/128) = 0.51953125 B.
    q = stored_quantization({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128}})
    assert q.bytes_per_param == pytest.approx(0.5 + 2 / 128 + 0.5 / 128)
    # TheBloke-style AWQ config spells them w_bit / q_group_size.
    a = stored_quantization({"quantization_config": {"quant_method": "awq", "w_bit": 4, "q_group_size": 128}})
    assert a.bytes_per_param == q.bytes_per_param and a.method == "awq"
    assert stored_quantization({"quantization_config": {"quant_method": "gptq", "bits": 8, "group_size": -1}}).group_size == 128


def test_bitsandbytes_and_fp8():
    nf4 = stored_quantization({"quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True,
                                                       "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True}})
    assert nf4.bytes_per_param == pytest.approx(0.515869140625)  # QLoRA paper sec. 3, as engine.memory
    int8 = stored_quantization({"quantization_config": {"quant_method": "bitsandbytes", "load_in_8bit": True}})
    assert int8.bytes_per_param == 1.0
    # DeepSeek-V3's config: {"quant_method": "fp8", "weight_block_size": [128, 128], ...}
    fp8 = stored_quantization({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}})
    assert fp8.bytes_per_param == pytest.approx(1 + 4 / 16_384)


def test_compressed_tensors_and_errors():
    ct = {"quant_method": "compressed-tensors",
          "config_groups": {"group_0": {"weights": {"num_bits": 4, "group_size": 128, "type": "int"}}}}
    assert stored_quantization({"quantization_config": ct}).bits == 4
    assert stored_quantization({}) is None
    with pytest.raises(ConfigError, match="known: gptq"):
        stored_quantization({"quantization_config": {"quant_method": "hqq"}})
    with pytest.raises(ConfigError):
        stored_quantization({"quantization_config": "gptq"})
