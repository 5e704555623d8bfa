"""One rank's compute in one micro batch of a parallel layout, from :mod:`engine.time`'s step-time model.

The walk is :func:`engine.time.step.step_time`'s (GEMMs at the achievable matmul rate with their roofline, tile
efficiency and occupancy bound, attention by kernel, memory-bound bytes at HBM bandwidth, kernel launches with the
backward's host factor of :func:`engine.time.overhead.backward_host_factor`), on the shapes one rank runs, so a rank
with TP = PP = CP = EP = DP = 1 is exactly one GPU's step (a test):

- **TP** (Shoeybi et al. 2019 sec. 3; Megatron ``ColumnParallelLinear`` / ``RowParallelLinear``): a column-parallel
  linear (q/k/v, MLP input projections) runs ``(m, n / TP, k)``, a row-parallel one (attention and MLP output
  projections, :func:`engine.scaleout.recompute.row_parallel`) ``(m, n, k / TP)``, the router stays whole; the
  LM head is vocabulary-parallel ``(m, V / TP, h)``; attention runs heads / TP; the inner elementwise ops (RoPE,
  activation) are / TP, the residual stream's (norms, adds, dropout) only with sequence parallelism
  (:func:`engine.time.memory_bound.layer_forward_bytes_by_width`); the loss over V / TP.
- **CP** (Megatron ``context_parallel.md``; Llama 3 sec. 3.3.2): m = micro batch x s / CP tokens per rank; attention
  over those queries against the full key length s (the ring's CP steps together), causal work load-balanced.
- **EP** (Megatron MoE README): a rank holds E / EP experts, each fed the EP group's routed tokens,
  ``m = tokens x top-k x EP / E`` per expert (balanced routing); expert-TP splits each expert like TP.
- **PP**: the stage's layers; the embedding gradient on the first stage, the LM head, final norm and loss on the last.
- **recompute**: ``full`` reruns each block's forward (GEMMs, attention, elementwise); ``selective`` (Korthikanti
  et al. 2022 sec. 5) the attention core's forward; ``selective_op`` (torchtitan op-level SAC,
  :mod:`engine.scaleout.recompute`) the unsaved matmuls (every second mm, half the routed experts'), the
  elementwise ops and, with a non-fused attention kernel, attention.
- **FP8** (:mod:`engine.scaleout.fp8`): the block linears' GEMMs at :func:`engine.time.rates.fp8_matmul_flops` with
  1-byte operands, plus the casts' and amax passes' bytes (:func:`engine.scaleout.fp8.fp8_cast_bytes`); the router,
  the LM head and attention stay 16-bit.

With TP = PP = CP = EP = 1 every shape is the one-GPU shape and the sum is :func:`engine.time.step.step_time`'s
(``tests/scaleout`` checks it).
"""

from __future__ import annotations

from typing import NamedTuple

from engine.hardware.gpus import Gpu
from engine.model.architecture import Architecture
from engine.scaleout.comm_volumes import TP_WINDOWS
from engine.scaleout.fp8 import Fp8Recipe, fp8_cast_bytes
from engine.scaleout.layout import Layout, Recompute
from engine.scaleout.recompute import call_order, row_parallel
from engine.scenario.precision import precision_spec
from engine.scenario.training import Framework, Method, Scenario
from engine.time.adapters import extra_adapter_flops
from engine.time.constants import current
from engine.time.attention import FUSED_KERNELS, attention_seconds, attention_work
from engine.time.gemm import Gemm, Roofline, gemm_seconds, gemm_work, occupancy_flops, output_tiles, step_gemms
from engine.time.memory_bound import (
    BACKWARD_FACTOR, cast_bytes_per_use, dequant_bytes_per_use, layer_forward_bytes_by_width, loss_bytes, runs_fused,
)
from engine.time.overhead import SECONDS_PER_KERNEL, backward_host_factor, layer_kernels
from engine.time.rates import GpuRates, fp8_matmul_flops, gpu_rates
from engine.time.step import HEAD_KERNELS


class Passes(NamedTuple):
    """GPU seconds of one micro batch by category and pass (forward, backward, recompute)."""

    matmul: tuple[float, float, float]
    attention: tuple[float, float, float]
    memory_bound: tuple[float, float, float]
    dequantization: tuple[float, float, float]

    def add(self, other: "Passes", scale: float = 1.0) -> "Passes":
        return Passes(*(tuple(a + scale * b for a, b in zip(x, y)) for x, y in zip(self, other)))

    @property
    def forward(self) -> float:
        return sum(x[0] for x in self)

    @property
    def backward(self) -> float:
        """Backward including the recompute (it runs inside the backward pass)."""
        return sum(x[1] + x[2] for x in self)


ZERO = Passes((0.0,) * 3, (0.0,) * 3, (0.0,) * 3, (0.0,) * 3)


NO_TP_WINDOWS: tuple[tuple[float, float], ...] = ((0.0, 0.0),) * len(TP_WINDOWS)
"""No GEMM window for any sequence-parallel collective (no TP, or TP without sequence parallelism)."""


class StageCompute(NamedTuple):
    """One rank of one pipeline stage in one micro batch: GPU seconds by category (``breakdown_s``, with
    ``overhead`` = launch-bound host time beyond the GPU's), forward and backward GPU seconds, attention seconds;
    ``tp_windows``: the GEMM seconds an asynchronous TP linear hides each kind of sequence-parallel collective
    under (:func:`tp_windows`), one (attention, MLP) pair per name of
    :data:`engine.scaleout.comm_volumes.TP_WINDOWS`, for the stage's blocks in one micro batch."""

    breakdown_s: dict[str, float]
    forward_s: float
    backward_s: float
    attention_s: float
    tp_windows: tuple[tuple[float, float], ...] = NO_TP_WINDOWS

    @property
    def total_s(self) -> float:
        return sum(self.breakdown_s.values())


class _Work(NamedTuple):
    """Per micro batch on one rank: one (average) block, the LM head (last stage), the embedding (first stage)."""

    block: Passes
    head: Passes
    embed: Passes
    block_kernels: float
    rec_kernels: float  # per block
    backward_host_factor: float  # backward kernels' host time / the forward's (engine.time.overhead)
    tp_windows: tuple[tuple[float, float], ...] = NO_TP_WINDOWS  # per block (tp_windows)


_CACHE: dict[tuple, tuple[Architecture, _Work]] = {}
_CACHE_SIZE = 4096


def _split(n: int, d: int) -> float:
    return n // d if n % d == 0 else n / d


def rank_gemms(arch: Architecture, sc: Scenario, layout: Layout, c: int) -> list[tuple[Gemm, bool, float]]:
    """The GEMMs of one average block on one rank in one micro batch: (GEMM, runs in FP8 when FP8 is on, share of
    its forward that op-level SAC recomputes). Shapes as in :func:`engine.time.gemm.step_gemms`, split by TP,
    CP and EP (see the module docstring); ``copies`` per block."""
    tp, ep, etp = layout.tensor_parallel, layout.expert_parallel, layout.expert_tensor_parallel
    t = sc.tokens_per_micro_batch / layout.context_parallel
    rows = row_parallel(arch)
    sac_recomputed = {lin.module for i, lin in enumerate(call_order(arch)) if i % 2 == 1}
    train = sc.method is Method.FULL
    L = arch.num_layers
    out = []
    for lin in arch.layer_linears:
        routed = lin.count > 1 and arch.num_experts > 0
        router = not routed and bool(arch.num_experts) and lin.out_features == arch.num_experts
        n, k = lin.out_features, lin.in_features
        share = lin.blocks(L) / L
        if routed:
            m = t * arch.experts_per_token * ep / arch.num_experts
            copies = lin.count / ep * share
            n, k = (n, _split(k, etp)) if lin.in_features != arch.hidden_size else (_split(n, etp), k)
            rec = 0.5
        else:
            m, copies = t, lin.count * share
            if not router:
                n, k = (n, _split(k, tp)) if lin.module in rows else (_split(n, tp), k)
            rec = 1.0 if lin.module in sac_recomputed else 0.0
        fp8 = not router
        out.append((Gemm("block", "forward", m, n, k, copies, c), fp8, rec))
        out.append((Gemm("block", "backward", m, k, n, copies, c), fp8, 0.0))
        if train:
            out.append((Gemm("block", "backward", k, n, m, copies, c), fp8, 0.0))
    if not train:  # LoRA / QLoRA: the adapters' GEMMs, per block; under TP (LoRA only) each rank runs 1 / TP of them
        # (NeMo Automodel shards lora_A / lora_B with their base linear's column / row split; the unsharded r-wide
        # half is r / h of the base GEMM's work and is counted as sharded too).
        out += [(g._replace(copies=g.copies / (L * tp)), False, 0.0) for g in step_gemms(arch, sc, c) if g.part == "lora"]
    return out


def tp_windows(arch: Architecture, sc: Scenario, layout: Layout, c: int, rate: float, bw: float,
               sms: int) -> tuple[tuple[float, float], ...]:
    """Per block and micro batch on one rank, the GEMM seconds beside which nanotron's asynchronous TP linears run
    each kind of sequence-parallel collective (:data:`engine.scaleout.comm_volumes.TP_WINDOWS`, read in
    huggingface/nanotron@e24d2483 ``parallel/tensor_parallel/functional.py``), as (attention, MLP) pairs: 1/TP of
    the column-parallel linears' forward GEMM (only the rank's own input shard is multiplied while the all-gather
    runs), their whole input-gradient and weight-gradient GEMMs, 1/TP of the row-parallel linears' input-gradient
    GEMM. Shapes as :func:`rank_gemms` (TP-sharded, CP-split tokens; the routed experts and the router are not TP
    linears: no window), each GEMM timed alone on the roofline at ``rate`` with the occupancy bound. All zero
    without TP."""
    tp = layout.tensor_parallel
    if tp == 1:
        return NO_TP_WINDOWS
    t = sc.tokens_per_micro_batch / layout.context_parallel
    rows, L = row_parallel(arch), arch.num_layers
    sums = {(w, r): 0.0 for w in range(len(TP_WINDOWS)) for r in ("attention", "mlp")}
    for lin in arch.layer_linears:
        routed = lin.count > 1 and arch.num_experts > 0
        if routed or (arch.num_experts and lin.out_features == arch.num_experts) or lin.role not in ("attention", "mlp"):
            continue
        copies = lin.count * lin.blocks(L) / L
        row = lin.module in rows
        n, k = (lin.out_features, _split(lin.in_features, tp)) if row else (_split(lin.out_features, tp), lin.in_features)
        sec = lambda g: _gemm_seconds([g], rate, bw, sms)  # noqa: E731
        dgrad = sec(Gemm("block", "backward", t, k, n, copies, c))
        if row:
            sums[3, lin.role] += dgrad / tp
        else:
            sums[0, lin.role] += sec(Gemm("block", "forward", t, n, k, copies, c)) / tp
            sums[1, lin.role] += dgrad
            if sc.method is Method.FULL:
                sums[2, lin.role] += sec(Gemm("block", "backward", k, n, t, copies, c))
    return tuple((sums[w, "attention"], sums[w, "mlp"]) for w in range(len(TP_WINDOWS)))


def _gemm_seconds(gemms: list[Gemm], rate: float, bw: float, sms: int) -> float:
    # Roofline, then engine.time.gemm's occupancy bound for the GEMMs with fewer output tiles than the GPU has SMs
    # (wave quantization: each tile one SM), as engine.time.step times them on one GPU.
    if not gemms:
        return 0.0
    narrow = [g for g in gemms if output_tiles(g) < sms]
    extra = sum(max(0.0, sms * occupancy_flops(g) / rate - gemm_seconds(g, rate, bw)) for g in narrow)
    return Roofline([gemm_work(g) for g in gemms]).seconds(rate, bw) + extra


def _work(arch: Architecture, sc: Scenario, layout: Layout, gpu: Gpu, rates: GpuRates, fp8: Fp8Recipe | None,
          kernel: str, fused: bool) -> _Work:
    key = (id(arch), sc, layout.tensor_parallel, layout.context_parallel, layout.expert_parallel,
           layout.expert_tensor_parallel, layout.sequence_parallel, layout.recompute,
           layout.micro_batches if fp8 is not None else 0, fp8, kernel,  # micro batches: only in the FP8 casts
           fused, gpu.name, current())  # the fitted constants scale the seconds
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is arch:
        return hit[1]
    spec = precision_spec(sc.precision)
    c, bw, mm = spec.compute_bytes, rates.hbm_bytes_per_s, rates.matmul_flops
    tp, cp, L = layout.tensor_parallel, layout.context_parallel, arch.num_layers
    sp = tp if layout.sequence_parallel else 1
    t = sc.tokens_per_micro_batch / cp
    rec = layout.recompute
    full, op_sac = rec is Recompute.FULL, rec is Recompute.SELECTIVE_OP
    fp8_rate = fp8_matmul_flops(gpu) if fp8 is not None else None
    sms = rates.sm_count

    # GEMMs: 16-bit ones on one roofline, FP8 ones (1-byte operands) on another at the FP8 rate.
    gemms = rank_gemms(arch, sc, layout, c)
    groups: dict[tuple[str, bool], list[Gemm]] = {}
    cast_f = cast_b = cast_r = 0.0
    for g, is8, share in gemms:
        eight = bool(fp8_rate) and is8
        gg = g._replace(elem_bytes=1) if eight else g
        groups.setdefault((g.phase, eight), []).append(gg)
        rec_share = 1.0 if (full and g.phase == "forward") else share if (op_sac and g.phase == "forward") else 0.0
        if rec_share:
            groups.setdefault(("recompute", eight), []).append(gg._replace(copies=gg.copies * rec_share))
        if eight and g.phase == "forward":
            f, b = fp8_cast_bytes(fp8, c, g.m * g.k * g.copies, g.n * g.k * g.copies, g.m * g.n * g.copies,
                                  layout.micro_batches)
            cast_f, cast_b, cast_r = cast_f + f, cast_b + b, cast_r + rec_share * f
    def phase(p: str) -> float:
        return (_gemm_seconds(groups.get((p, False), []), mm, bw, sms)
                + (_gemm_seconds(groups.get((p, True), []), fp8_rate, bw, sms) if fp8_rate else 0.0))
    g_f, g_b, g_r = phase("forward"), phase("backward"), phase("recompute")
    # PEFT methods' extra matmul work (engine.time.adapters), a third forward, two thirds backward, as step_time.
    ad = extra_adapter_flops(arch, sc) / L / mm
    ad_rec = ad / 3 if (full or op_sac) else 0.0

    # Attention: heads / TP, queries / CP against the whole key length.
    a_f, a_b, _ = attention_seconds(arch, kernel, t, sc.seq_len, c, rates, fused_softmax=fused)
    a_f, a_b = a_f / (L * tp), a_b / (L * tp)
    a_r = a_f if (full or rec is Recompute.SELECTIVE or (op_sac and kernel not in FUSED_KERNELS)) else 0.0

    # Memory-bound: the block's elementwise ops, autocast's weight casts, FP8 casts.
    resid = 4 if (spec.weight_bytes == 4 or (sc.method is Method.QLORA and sc.prepare_kbit_training)) else spec.weight_bytes
    stream, inner = layer_forward_bytes_by_width(arch, c, resid, fused)
    elem = (stream / sp + inner / tp) * t / bw
    cw_f, cw_b = cast_bytes_per_use(spec.autocast and spec.weight_bytes == 4)
    block_w = sum(g.n * g.k * g.copies for g, _, _ in gemms if g.phase == "forward" and g.part == "block")
    w_total = sum(gr.parameters for gr in arch.tensors if gr.linear)  # what engine.time casts
    w_block_one = sum(lin.in_features * lin.out_features * lin.count * lin.blocks(L) for lin in arch.layer_linears)
    head_w = max(w_total - w_block_one, 0.0) / tp  # the LM head (vocabulary-parallel), when it is a linear
    casts_b = cw_b if sc.method is Method.FULL else 0.0
    mb_f = elem + (cw_f * block_w + cast_f) / bw
    mb_b = BACKWARD_FACTOR * elem + (casts_b * block_w + cast_b) / bw
    mb_r = (mb_f if full else elem + cast_r / bw if op_sac else 0.0)
    dq = dequant_bytes_per_use(sc, c) * block_w / bw
    block = Passes((g_f + ad / 3, g_b + 2 * ad / 3, g_r + ad_rec), (a_f, a_b, a_r), (mb_f, mb_b, mb_r),
                   (dq, dq, dq if (full or op_sac) else 0.0))

    # The LM head (vocabulary-parallel) with the final norm and loss, and the embedding's gradient.
    head, embed = ZERO, ZERO
    if arch.kind != "encoder":
        h, v = arch.hidden_size, _split(arch.vocab_size, tp)
        hg = [Gemm("lm_head", "forward", t, v, h, 1.0, c), Gemm("lm_head", "backward", t, h, v, 1.0, c)]
        if sc.method is Method.FULL:
            hg.append(Gemm("lm_head", "backward", h, v, t, 1.0, c))
        hf = _gemm_seconds(hg[:1], mm, bw, sms)
        hb = _gemm_seconds(hg[1:], mm, bw, sms)
        head_bytes = loss_bytes(arch, sc, c) * t / tp + 2 * resid * arch.hidden_size * t / sp
        cf = cw_f * head_w / bw
        head = Passes((hf, hb, 0.0), (0.0,) * 3, (cf, (casts_b * head_w + head_bytes) / bw, cf if full else 0.0), (0.0,) * 3)
    if sc.method is Method.FULL:
        emb = 2 * arch.vocab_size * arch.hidden_size * (4 if spec.weight_bytes == 4 else c) / tp
        embed = ZERO._replace(memory_bound=(0.0, emb / bw, 0.0))

    k = layer_kernels(arch, sc, kernel, fused)
    rec_k = k if (full or op_sac) else (1.0 if kernel in FUSED_KERNELS else 6.0) if rec is Recompute.SELECTIVE else 0.0
    wins = tp_windows(arch, sc, layout, 1 if fp8_rate else c, fp8_rate or mm, bw, sms) if layout.sequence_parallel \
        else NO_TP_WINDOWS
    w = _Work(block, head, embed, k, rec_k, backward_host_factor(sc.framework is Framework.HF, fused, sc.torch_compile), wins)
    if len(_CACHE) >= _CACHE_SIZE:
        _CACHE.clear()
    _CACHE[key] = (arch, w)
    return w


def stage_compute(arch: Architecture, sc: Scenario, layout: Layout, gpu: Gpu, stage: int, fp8: Fp8Recipe | None,
                  kernel: str, fused: bool = False) -> StageCompute:
    """One micro batch of pipeline stage ``stage`` on one of its ranks (see the module docstring). ``sc`` is the
    scenario the rank computes in (:func:`engine.scaleout.memory.effective_scenario`; the 16-bit one with master
    weights), ``kernel`` its attention kernel, ``fused`` torch.compile / Megatron's fused kernels (with an unfused
    attention kernel, Megatron's fused softmax: :func:`engine.time.attention.fused_softmax_score_bytes`); the
    scenario's own ``torch_compile`` turns them on too (:func:`engine.time.memory_bound.runs_fused`).

    Raises:
        ValueError: the catalog has no peak for the compute dtype on ``gpu``.
    """
    fp8 = Fp8Recipe.of(fp8)
    rates = gpu_rates(gpu, sc.precision)
    w = _work(arch, sc, layout, gpu, rates, fp8, kernel, runs_fused(sc, fused))
    layers = layout.stage_layers(arch.num_layers)
    n, p = layers[stage], layout.pipeline_parallel
    first, last = stage == 0, stage == p - 1
    key = (id(w), n, first, last, layout.recompute_layers)  # the layout search asks for the same stage many times
    hit = _STAGES.get(key)
    if hit is not None and hit[0] is w:
        return hit[1]
    out = _stage(w, layout, n, first, last)
    if len(_STAGES) >= _CACHE_SIZE:
        _STAGES.clear()
    _STAGES[key] = (w, out)
    return out


_STAGES: dict[tuple, tuple[_Work, StageCompute]] = {}


def _stage(w: _Work, layout: Layout, n: int, first: bool, last: bool) -> StageCompute:
    total = ZERO.add(w.block, n)
    if layout.recompute is Recompute.FULL and layout.recompute_layers is not None and n:
        keep = 1.0 - min(layout.recompute_layers, n) / n  # Megatron --recompute-num-layers: the rest are not rerun
        total = total.add(ZERO._replace(matmul=(0, 0, w.block.matmul[2]), attention=(0, 0, w.block.attention[2]),
                                        memory_bound=(0, 0, w.block.memory_bound[2])), -keep * n)
    if last:
        total = total.add(w.head)
    if first:
        total = total.add(w.embed)
    fwd, bwd = total.forward, total.backward
    k_fwd = n * w.block_kernels + (HEAD_KERNELS if last else 0)
    k_bwd = w.backward_host_factor * k_fwd + n * w.rec_kernels
    host = max(0.0, k_fwd * SECONDS_PER_KERNEL - fwd) + max(0.0, k_bwd * SECONDS_PER_KERNEL - bwd)
    breakdown = {name: sum(getattr(total, name)) for name in Passes._fields}
    breakdown["overhead"] = host
    # The column-parallel forward window twice with full recompute (the recomputed forward gathers again).
    reruns = 2.0 if layout.recompute is Recompute.FULL else 1.0  # as comm_volumes counts the recompute's gathers
    wins = tuple((a * n * (reruns if i == 0 else 1.0), b * n * (reruns if i == 0 else 1.0))
                 for i, (a, b) in enumerate(w.tp_windows))
    return StageCompute(breakdown, fwd, bwd, sum(total.attention), wins)


_FLOPS: dict[tuple, tuple[Architecture, float]] = {}


def model_flops_per_micro_batch(arch: Architecture, sc: Scenario) -> float:
    """Model FLOPs of one micro batch of one replica, as :mod:`engine.time.step` counts them (PaLM appendix B): every
    GEMM of the one-GPU step (no recompute) + attention's full square three times."""
    key = (id(arch), sc.micro_batch_size, sc.seq_len, sc.method, sc.lora_r, sc.lora_targets)
    hit = _FLOPS.get(key)
    if hit is not None and hit[0] is arch:
        return hit[1]
    if len(_FLOPS) >= _CACHE_SIZE:
        _FLOPS.clear()
    _FLOPS[key] = (arch, _model_flops(arch, sc))
    return _FLOPS[key][1]


def _model_flops(arch: Architecture, sc: Scenario) -> float:
    c = precision_spec(sc.precision).compute_bytes
    gemm = sum(g.flops for g in step_gemms(arch, sc, c))
    return gemm + 3.0 * attention_work(arch, float(sc.tokens_per_micro_batch), sc.seq_len)
