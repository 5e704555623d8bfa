"""Layout search: for a model, a cluster and a global batch, every TP x PP x CP x EP x DP layout (with micro batch,
recompute, ZeRO stage and interleaving) on 1..all of the cluster's GPUs, whether it fits, how fast and how costly
it is, the Pareto front of time and cost, and why the others do not fit.

Fast by construction, with the numbers of a fresh :func:`engine.scaleout.estimate.estimate_layout` per layout to
the last bit (``tests/scaleout/test_scaleout_search_exact.py``; ``benchmarks/bench_scaleout.py``: tens of thousands
of layouts in under 0.5 s). The space is walked by parallel shape and micro batch, so what their settings share is
found once (dominant stages, NCCL buffers, the layout's problems, its context). The one-GPU estimate is computed
once per (micro batch, gradient checkpointing, accumulation) and shared (:class:`engine.scaleout.memory.Context`);
each memory section of a stage is recorded once under what it reads of the layout and of that estimate, for all of
the search's contexts (:mod:`engine.scaleout.stage_peaks`); a layout's problems, a rank's compute, the collectives'
seconds and the optimizer step are memoised by the settings they read (:func:`engine.scaleout.layout.problems_key`,
:func:`engine.scaleout.comm_volumes.model_parallel_key`, ``data_parallel_key``); the step time is computed only for
layouts that fit, without building a :class:`~engine.scaleout.step_time.StepTime`
(:func:`engine.scaleout.step_time.step_seconds`). The cycle collector is paused meanwhile (the search makes no
cycles).

Searched: GPU counts 1, 2, 4 ... GPUs per node, then 1, 2, 4 ... nodes and all of them; TP in powers of two up to a
node (TP stays inside one NVLink domain, as Megatron's and torchtitan's guides advise); CP in powers of two up to
8; PP over the divisors of the remaining ranks up to the layer count; EP over powers of two dividing the experts
and DP x CP; micro batch 1, 2, 4, 8; recompute none / selective / selective_op / full; ZeRO 0 / 1 / 2 / 3; interleaving v = 2 where it
divides. Sequence parallelism is on whenever TP > 1 (it saves memory at the same communication volume).
"""

from __future__ import annotations

import gc
import itertools
from contextlib import contextmanager
from operator import itemgetter
from typing import Iterator, NamedTuple

from pydantic import ValidationError

from engine.errors import ScenarioError
from engine.hardware.gpus import prices_for
from engine.memory.device import device_used_bytes
from engine.model.architecture import Architecture
from engine.scaleout import buffers
from engine.scaleout.comm_volumes import (Collective, DataParallelSync, data_parallel_collectives, data_parallel_key,
                                          model_parallel_collectives, model_parallel_key)
from engine.scaleout.estimate import ALL_METHODS, check_method
from engine.scaleout.fp8 import Fp8Recipe, check_fp8_gpu
from engine.scaleout.layout import (ZERO_STAGES, Layout, Recompute, Schedule, layout_problems, problems_key, validated_layout,
                                    with_settings)
from engine.scaleout.memory import CHECKPOINTED, Context, effective_scenario, group_sizes
from engine.scaleout.stage_peaks import SectionPool, StageFamily
from engine.scaleout.stage_split import cost_balanced_layers
from engine.scaleout.step_time import Cluster, CommSums, collective_seconds, comm_sums, step_seconds
from engine.scenario.training import Method, Scenario

MICRO_BATCHES = (1, 2, 4, 8)
MAX_CP = 8


class Candidate(NamedTuple):
    """One searched layout: ``fits`` or the ``reason`` it does not; its most loaded rank and, when it fits, its time
    and cost. Bytes, seconds; cost in USD per million tokens (None without a price for the GPU)."""

    layout: Layout
    fits: bool
    reason: str
    peak_allocated_bytes: float
    device_bytes: float
    max_stage: int
    step_s: float | None
    tokens_per_second: float | None
    gpu_hours_per_million_tokens: float | None
    usd_per_million_tokens: float | None


def _powers(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def gpu_counts(cluster: Cluster) -> list[int]:
    """GPU counts searched: powers of two within a node, then powers of two of whole nodes, and the whole cluster."""
    counts = set(_powers(cluster.gpus_per_node)) | {n * cluster.gpus_per_node for n in _powers(cluster.nodes)}
    counts.add(cluster.num_gpus)
    return sorted(counts)


def _space(arch: Architecture, cluster: Cluster, global_batch: int, zero_stages: tuple[int, ...] = ZERO_STAGES,
           interleaved: bool = True) -> Iterator[tuple[int, int, int, int, int, list]]:
    """The space searched, in its order (see the module docstring): each parallel shape (TP, CP, PP, DP, EP) with its
    settings, by micro batch: (micro batch, its (recompute, ZeRO stage, virtual pipeline) settings); virtual stages
    only where the framework has the ``interleaved`` schedule."""
    experts = arch.num_experts
    for world in gpu_counts(cluster):
        for tp in _powers(min(cluster.gpus_per_node, world)):
            for cp in _powers(min(MAX_CP, world // tp)):
                rest = world // (tp * cp)
                for pp in (p for p in range(1, min(rest, arch.num_layers) + 1) if rest % p == 0):
                    dp = rest // pp
                    eps = [e for e in _powers(dp * cp) if experts and experts % e == 0] if experts else [1]
                    settings = [(mb, [(rec, zero, v) for rec, zero in itertools.product(Recompute, zero_stages)
                                      for v in ((1, 2) if pp > 1 and interleaved else (1,))])
                                for mb in MICRO_BATCHES if not global_batch % (mb * dp)]
                    for ep in eps:
                        yield tp, cp, pp, dp, ep, settings


def _fields(tp: int, cp: int, pp: int, dp: int, ep: int, mb: int, rec: Recompute, zero: int, v: int,
            global_batch: int) -> dict:
    """One layout's fields (the schedule left for ``Layout`` to infer from ``v``)."""
    return dict(tensor_parallel=tp, context_parallel=cp, pipeline_parallel=pp, data_parallel=dp, expert_parallel=ep,
                sequence_parallel=tp > 1, recompute=rec, zero=zero, micro_batch_size=mb, global_batch_size=global_batch,
                virtual_pipeline=v)


def candidate_layouts(arch: Architecture, cluster: Cluster, global_batch: int, seq_len: int) -> list[dict]:
    """The layouts' fields, before validation, in the search's order (see the module docstring for the space)."""
    return [_fields(tp, cp, pp, dp, ep, mb, rec, zero, v, global_batch)
            for tp, cp, pp, dp, ep, settings in _space(arch, cluster, global_batch)
            for mb, of_mb in settings for rec, zero, v in of_mb]


def _cheapest_price(cluster: Cluster) -> float | None:
    prices = prices_for(cluster.gpu)
    return min((p.on_demand_usd_per_hour for p in prices), default=None)


def search_layouts(arch: Architecture, scenario: Scenario, cluster: Cluster, global_batch: int,
                   fp8: Fp8Recipe | None = None, usd_per_gpu_hour: float | None = None, master_weights: bool = True,
                   fused_kernels: bool = False, tp_comm_overlap: bool = False, dtensor_tp: bool = False,
                   dp_sync: DataParallelSync | None = None, async_tp_linears: bool = False,
                   zero_stages: tuple[int, ...] = ZERO_STAGES, methods: tuple[Method, ...] = ALL_METHODS,
                   cost_balanced_stages: bool = False, interleaved_schedule: bool = True,
                   framework_label: str = "the framework") -> list[Candidate]:
    """Every candidate layout with its verdict; the ones that fit first, fastest first. ``master_weights`` (default:
    the 16-bit model with fp32 master weights that Megatron-LM and torchtitan run): see
    :class:`engine.scaleout.memory.Context`; ``fused_kernels``, ``tp_comm_overlap``, ``dtensor_tp``, ``async_tp_linears``: the framework's
    settings as :func:`engine.scaleout.estimate.estimate_layout` takes them (:class:`engine.scaleout.frameworks.Framework`),
    with its own data-parallel sync (``dp_sync``: collectives and memory), the same for every layout searched;
    ``zero_stages``: the ZeRO stages the framework runs, the only ones tried; ``methods``: the fine-tuning methods it
    runs (:func:`engine.scaleout.estimate.check_method`); ``cost_balanced_stages``: pipeline layouts take the
    framework's cost-balanced split (:func:`engine.scaleout.stage_split.cost_balanced_layers`; one it cannot make is
    rejected with its reason), as :func:`engine.scaleout.estimate.estimate_layout` does; ``interleaved_schedule``:
    whether virtual stages are tried; ``framework_label``: the framework's name in a refusal.

    Raises:
        ScenarioError: a method the framework does not run, LoRA/QLoRA (model parallelism is modelled for full training) or a global batch below 1.
    """
    fp8 = Fp8Recipe.of(fp8)
    check_fp8_gpu(fp8, cluster.gpu)
    check_method(scenario.method, methods, framework_label)
    if scenario.method is not Method.FULL:
        raise ScenarioError("the layout search is for full training (Megatron-LM, torchtitan); LoRA/QLoRA: Memory page")
    if global_batch < 1:
        raise ScenarioError(f"global batch: must be at least 1 (got {global_batch})")
    price = usd_per_gpu_hour if usd_per_gpu_hour is not None else _cheapest_price(cluster)
    with _cyclic_gc_paused():
        return _ranked(_evaluated(arch, scenario, cluster, global_batch, fp8, price, master_weights,
                                  _Settings(fused_kernels, tp_comm_overlap, dtensor_tp, dp_sync, async_tp_linears,
                                            tuple(zero_stages), cost_balanced_stages, interleaved_schedule)))


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Python's cycle collector off while the search runs (back as it was after): the search keeps tens of thousands
    of small objects (layouts, candidates, memo entries) and makes no reference cycles, so the collections their
    allocations set off find nothing to free and only walk the heap again and again (10-15% of the search's time).
    Reference counting still frees everything the search drops."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _evaluated(arch: Architecture, scenario: Scenario, cluster: Cluster, global_batch: int, fp8: Fp8Recipe | None,
               price: float | None, master_weights: bool, fw: _Settings) -> list[Candidate]:
    """Every candidate of :func:`search_layouts`, in the order of the space."""
    usable = cluster.gpu.usable_memory_bytes
    too_big = f"(nvidia-smi), {usable / 2**30:.1f} GiB usable"
    contexts: dict[tuple, Context] = {}
    pool = SectionPool(arch)  # what the contexts' stage sections share
    seen_problems: dict[tuple, list[str]] = {}
    splits: dict[tuple[int, int], tuple[int, ...] | str] = {}  # the framework's split per (PP, DP), or why none
    steps = _Steps(arch, scenario, cluster, fp8, fw)
    out: list[Candidate] = []
    last = across_ep = None
    for tp, cp, pp, dp, ep, settings in _space(arch, cluster, global_batch, fw.zero_stages, fw.interleaved_schedule):
        stages = nccl = None  # alike for every setting of the shape (what dominant_stages and group_sizes read)
        shape: dict = {}  # what the shape's stage families share
        if (tp, cp, pp, dp) != last:  # and what the shapes that differ only in EP (one after the other) share
            last, across_ep = (tp, cp, pp, dp), {}
        template: Layout | None = None  # the shape's first valid layout
        for mb, of_mb in settings:
            # Alike for the micro batch's settings: the layout's problems for each v (problems_key reads none of
            # recompute and ZeRO stage) and, per gradient checkpointing, its context and the stage family.
            problems_of: dict[int, list[str]] = {}
            families: dict[bool, StageFamily] = {}
            for rec, zero, v in of_mb:
                if template is not None:  # the shape validated once: its other settings derived from it
                    layout = with_settings(template, mb, rec, zero, v)
                else:
                    fields = _fields(tp, cp, pp, dp, ep, mb, rec, zero, v, global_batch)
                    if fw.cost_balanced_stages and pp > 1:  # the framework's own split (engine.scaleout.stage_split)
                        if (pp, dp) not in splits:
                            splits[pp, dp] = _split_or_reason(arch, pp, pp * dp)
                        split = splits[pp, dp]
                        if isinstance(split, str):
                            out.append(_rejected(Layout.model_construct(**fields), split))
                            continue
                        fields["layers_per_stage"] = split
                    # The schedule Layout would infer, named (its validation is then cheaper; the same layout).
                    fields["schedule"] = Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B
                    try:
                        layout = template = validated_layout(fields)
                    except ValidationError as exc:
                        del fields["schedule"]  # the record of a layout that is not one, as it was given
                        out.append(_rejected(Layout.model_construct(**fields),
                                             exc.errors()[0]["msg"].removeprefix("Value error, ")))
                        continue
                problems = problems_of.get(v)
                if problems is None:
                    pkey = problems_key(layout)
                    problems = seen_problems.get(pkey)
                    if problems is None:
                        problems = seen_problems[pkey] = layout_problems(arch, layout, scenario.seq_len)
                    problems_of[v] = problems
                if problems:
                    out.append(_rejected(layout, problems[0]))
                    continue
                checkpointed = rec in CHECKPOINTED
                family = families.get(checkpointed)
                if family is None:
                    # What the one-GPU estimate reads of the layout (effective_scenario): the micro batch, gradient
                    # checkpointing (full recompute and op-level SAC) and whether there is gradient accumulation
                    # (its count does not enter; within a shape the micro batch sets it).
                    key = (mb, checkpointed, layout.micro_batches > 1)
                    ctx = contexts.get(key)
                    if ctx is None:
                        ctx = contexts[key] = Context(arch, effective_scenario(scenario, layout), fp8, master_weights,
                                                      fw.dp_sync)
                        pool.adopt(ctx)
                    if stages is None:
                        stages = dominant_stages(layout, ctx.uniform_blocks)
                        nccl = buffers.nccl_bytes(group_sizes(layout))
                    family = families[checkpointed] = StageFamily(ctx, layout, stages, shape, across_ep)
                ctx = family.ctx
                worst, worst_stage = family.most_loaded(layout)
                device = device_used_bytes(worst) + nccl
                if device > usable:
                    out.append(Candidate(layout, False, f"out of memory: stage {worst_stage} needs "
                                         f"{device / 2**30:.1f} GiB {too_big}", worst, device, worst_stage, None, None,
                                         None, None))
                    continue
                step_s, tokens = steps.of(layout, ctx, worst_stage)
                gpu_h = layout.world_size * step_s / 3600 / tokens * 1e6
                out.append(Candidate(layout, True, "", worst, device, worst_stage, step_s, tokens / step_s, gpu_h,
                                     gpu_h * price if price is not None else None))
    return out


def _split_or_reason(arch: Architecture, pp: int, ranks: int) -> tuple[int, ...] | str:
    """:func:`engine.scaleout.stage_split.cost_balanced_layers` of ``pp`` stages over ``ranks`` = PP x DP GPUs, or its
    refusal's message (the search asks once per (PP, DP): every shape and setting with them shares it)."""
    try:
        return cost_balanced_layers(arch, pp, ranks)
    except ScenarioError as exc:
        return str(exc)


def _ranked(candidates: list[Candidate]) -> list[Candidate]:
    """The ones that fit first, by (step time, peak), then the rest by peak: the stable sort by (not fits, step time or
    infinity, peak), the same order, faster (a layout that does not fit has no step time, one that fits has one, so
    each group compares on its own key alone)."""
    fits = [c for c in candidates if c.fits]
    rest = [c for c in candidates if not c.fits]
    fits.sort(key=_BY_TIME)
    rest.sort(key=_BY_PEAK)
    return fits + rest


_BY_TIME = itemgetter(Candidate._fields.index("step_s"), Candidate._fields.index("peak_allocated_bytes"))
_BY_PEAK = itemgetter(Candidate._fields.index("peak_allocated_bytes"))


class _Settings(NamedTuple):
    """The framework's settings of a search (:func:`search_layouts`)."""

    fused_kernels: bool = False
    tp_comm_overlap: bool = False
    dtensor_tp: bool = False
    dp_sync: DataParallelSync | None = None
    async_tp_linears: bool = False
    zero_stages: tuple[int, ...] = ZERO_STAGES
    cost_balanced_stages: bool = False
    interleaved_schedule: bool = True


class _Steps:
    """The step time of the search's layouts that fit (:func:`engine.scaleout.step_time.step_seconds`), with what
    layouts share kept for the search: the model-parallel and the data-parallel collectives each under the settings
    they read (the first not the ZeRO stage, the second not the micro batch or the recompute), each collective's
    seconds, and their sums per pair (:func:`~engine.scaleout.step_time.comm_sums` reads of the layout only the
    micro batches and ZeRO stage, one in each key)."""

    def __init__(self, arch: Architecture, scenario: Scenario, cluster: Cluster, fp8: Fp8Recipe | None,
                 settings: _Settings):
        self.arch, self.seq_len, self.cluster, self.fp8, self.settings = arch, scenario.seq_len, cluster, fp8, settings
        self._parts: dict[tuple, tuple[list[Collective], list[float]]] = {}
        self._sums: dict[tuple[int, int], CommSums] = {}
        self._timed: dict[Collective, float] = {}

    def of(self, layout: Layout, ctx: Context, stage: int) -> tuple[float, int]:
        """(step seconds, tokens per step) of ``layout``, its most loaded rank on pipeline stage ``stage``."""
        arch, cluster, cb, parts, st = self.arch, self.cluster, ctx.spec.compute_bytes, self._parts, self.settings
        gathers_fp8 = self.fp8 is not None and self.fp8.gathers_in_fp8
        mkey, dkey = (cb, model_parallel_key(layout, stage)), (cb, data_parallel_key(layout, stage))
        mp, dp = parts.get(mkey), parts.get(dkey)
        if mp is None:
            mp = parts[mkey] = self._timed_list(model_parallel_collectives(
                arch, layout, ctx.split, self.seq_len, cb, cluster.gpus_per_node, stage, dtensor_tp=st.dtensor_tp,
                fp8_tp_all_gather=st.dtensor_tp and gathers_fp8))
        if dp is None:
            dp = parts[dkey] = self._timed_list(data_parallel_collectives(
                arch, layout, ctx.split, cb, cluster.gpus_per_node, stage, gathers_fp8, sync=st.dp_sync))
        pair = (id(mp), id(dp))  # both kept in parts for the whole search: their ids stay theirs
        sums = self._sums.get(pair)
        if sums is None:
            sums = self._sums[pair] = comm_sums(mp[0] + dp[0], mp[1] + dp[1], layout, st.tp_comm_overlap,
                                                overlap_tp_all_gathers=self.fp8 is None or self.fp8.fuses_tp_all_gathers,
                                                async_tp_linears=st.async_tp_linears)
        held = ctx.stage(layout, stage).local  # the rank's parameters (engine.scaleout.partition)
        return step_seconds(arch, layout, cluster, sums, ctx, held, self.fp8, fused_kernels=st.fused_kernels)

    def _timed_list(self, cols: list[Collective]) -> tuple[list[Collective], list[float]]:
        """``cols`` and their :func:`collective_seconds`, each collective timed once per search."""
        timed, out = self._timed, []
        for col in cols:
            s = timed.get(col)
            if s is None:
                s = timed[col] = collective_seconds(col, self.cluster)
            out.append(s)
        return cols, out


def dominant_stages(layout: Layout, uniform_blocks: bool = True) -> tuple[int, ...]:
    """Stages that can hold the most loaded rank of an even split of alike blocks: the first and the last.

    With the remainder layers on the first stages (:meth:`Layout.stage_layers`), a middle stage has at most the
    first stage's layers, at most its micro batches in flight (1F1B: PP - r; interleaved: decreasing in r; GPipe:
    equal), no embedding, no logits and the same buffers, so stage 0 holds at least as much in every component; the
    last stage holds the output layer and the loss. (``tests/scaleout`` checks this against every stage.) Blocks
    that are not alike (``uniform_blocks`` False, :attr:`ParameterSplit.uniform_blocks`: DeepSeek's dense first
    layers, lighter than its MoE blocks) or a given split: every stage."""
    p = layout.pipeline_parallel
    if layout.layers_per_stage is not None or not uniform_blocks:
        return tuple(range(p))
    return (0,) if p == 1 else (0, p - 1)


def _rejected(layout: Layout, reason: str) -> Candidate:
    return Candidate(layout, False, reason, 0.0, 0.0, 0, None, None, None, None)


def pareto_front(candidates: list[Candidate]) -> list[Candidate]:
    """The fitting layouts no other beats on both time per token and cost per token (GPU-hours when unpriced)."""
    fits = [c for c in candidates if c.fits and c.tokens_per_second]
    cost = (lambda c: c.usd_per_million_tokens) if all(c.usd_per_million_tokens is not None for c in fits) \
        else (lambda c: c.gpu_hours_per_million_tokens)
    front, best_cost = [], float("inf")
    for c in sorted(fits, key=lambda c: (1 / c.tokens_per_second, cost(c))):
        if cost(c) < best_cost:
            front.append(c)
            best_cost = cost(c)
    return front


def rejection_summary(candidates: list[Candidate]) -> dict[str, int]:
    """How many layouts fail for each kind of reason (the reason's text before any number), most common first."""
    counts: dict[str, int] = {}
    for c in candidates:
        if c.fits:
            continue
        kind = c.reason.split(":")[0] if c.reason.startswith("out of memory") else c.reason
        counts[kind] = counts.get(kind, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))
