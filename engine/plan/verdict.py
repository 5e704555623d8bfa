"""The fit verdict: fits / tight (may not fit) / does not fit, and the safety margin behind "tight".

The estimate models ``max_memory_reserved()`` as the allocated tensor peak plus
:data:`engine.memory.device.ALLOCATOR_RESERVE_FRACTION` (10%) of it, and what nvidia-smi shows as that plus the CUDA
context. Published runs that report both ``max_memory_allocated`` and ``max_memory_reserved`` show the reserve
between +5% and +20% of the allocated peak (../shared/reference/README.md, "typically +5-20%"), so a run whose
modelled device total fits with less to spare than the other half of that spread can still run out of memory: the
caching allocator of that run may hold up to 20%, not 10%.

Rule (per GPU; ``allocated`` = the tensor peak, ``usable`` = the GPU's usable memory):

- ``does_not_fit``: allocated x (1 + 10%) + CUDA context > usable (the modelled device total does not fit);
- ``tight``: it fits, but allocated x (1 + :data:`WORST_RESERVE_FRACTION`) + CUDA context > usable: the headroom is
  below :data:`SAFETY_MARGIN_FRACTION` (10%) of the allocated peak, the part of the published reserve spread above
  the modelled reserve. Shown as "tight: may not fit";
- ``fits``: otherwise.

Example: GPT-2-large (774M) full fine-tuning at micro batch 4 x 1,024 tokens on a V100 32GB is modelled within a
few hundred KB of the usable memory, which its reporters ran out of: ``tight``.
"""

from __future__ import annotations

from enum import Enum

from engine.memory.device import ALLOCATOR_RESERVE_FRACTION, CUDA_CONTEXT_BYTES, tensor_budget

WORST_RESERVE_FRACTION = 0.20
"""The largest allocator reserve published runs show, as a fraction of the allocated peak (+5..+20%)."""
SAFETY_MARGIN_FRACTION = WORST_RESERVE_FRACTION - ALLOCATOR_RESERVE_FRACTION
"""Headroom, as a fraction of the allocated peak, below which a fit is "tight": 20% - 10% = 10%."""


class Verdict(str, Enum):
    """Whether a run fits a GPU: ``fits``, ``tight`` (fits by the model, with less than the safety margin to
    spare: may not fit) or ``does_not_fit``."""

    FITS = "fits"
    TIGHT = "tight"
    DOES_NOT_FIT = "does_not_fit"

    @property
    def fits(self) -> bool:
        """The boolean ``fits`` (tight counts as fitting, as the model predicts)."""
        return self is not Verdict.DOES_NOT_FIT


VERDICT_LABELS = {Verdict.FITS: "fits", Verdict.TIGHT: "tight: may not fit", Verdict.DOES_NOT_FIT: "does not fit"}


def fit_verdict(allocated_bytes: float, usable_bytes: float, budget_bytes: float | None = None) -> Verdict:
    """The :class:`Verdict` of a per-GPU tensor peak of ``allocated_bytes`` on a GPU with ``usable_bytes`` of usable
    memory (both bytes; see the module docstring for the rule and the margin's source). ``budget_bytes``:
    ``tensor_budget(usable_bytes)`` when the caller has it (the fit matrix, once per GPU)."""
    budget = tensor_budget(usable_bytes) if budget_bytes is None else budget_bytes
    if allocated_bytes > budget:  # the same test as every fit search
        return Verdict.DOES_NOT_FIT
    if allocated_bytes * (1 + WORST_RESERVE_FRACTION) + CUDA_CONTEXT_BYTES > usable_bytes:
        return Verdict.TIGHT
    return Verdict.FITS
