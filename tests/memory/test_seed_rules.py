"""The seed chapters' numbers, reproduced exactly.

Source: ../shared/seeds/000_e5ea2c620e992cc5.txt ("Capítulo 2: Requisitos Computacionales"),
sections "Ejemplo: Modelo de 7B Parámetros" and "Estimar Antes de Entrenar".
"""

import pytest

from engine.scenario.precision import DTYPE_BYTES
from engine.memory.seed_rules import seed_comparison, seed_estimate_memory, seed_multiplier_range, seed_quick_rule


def test_precision_table():
    # "Tamaños de Precisión": float32 4, bfloat16 2, float16 2, int8 1, int4 0.5.
    assert DTYPE_BYTES == {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "int4": 0.5}


def test_seven_b_fp32_is_112_gb():
    r = seed_quick_rule(7_000_000_000, "fp32")
    assert (r.weights_bytes / 1e9, r.gradients_bytes / 1e9, r.optimizer_bytes / 1e9) == (28, 28, 56)
    assert r.total_bytes / 1e9 == 112


def test_seven_b_bf16_is_84_gb():
    r = seed_quick_rule(7_000_000_000, "bf16")
    assert (r.weights_bytes / 1e9, r.gradients_bytes / 1e9, r.optimizer_bytes / 1e9) == (14, 14, 56)
    assert r.total_bytes / 1e9 == 84


def test_seed_estimate_memory_function():
    # estimate_memory(model with 7e9 params, batch_size=4, seq_len=512, "bf16"), computed by hand:
    # weights 7e9*2/2**30 = 13.0385 GiB, optimizer 7e9*8/2**30 = 52.1541, activations 4*512*4096*4/2**30 = 0.03125.
    e = seed_estimate_memory(7_000_000_000, 4, 512, "bf16")
    assert e.weights_gib == pytest.approx(13.038516, abs=1e-6)
    assert e.gradients_gib == e.weights_gib
    assert e.optimizer_gib == pytest.approx(52.154064, abs=1e-6)
    assert e.activations_gib == 0.03125
    assert e.total_gib == pytest.approx(78.262346, abs=1e-6)
    # The seed uses 4 bytes for anything that is not exactly "bf16" (fp16 included).
    assert seed_estimate_memory(7_000_000_000, 4, 512, "fp16").weights_gib == pytest.approx(26.077032, abs=1e-6)


def test_multiplier_rule_and_comparison_rows():
    # "AdamW training: 4-6" x params x precision: 7B in bf16 -> 56 to 84 GB.
    assert seed_multiplier_range(7_000_000_000, "bf16") == (56e9, 84e9)
    rows = seed_comparison(7_000_000_000, 4, 512, precision_is_fp32=False)
    assert [r.total_bytes / 1e9 for r in rows[:2]] == [112, 84]
    assert rows[2].total_bytes / 2**30 == pytest.approx(78.262346, abs=1e-6)
    with pytest.raises(ValueError):
        seed_quick_rule(7_000_000_000, "int4")
