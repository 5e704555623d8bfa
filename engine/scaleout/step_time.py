"""The step time of a parallel layout on :mod:`engine.time`'s step-time model: compute + communication + bubble.

- **compute** (:func:`compute_seconds`): one rank's work per micro batch of every pipeline stage
  (:mod:`engine.scaleout.rank_compute`: the GEMM / attention / memory-bound / launch walk of
  :func:`engine.time.step.step_time` on the rank's TP / CP / EP / PP shapes, with the layout's recompute and FP8);
  the pipeline runs at its slowest stage.
- **communication** (:func:`collective_seconds`): each collective of :mod:`engine.scaleout.comm_volumes` with
  :mod:`engine.time.collectives`' ring formulas over the group's link (:meth:`Cluster.link`: NVLink / NVSwitch or
  PCIe inside a node, the network across nodes, a ring over k nodes crossing it k times). Collectives on the
  critical path (TP, EP, PP; TP overlapped under the GEMMs with ``tp_comm_overlap``, or with nanotron's asynchronous
  TP linears each beside one GEMM) add up; those frameworks overlap with compute (DP gradients and weight gathers, FSDP,
  the CP ring) cost only what :func:`engine.time.collectives.exposed_seconds` leaves of them beside the compute
  they run under: FSDP's gathers under each micro batch's forward and backward, DP gradient traffic under the last
  micro batch's backward, the distributed optimizer's weight all-gather under the first forward, the CP ring under
  attention.
- **bubble** (:func:`engine.scaleout.comm_volumes.bubble_fraction`): (compute + critical communication) / (1 - bubble).
  Collectives run blocking outside the pipelined compute (``Collective.after_step``: nanotron's ZeRO-1 gradient
  all-reduce and weight all-gather, a tied embedding's gradient all-reduce between the first and last stage) add after
  it, with their host ops.
- **optimizer**: :func:`engine.time.memory_bound.optimizer_bytes` of the parameters the rank's optimizer updates
  (its shard under ZeRO / the distributed optimizer) at HBM bandwidth, with its host time, and the per-step host
  work (:data:`engine.time.overhead.STEP_SECONDS`).

Every rate and constant is engine.time's (documented there); nothing here is fitted. With TP = PP = CP = EP = DP =
1 the step is :func:`engine.time.step.step_time`'s for the same scenario (``tests/scaleout`` checks it).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.hardware.gpus import Gpu
from engine.memory.activations import attention_kernel
from engine.model.architecture import Architecture
from engine.scaleout.comm_volumes import TP_WINDOWS, Collective, Link, bubble_fraction
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.layout import Layout
from engine.scaleout.memory import Context
from engine.scaleout.rank_compute import StageCompute, model_flops_per_micro_batch, stage_compute
from engine.scenario.precision import precision_spec
from engine.scenario.training import Framework, Method, Scenario
from engine.time import collectives as cc
from engine.time.fabrics import DEFAULT_FABRIC, Fabric, fabric as fabric_named
from engine.time.memory_bound import optimizer_bytes
from engine.time.overhead import SECONDS_PER_KERNEL, STEP_SECONDS, optimizer_step_seconds
from engine.time.constants import current
from engine.time.rates import gpu_rates, peak_flops_for

DEFAULT_INTER_NODE_GBITS = 400.0
"""Network bandwidth per GPU across nodes, Gb/s (one 400 Gb/s NIC per GPU: DGX H100, Llama 3 sec. 3.3.1)."""

NETWORK_BUS_EFFICIENCY = cc.NETWORK_BYTES_PER_S / (200e9 / 8)
"""Ring bus bandwidth / NIC line rate: engine.time's 24 GB/s of busbw per 200 Gb/s (25 GB/s) NIC (nccl-tests
issue 119), applied to the cluster's NIC rate."""


class Cluster(BaseModel):
    """GPUs of one kind in ``nodes`` nodes of ``gpus_per_node``, the network between nodes (Gb/s per GPU, and its
    fabric: a name of :data:`engine.time.fabrics.FABRICS`, default InfiniBand) and, optionally, the GPU-to-GPU
    bandwidth inside a node (GB/s per direction; default: the catalog's NVLink or PCIe)."""

    model_config = ConfigDict(frozen=True)

    gpu: Gpu
    nodes: int = Field(1, ge=1, le=4096)
    gpus_per_node: int = Field(8, ge=1, le=64)
    inter_node_gbits: float = Field(DEFAULT_INTER_NODE_GBITS, gt=0)
    intra_node_gbps: float | None = Field(None, gt=0)
    fabric: str = DEFAULT_FABRIC

    @field_validator("fabric")
    @classmethod
    def _known_fabric(cls, name: str) -> str:
        return fabric_named(name).name  # raises ScenarioError on an unknown name

    @property
    def network(self) -> Fabric:
        """The fabric between nodes (:mod:`engine.time.fabrics`)."""
        return fabric_named(self.fabric)

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def link(self, col: Collective) -> cc.Link:
        """The ring's link for ``col``: :func:`engine.time.collectives.data_parallel_link` over its group with its
        ranks per node (a p2p is one hop: inside a node, or over the network)."""
        n, per_node = (2, 2 if col.link is Link.INTRA_NODE else 1) if col.kind == "p2p" else \
            (col.group_size, col.group_size if col.link is Link.INTRA_NODE else col.ranks_per_node)
        return _ring_link(self, n, per_node)


    def __hash__(self) -> int:
        # Cheaper than pydantic's hash of every field and the GPU's (the search hashes the cluster per collective);
        # equal clusters still hash alike.
        return hash((self.gpu.name, self.nodes, self.gpus_per_node, self.inter_node_gbits, self.intra_node_gbps,
                     self.fabric))


def _ring_link(cluster: Cluster, n: int, per_node: int) -> cc.Link:
    """The ring's link over ``n`` ranks, ``per_node`` of them in each node (cached: the search asks again and again).
    Between nodes NCCL reaches the cluster's fabric's share of the NIC's line rate (InfiniBand: the fitted
    :attr:`~engine.time.constants.TimeConstants.network_efficiency`, nccl-tests busbw) and each ring step that crosses
    nodes pays the fabric's hop latency (:mod:`engine.time.fabrics`)."""
    return _ring_link_at(cluster, n, per_node, cluster.network.share())


@lru_cache(maxsize=4096)
def _ring_link_at(cluster: Cluster, n: int, per_node: int, share: float) -> cc.Link:
    net = cluster.network
    link = cc.data_parallel_link(cluster.gpu, n, per_node, network_bytes_per_s=cluster.inter_node_gbits / 8 * 1e9 * share,
                                 network_hop_latency_s=net.hop_latency_s, network_name=net.label)
    if cluster.intra_node_gbps is not None and not link.network_bound:
        given = cluster.intra_node_gbps * 1e9 * cc.NVLINK_BUS_EFFICIENCY
        return cc.Link(name="intra-node (given)", bus_bytes_per_s=given, nodes=link.nodes,
                       network_hop_latency_s=link.network_hop_latency_s,
                       all_reduce_bytes_per_s=min(given, link.all_reduce_bytes_per_s) if link.all_reduce_bytes_per_s else None,
                       all_to_all_bytes_per_s=min(given, link.all_to_all_bytes_per_s) if link.all_to_all_bytes_per_s else None)
    return link


class StepTime(BaseModel):
    """Seconds of one step of a layout on its slowest pipeline stage, by cause; tokens/s of the whole run.
    ``breakdown_s`` (matmul, attention, memory_bound, dequantization, optimizer, communication, bubble, overhead)
    adds up to ``step_s``; ``compute_s`` is the stage's compute of all micro batches (launch overhead included)."""

    model_config = ConfigDict(frozen=True)

    compute_s: float
    comm_s: dict[str, float]
    exposed_comm_s: float
    bubble_fraction: float
    bubble_s: float
    optimizer_s: float
    step_s: float
    tokens_per_step: int
    tokens_per_second: float
    tokens_per_second_per_gpu: float
    mfu: float
    breakdown_s: dict[str, float] = {}
    slowest_stage: int = 0
    attention_kernel: str = ""
    provisional: bool = False


def compute_seconds(arch: Architecture, sc: Scenario, layout: Layout, gpu: Gpu, fp8: Fp8Recipe | None,
                    kernel: str | None = None, fused_kernels: bool = False) -> list[StageCompute]:
    """One micro batch of every pipeline stage on one of its ranks (:func:`engine.scaleout.rank_compute.stage_compute`).
    ``sc``: the scenario the rank computes in; ``kernel``: its attention kernel (default: what SDPA picks on ``gpu``).

    Raises:
        ValueError: no catalog peak for the compute dtype on ``gpu``.
    """
    fp8 = Fp8Recipe.of(fp8)
    kernel = kernel or attention_kernel(arch, sc, precision_spec(sc.precision), gpu)
    p, layers = layout.pipeline_parallel, layout.stage_layers(arch.num_layers)
    seen: dict[tuple[int, bool, bool], StageCompute] = {}  # stages alike in layers, first and last are alike
    out = []
    for r in range(p):
        key = (layers[r], r == 0, r == p - 1)
        if key not in seen:
            seen[key] = stage_compute(arch, sc, layout, gpu, r, fp8, kernel, fused_kernels)
        out.append(seen[key])
    return out


def _rank_compute(arch: Architecture, layout: Layout, gpu: Gpu, ctx: Context, fp8: Fp8Recipe | None,
                  fused: bool) -> tuple[str, list[StageCompute], int]:
    """(attention kernel, :func:`compute_seconds` of every stage, the slowest stage: the first of the longest) in
    ``ctx``'s compute scenario, memoised in ``ctx`` per what :mod:`engine.scaleout.rank_compute` reads of the layout
    (the layout search asks again and again)."""
    key = ("rank_compute", gpu.name, fp8, fused, layout.tensor_parallel, layout.context_parallel,
           layout.expert_parallel, layout.expert_tensor_parallel, layout.sequence_parallel, layout.recompute,
           layout.recompute_layers, layout.pipeline_parallel, layout.layers_per_stage,
           layout.micro_batches if fp8 is not None else 0)  # micro batches enter only the FP8 casts
    hit = ctx.memo.get(key)
    if hit is None:
        sc = ctx.compute_sc
        kernel = attention_kernel(arch, sc, precision_spec(sc.precision), gpu)
        stages = compute_seconds(arch, sc, layout, gpu, fp8, kernel, fused)
        first: dict[int, int] = {}  # stages alike are one object: where each first stands, then its total once
        for r, st in enumerate(stages):
            first.setdefault(id(st), r)
        slow = max(first.values(), key=lambda r: stages[r].total_s)  # the first of the longest, as over every stage
        hit = ctx.memo[key] = (kernel, stages, slow)
    return hit


def collective_seconds(col: Collective, cluster: Cluster) -> float:
    """Seconds of all ``col.count`` calls over the group's link (:mod:`engine.time.collectives` ring formulas, with
    their per-call latency); a p2p moves its message once per call. The collective's ``host_ops`` per call (a
    framework's copy loop around it) add :data:`engine.time.overhead.SECONDS_PER_KERNEL` each."""
    link = cluster.link(col)
    total = col.message_bytes * col.count
    host = col.count * col.host_ops * SECONDS_PER_KERNEL
    if col.kind == "p2p":
        return total / link.bus_bytes_per_s + col.count * link.call_latency_s(1, link.inter_node_steps(1, False)) + host
    fn = {"all_reduce": cc.all_reduce_seconds, "all_gather": cc.all_gather_seconds,
          "reduce_scatter": cc.reduce_scatter_seconds, "all_to_all": cc.all_to_all_seconds}[col.kind]
    return fn(total, col.group_size, link, calls=col.count) + host


class CommSums(NamedTuple):
    """A step's collective seconds by where they run (see the module docstring): on the critical path, FSDP's per
    micro batch forward and backward traffic, before the first forward, after the last backward, the CP ring, TP
    under the GEMMs (``tp_comm_overlap``), blocking outside the pipelined compute (``Collective.after_step``)."""

    critical: float
    per_forward: float
    per_backward: float
    start: float
    end: float
    ring: float
    tp: float
    after: float = 0.0
    beside: tuple[float, ...] = (0.0,) * 4


def comm_sums(cols: list[Collective], seconds: list[float], layout: Layout, tp_comm_overlap: bool,
              overlap_tp_all_gathers: bool = True, async_tp_linears: bool = False) -> CommSums:
    """:class:`CommSums` of ``cols`` (their :func:`collective_seconds` in ``seconds``). Reads of the layout only its
    micro batches, ZeRO stage and PP degree (the layout search shares the sums between layouts with the same
    data-parallel collectives, whose key holds all three).
    ``overlap_tp_all_gathers`` False: with ``tp_comm_overlap`` only the TP reduce-scatters run under the GEMMs (async
    TP with torchao's row-wise float8, whose all-gather-matmuls are not fused: pytorch/pytorch#149990).
    ``async_tp_linears`` (with ``tp_comm_overlap``): the overlap is nanotron's asynchronous TP linears, not a fused
    all-gather-matmul: each sequence-parallel collective runs beside the one GEMM its linear computes meanwhile
    (``Collective.beside``, summed per :data:`engine.scaleout.comm_volumes.TP_WINDOWS` kind into ``beside``); the
    others (the row-parallel forward reduce-scatters, the embedding's all-reduce, TP without sequence parallelism)
    stay on the critical path."""
    m = layout.micro_batches
    critical = per_f = per_b = start = end = ring = tp = after = 0.0
    beside = [0.0] * len(TP_WINDOWS)
    for col, s in zip(cols, seconds):
        if col.after_step:
            after += s
        elif tp_comm_overlap and async_tp_linears and col.dimension == "tp":
            if col.beside:
                beside[TP_WINDOWS.index(col.beside)] += s
            else:
                critical += s
        elif tp_comm_overlap and col.dimension == "tp" and (overlap_tp_all_gathers or col.kind != "all_gather"):
            tp += s
        elif not col.overlapped:
            critical += s
        elif col.dimension == "cp":
            ring += s
        elif layout.zero == 3 and layout.pipeline_parallel == 1:  # FSDP without PP: every micro batch gathers, reduces
            if col.kind == "all_gather":
                per_f, per_b = per_f + s / (2 * m), per_b + s / (2 * m)
            else:
                per_b += s / m
        elif col.kind == "all_gather":
            start += s  # the updated (or, FSDP + PP, the stage's) weights, before the first forward
        else:
            end += s  # gradients, after the last micro batch's backward
    return CommSums(critical, per_f, per_b, start, end, ring, tp, after, tuple(beside))


def _hidden(sums: CommSums, m: int, st: StageCompute) -> float:
    """Exposed seconds of the overlapped collectives beside the compute they run under (see the module docstring)."""
    fwd, bwd = st.forward_s, st.backward_s
    return (m * (cc.exposed_seconds(sums.per_forward, fwd) + cc.exposed_seconds(sums.per_backward, bwd))
            + cc.exposed_seconds(sums.start, fwd) + cc.exposed_seconds(sums.end, bwd)
            + cc.exposed_seconds(sums.ring, st.attention_s * m) + cc.exposed_seconds(sums.tp, st.breakdown_s["matmul"] * m)
            + _beside_linears(sums.beside, m, st))


def _beside_linears(beside: tuple[float, ...], m: int, st: StageCompute) -> float:
    """Exposed seconds of the collectives nanotron's asynchronous TP linears run beside one GEMM each
    (:func:`comm_sums` ``async_tp_linears``): per :data:`~engine.scaleout.comm_volumes.TP_WINDOWS` kind, half its
    calls at attention's linear and half at the MLP's (one each per block), each half against that linear's window
    (:func:`engine.scaleout.rank_compute.tp_windows`) with :func:`engine.time.collectives.exposed_seconds`."""
    return sum(cc.exposed_seconds(s / 2, m * a) + cc.exposed_seconds(s / 2, m * b)
               for s, (a, b) in zip(beside, st.tp_windows) if s > 0)


def _optimizer(ctx: Context, layout: Layout, rank_parameters: float) -> tuple[float, int]:
    """(HBM bytes, tensors the host loop walks) of the optimizer step over the parameters this rank updates: its parameters, / DP x
    CP under ZeRO-1 / the distributed optimizer and ZeRO-3 / FSDP. Bytes as :func:`engine.time.step.step_time`
    counts them (the fp32 master weights, or the weights, the states and the gradients through the optimizer's
    passes; HF gradient clipping), at the one-GPU estimate's bytes per parameter."""
    sc, parts = ctx.sc, ctx.parts
    get = lambda k: parts[k].bytes if k in parts else 0.0  # noqa: E731
    shards = layout.optimizer_shards if layout.zero >= 1 else 1
    held = rank_parameters / ctx.split.total
    if sc.method is Method.FULL:
        weights = get("master_weights") or get("weights")
        tensors = sum(gr.count for gr in ctx.arch.tensors)
    else:
        weights = ctx.estimate.trainable_parameters * (4 if sc.framework is Framework.HF else ctx.spec.weight_bytes)
        tensors = 0
    moved = optimizer_bytes(weights, get("optimizer_states"), get("gradients"), sc.optimizer,
                            clip=sc.framework is Framework.HF) * held / shards
    return moved, -(-round(tensors * held) // shards)


def _optimizer_seconds(ctx: Context, layout: Layout, rank_parameters: float, gpu: Gpu) -> tuple[float, float]:
    """(seconds of the optimizer step's HBM traffic, seconds of the step with its host loop,
    :func:`engine.time.overhead.optimizer_step_seconds`) of
    :func:`_optimizer`, memoised in ``ctx`` per what it reads of the layout (its shards) and the rank's parameters."""
    key = ("optimizer", gpu.name, layout.optimizer_shards if layout.zero >= 1 else 1, rank_parameters)
    hit = ctx.memo.get(key)
    if hit is None:
        moved, tensors = _optimizer(ctx, layout, rank_parameters)
        opt_gpu = moved / gpu_rates(gpu, ctx.compute_sc.precision).hbm_bytes_per_s
        hit = ctx.memo[key] = (opt_gpu, optimizer_step_seconds(ctx.sc.optimizer, tensors, opt_gpu))
    return hit


class _Step(NamedTuple):
    """The figures of one step that :func:`step_time` reports and :func:`step_seconds` needs, in seconds."""

    kernel: str
    slow: int
    stage: StageCompute
    compute: float
    critical: float
    hidden: float
    bubble: float
    busy: float
    pipelined: float
    opt_gpu: float
    opt: float
    step: float


def _step(arch: Architecture, layout: Layout, cluster: Cluster, sums: CommSums, ctx: Context, rank_parameters: float,
          fp8: Fp8Recipe | None, fused_kernels: bool) -> _Step:
    """The step of :func:`step_time` from the :class:`CommSums` of its collectives."""
    kernel, stages, slow = _rank_compute(arch, layout, cluster.gpu, ctx, fp8, fused_kernels)
    st, m = stages[slow], layout.micro_batches
    compute = m * st.total_s
    critical, hidden = sums.critical, _hidden(sums, m, st) + sums.after
    bubble = bubble_fraction(layout)
    busy = compute + critical
    pipelined = busy / (1 - bubble)
    opt_gpu, opt = _optimizer_seconds(ctx, layout, rank_parameters, cluster.gpu)
    step = pipelined + hidden + opt + STEP_SECONDS
    return _Step(kernel, slow, st, compute, critical, hidden, bubble, busy, pipelined, opt_gpu, opt, step)


def step_seconds(arch: Architecture, layout: Layout, cluster: Cluster, sums: CommSums, ctx: Context,
                 rank_parameters: float, fp8: Fp8Recipe | None = None, *, fused_kernels: bool = False) -> tuple[float, int]:
    """(``step_s``, ``tokens_per_step``) of :func:`step_time` for the same layout, to the last bit, from its
    collectives' :func:`comm_sums` (``tp_comm_overlap`` enters there), without building the :class:`StepTime` (the
    layout search's path: it asks thousands of layouts, many with the same collectives)."""
    s = _step(arch, layout, cluster, sums, ctx, rank_parameters, fp8, fused_kernels)
    return s.step, layout.micro_batches * layout.micro_batch_size * layout.data_parallel * ctx.sc.seq_len


def step_time(arch: Architecture, layout: Layout, cluster: Cluster, collectives: list[Collective], ctx: Context,
              rank_parameters: float, fp8: Fp8Recipe | None = None, *, fused_kernels: bool = False,
              tp_comm_overlap: bool = False, async_tp_linears: bool = False) -> StepTime:
    """Step time of ``layout`` on ``cluster`` (see the module docstring). ``ctx``: the layout's shared estimate
    (:class:`engine.scaleout.memory.Context`: the rank's scenario and the one-GPU bytes of the optimizer's
    tensors); ``collectives`` of one rank (:func:`engine.scaleout.comm_volumes.step_collectives`);
    ``rank_parameters``: parameters held by that rank; ``fused_kernels``: torch.compile or Megatron-LM's fused
    kernels (:mod:`engine.time.memory_bound`); ``tp_comm_overlap``: the TP collectives run under the GEMMs next to
    them (Megatron-LM ``--tp-comm-overlap`` with TransformerEngine's userbuffers, torchtitan's AsyncTP), so only what
    :func:`engine.time.collectives.exposed_seconds` leaves of them beside the step's matmul time counts (with
    torchao's row-wise float8 only the reduce-scatters: its all-gather-matmuls are not fused, pytorch/pytorch#149990);
    ``async_tp_linears``: that overlap is nanotron's asynchronous TP linears, each collective beside one GEMM
    (:func:`comm_sums`).

    Raises:
        ValueError: no catalog peak for the compute dtype on the cluster's GPU.
    """
    gpu, sc = cluster.gpu, ctx.compute_sc
    seconds = [collective_seconds(c, cluster) for c in collectives]
    sums = comm_sums(collectives, seconds, layout, tp_comm_overlap,
                     overlap_tp_all_gathers=fp8 is None or fp8.fuses_tp_all_gathers, async_tp_linears=async_tp_linears)
    s = _step(arch, layout, cluster, sums, ctx, rank_parameters, fp8, fused_kernels)
    st, m, step = s.stage, layout.micro_batches, s.step
    by_dim: dict[str, float] = {}
    for col, sec in zip(collectives, seconds):
        by_dim[col.dimension] = by_dim.get(col.dimension, 0.0) + sec
    breakdown = {k: m * v for k, v in st.breakdown_s.items()}
    breakdown["overhead"] += STEP_SECONDS + (s.opt - s.opt_gpu)
    breakdown.update(optimizer=s.opt_gpu, communication=s.critical + s.hidden, bubble=s.pipelined - s.busy)
    tokens = layout.micro_batches * layout.micro_batch_size * layout.data_parallel * ctx.sc.seq_len
    peak = peak_flops_for(gpu, sc.precision).flops or 1.0
    model_flops = model_flops_per_micro_batch(arch, ctx.sc) * m * layout.data_parallel
    return StepTime.model_construct(  # every field computed here
        compute_s=s.compute, comm_s=by_dim, exposed_comm_s=s.critical + s.hidden, bubble_fraction=s.bubble,
        bubble_s=s.pipelined - s.busy, optimizer_s=s.opt, step_s=step, tokens_per_step=tokens,
        tokens_per_second=tokens / step, tokens_per_second_per_gpu=tokens / step / layout.world_size,
        mfu=model_flops / (step * layout.world_size * peak), breakdown_s=breakdown, slowest_stage=s.slow,
        attention_kernel=s.kernel, provisional=False,
    )
