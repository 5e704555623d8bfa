"""Attention's work in one micro batch, by kernel: FLOPs of the two batched matmuls and the bytes each kernel moves.

Per layer and sequence, ``QK^T`` and ``PV`` cost ``2 s^2 d`` FLOPs each (d = heads x head_dim), so ``4 s^2 d``
forward (PaLM, Chowdhery et al. 2022, appendix B, counts the full square). Kernels differ in what they do with it:

- **flash** (FlashAttention-2, SDPA's flash backend): skips the blocks above the causal diagonal (half the
  work for a decoder), never writes the s x s scores, and its backward runs five matmuls to the forward's two
  (2.5x forward, recomputing the scores; Dao 2023, arXiv:2307.08691, sec. 3.1-3.2). Rate: ``GpuRates.flash_flops``.
- **memory_efficient** (SDPA's cutlass kernel): the same work and traffic at ``GpuRates.memory_efficient_flops``.
- **math** / **eager**: full s x s matmuls (the causal mask is applied after ``QK^T``, nothing is skipped) at the
  matmul rate, plus the memory-bound passes over the scores: :func:`score_bytes`.
"""

from __future__ import annotations

from engine.model.architecture import Architecture
from engine.time.rates import GpuRates

FUSED_KERNELS = ("flash", "memory_efficient")


def score_bytes(c: int, attention_dropout: bool) -> tuple[float, float]:
    """Bytes moved per score element (one head, one query, one key) by eager/math attention: (forward, backward).

    Forward, as transformers' eager attention runs it: ``QK^T`` writes the scores (c), the causal-mask add reads and
    writes them (2c), ``softmax(dtype=float32)`` reads c and writes 4, its cast back reads 4 and writes c, ``PV``
    reads c: ``6c + 8`` (dropout adds a read, a write and a 1-byte mask). Backward reads the saved probabilities and
    the incoming gradient and writes the score gradient through the same ops: twice the forward.
    """
    fwd = 6.0 * c + 8.0 + ((2.0 * c + 1.0) if attention_dropout else 0.0)
    return fwd, 2.0 * fwd


def attention_work(arch: Architecture, tokens: float, seq_len: int) -> float:
    """Forward FLOPs of attention's two matmuls over ``tokens`` tokens in sequences of ``seq_len`` (full square)."""
    window = min(seq_len, arch.sliding_window) if arch.sliding_window else seq_len
    return 4.0 * arch.num_layers * arch.q_out * window * tokens


def attention_seconds(arch: Architecture, kernel: str, tokens: float, seq_len: int, c: int,
                      rates: GpuRates) -> tuple[float, float, float]:
    """Seconds of attention in one micro batch: (forward, backward, forward FLOPs of the full square).

    ``tokens`` = micro batch x ``seq_len``; ``c`` bytes per element of the compute dtype.
    """
    full = attention_work(arch, tokens, seq_len)
    causal = arch.kind != "encoder"
    if kernel in FUSED_KERNELS:
        work = full * (0.5 if causal else 1.0)
        rate = rates.flash_flops if kernel == "flash" else rates.memory_efficient_flops
        return work / rate, 2.5 * work / rate, full
    fwd_b, bwd_b = score_bytes(c, arch.attention_dropout > 0)
    window = min(seq_len, arch.sliding_window) if arch.sliding_window else seq_len
    scores = arch.num_layers * arch.num_attention_heads * tokens * window
    fwd = full / rates.matmul_flops + scores * fwd_b / rates.hbm_bytes_per_s
    bwd = 2 * full / rates.matmul_flops + scores * bwd_b / rates.hbm_bytes_per_s
    return fwd, bwd, full
