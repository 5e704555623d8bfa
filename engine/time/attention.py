"""Attention's work in one micro batch, by kernel: FLOPs of the two batched matmuls and the bytes each kernel moves.

Per layer and sequence, ``QK^T`` and ``PV`` cost ``2 s^2 d`` FLOPs each (d = heads x head_dim), so ``4 s^2 d``
forward (PaLM, Chowdhery et al. 2022, appendix B, counts the full square). Kernels differ in what they do with it:

- **flash** (FlashAttention-2, SDPA's flash backend): skips the blocks above the causal diagonal (half the
  work for a decoder), never writes the s x s scores, and its backward runs five matmuls to the forward's two
  (2.5x forward, recomputing the scores; Dao 2023, arXiv:2307.08691, sec. 3.1-3.2). Rates: :func:`flash_rates`,
  forward and backward apart, by GPU generation and sequence length.
- **memory_efficient** (SDPA's cutlass kernel): the same work and traffic at
  :data:`~engine.time.rates.MEMORY_EFFICIENT_SHARE` of flash's rates.
- **math** / **eager**: full s x s matmuls (the causal mask is applied after ``QK^T``, nothing is skipped) at the
  matmul rate, plus the memory-bound passes over the scores: :func:`score_bytes`.
"""

from __future__ import annotations

import math
from functools import lru_cache

from engine.model.architecture import Architecture
from engine.time.constants import current
from engine.time.rates import MEMORY_EFFICIENT_SHARE, GpuRates

FUSED_KERNELS = ("flash", "memory_efficient")

FA2_H100_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
FA2_H100_FORWARD_TFLOPS = (191.0, 260.0, 298.0, 319.0, 333.0, 335.0)
FA2_H100_BACKWARD_TFLOPS = (214.0, 260.0, 291.0, 310.0, 318.0, 322.0)
"""FlashAttention-2 on an H100 80GB SXM5 (989.5 dense TFLOP/s), head dim 128, by sequence length: forward with the
causal mask and backward, TFLOP/s as the paper counts them (causal work halved). Shah et al. 2024, "FlashAttention-3",
arXiv:2407.08608, sec. 4.1, the attention forward (causal) and backward speed figures for head dim 128. FA2 is the
kernel of SDPA's flash backend and of ``attn_implementation="flash_attention_2"`` on Hopper; past 16k the rate stays
on its plateau (the figures flatten from 8k)."""

AMPERE_FLASH_FRACTION = 0.60
"""FlashAttention-2's plateau share of the dense peak on Ampere / Ada (8.x): forward up to 73%, backward up to 63% of an
A100's peak, 50-73% over the benchmarks (Dao 2023, arXiv:2307.08691, sec. 4.1); 0.60 for a training step's forward and
backward. The rise with sequence length is taken from the H100 curve above (the FA2 paper's A100 figures rise alike
from 512 to 16k)."""


@lru_cache(maxsize=4096)
def _ramp(seq_len: int, table: tuple[float, ...]) -> float:
    """``table`` at ``seq_len`` / its plateau: linear in log2(sequence) between the published points, flat past the
    last, extrapolated below the first (at least 0.25)."""
    x = math.log2(max(seq_len, 1))
    xs = [math.log2(s) for s in FA2_H100_SEQ]
    if x >= xs[-1]:
        value = table[-1]
    else:
        i = max(0, min(len(xs) - 2, next(j for j in range(len(xs) - 1) if x < xs[j + 1])))
        value = table[i] + (table[i + 1] - table[i]) * (x - xs[i]) / (xs[i + 1] - xs[i])
    return max(0.25, value / table[-1])


def flash_rates(rates: GpuRates, seq_len: int, kernel: str = "flash") -> tuple[float, float]:
    """FLOP/s of the fused attention kernel on a sequence of ``seq_len`` (keys per query): (forward, backward).

    Hopper and later (compute capability 9+): :data:`FA2_H100_FORWARD_TFLOPS` / ``_BACKWARD_`` as shares of the H100's
    peak, times this GPU's dense peak, times the fitted :attr:`~engine.time.constants.TimeConstants.attention_efficiency`
    (FA2 is not tuned for Hopper: in a training step under sustained power it reaches a share of its kernel benchmark;
    the Hopper rows of the published runs fit that share). Ampere / Ada: :data:`AMPERE_FLASH_FRACTION` of the peak
    with the same rise with the sequence (the FA2 paper's own A100 training figures). ``memory_efficient`` at
    :data:`~engine.time.rates.MEMORY_EFFICIENT_SHARE` of flash.
    """
    k = MEMORY_EFFICIENT_SHARE if kernel == "memory_efficient" else 1.0
    peak = rates.peak.flops
    if rates.hopper:
        k *= current().attention_efficiency
        fwd = FA2_H100_FORWARD_TFLOPS[-1] / 989.5 * peak * _ramp(seq_len, FA2_H100_FORWARD_TFLOPS)
        bwd = FA2_H100_BACKWARD_TFLOPS[-1] / 989.5 * peak * _ramp(seq_len, FA2_H100_BACKWARD_TFLOPS)
    else:
        fwd = AMPERE_FLASH_FRACTION * peak * _ramp(seq_len, FA2_H100_FORWARD_TFLOPS)
        bwd = AMPERE_FLASH_FRACTION * peak * _ramp(seq_len, FA2_H100_BACKWARD_TFLOPS)
    return fwd * k, bwd * k


def score_bytes(c: int, attention_dropout: bool) -> tuple[float, float]:
    """Bytes moved per score element (one head, one query, one key) by eager/math attention: (forward, backward).

    Forward, as transformers' eager attention runs it: ``QK^T`` writes the scores (c), the causal-mask add reads and
    writes them (2c), ``softmax(dtype=float32)`` reads c and writes 4, its cast back reads 4 and writes c, ``PV``
    reads c: ``6c + 8`` (dropout adds a read, a write and a 1-byte mask). Backward reads the saved probabilities and
    the incoming gradient and writes the score gradient through the same ops: twice the forward.
    """
    fwd = 6.0 * c + 8.0 + ((2.0 * c + 1.0) if attention_dropout else 0.0)
    return fwd, 2.0 * fwd


def fused_softmax_score_bytes(c: int, attention_dropout: bool) -> tuple[float, float]:
    """Bytes per score element of Megatron-LM's unfused attention core with its fused softmax (the path before
    FlashAttention: ``CoreAttention`` = ``baddbmm`` -> ``FusedScaleMaskSoftmax`` (one kernel: scale, causal mask,
    softmax) -> dropout -> ``bmm``, NVIDIA/Megatron-LM ``megatron/model/transformer.py`` and
    ``megatron/model/fused_softmax.py``, 2021-2022): (forward, backward).

    Forward: ``QK^T`` writes the scores (c), the fused softmax reads them and writes the probabilities (2c), dropout
    reads and writes them with a 1-byte mask (2c + 1), ``PV`` reads c: ``6c + 1`` (``4c`` without dropout).
    Backward: ``dP = dO V^T`` writes c, ``dV = P^T dO`` reads the dropped probabilities (c), dropout's backward reads
    dP and the mask and writes (2c + 1), the softmax backward reads the probabilities and the gradient and writes dS
    (3c), ``dQ`` and ``dK`` read dS (2c): ``9c + 1`` (``7c`` without dropout).
    """
    if attention_dropout:
        return 6.0 * c + 1.0, 9.0 * c + 1.0
    return 4.0 * c, 7.0 * c


def attention_work(arch: Architecture, tokens: float, seq_len: int) -> float:
    """Forward FLOPs of attention's two matmuls over ``tokens`` tokens in sequences of ``seq_len`` (full square)."""
    window = min(seq_len, arch.sliding_window) if arch.sliding_window else seq_len
    return 4.0 * arch.num_layers * arch.q_out * window * tokens


def attention_seconds(arch: Architecture, kernel: str, tokens: float, seq_len: int, c: int,
                      rates: GpuRates, fused_softmax: bool = False) -> tuple[float, float, float]:
    """Seconds of attention in one micro batch: (forward, backward, forward FLOPs of the full square).

    ``tokens`` = micro batch x ``seq_len``; ``c`` bytes per element of the compute dtype; ``fused_softmax``: an
    unfused kernel's softmax is Megatron-LM's fused one (:func:`fused_softmax_score_bytes`), not transformers' ops.
    """
    full = attention_work(arch, tokens, seq_len)
    causal = arch.kind != "encoder"
    if kernel in FUSED_KERNELS:
        work = full * (0.5 if causal else 1.0)
        window = min(seq_len, arch.sliding_window) if arch.sliding_window else seq_len
        fwd_rate, bwd_rate = flash_rates(rates, window, kernel)
        return work / fwd_rate, 2.5 * work / bwd_rate, full
    fwd_b, bwd_b = (fused_softmax_score_bytes if fused_softmax else score_bytes)(c, arch.attention_dropout > 0)
    window = min(seq_len, arch.sliding_window) if arch.sliding_window else seq_len
    scores = arch.num_layers * arch.num_attention_heads * tokens * window
    fwd = full / rates.matmul_flops + scores * fwd_b / rates.hbm_bytes_per_s
    bwd = 2 * full / rates.matmul_flops + scores * bwd_b / rates.hbm_bytes_per_s
    return fwd, bwd, full
