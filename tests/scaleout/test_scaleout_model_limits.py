"""The model's own limits on a layout are named first (a new user's report on the Scale out page): a dense model asked
for expert parallelism is refused for having no experts, not because EP does not divide DP x CP; more pipeline stages
than layers are refused for the layers, not for a GPU-count mismatch (engine.scaleout.layout.layout_for_world)."""

from __future__ import annotations

import argparse

import pytest

from engine.cli.scaleout import layout_from_args
from engine.errors import ScenarioError
from engine.model.build import architecture_from_config
from engine.model.catalog import load_models
from engine.scaleout.layout import layout_for_world, model_layout_limits
from engine.scenario.training import Scenario


def _arch(name: str):
    return architecture_from_config(next(m for m in load_models() if m.name == name).config)


QWEN05 = _arch("Qwen2.5 0.5B")  # dense, 24 layers
MIXTRAL = _arch("Mixtral 8x7B v0.1")  # 8 experts, 32 layers
FIELDS = dict(tensor_parallel=1, pipeline_parallel=1, context_parallel=1, expert_parallel=1, micro_batch_size=1,
              global_batch_size=64, zero=3)
NO_EXPERTS = ("Expert parallel 64: this model has no experts (it is a dense model, not a mixture of experts), so expert "
              "parallel must be 1.")
TOO_DEEP = ("Pipeline parallel 100: pipeline stages cannot exceed the number of layers, and this model has 24, so use at "
            "most 24 stages.")


@pytest.mark.parametrize(("update", "words"), [({"expert_parallel": 64}, NO_EXPERTS), ({"pipeline_parallel": 100}, TOO_DEEP)])
def test_the_model_limit_is_the_first_failing_check(update, words):
    with pytest.raises(ScenarioError) as info:
        layout_for_world(QWEN05, {**FIELDS, **update}, 8)
    assert str(info.value) == words  # not "must divide DP x CP = 8", not "8 GPUs are not a multiple of ..."


def test_both_limits_are_listed_one_a_line():
    assert model_layout_limits(QWEN05, pipeline_parallel=100, expert_parallel=64) == [NO_EXPERTS, TOO_DEEP]
    with pytest.raises(ScenarioError) as info:
        layout_for_world(QWEN05, {**FIELDS, "expert_parallel": 64, "pipeline_parallel": 100}, 8)
    assert str(info.value).splitlines() == [NO_EXPERTS, TOO_DEEP]


def test_a_moe_model_names_its_expert_count_then_the_gpu_checks_follow():
    assert model_layout_limits(MIXTRAL, expert_parallel=8, pipeline_parallel=32) == []
    assert model_layout_limits(MIXTRAL, expert_parallel=16) == [
        "Expert parallel 16 does not divide this model's 8 experts: every expert-parallel rank holds the same number of "
        "experts, so use a divisor of 8."]
    # within the model's limits, the GPU count and Layout's rules are checked as before
    with pytest.raises(ScenarioError, match="8 GPUs are not a multiple of TP x PP x CP = 3"):
        layout_for_world(MIXTRAL, {**FIELDS, "pipeline_parallel": 3}, 8)
    with pytest.raises(ScenarioError, match="expert parallel 8 must divide DP x CP = 4"):
        layout_for_world(MIXTRAL, {**FIELDS, "pipeline_parallel": 2, "expert_parallel": 8}, 8)
    layout = layout_for_world(MIXTRAL, {**FIELDS, "expert_parallel": 8}, 8)
    assert (layout.data_parallel, layout.expert_parallel) == (8, 8)


def test_the_cli_checks_the_model_first_too():
    args = argparse.Namespace(recompute_layers=None, recompute=None, tensor_parallel=None, pipeline_parallel=100,
                              context_parallel=None, gpus_per_node=8, num_nodes=None, num_gpus=8, strategy=None,
                              global_batch_size=None, expert_parallel=None, sequence_parallel=False, virtual_pipeline=None,
                              pipeline_schedule=None, moe_capacity_factor=None, gradient_checkpointing=False)
    with pytest.raises(ScenarioError) as info:
        layout_from_args(args, Scenario(), QWEN05)
    assert str(info.value) == TOO_DEEP
