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

Occupancy (wave quantization, the same guide's "Wave quantization"): each output tile is one thread block on one SM,
so a GEMM with fewer tiles than the GPU has SMs runs on that many SMs only, each walking the whole ``k``: it takes at
least one tile's FLOPs, ``2 x min(m, TILE_MN) x min(n, TILE_MN) x k`` (a dimension narrower than the tile is covered
by one tile that wide), at one SM's share of the rate, whatever its total FLOPs (:func:`occupancy_flops`, times the SM
count). That is LoRA's ``X A`` and ``dY B^T`` at a large rank: a (512 tokens, r = 128, k = 4096) GEMM is 4 tiles, so
4 of an A100's 108 SMs work for 2 x 128^2 x 4096 FLOPs each. A wave that is only partly full above the first is not
counted (cuBLAS picks among tile shapes to even those out).
"""

from __future__ import annotations

import bisect
import math
from itertools import accumulate, repeat
from operator import add, itemgetter, mul, truediv
from typing import Iterator, NamedTuple

from engine.model.architecture import Architecture, LinearLayer
from engine.scenario.lora import resolve_targets
from engine.scenario.freeze import backward_share, weight_share
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


def occupancy_flops(g: Gemm) -> float:
    """FLOPs one SM computes for one output tile of ``g``, all copies: ``2 x min(m, TILE_MN) x min(n, TILE_MN) x k``
    (k padded to :data:`TILE_K`). Times the SM count, over the rate, it is the least time a GEMM with fewer tiles than
    SMs takes (the module docstring's occupancy)."""
    return 2.0 * min(g.m, TILE_MN) * min(g.n, TILE_MN) * (-(-g.k // TILE_K) * TILE_K) * g.copies


def output_tiles(g: Gemm) -> float:
    """Output tiles of one copy of ``g``: ``ceil(m / TILE_MN) x ceil(n / TILE_MN)``, each one thread block on one SM
    (the guide's "Wave quantization"); fewer than the GPU's SMs and :func:`occupancy_flops` bounds its time."""
    return (_pad(g.m, TILE_MN) // TILE_MN) * (_pad(g.n, TILE_MN) // TILE_MN)


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
        """``works``: (padded FLOPs, bytes) of each GEMM (:func:`gemm_work`)."""
        items = [(f / b if b else math.inf, f, b) for f, b in works]
        items.sort(key=_intensity)  # stable: ties keep the GEMMs' order, so the sums below are fixed
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


def gemm_shapes(arch: Architecture, train_base: bool, targets: list[LinearLayer], r: int,
                backward_share: float = 1.0, weight_share: float = 1.0) -> list[GemmShape]:
    """Every GEMM of one micro batch (forward and backward, without recompute), from ``arch.layer_linears``.

    Routed experts: each of the E copies sees ``tokens x top-k / E`` tokens (balanced routing). Frozen weights
    (``train_base`` False: LoRA, QLoRA, the whole base model and the LM head) get no weight-gradient GEMM. LoRA
    adapters on ``targets`` (only when the base is frozen): A is ``(m, r, in)``, B ``(m, out, r)``, both trainable.
    Freeze-tuning (:mod:`engine.scenario.freeze`): input gradients in ``backward_share`` of the blocks, weight
    gradients in ``weight_share`` of them (< 1: the frozen LM head gets its input gradient only).
    """
    T = TOKENS
    out = []
    for lin in arch.layer_linears:
        routed = lin.count > 1 and arch.num_experts > 0
        copies = float(lin.count * lin.blocks(arch.num_layers))
        n, k = lin.out_features, lin.in_features
        out.append(GemmShape("block", "forward", T, n, k, copies, routed))
        out.append(GemmShape("block", "backward", T, k, n, copies * backward_share, routed))
        if train_base:
            out.append(GemmShape("block", "backward", k, n, T, copies * weight_share, routed))
    if arch.kind != "encoder":
        h, v = arch.hidden_size, arch.vocab_size
        out.append(GemmShape("lm_head", "forward", T, v, h, 1.0, False))
        out.append(GemmShape("lm_head", "backward", T, h, v, 1.0, False))
        if train_base and weight_share == 1.0:
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
    for g in gemm_shapes(arch, train_base, targets or [], sc.lora_r, backward_share(arch, sc), weight_share(arch, sc)):
        m = tokens[g.routed]
        yield Gemm(g.part, g.phase, m if g.m == TOKENS else g.m, g.n, m if g.k == TOKENS else g.k, g.copies,
                   elem_bytes)


def _pad(d: float, tile: int) -> float:
    """``d`` rounded up to whole tiles (what :func:`gemm_work` computes per dimension)."""
    return -(-d // tile) * tile


def _picker(indices: list[int]):
    """``values -> tuple(values[i] for i in indices)``, in C (itemgetter returns a bare value for one index)."""
    if len(indices) == 1:
        only = indices[0]
        return lambda values: (values[only],)
    return itemgetter(*indices) if indices else (lambda values: ())


class GemmWork:
    """The GEMMs of one micro batch shape: their exact FLOPs (all, and the blocks' forward, what checkpointing
    recomputes), and :meth:`seconds`, each part's roofline time on a GPU (remembered per rate and bandwidth)."""

    __slots__ = ("flops", "block_flops", "_table", "_tokens", "_pads", "_mins", "_least_tiles", "_seconds")

    def __init__(self, table: "GemmTable", tokens: tuple[float, ...], pads: tuple[float, ...], flops: float,
                 block_flops: float, mins: tuple[float, ...] = (), least_tiles: float = math.inf) -> None:
        self.flops, self.block_flops = flops, block_flops
        self._table, self._tokens, self._pads, self._mins = table, tokens, pads, mins
        self._least_tiles = least_tiles  # the fewest output tiles of any GEMM here: no occupancy bound at <= SMs
        self._seconds: dict[tuple[float, float, int], tuple[float, float, float]] = {}

    def seconds(self, rate_flops: float, bandwidth_bytes_per_s: float, sms: int = 0) -> tuple[float, float, float]:
        """Seconds of the blocks' forward, the LM head's forward and the backward GEMMs: the sum over each part's
        GEMMs of max(padded FLOPs / rate, bytes / bandwidth, ``sms`` x :func:`occupancy_flops` / rate); ``sms``: the
        GPU's SM count (0: no occupancy bound)."""
        key = (rate_flops, bandwidth_bytes_per_s, sms)
        hit = self._seconds.get(key)
        if hit is None:
            bound = sms if sms > self._least_tiles else 0  # some GEMM has fewer tiles than SMs
            hit = self._seconds[key] = self._table.seconds(self._tokens, self._pads, rate_flops, bandwidth_bytes_per_s,
                                                           bound, self._mins)
        return hit


class GemmTable:
    """The GEMMs of :func:`gemm_shapes` for one operand width, with everything that does not depend on the tokens
    done once (built per architecture and adapter set, then reused for every micro batch shape).

    GEMMs of the same part and shape are merged (their copies added), and the rest is kept as columns in the order
    blocks' forward, LM head's forward, backward: per GEMM, padded FLOPs = ``pad x a`` (``pad`` the tokens rounded
    up to the tile of the dimension they are) and bytes = ``tokens x s + c``. Divided once per GPU by its matmul
    rate and bandwidth, the columns give each GEMM's roofline time in a few C-level ``map`` calls per micro batch
    shape rather than a Python loop per GEMM. The result is what ``gemm_work`` and ``Gemm.flops`` give for each GEMM
    of :func:`step_gemms`, to rounding (tests/time/test_fast_path.py compares the two to 1e-12).
    """

    def __init__(self, shapes: list[GemmShape], elem_bytes: int) -> None:
        merged: dict[tuple, float] = {}
        for g in shapes:
            if g.copies <= 0:
                continue
            # checkpointing reruns the blocks' forward (not the LM head's): keep the two apart
            part = 2 if g.phase != "forward" else (1 if g.part == "lm_head" else 0)
            first = g.m == TOKENS
            key = (part, int(g.routed), first, (g.n, g.k) if first else (g.m, g.n))
            merged[key] = merged.get(key, 0.0) + g.copies
        a, s, c, o, ow, pad_at, tokens_at = [], [], [], [], [], [], []
        counts = [0, 0, 0]
        flops = [[0.0, 0.0], [0.0, 0.0]]  # exact FLOPs per token: [blocks' forward, the rest][routed]
        for (part, routed, first, (d1, d2)), copies in sorted(merged.items(), key=lambda kv: kv[0][0]):
            counts[part] += 1
            if first:  # (tokens, n, k): the tokens pad to TILE_MN, n to TILE_MN, k to TILE_K
                a.append(2.0 * _pad(d1, TILE_MN) * _pad(d2, TILE_K) * copies)
                o.append(2.0 * min(d1, TILE_MN) * _pad(d2, TILE_K) * copies)  # occupancy_flops / min(tokens, tile)
                ow.append(0.0)
            else:  # (m, n, tokens): a weight gradient; the tokens are the inner dimension and pad to TILE_K
                a.append(2.0 * _pad(d1, TILE_MN) * _pad(d2, TILE_MN) * copies)
                o.append(0.0)
                ow.append(2.0 * min(d1, TILE_MN) * min(d2, TILE_MN) * copies)  # occupancy_flops / the tokens' pad
            s.append(float((d1 + d2) * elem_bytes * copies))  # operand bytes per token
            c.append(float(d1 * d2 * elem_bytes * copies))  # the weight (or its gradient): no tokens
            flops[part != 0][routed] += 2.0 * d1 * d2 * copies
            pad_at.append(2 * first + routed)
            tokens_at.append(routed)
        self._a, self._s, self._c, self._o, self._ow = tuple(a), tuple(s), tuple(c), tuple(o), tuple(ow)
        # output tiles of the narrowest GEMMs: per token tile for the (tokens, n, k) ones, fixed for weight gradients
        narrow = [_pad(d1, TILE_MN) // TILE_MN for (_, _, first, (d1, _)) in merged if first]
        wgrad = [(_pad(d1, TILE_MN) // TILE_MN) * (_pad(d2, TILE_MN) // TILE_MN)
                 for (_, _, first, (d1, d2)) in merged if not first]
        self._least_n_tiles = min(narrow, default=math.inf)
        self._least_wgrad_tiles = min(wgrad, default=math.inf)
        self._pad_of, self._tokens_of = _picker(pad_at), _picker(tokens_at)
        self._ends = (counts[0], counts[0] + counts[1])
        self._flops = flops
        self._scaled: dict[tuple[float, float, int], tuple[tuple[float, ...], ...]] = {}

    def work(self, tokens: tuple[float, float]) -> GemmWork:
        """The :class:`GemmWork` for ``tokens`` = (tokens of the micro batch, tokens per routed expert)."""
        t0, t1 = tokens
        (b0, b1), (r0, r1) = self._flops
        block = t0 * b0 + t1 * b1
        pads = self._pad_of((_pad(t0, TILE_K), _pad(t1, TILE_K), _pad(t0, TILE_MN), _pad(t1, TILE_MN)))
        mins = self._tokens_of((min(t0, TILE_MN), min(t1, TILE_MN)))  # the tokens one tile covers (occupancy)
        least = min(self._least_n_tiles * (_pad(min(t0, t1), TILE_MN) // TILE_MN), self._least_wgrad_tiles)
        return GemmWork(self, self._tokens_of(tokens), pads, block + (t0 * r0 + t1 * r1), block, mins, least)

    def seconds(self, tokens: tuple[float, ...], pads: tuple[float, ...], rate_flops: float,
                bandwidth_bytes_per_s: float, sms: int = 0, mins: tuple[float, ...] = ()) -> tuple[float, float, float]:
        """(blocks' forward, LM head's forward, backward) seconds of the GEMMs; ``tokens``, ``pads`` and ``mins`` (the
        tokens capped at one tile) per column; ``sms``: the SM count of the occupancy bound (0: none)."""
        key = (rate_flops, bandwidth_bytes_per_s, sms)
        scaled = self._scaled.get(key)
        if scaled is None:
            if len(self._scaled) >= 64:
                self._scaled.clear()
            f = sms / rate_flops
            scaled = self._scaled[key] = (tuple(map(truediv, self._a, repeat(rate_flops))),
                                          tuple(map(truediv, self._s, repeat(bandwidth_bytes_per_s))),
                                          tuple(map(truediv, self._c, repeat(bandwidth_bytes_per_s))),
                                          tuple(map(mul, self._o, repeat(f))), tuple(map(mul, self._ow, repeat(f))))
        a, s, c, o, ow = scaled
        per = map(max, map(mul, a, pads), map(add, map(mul, s, tokens), c))
        if sms:  # occupancy_flops: m is the tokens (capped at a tile) or, for a weight gradient, k (its TILE_K pad)
            per = map(max, per, map(add, map(mul, o, mins), map(mul, ow, pads)))
        per = list(per)
        nb, nh = self._ends
        return sum(per[:nb]), sum(per[nb:nh]), sum(per[nh:])
