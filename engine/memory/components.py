"""A named memory component (bytes, the formula and its source) and the moments of a training step it is alive at.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from engine.scenario.training import Scenario


Phase = Literal["forward", "backward", "recompute", "backward_end", "optimizer_step", "inference"]
PHASES: tuple[Phase, ...] = ("forward", "backward", "recompute", "backward_end", "optimizer_step")
"""The moments of a training step at which the peak can sit, in order (fake-tensor traces,
../shared/reference/tracing-notes.md): the end of the forward (autocast's weight cache and the loss's forward
tensors alive), the start of backward (every saved activation and the loss gradients), the recompute of a
checkpointed block (with gradient checkpointing only), the end of backward (every gradient, plus the
temporaries of a tied embedding's two gradients) and the optimizer step. An inference estimate
(:mod:`engine.memory.inference`) has the one phase ``inference``."""


def step_phases(sc: Scenario) -> tuple[Phase, ...]:
    """The phases of ``sc``'s training step (``recompute`` only with gradient checkpointing)."""
    return tuple(p for p in PHASES if p != "recompute" or sc.gradient_checkpointing)


class MemoryComponent(BaseModel):
    """One named part of the memory, with the formula and the source that produced it.

    ``bytes`` is its size while alive; ``phases`` the phases of the step in which it is alive.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    label: str
    bytes: float
    phases: tuple[Phase, ...]
    formula: str
    source: str
