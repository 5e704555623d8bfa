"""The matrix multiplications of one training step, with their (m, n, k), and the time of one GEMM.

A linear layer ``y = x W`` on ``m`` tokens (``k`` inputs, ``n`` outputs) runs three GEMMs in training
(Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters", sec. 5.1): forward
``(m, n, k)``, input gradient ``dx = dy W^T`` ``(m, k, n)``, and weight gradient ``dW = x^T dy`` ``(k, n, m)``,
the last only for a trainable weight. Each costs ``2 m n k`` FLOPs.

Time of one GEMM: ``max(FLOPs / (rate x tile efficiency), bytes / bandwidth)`` (the roofline), bytes = the two
operands and the result once. Tile efficiency: cuBLAS computes whole output tiles, so a dimension that is not a
multiple of the tile wastes the remainder (NVIDIA "Matrix Multiplication Background User's Guide", "Tile
quantization"): ``d / (ceil(d / tile) x tile)`` per dimension, :data:`TILE_MN` for m and n, :data:`TILE_K` for k.
LoRA's rank-r GEMMs are skinny (``n`` or ``k`` = r) and come out bandwidth-bound, as they are.
"""

from __future__ import annotations

import bisect
import math
from typing import Iterator, NamedTuple

from engine.model.architecture import Architecture, LinearLayer
from engine.scenario.lora import resolve_targets
from engine.scenario.training import Method, Scenario

TILE_MN = 128
"""Output tile edge of cuBLAS' large-GEMM kernels on Ampere/Hopper (128 x 128 and 128 x 256 CTA tiles)."""
TILE_K = 32
"""Inner-dimension step of those kernels (one k-slice per pipeline stage)."""


class Gemm(NamedTuple):
    """``copies`` GEMMs of shape (m, n, k) in the step's ``phase`` (``forward``, ``backward``), by ``part``
    (``block``, ``lm_head``, ``lora``); ``elem_bytes`` per operand element."""

    part: str
    phase: str
    m: float
    n: int
    k: int
    copies: float
    elem_bytes: int

    @property
    def flops(self) -> float:
        """FLOPs of all copies."""
        return 2.0 * self.m * self.n * self.k * self.copies


def tile_efficiency(m: float, n: float, k: float) -> float:
    """Useful share of the tiles computed for an (m, n, k) GEMM (1 when every dimension is a tile multiple)."""
    def eff(d: float, t: int) -> float:
        return d / (math.ceil(d / t) * t) if d > 0 else 1.0
    return eff(m, TILE_MN) * eff(n, TILE_MN) * eff(k, TILE_K)


def gemm_seconds(g: Gemm, rate_flops: float, bandwidth_bytes_per_s: float) -> float:
    """Roofline time of ``g`` (all copies): compute at ``rate_flops`` x tile efficiency, or memory traffic."""
    compute = g.flops / (rate_flops * tile_efficiency(g.m, g.n, g.k))
    traffic = (g.m * g.k + g.k * g.n + g.m * g.n) * g.elem_bytes * g.copies / bandwidth_bytes_per_s
    return max(compute, traffic)


def gemm_work(g: Gemm) -> tuple[float, float]:
    """(FLOPs / tile efficiency, bytes) of ``g``: the two numbers :func:`gemm_seconds` divides by a GPU's rates."""
    m, n, k = g.m, g.n, g.k
    padded = (-(-m // TILE_MN) * TILE_MN) * (-(-n // TILE_MN) * TILE_MN) * (-(-k // TILE_K) * TILE_K)  # tiles computed
    return 2.0 * padded * g.copies, (m * k + k * n + m * n) * g.elem_bytes * g.copies


class Roofline:
    """Sum of roofline times of many GEMMs for any (rate, bandwidth) in O(log n): GEMMs sorted by arithmetic
    intensity; those above the GPU's ridge point (rate / bandwidth) are compute-bound, the rest bandwidth-bound."""

    def __init__(self, works: list[tuple[float, float]]) -> None:
        items = sorted(works, key=lambda w: w[0] / w[1] if w[1] else math.inf)
        self._intensity = [f / b if b else math.inf for f, b in items]
        self._bytes_below = [0.0]
        for _, b in items:
            self._bytes_below.append(self._bytes_below[-1] + b)
        self._flops_above = [0.0]
        for f, _ in reversed(items):
            self._flops_above.append(self._flops_above[-1] + f)
        self._n = len(items)

    def seconds(self, rate_flops: float, bandwidth_bytes_per_s: float) -> float:
        """Sum over the GEMMs of max(padded FLOPs / rate, bytes / bandwidth)."""
        i = bisect.bisect_left(self._intensity, rate_flops / bandwidth_bytes_per_s)
        return self._bytes_below[i] / bandwidth_bytes_per_s + self._flops_above[self._n - i] / rate_flops


def step_gemms(arch: Architecture, sc: Scenario, elem_bytes: int,
               targets: list[LinearLayer] | None = None) -> Iterator[Gemm]:
    """Every GEMM of one micro batch (forward and backward, without recompute), from ``arch.layer_linears``.

    Routed experts: each of the E copies sees ``tokens x top-k / E`` tokens (balanced routing). Frozen weights
    (LoRA, QLoRA: the whole base model and the LM head) get no weight-gradient GEMM. LoRA adapters: A is
    ``(m, r, in)``, B ``(m, out, r)``, both trainable.
    """
    t = float(sc.tokens_per_micro_batch)
    train_base = sc.method is Method.FULL
    for lin in arch.layer_linears:
        routed = lin.count > 1 and arch.num_experts > 0
        m = t * arch.experts_per_token / arch.num_experts if routed else t
        copies = float(lin.count * lin.blocks(arch.num_layers))
        n, k = lin.out_features, lin.in_features
        yield Gemm("block", "forward", m, n, k, copies, elem_bytes)
        yield Gemm("block", "backward", m, k, n, copies, elem_bytes)
        if train_base:
            yield Gemm("block", "backward", k, n, m, copies, elem_bytes)
    if arch.kind != "encoder":
        h, v = arch.hidden_size, arch.vocab_size
        yield Gemm("lm_head", "forward", t, v, h, 1.0, elem_bytes)
        yield Gemm("lm_head", "backward", t, h, v, 1.0, elem_bytes)
        if train_base:
            yield Gemm("lm_head", "backward", h, v, t, 1.0, elem_bytes)
    if not train_base:
        r = sc.lora_r
        for lin in (targets if targets is not None else resolve_targets(arch, sc.lora_targets)):
            routed = lin.count > 1 and arch.num_experts > 0
            m = t * arch.experts_per_token / arch.num_experts if routed else t
            copies = float(lin.count * lin.blocks(arch.num_layers))
            i, o = lin.in_features, lin.out_features
            yield Gemm("lora", "forward", m, r, i, copies, elem_bytes)
            yield Gemm("lora", "forward", m, o, r, copies, elem_bytes)
            for mm, nn, kk in ((m, i, r), (i, r, m), (m, r, o), (r, o, m)):  # dgrad and wgrad of A and B
                yield Gemm("lora", "backward", mm, nn, kk, copies, elem_bytes)
