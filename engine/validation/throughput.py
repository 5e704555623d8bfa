"""The step-time model beside published training throughputs (``data/throughput_measurements.csv``).

Every expressible row (role ``fit`` or ``holdout``) becomes the scenario it describes (model from the bundled
catalog, method, precision, optimizer, attention, LoRA rank and targets, micro batch, sequence length,
accumulation, checkpointing, GPU count and strategy) and is timed by :func:`engine.time.throughput.estimate_throughput`
with no calibration. :class:`MeasurementComparison` gives predicted and measured tokens/s, the signed error
``predicted / measured - 1`` and MFU/HFU of the prediction. Rows the model cannot express are listed by
:func:`not_expressible` with the reason.

``fit`` rows are the ten rows the project had before the step-time model: its constants were chosen from sources
and checked on them; ``holdout`` rows were added afterwards and never used to choose a constant
(:func:`error_summary` reports both).
"""

from __future__ import annotations

import statistics
from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.plan.fit import check_fit
from engine.scenario.training import Method, Scenario
from engine.time.throughput import estimate_throughput
from engine.validation.measurements import ThroughputMeasurement, freeze_setting, load_throughput_measurements
from engine.validation.run_configs import row_architecture

NAIVE_PIPELINE = "device_map"
"""A row's ``strategy`` for a model split over its GPUs by ``device_map`` (layers in turn, no overlap)."""

STACKS: dict[str, str] = {
    "LlamaFactory paper": "hf",
    "modelscope/ms-swift Benchmark.md": "hf",
    "pytorch/torchtune README": "torchtune",
}
"""Training stack of each source: ``hf`` = transformers + PEFT + bitsandbytes (+ Trainer); ``torchtune`` =
PyTorch-native recipes; other sources count as ``other``."""

STACK_LABELS = {"hf": "Hugging Face", "torchtune": "torchtune", "other": "other"}

ASSUMPTIONS = (
    "settings a row does not state are its framework's config defaults, named in the row's notes",
    "packed (full-length) sequences: tokens/s counts every position",
    "torch.compile, Unsloth, Liger, Transformer Engine kernels = fused kernels (fewer elementwise passes and launches)",
    "torchao NF4 is timed as bitsandbytes NF4",
)


def stack_of(m: ThroughputMeasurement) -> str:
    """``hf``, ``torchtune`` or ``other`` (see :data:`STACKS`)."""
    return STACKS.get(m.source, "other")


def measurement_scenario(m: ThroughputMeasurement) -> Scenario:
    """The scenario a published row describes (its setting columns).

    Raises:
        ScenarioError: the row's settings do not make a valid scenario (e.g. a row that is not expressible).
    """
    freeze = freeze_setting(m.method)
    fields = dict(
        method=Method.FULL if freeze else Method(m.method), precision=m.precision, optimizer=m.optimizer, attention=m.attention,
        micro_batch_size=m.micro_batch_size, seq_len=m.seq_len, gradient_checkpointing=m.gradient_checkpointing,
        gradient_accumulation_steps=m.gradient_accumulation_steps, framework=m.framework,
        fused_cross_entropy=m.fused_cross_entropy, gradient_checkpointing_offload=m.activation_offload,
        loss_implementation=m.loss_implementation,
    )
    if freeze:
        fields["trainable_layers"], fields["frozen_input_grads"] = freeze
    if m.lora_r is not None:
        fields["lora_r"] = m.lora_r
    if m.lora_targets:
        fields["lora_targets"] = m.lora_targets
    return Scenario.build(**fields)


class MeasurementComparison(BaseModel):
    """One published row beside the step-time model. Tokens/s of all the row's GPUs together."""

    model_config = ConfigDict(frozen=True)

    id: str
    role: str
    source: str
    locator: str
    stack: str
    model: str
    method: str
    gpu: str
    num_gpus: int
    strategy: str
    seq_len: int
    micro_batch_size: int
    gradient_checkpointing: bool
    fused_kernels: bool
    measured_tokens_per_second: float
    predicted_tokens_per_second: float
    error: float
    ratio: float
    mfu: float
    hfu: float
    step_time_breakdown_s: dict[str, float]
    attention_kernel: str
    fits_in_memory: bool
    notes: str

    def record(self) -> dict[str, object]:
        """A flat row for a table or CSV."""
        return {
            "id": self.id, "role": self.role, "source": self.source, "stack": STACK_LABELS[self.stack], "model": self.model,
            "method": self.method, "GPU": f"{self.num_gpus}x {self.gpu}" if self.num_gpus > 1 else self.gpu,
            "strategy": self.strategy if self.num_gpus > 1 else "", "batch x seq": f"{self.micro_batch_size} x {self.seq_len}",
            "checkpointing": self.gradient_checkpointing, "fused kernels": self.fused_kernels,
            "measured tokens/s": round(self.measured_tokens_per_second, 1),
            "predicted tokens/s": round(self.predicted_tokens_per_second, 1),
            "error": f"{self.error:+.0%}", "MFU (predicted)": round(self.mfu, 3), "HFU (predicted)": round(self.hfu, 3),
            "fits (our memory estimate)": self.fits_in_memory, "locator": self.locator,
        }


def compare_measurement(m: ThroughputMeasurement) -> MeasurementComparison:
    """The step-time model's tokens/s for the row's scenario and the error against the measurement.

    Raises:
        EngineError: the row is not expressible, or its model, GPU or scenario cannot be estimated.
    """
    arch, name = row_architecture(m.repo_id)
    sc = measurement_scenario(m)
    gpu = find_gpu(m.gpu)
    # device_map (accelerate's naive model parallelism): the layers split over the GPUs, one GPU busy at a time, so
    # a step takes the sum of every GPU's share: the whole model's step on one GPU (the activation hand-over between
    # GPUs, 2 x tokens x hidden x 2 B per boundary per micro batch, is left out: < 0.1% of these steps).
    naive = m.strategy == NAIVE_PIPELINE
    strategy = Strategy.DDP if naive else Strategy(m.strategy)
    timed_gpus = 1 if naive else m.num_gpus
    est = estimate_memory(arch, sc, gpu)
    ours = estimate_throughput(arch, sc, gpu, num_gpus=timed_gpus, strategy=strategy, fused_kernels=m.fused_kernels,
                               estimate=est, cuda_graphs=m.cuda_graphs)
    fit = check_fit(arch, sc, gpu, strategy, timed_gpus, estimate=est)
    predicted = ours.tokens_per_second
    return MeasurementComparison(
        id=m.id, role=m.role, source=m.source, locator=m.locator, stack=stack_of(m), model=name,
        method=m.method, gpu=gpu.name, num_gpus=m.num_gpus, strategy=m.strategy if naive else strategy.value,
        seq_len=m.seq_len,
        micro_batch_size=m.micro_batch_size, gradient_checkpointing=m.gradient_checkpointing, fused_kernels=m.fused_kernels,
        measured_tokens_per_second=m.tokens_per_second, predicted_tokens_per_second=predicted,
        error=predicted / m.tokens_per_second - 1, ratio=predicted / m.tokens_per_second, mfu=ours.mfu, hfu=ours.hfu,
        step_time_breakdown_s=ours.breakdown_s, attention_kernel=ours.attention_kernel, fits_in_memory=fit.fits,
        notes=m.notes,
    )


@lru_cache(maxsize=1)
def compare_measurements() -> tuple[MeasurementComparison, ...]:
    """:func:`compare_measurement` for every expressible row of ``data/throughput_measurements.csv``, in file order."""
    return tuple(compare_measurement(m) for m in load_throughput_measurements() if m.expressible)


def not_expressible() -> tuple[ThroughputMeasurement, ...]:
    """The rows the time model cannot express; ``why_not_expressible`` says why."""
    return tuple(m for m in load_throughput_measurements() if not m.expressible)


class ErrorSummary(BaseModel):
    """Median and largest |error| (predicted / measured - 1) over a set of rows."""

    model_config = ConfigDict(frozen=True)

    rows: int
    median_abs_error: float
    max_abs_error: float
    worst: str


def error_summary(role: str | None = None) -> ErrorSummary:
    """:class:`ErrorSummary` over the rows of ``role`` (``fit``, ``holdout``; None: every expressible row).

    Raises:
        ValueError: no such rows.
    """
    rows = [c for c in compare_measurements() if role is None or c.role == role]
    if not rows:
        raise ValueError(f"no expressible rows of role {role!r}")
    worst = max(rows, key=lambda c: abs(c.error))
    return ErrorSummary(rows=len(rows), median_abs_error=statistics.median(abs(c.error) for c in rows),
                        max_abs_error=abs(worst.error), worst=worst.id)


__all__ = [
    "ASSUMPTIONS", "ErrorSummary", "MeasurementComparison", "STACKS", "compare_measurement", "compare_measurements",
    "error_summary", "measurement_scenario", "not_expressible", "stack_of",
]
