"""Our FLOPs model beside published training throughputs (``data/throughput_measurements.csv``).

For every published row: the scenario it describes (model from the bundled catalog, method, micro batch,
sequence length, checkpointing), our predicted tokens/s at a given MFU (default :data:`DEFAULT_MFU`), the
ratio ours / measured, PaLM's MFU the measurement implies (:func:`engine.time.throughput.implied_mfu`, model
FLOPs, comparable with published MFU figures) and the value of our MFU input that reproduces it
(:func:`engine.time.throughput.implied_utilization`, recompute and the bandwidth-bound parts included).

:data:`DEFAULT_MFU` is the median of that last value over the Hugging Face-stack rows
(:func:`default_mfu_from_measurements`); see its docstring for why those rows and not all of them.

What the rows do not state is assumed, the same way for every row (:data:`ASSUMPTIONS`): weights loaded in
bf16 (torchtune's ``dtype: bf16``; LlamaFactory loads the model in the bf16 compute dtype), fused AdamW
(except where a row's notes name another optimizer, :data:`ROW_OPTIMIZERS`), one micro batch per optimizer
step, SDPA attention, LoRA rank 16 on the attention projections (adapters are under 1% of the FLOPs).
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from engine.model.build import architecture_from_config
from engine.validation.measurements import ThroughputMeasurement, load_throughput_measurements
from engine.model.catalog import catalog_model
from engine.plan.fit import check_fit
from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import Strategy
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Method, Scenario
from engine.time.throughput import DEFAULT_MFU, DEFAULT_SCALING_EFFICIENCY, estimate_throughput, implied_mfu, implied_utilization

STACKS: dict[str, str] = {
    "LlamaFactory paper": "hf",
    "pytorch/torchtune README": "torchtune",
}
"""Training stack of each source: ``hf`` = transformers + PEFT + bitsandbytes (LlamaFactory is built on
them: Zheng et al. 2024, sec. 3), what this app models; ``torchtune`` = PyTorch-native recipes with
torch.compile, sample packing and chunked cross-entropy. Other sources count as ``other``."""

STACK_LABELS = {"hf": "Hugging Face", "torchtune": "torchtune", "other": "other"}

ROW_OPTIMIZERS: dict[str, Optimizer] = {
    "torchtune-8b-full-4090": Optimizer.PAGED_ADAMW_8BIT,  # row notes: "optimizer PagedAdamW8bit in backward"
}

ASSUMPTIONS = (
    "weights in bf16 (pure bf16), compute in bf16",
    "fused AdamW unless the row names another optimizer",
    "gradient accumulation 1 (the optimizer step's time counts once per micro batch: conservative)",
    "SDPA attention; LoRA rank 16 on the attention projections (adapters are under 1% of the FLOPs)",
    "one GPU per row here; a multi-GPU row would use DDP at its default scaling efficiency",
)


def stack_of(m: ThroughputMeasurement) -> str:
    """``hf``, ``torchtune`` or ``other`` (see :data:`STACKS`)."""
    return STACKS.get(m.source, "other")


def measurement_scenario(m: ThroughputMeasurement) -> Scenario:
    """The scenario a published row describes, with :data:`ASSUMPTIONS` for what it does not state."""
    return Scenario.build(
        method=Method(m.method), precision=PrecisionMode.BF16, optimizer=ROW_OPTIMIZERS.get(m.id, Optimizer.ADAMW_FUSED),
        micro_batch_size=m.micro_batch_size, seq_len=m.seq_len, gradient_checkpointing=m.gradient_checkpointing,
    )


class MeasurementComparison(BaseModel):
    """One published row beside our FLOPs model. Tokens/s of all the row's GPUs together."""

    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    locator: str
    stack: str
    model: str
    method: str
    gpu: str
    num_gpus: int
    seq_len: int
    micro_batch_size: int
    gradient_checkpointing: bool
    measured_tokens_per_second: float
    predicted_tokens_per_second: float
    mfu: float
    ratio: float
    implied_mfu: float
    implied_utilization: float | None
    fits_in_memory: bool
    notes: str

    def record(self) -> dict[str, object]:
        """A flat row for a table or CSV."""
        return {
            "source": self.source, "id": self.id, "stack": STACK_LABELS[self.stack], "model": self.model,
            "method": self.method, "GPU": f"{self.num_gpus}x {self.gpu}" if self.num_gpus > 1 else self.gpu,
            "batch x seq": f"{self.micro_batch_size} x {self.seq_len}",
            "checkpointing": self.gradient_checkpointing,
            "measured tokens/s": round(self.measured_tokens_per_second, 1),
            f"ours at MFU {self.mfu:g}": round(self.predicted_tokens_per_second, 1),
            "ours / measured": round(self.ratio, 2),
            "implied MFU (PaLM, model FLOPs)": round(self.implied_mfu, 3),
            "implied MFU input (our step model)": None if self.implied_utilization is None else round(self.implied_utilization, 3),
            "fits (our memory estimate)": self.fits_in_memory,
            "locator": self.locator,
        }


def compare_measurement(m: ThroughputMeasurement, mfu: float = DEFAULT_MFU) -> MeasurementComparison:
    """Our tokens/s for the row's scenario at ``mfu``, the ratio to the measurement and the implied MFUs.

    Raises:
        EngineError: the row's model, GPU or scenario cannot be estimated.
    """
    arch = architecture_from_config(catalog_model(m.repo_id).config)
    sc = measurement_scenario(m)
    gpu = find_gpu(m.gpu)
    est = estimate_memory(arch, sc)
    strategy = Strategy.DDP
    ours = estimate_throughput(arch, sc, gpu, mfu=mfu, num_gpus=m.num_gpus, strategy=strategy, estimate=est)
    peak = ours.peak.flops or 0.0
    per_gpu_measured = m.tokens_per_second / m.num_gpus / ours.scaling_efficiency
    fit = check_fit(arch, sc, gpu, strategy, m.num_gpus, estimate=est)
    return MeasurementComparison(
        id=m.id, source=m.source, locator=m.locator, stack=stack_of(m), model=catalog_model(m.repo_id).name,
        method=m.method, gpu=gpu.name, num_gpus=m.num_gpus, seq_len=m.seq_len, micro_batch_size=m.micro_batch_size,
        gradient_checkpointing=m.gradient_checkpointing, measured_tokens_per_second=m.tokens_per_second,
        predicted_tokens_per_second=ours.tokens_per_second, mfu=mfu, ratio=ours.tokens_per_second / m.tokens_per_second,
        implied_mfu=implied_mfu(arch, sc, m.tokens_per_second / m.num_gpus, peak),
        implied_utilization=implied_utilization(arch, sc, est, per_gpu_measured, peak_flops=peak,
                                                bandwidth_bytes_per_s=gpu.memory_bandwidth_gbps * 1e9),
        fits_in_memory=fit.fits, notes=m.notes,
    )


@lru_cache(maxsize=16)
def compare_measurements(mfu: float = DEFAULT_MFU) -> tuple[MeasurementComparison, ...]:
    """:func:`compare_measurement` for every row of ``data/throughput_measurements.csv``, in file order."""
    return tuple(compare_measurement(m, mfu) for m in load_throughput_measurements())


def default_mfu_from_measurements(stack: str | None = "hf") -> float:
    """Median of the implied MFU input (:func:`engine.time.throughput.implied_utilization`) over the rows of
    ``stack`` (None: all rows); :data:`engine.time.throughput.DEFAULT_MFU` is this for ``"hf"``, rounded.

    Why the Hugging Face rows: the app models that stack; the torchtune rows (torch.compile, packing, chunked
    cross-entropy) form a separate, faster group, and a median over both groups lies between them.
    Rows whose implied value is undefined (bandwidth terms exceed the measured step) are left out.
    """
    values = [c.implied_utilization for c in compare_measurements() if c.implied_utilization is not None
              and (stack is None or c.stack == stack)]
    if not values:
        raise ValueError(f"no measurement of stack {stack!r}")
    return statistics.median(values)


__all__ = [
    "ASSUMPTIONS", "DEFAULT_SCALING_EFFICIENCY", "MeasurementComparison", "ROW_OPTIMIZERS", "STACKS", "compare_measurement",
    "compare_measurements", "default_mfu_from_measurements", "measurement_scenario", "stack_of",
]
