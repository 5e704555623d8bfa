"""A parallel layout: how a training run spreads over TP x PP x CP x DP GPUs (EP inside DP x CP), validated.

Terms and constraints follow Megatron-LM (``megatron/training/arguments.py`` and ``megatron/core/parallel_state.py``
at core_v0.14.0 / d98e8a64) and torchtitan (``[parallelism]`` of ``job_config.py`` at v0.2.2):

- world size = TP x CP x PP x DP (Megatron's dense layout); expert parallelism is carved out of DP x CP for the
  MoE layers (expert world = ETP x EP x PP x expert-DP), so EP must divide DP x CP;
- TP must divide the attention heads and the key/value heads (Megatron asserts ``num_query_groups % TP == 0``);
- a virtual (interleaved) pipeline needs ``layers % (PP x v) == 0`` and ``micro batches % PP == 0``;
- the global batch is ``micro batch x DP x micro batches``;
- CP splits each sequence into ``2 x CP`` chunks (load balancing of the causal mask), so ``seq % (2 x CP) == 0``.

``zero``: 0 = plain data parallel (Megatron DDP, every rank holds all optimizer states), 1 = Megatron's
distributed optimizer / ZeRO-1 (optimizer states and fp32 master weights sharded over DP x CP), 2 = ZeRO-2 / FSDP ``SHARD_GRAD_OP`` (gradients
too: DeepSpeed ``stage 2``, llm-foundry ``sharding_strategy: SHARD_GRAD_OP``, torchtitan
``fsdp_reshard_after_forward = "never"``; the 16-bit weights stay whole on every rank), 3 = ZeRO-3 / FSDP (weights,
gradients and states sharded over DP x CP; torchtitan's ``data_parallel_shard_degree``).
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from engine.errors import ScenarioError, explain_validation
from engine.model.architecture import Architecture


class Recompute(str, Enum):
    """Activation recomputation (Megatron ``--recompute-granularity``; torchtitan ``activation_checkpoint.mode``).

    ``selective``: the core attention (QK^T, softmax, dropout, attention over V) is recomputed in backward
    (Korthikanti et al. 2022, sec. 4.3; Megatron ``--recompute-granularity selective``, whose default
    ``recompute_modules`` is ``["core_attn"]``, ``transformer_config.py`` at d98e8a64); ``selective_op``:
    torchtitan's op-level selective checkpointing (``activation_checkpoint.mode = "selective"``,
    ``selective_ac_option = "op"``): every block is checkpointed and only the outputs of the ops in its
    ``_save_list`` are kept (every second matmul, the SDPA outputs, TP reduce-scatters), see
    :mod:`engine.scaleout.recompute`; ``full``: each block keeps only its input and runs again in backward
    (torchtitan's layer option ``selective_ac_option = "k"``, every k-th block, is ``full`` with
    ``recompute_layers``: :func:`engine.scaleout.recompute.torchtitan_layer_sac_layers`)."""

    NONE = "none"
    SELECTIVE = "selective"
    SELECTIVE_OP = "selective_op"
    FULL = "full"


class Schedule(str, Enum):
    """Pipeline schedule: ``1f1b`` (PipeDream-Flush, Narayanan et al. 2021), ``interleaved`` (1F1B with
    ``virtual_pipeline`` model chunks per rank) or ``gpipe`` (all forwards, then all backwards)."""

    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"
    GPIPE = "gpipe"


MAX_DEGREE = 4096
ZERO_STAGES = (0, 1, 2, 3)
ZERO_LABELS = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3/FSDP"}
"""Short names of the data-parallel sharding stages (layout labels)."""
ZERO_CHOICES = {0: "DDP", 1: "ZeRO-1 / distributed optimizer", 2: "ZeRO-2 / FSDP SHARD_GRAD_OP", 3: "ZeRO-3 / FSDP"}
ZERO_STRATEGIES = {0: "ddp", 1: "zero1", 2: "zero2 or fsdp_shard_grad_op", 3: "zero3 or fsdp_full_shard"}
"""Each stage as the Scale out page's "Data-parallel sharding" option and as the CLI's ``--strategy`` names it: a
message that asks for another stage names both (:func:`zero_choice`)."""


def zero_choice(*stages: int) -> str:
    """``"DDP" (--strategy ddp) or "ZeRO-3 / FSDP" (--strategy zero3 or fsdp_full_shard)``: how to ask for ``stages``."""
    return " or ".join(f'"{ZERO_CHOICES[z]}" (--strategy {ZERO_STRATEGIES[z]})' for z in stages)


class Layout(BaseModel):
    """One parallel layout and the batch it runs. Degrees are GPU counts; batch sizes are sequences.

    ``layers_per_stage``: layers of each pipeline stage (uneven splits allowed, e.g. Llama 3's lighter first and
    last stages); None = as even as possible, the first stages taking the remainder. ``recompute_layers``: with
    ``full`` recompute, how many layers of each stage (of each model chunk) are recomputed, Megatron's
    ``--recompute-method block --recompute-num-layers``; None = all. ``expert_tensor_parallel``: TP inside the
    experts (Megatron ``--expert-tensor-parallel-size``, torchtitan ``expert_tensor_parallel_degree``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first used

    tensor_parallel: int = Field(1, ge=1, le=MAX_DEGREE)
    pipeline_parallel: int = Field(1, ge=1, le=MAX_DEGREE)
    context_parallel: int = Field(1, ge=1, le=MAX_DEGREE)
    expert_parallel: int = Field(1, ge=1, le=MAX_DEGREE)
    expert_tensor_parallel: int = Field(1, ge=1, le=MAX_DEGREE)
    data_parallel: int = Field(1, ge=1, le=1 << 20)
    sequence_parallel: bool = False
    recompute: Recompute = Recompute.NONE
    recompute_layers: int | None = Field(None, ge=0)
    virtual_pipeline: int = Field(1, ge=1, le=64)
    schedule: Schedule = Schedule.ONE_F_ONE_B
    zero: int = 0
    micro_batch_size: int = Field(1, ge=1, le=65_536)
    global_batch_size: int | None = Field(None, ge=1)
    layers_per_stage: tuple[int, ...] | None = None
    moe_capacity_factor: float | None = Field(None, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _interleave(cls, data: Any) -> Any:
        # A virtual pipeline without a schedule named means the interleaved schedule (Megatron infers it too).
        if isinstance(data, dict) and data.get("schedule") is None:
            interleaved = (data.get("virtual_pipeline") or 1) > 1
            data = {**data, "schedule": Schedule.INTERLEAVED if interleaved else Schedule.ONE_F_ONE_B}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> "Layout":
        if self.zero not in ZERO_STAGES:
            raise ValueError("zero: 0 (data parallel), 1 (distributed optimizer / ZeRO-1), 2 (ZeRO-2 / FSDP "
                             "SHARD_GRAD_OP) or 3 (ZeRO-3 / FSDP)")
        if self.sequence_parallel and self.tensor_parallel == 1:
            raise ValueError("sequence parallelism splits the tensor-parallel region: it needs tensor_parallel > 1")
        if self.virtual_pipeline > 1 and self.schedule is not Schedule.INTERLEAVED:
            raise ValueError("virtual_pipeline > 1 is the interleaved schedule: set schedule='interleaved'")
        if self.schedule is Schedule.INTERLEAVED and self.pipeline_parallel == 1:
            raise ValueError("an interleaved (virtual) pipeline needs pipeline_parallel > 1")
        if self.global_batch_size is not None and self.global_batch_size % (self.micro_batch_size * self.data_parallel):
            step = self.micro_batch_size * self.data_parallel
            raise ValueError(f"Global batch {self.global_batch_size} is not a multiple of micro batch x DP = "
                             f"{self.micro_batch_size} x {self.data_parallel} = {step}: every data-parallel rank runs "
                             f"the same number of micro batches per step, so use a multiple of {step} (such as "
                             f"{max(step, self.global_batch_size // step * step):,}) or change the micro batch or DP.")
        if (self.data_parallel * self.context_parallel) % self.expert_parallel:
            raise ValueError(f"expert parallel {self.expert_parallel} must divide DP x CP = "
                             f"{self.data_parallel * self.context_parallel} (EP is carved out of the data-parallel ranks)")
        return self

    @property
    def world_size(self) -> int:
        """GPUs: TP x CP x PP x DP."""
        return self.tensor_parallel * self.context_parallel * self.pipeline_parallel * self.data_parallel

    @property
    def micro_batches(self) -> int:
        """Micro batches per step on each pipeline (the gradient accumulation steps): global / (micro x DP)."""
        if self.global_batch_size is None:
            return 1
        return self.global_batch_size // (self.micro_batch_size * self.data_parallel)

    @property
    def optimizer_shards(self) -> int:
        """Ranks the optimizer states are divided over: DP x CP with ZeRO-1/2/3 (Megatron shards the distributed
        optimizer over the DP x CP group, ``intra_dp_cp_group``), else 1."""
        return self.data_parallel * self.context_parallel if self.zero else 1

    @property
    def is_single_gpu_model(self) -> bool:
        """True when every rank holds the whole model (no TP, PP, CP or EP): the data-parallel case."""
        return (self.tensor_parallel == self.pipeline_parallel == self.context_parallel == self.expert_parallel
                == self.expert_tensor_parallel == 1)

    def stage_layers(self, num_layers: int) -> tuple[int, ...]:
        """Layers of each pipeline stage (the given split, or an even one with the remainder on the first stages)."""
        if self.layers_per_stage is not None:
            return self.layers_per_stage
        return _even_split(num_layers, self.pipeline_parallel)

    def label(self) -> str:
        """Short name, e.g. ``TP8 PP4 DP16 SP, full recompute, ZeRO-1``."""
        parts = [f"TP{self.tensor_parallel}", f"PP{self.pipeline_parallel}"]
        if self.virtual_pipeline > 1:
            parts.append(f"v{self.virtual_pipeline}")
        if self.context_parallel > 1:
            parts.append(f"CP{self.context_parallel}")
        if self.expert_parallel > 1:
            parts.append(f"EP{self.expert_parallel}")
        parts.append(f"DP{self.data_parallel}")
        if self.sequence_parallel:
            parts.append("SP")
        zero = ZERO_LABELS[self.zero]
        return f"{' '.join(parts)}, mb {self.micro_batch_size}, {self.recompute.value} recompute, {zero}"

    @classmethod
    def build(cls, **fields: Any) -> "Layout":
        """Validate ``fields``; raises :class:`~engine.errors.ScenarioError` with one line per problem."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise ScenarioError(explain_validation(exc, all_errors=True)) from None


def model_layout_limits(arch: Architecture, pipeline_parallel: int = 1, expert_parallel: int = 1) -> list[str]:
    """What the model itself rules out of a layout, whatever the GPU count: expert parallelism on a model without
    experts (or an EP that does not divide its experts) and more pipeline stages than layers. Empty when none.

    These are checked before the GPU counts (:func:`layout_for_world`): a dense model asked for EP 64 on 8 GPUs is
    refused for having no experts, not because 64 does not divide DP x CP."""
    out = []
    e, p = expert_parallel, pipeline_parallel
    if e > 1 and not arch.num_experts:
        out.append(f"Expert parallel {e}: this model has no experts (it is a dense model, not a mixture of experts), "
                   "so expert parallel must be 1.")
    elif e > 1 and arch.num_experts % e:
        out.append(f"Expert parallel {e} does not divide this model's {arch.num_experts} experts: every expert-parallel "
                   f"rank holds the same number of experts, so use a divisor of {arch.num_experts}.")
    if p > arch.num_layers:
        out.append(f"Pipeline parallel {p}: pipeline stages cannot exceed the number of layers, and this model has "
                   f"{arch.num_layers}, so use at most {arch.num_layers} stages.")
    return out


def require_model_limits(arch: Architecture, pipeline_parallel: int = 1, expert_parallel: int = 1) -> None:
    """Refuse a layout the model itself rules out (:func:`model_layout_limits`), before any GPU-count check.

    Raises:
        ScenarioError: one line per limit broken.
    """
    limits = model_layout_limits(arch, pipeline_parallel, expert_parallel)
    if limits:
        raise ScenarioError("\n".join(limits))


def layout_for_world(arch: Architecture, fields: dict[str, Any], world: int) -> Layout:
    """The layout of ``fields`` (every :class:`Layout` field but ``data_parallel``) on ``world`` GPUs, data parallel
    taking what TP x PP x CP leave.

    Raises:
        ScenarioError: the first failing check, the model's own limits first (:func:`model_layout_limits`), then the
            GPU count (a multiple of TP x PP x CP), then :class:`Layout`'s rules; one line per problem.
    """
    require_model_limits(arch, fields.get("pipeline_parallel", 1), fields.get("expert_parallel", 1))
    per = fields.get("tensor_parallel", 1) * fields.get("pipeline_parallel", 1) * fields.get("context_parallel", 1)
    if world % per:
        raise ScenarioError(f"{world} GPUs are not a multiple of TP x PP x CP = {per}")
    return Layout.build(**fields, data_parallel=world // per)


def validated_layout(fields: dict[str, Any]) -> Layout:
    """``Layout(**fields)``: the same validation by the model's own validator, without ``BaseModel.__init__``'s Python
    frame (the layout search validates tens of thousands).

    Raises:
        pydantic.ValidationError: as ``Layout(**fields)`` does.
    """
    return Layout.__pydantic_validator__.validate_python(fields)


def with_settings(layout: Layout, micro_batch_size: int, recompute: Recompute, zero: int,
                  virtual_pipeline: int) -> Layout:
    """``layout`` with this micro batch size, recompute, ZeRO stage and virtual pipeline, its schedule inferred from
    ``virtual_pipeline`` as :class:`Layout` infers it: equal (fields and fields set) to validating ``layout``'s fields
    with these (the layout search derives a shape's settings from one validated layout of the shape). Only what
    changes is checked, as the field constraints and ``Layout._consistent`` check it (keep the two in step); the
    rest was checked when ``layout`` was validated and none of those checks reads these settings but the global
    batch one, checked here. A combination they would refuse is validated in full, so the error is Layout's own.

    Raises:
        pydantic.ValidationError: as ``Layout(**fields)`` does.
    """
    v, mb, gbs = virtual_pipeline, micro_batch_size, layout.global_batch_size
    if (type(mb) is int and 1 <= mb <= 65_536 and isinstance(recompute, Recompute) and type(zero) is int
            and zero in ZERO_STAGES and type(v) is int and 1 <= v <= 64 and (v == 1 or layout.pipeline_parallel > 1)
            and (gbs is None or not gbs % (mb * layout.data_parallel))):
        return layout.model_copy(update={"micro_batch_size": mb, "recompute": recompute, "zero": zero,
                                         "virtual_pipeline": v,
                                         "schedule": Schedule.INTERLEAVED if v > 1 else Schedule.ONE_F_ONE_B})
    fields = {k: getattr(layout, k) for k in layout.model_fields_set if k != "schedule"}
    return Layout(**{**fields, "micro_batch_size": mb, "recompute": recompute, "zero": zero, "virtual_pipeline": v})


@lru_cache(maxsize=1024)
def _even_split(num_layers: int, stages: int) -> tuple[int, ...]:
    """``num_layers`` over ``stages`` as evenly as possible, the remainder on the first stages (cached: the layout
    search asks for the same split again and again)."""
    base, extra = divmod(num_layers, stages)
    return tuple(base + (1 if r < extra else 0) for r in range(stages))


def problems_key(layout: Layout) -> tuple:
    """Every setting :func:`layout_problems` reads of ``layout`` (not its recompute, ZeRO stage or sequence
    parallelism): for one model and sequence length, layouts with equal keys have the same problems (the layout
    search memoises them; keep the two in step)."""
    interleaved = layout.schedule is Schedule.INTERLEAVED
    return (layout.tensor_parallel, layout.pipeline_parallel, layout.virtual_pipeline, layout.layers_per_stage,
            layout.schedule, layout.micro_batches if interleaved else 0, layout.context_parallel, layout.expert_parallel,
            layout.expert_tensor_parallel)


def layout_problems(arch: Architecture, layout: Layout, seq_len: int) -> list[str]:
    """Why ``layout`` cannot run ``arch`` at ``seq_len`` (empty when it can). Each line names the constraint."""
    out = []
    t, p, v = layout.tensor_parallel, layout.pipeline_parallel, layout.virtual_pipeline
    if arch.kind != "decoder":
        out.append("tensor/pipeline/context parallelism is modelled for decoder-only models")
    if arch.num_attention_heads % t:
        out.append(f"TP {t} does not divide the {arch.num_attention_heads} attention heads")
    if arch.num_key_value_heads % t:
        out.append(f"TP {t} does not divide the {arch.num_key_value_heads} key/value heads (Megatron: num_query_groups % TP)")
    layers = layout.stage_layers(arch.num_layers)
    ends = layout.layers_per_stage is not None  # a given split's end stages may hold an embedding / output chunk
    if len(layers) != p:
        out.append(f"layers_per_stage has {len(layers)} entries for {p} pipeline stages")
    elif sum(layers) != arch.num_layers:
        out.append(f"layers_per_stage sums to {sum(layers)}, the model has {arch.num_layers} layers")
    elif min(layers) < v - ends or min(layers[1:-1] or (v,)) < v:
        out.append(f"PP {p} x virtual {v} needs at least {v} layers per stage ({arch.num_layers} layers)")
    if v > 1 and any(n % v and not (ends and r in (0, p - 1) and (n + 1) % v == 0) for r, n in enumerate(layers)):
        # A given split's first (last) stage may give one of its v chunks to the embedding (the output layer and loss)
        # alone: Megatron-LM --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split; Llama 3
        # (Grattafiori et al. 2024 sec. 3.3.2: "the first model chunk on the first stage has only the embedding").
        # An even split (none given) keeps Megatron's default rule: v divides every stage's layers.
        out.append(f"virtual pipeline {v} must divide every stage's layers ({list(layers)}"
                   + ("; a given split's first and last stage may hold one layer fewer)" if ends else ")"))
    if layout.schedule is Schedule.INTERLEAVED and layout.micro_batches % p:
        out.append(f"the interleaved schedule needs micro batches ({layout.micro_batches}) to be a multiple of PP {p}")
    c = layout.context_parallel
    if seq_len % (2 * c) and c > 1:
        out.append(f"CP {c} splits the sequence into 2 x CP chunks: {seq_len} is not a multiple of {2 * c}")
    e = layout.expert_parallel
    if e > 1 and not arch.num_experts:
        out.append("expert parallelism needs a mixture-of-experts model")
    elif arch.num_experts and arch.num_experts % e:
        out.append(f"EP {e} does not divide the {arch.num_experts} experts")
    if layout.expert_tensor_parallel > 1 and arch.num_experts and arch.intermediate_size % layout.expert_tensor_parallel:
        out.append(f"expert TP {layout.expert_tensor_parallel} does not divide the expert width {arch.intermediate_size}")
    if t > 1 and arch.intermediate_size % t and not arch.num_experts:
        out.append(f"TP {t} does not divide the MLP width {arch.intermediate_size}")
    return out
