"""What a trace returns: peak allocated bytes of a training step, by phase and by category.

Torch-free (pydantic only), so the app and the engine can read results without the ``[trace]`` extra.
Every size is in bytes, each allocation rounded up to 512 bytes as PyTorch's CUDA caching allocator
rounds block sizes (``c10/cuda/CUDACachingAllocator.cpp``, ``kMinBlockSize = 512``); the peak models
``torch.cuda.max_memory_allocated()`` (allocated, not reserved: fragmentation and the CUDA context are
not included).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

PHASES = ("forward", "backward", "optimizer")
"""Phases of a step: forward (inputs to loss), backward (``loss.backward()``), optimizer (gradient
clipping, ``optimizer.step()``, ``zero_grad``)."""

CATEGORIES = (
    "parameters", "weight_copies", "gradients", "optimizer_states", "activations",
    "backward_temporaries", "optimizer_temporaries",
)
"""Labels of the live bytes at a peak:

- ``parameters``: the model's parameters and buffers (frozen and trainable, LoRA adapters included);
- ``weight_copies``: low-precision copies of parameters made by ``torch.autocast`` (a ``_to_copy`` of a
  parameter in forward or backward; autocast caches them for the step);
- ``gradients``: ``.grad`` of trainable parameters (labelled by a post-accumulate-grad hook);
- ``optimizer_states``: tensors in ``optimizer.state`` (Adam moments, Adafactor factors, fused step counters);
- ``activations``: everything else created in forward (inputs, saved activations, logits, loss);
- ``backward_temporaries``: created in backward and not a gradient (activation gradients, recomputed
  activations under gradient checkpointing);
- ``optimizer_temporaries``: created during clipping/``step()`` and not a state (foreach intermediates).
"""


class StepPeak(BaseModel):
    """Peak of one training step (one optimizer step, all its micro-batches)."""

    model_config = ConfigDict(frozen=True)

    peak_allocated_bytes: int = Field(ge=0)
    peak_phase: str
    phase_peaks: dict[str, int]
    breakdown: dict[str, int]
    """Live bytes per category (:data:`CATEGORIES`) at the peak; they sum to ``peak_allocated_bytes``."""


class TraceResult(BaseModel):
    """The trace of two training steps; the top-level peak fields are the steady-state (second) step's."""

    model_config = ConfigDict(frozen=True)

    peak_allocated_bytes: int = Field(ge=0)
    peak_phase: str
    phase_peaks: dict[str, int]
    breakdown: dict[str, int]
    first_step: StepPeak
    attention_kernel: str
    """Attention kernel a GPU would run: ``flash``, ``memory_efficient``, ``math`` (SDPA) or ``eager``."""
    kernel_calls: dict[str, int] = Field(default_factory=dict)
    total_parameters: int
    trainable_parameters: int
    micro_batches_traced: int
    """Micro-batches per step traced: ``min(gradient_accumulation_steps, 2)`` (later ones repeat the second)."""
    allocations: int
    """Allocations counted over both steps."""
    trace_seconds: float
    """Seconds spent building the model and running the two steps (in the worker)."""
    wall_seconds: float = 0.0
    """Seconds seen by the caller (worker start, imports and trace)."""
    versions: dict[str, str]
    notes: list[str] = Field(default_factory=list)

    @property
    def steady_state(self) -> StepPeak:
        """The second step's peak as a :class:`StepPeak`."""
        return StepPeak(peak_allocated_bytes=self.peak_allocated_bytes, peak_phase=self.peak_phase,
                        phase_peaks=self.phase_peaks, breakdown=self.breakdown)
