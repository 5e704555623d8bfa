"""Optimizer states and the optimizer step's temporaries, by optimizer (:mod:`engine.scenario.optimizer`).
"""

from __future__ import annotations

from engine.memory.components import MemoryComponent, step_phases
from engine.memory.weights import ParamTensors
from engine.scenario.optimizer import is_paged, optimizer_state_bytes, step_temporary_bytes
from engine.scenario.training import Scenario


def optimizer_components(t: ParamTensors, sc: Scenario) -> list[MemoryComponent]:
    states = optimizer_state_bytes(t.trainable, sc.optimizer, sc.galore_rank)
    temps = step_temporary_bytes(t.trainable, sc.optimizer, sc.galore_rank)
    paged = " (paged: unified memory, may be evicted to CPU RAM)" if is_paged(sc.optimizer) else ""
    return [
        MemoryComponent(
            key="optimizer_states",
            label="Optimizer states",
            bytes=states,
            phases=step_phases(sc),
            formula=f"{sc.optimizer.value}: state tensors per trainable tensor{paged}",
            source="engine.scenario.optimizer (torch AdamW/SGD, bitsandbytes 8-bit/paged/Lion, transformers Adafactor)",
        ),
        MemoryComponent(
            key="optimizer_temporaries",
            label="Optimizer step temporaries",
            bytes=temps,
            phases=("optimizer_step",),
            formula="foreach AdamW: about one copy of the trainable parameters during step()" if temps else "none",
            source="fake-tensor traces of torch 2.13 AdamW (tracing-notes.md)",
        ),
    ]
