"""Optimizer state memory, per parameter tensor.

Each optimizer keeps state tensors per trainable parameter tensor; their size depends on the tensor's
shape and dtype, so states are computed from the :class:`~engine.model.architecture.TensorGroup` shapes, not
from a parameter total. Behaviour modelled (and its source):

- ``adamw`` - ``torch.optim.AdamW`` (torch 2.x, foreach implementation, ``optim="adamw_torch"``): ``exp_avg`` and ``exp_avg_sq`` are ``zeros_like(param)``, so 2 x the *parameter's*
  bytes (8 B/param for fp32 weights, 4 B/param for pure bf16: the seed chapter's "2 states in fp32"
  holds for mixed precision, not for pure bf16). The foreach step allocates temporaries of about one
  parameter-sized tensor (measured by fake-tensor traces, ../shared/reference/tracing-notes.md).
- ``adamw_fused`` - ``AdamW(fused=True)`` (``adamw_torch_fused``, the default of transformers 5.x
  ``TrainingArguments.optim``): same states, no step temporaries.
- ``adamw_8bit`` / ``paged_adamw_8bit`` - bitsandbytes ``AdamW8bit`` / ``PagedAdamW8bit`` (0.4x):
  two uint8 states with one fp32 absmax per 256-element block (Dettmers et al. 2022, "8-bit Optimizers
  via Block-wise Quantization", sec. 2); tensors under 4,096 elements (``min_8bit_size``) keep fp32
  states. Paged states live in CUDA unified memory and can be evicted to CPU RAM under pressure.
- ``adafactor`` - transformers ``Adafactor`` defaults (``beta1=None``): no first moment; the second
  moment of a matrix is factored into a row and a column vector, vectors keep a full one (Shazeer &
  Stern 2018, "Adafactor", sec. 3); states are fp32 (transformers upcasts 16-bit gradients).
- ``paged_adamw_32bit`` - bitsandbytes ``PagedAdamW32bit``: two fp32 states whatever the parameter dtype
  (bitsandbytes creates 32-bit state buffers as ``float32``), in paged (unified) memory.
- ``lion_32bit`` / ``lion_8bit`` - bitsandbytes ``Lion`` (Chen et al. 2023, "Symbolic Discovery of
  Optimization Algorithms", Algorithm 2): one momentum state only, fp32 or block-wise 8-bit.
- ``sgd`` - ``torch.optim.SGD`` with momentum 0 (the Trainer's ``sgd``): no state.
- ``galore_adamw_8bit_layerwise`` - transformers ``optim="galore_adamw_8bit_layerwise"`` / LLaMA-Factory ``use_galore``
  + ``galore_layerwise`` with ``optim: adamw_8bit`` (LLaMA-Factory@8963e89 ``train/utils.py``
  ``_create_galore_optimizer``, the example ``examples/extras/galore/galore_adamw_8bit_bf16.sh``): one galore-torch
  ``GaLoreAdamW8bit`` per parameter, stepped in its ``register_post_accumulate_grad_hook`` during backward and then
  ``zero_grad``-ed, so one parameter's full gradient is alive at a time and the Trainer clips nothing. A projected
  tensor keeps bitsandbytes' two 8-bit states of the r x max(m, n) projected gradient and the r x min(m, n)
  projection; every other tensor two 8-bit states of its size. ``GaLoreAdamW8bit.step`` (galore-torch 1.0
  ``galore_torch/adamw8bit.py``) clones the weight (``p.saved_data``), runs the bitsandbytes update on the projected
  zeros, calls ``torch.cuda.synchronize()`` and adds the update projected back.
- ``sgd_momentum`` - ``torch.optim.SGD(momentum=0.9)`` (``optim="sgd"``, ``optim_args="momentum=0.9"``): one
  ``momentum_buffer`` per parameter, a clone of the first gradient (so the parameter's dtype).

Every fact of one optimizer (label, Trainer name, state and temporary bytes, step passes, host-loop kind, traceable,
importer names, what each export can say) is its :class:`OptimizerRecord` in :data:`RECORDS`; CLI choices, widget
labels, the time model's passes and host time, the exports, the importers' name maps, the tracer's list and URL keys
are derived from the records.

Paged optimizers (``paged_*``) allocate their states with ``cudaMallocManaged``: they count on the GPU
while there is room (what ``nvidia-smi`` shows), but the driver may evict them to CPU RAM under pressure
instead of failing with out-of-memory; they are not in ``torch.cuda.max_memory_allocated()``'s tensor
pool (bitsandbytes 0.4x ``GlobalPageManager``). :func:`is_paged` tells them apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Iterable, Literal, Mapping

from engine.model.architecture import TensorGroup

BNB_BLOCK_SIZE = 256
"""Elements per quantization block of bitsandbytes' 8-bit optimizer states (``blocksize=256``)."""
BNB_MIN_8BIT_SIZE = 4096
"""bitsandbytes keeps 32-bit states for tensors with fewer elements than this (``min_8bit_size``)."""


class StepKernel(str, Enum):
    """How an optimizer's step moves through its tensors (read by :mod:`engine.time.memory_bound`)."""

    FUSED = "fused"
    """One kernel pass over each tensor: torch ``AdamW(fused=True)``, bitsandbytes' blockwise kernels."""
    MULTI_PASS = "multi_pass"
    """About ten elementwise ops that each re-read their operands: torch's foreach AdamW/SGD, Adafactor, GaLore."""


class HostLoop(str, Enum):
    """How the host launches an optimizer's step (read by :mod:`engine.time.overhead`)."""

    FUSED_CHUNKS = "fused_chunks"
    """One fused kernel per chunk of tensors (torch ``fused=True``)."""
    FOREACH_CHUNKS = "foreach_chunks"
    """About a dozen ``_foreach_*`` kernels per chunk of tensors (torch's foreach implementation)."""
    PER_TENSOR = "per_tensor"
    """A Python loop over the tensors, one launch and its argument checks each (Adafactor)."""
    PER_TENSOR_SYNCED = "per_tensor_synced"
    """A Python loop over the tensors that waits for the GPU after each one: bitsandbytes' ``Optimizer8bit.step`` (the
    base of all its optimizers, 8- and 32-bit, paged or not) calls ``torch.cuda.synchronize()`` after every
    parameter's ``update_step`` (bitsandbytes 0.41.0 to 0.43.3, ``bitsandbytes/optim/optimizer.py``; still so when
    bitsandbytes-foundation/bitsandbytes PR #2050 proposed removing it for non-paged optimizers), so the host's Python
    and the GPU's kernels take turns instead of overlapping."""


EXPORTS = ("trl", "axolotl", "llamafactory", "code")
"""The plan exports that name an optimizer: TRL ``SFTConfig`` YAML, axolotl YAML, LLaMA-Factory YAML
(:mod:`engine.plan.config_export`) and the ``TrainingArguments`` snippet (:func:`engine.plan.training_code.training_code`)."""

Requires = Literal["any", "full", "lora_pairs"]
"""The methods an optimizer applies to: any, full fine-tuning only (GaLore), LoRA's A/B pairs only (LoRA-FA)."""


class Optimizer(str, Enum):
    """Optimizers by the engine's CLI name. Every fact of one optimizer is its :class:`OptimizerRecord` in
    :data:`RECORDS` (:attr:`record`); a new optimizer is a member here and a record there (tests/scenario checks
    every member has one, with a label, a host-loop kind and what each export says)."""

    ADAMW = "adamw"
    ADAMW_FUSED = "adamw_fused"
    ADAMW_8BIT = "adamw_8bit"
    PAGED_ADAMW_8BIT = "paged_adamw_8bit"
    PAGED_ADAMW_32BIT = "paged_adamw_32bit"
    LION_32BIT = "lion_32bit"
    LION_8BIT = "lion_8bit"
    ADAFACTOR = "adafactor"
    SGD = "sgd"
    SGD_MOMENTUM = "sgd_momentum"
    GALORE_ADAMW = "galore_adamw"
    GALORE_ADAMW_8BIT_LAYERWISE = "galore_adamw_8bit_layerwise"
    LORA_FA = "lora_fa"

    @property
    def record(self) -> "OptimizerRecord":
        """Everything the engine knows about this optimizer (:data:`RECORDS`)."""
        return RECORDS[self]

    @property
    def hf_name(self) -> str | None:
        """The value of ``transformers.TrainingArguments.optim`` that selects this optimizer; None when the Trainer
        has no name for it (LoRA-FA): an export then says so instead of naming another optimizer."""
        return RECORDS[self].trainer_optim

    @property
    def hf_optim_args(self) -> str | None:
        """``TrainingArguments(optim_args=...)`` needed beside :attr:`hf_name` (SGD's momentum), or None."""
        return RECORDS[self].trainer_optim_args

    @property
    def needs_bitsandbytes(self) -> bool:
        """Whether the optimizer is a bitsandbytes CUDA kernel (not available without a GPU)."""
        return RECORDS[self].bitsandbytes


def is_paged(optimizer: Optimizer) -> bool:
    """Whether the optimizer keeps its states in paged (CUDA unified) memory."""
    return RECORDS[optimizer].paged


def _eight_bit_state(n: int) -> float:
    """Bytes of one bitsandbytes 8-bit state of ``n`` elements: uint8 values plus one fp32 absmax per
    256-element block; tensors under ``min_8bit_size`` keep an fp32 state."""
    if n < BNB_MIN_8BIT_SIZE:
        return n * 4.0
    return n * 1 + -(-n // BNB_BLOCK_SIZE) * 4


GALORE_RANK = 128
"""transformers 5 ``optim="galore_adamw"`` default rank (``optim_args`` ``rank``)."""


def galore_projected(group: TensorGroup) -> bool:
    """GaLore projects the weights of the decoder blocks' linear layers (transformers ``optim_target_modules``
    over the attention and MLP modules); every other tensor keeps full Adam states."""
    return group.linear and len(group.shape) == 2


def galore_shapes(group: TensorGroup, rank: int, param_bytes: float = 2.0) -> tuple[int, int]:
    """(elements of the projected gradient and of each state, elements the projection matrix keeps alive) of one
    tensor: galore-torch 1.0 ``GaLoreProjector`` (``proj_type="std"``) projects on the smaller side, so a (m x n)
    gradient becomes r x max(m, n) (Zhao et al. 2024, "GaLore", Algorithm 2). Its orthogonal matrix is a slice of
    the SVD's U or V^T: a 16-bit parameter gets an r x min(m, n) copy (``.type(original_type)``), but an fp32 one
    keeps the slice, a view that holds the whole min(m, n) x min(m, n) factor (traced: +1.38 GB on Llama-3.2-1B)."""
    m, n = group.shape
    r = min(rank, m, n)
    k = min(m, n)
    return r * max(m, n), (k * k if param_bytes >= 4 else r * k)


def optimizer_state_bytes(groups: Iterable[tuple[TensorGroup, float]], optimizer: Optimizer,
                          galore_rank: int = GALORE_RANK) -> float:
    """Bytes of optimizer state for trainable tensors.

    Args:
        groups: pairs (tensor group, bytes per element of those trainable tensors).
        optimizer: which optimizer.
    Returns:
        Bytes, summed over every tensor (``group.count`` tensors per group). Scalar per-tensor state
        (Adam's ``step``, 4 bytes per tensor) is left out: under 0.01 % for every supported model.
    """
    state = RECORDS[optimizer].state
    return sum(state(g, b, galore_rank) * g.count for g, b in groups)


def step_temporary_bytes(groups: Iterable[tuple[TensorGroup, float]], optimizer: Optimizer,
                         galore_rank: int = GALORE_RANK) -> float:
    """Transient bytes allocated inside ``optimizer.step()``.

    torch's foreach AdamW materialises intermediate lists about the size of the parameters (traced:
    20 instead of 16 B/param at the step for fp32 weights); fused AdamW and bitsandbytes' kernels update
    in place; Adafactor works one tensor at a time with fp32 temporaries the size of that tensor.
    """
    return RECORDS[optimizer].temporaries(list(groups), galore_rank)


def _galore_temporaries(group: TensorGroup, b: float, rank: int) -> float:
    """galore-torch 1.0 ``AdamW.step`` works one tensor at a time: the square root of the second moment and the
    normalised update (state-sized each); for a projected tensor also the projected gradient, the update projected
    back to m x n and its scaled copy, and, when the projection is refreshed (every ``update_proj_gap`` steps, 200 by
    default, and at the first), the fp32 SVD of the gradient: its fp32 copy, U (m x k) and V^T (k x n), k = min(m, n)."""
    if not galore_projected(group):
        return 2.0 * group.numel * b
    low, _ = galore_shapes(group, rank)
    m, n = group.shape
    k = min(m, n)
    update = 3 * low * b + 2 * m * n * b
    svd = (m * n if b < 4 else 0) * 4.0 + (m * k + k * n) * 4.0
    return max(update, svd)


# --- the records: every fact of one optimizer in one place ------------------------------------------------------

StateFn = Callable[[TensorGroup, float, int], float]
"""Bytes of the states of ONE tensor of a group: (group, bytes per element of the trainable tensor, GaLore rank)."""
TemporariesFn = Callable[[list[tuple[TensorGroup, float]], int], float]
"""Bytes allocated inside ``optimizer.step()``: (pairs (group, bytes per element), GaLore rank)."""


@dataclass(frozen=True)
class OptimizerRecord:
    """One optimizer, everything the engine says about it; every list of optimizers is derived from these.

    - ``label``: the app's widget label.
    - ``trainer_optim`` / ``trainer_optim_args``: ``TrainingArguments(optim=..., optim_args=...)`` (TRL, axolotl's
      ``optimizer`` and LLaMA-Factory take the same names); ``trainer_optim=None``: the Trainer has no name for it,
      and every export says so (``unnamed_note``, ``build_code``) instead of naming another optimizer.
    - ``trainer_imports``: the ``optim`` names :mod:`engine.importers` reads as this optimizer; ``torchtune_components``
      (lower-case ``optimizer._component_``) and ``deepspeed_types`` (``optimizer.type``) likewise.
    - ``state`` / ``temporaries``: state bytes of one tensor and the step's temporaries (:func:`optimizer_state_bytes`,
      :func:`step_temporary_bytes`); ``step_kernel`` (HBM passes) and ``host_loop`` (launch time) for the time model.
    - ``traceable``: the fake-tensor tracer can build it (:mod:`engine.trace`); ``bitsandbytes``: a bitsandbytes CUDA
      kernel; ``paged``: states in CUDA unified memory; ``eight_bit``: block-wise 8-bit states.
    - ``requires``: the methods it applies to (:data:`Requires`); ``freezes_lora_a``: lora_A gets no gradient or state.
    - ``galore``: projects the block linears' gradients (GaLore: rank, SVD refresh, the exports' target modules);
      ``layerwise``: steps each parameter inside backward in its post-accumulate-grad hook (one full gradient alive at
      a time, no gradient clipping, gradient accumulation refused).
    - ``export_notes``: per export of :data:`EXPORTS`, what that file cannot say about this optimizer.
    """

    name: str
    label: str
    trainer_optim: str | None
    state: StateFn
    step_kernel: StepKernel
    host_loop: HostLoop
    traceable: bool
    temporaries: TemporariesFn = lambda groups, rank: 0.0
    trainer_optim_args: str | None = None
    trainer_imports: tuple[str, ...] = ()
    torchtune_components: tuple[str, ...] = ()
    deepspeed_types: tuple[str, ...] = ()
    bitsandbytes: bool = False
    paged: bool = False
    eight_bit: bool = False
    requires: Requires = "any"
    freezes_lora_a: bool = False
    galore: bool = False
    layerwise: bool = False
    unnamed_note: str | None = None
    build_code: tuple[str, ...] = ()
    export_notes: Mapping[str, str] = field(default_factory=dict)


def _adam_states(g: TensorGroup, b: float, rank: int) -> float:
    return 2 * g.numel * b  # exp_avg and exp_avg_sq: zeros_like(param)


def _adam_8bit_states(g: TensorGroup, b: float, rank: int) -> float:
    return 2 * _eight_bit_state(g.numel)


def _adam_32bit_states(g: TensorGroup, b: float, rank: int) -> float:
    return 2 * g.numel * 4.0  # bitsandbytes' 32-bit buffers are float32 whatever the parameter dtype


def _one_fp32_state(g: TensorGroup, b: float, rank: int) -> float:
    return g.numel * 4.0


def _one_8bit_state(g: TensorGroup, b: float, rank: int) -> float:
    return _eight_bit_state(g.numel)


def _momentum_state(g: TensorGroup, b: float, rank: int) -> float:
    return g.numel * b  # momentum_buffer: a clone of the first gradient


def _no_state(g: TensorGroup, b: float, rank: int) -> float:
    return 0.0


def _adafactor_states(g: TensorGroup, b: float, rank: int) -> float:
    if len(g.shape) >= 2:
        rows, cols = g.numel // g.shape[-1], g.shape[-1]
        return 4.0 * (rows + cols)
    return 4.0 * g.numel


def _galore_states(g: TensorGroup, b: float, rank: int) -> float:
    if galore_projected(g):
        low, proj = galore_shapes(g, rank, b)
        return (2 * low + proj) * b
    return 2 * g.numel * b


def _galore_8bit_states(g: TensorGroup, b: float, rank: int) -> float:
    if galore_projected(g):
        low, proj = galore_shapes(g, rank, b)
        return 2 * _eight_bit_state(low) + proj * b
    return 2 * _eight_bit_state(g.numel)


def _galore_8bit_temporaries(groups: list[tuple[TensorGroup, float]], rank: int) -> float:
    """One tensor at a time (``GaLoreAdamW8bit.step`` per parameter): for a projected tensor the projected gradient,
    its clone that becomes ``p.data`` (low-rank each), the weight's clone ``p.saved_data`` and the update projected
    back (m x n each); at a projection refresh the fp32 SVD as :func:`_galore_temporaries` counts it. bitsandbytes
    updates the other tensors in place."""
    out = 0.0
    for g, b in groups:
        if galore_projected(g):
            low, _ = galore_shapes(g, rank)
            m, n = g.shape
            k = min(m, n)
            svd = (m * n if b < 4 else 0) * 4.0 + (m * k + k * n) * 4.0
            out = max(out, 2 * low * b + 2 * m * n * b, svd)
    return out


def _foreach_adamw_temporaries(groups: list[tuple[TensorGroup, float]], rank: int) -> float:
    return sum(g.parameters * b for g, b in groups)


def _adafactor_temporaries(groups: list[tuple[TensorGroup, float]], rank: int) -> float:
    # Per tensor: the fp32 update and squared-gradient tensors, plus fp32 copies of a 16-bit
    # gradient and parameter (transformers upcasts both); only one tensor is in flight at a time.
    return max((8.0 + (8.0 if b < 4 else 0.0)) * g.numel for g, b in groups) if groups else 0.0


def _galore_step_temporaries(groups: list[tuple[TensorGroup, float]], rank: int) -> float:
    return max(_galore_temporaries(g, b, rank) for g, b in groups) if groups else 0.0


_BNB = dict(step_kernel=StepKernel.FUSED, host_loop=HostLoop.PER_TENSOR_SYNCED, traceable=False, bitsandbytes=True)
_FOREACH = dict(step_kernel=StepKernel.MULTI_PASS, host_loop=HostLoop.FOREACH_CHUNKS, traceable=True)

RECORDS: dict[Optimizer, OptimizerRecord] = {Optimizer(r.name): r for r in (
    OptimizerRecord("adamw", "AdamW (torch, foreach: adamw_torch)", "adamw_torch", _adam_states,
                    temporaries=_foreach_adamw_temporaries, trainer_imports=("adamw_torch",),
                    torchtune_components=("torch.optim.adamw", "torch.optim.adam"), **_FOREACH),
    OptimizerRecord("adamw_fused", "AdamW (torch, fused: Trainer default)", "adamw_torch_fused", _adam_states,
                    step_kernel=StepKernel.FUSED, host_loop=HostLoop.FUSED_CHUNKS, traceable=True,
                    trainer_imports=("adamw_torch_fused", "adamw_apex_fused"), deepspeed_types=("adamw", "adam")),
    OptimizerRecord("adamw_8bit", "8-bit AdamW (bitsandbytes)", "adamw_8bit", _adam_8bit_states, eight_bit=True,
                    trainer_imports=("adamw_8bit", "adamw_bnb_8bit"),
                    torchtune_components=("bitsandbytes.optim.adamw8bit",), **_BNB),
    OptimizerRecord("paged_adamw_8bit", "Paged 8-bit AdamW (bitsandbytes)", "paged_adamw_8bit", _adam_8bit_states,
                    eight_bit=True, paged=True, trainer_imports=("paged_adamw_8bit",),
                    torchtune_components=("bitsandbytes.optim.pagedadamw8bit",), **_BNB),
    OptimizerRecord("paged_adamw_32bit", "Paged 32-bit AdamW (bitsandbytes)", "paged_adamw_32bit", _adam_32bit_states,
                    paged=True, trainer_imports=("paged_adamw_32bit",),
                    torchtune_components=("bitsandbytes.optim.pagedadamw", "bitsandbytes.optim.pagedadamw32bit"), **_BNB),
    OptimizerRecord("lion_32bit", "Lion 32-bit (bitsandbytes)", "lion_32bit", _one_fp32_state,
                    trainer_imports=("lion_32bit",), torchtune_components=("bitsandbytes.optim.lion",), **_BNB),
    OptimizerRecord("lion_8bit", "8-bit Lion (bitsandbytes)", "lion_8bit", _one_8bit_state, eight_bit=True,
                    trainer_imports=("lion_8bit",), torchtune_components=("bitsandbytes.optim.lion8bit",), **_BNB),
    OptimizerRecord("adafactor", "Adafactor (transformers)", "adafactor", _adafactor_states,
                    step_kernel=StepKernel.MULTI_PASS, host_loop=HostLoop.PER_TENSOR, traceable=True,
                    temporaries=_adafactor_temporaries, trainer_imports=("adafactor",)),
    OptimizerRecord("sgd", "SGD (no momentum)", "sgd", _no_state, trainer_imports=("sgd",),
                    torchtune_components=("torch.optim.sgd",), **_FOREACH),
    # "sgd" + optim_args momentum: the importers upgrade SGD to this when a momentum is given
    OptimizerRecord("sgd_momentum", "SGD with momentum 0.9", "sgd", _momentum_state,
                    trainer_optim_args="momentum=0.9", **_FOREACH),
    OptimizerRecord("galore_adamw", "GaLore AdamW (galore-torch, full fine-tuning)", "galore_adamw", _galore_states,
                    temporaries=_galore_step_temporaries, trainer_imports=("galore_adamw",), requires="full",
                    galore=True, **_FOREACH),
    OptimizerRecord("galore_adamw_8bit_layerwise", "GaLore 8-bit AdamW, layer-wise (galore-torch + bitsandbytes, full)",
                    "galore_adamw_8bit_layerwise", _galore_8bit_states, temporaries=_galore_8bit_temporaries,
                    trainer_imports=("galore_adamw_8bit_layerwise",), requires="full", galore=True, layerwise=True,
                    **_BNB),  # eight_bit stays False: the checklist's "8-bit optimizer" swap is for any method, GaLore
                              # is full fine-tuning only (its states are 8-bit all the same, _galore_8bit_states)
    OptimizerRecord("lora_fa", "LoRA-FA (PEFT, frozen lora_A)", None, _adam_states, requires="lora_pairs",
                    freezes_lora_a=True,
                    unnamed_note="LoRA-FA has no TrainingArguments optim name: build it with "
                                 "peft.optimizers.create_lorafa_optimizer and pass it to the Trainer "
                                 "(optimizers=(optimizer, None))",
                    build_code=("from peft.optimizers import create_lorafa_optimizer",
                                "optimizer = create_lorafa_optimizer(model, r={lora_r!r}, lora_alpha={lora_alpha!r}, "
                                "lr=training_args.learning_rate)",
                                "# Trainer(model=model, args=training_args, optimizers=(optimizer, None), ...)"),
                    **_FOREACH),
)}
"""Every optimizer's :class:`OptimizerRecord`, by member (sources of each rule in the module docstring)."""

_missing = [o.value for o in Optimizer if o not in RECORDS]
if _missing:  # a member without its record would fail later, far from here
    raise RuntimeError(f"engine.scenario.optimizer: no OptimizerRecord for {', '.join(_missing)}")
