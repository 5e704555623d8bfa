"""Training throughput: FLOPs per token, step time on a GPU, tokens per second.

Two models side by side:

- the **seed rule** (../shared/seeds/000_e5ea2c620e992cc5.txt, "Ejemplos de Throughput"): a table of
  measured-looking tokens/s (7B on A100-40GB ~1,000; 7B on H100 ~2,000; 13B on A100-80GB ~500; 70B on
  8x H100 ~800), kept as a selectable rule;
- the **FLOPs model**: training FLOPs per token divided by the GPU's dense peak for the compute dtype
  times a model FLOPs utilisation (MFU) the user sets, plus the memory-bound work FLOPs miss (the
  optimizer step reads and writes every trainable parameter and state; QLoRA dequantizes each 4-bit
  weight on every use).

"MFU" as the FLOPs model uses it (:func:`step_time`'s ``mfu``, the app's MFU input) is the fraction of the
dense peak achieved on the FLOPs the GPU *executes*, recompute included. Without gradient checkpointing that
is PaLM's MFU; with it, it is what PaLM calls HFU, and PaLM's MFU of the same run is lower by
``model_flops / total`` (the recompute is work, not model progress). :func:`implied_mfu` gives PaLM's MFU of a
measurement (comparable with published MFU figures); :func:`implied_utilization` inverts :func:`step_time`
(bandwidth-bound parts included) and gives the value of the MFU input that reproduces a measurement.
:data:`DEFAULT_MFU` is the median of the latter over published Hugging Face-stack measurements.

Multi-GPU data parallelism: tokens/s of one GPU x N x a scaling efficiency per strategy
(:data:`DEFAULT_SCALING_EFFICIENCY`, stated assumptions the user can change) for the communication the
model does not time; with ZeRO-3 each GPU's optimizer step works on its 1/N shard.

FLOPs per token (Kaplan et al. 2020, sec. 2.1; Chowdhery et al. 2022 "PaLM", appendix B): a matmul
with N weights costs 2N FLOPs per token forward, 2N for the input gradient and 2N for the weight
gradient, so full training is 6N, plus attention's 12 x layers x (heads x head_dim) x sequence. Frozen
weights (LoRA/QLoRA) need no weight gradient: 4N. Gradient checkpointing runs the forward again: +2N
and +4 x layers x q x s. N counts the weights that multiply each token: the linear layers of the blocks
(only the routed top-k experts for MoE) and the LM head; the embedding lookup is not a matmul.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

import math

from engine.model.architecture import Architecture
from engine.errors import CatalogError, ScenarioError
from engine.hardware.gpus import Gpu, find_gpu
from engine.memory.adapter_time import adapter_flops_per_token, galore_flops_per_step
from engine.memory.result import MemoryEstimate
from engine.memory.estimate import estimate_memory
from engine.memory.weights import quantized_bytes_per_param
from engine.memory.parallel import Strategy
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Method, Scenario

DEFAULT_MFU = 0.26
"""Default MFU of the FLOPs model: the median, rounded to two decimals, of :func:`implied_utilization` over
the Hugging Face-stack rows of ``data/throughput_measurements.csv`` (LlamaFactory, arXiv:2403.13372,
Table 4: transformers + PEFT + bitsandbytes on one A100 40GB; 0.17-0.37, median 0.26). Those rows, not all
rows, because this app models the Hugging Face stack (Trainer, PEFT, bitsandbytes): the torchtune rows use
torch.compile, sample packing and chunked cross-entropy and reach 0.54-0.92, and the median of all ten rows
(0.46) would fall between the two groups and describe neither. The LlamaFactory runs are short sequences
(512 tokens, micro batch 1), which lowers utilisation: for longer sequences and larger batches this default
errs towards longer (more expensive) runs. ``tests/test_time_cost.py`` checks the value against the data."""

DEFAULT_SCALING_EFFICIENCY: dict[Strategy, float] = {Strategy.DDP: 0.9, Strategy.ZERO3: 0.8}
"""Assumed fraction of linear scaling kept on N > 1 GPUs: DDP overlaps one gradient all-reduce per step with
backward (0.9); ZeRO-3 / FSDP also all-gathers the weights in forward and backward and reduce-scatters the
gradients (about 1.5x DDP's traffic, Rajbhandari et al. 2020, sec. 7), hence 0.8. Assumptions, not
measurements: within one NVLink node; slower links (PCIe only, across nodes) scale worse."""


def default_scaling_efficiency(strategy: Strategy) -> float:
    """The assumed efficiency of ``strategy``: ZeRO-1/2 and FSDP SHARD_GRAD_OP move the same volume as DDP
    (reduce-scatter + all-gather = one all-reduce, Rajbhandari et al. 2020 sec. 7), FSDP FULL_SHARD as ZeRO-3."""
    if strategy in DEFAULT_SCALING_EFFICIENCY:
        return DEFAULT_SCALING_EFFICIENCY[strategy]
    full = strategy in (Strategy.ZERO3, Strategy.FSDP_FULL_SHARD)
    return DEFAULT_SCALING_EFFICIENCY[Strategy.ZERO3 if full else Strategy.DDP]


class FlopsPerToken(BaseModel):
    """Training FLOPs per token, split so the UI can show where they go."""

    model_config = ConfigDict(frozen=True)

    matmul_parameters: int
    dense: float
    attention: float
    recompute: float
    adapters: float

    @property
    def total(self) -> float:
        """FLOPs the GPU executes per token, recompute included."""
        return self.dense + self.attention + self.recompute + self.adapters

    @property
    def model_flops(self) -> float:
        """FLOPs per token without recompute: the numerator of MFU as PaLM defines it."""
        return self.dense + self.attention + self.adapters


def matmul_parameters(arch: Architecture) -> int:
    """Weights multiplying each token: block linears (routed experts at top-k / E) and the LM head."""
    total = 0
    for lin in arch.layer_linears:
        share = arch.experts_per_token / arch.num_experts if lin.count > 1 and arch.num_experts else 1.0
        total += round(lin.in_features * lin.out_features * lin.count * share) * lin.blocks(arch.num_layers)
    return total + arch.vocab_size * arch.hidden_size


def flops_per_token(arch: Architecture, sc: Scenario) -> FlopsPerToken:
    """Training FLOPs per token of ``sc`` (see the module docstring for the formula and sources)."""
    n = matmul_parameters(arch)
    attn_fwd = 4 * arch.num_layers * arch.q_out * sc.seq_len
    frozen = sc.method is not Method.FULL
    adapters = 0.0
    if frozen:  # PEFT methods' own terms (engine.memory.adapter_time); GaLore's projections spread over the step
        adapters = adapter_flops_per_token(arch, sc, 4.0 * n + 3.0 * attn_fwd)
    adapters += galore_flops_per_step(arch, sc) / (sc.micro_batch_size * sc.seq_len * sc.gradient_accumulation_steps)
    return FlopsPerToken(
        matmul_parameters=n,
        dense=(4.0 if frozen else 6.0) * n,
        attention=3.0 * attn_fwd,
        recompute=(2.0 * n + attn_fwd) if sc.gradient_checkpointing else 0.0,
        adapters=adapters,
    )


class StepTime(BaseModel):
    """Seconds of one optimizer step (micro batch x accumulation steps) on one GPU, by cause."""

    model_config = ConfigDict(frozen=True)

    tokens: int
    compute_s: float
    dequantize_s: float
    optimizer_s: float

    @property
    def total_s(self) -> float:
        """Wall seconds of the step (the parts run one after another)."""
        return self.compute_s + self.dequantize_s + self.optimizer_s

    @property
    def tokens_per_second(self) -> float:
        """Tokens per second of one GPU."""
        return self.tokens / self.total_s


def step_time(
    arch: Architecture,
    sc: Scenario,
    estimate: MemoryEstimate,
    *,
    peak_flops: float,
    bandwidth_bytes_per_s: float,
    mfu: float,
    optimizer_shards: int = 1,
) -> StepTime:
    """Time of one optimizer step on one GPU.

    Args:
        peak_flops: the GPU's dense peak in FLOP/s for the compute dtype (not the sparse datasheet figure).
        bandwidth_bytes_per_s: the GPU's memory bandwidth in bytes/s.
        mfu: fraction of ``peak_flops`` the matmuls achieve on the executed FLOPs, recompute included
            (0 < mfu <= 1; see the module docstring).
        optimizer_shards: GPUs the optimizer step is divided over (ZeRO-3: the number of GPUs; DDP: 1).
    Raises:
        ValueError: non-positive peak or bandwidth, mfu outside (0, 1], or fewer than one shard.

    The optimizer step is bandwidth-bound: it reads the trainable weights, gradients and states and writes
    weights and states back once per step. QLoRA reads each 4-bit weight and writes and reads back its
    16-bit copy on every forward and backward use (bitsandbytes dequantizes, then a 16-bit matmul runs).
    """
    if peak_flops <= 0 or bandwidth_bytes_per_s <= 0 or not 0 < mfu <= 1 or optimizer_shards < 1:
        raise ValueError("peak_flops and bandwidth must be positive, mfu in (0, 1] and optimizer_shards >= 1")
    tokens = sc.micro_batch_size * sc.seq_len * sc.gradient_accumulation_steps
    compute = flops_per_token(arch, sc).total * tokens / (peak_flops * mfu)
    parts = estimate.parts_by_key
    trainable_weights = parts["weights"].bytes if sc.method is Method.FULL else 4.0 * estimate.trainable_parameters
    moved = 2 * (trainable_weights + parts["optimizer_states"].bytes) + parts["gradients"].bytes
    dequant = 0.0
    if sc.method is Method.QLORA:
        quantized = sum(g.parameters for g in arch.tensors if g.linear)
        uses = (3 if sc.gradient_checkpointing else 2) * sc.gradient_accumulation_steps
        dequant = uses * quantized * (quantized_bytes_per_param(sc.double_quant, sc.quant_type) + 2 * 2) / bandwidth_bytes_per_s
    optimizer = moved / optimizer_shards / bandwidth_bytes_per_s
    return StepTime(tokens=tokens, compute_s=compute, dequantize_s=dequant, optimizer_s=optimizer)


def implied_mfu(arch: Architecture, sc: Scenario, tokens_per_second: float, peak_flops: float) -> float:
    """MFU that a measured tokens/s implies under this FLOPs model (model FLOPs, PaLM appendix B).

    ``tokens_per_second`` and ``peak_flops`` of the same GPU(s): per GPU, or all GPUs together. Recompute is
    not counted (PaLM's definition), so this is the number to compare with published MFU figures.
    """
    return flops_per_token(arch, sc).model_flops * tokens_per_second / peak_flops


def implied_utilization(
    arch: Architecture,
    sc: Scenario,
    estimate: MemoryEstimate,
    tokens_per_second: float,
    *,
    peak_flops: float,
    bandwidth_bytes_per_s: float,
    optimizer_shards: int = 1,
) -> float | None:
    """The ``mfu`` for which :func:`step_time` gives ``tokens_per_second`` (one GPU), or None when the
    bandwidth-bound parts alone (optimizer step, QLoRA dequantization) take longer than the measured step.

    The inverse of the FLOPs model: measured step = tokens / tokens_per_second; the matmuls get what the
    bandwidth-bound parts leave; utilisation = executed FLOPs / (peak x that time). May exceed 1 when the
    measured run did less work than the scenario says (e.g. no recompute), which flags a setup mismatch.
    """
    if tokens_per_second <= 0 or peak_flops <= 0:
        raise ValueError("tokens_per_second and peak_flops must be positive")
    probe = step_time(arch, sc, estimate, peak_flops=peak_flops, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                      mfu=1.0, optimizer_shards=optimizer_shards)
    left = probe.tokens / tokens_per_second - probe.dequantize_s - probe.optimizer_s
    if left <= 0:
        return None
    return probe.compute_s / left


# --------------------------------------------------------------------------------------------------
# The GPU's peak for the compute dtype, and tokens/s of a plan

_COMPUTE_DTYPE = {
    PrecisionMode.FP32: "fp32", PrecisionMode.AMP_BF16: "bf16", PrecisionMode.BF16: "bf16",
    PrecisionMode.AMP_FP16: "fp16", PrecisionMode.FP16: "fp16",
}


class PeakFlops(BaseModel):
    """The dense peak a scenario's matmuls run at on one GPU: ``flops`` (FLOP/s; None when the catalog has no
    figure for that dtype), the ``dtype`` it is for, and ``note`` when it is not the scenario's own dtype."""

    model_config = ConfigDict(frozen=True)

    flops: float | None
    dtype: str
    note: str | None = None


def peak_flops_for(gpu: Gpu, precision: PrecisionMode) -> PeakFlops:
    """The GPU's dense peak for the compute dtype of ``precision`` (the catalog's ``*_tflops`` x 1e12).

    bf16 and mixed bf16 use ``bf16_tflops``; fp16 modes ``fp16_tflops``; fp32 ``fp32_tflops`` (PyTorch does not
    use TF32 for matmuls unless ``torch.backends.cuda.matmul.allow_tf32`` is set, so fp32 runs without tensor
    cores). A GPU without bf16 (T4, V100) gets its fp16 peak, flagged: on it the run must use fp16.
    """
    dtype = _COMPUTE_DTYPE[PrecisionMode(precision)]
    if dtype == "bf16" and gpu.bf16_tflops is None:
        if gpu.fp16_tflops is None:
            return PeakFlops(flops=None, dtype="bf16", note=f"{gpu.name}: the catalog lists no bf16 or fp16 peak")
        return PeakFlops(flops=gpu.fp16_tflops * 1e12, dtype="fp16",
                         note=f"{gpu.name} has no bf16: its fp16 peak is used (train in fp16 / mixed fp16 there)")
    value = {"bf16": gpu.bf16_tflops, "fp16": gpu.fp16_tflops, "fp32": gpu.fp32_tflops}[dtype]
    if value is None:
        return PeakFlops(flops=None, dtype=dtype, note=f"{gpu.name}: the catalog lists no dense {dtype} peak")
    return PeakFlops(flops=value * 1e12, dtype=dtype)


class Throughput(BaseModel):
    """Tokens per second of ``num_gpus`` x ``gpu`` for one scenario under the FLOPs model.

    ``step`` is one GPU's optimizer step; ``tokens_per_second`` counts all GPUs together:
    ``per_gpu_tokens_per_second x num_gpus x scaling_efficiency`` (efficiency 1 on one GPU).
    """

    model_config = ConfigDict(frozen=True)

    gpu: str
    num_gpus: int
    strategy: Strategy
    mfu: float
    scaling_efficiency: float
    peak: PeakFlops
    flops: FlopsPerToken
    step: StepTime
    per_gpu_tokens_per_second: float
    tokens_per_second: float


def estimate_throughput(
    arch: Architecture,
    sc: Scenario,
    gpu: Gpu,
    *,
    mfu: float = DEFAULT_MFU,
    num_gpus: int = 1,
    strategy: Strategy = Strategy.DDP,
    scaling_efficiency: float | None = None,
    estimate: MemoryEstimate | None = None,
) -> Throughput:
    """Tokens/s of ``sc`` on ``num_gpus`` x ``gpu`` (does not check the memory fit: see :mod:`engine.plan.fit`).

    ``scaling_efficiency`` defaults to :data:`DEFAULT_SCALING_EFFICIENCY` of ``strategy``; pass ``estimate``
    to reuse the memory estimate of the same scenario (the optimizer step's bytes come from it).

    Raises:
        ScenarioError: mfu or efficiency outside (0, 1], fewer than one GPU, or no catalog peak for the
            compute dtype on that GPU (e.g. fp32 on a GPU whose datasheet gives none).
    """
    if not 0 < mfu <= 1:
        raise ScenarioError(f"mfu: must be in (0, 1] (got {mfu})")
    if num_gpus < 1:
        raise ScenarioError(f"num_gpus: must be at least 1 (got {num_gpus})")
    eff = default_scaling_efficiency(strategy) if scaling_efficiency is None else scaling_efficiency
    if not 0 < eff <= 1:
        raise ScenarioError(f"scaling efficiency: must be in (0, 1] (got {eff})")
    peak = peak_flops_for(gpu, sc.precision)
    if peak.flops is None:
        raise ScenarioError(f"no throughput estimate: {peak.note}")
    est = estimate if estimate is not None else estimate_memory(arch, sc)
    shards = num_gpus if strategy is not Strategy.DDP else 1  # every ZeRO stage / FSDP shards the optimizer step
    step = step_time(arch, sc, est, peak_flops=peak.flops, bandwidth_bytes_per_s=gpu.memory_bandwidth_gbps * 1e9,
                     mfu=mfu, optimizer_shards=shards)
    applied = eff if num_gpus > 1 else 1.0
    return Throughput(
        gpu=gpu.name, num_gpus=num_gpus, strategy=strategy, mfu=mfu, scaling_efficiency=applied, peak=peak,
        flops=flops_per_token(arch, sc), step=step, per_gpu_tokens_per_second=step.tokens_per_second,
        tokens_per_second=step.tokens_per_second * num_gpus * applied,
    )


# --------------------------------------------------------------------------------------------------
# The seed rule

SEED_THROUGHPUT_SOURCE = 'seed chapter "Capítulo 2: Requisitos Computacionales", "Ejemplos de Throughput (tokens/segundo)"'

# The seed chapter's throughput table: (parameters in billions, GPU, number of GPUs) -> tokens/s.
SEED_THROUGHPUT: tuple[tuple[float, str, int, float], ...] = (
    (7, "A100-40GB", 1, 1_000),
    (7, "H100", 1, 2_000),
    (13, "A100-80GB", 1, 500),
    (70, "H100", 8, 800),
)

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

    The seed's GPU labels are resolved through :func:`engine.hardware.gpus.find_gpu` ("A100-40GB" -> NVIDIA A100 40GB,
    "H100" -> NVIDIA H100 80GB (SXM)), so only that catalog GPU matches: an A100 40GB PCIe or an H100 PCIe is
    another GPU, which the seed does not list. Among the listed sizes on that GPU and count the closest (log
    scale) is used: its tokens/s as listed when the model is within :data:`SEED_SIZE_TOLERANCE` of that size,
    otherwise scaled by listed size / model size (training FLOPs per token are proportional to parameters).
    """
    if parameters_b <= 0:
        return None
    try:
        target = gpu if isinstance(gpu, Gpu) else find_gpu(gpu)
    except CatalogError:
        return None
    rows = [r for r in SEED_THROUGHPUT if r[2] == num_gpus and find_gpu(r[1]).name == target.name]
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
