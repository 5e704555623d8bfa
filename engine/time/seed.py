"""The seed chapter's throughput table, kept beside the step-time model as the simple rule.

../shared/seeds/000_e5ea2c620e992cc5.txt, "Ejemplos de Throughput": a table of measured-looking tokens/s (7B on
A100-40GB ~1,000; 7B on H100 ~2,000; 13B on A100-80GB ~500; 70B on 8x H100 ~800) and ``Training Time = Dataset
Size x Epochs / Throughput``.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from engine.errors import CatalogError
from engine.hardware.gpus import Gpu, find_gpu


SEED_THROUGHPUT_SOURCE = 'seed chapter "Capítulo 2: Requisitos Computacionales", "Ejemplos de Throughput (tokens/segundo)"'

# The seed chapter's throughput table: (parameters in billions, GPU, number of GPUs) -> tokens/s.
SEED_THROUGHPUT: tuple[tuple[float, str, int, float], ...] = (
    (7, "A100-40GB", 1, 1_000),
    (7, "H100", 1, 2_000),
    (13, "A100-80GB", 1, 500),
    (70, "H100", 8, 800),
)

SEED_GPUS = {"A100-40GB": "NVIDIA A100 40GB", "A100-80GB": "NVIDIA A100 80GB", "H100": "NVIDIA H100 80GB"}
"""The catalog GPU each of the seed's labels stands for. The seed writes "H100" without a variant (SXM, PCIe or NVL);
it is read as the H100 SXM 80GB, as the seed's largest-model table is (:mod:`engine.plan.largest`), by this table
rather than through the catalog's default for the name (the same GPU today)."""

SEED_SIZE_TOLERANCE = (0.85, 1.25)
"""A model counts as the listed size when within -15%/+25% of it (nominal sizes round: "7B" covers 5.95-8.75B,
as in :func:`engine.plan.fit.compare_with_seed`)."""


class SeedThroughput(BaseModel):
    """The seed table's tokens/s (all GPUs together) for one model size on one GPU kind and count."""

    model_config = ConfigDict(frozen=True)

    tokens_per_second: float
    listed_parameters_b: float
    listed_gpu: str
    gpu: str
    num_gpus: int
    listed_tokens_per_second: float
    scaled: bool

    @property
    def rule(self) -> str:
        """The line of the seed table used, and the scaling if any."""
        gpus = f"{self.num_gpus}x {self.listed_gpu}" if self.num_gpus > 1 else self.listed_gpu
        line = f"seed: {self.listed_parameters_b:g}B on {gpus} ~{self.listed_tokens_per_second:,.0f} tokens/s"
        return line + (" scaled by listed size / model size" if self.scaled else "")


def seed_throughput(parameters_b: float, gpu: Gpu | str, num_gpus: int = 1) -> SeedThroughput | None:
    """The seed rule for a model of ``parameters_b`` billion parameters on ``num_gpus`` x ``gpu``, or None
    when the seed lists nothing for that GPU and count (or the GPU name is unknown).

    The seed's GPU labels stand for the catalog GPUs of :data:`SEED_GPUS` ("A100-40GB" -> NVIDIA A100 40GB,
    "H100" -> NVIDIA H100 80GB (SXM)), so only that catalog GPU matches: an A100 40GB PCIe or an H100 PCIe is
    another GPU, which the seed does not list. ``gpu`` by name goes through :func:`engine.hardware.gpus.find_gpu`:
    "H100" is the catalog's GPU for that name, the H100 80GB (SXM), so it matches. Among the listed sizes on that GPU and count the closest (log
    scale) is used: its tokens/s as listed when the model is within :data:`SEED_SIZE_TOLERANCE` of that size,
    otherwise scaled by listed size / model size (training FLOPs per token are proportional to parameters).
    """
    if parameters_b <= 0:
        return None
    try:
        target = gpu if isinstance(gpu, Gpu) else find_gpu(gpu)
    except CatalogError:
        return None
    rows = [r for r in SEED_THROUGHPUT if r[2] == num_gpus and SEED_GPUS[r[1]] == target.name]
    if not rows:
        return None
    size, label, count, tps = min(rows, key=lambda r: abs(math.log(r[0] / parameters_b)))
    lo, hi = SEED_SIZE_TOLERANCE
    scaled = not lo * size <= parameters_b <= hi * size
    return SeedThroughput(
        tokens_per_second=tps * size / parameters_b if scaled else tps, listed_parameters_b=size, listed_gpu=label,
        gpu=target.name, num_gpus=count, listed_tokens_per_second=tps, scaled=scaled,
    )


def seed_tokens_per_second(parameters_b: float, gpu: Gpu | str, num_gpus: int = 1) -> float | None:
    """Tokens/s of :func:`seed_throughput`, or None when the seed lists nothing for that GPU and count."""
    rule = seed_throughput(parameters_b, gpu, num_gpus)
    return None if rule is None else rule.tokens_per_second


def seed_training_hours(total_tokens: float, epochs: float, tokens_per_second: float) -> float:
    """The seed's ``Training Time = Dataset Size x Epochs / Throughput``, in hours.

    Seed example: 10,000 examples x 512 tokens x 3 epochs at 1,000 tokens/s = 15,360 s = 4.27 h ("4.3").
    """
    return total_tokens * epochs / tokens_per_second / 3600
