"""Communication of one training step of a layout: every collective's message size, count, group and link, and the
pipeline bubble. Pure functions, no timing: :mod:`engine.scaleout.step_time` turns them into seconds with
:mod:`engine.time.collectives`.

``message_bytes`` is the full (unsharded) tensor M of the collective, as NCCL's and nccl-tests' conventions count
it; a ring over n ranks moves 2(n-1)/n M per rank for an all-reduce and (n-1)/n M for an all-gather,
reduce-scatter or all-to-all (:func:`ring_bytes_per_rank`). Counts are per step (all micro batches) on one rank of
the most loaded pipeline stage. Sources (comms_and_pp notes of the research, restated):

- **TP** (Shoeybi et al. 2019 sec. 3; Megatron ``tensor_parallel/mappings.py``): per block and micro batch, 2
  all-reduces of (s/CP) b h forward and 2 backward; with sequence parallelism each becomes an all-gather +
  reduce-scatter pair (same volume, Korthikanti et al. 2022 sec. 4.2.2) and backward all-gathers each
  column-parallel input once more for the weight gradient (``LinearWithGradAccumulationAndAsyncCommunication``);
  full recompute repeats the forward's. Vocabulary-parallel embedding: one all-reduce per micro batch (first
  stage).
- **CP** (Megatron ``context_parallel.md``; Llama 3 sec. 3.3.2): the keys and values of every block are gathered
  across the CP ranks in forward (ring p2p or all-gather: K and V of (s) b x kv heads x head_dim / TP) and again
  in backward with a reduce-scatter of their gradients.
- **EP** (Megatron MoE README): per MoE block and micro batch 2 all-to-alls forward (dispatch, combine) and 2
  backward of T x top-k tokens x h.
- **PP** (Narayanan et al. 2021): per micro batch one activation forward and one gradient backward across each
  stage boundary, (s/CP) b h (/ TP with SP), v times with v model chunks. A tied embedding / output weight lives on
  the first and the last stage: after the last backward its fp32 gradient (/ TP) is all-reduced between the two,
  blocking (nanotron@e24d2483 ``trainer.py`` ``sync_tied_weights_gradients`` on the fp32 accumulator's buffer, "Put
  this in hooks so we can overlap" still a TODO; Megatron-LM ``finalize_model_grads`` ``_allreduce_word_embedding_grads``).
- **DP** (Rajbhandari et al. 2020 sec. 7): DDP all-reduces the gradients once per step (fp32 main grads in
  Megatron); ZeRO-1 / the distributed optimizer reduce-scatters them and all-gathers the updated bf16 weights;
  ZeRO-3 / FSDP all-gathers the weights in forward and backward of every micro batch and reduce-scatters the
  gradients (with PP, as torchtitan runs it, once per step: the stage stays gathered and its gradients accumulate
  unsharded, :mod:`engine.scaleout.memory`). FSDP runs these as one call per FSDP unit, each paying the ring's
  latency (which over hundreds of ranks is ~1 ms a call): torchtitan and llm-foundry wrap every transformer block
  as its own unit and the model as the root (embedding, final norm, head), so a stage of L blocks has L + 1 units
  ("fully_shard groups parameters together for a single all-gather", applied per block: PyTorch
  ``torch.distributed.fsdp.fully_shard`` docs; torchtitan ``apply_fsdp``; llm-foundry@8c8dd48f
  ``models/mpt/modeling_mpt.py`` ``_fsdp_wrap_fn`` wraps each ``MPTBlock``); per micro batch every unit gathers in
  forward, every unit but the root again in backward ("The root FSDP state has its value [reshard_after_forward]
  specially set to False", ``fully_shard``'s docstring), and every unit reduce-scatters its gradients: 2L + 1
  all-gathers and L + 1 reduce-scatters. Over DP x CP (CP ranks hold the same weights); experts over their own
  expert-DP group.
  A framework that syncs otherwise says how with a :class:`DataParallelSync` (bucketed DDP calls; ZeRO-1 gradients
  all-reduced and weights gathered outside the pipelined compute).
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Literal, NamedTuple

from engine.model.architecture import Architecture
from engine.scaleout.layout import Layout, Recompute, Schedule
from engine.scaleout.partition import ParameterSplit

Kind = Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p"]


class Link(str, Enum):
    """Where a process group's ranks talk: inside a node (NVLink or PCIe) or across nodes (the network)."""

    INTRA_NODE = "intra_node"
    INTER_NODE = "inter_node"


class Collective(NamedTuple):
    """One kind of collective of a step: ``count`` calls of ``message_bytes`` over ``group_size`` ranks on ``link``.

    ``dimension`` is the parallelism it belongs to (tp, cp, ep, pp, dp); ``overlapped`` says whether frameworks
    run it concurrently with compute by default (DP gradient buckets, FSDP prefetch, the CP ring), as opposed to
    on the critical path (TP, EP all-to-all, PP boundaries). ``ranks_per_node``: how many of the group's ranks share
    a node (a ring over k nodes crosses the network k times: :func:`engine.time.collectives.data_parallel_link`).
    ``after_step``: it runs blocking outside the pipelined compute (after the last backward or the optimizer step),
    so nothing hides it; ``host_ops``: host-launched ops per call around the collective (a framework's Python loop
    copying each gathered slice into its tensor), each at :data:`engine.time.overhead.SECONDS_PER_KERNEL`.
    ``beside``: for the sequence-parallel TP collectives, the GEMM an asynchronous TP linear runs the call beside
    (:data:`TP_WINDOWS`; "" for the ones it runs blocking), one call per block for attention and one for the MLP."""

    dimension: str
    name: str
    kind: Kind
    message_bytes: float
    count: int
    group_size: int
    link: Link
    overlapped: bool
    source: str
    ranks_per_node: int = 1
    after_step: bool = False
    host_ops: int = 0
    beside: str = ""

    @property
    def bytes_per_rank(self) -> float:
        """Bytes one rank sends for all ``count`` calls (ring algorithms)."""
        return self.count * ring_bytes_per_rank(self.kind, self.message_bytes, self.group_size)


class DataParallelSync(NamedTuple):
    """How a framework runs its data-parallel gradient sync where it is not the default of
    :func:`data_parallel_collectives` (one overlapped call per collective, ZeRO-1 as a reduce-scatter + all-gather).

    - ``bucket_bytes``: 16-bit gradient bytes per DDP bucket (PyTorch ``DistributedDataParallel(bucket_cap_mb=25)``,
      its default): the all-reduce is one call per bucket, each paying NCCL's ring latency
      (:func:`engine.time.collectives.all_reduce_seconds` ``calls``), which over 100+ ranks is ~1 ms a call.
    - ``zero1_all_reduce``: under ZeRO-1 the gradients are all-reduced (not reduce-scattered) after the last backward
      and the updated 16-bit weights all-gathered after the optimizer step, both blocking (``after_step``).
    - ``gather_copies``: that all-gather is wrapped in a Python loop copying each rank's slice of each parameter
      tensor into place: tensors x ranks host ops per call (``host_ops``), ``tensors_per_layer`` tensors per block
      (+ the embedding on the first stage, the final norm and head on the last).
    - ``half_gradients_per_backward``: the gradients accumulate in an fp32 buffer outside autograd, so every micro
      batch's backward materialises the 16-bit ``.grad`` of each of the rank's parameters, adds them into the buffer
      and frees them.

    The same facts set what the sync holds in memory (:mod:`engine.scaleout.memory`, sizes in
    :mod:`engine.scaleout.buffers`): ``bucket_bytes`` is PyTorch DDP, whose reducer keeps a flat 16-bit copy of every
    gradient in its buckets (ZeRO-0, DP x CP > 1); ``gather_copies`` is an all-gather through flattened copies of the
    rank's slices and of every rank's (16-bit, at the optimizer step); ``half_gradients_per_backward``: the 16-bit
    gradients at the end of each micro batch's backward.
    """

    bucket_bytes: float | None = None
    zero1_all_reduce: bool = False
    gather_copies: bool = False
    tensors_per_layer: int = 0
    half_gradients_per_backward: bool = False


TP_WINDOWS = ("column_forward", "column_dgrad", "column_wgrad", "row_dgrad")
"""The GEMMs nanotron's asynchronous TP linears (``tp_linear_async_communication`` with ``tp_mode:
REDUCE_SCATTER``) run a sequence-parallel collective beside, read in huggingface/nanotron@e24d2483
``src/nanotron/parallel/tensor_parallel/functional.py`` (``CUDA_DEVICE_MAX_CONNECTIONS=1`` orders the launches):

- ``column_forward``: ``_ColumnLinearAsyncCommunication.forward`` starts the input all-gather (``async_op=True``) and
  meanwhile multiplies only the rank's own input shard (``same_device_shard``: 1/TP of the tokens) before
  ``handle.wait()``; the other shards' GEMMs need the gathered input. Window: 1/TP of the linear's forward GEMM.
- ``column_dgrad``: its backward re-gathers the input (``tp_recompute_allgather``, default True) asynchronously while
  ``grad_output.matmul(weight)`` computes the input gradient. Window: the whole input-gradient GEMM.
- ``column_wgrad``: the input gradient's ``reduce_scatter_tensor(async_op=True)`` runs while
  ``grad_output.t().matmul(total_tensor)`` computes the weight gradient. Window: the whole weight-gradient GEMM.
- ``row_dgrad``: ``_RowLinearAsyncCommunication.backward`` starts the output-gradient all-gather and meanwhile
  computes only the rank's own shard of the input gradient; the weight gradient needs the gathered gradient.
  Window: 1/TP of the input-gradient GEMM.

The row-parallel forward reduce-scatter (``differentiable_reduce_scatter_sum`` right after ``F.linear``) is blocking
in both paths; so are the vocabulary-parallel embedding's and the loss's collectives."""


def _stage_tensors(sync: DataParallelSync, n_layers: int, stage: int, stages: int) -> int:
    """Parameter tensors one rank of ``stage`` holds, as :class:`DataParallelSync` counts them."""
    return n_layers * sync.tensors_per_layer + (1 if stage == 0 else 0) + (2 if stage == stages - 1 else 0)


def ring_bytes_per_rank(kind: Kind, message_bytes: float, n: int) -> float:
    """Bytes one rank sends in one ring collective over ``n`` ranks (p2p: the message itself)."""
    if kind == "p2p":
        return message_bytes
    if n <= 1:
        return 0.0
    factor = 2.0 * (n - 1) / n if kind == "all_reduce" else (n - 1) / n
    return factor * message_bytes


def group_link(stride: int, size: int, gpus_per_node: int) -> Link:
    """Link of a group of ``size`` ranks ``stride`` apart: inside a node when it spans at most one node's GPUs.

    Rank order (fastest-varying first) TP, CP, DP, PP, Megatron's default ``--order tp-cp-ep-dp-pp``; EP groups
    are consecutive after expert-TP."""
    return Link.INTRA_NODE if stride * size <= gpus_per_node else Link.INTER_NODE


def ranks_per_node(stride: int, size: int, gpus_per_node: int) -> int:
    """Ranks of a group of ``size`` ranks ``stride`` apart that sit in one node (same rank order as :func:`group_link`)."""
    return max(1, min(size, gpus_per_node // stride))


def bubble_fraction(layout: Layout) -> float:
    """Fraction of the step a pipeline stage idles: (PP - 1) / (v m + PP - 1) for 1F1B and GPipe (v = 1), with v model
    chunks per rank for the interleaved schedule (Narayanan et al. 2021 sec. 2.2: bubble / ideal = (PP - 1) / (v m))."""
    p, m = layout.pipeline_parallel, layout.micro_batches
    v = layout.virtual_pipeline if layout.schedule is Schedule.INTERLEAVED else 1
    return (p - 1) / (v * m + p - 1) if p > 1 else 0.0


def model_parallel_key(layout: Layout, stage: int) -> tuple:
    """Every setting :func:`model_parallel_collectives` reads of ``layout`` for pipeline stage ``stage``: for one
    model, sequence, compute dtype and node size, equal keys give equal collectives (the layout search memoises
    them; keep the two in step)."""
    return (layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel, layout.data_parallel,
            layout.expert_parallel, layout.expert_tensor_parallel, layout.micro_batches, layout.micro_batch_size,
            layout.layers_per_stage, layout.recompute is Recompute.FULL, layout.sequence_parallel,
            layout.moe_capacity_factor, layout.virtual_pipeline if layout.schedule is Schedule.INTERLEAVED else 1, stage)


def data_parallel_key(layout: Layout, stage: int) -> tuple:
    """Every setting :func:`data_parallel_collectives` reads of ``layout`` for pipeline stage ``stage`` (the micro
    batches only for FSDP without PP, which gathers every micro batch), as :func:`model_parallel_key`."""
    p, zero = layout.pipeline_parallel, layout.zero
    return (layout.tensor_parallel, p, layout.context_parallel, layout.data_parallel, layout.expert_parallel,
            layout.expert_tensor_parallel, layout.layers_per_stage, zero,
            layout.micro_batches if zero == 3 and p == 1 else 0, stage)


def step_collectives(arch: Architecture, layout: Layout, split: ParameterSplit, seq_len: int, compute_bytes: int,
                     gpus_per_node: int, stage: int = 0, fp8_all_gather: bool = False,
                     trainable_fraction: float = 1.0, dtensor_tp: bool = False,
                     dp_sync: DataParallelSync | None = None) -> list[Collective]:
    """Every collective one rank of pipeline stage ``stage`` runs in one step (see the module docstring): the
    tensor, context, expert and pipeline parallel ones, then the data parallel ones.

    ``fp8_all_gather``: FSDP2 float8 all-gather (torchao tensorwise) moves the block linears' weights in 1 byte instead
    of 2 (the embedding, output layer, norms and experts stay 16-bit).
    ``trainable_fraction``: the share of the parameters that has gradients (1 for full training; LoRA's adapters
    / all parameters): only those are reduced (DDP and FSDP reduce the gradients of ``requires_grad`` parameters).
    ``dtensor_tp``: PyTorch DTensor tensor parallelism (torchtitan), see :func:`model_parallel_collectives`.
    ``dp_sync``: the framework's data-parallel sync where it is not the default (:class:`DataParallelSync`)."""
    return (model_parallel_collectives(arch, layout, split, seq_len, compute_bytes, gpus_per_node, stage,
                                       dtensor_tp=dtensor_tp, fp8_tp_all_gather=dtensor_tp and fp8_all_gather)
            + data_parallel_collectives(arch, layout, split, compute_bytes, gpus_per_node, stage, fp8_all_gather,
                                        trainable_fraction, dp_sync))


def model_parallel_collectives(arch: Architecture, layout: Layout, split: ParameterSplit, seq_len: int,
                               compute_bytes: int, gpus_per_node: int, stage: int = 0, dtensor_tp: bool = False,
                               fp8_tp_all_gather: bool = False) -> list[Collective]:
    """The TP, CP, EP and PP collectives of :func:`step_collectives`.

    ``dtensor_tp``: sequence-parallel TP as PyTorch DTensor runs it (torchtitan's ``ColwiseParallel`` /
    ``RowwiseParallel`` plan): autograd keeps the all-gathered input of each column-parallel matmul for its weight
    gradient, so backward does not gather it again (Megatron saves the local shard and re-gathers,
    ``LinearWithGradAccumulationAndAsyncCommunication``). ``fp8_tp_all_gather``: torchao float8's TP plan
    (``Float8ColwiseParallel`` / ``PrepareFloat8ModuleInput``, tensorwise scaling) casts the column-parallel inputs to
    FP8 before the forward all-gather: 1 byte per element instead of 2 (forward and recompute; backward's stay 16-bit)."""
    t, p, c, d = layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel, layout.data_parallel
    e, et = layout.expert_parallel, layout.expert_tensor_parallel
    m, b, h, B = layout.micro_batches, layout.micro_batch_size, arch.hidden_size, compute_bytes
    layers = layout.stage_layers(arch.num_layers)
    first, n_layers = sum(layers[:stage]), layers[stage]
    tokens = seq_len * b / c
    act = tokens * h * B
    full = layout.recompute is Recompute.FULL
    out: list[Collective] = []
    tp_link, tp_rpn = group_link(1, t, gpus_per_node), ranks_per_node(1, t, gpus_per_node)
    if t > 1:
        fwd = 2 * n_layers * m * (2 if full else 1)
        if layout.sequence_parallel and dtensor_tp:
            fwd_act = act / B if fp8_tp_all_gather else act
            out.append(Collective("tp", "sequence-parallel input all-gathers (fwd" + (", FP8)" if fp8_tp_all_gather else ")"),
                                  "all_gather", fwd_act, fwd, t, tp_link, False,
                                  "torch.distributed.tensor.parallel ColwiseParallel; torchao Float8ColwiseParallel", tp_rpn))
            out.append(Collective("tp", "sequence-parallel output-gradient all-gathers (bwd)", "all_gather", act,
                                  2 * n_layers * m, t, tp_link, False, "torch.distributed.tensor.parallel RowwiseParallel", tp_rpn))
        elif layout.sequence_parallel:
            # One call per block for attention and one for the MLP of each: the column-parallel inputs gathered in
            # forward (and recompute), re-gathered in backward for the weight gradient, the row-parallel output
            # gradients gathered in backward; the row outputs reduce-scattered in forward, the column input gradients
            # in backward. Each tagged with the GEMM an asynchronous TP linear runs it beside (TP_WINDOWS).
            bwd = 2 * n_layers * m
            for name, kind, count, beside, src in (
                    ("sequence-parallel all-gathers (column inputs, fwd" + (" + recompute)" if full else ")"),
                     "all_gather", fwd, "column_forward", "Megatron tensor_parallel/mappings.py"),
                    ("sequence-parallel all-gathers (column inputs re-gathered for wgrad, bwd)", "all_gather", bwd,
                     "column_dgrad", "Megatron tensor_parallel/layers.py"),
                    ("sequence-parallel all-gathers (row output gradients, bwd)", "all_gather", bwd, "row_dgrad",
                     "Megatron tensor_parallel/mappings.py"),
                    ("sequence-parallel reduce-scatters (row outputs, fwd" + (" + recompute)" if full else ")"),
                     "reduce_scatter", fwd, "", "Megatron tensor_parallel/mappings.py"),
                    ("sequence-parallel reduce-scatters (column input gradients, bwd)", "reduce_scatter", bwd,
                     "column_wgrad", "Megatron tensor_parallel/mappings.py")):
                out.append(Collective("tp", name, kind, act, count, t, tp_link, False, src, tp_rpn, beside=beside))
        else:
            out.append(Collective("tp", "tensor-parallel all-reduces (2 fwd + 2 bwd per block)", "all_reduce", act,
                                  fwd + 2 * n_layers * m, t, tp_link, False, "Shoeybi et al. 2019 sec. 3", tp_rpn))
        if stage == 0:
            out.append(Collective("tp", "vocabulary-parallel embedding all-reduce", "all_reduce", act, m, t, tp_link,
                                  False, "Megatron VocabParallelEmbedding", tp_rpn))
    if c > 1:
        kv = seq_len * b * 2 * arch.kv_out / t * B
        cp_link, cp_rpn = group_link(t, c, gpus_per_node), ranks_per_node(t, c, gpus_per_node)
        out.append(Collective("cp", "context-parallel key/value all-gathers (fwd, bwd)", "all_gather", kv,
                              n_layers * m * (3 if full else 2), c, cp_link, True, "Megatron context_parallel.md; Llama 3 sec. 3.3.2",
                              cp_rpn))
        out.append(Collective("cp", "context-parallel key/value gradient reduce-scatters", "reduce_scatter", kv,
                              n_layers * m, c, cp_link, True, "Megatron context_parallel.md", cp_rpn))
    if arch.num_experts and e > 1:
        moe_layers = _block_sums(split, first, n_layers)[3]
        msg = tokens / (t if layout.sequence_parallel else 1) * arch.experts_per_token * h * B
        cf = layout.moe_capacity_factor or 1.0
        out.append(Collective("ep", "expert all-to-alls (dispatch + combine, fwd + bwd)", "all_to_all", msg * cf,
                              4 * moe_layers * m + (2 * moe_layers * m if full else 0), e, group_link(et, e, gpus_per_node),
                              False, "Megatron MoE README (alltoall token dispatcher)", ranks_per_node(et, e, gpus_per_node)))
    if p > 1:
        v = layout.virtual_pipeline if layout.schedule is Schedule.INTERLEAVED else 1
        msg = act / (t if layout.sequence_parallel else 1)
        out.append(Collective("pp", "pipeline send/recv (activations fwd, gradients bwd)", "p2p", msg, 2 * m * v, 2,
                              group_link(t * c * d, p, gpus_per_node), False, "Narayanan et al. 2021; Megatron p2p_communication.py",
                              ranks_per_node(t * c * d, p, gpus_per_node)))
        if split.tied and stage in (0, p - 1):
            stride = (p - 1) * t * c * d  # the same position on the first and the last stage
            out.append(Collective("pp", "tied embedding gradient all-reduce (first and last stage, fp32)", "all_reduce",
                                  split.vocab_embedding / t * 4, 1, 2, group_link(stride, 2, gpus_per_node), False,
                                  "nanotron sync_tied_weights_gradients; Megatron-LM _allreduce_word_embedding_grads",
                                  ranks_per_node(stride, 2, gpus_per_node), True))
    return out


def data_parallel_collectives(arch: Architecture, layout: Layout, split: ParameterSplit, compute_bytes: int,
                              gpus_per_node: int, stage: int = 0, fp8_all_gather: bool = False,
                              trainable_fraction: float = 1.0, sync: DataParallelSync | None = None) -> list[Collective]:
    """The data-parallel collectives of :func:`step_collectives` (dense and expert gradients, weight gathers; the
    gradients of ``trainable_fraction`` of the parameters), run as ``sync`` says (default: :class:`DataParallelSync`'s
    defaults)."""
    sync = sync or DataParallelSync()
    g = trainable_fraction
    t, p, c, d = layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel, layout.data_parallel
    e, et, m, B = layout.expert_parallel, layout.expert_tensor_parallel, layout.micro_batches, compute_bytes
    layers = layout.stage_layers(arch.num_layers)
    first, n_layers = sum(layers[:stage]), layers[stage]
    tp_params, replicated, experts, _ = _block_sums(split, first, n_layers)
    out: list[Collective] = []
    # The dense parameters this rank holds, as ParameterSplit.stage_parameters counts them: a tied head is the
    # embedding itself on a one-stage model (moved once), a copy on the last stage with PP.
    dense = split.stage_parameters(first, first + n_layers, stage, p, t, e * et) - experts / (e * et)
    expert = experts / (e * et)
    # Bytes of one gather of the weights: in FP8 only the block linears' (the TP-sharded weights) move 1 byte: the
    # float8 all-gather is a property of Float8Linear's weight (torchao float8 fsdp_utils), and torchtitan's converter
    # leaves the output layer out; the embedding, the norms and the experts' grouped weights stay 16-bit.
    gathered = {"dense": dense * B - (tp_params / t * (B - 1) if fp8_all_gather else 0.0), "expert": expert * B}
    for label, params, n, stride in (("dense", dense, d * c, t), ("expert", expert, d * c // e, t * e)):
        if n <= 1 or params <= 0:
            continue
        link, rpn = group_link(stride, n, gpus_per_node), ranks_per_node(stride, n, gpus_per_node)
        units = n_layers + 1  # FSDP units: one per block + the root (embedding, final norm, head); see the module doc
        if layout.zero == 3 and p > 1:
            # torchtitan + PP: reshard_after_forward=False and no gradient sync until the last micro batch (see
            # engine.scaleout.memory): one all-gather of the stage and one reduce-scatter per step, one call per unit.
            out.append(Collective("dp", f"FSDP weight all-gather ({label}, once per step with PP, {units} units)",
                                  "all_gather", gathered[label] / units, units, n, link, True,
                                  "torchtitan apply_fsdp (pp_enabled), 9dec370", rpn))
            out.append(Collective("dp", f"FSDP gradient reduce-scatter ({label}, fp32, last micro batch, {units} units)",
                                  "reduce_scatter", params * 4 * g / units, units, n, link, True,
                                  "torch.distributed.pipelining backward_maybe_with_nosync", rpn))
        elif layout.zero == 3:
            # Per micro batch: every unit gathers in forward, every unit but the root again in backward (the root is
            # not resharded after forward), every unit reduce-scatters its gradients (module docstring).
            gathers = 2 * units - 1
            out.append(Collective("dp", f"FSDP weight all-gathers ({label}, fwd + bwd each micro batch, {units} units)",
                                  "all_gather", 2 * gathered[label] / gathers, gathers * m, n, link, True,
                                  "PyTorch FSDP2 fully_shard per block; Rajbhandari et al. 2020 sec. 7", rpn))
            out.append(Collective("dp", f"FSDP gradient reduce-scatters ({label}, fp32, {units} units)", "reduce_scatter",
                                  params * 4 * g / units, units * m, n, link, True,
                                  "torchtitan mixed_precision_reduce float32", rpn))
        elif layout.zero == 1 and sync.zero1_all_reduce:
            copies = _stage_tensors(sync, n_layers, stage, p) * n if sync.gather_copies else 0
            out.append(Collective("dp", f"gradient all-reduce ({label}, fp32, after the last backward)", "all_reduce",
                                  params * 4 * g, 1, n, link, False, "DataParallelSync.zero1_all_reduce", rpn, True))
            out.append(Collective("dp", f"updated weight all-gather ({label}, bf16, after the optimizer step)", "all_gather",
                                  params * 2 * g, 1, n, link, False, "DataParallelSync.zero1_all_reduce", rpn, True, copies))
        elif layout.zero in (1, 2):  # ZeRO-2 reduce-scatters the same gradients into partitions it keeps
            out.append(Collective("dp", f"gradient reduce-scatter ({label}, fp32)", "reduce_scatter", params * 4 * g, 1, n, link,
                                  True, "Megatron distributed optimizer" if layout.zero == 1 else
                                  "Rajbhandari et al. 2020 sec. 7 (ZeRO-2: P_os+g)", rpn))
            out.append(Collective("dp", f"updated weight all-gather ({label}, bf16)", "all_gather", params * 2 * g, 1, n, link,
                                  True, "Megatron distributed optimizer (--overlap-param-gather)", rpn))
        elif sync.bucket_bytes:
            calls = max(1, math.ceil(params * B * g / sync.bucket_bytes))
            out.append(Collective("dp", f"gradient all-reduce ({label}, fp32, {calls} DDP buckets)", "all_reduce",
                                  params * 4 * g / calls, calls, n, link, True, "PyTorch DDP bucket_cap_mb", rpn))
        else:
            out.append(Collective("dp", f"gradient all-reduce ({label}, fp32)", "all_reduce", params * 4 * g, 1, n, link, True,
                                  "Megatron DDP (--overlap-grad-reduce)", rpn))
    return out


_BLOCK_SUMS: dict[tuple[int, int, int], tuple[ParameterSplit, tuple[float, float, float, int]]] = {}


def _block_sums(split: ParameterSplit, first: int, n: int) -> tuple[float, float, float, int]:
    """(TP-sharded, replicated and expert parameters of blocks ``first .. first + n - 1``, how many of them hold
    experts), remembered per split (kept beside its id, so the id is not reused while the entry lives) and range:
    the layout search asks for the same stages again and again."""
    key = (id(split), first, n)
    hit = _BLOCK_SUMS.get(key)
    if hit is not None and hit[0] is split:
        return hit[1]
    last = first + n
    sums = (sum(split.tp_per_block[first:last]), sum(split.replicated_per_block[first:last]),
            sum(split.expert_per_block[first:last]), sum(1 for i in range(first, last) if split.expert_per_block[i] > 0))
    if len(_BLOCK_SUMS) >= 4096:
        _BLOCK_SUMS.clear()
    _BLOCK_SUMS[key] = (split, sums)
    return sums
