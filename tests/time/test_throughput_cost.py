"""Time and cost: the seed chapter's examples exactly, and FLOPs per token on hand-checked cases (the step-time
model: tests/time/test_step_time.py).

Seed: ../shared/seeds/000_e5ea2c620e992cc5.txt, "Ejemplo de Cálculo de Tiempo" and "Ejemplo de Cálculo de Costos".
"""

import pytest

from engine.model.build import architecture_from_config
from engine.plan.cost import Dataset, run_cost
from engine.errors import ScenarioError
from engine.scenario.training import Scenario
from engine.time.throughput import flops_per_token, matmul_parameters, seed_training_hours
from reference import reference_config, require_reference

require_reference()
LLAMA8 = architecture_from_config(reference_config("meta-llama/Llama-3.1-8B"))


def test_seed_time_example_is_4_3_hours():
    # 10,000 examples x 512 tokens x 3 epochs at 1,000 tokens/s = 15,360 s = 4.27 h.
    assert seed_training_hours(10_000 * 512, 3, 1_000) == pytest.approx(15_360 / 3_600)
    assert round(seed_training_hours(10_000 * 512, 3, 1_000), 1) == 4.3
    run = run_cost(Dataset(examples=10_000, avg_tokens=512, epochs=3), 512, 1_000)
    assert run.tokens == 15_360_000 and round(run.hours, 1) == 4.3


def test_seed_cost_example():
    # "Time: 4 hours on A100-40GB; 4 x $4.00 = $16 (on-demand); 4 x $1.20 = $4.80 (spot); 5 runs: $80 / $24".
    four_hours = Dataset(total_tokens=4 * 3_600 * 1_000)
    one = run_cost(four_hours, 512, 1_000, 1, 4.00, 1.20)
    assert one.hours == 4 and one.cost_usd_on_demand == 16 and one.cost_usd_spot == pytest.approx(4.80)
    five = run_cost(four_hours.model_copy(update={"runs": 5}), 512, 1_000, 1, 4.00, 1.20)
    assert five.cost_usd_on_demand == 80 and five.cost_usd_spot == pytest.approx(24)


def test_padding_without_packing():
    d = Dataset(examples=1_000, avg_tokens=256, packing=False)
    assert d.tokens_per_epoch(1_024) == 1_024_000 and d.padding_waste(1_024) == 0.75
    assert Dataset(examples=1_000, avg_tokens=256).tokens_per_epoch(1_024) == 256_000
    with pytest.raises(ValueError):
        Dataset(examples=10)
    with pytest.raises(ScenarioError):
        run_cost(d, 1_024, 1_000, 1, -1.0)


def test_flops_per_token_by_hand():
    # Llama-3.1-8B: matmul weights = 32 layers x 218,103,808 linear weights + LM head 128,256 x 4,096.
    n = 32 * (2 * 4_096 * 4_096 + 2 * 4_096 * 1_024 + 3 * 4_096 * 14_336) + 128_256 * 4_096
    assert matmul_parameters(LLAMA8) == n == 8_030_261_248 - 128_256 * 4_096 - 266_240  # total - embedding - norms
    f = flops_per_token(LLAMA8, Scenario.build(seq_len=2_048))
    assert f.dense == 6 * n and f.attention == 12 * 32 * 4_096 * 2_048 and f.recompute == 0
    lora = flops_per_token(LLAMA8, Scenario.build(method="lora", seq_len=2_048, gradient_checkpointing=True))
    assert lora.dense == 4 * n  # frozen weights: no weight gradients
    assert lora.recompute == 2 * n + 4 * 32 * 4_096 * 2_048  # checkpointing re-runs the forward
    assert lora.adapters == 6 * 13_631_488


def test_moe_uses_active_parameters():
    mixtral = architecture_from_config(reference_config("mistralai/Mixtral-8x7B-v0.1"))
    # Routed experts count at top-2 of 8: the matmul weights are the active parameters without the embedding
    # table (32,000 x 4,096) and the norms (2 per layer + final, 4,096 each).
    assert matmul_parameters(mixtral) == mixtral.active_parameters - 32_000 * 4_096 - (2 * 32 + 1) * 4_096
