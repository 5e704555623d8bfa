"""Wall time and cost of a fine-tuning run: tokens to process, hours, GPU-hours, USD.

Time = tokens x epochs / tokens per second (the seed chapter's "Training Time" formula, with the
throughput of all GPUs together); cost = hours x GPUs x price per GPU-hour, on demand and spot, times the
number of experimental runs ("Estimación de Costos en la Nube": 4 h x $4.00 = $16 on demand, 4 h x $1.20
= $4.80 spot on an A100-40GB; 5 runs = $80 / $24).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.errors import ScenarioError


class Dataset(BaseModel):
    """What one epoch processes. Give ``total_tokens``, or ``examples`` and ``avg_tokens``.

    Without packing every example is padded (or cut) to the sequence length, so an epoch processes
    ``examples x seq_len`` tokens and the padding is wasted compute; with packing, examples are
    concatenated into full sequences and an epoch processes ``examples x avg_tokens``.
    """

    model_config = ConfigDict(frozen=True)

    total_tokens: int | None = Field(None, ge=1)
    examples: int | None = Field(None, ge=1)
    avg_tokens: float | None = Field(None, gt=0)
    epochs: float = Field(1.0, gt=0, le=10_000)
    packing: bool = True
    runs: int = Field(1, ge=1, le=10_000)

    @model_validator(mode="after")
    def _one_size(self) -> "Dataset":
        if self.total_tokens is None and (self.examples is None or self.avg_tokens is None):
            raise ValueError("give the dataset as total tokens, or as examples and average tokens per example")
        return self

    def tokens_per_epoch(self, seq_len: int) -> float:
        """Tokens the GPUs process in one epoch, padding included."""
        if self.examples is None or self.avg_tokens is None:
            return float(self.total_tokens or 0)
        per_example = min(self.avg_tokens, seq_len) if self.packing else seq_len
        return self.examples * per_example

    def padding_waste(self, seq_len: int) -> float:
        """Fraction of processed tokens that are padding (0 with packing or a token total)."""
        if self.packing or self.examples is None or self.avg_tokens is None:
            return 0.0
        return max(0.0, 1 - self.avg_tokens / seq_len)


class RunCost(BaseModel):
    """Time and money of ``runs`` training runs."""

    model_config = ConfigDict(frozen=True)

    tokens: float
    tokens_per_second: float
    hours: float
    gpu_hours: float
    cost_usd_on_demand: float | None
    cost_usd_spot: float | None


def run_cost(
    dataset: Dataset,
    seq_len: int,
    tokens_per_second: float,
    num_gpus: int = 1,
    on_demand_usd_per_gpu_hour: float | None = None,
    spot_usd_per_gpu_hour: float | None = None,
) -> RunCost:
    """Hours and USD to process ``dataset`` at ``tokens_per_second`` (all GPUs together).

    Raises:
        ScenarioError: non-positive throughput or GPU count, or a negative price.
    """
    if tokens_per_second <= 0 or num_gpus < 1:
        raise ScenarioError("throughput must be positive and the GPU count at least 1")
    for price in (on_demand_usd_per_gpu_hour, spot_usd_per_gpu_hour):
        if price is not None and price < 0:
            raise ScenarioError(f"a price per GPU-hour cannot be negative (got {price})")
    tokens = dataset.tokens_per_epoch(seq_len) * dataset.epochs
    hours = tokens / tokens_per_second / 3600 * dataset.runs
    gpu_hours = hours * num_gpus

    def cost(price: float | None) -> float | None:
        return None if price is None else gpu_hours * price

    return RunCost(
        tokens=tokens * dataset.runs,
        tokens_per_second=tokens_per_second,
        hours=hours,
        gpu_hours=gpu_hours,
        cost_usd_on_demand=cost(on_demand_usd_per_gpu_hour),
        cost_usd_spot=cost(spot_usd_per_gpu_hour),
    )
