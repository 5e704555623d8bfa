"""Peak memory of every pipeline stage of a TP x PP x CP x EP x DP layout, per rank, by named component, in bytes.

Built on the one-GPU estimate (:func:`engine.memory.estimate.estimate_memory`, the same scenario with the layout's
micro batch, its micro batches as gradient accumulation steps and full recompute as gradient checkpointing): each
of its components is divided the way the layout divides it, and the layout's buffers are added. With TP = PP = CP
= EP = DP = 1 every factor is 1 and the result is the one-GPU estimate (``tests/scaleout`` checks it).

- **model states** (weights, autocast copies, gradients, optimizer states and step temporaries): the rank's share
  of the parameters (:mod:`engine.scaleout.partition`: TP-sharded linears and vocabulary / TP, replicated norms
  and router, experts / (EP x expert-TP), the stage's blocks, embeddings on the first stage, head on the last);
  optimizer states, their step temporaries and (mixed precision) the fp32 master weights / (DP x CP) with ZeRO-1 /
  the distributed optimizer, the gradients too with ZeRO-2 / FSDP SHARD_GRAD_OP, everything / (DP x CP) with ZeRO-3 / FSDP (Rajbhandari et al. 2020, sec. 5; Megatron
  ``docs/user-guide/features/dist_optimizer.md``: 6 + 12/d bytes per parameter).
- **activations** (Korthikanti et al. 2022, sec. 4): the block's saved tensors from
  :func:`engine.memory.activations.block_activations`, the attention and MLP inner tensors / TP, the norm region and
  the linears' inputs / TP only with sequence parallelism (without it they are whole on every TP rank: the "10" in
  sbh(10 + 24/t)); everything / CP (CP splits every activation along the sequence); selective recompute drops the
  s x s attention scores; full recompute keeps each block's input (/ TP with SP) and recomputes one block at a time;
  torchtitan's op-level selective checkpointing keeps each block's input and the outputs of its saved ops
  (:mod:`engine.scaleout.recompute`) and also recomputes one block at a time.
- **pipeline**: stage r holds the activations of min(PP - r, m) micro batches under 1F1B (Megatron's warm-up of
  PP - r - 1 forwards, Korthikanti eq. 5: the first stage stores L layers' worth, the last one micro batch), of
  min(2(PP - r - 1) + (v - 1)PP + 1, m v) model chunks of L/(PP v) layers interleaved (Megatron ``schedules.py``
  warm-up; the first stage gets Korthikanti's 1 + (PP - 1)/(PP v)), and of all m with GPipe. The last stage holds
  the logits and loss (vocabulary-parallel cross-entropy: / TP) of the micro batches whose last-chunk forward has
  finished and whose backward has not freed them: one under 1F1B and interleaved 1F1B (:func:`logits_in_flight`), m
  with GPipe.
- **ZeRO-3 / FSDP** (PyTorch FSDP2 ``fully_shard`` as torchtitan applies it, ``apply_fsdp`` in
  ``parallelize_llama.py`` at 9dec370): with mixed precision the sharded parameter is the fp32 one
  (``MixedPrecisionPolicy(param_dtype=bf16)`` casts at the all-gather), so there is no sharded 16-bit copy:
  fp32 weights + fp32 gradients + Adam = 16 B per parameter / (DP x CP) (DeepSpeed ZeRO-3 also keeps a 16-bit
  partition, 2 B / N more, not modelled). Gathered in the compute dtype (1 B with torchao's float8 all-gather):
  without PP the block in use and the one prefetched, plus the root module (embeddings, final norm, output
  layer), which FSDP2 never reshards after forward (``FSDPState._lazy_init``: "For the root, do not reshard after
  forward"); with PP the whole stage, since torchtitan sets ``reshard_after_forward=False`` for every block when
  PP is on ("to avoid per-microbatch all-gathers") and ``torch.distributed.pipelining``'s
  ``PipelineStage.backward_maybe_with_nosync`` runs every micro batch's backward with
  ``set_reshard_after_backward(False)`` and ``set_requires_gradient_sync(False)``, so the stage's gradients
  accumulate unsharded in the fp32 reduce dtype (``FSDPParam.to_accumulated_grad_if_needed``) until the last
  micro batch's reduce-scatter.
- **buffers**: :mod:`engine.scaleout.buffers`; FP8 copies: :mod:`engine.scaleout.fp8`.
- **a framework's DP sync** (the :class:`engine.scaleout.comm_volumes.DataParallelSync` that sets its collectives):
  DDP's bucket copy of the gradients, flattened all-gather copies, 16-bit gradients before an fp32 accumulator
  (:mod:`engine.scaleout.buffers`). The default sync holds none.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, NamedTuple

from pydantic import BaseModel, ConfigDict

from engine.errors import ScenarioError
from engine.memory.activations import BlockActivations, block_activations
from engine.memory.components import MemoryComponent, Phase, step_phases
from engine.memory.device import device_memory
from engine.memory.estimate import estimate_memory
from engine.memory.result import MemoryEstimate
from engine.model.architecture import Architecture
from engine.scaleout import buffers, recompute
from engine.scaleout.comm_volumes import DataParallelSync
from engine.scaleout.fp8 import Fp8Recipe, fp8_scaling_bytes, fp8_weight_cache_bytes, linear_input_factor
from engine.scaleout.layout import Layout, Recompute, Schedule, layout_problems
from engine.scaleout.partition import ParameterSplit, largest_block, parameter_split
from engine.scenario.precision import PrecisionMode, PrecisionSpec, precision_spec
from engine.scenario.training import Method, Scenario

ACTIVE = ("forward", "backward", "recompute")
CHECKPOINTED = (Recompute.FULL, Recompute.SELECTIVE_OP)
"""Recompute settings that checkpoint every block: the one-GPU estimate's gradient checkpointing."""
_DEFAULT_SYNC = DataParallelSync()  # the default data-parallel sync, which holds no memory of its own


class Part(NamedTuple):
    """A component of one rank before it becomes a :class:`MemoryComponent` (kept light for the layout search)."""

    key: str
    label: str
    bytes: float
    phases: tuple[Phase, ...]
    formula: str
    source: str


class Context:
    """What every stage of one (architecture, scenario, layout batch, recompute, FP8) shares: the one-GPU
    estimate, the block's activations and the parameter split. Built by :func:`context`.

    ``master_weights``: the model runs in 16 bits and the optimizer keeps fp32 master weights, as Megatron-LM
    (``--bf16``: bf16 parameters, fp32 ``main_grad``, fp32 master + Adam in the optimizer, 2 + 4 + 12 B per parameter,
    ``docs/user-guide/features/dist_optimizer.md``), torchtitan (FSDP2 ``MixedPrecisionPolicy(param_dtype=bf16)``) and
    DeepSpeed's ``bf16`` mode run mixed precision. The weights, activations and loss then come from the one-GPU
    estimate in pure 16 bits (no autocast copies, a 16-bit residual stream), the gradients and optimizer states
    from the mixed-precision one, and the fp32 weights become ``master_weights``. Off (the default), a rank follows
    the Hugging Face Trainer's autocast, exactly as the one-GPU estimate does. ``dp_sync``: see :class:`DataParallelSync`."""

    def __init__(self, arch: Architecture, sc: Scenario, fp8: Fp8Recipe | None, master_weights: bool = False,
                 dp_sync: DataParallelSync | None = None):
        sc = with_master_weights(sc, master_weights)
        self.arch, self.sc, self.fp8 = arch, sc, Fp8Recipe.of(fp8)
        self.dp_sync = dp_sync or _DEFAULT_SYNC
        self.spec: PrecisionSpec = precision_spec(sc.precision)
        self.estimate: MemoryEstimate = estimate_memory(arch, sc)
        self.parts = dict(self.estimate.parts_by_key)
        act_sc = sc
        self.master_weights = master_weights
        if self.master_weights:
            act_sc = sc.model_copy(update={"precision": PrecisionMode.BF16 if self.spec.weight_dtype == "fp32" and
                                           sc.precision is PrecisionMode.AMP_BF16 else PrecisionMode.FP16})
            sixteen = estimate_memory(arch, act_sc).parts_by_key
            fp32 = self.parts["weights"]
            self.parts["master_weights"] = fp32.model_copy(update={
                "key": "master_weights", "label": "fp32 master weights", "formula": "trainable parameters x 4 B (fp32)",
                "source": "Megatron-LM distributed optimizer docs; Micikevicius et al. 2018 sec. 3"})
            for key in ("weights", "weight_copies", "gradient_temporaries", "activations", "recomputed_layer",
                        "logits_loss", "logits_forward"):
                if key in sixteen:
                    self.parts[key] = sixteen[key]
        self.compute_sc = act_sc  # the scenario the rank computes in (16-bit throughout with master weights)
        self.blocks: BlockActivations = block_activations(arch, act_sc, precision_spec(act_sc.precision))
        self.split: ParameterSplit = parameter_split(arch)
        self.uniform_blocks = self.split.uniform_blocks
        self.linear_modules = sum(lin.count * lin.blocks(arch.num_layers) for lin in arch.layer_linears) / arch.num_layers
        self.master = self.spec.autocast and self.spec.weight_bytes == 4 and sc.method is Method.FULL and not self.master_weights
        rec = self.parts.get("recomputed_layer")
        self.block_copies = (rec.bytes - self.blocks.per_token * sc.tokens_per_micro_batch) if rec else 0.0
        self.phases = step_phases(sc)
        # Memos of the layout search, which asks the same of many layouts: the recorded stage sections
        # (engine.scaleout.stage_peaks, which sets them when it first meets the context).
        self.sections: dict[tuple, list] = {}
        self.section_ids: tuple[int, int, int] | None = None
        self._stages: dict[tuple, _Stage] = {}
        self.memo: dict[tuple, Any] = {}  # engine.scaleout.step_time's per-layout compute
        self._sac_saved: dict[tuple[int, bool], float] = {}

    def stage(self, layout: Layout, stage: int) -> "_Stage":
        """:func:`_stage` (memoised per PP, split, stage, TP and expert split)."""
        key = (layout.pipeline_parallel, layout.layers_per_stage, stage, layout.tensor_parallel,
               layout.expert_parallel * layout.expert_tensor_parallel)
        st = self._stages.get(key)
        if st is None:
            st = self._stages[key] = _stage(self, layout, stage)
        return st

    def sac_saved_per_token(self, tp: int, sequence_parallel: bool) -> float:
        """:func:`engine.scaleout.recompute.saved_per_token` of this context's block (memoised per TP and SP)."""
        key = (tp, sequence_parallel)
        if key not in self._sac_saved:
            self._sac_saved[key] = recompute.saved_per_token(self.arch, self.blocks.resid, self.spec.compute_bytes,
                                                             self.blocks.kernel, tp, sequence_parallel)
        return self._sac_saved[key]


MASTER_PRECISION = {PrecisionMode.AMP_BF16: PrecisionMode.AMP_BF16, PrecisionMode.BF16: PrecisionMode.AMP_BF16,
                    PrecisionMode.AMP_FP16: PrecisionMode.AMP_FP16, PrecisionMode.FP16: PrecisionMode.AMP_FP16}
"""With fp32 master weights, the precision a 16-bit model trains in, whichever way it is named: ``bf16`` and
``amp_bf16`` are both Megatron-LM's ``--bf16`` (a bf16 model, fp32 ``main_grad`` and fp32 master weights + Adam in
the optimizer), ``fp16`` and ``amp_fp16`` its ``--fp16``. The scenario keeps the ``amp_*`` name (fp32 weights
exist), and :class:`Context` moves the model itself to 16 bits."""


def with_master_weights(scenario: Scenario, master_weights: bool) -> Scenario:
    """``scenario`` as a run with fp32 master weights trains it (:data:`MASTER_PRECISION`), or unchanged without them.

    Raises:
        ScenarioError: master weights with fp32 (the weights already are the fp32 copy) or with a PEFT method (only
            the adapters train, and they are already fp32 or the model's dtype: there is no master copy to keep).
    """
    if not master_weights:
        return scenario
    if scenario.method is not Method.FULL:
        raise ScenarioError(f"fp32 master weights are for full training; {scenario.method.value} trains adapters only "
                            "(no master copy): drop --master-weights / the master-weights switch")
    if scenario.precision not in MASTER_PRECISION:
        raise ScenarioError(f"fp32 master weights keep an fp32 copy of a 16-bit model; with --precision "
                            f"{scenario.precision.value} the weights are fp32 already: choose bf16 or fp16 (or amp_bf16 / "
                            "amp_fp16, the same run), or drop --master-weights")
    return scenario.model_copy(update={"precision": MASTER_PRECISION[scenario.precision]})


def effective_scenario(scenario: Scenario, layout: Layout) -> Scenario:
    """The one-GPU scenario a rank of ``layout`` runs: its micro batch, its micro batches as gradient accumulation
    steps, full recompute (and torchtitan's op-level SAC, which also checkpoints every block) as gradient
    checkpointing."""
    return scenario.model_copy(update={
        "micro_batch_size": layout.micro_batch_size, "gradient_accumulation_steps": layout.micro_batches,
        "gradient_checkpointing": layout.recompute in CHECKPOINTED})


def check_layout(arch: Architecture, scenario: Scenario, layout: Layout) -> None:
    """Raise :class:`ScenarioError` naming every constraint ``layout`` breaks for ``arch`` and ``scenario``."""
    problems = layout_problems(arch, layout, scenario.seq_len)
    tp_only = (layout.pipeline_parallel == layout.context_parallel == layout.expert_parallel
               == layout.expert_tensor_parallel == 1)
    if not layout.is_single_gpu_model and scenario.method is not Method.FULL and not (
            tp_only and scenario.method is Method.LORA):
        # LoRA under TP (+ DP / FSDP) is NeMo Automodel's layout (TP 2 x FSDP 4 in its LoRA benchmarks): the adapters
        # are sharded with their base linear, so every share below holds. A 4-bit base sharded by TP, and PEFT under
        # pipeline, context or expert parallelism, are not modelled.
        problems.append("pipeline/context/expert parallelism is modelled for full training (Megatron-LM, torchtitan) "
                        "and tensor parallelism for full training and LoRA; QLoRA runs with data parallelism (Memory "
                        "page)")
    if problems:
        raise ScenarioError("; ".join(problems))


def context(arch: Architecture, scenario: Scenario, layout: Layout, fp8: Fp8Recipe | None = None,
            master_weights: bool = False, dp_sync: DataParallelSync | None = None) -> Context:
    """The shared part of the estimate (checks the layout first); ``master_weights``, ``dp_sync``: see :class:`Context`."""
    check_layout(arch, scenario, layout)
    return Context(arch, effective_scenario(scenario, layout), fp8, master_weights, dp_sync)


def in_flight(layout: Layout, stage: int) -> tuple[int, int]:
    """(model chunks whose activations stage ``stage`` holds at the start of its first backward, chunks per stage)."""
    return _in_flight(layout.pipeline_parallel, layout.micro_batches, layout.virtual_pipeline, layout.schedule, stage)


def _in_flight(p: int, m: int, v: int, schedule: Schedule, stage: int) -> tuple[int, int]:
    """:func:`in_flight` of PP ``p``, ``m`` micro batches, ``v`` chunks per stage, ``schedule``."""
    if p == 1:
        return 1, 1
    if schedule is Schedule.GPIPE:
        return m, 1
    if schedule is Schedule.INTERLEAVED:
        return min(2 * (p - stage - 1) + (v - 1) * p + 1, m * v), v
    return min(p - stage, m), 1


def logits_in_flight(layout: Layout) -> int:
    """Micro batches whose logits and loss (and LM-head input) the last stage holds at once: :func:`_logits_in_flight`."""
    return _logits_in_flight(layout.pipeline_parallel, layout.micro_batches, layout.virtual_pipeline, layout.schedule)


@lru_cache(maxsize=1024)
def _logits_in_flight(p: int, m: int, v: int, schedule: Schedule) -> int:
    """The most micro batches whose forward through the last model chunk of the last pipeline rank has finished and
    whose backward has not yet freed its loss tensors. Only that chunk computes the logits, so under the interleaved
    schedule this is not the (v - 1) x PP + 1 chunks of activations that rank holds.

    Walks Megatron-LM's interleaved order on the last rank (``megatron/core/pipeline_parallel/schedules.py`` at
    d98e8a64: ``get_pp_rank_microbatches`` gives it (PP - rank - 1) x 2 + (v - 1) x group = (v - 1) x PP warm-up
    forwards, all of them when that reaches m x v; ``get_schedule_table`` orders forwards by groups of
    ``microbatch_group_size_per_vp_stage`` (default PP) micro batches per chunk; ``get_model_chunk_id`` runs backward
    ``k`` on chunk v - 1 - chunk(k); each steady-state step runs one forward, then one backward). 1F1B's last rank
    has no warm-up (one micro batch); GPipe holds all m."""
    if p == 1:
        return 1
    if schedule is Schedule.GPIPE:
        return m
    if schedule is not Schedule.INTERLEAVED:
        return 1
    chunks = [c for start in range(0, m, p) for c in range(v) for _ in range(start, min(start + p, m))]
    total = m * v
    warmup = min((v - 1) * p, total)
    held = sum(1 for k in range(warmup) if chunks[k] == v - 1)
    most = held
    for k in range(total - warmup):
        held += chunks[k + warmup] == v - 1
        most = max(most, held)
        held -= chunks[k] == 0  # backward k runs on chunk v - 1 - chunk(k)
    return max(most, 1)


def _per_token_layer(ctx: Context, layout: Layout) -> float:
    """Bytes per token one block saves on one rank (before the CP split of the tokens)."""
    b, t = ctx.blocks, layout.tensor_parallel
    scores = b.scores * ctx.sc.seq_len if layout.recompute is Recompute.SELECTIVE else 0.0
    fp8_cut = b.linear_inputs * (1.0 - linear_input_factor(ctx.fp8, ctx.spec.compute_bytes))
    if t == 1:
        return b.per_token - scores - fp8_cut
    outside = (b.norms + b.linear_inputs - fp8_cut) / (t if layout.sequence_parallel else 1)
    return outside + (b.inner + b.scores * ctx.sc.seq_len - scores) / t


class _Parts:
    """Collects a rank's :class:`Part` list. Formulas are callables, built into text only when asked for (the
    layout search skips them)."""

    def __init__(self, est: dict[str, MemoryComponent], explain: bool):
        self.est, self.explain, self.out = est, explain, []

    def add(self, key: str, nbytes: float, phases: tuple[Phase, ...], formula: Callable[[], str], source: str = "",
            label: str = "") -> None:
        if nbytes or key in self.est:
            comp = self.est.get(key)
            self.out.append(Part(key, label or (comp.label if comp else key), nbytes, phases,
                                 formula() if self.explain else "", source or (comp.source if comp else "")))

    def scaled(self, key: str, factor: float, why: Callable[[], str], phases: tuple[Phase, ...] | None = None) -> None:
        comp = self.est[key]
        self.add(key, comp.bytes * factor, phases or comp.phases, lambda: f"{why()}; one GPU: {comp.formula}")


class _Stage(NamedTuple):
    """Where a pipeline stage sits: its index, every stage's layers, its blocks ``first..last-1`` and the
    parameters one of its ranks holds."""

    index: int
    layers: tuple[int, ...]
    first: int
    last: int
    local: float


def _stage(ctx: Context, layout: Layout, stage: int) -> _Stage:
    layers = layout.stage_layers(ctx.arch.num_layers)
    first = sum(layers[:stage])
    last = first + layers[stage]
    local = ctx.split.stage_parameters(first, last, stage, layout.pipeline_parallel, layout.tensor_parallel,
                                       layout.expert_parallel * layout.expert_tensor_parallel)
    return _Stage(stage, layers, first, last, local)


def stage_parts(ctx: Context, layout: Layout, stage: int, explain: bool = True) -> list[Part]:
    """The components of one rank of pipeline stage ``stage`` (bytes alive and their phases), model states first."""
    st, parts = _stage(ctx, layout, stage), _Parts(ctx.parts, explain)
    _model_states(ctx, layout, st, parts)
    _activations(ctx, layout, st, parts)
    _buffers(ctx, layout, st, parts)
    return parts.out


_STATE_PARTS = ("weights", "weight_copies", "gradients", "gradient_temporaries", "master_weights", "optimizer_states",
                "optimizer_temporaries")
_BUFFER_PARTS = ("sp_gather_buffer", "pp_p2p_buffers", "ep_all_to_all", "gathered_weights", "fsdp_accumulated_grads",
                 "fsdp_grad_unit", "fp8_weight_cache", "fp8_scaling", "ddp_buckets", "gather_buffers")


def states_reads(ctx: Context) -> tuple:
    """Everything :func:`_model_states` reads of its context but the architecture (keep the two in step): the
    one-GPU model states' bytes and phases, mixed precision without master weights, the step's phases."""
    parts = ctx.parts
    return ("states", ctx.master, ctx.phases,
            tuple((parts[k].bytes, parts[k].phases) if k in parts else None for k in _STATE_PARTS))


def buffers_reads(ctx: Context) -> tuple:
    """Everything :func:`_buffers` reads of its context but the architecture (keep the two in step): tokens per micro
    batch, compute bytes, FP8 (TransformerEngine's copies live in the step's phases) and which of its parts the
    one-GPU estimate has, the framework's DP sync."""
    return ("buffers", ctx.sc.tokens_per_micro_batch, ctx.spec.compute_bytes, ctx.fp8, ctx.dp_sync, ctx.parts["weights"].bytes,
            ctx.phases if ctx.fp8 is not None and ctx.fp8.caches_fp8_weights else None, ctx.linear_modules,
            tuple(k in ctx.parts for k in _BUFFER_PARTS))


def _model_states(ctx: Context, layout: Layout, st: _Stage, parts: _Parts) -> None:
    """Weights, their copies, gradients, master weights and optimizer states: the rank's share (see the module
    docstring). Reads only the settings :func:`engine.scaleout.stage_peaks.most_loaded_stage` keys it by."""
    est, split, local = ctx.parts, ctx.split, st.local
    t, p, shards, zero = layout.tensor_parallel, layout.pipeline_parallel, layout.optimizer_shards, layout.zero
    share = local / split.total
    scaled, add = parts.scaled, parts.add
    w_div = shards if (zero == 3 or (zero in (1, 2) and ctx.master)) else 1
    fsdp2_master = zero == 3 and "master_weights" in est  # FSDP2: the fp32 shard is the only sharded copy
    scaled("weights", 0.0 if fsdp2_master else share / w_div, lambda: (
        "none sharded: FSDP2 keeps the fp32 shard (master weights) and gathers 16-bit units" if fsdp2_master else
        f"{local / 1e9:.3f}B of {split.total / 1e9:.3f}B parameters on this rank"
        + (f", / {w_div} (sharded)" if w_div > 1 else "")))
    if zero != 3:
        scaled("weight_copies", share, lambda: "this rank's share", ctx.phases if zero in (1, 2) and ctx.master else None)
    else:
        add("weight_copies", 0.0, est["weight_copies"].phases, lambda: "replaced by the gathered FSDP units")
    # FSDP + PP: the sharded gradients appear at the last micro batch's reduce-scatter (they accumulate unsharded).
    # ZeRO-2 / SHARD_GRAD_OP: each rank keeps only its reduce-scattered gradient partition (Rajbhandari et al. 2020
    # sec. 5.2, P_os+g); the bucket that is reduced before it is freed is the one-GPU estimate's gradient temporary.
    g_div = shards if zero in (2, 3) else 1
    scaled("gradients", share / g_div, lambda: "this rank's share" + (" / DP x CP" if g_div > 1 else ""),
           ("backward_end", "optimizer_step") if zero == 3 and p > 1 and shards > 1 else None)
    tied_here = split.tied and p == 1
    scaled("gradient_temporaries", (1.0 / t) if tied_here else 0.0, lambda: "tied embedding on one rank, vocabulary / TP")
    if "master_weights" in est:
        scaled("master_weights", share / shards, lambda: "fp32 master weights in the optimizer, this rank's share"
               + (f" / {shards} (DP x CP)" if shards > 1 else ""))
    for key in ("optimizer_states", "optimizer_temporaries"):
        scaled(key, share / shards, lambda: "this rank's share" + (f" / {shards} (DP x CP)" if shards > 1 else ""))


def _activations(ctx: Context, layout: Layout, st: _Stage, parts: _Parts) -> None:
    """Micro batches (or chunks) in flight x layers x the block's bytes, CP splitting the tokens; the logits. Reads
    only the settings :func:`engine.scaleout.stage_peaks.most_loaded_stage` keys it by."""
    arch, sc, est, add, scaled = ctx.arch, ctx.sc, ctx.parts, parts.add, parts.scaled
    t, p, c, stage = layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel, st.index
    sp_div = t if layout.sequence_parallel else 1
    tokens = sc.tokens_per_micro_batch / c
    layer = _per_token_layer(ctx, layout) * tokens
    count, chunks = in_flight(layout, stage)
    per_chunk = st.layers[stage] / chunks
    full = layout.recompute is Recompute.FULL
    op_sac = layout.recompute is Recompute.SELECTIVE_OP
    n_ckpt = (per_chunk if layout.recompute_layers is None else min(layout.recompute_layers, per_chunk)) if full else 0
    ckpt = ctx.blocks.resid * arch.hidden_size * tokens / sp_div
    if op_sac:
        n_ckpt = per_chunk
        ckpt = ctx.sac_saved_per_token(t, layout.sequence_parallel) * tokens
    is_last = stage == p - 1
    last_count = logits_in_flight(layout)
    head = ctx.blocks.head * tokens / sp_div * last_count if is_last else 0.0
    acts = count * ((per_chunk - n_ckpt) * layer + n_ckpt * ckpt) + head
    if p == 1 and c == 1 and t == 1 and n_ckpt in (0, arch.num_layers) and not op_sac:
        # The one-GPU formula, in its own order of operations (the same value, to the last bit).
        acts = (arch.num_layers * layer if not full else arch.num_layers * ctx.blocks.resid * arch.hidden_size * tokens) + head
    per_h = lambda x: x / max(tokens * arch.hidden_size, 1)  # noqa: E731
    add("activations", acts, ACTIVE if (full or op_sac) else ("forward", "backward"), lambda: (
        f"{count} x {per_chunk:g} layers in flight x "
        + (f"{per_h(ckpt):.1f} B (op-level SAC: input + saved ops)" if op_sac else f"{per_h(layer):.1f} B")
        + " x tokens/CP x hidden"
        + (f", {n_ckpt:g} of them recomputed (input only)" if full else "") + (" + final norm/LM head input" if is_last else "")),
        "torchtitan op-level SAC, parallelize_llama.py _save_list at 9dec370 (engine.scaleout.recompute)" if op_sac else
        "Korthikanti et al. 2022 Table 2 and eq. 5 on the block's saved tensors (engine.memory.activations)")
    if full:
        add("recomputed_layer", layer + ctx.block_copies / t, ("recompute",), lambda: "one block's saved tensors again")
    elif op_sac:
        add("recomputed_layer", max(layer - ckpt, 0.0) + ctx.block_copies / t, ("recompute",),
            lambda: "one block's recomputed tensors (its saved tensors less the cached op outputs)")
    for key in ("logits_loss", "logits_forward"):
        if key in est:
            scaled(key, (last_count / (t * c)) if is_last else 0.0, lambda: "last stage, vocabulary-parallel / TP, tokens / CP")
    if ctx.dp_sync.half_gradients_per_backward:  # one micro batch's saved (and loss) tensors go as its gradients come
        freed = acts / count + (est["logits_loss"].bytes / (t * c) if is_last and "logits_loss" in est else 0.0)
        add("half_gradients", buffers.half_gradient_excess(st.local, _param_bytes(ctx), freed), ("backward",),
            lambda: f"{st.local / 1e9:.3f}B parameters x {_param_bytes(ctx):g} B of 16-bit .grad at the end of a micro "
            f"batch's backward, less the {freed / 2**30:.2f} GiB of saved tensors it freed (not below 0)",
            "nanotron@e24d2483 optim/gradient_accumulator.py FP32GradientAccumulator.backward, _accumulate_grad "
            "(half_param.grad = None after the add)", "16-bit gradients before the fp32 accumulation")


def _buffers(ctx: Context, layout: Layout, st: _Stage, parts: _Parts) -> None:
    """The layout's communication buffers (:mod:`engine.scaleout.buffers`), FSDP's gathered units, TE's FP8 copies.
    Reads only the settings :func:`most_loaded_stage` keys it by."""
    arch, spec, split, add = ctx.arch, ctx.spec, ctx.split, parts.add
    t, p, c = layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel
    ept = layout.expert_parallel * layout.expert_tensor_parallel
    sp_div = t if layout.sequence_parallel else 1
    shards, zero, first, last, local = layout.optimizer_shards, layout.zero, st.first, st.last, st.local
    tokens = ctx.sc.tokens_per_micro_batch / c
    cb = spec.compute_bytes
    if t > 1 and layout.sequence_parallel:
        add("sp_gather_buffer", buffers.sequence_parallel_gather_bytes(tokens, arch.hidden_size, cb), ACTIVE,
            lambda: "(s / CP) x b x h x compute bytes: the all-gathered input of a column-parallel linear",
            "Megatron tensor_parallel/layers.py get_global_memory_buffer", "Sequence-parallel all-gather buffer")
    if p > 1:
        add("pp_p2p_buffers", buffers.pipeline_p2p_bytes(tokens, arch.hidden_size, cb, sp_div), ACTIVE,
            lambda: "2 x (s / CP) x b x h (/ TP with SP) x compute bytes",
            "Megatron pipeline_parallel/p2p_communication.py, schedules.get_tensor_shapes", "Pipeline send/recv buffers")
    if arch.num_experts and layout.expert_parallel > 1:
        add("ep_all_to_all", buffers.expert_all_to_all_bytes(tokens / sp_div, arch.experts_per_token, arch.hidden_size, cb,
                                                              layout.moe_capacity_factor), ("forward", "backward", "recompute"),
            lambda: "2 x tokens x top-k x capacity factor x h x compute bytes",
            "Megatron MoEAlltoAllTokenDispatcher; moe_utils.get_capacity", "Expert all-to-all buffers")
    if zero == 3 and shards > 1:
        unit = largest_block(split, first, last, t, ept)
        gather_b = 1 if ctx.fp8 is not None and ctx.fp8.gathers_in_fp8 else cb  # torchao float8 all-gather: 1-byte block weights
        gathered, grad = buffers.fsdp_unit_bytes(unit, gather_b)
        if p > 1:
            gathered = local * gather_b
            add("gathered_weights", gathered, ACTIVE, lambda: f"the stage's {local / 1e9:.3f}B parameters x {gather_b} B, "
                "kept gathered across micro batches", "torchtitan apply_fsdp (pp_enabled: reshard_after_forward=False), "
                "9dec370; torch.distributed.pipelining PipelineStage.backward_maybe_with_nosync",
                "Gathered weights (FSDP + PP, no reshard)")
            add("fsdp_accumulated_grads", local * 4, ("backward", "recompute"),
                lambda: f"the stage's {local / 1e9:.3f}B parameters x 4 B (fp32 reduce dtype), reduce-scattered after the "
                "last micro batch", "FSDP2 FSDPParam.to_accumulated_grad_if_needed with requires_gradient_sync=False "
                "(pipelining); torchtitan mixed_precision_reduce float32", "Unsharded accumulated gradients (FSDP + PP)")
        else:
            root = (split.vocab_embedding / t + split.other_embedding + split.final
                    + (split.head / t if not split.tied else 0.0))
            add("gathered_weights", gathered + root * cb, ACTIVE, lambda: f"2 blocks x {unit / 1e6:.1f}M parameters x "
                f"{gather_b} B + the root unit's {root / 1e6:.1f}M (embeddings, final norm, output) x {cb} B",
                "PyTorch FSDP2 fully_shard (reshard after forward, prefetch one block; the root is not resharded, "
                "FSDPState._lazy_init)", "Gathered weights (FSDP units)")
        add("fsdp_grad_unit", grad, ("backward", "recompute"), lambda: "one block's unsharded fp32 gradient",
            "torchtitan mixed_precision_reduce float32", "Unsharded gradient before reduce-scatter")
    sync, n, pb = ctx.dp_sync, layout.data_parallel * c, _param_bytes(ctx)
    if sync.bucket_bytes and zero == 0 and n > 1:
        add("ddp_buckets", buffers.ddp_bucket_bytes(local, pb), ctx.phases, lambda: f"{local / 1e9:.3f}B parameters "
            f"x {pb:g} B: the reducer's flat bucket copy of every gradient", "PyTorch DDP reducer.cpp "
            "Reducer::initialize_buckets (gradient_as_bucket_view=False)", "DDP gradient buckets")
    if sync.zero1_all_reduce and sync.gather_copies and zero == 1 and n > 1:
        add("gather_buffers", buffers.coalesced_gather_bytes(local, pb, n), ("optimizer_step",),
            lambda: f"{local / 1e9:.3f}B parameters x {pb:g} B x (1 + 1/{n}): every rank's flattened slices and this "
            "rank's", "nanotron@e24d2483 distributed.py all_gather_coalesced (from ZeroDistributedOptimizer."
            "_all_gather_params)", "Flattened all-gather buffers (ZeRO-1)")
    if ctx.fp8 is not None and ctx.fp8.caches_fp8_weights:
        lin = (sum(split.tp_per_block[first:last]) / t + sum(split.expert_per_block[first:last]) / ept)
        add("fp8_weight_cache", fp8_weight_cache_bytes(ctx.fp8, lin), ctx.phases,
            lambda: f"{lin / 1e9:.3f}B block-linear parameters x 2 B (FP8 weight + FP8 transpose)",
            "TransformerEngine issues 1261, 1429", "FP8 weight copies (TE)")
        add("fp8_scaling", fp8_scaling_bytes(ctx.fp8, ctx.linear_modules * st.layers[st.index]), ctx.phases,
            lambda: "amax history 1024 + scale, fp32, 3 tensors per linear", "TransformerEngine DelayedScaling",
            "FP8 scaling state (TE)")


def _param_bytes(ctx: Context) -> float:
    """Bytes per parameter of the model a rank computes in (16-bit with master weights), its ``.grad`` 's too."""
    return ctx.parts["weights"].bytes / ctx.split.total


def sync_layout_reads(ctx: Context, layout: Layout) -> tuple:
    """What the DP sync's parts read of the layout beyond stage_peaks' buffer keys: DP x CP, the ZeRO stage (none by default)."""
    return () if ctx.dp_sync == _DEFAULT_SYNC else (layout.data_parallel * layout.context_parallel, layout.zero)


def _phase_totals(parts: list[Part], totals: dict[str, float]) -> dict[str, float]:
    """Add each part's bytes to the total of every phase it is alive in (in order: the sums are order-exact)."""
    for part in parts:
        for ph in part.phases:
            totals[ph] = totals.get(ph, 0.0) + part.bytes
    return totals


def _peak_phase(totals: dict[str, float]) -> tuple[Phase, float]:
    tie = {"backward": 2, "optimizer_step": 1}
    phase = max(totals, key=lambda ph: (totals[ph], tie.get(ph, 0)))
    return phase, totals[phase]  # type: ignore[return-value]


def peak_of(parts: list[Part]) -> tuple[Phase, float]:
    """The phase with the most bytes alive and its total (ties: start of backward, then the optimizer step)."""
    return _peak_phase(_phase_totals(parts, {}))


def group_sizes(layout: Layout) -> tuple[int, ...]:
    """Sizes of the process groups a rank joins: TP, CP, PP, DP x CP (gradients), EP."""
    return (layout.tensor_parallel, layout.context_parallel, layout.pipeline_parallel,
            layout.data_parallel * layout.context_parallel, layout.expert_parallel)


class StageMemory(BaseModel):
    """One rank of one pipeline stage: its components (a :class:`MemoryEstimate`) and the non-tensor memory."""

    model_config = ConfigDict(frozen=True)

    stage: int
    layers: int
    in_flight: int
    parameters: float
    estimate: MemoryEstimate
    nccl_bytes: float

    @property
    def peak_allocated_bytes(self) -> float:
        """``torch.cuda.max_memory_allocated()`` of this rank."""
        return self.estimate.peak_allocated_bytes

    @property
    def peak_reserved_bytes(self) -> float:
        """``max_memory_reserved()``: allocated + the caching allocator's reserve."""
        return self.estimate.peak_reserved_bytes

    @property
    def device_used_bytes(self) -> float:
        """What nvidia-smi would show: reserved + CUDA context + NCCL buffers."""
        return device_memory(self.peak_allocated_bytes).device_used + self.nccl_bytes


class ScaleoutMemory(BaseModel):
    """Every pipeline stage of a layout; the most loaded rank is the headline."""

    model_config = ConfigDict(frozen=True)

    layout: Layout
    stages: tuple[StageMemory, ...]
    fp8: Fp8Recipe | None = None

    @property
    def max_stage(self) -> StageMemory:
        """The stage whose rank has the largest allocated peak (the first on ties)."""
        return max(self.stages, key=lambda s: (s.peak_allocated_bytes, -s.stage))

    @property
    def max_rank_peak_allocated_bytes(self) -> float:
        """The allocated peak of the most loaded rank."""
        return self.max_stage.peak_allocated_bytes


def scaleout_memory(arch: Architecture, scenario: Scenario, layout: Layout, fp8: Fp8Recipe | None = None,
                    ctx: Context | None = None, master_weights: bool = False) -> ScaleoutMemory:
    """Per-rank memory of every pipeline stage of ``layout`` (see the module docstring).

    Raises:
        ScenarioError: a layout that does not divide the model (heads, layers, experts, sequence), or model
            parallelism with LoRA/QLoRA.
    """
    ctx = ctx or context(arch, scenario, layout, fp8, master_weights)
    stages = []
    for r, n in enumerate(layout.stage_layers(arch.num_layers)):
        parts = stage_parts(ctx, layout, r)
        first = sum(layout.stage_layers(arch.num_layers)[:r])
        local = ctx.split.stage_parameters(first, first + n, r, layout.pipeline_parallel, layout.tensor_parallel,
                                           layout.expert_parallel * layout.expert_tensor_parallel)
        paged = ctx.estimate.pageable_bytes * local / ctx.split.total / layout.optimizer_shards
        est = ctx.estimate.model_copy(update={"pageable_bytes": paged, "parts": tuple(
            MemoryComponent(key=x.key, label=x.label, bytes=x.bytes, phases=x.phases, formula=x.formula, source=x.source)
            for x in parts)})
        stages.append(StageMemory(stage=r, layers=n, in_flight=in_flight(layout, r)[0], parameters=local, estimate=est,
                                  nccl_bytes=buffers.nccl_bytes(group_sizes(layout))))
    return ScaleoutMemory(layout=layout, stages=tuple(stages), fp8=fp8)
