"""Tokens per second of a plan (GPU kind x count x strategy) from the step-time model, MFU and HFU as results,
and "calibrate to my run".

:func:`estimate_throughput` times one optimizer step (:func:`engine.time.step.step_time`) on each GPU and gives
``tokens_per_second`` of all GPUs together = GPUs x tokens per step / step time. Nothing here is an input
utilisation: MFU and HFU follow from the predicted time (PaLM, Chowdhery et al. 2022, appendix B):
``MFU = model FLOPs per second / (GPUs x dense peak)`` with model FLOPs = 6N (4N for frozen weights) + attention's
full square, no recompute; ``HFU`` counts the FLOPs executed, recompute included.

Calibration: a user who measured one configuration's tokens/s gives it to :func:`calibrate`; the factor
measured / predicted multiplies every plan's tokens/s (``calibration``), so the model's shape (how plans compare)
is kept and its level is the user's. The raw prediction's error is reported.

Every prediction carries a band (:attr:`Throughput.band`, :mod:`engine.time.band`): the spread of measured /
predicted over comparable published rows under leave-one-source-out cross-validation; calibration narrows it to the
spread within one source.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from engine.errors import ScenarioError
from engine.hardware.gpus import Gpu
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.memory.result import MemoryEstimate
from engine.model.architecture import Architecture
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Framework, Scenario
from engine.time.band import Band, band_for
from engine.time.flops import FlopsPerToken, flops_per_token, matmul_parameters
from engine.time.rates import GpuRates, PeakFlops, gpu_rates, peak_flops_for
from engine.time.memory_bound import runs_fused
from engine.time.seed import (
    SEED_SIZE_TOLERANCE, SEED_THROUGHPUT, SEED_THROUGHPUT_SOURCE, SeedThroughput, seed_throughput,
    seed_tokens_per_second, seed_training_hours,
)
from engine.time.step import CATEGORIES, StepTime, step_time

MAX_CALIBRATION = 10.0
"""Largest calibration factor accepted (and smallest 1/this): a measurement 10x off the prediction is a different
setup, not a calibration."""


class Calibration(BaseModel):
    """The factor measured / predicted tokens/s of one configuration, applied to every plan."""

    model_config = ConfigDict(frozen=True)

    measured_tokens_per_second: float
    predicted_tokens_per_second: float

    @property
    def factor(self) -> float:
        """Measured / predicted."""
        return self.measured_tokens_per_second / self.predicted_tokens_per_second

    @property
    def raw_error(self) -> float:
        """How far the uncalibrated prediction was: predicted / measured - 1 (+0.2 = 20% too fast)."""
        return self.predicted_tokens_per_second / self.measured_tokens_per_second - 1.0


def calibrate(measured_tokens_per_second: float, predicted: "Throughput") -> Calibration:
    """The :class:`Calibration` of a measurement against the raw (uncalibrated) prediction of the same plan.

    Raises:
        ScenarioError: a non-positive measurement, or one more than :data:`MAX_CALIBRATION` x off.
    """
    if not measured_tokens_per_second > 0:
        raise ScenarioError(f"measured tokens/s: must be positive (got {measured_tokens_per_second})")
    cal = Calibration(measured_tokens_per_second=measured_tokens_per_second,
                      predicted_tokens_per_second=predicted.raw_tokens_per_second)
    if not 1 / MAX_CALIBRATION <= cal.factor <= MAX_CALIBRATION:
        raise ScenarioError(f"measured tokens/s {measured_tokens_per_second:,.0f} is {cal.factor:.2g}x the prediction "
                            f"({predicted.raw_tokens_per_second:,.0f}) for this plan: check that the measured run is this scenario")
    return cal


@dataclass(frozen=True, slots=True)
class Throughput:
    """Tokens per second of ``num_gpus`` x ``gpu`` for one scenario.

    ``step`` is one GPU's optimizer step (uncalibrated); ``tokens_per_second`` counts all GPUs together, times
    ``calibration``; ``step_time_s`` and ``breakdown_s`` are the calibrated step (the raw one / calibration). Only
    the inputs are stored: every figure derived from them is a property, so they cannot disagree. A frozen
    dataclass like :class:`~engine.time.step.StepTime` (built only by :func:`estimate_throughput`, on the plan
    search's hot path). ``fused_kernels``: whether the step was timed with fused elementwise kernels (the run's
    ``torch_compile`` or other fused kernels); ``loss``: the loss it timed, the scenario's
    :attr:`~engine.scenario.training.Scenario.loss` (the one the memory estimate counts).
    """

    gpu: str
    num_gpus: int
    strategy: Strategy
    calibration: float
    peak: PeakFlops
    rates: GpuRates
    step: StepTime
    fused_kernels: bool = False
    hf_stack: bool = True
    loss: LossImplementation | None = None

    @property
    def band(self) -> Band:
        """The cross-validated 80% band of this prediction (:mod:`engine.time.band`): comparable rows by GPU count and
        stack; the narrower calibrated band when ``calibration`` came from a measured run (any factor but 1)."""
        return band_for(self.num_gpus, self.hf_stack, calibrated=self.calibration != 1.0)

    @property
    def tokens_per_second_low(self) -> float:
        """Low end of the band of :attr:`tokens_per_second`."""
        return self.tokens_per_second * self.band.low

    @property
    def tokens_per_second_high(self) -> float:
        """High end of the band of :attr:`tokens_per_second`."""
        return self.tokens_per_second * self.band.high

    @property
    def raw_tokens_per_second(self) -> float:
        """Tokens/s of all GPUs together, uncalibrated."""
        return self.step.tokens / self.step.total_s * self.num_gpus

    @property
    def per_gpu_tokens_per_second(self) -> float:
        """Tokens/s of one GPU, calibrated."""
        return self.step.tokens / self.step.total_s * self.calibration

    @property
    def tokens_per_second(self) -> float:
        """Tokens/s of all GPUs together, calibrated."""
        return self.raw_tokens_per_second * self.calibration

    @property
    def step_time_s(self) -> float:
        """Seconds of one optimizer step, calibrated."""
        return self.step.total_s / self.calibration

    @property
    def breakdown_s(self) -> dict[str, float]:
        """Calibrated seconds of the step by category (:data:`engine.time.step.CATEGORIES`)."""
        return {k: v / self.calibration for k, v in self.step.breakdown_s.items()}

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation (PaLM, appendix B): model FLOPs per second / dense peak."""
        return self.step.model_flops / self.step_time_s / self.peak.flops

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation: FLOPs executed (recompute included) per second / dense peak."""
        return self.step.executed_flops / self.step_time_s / self.peak.flops

    @property
    def executed_flops_per_token(self) -> float:
        """FLOPs the GPUs execute per token (recompute included), GEMM by GEMM."""
        return self.step.executed_flops / self.step.tokens

    @property
    def attention_kernel(self) -> str:
        """The attention kernel timed."""
        return self.step.attention_kernel


def estimate_throughput(
    arch: Architecture,
    sc: Scenario,
    gpu: Gpu,
    *,
    num_gpus: int = 1,
    strategy: Strategy = Strategy.DDP,
    calibration: float = 1.0,
    fused_kernels: bool = False,
    estimate: MemoryEstimate | None = None,
    cuda_graphs: bool = False,
) -> Throughput:
    """Tokens/s of ``sc`` on ``num_gpus`` x ``gpu`` (does not check the memory fit: see :mod:`engine.plan.fit`).

    Pass ``estimate`` to reuse the memory estimate of the same scenario on this GPU (its bytes and attention
    kernel are timed); ``calibration`` from :func:`calibrate` (1 = the model as is); ``fused_kernels`` for
    runs with other fused kernels (Unsloth, Liger; a compiled run, ``sc.torch_compile``, has them anyway:
    :func:`engine.time.memory_bound.runs_fused`, which the result's ``fused_kernels`` reports); ``cuda_graphs`` for ``torch.compile(mode="reduce-overhead")`` (the passes'
    kernels replayed as CUDA graphs: no per-kernel host time, :func:`engine.time.step.step_time`).

    Raises:
        ScenarioError: fewer than one GPU, a calibration outside [1/10, 10], no catalog peak for the compute dtype
            on that GPU, flash_attention_2 on a pre-Ampere GPU, or a layer-wise optimizer on several GPUs.
    """
    if num_gpus < 1:
        raise ScenarioError(f"num_gpus: must be at least 1 (got {num_gpus})")
    if num_gpus > 1 and sc.optimizer.record.layerwise:
        # LLaMA-Factory@8963e89 hparams/parser.py: "Distributed training does not support layer-wise GaLore."
        raise ScenarioError(f"{sc.optimizer.value} steps each parameter inside backward: it runs on one GPU only")
    if not 1 / MAX_CALIBRATION <= calibration <= MAX_CALIBRATION:
        raise ScenarioError(f"calibration: must be in [{1 / MAX_CALIBRATION:g}, {MAX_CALIBRATION:g}] (got {calibration})")
    peak = peak_flops_for(gpu, sc.precision)
    if peak.flops is None:
        raise ScenarioError(f"no throughput estimate: {peak.note}")
    rates = gpu_rates(gpu, sc.precision)
    est = estimate if estimate is not None else estimate_memory(arch, sc, gpu)
    step = step_time(arch, sc, est, gpu, rates, num_gpus=num_gpus, strategy=strategy, fused_kernels=fused_kernels,
                     cuda_graphs=cuda_graphs)
    return Throughput(
        gpu=gpu.name, num_gpus=num_gpus, strategy=strategy, calibration=calibration, peak=peak, rates=rates,
        step=step, fused_kernels=runs_fused(sc, fused_kernels), hf_stack=sc.framework is Framework.HF, loss=sc.loss,
    )


__all__ = [
    "CATEGORIES", "Calibration", "FlopsPerToken", "MAX_CALIBRATION", "PeakFlops", "SEED_SIZE_TOLERANCE", "SEED_THROUGHPUT",
    "SEED_THROUGHPUT_SOURCE", "SeedThroughput", "StepTime", "Throughput", "calibrate", "estimate_throughput",
    "flops_per_token", "matmul_parameters", "peak_flops_for", "seed_throughput", "seed_tokens_per_second",
    "seed_training_hours",
]
