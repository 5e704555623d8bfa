"""The largest model that fits a GPU, and the seed chapter's table of GPUs and the model sizes they take.

Built on :func:`engine.plan.fit.check_fit`: for each model of a list the fewest GPUs and per-GPU peak, the largest
that fits a GPU plan, and that answer beside the seed chapter's simple table (shown side by side in the app).
"""

from __future__ import annotations

from typing import Sequence

from pydantic import BaseModel, ConfigDict

from engine.errors import ScenarioError
from engine.hardware.gpus import Gpu
from engine.memory.device import tensor_budget
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import ParallelPlan, Strategy, plan_parallel
from engine.model.architecture import Architecture
from engine.plan.fit import scenario_for_model
from engine.scenario.training import Scenario


class LargestModel(BaseModel):
    """The largest model (by parameters) of a list that fits, with its per-GPU peak."""

    model_config = ConfigDict(frozen=True)

    label: str | None
    parameters: int | None
    peak_bytes: float | None


class ModelPlan(BaseModel):
    """One model's per-GPU memory plan for a scenario and strategy (see :func:`model_plans`)."""

    model_config = ConfigDict(frozen=True)

    label: str
    parameters: int
    plan: ParallelPlan


def model_plans(models: Sequence[tuple[str, Architecture]], scenario: Scenario, strategy: Strategy = Strategy.DDP) -> list[ModelPlan]:
    """Estimate ``scenario`` once per model and keep its :class:`~engine.memory.parallel.ParallelPlan`, largest
    model first. Models whose scenario cannot be estimated (e.g. missing LoRA targets) are left out."""
    out = []
    for label, arch in models:
        sc, _ = scenario_for_model(arch, scenario)
        try:
            plan = plan_parallel(estimate_memory(arch, sc), arch, sc, strategy)
        except ScenarioError:
            continue
        out.append(ModelPlan(label=label, parameters=arch.total_parameters, plan=plan))
    return sorted(out, key=lambda m: -m.parameters)


def largest_fitting_model(plans: Sequence[ModelPlan], gpu: Gpu, num_gpus: int = 1) -> LargestModel:
    """The model with the most parameters among ``plans`` whose per-GPU peak fits on ``num_gpus`` x ``gpu``."""
    fitting = [(m, m.plan.per_gpu_bytes(num_gpus)) for m in plans]
    fitting = [(m, peak) for m, peak in fitting if peak <= tensor_budget(gpu.usable_memory_bytes)]
    if not fitting:
        return LargestModel(label=None, parameters=None, peak_bytes=None)
    m, peak = max(fitting, key=lambda mp: mp[0].parameters)
    return LargestModel(label=m.label, parameters=m.parameters, peak_bytes=peak)


# --------------------------------------------------------------------------------------------------
# The seed chapter's "largest model per GPU" tables

SEED_TABLE_SOURCE = (
    "seed chapter 'Capítulo 2: Requisitos Computacionales', 'Recomendaciones Prácticas de GPU': 'Entrenamiento en una Sola GPU' "
    "and 'Entrenamiento Multi-GPU' tables"
)


class SeedGpuRow(BaseModel):
    """One line of the seed's tables: a GPU (``gpu`` = catalog name), how many, and its largest models."""

    model_config = ConfigDict(frozen=True)

    seed_label: str
    gpu: str
    num_gpus: int
    seed_vram: str
    seed_full: str | None
    seed_efficient: str


SEED_LARGEST_MODEL: tuple[SeedGpuRow, ...] = (
    SeedGpuRow(seed_label="RTX 3090", gpu="NVIDIA RTX 3090", num_gpus=1, seed_vram="24 GB", seed_full="1B", seed_efficient="3B"),
    SeedGpuRow(seed_label="RTX 4090", gpu="NVIDIA RTX 4090", num_gpus=1, seed_vram="24 GB", seed_full="1B", seed_efficient="3B"),
    SeedGpuRow(seed_label="A100-40GB", gpu="NVIDIA A100 40GB", num_gpus=1, seed_vram="40 GB", seed_full="3B", seed_efficient="7B"),
    SeedGpuRow(seed_label="A100-80GB", gpu="NVIDIA A100 80GB", num_gpus=1, seed_vram="80 GB", seed_full="7B", seed_efficient="13B"),
    SeedGpuRow(seed_label="H100", gpu="NVIDIA H100 80GB", num_gpus=1, seed_vram="80 GB", seed_full="7B", seed_efficient="13B"),
    SeedGpuRow(seed_label="2× A100-40GB", gpu="NVIDIA A100 40GB", num_gpus=2, seed_vram="80 GB combined", seed_full=None, seed_efficient="7-13B"),
    SeedGpuRow(seed_label="4× A100-80GB", gpu="NVIDIA A100 80GB", num_gpus=4, seed_vram="320 GB combined", seed_full=None, seed_efficient="30-40B"),
    SeedGpuRow(seed_label="8× H100", gpu="NVIDIA H100 80GB", num_gpus=8, seed_vram="640 GB combined", seed_full=None, seed_efficient="70B"),
)
"""The seed's numbers, verbatim (sizes in billions of parameters; "efficient" = LoRA/QLoRA in the chapter)."""


def seed_size_range(text: str) -> tuple[float, float]:
    """``"7B"`` -> (7e9, 7e9); ``"7-13B"`` -> (7e9, 13e9). Raises ``ValueError`` on other text."""
    lo, _, hi = text.strip().removesuffix("B").partition("-")
    return float(lo) * 1e9, float(hi or lo) * 1e9


def compare_with_seed(parameters: int | None, seed: str | None) -> str:
    """``same`` when the model lies within the seed's size give or take the rounding of nominal sizes
    (-15%/+25%: "7B" covers 5.95-8.75B, so Llama 3.2 1B's 1.24B counts as "1B"), ``larger``/``smaller``
    otherwise; ``nothing fits`` or ``no seed number``."""
    if seed is None:
        return "no seed number"
    if parameters is None:
        return "nothing fits"
    lo, hi = seed_size_range(seed)
    if parameters > hi * 1.25:
        return "larger"
    if parameters < lo * 0.85:
        return "smaller"
    return "same"


class SeedComparison(BaseModel):
    """A seed line beside the largest catalog models that fit for the full and the efficient scenario."""

    model_config = ConfigDict(frozen=True)

    seed: SeedGpuRow
    usable_memory_bytes: int
    strategy: Strategy
    full: LargestModel
    efficient: LargestModel
    full_vs_seed: str
    efficient_vs_seed: str


def seed_largest_model_table(
    models: Sequence[tuple[str, Architecture]],
    full_scenario: Scenario,
    efficient_scenario: Scenario,
    gpus: Sequence[Gpu],
    multi_gpu_strategy: Strategy = Strategy.ZERO3,
) -> list[SeedComparison]:
    """Recompute :data:`SEED_LARGEST_MODEL` over ``models``: one GPU alone, and the seed's multi-GPU lines
    with ``multi_gpu_strategy`` (the seed's "combined VRAM" pools memory, which only sharding does).

    Each scenario is estimated once per model and strategy; each line is then arithmetic.
    """
    by_name = {g.name: g for g in gpus}
    plans: dict[tuple[str, Strategy], list[ModelPlan]] = {}

    def plans_for(kind: str, strategy: Strategy) -> list[ModelPlan]:
        if (kind, strategy) not in plans:
            plans[(kind, strategy)] = model_plans(models, full_scenario if kind == "full" else efficient_scenario, strategy)
        return plans[(kind, strategy)]

    out = []
    for row in SEED_LARGEST_MODEL:
        gpu = by_name[row.gpu]
        strategy = Strategy.DDP if row.num_gpus == 1 else multi_gpu_strategy
        full = largest_fitting_model(plans_for("full", strategy), gpu, row.num_gpus)
        eff = largest_fitting_model(plans_for("efficient", strategy), gpu, row.num_gpus)
        out.append(SeedComparison(
            seed=row, usable_memory_bytes=gpu.usable_memory_bytes * row.num_gpus, strategy=strategy, full=full, efficient=eff,
            full_vs_seed=compare_with_seed(full.parameters, row.seed_full),
            efficient_vs_seed=compare_with_seed(eff.parameters, row.seed_efficient),
        ))
    return out
