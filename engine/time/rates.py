"""What one GPU sustains: matmul FLOP/s per dtype, HBM bytes/s, and the attention kernels' rates.

Every rate the step-time model divides by comes from here, with its source:

- **matmul**: :data:`TRAINING_GEMM_EFFICIENCY` x the catalog's *measured* maximum achievable matmul rate (``Gpu.matmul_bf16_tflops`` /
  ``matmul_fp16_tflops``: Stas Bekman's MAMF table, stas00/ml-engineering@744d01e1
  compute/accelerator/README.md; the RTX 4090's and RTX A6000's from a published torch.mm table, their
  ``matmul_source``) where one is
  published; otherwise the dense datasheet peak x
  :data:`MATMUL_FRACTION_OF_PEAK`. fp32 runs without tensor cores (PyTorch does not use TF32 for matmuls
  unless ``torch.backends.cuda.matmul.allow_tf32`` is set): the fp32 peak x the same fraction.
- **HBM**: datasheet bandwidth x :data:`HBM_FRACTION`.
- **attention**: the kernel's share of the dense peak (:data:`FLASH_FRACTION`, :data:`MEMORY_EFFICIENT_SHARE`).
"""

from __future__ import annotations

from functools import lru_cache

from pydantic import BaseModel, ConfigDict

from engine.hardware.gpus import Gpu
from engine.time.constants import FITTED, TimeConstants, current
from engine.scenario.precision import PrecisionMode

MATMUL_FRACTION_OF_PEAK = {"NVIDIA": 0.80, "AMD": 0.60}
"""Achievable share of the dense datasheet peak where no MAMF is published. The MAMF table measures 77-87% on
NVIDIA data-centre parts (A100 SXM 86.9%, A100 PCIe 81.1%, H100 SXM 80.3%, GH200 83.8%, B200 77.6%) and 51-77%
on AMD (MI300X 51.4%, MI325X 60.4%, MI250X 76.7%): 0.80 and 0.60, the research notes' recommendation
(/work/research/steptime/gpu_rates_NOTES.md). Applied to GeForce cards' fp32-accumulate figure."""

TRAINING_GEMM_EFFICIENCY = FITTED.gemm_efficiency
"""Share of the achievable (MAMF) rate that a training step's GEMMs reach on average (the fitted
:attr:`engine.time.constants.TimeConstants.gemm_efficiency`; the rates read :func:`engine.time.constants.current`).
MAMF is the best shape of a brute-force search on a warm, idle GPU; a step's GEMMs have the model's shapes and run
back to back under sustained power (ml-engineering compute/accelerator/README.md: realised training matmuls sit below
MAMF)."""

HBM_FRACTION = 0.85
"""Share of the datasheet memory bandwidth a streaming kernel sustains: 0.85-0.90 in the measurements found
(A100 80GB read kernel 88%, NVIDIA developer forum; H100 84-92%, third-party pages; ml-engineering's "80-90% of
spec" rule). The low end, because a training step's elementwise kernels are short."""

FLASH_FRACTION = {8: 0.60, 9: 0.35}
"""Share of the dense peak that FlashAttention-2 (and SDPA's flash backend, which is FA2) reaches over forward and
backward, by compute-capability major. Ampere/Ada (8.x): FA2 paper (Dao 2023, arXiv:2307.08691, sec. 4.1): forward
up to 73%, backward up to 63% of A100 peak, 50-73% overall; 0.60 for training-length sequences. Hopper and later
(9.x+): FA2 is not Hopper-tuned: 310-370 of 989 TFLOP/s forward and 290-320 backward at head dim 128 (FA3 paper,
Shah et al. 2024, arXiv:2407.08608, fig. 5-6): 0.35."""

MEMORY_EFFICIENT_SHARE = 0.5
"""SDPA's memory-efficient (xFormers/cutlass) kernel relative to flash: FA2 is "about 2x faster" than the
xFormers kernel (Dao 2023, abstract and sec. 4.1)."""


FP8_MATMUL_FRACTION_OF_PEAK = 0.72
"""Achievable share of the dense FP8 (e4m3) datasheet peak: the MAMF table's FP8 rows measure H100 SXM 1402.6 of
1979 TFLOP/s (70.9%), H200 SXM 1453.4 (73.4%), B200 SXM 3432.5 of 4500 (76.3%) (stas00/ml-engineering@744d01e1
compute/accelerator/README.md, as collected in /work/research/steptime/gpu_rates.csv); 0.72, the Hopper parts' mean,
since the catalog has no per-GPU FP8 MAMF column (a catalog column would be the better home)."""


def fp8_matmul_flops(gpu: Gpu) -> float | None:
    """FLOP/s a training step's FP8 GEMMs sustain on ``gpu``: the dense FP8 peak x
    :data:`FP8_MATMUL_FRACTION_OF_PEAK` x :data:`TRAINING_GEMM_EFFICIENCY` (the same realised share of the
    achievable rate as the 16-bit GEMMs); None when the GPU has no FP8 tensor cores (``fp8_tflops`` empty)."""
    if not gpu.fp8_tflops:
        return None
    return gpu.fp8_tflops * 1e12 * FP8_MATMUL_FRACTION_OF_PEAK * current().gemm_efficiency


def power_limited(gpu: Gpu, cap_watts: float, tdp_watts: float) -> Gpu:
    """``gpu`` held at ``cap_watts`` instead of its ``tdp_watts``: every compute rate (dense peaks, measured matmul
    rates) times ``(cap / TDP) ** power_exponent`` (the fitted :attr:`~engine.time.constants.TimeConstants
    .power_exponent`); memory bandwidth and links unchanged. The copy's name says the cap. A cap at or above the TDP
    returns ``gpu``. Used where a published run states its power cap (torchtitan's 500 W H100s).

    Raises:
        ValueError: a non-positive cap or TDP.
    """
    if cap_watts <= 0 or tdp_watts <= 0:
        raise ValueError("power cap and TDP must be positive watts")
    if cap_watts >= tdp_watts:
        return gpu
    f = (cap_watts / tdp_watts) ** current().power_exponent
    scaled = {k: getattr(gpu, k) * f for k in ("bf16_tflops", "fp16_tflops", "fp32_tflops", "fp8_tflops",
                                                 "matmul_bf16_tflops", "matmul_fp16_tflops") if getattr(gpu, k)}
    return gpu.model_copy(update={**scaled, "name": f"{gpu.name} at {cap_watts:g} W"})


def matmul_dtype(precision: PrecisionMode) -> str:
    """Element type the matmuls of ``precision`` run in: ``bf16``, ``fp16`` or ``fp32``."""
    p = PrecisionMode(precision)
    if p in (PrecisionMode.AMP_BF16, PrecisionMode.BF16):
        return "bf16"
    return "fp16" if p in (PrecisionMode.AMP_FP16, PrecisionMode.FP16) else "fp32"


class PeakFlops(BaseModel):
    """The dense peak a scenario's matmuls run at on one GPU: ``flops`` (FLOP/s; None when the catalog has no
    figure for that dtype), the ``dtype`` it is for, and ``note`` when it is not the scenario's own dtype."""

    model_config = ConfigDict(frozen=True)

    flops: float | None
    dtype: str
    note: str | None = None


@lru_cache(maxsize=512)
def peak_flops_for(gpu: Gpu, precision: PrecisionMode) -> PeakFlops:
    """The GPU's dense datasheet peak for the compute dtype of ``precision`` (the catalog's ``*_tflops`` x 1e12).

    A GPU without bf16 (T4, V100) gets its fp16 peak, flagged: on it the run must use fp16. This is the
    denominator of MFU and HFU (PaLM, Chowdhery et al. 2022, appendix B). Cached (a frozen model, like
    :func:`gpu_rates`): every estimate asks for it.
    """
    dtype = matmul_dtype(precision)
    if dtype == "bf16" and gpu.bf16_tflops is None:
        if gpu.fp16_tflops is None:
            return PeakFlops(flops=None, dtype="bf16", note=f"{gpu.name}: the catalog lists no bf16 or fp16 peak")
        return PeakFlops(flops=gpu.fp16_tflops * 1e12, dtype="fp16",
                         note=f"{gpu.name} has no bf16: its fp16 peak is used (train in fp16 / mixed fp16 there)")
    value = {"bf16": gpu.bf16_tflops, "fp16": gpu.fp16_tflops, "fp32": gpu.fp32_tflops}[dtype]
    if value is None:
        return PeakFlops(flops=None, dtype=dtype, note=f"{gpu.name}: the catalog lists no dense {dtype} peak")
    return PeakFlops(flops=value * 1e12, dtype=dtype)


class GpuRates(BaseModel):
    """Sustained rates of one GPU for one precision. FLOP/s and bytes/s; ``matmul_source`` says where the matmul
    rate comes from (measured MAMF or a fraction of the peak)."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    peak: PeakFlops
    matmul_flops: float
    achievable_matmul_flops: float
    matmul_source: str
    hbm_bytes_per_s: float
    flash_flops: float
    memory_efficient_flops: float
    sm_count: int
    hopper: bool = False

    @property
    def matmul_summary(self) -> str:
        """The matmul rate the step time uses and where it comes from, one phrase for a caption: "217 TFLOP/s
        (0.8 x 271 TFLOP/s, measured maximum achievable matmul (MAMF): ...)"."""
        share = self.matmul_flops / self.achievable_matmul_flops
        return (f"{self.matmul_flops / 1e12:,.0f} TFLOP/s ({share:g} x {self.achievable_matmul_flops / 1e12:,.0f} "
                f"TFLOP/s, {self.matmul_source})")


def gpu_rates(gpu: Gpu, precision: PrecisionMode) -> GpuRates:
    """:class:`GpuRates` of ``gpu`` for ``precision`` under the constants in force (see the module docstring for
    every figure's source).

    Raises:
        ValueError: the catalog has no peak for the compute dtype (``peak.note`` says which).
    """
    return _gpu_rates(gpu, precision, current())


@lru_cache(maxsize=512)
def _gpu_rates(gpu: Gpu, precision: PrecisionMode, k: TimeConstants) -> GpuRates:
    peak = peak_flops_for(gpu, precision)
    if peak.flops is None:
        raise ValueError(peak.note)
    measured = {"bf16": gpu.matmul_bf16_tflops, "fp16": gpu.matmul_fp16_tflops}.get(peak.dtype)
    if measured is not None:
        # the catalog's citation may already say "measured ..." (a [mamf] row): no second "measured (...)"
        source = gpu.matmul_source if gpu.matmul_source.lower().startswith("measured") else f"measured ({gpu.matmul_source})"
        achievable = measured * 1e12
    else:
        frac = MATMUL_FRACTION_OF_PEAK[gpu.vendor]
        achievable, source = peak.flops * frac, f"{frac:g} x the dense {peak.dtype} peak (no published measurement)"
    matmul = achievable * k.gemm_efficiency
    major = int(gpu.compute_capability) if gpu.compute_capability else 9
    flash = peak.flops * FLASH_FRACTION[8 if major < 9 else 9]
    return GpuRates(
        gpu=gpu.name, peak=peak, matmul_flops=matmul, achievable_matmul_flops=achievable, matmul_source=source,
        hbm_bytes_per_s=gpu.memory_bandwidth_gbps * 1e9 * HBM_FRACTION,
        flash_flops=flash, memory_efficient_flops=flash * MEMORY_EFFICIENT_SHARE, sm_count=gpu.sm_count or 100,
        hopper=major >= 9,
    )
