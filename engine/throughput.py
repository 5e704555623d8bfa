"""Training throughput: FLOPs per token, step time on a GPU, tokens per second.

Two models side by side:

- the **seed rule** (../shared/seeds/000_e5ea2c620e992cc5.txt, "Ejemplos de Throughput"): a table of
  measured-looking tokens/s (7B on A100-40GB ~1,000; 7B on H100 ~2,000; 13B on A100-80GB ~500; 70B on
  8x H100 ~800), kept as a selectable rule;
- the **FLOPs model**: training FLOPs per token divided by the GPU's dense peak for the compute dtype
  times a model FLOPs utilisation (MFU) the user sets, plus the memory-bound work FLOPs miss (the
  optimizer step reads and writes every trainable parameter and state; QLoRA dequantizes each 4-bit
  weight on every use).

FLOPs per token (Kaplan et al. 2020, sec. 2.1; Chowdhery et al. 2022 "PaLM", appendix B): a matmul
with N weights costs 2N FLOPs per token forward, 2N for the input gradient and 2N for the weight
gradient, so full training is 6N, plus attention's 12 x layers x (heads x head_dim) x sequence. Frozen
weights (LoRA/QLoRA) need no weight gradient: 4N. Gradient checkpointing runs the forward again: +2N
and +4 x layers x q x s. N counts the weights that multiply each token: the linear layers of the blocks
(only the routed top-k experts for MoE) and the LM head; the embedding lookup is not a matmul.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.architecture import Architecture
from engine.lora import adapter_tensors
from engine.memory import MemoryEstimate, quantized_bytes_per_param
from engine.scenario import Method, Scenario


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
        total += round(lin.in_features * lin.out_features * lin.count * share) * arch.num_layers
    return total + arch.vocab_size * arch.hidden_size


def flops_per_token(arch: Architecture, sc: Scenario) -> FlopsPerToken:
    """Training FLOPs per token of ``sc`` (see the module docstring for the formula and sources)."""
    n = matmul_parameters(arch)
    attn_fwd = 4 * arch.num_layers * arch.q_out * sc.seq_len
    frozen = sc.method is not Method.FULL
    adapters = 0.0
    if frozen:
        adapters = 6.0 * sum(g.parameters for g in adapter_tensors(arch, sc.lora_r, sc.lora_targets))
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
) -> StepTime:
    """Time of one optimizer step on one GPU.

    Args:
        peak_flops: the GPU's dense peak in FLOP/s for the compute dtype (not the sparse datasheet figure).
        bandwidth_bytes_per_s: the GPU's memory bandwidth in bytes/s.
        mfu: fraction of ``peak_flops`` the matmuls achieve (0 < mfu <= 1).
    Raises:
        ValueError: non-positive peak or bandwidth, or mfu outside (0, 1].

    The optimizer step is bandwidth-bound: it reads the trainable weights, gradients and states and writes
    weights and states back once per step. QLoRA reads each 4-bit weight and writes and reads back its
    16-bit copy on every forward and backward use (bitsandbytes dequantizes, then a 16-bit matmul runs).
    """
    if peak_flops <= 0 or bandwidth_bytes_per_s <= 0 or not 0 < mfu <= 1:
        raise ValueError("peak_flops and bandwidth must be positive and mfu in (0, 1]")
    tokens = sc.micro_batch_size * sc.seq_len * sc.gradient_accumulation_steps
    compute = flops_per_token(arch, sc).total * tokens / (peak_flops * mfu)
    parts = estimate.parts_by_key
    trainable_weights = parts["weights"].bytes if sc.method is Method.FULL else 4.0 * estimate.trainable_parameters
    moved = 2 * (trainable_weights + parts["optimizer_states"].bytes) + parts["gradients"].bytes
    dequant = 0.0
    if sc.method is Method.QLORA:
        quantized = sum(g.parameters for g in arch.tensors if g.linear)
        uses = (3 if sc.gradient_checkpointing else 2) * sc.gradient_accumulation_steps
        dequant = uses * quantized * (quantized_bytes_per_param(sc.double_quant) + 2 * 2) / bandwidth_bytes_per_s
    return StepTime(tokens=tokens, compute_s=compute, dequantize_s=dequant, optimizer_s=moved / bandwidth_bytes_per_s)


def implied_mfu(arch: Architecture, sc: Scenario, tokens_per_second: float, peak_flops: float) -> float:
    """MFU that a measured tokens/s implies under this FLOPs model (model FLOPs, PaLM appendix B)."""
    return flops_per_token(arch, sc).model_flops * tokens_per_second / peak_flops


# The seed chapter's throughput table: (parameters in billions, GPU, number of GPUs) -> tokens/s.
SEED_THROUGHPUT: tuple[tuple[float, str, int, float], ...] = (
    (7, "A100-40GB", 1, 1_000),
    (7, "H100", 1, 2_000),
    (13, "A100-80GB", 1, 500),
    (70, "H100", 8, 800),
)


def seed_tokens_per_second(parameters_b: float, gpu: str, num_gpus: int = 1) -> float | None:
    """The seed table's tokens/s for the nearest listed model size on that GPU and count, else None.

    The seed lists four points only; a model is matched to the closest listed size (in log scale) on the
    same GPU family and count, as a reader of the table would do.
    """
    import math

    key = gpu.upper().replace(" ", "").replace("NVIDIA", "")
    rows = [r for r in SEED_THROUGHPUT if r[1].replace("-", "") in key.replace("-", "") and r[2] == num_gpus]
    if not rows or parameters_b <= 0:
        return None
    best = min(rows, key=lambda r: abs(math.log(r[0] / parameters_b)))
    return best[3]


def seed_training_hours(total_tokens: float, epochs: float, tokens_per_second: float) -> float:
    """The seed's ``Training Time = Dataset Size x Epochs / Throughput``, in hours.

    Seed example: 10,000 examples x 512 tokens x 3 epochs at 1,000 tokens/s = 15,360 s = 4.27 h ("4.3").
    """
    return total_tokens * epochs / tokens_per_second / 3600
