"""The fit matrix's fewest-GPUs fast path (engine.plan.fewest.FewestGpus) gives ParallelPlan.min_gpus' answer, its
bisection over the exact per-GPU bytes, for every catalog model, strategy and a sweep of budgets that crosses each
plan's boundaries (1 GPU, a few, many, none)."""

from __future__ import annotations

import pytest

from engine.hardware.gpus import load_gpus
from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.catalog import load_models
from engine.memory.parallel import MAX_GPUS, Strategy, plan_parallel
from engine.plan.fewest import FewestGpus, phase_sums
from engine.scenario.training import Method, Scenario

STRATEGIES = (Strategy.DDP, Strategy.ZERO2, Strategy.ZERO3, Strategy.FSDP_FULL_SHARD)


@pytest.fixture(scope="module")
def catalog():
    return [(m.name, architecture_from_config(m.config)) for m in load_models()]


@pytest.mark.parametrize("method", [Method.FULL, Method.LORA])
def test_fewest_gpus_is_the_bisections_answer(catalog, method):
    sc = Scenario.build(method=method, gradient_checkpointing=True)
    usable = sorted({g.usable_memory_bytes for g in load_gpus()})
    checked = {"one": 0, "many": 0, "none": 0}
    for _, arch in catalog:
        est = estimate_memory(arch, sc)
        for strategy in STRATEGIES:
            plan = plan_parallel(est, arch, sc, strategy)
            fewest = FewestGpus(plan, phase_sums(plan))
            # the catalog's GPUs, and the exact per-GPU peak at 1..MAX_GPUS GPUs and one byte under each
            budgets = usable + [plan.per_gpu_bytes(n) for n in (1, 2, 3, 7, 64, MAX_GPUS)]
            budgets += [b - 1.0 for b in budgets]
            for budget in budgets:
                n = fewest.at(budget)
                assert n == plan.min_gpus(budget), (
                    arch.model_type, strategy, budget)
                checked["one" if n == 1 else "none" if n is None else "many"] += 1
    assert all(checked.values()), checked  # every branch of the fast path was taken
