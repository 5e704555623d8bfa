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
- ``sgd_momentum`` - ``torch.optim.SGD(momentum=0.9)`` (``optim="sgd"``, ``optim_args="momentum=0.9"``): one
  ``momentum_buffer`` per parameter, a clone of the first gradient (so the parameter's dtype).

Paged optimizers (``paged_*``) allocate their states with ``cudaMallocManaged``: they count on the GPU
while there is room (what ``nvidia-smi`` shows), but the driver may evict them to CPU RAM under pressure
instead of failing with out-of-memory; they are not in ``torch.cuda.max_memory_allocated()``'s tensor
pool (bitsandbytes 0.4x ``GlobalPageManager``). :func:`is_paged` tells them apart.
"""

from __future__ import annotations

from enum import Enum
from typing import Iterable

from engine.model.architecture import TensorGroup

BNB_BLOCK_SIZE = 256
"""Elements per quantization block of bitsandbytes' 8-bit optimizer states (``blocksize=256``)."""
BNB_MIN_8BIT_SIZE = 4096
"""bitsandbytes keeps 32-bit states for tensors with fewer elements than this (``min_8bit_size``)."""


class Optimizer(str, Enum):
    """Optimizers by the engine's CLI name; :attr:`hf_name` gives ``TrainingArguments(optim=...)``."""

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
    LORA_FA = "lora_fa"

    @property
    def hf_name(self) -> str:
        """The value of ``transformers.TrainingArguments.optim`` that selects this optimizer."""
        return {
            "adamw": "adamw_torch",
            "adamw_fused": "adamw_torch_fused",
            "adamw_8bit": "adamw_8bit",
            "paged_adamw_8bit": "paged_adamw_8bit",
            "paged_adamw_32bit": "paged_adamw_32bit",
            "lion_32bit": "lion_32bit",
            "lion_8bit": "lion_8bit",
            "adafactor": "adafactor",
            "sgd": "sgd",
            "sgd_momentum": "sgd",
            "galore_adamw": "galore_adamw",
            "lora_fa": "adamw_torch",  # LoRA-FA is built with peft.optimizers.create_lorafa_optimizer, not by name
        }[self.value]

    @property
    def hf_optim_args(self) -> str | None:
        """``TrainingArguments(optim_args=...)`` needed beside :attr:`hf_name` (SGD's momentum), or None."""
        return "momentum=0.9" if self is Optimizer.SGD_MOMENTUM else None

    @property
    def needs_bitsandbytes(self) -> bool:
        """Whether the optimizer is a bitsandbytes CUDA kernel (not available without a GPU)."""
        return self in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT, Optimizer.PAGED_ADAMW_32BIT,
                        Optimizer.LION_32BIT, Optimizer.LION_8BIT)


def is_paged(optimizer: Optimizer) -> bool:
    """Whether the optimizer keeps its states in paged (CUDA unified) memory."""
    return optimizer in (Optimizer.PAGED_ADAMW_8BIT, Optimizer.PAGED_ADAMW_32BIT)


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


def _state_bytes_one(group: TensorGroup, param_bytes: float, optimizer: Optimizer, galore_rank: int = GALORE_RANK) -> float:
    """State bytes of one tensor of ``group`` whose elements take ``param_bytes`` bytes."""
    n = group.numel
    if optimizer is Optimizer.GALORE_ADAMW:
        if galore_projected(group):
            low, proj = galore_shapes(group, galore_rank, param_bytes)
            return (2 * low + proj) * param_bytes
        return 2 * n * param_bytes
    if optimizer in (Optimizer.ADAMW, Optimizer.ADAMW_FUSED, Optimizer.LORA_FA):
        return 2 * n * param_bytes
    if optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        return 2 * _eight_bit_state(n)
    if optimizer is Optimizer.PAGED_ADAMW_32BIT:
        return 2 * n * 4.0
    if optimizer is Optimizer.LION_32BIT:
        return n * 4.0
    if optimizer is Optimizer.LION_8BIT:
        return _eight_bit_state(n)
    if optimizer is Optimizer.SGD_MOMENTUM:
        return n * param_bytes
    if optimizer is Optimizer.ADAFACTOR:
        if len(group.shape) >= 2:
            rows, cols = group.numel // group.shape[-1], group.shape[-1]
            return 4.0 * (rows + cols)
        return 4.0 * n
    return 0.0  # SGD without momentum


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
    return sum(_state_bytes_one(g, b, optimizer, galore_rank) * g.count for g, b in groups)


def step_temporary_bytes(groups: Iterable[tuple[TensorGroup, float]], optimizer: Optimizer,
                         galore_rank: int = GALORE_RANK) -> float:
    """Transient bytes allocated inside ``optimizer.step()``.

    torch's foreach AdamW materialises intermediate lists about the size of the parameters (traced:
    20 instead of 16 B/param at the step for fp32 weights); fused AdamW and bitsandbytes' kernels update
    in place; Adafactor works one tensor at a time with fp32 temporaries the size of that tensor.
    """
    groups = list(groups)
    if optimizer is Optimizer.GALORE_ADAMW and groups:
        return max(_galore_temporaries(g, b, galore_rank) for g, b in groups)
    if optimizer is Optimizer.ADAMW:
        return sum(g.parameters * b for g, b in groups)
    if optimizer is Optimizer.ADAFACTOR and groups:
        # Per tensor: the fp32 update and squared-gradient tensors, plus fp32 copies of a 16-bit
        # gradient and parameter (transformers upcasts both); only one tensor is in flight at a time.
        return max((8.0 + (8.0 if b < 4 else 0.0)) * g.numel for g, b in groups)
    return 0.0


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
