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
from itertools import accumulate
from operator import itemgetter
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


_intensity = itemgetter(0)


class Roofline:
    """Sum of roofline times of many GEMMs for any (rate, bandwidth) in O(log n): GEMMs sorted by arithmetic
    intensity; those above the GPU's ridge point (rate / bandwidth) are compute-bound, the rest bandwidth-bound."""

    def __init__(self, works: list[tuple[float, float]]) -> None:
        self._build([(f / b if b else math.inf, f, b) for f, b in works])

    @classmethod
    def of(cls, items: list[tuple[float, float, float]]) -> "Roofline":
        """The roofline of (intensity, FLOPs, bytes) triples, intensity = FLOPs / bytes (inf for no bytes)."""
        roof = cls.__new__(cls)
        roof._build(items)
        return roof

    def _build(self, items: list[tuple[float, float, float]]) -> None:
        items = sorted(items, key=_intensity)  # stable: ties keep the GEMMs' order, so the sums below are fixed
        self._intensity, flops, nbytes = zip(*items) if items else ((), (), ())
        # running sums left to right from 0.0 (accumulate runs the loop in C)
        self._bytes_below = list(accumulate(nbytes, initial=0.0))
        self._flops_above = list(accumulate(reversed(flops), initial=0.0))
        self._n = len(items)

    def seconds(self, rate_flops: float, bandwidth_bytes_per_s: float) -> float:
        """Sum over the GEMMs of max(padded FLOPs / rate, bytes / bandwidth)."""
        i = bisect.bisect_left(self._intensity, rate_flops / bandwidth_bytes_per_s)
        return self._bytes_below[i] / bandwidth_bytes_per_s + self._flops_above[self._n - i] / rate_flops


TOKENS = -1
"""Placeholder of :class:`GemmShape` for the micro batch's tokens (``tokens x top-k / E`` for a routed expert)."""


class GemmShape(NamedTuple):
    """A :class:`Gemm` before the micro batch is known: ``m`` or ``k`` is :data:`TOKENS`; ``routed``: an expert's."""

    part: str
    phase: str
    m: int
    n: int
    k: int
    copies: float
    routed: bool


def gemm_shapes(arch: Architecture, train_base: bool, targets: list[LinearLayer], r: int) -> list[GemmShape]:
    """Every GEMM of one micro batch (forward and backward, without recompute), from ``arch.layer_linears``.

    Routed experts: each of the E copies sees ``tokens x top-k / E`` tokens (balanced routing). Frozen weights
    (``train_base`` False: LoRA, QLoRA, the whole base model and the LM head) get no weight-gradient GEMM. LoRA
    adapters on ``targets`` (only when the base is frozen): A is ``(m, r, in)``, B ``(m, out, r)``, both trainable.
    """
    T = TOKENS
    out = []
    for lin in arch.layer_linears:
        routed = lin.count > 1 and arch.num_experts > 0
        copies = float(lin.count * lin.blocks(arch.num_layers))
        n, k = lin.out_features, lin.in_features
        out.append(GemmShape("block", "forward", T, n, k, copies, routed))
        out.append(GemmShape("block", "backward", T, k, n, copies, routed))
        if train_base:
            out.append(GemmShape("block", "backward", k, n, T, copies, routed))
    if arch.kind != "encoder":
        h, v = arch.hidden_size, arch.vocab_size
        out.append(GemmShape("lm_head", "forward", T, v, h, 1.0, False))
        out.append(GemmShape("lm_head", "backward", T, h, v, 1.0, False))
        if train_base:
            out.append(GemmShape("lm_head", "backward", h, v, T, 1.0, False))
    if not train_base:
        for lin in targets:
            routed = lin.count > 1 and arch.num_experts > 0
            copies = float(lin.count * lin.blocks(arch.num_layers))
            i, o = lin.in_features, lin.out_features
            out.append(GemmShape("lora", "forward", T, r, i, copies, routed))
            out.append(GemmShape("lora", "forward", T, o, r, copies, routed))
            for mm, nn, kk in ((T, i, r), (i, r, T), (T, r, o), (r, o, T)):  # dgrad and wgrad of A and B
                out.append(GemmShape("lora", "backward", mm, nn, kk, copies, routed))
    return out


def routed_tokens(arch: Architecture, tokens: float) -> float:
    """Tokens each routed expert sees: ``tokens x top-k / E`` (balanced routing)."""
    return tokens * arch.experts_per_token / arch.num_experts if arch.num_experts else tokens


def step_gemms(arch: Architecture, sc: Scenario, elem_bytes: int,
               targets: list[LinearLayer] | None = None) -> Iterator[Gemm]:
    """Every GEMM of one micro batch of ``sc`` (:func:`gemm_shapes` with its tokens filled in); ``targets``: the
    LoRA modules when the caller has resolved them."""
    t = float(sc.tokens_per_micro_batch)
    tokens = (t, routed_tokens(arch, t))
    train_base = sc.method is Method.FULL
    if targets is None and not train_base:
        targets = resolve_targets(arch, sc.lora_targets)
    for g in gemm_shapes(arch, train_base, targets or [], sc.lora_r):
        m = tokens[g.routed]
        yield Gemm(g.part, g.phase, m if g.m == TOKENS else g.m, g.n, m if g.k == TOKENS else g.k, g.copies,
                   elem_bytes)


def _pad(d: float, tile: int) -> float:
    """``d`` rounded up to whole tiles (what :func:`gemm_work` computes per dimension)."""
    return -(-d // tile) * tile


class GemmTable:
    """The GEMMs of :func:`gemm_shapes` with everything that does not depend on the tokens done once (built per
    architecture and adapter set, then reused for every micro batch shape).

    :meth:`rooflines` takes what ``gemm_work`` and ``Gemm.flops`` give for each GEMM of :func:`step_gemms`, with the
    same float operations in the same order (only products of two integers are taken early, and those are exact),
    so the numbers are identical; it only skips building a :class:`Gemm` per shape (tests/time/test_fast_path.py).
    """

    def __init__(self, shapes: list[GemmShape]) -> None:
        self.rows = []
        for g in shapes:
            recomputed = g.phase == "forward" and g.part != "lm_head"  # checkpointing reruns the blocks' forward
            if g.m == TOKENS:  # (tokens, n, k)
                consts = (g.n, g.k, _pad(g.n, TILE_MN), _pad(g.k, TILE_K), g.k * g.n)
            else:  # (m, n, tokens): a weight gradient
                consts = (g.m, g.n, _pad(g.m, TILE_MN) * _pad(g.n, TILE_MN), g.m * g.n, 2.0 * g.m * g.n)
            self.rows.append((g.phase == "forward", recomputed, g.m == TOKENS, int(g.routed), g.copies, consts))

    def rooflines(self, tokens: tuple[float, float], elem_bytes: int, recompute: bool
                  ) -> tuple[Roofline, Roofline, Roofline, float, float]:
        """The forward, backward and recompute (empty unless ``recompute``) :class:`Roofline`, the FLOPs of all the
        GEMMs and of the recomputed ones, for ``tokens`` = (tokens of the micro batch, tokens per routed expert)."""
        pad_m = (_pad(tokens[0], TILE_MN), _pad(tokens[1], TILE_MN))
        pad_k = (_pad(tokens[0], TILE_K), _pad(tokens[1], TILE_K))
        fwd, bwd, rec = [], [], []
        flops = rec_flops = 0.0
        for forward, recomputed, tokens_first, routed, copies, c in self.rows:
            t = tokens[routed]
            if tokens_first:
                n, k, pn, pk, kn = c
                f, b = 2.0 * (pad_m[routed] * pn * pk) * copies, (t * k + kn + t * n) * elem_bytes * copies
                g = 2.0 * t * n * k * copies
            else:
                m, n, pmn, mn, two_mn = c
                f, b = 2.0 * (pmn * pad_k[routed]) * copies, (m * t + t * n + mn) * elem_bytes * copies
                g = two_mn * t * copies
            w = (f / b if b else math.inf, f, b)
            (fwd if forward else bwd).append(w)
            flops += g
            if recompute and recomputed:
                rec.append(w)
                rec_flops += g
        return Roofline.of(fwd), Roofline.of(bwd), Roofline.of(rec), flops, rec_flops
