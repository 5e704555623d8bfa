"""The layout search's per-rank peak of a stage: :func:`engine.scaleout.memory.stage_parts` summed into its peak
phase (:func:`~engine.scaleout.memory.peak_of`) to the last bit, without building the parts.

Each of a stage's three sections (model states, activations, buffers) reads only a few of the layout's settings and
of its context's, and thousands of layouts share them: what a section adds is recorded once (as bytes and phase
indices) under those settings and replayed into the per-phase sums in the order :func:`peak_of` adds them.
"""

from __future__ import annotations

from typing import Callable, Iterable

from engine.memory.components import PHASES, MemoryComponent, Phase
from engine.model.architecture import Architecture
from engine.scaleout.layout import Layout
from engine.scaleout.memory import (
    Context, _activations, _buffers, _in_flight, _model_states, _Parts, _Stage, buffers_reads, states_reads,
)


class SectionPool:
    """The sections :func:`most_loaded_stage` records, shared by the contexts of one architecture (those of one
    layout search): kept under what each section reads of its context (:func:`engine.scaleout.memory.states_reads`,
    :func:`~engine.scaleout.memory.buffers_reads`; the activations are the context's own), so contexts that agree on it
    (every micro batch alike for the model states) record a section once."""

    def __init__(self, arch: Architecture):
        self.arch = arch
        self.sections: dict[tuple, list] = {}
        self._ids: dict[tuple, int] = {}

    def id_of(self, reads: tuple) -> int:
        """A number for ``reads``, the same for equal ones."""
        return self._ids.setdefault(reads, len(self._ids))

    def fresh(self) -> int:
        """A number no other call returns."""
        return len(self._ids)

    def adopt(self, ctx: Context) -> None:
        """Let ``ctx`` record its sections here (a context keeps its own until a pool adopts it)."""
        if ctx.arch is not self.arch:
            raise ValueError("a section pool serves the contexts of one architecture")
        ctx.sections = self.sections
        ctx.section_ids = (self.id_of(states_reads(ctx)), self.id_of(("activations", self.fresh())),
                           self.id_of(buffers_reads(ctx)))


_PHASE_INDEX = {ph: i for i, ph in enumerate(PHASES + ("inference",))}
_PHASE_INDICES: dict[tuple[Phase, ...], tuple[int, ...]] = {}  # phases -> their indices, for _Recorder


class _Recorder(_Parts):
    """Records only what :func:`~engine.scaleout.memory.peak_of` reads of each part that :class:`_Parts` would
    collect, in order, flat: (phase index of :data:`_PHASE_INDEX`, bytes) for every phase of every part (the layout
    search's path: no labels, sources or formulas)."""

    def __init__(self, est: dict[str, MemoryComponent]):
        super().__init__(est, explain=False)
        self.entries: list[tuple[int, float]] = []

    def add(self, key: str, nbytes: float, phases: tuple[Phase, ...], formula: Callable[[], str], source: str = "",
            label: str = "") -> None:
        if nbytes or key in self.est:
            indices = _PHASE_INDICES.get(phases)
            if indices is None:
                indices = _PHASE_INDICES[phases] = tuple(_PHASE_INDEX[ph] for ph in phases)
            self.entries.extend((i, nbytes) for i in indices)


def most_loaded_stage(ctx: Context, layout: Layout, stages: Iterable[int]) -> tuple[float, int]:
    """(allocated peak, stage) of the most loaded of ``stages`` (the first on ties): ``peak_of(stage_parts(ctx,
    layout, r, explain=False))[1]`` of each, to the last bit, faster: the layout search's path.

    Each of the three sections (model states, activations, buffers) reads only a few of the layout's settings, and
    many layouts share them: what a section adds is recorded once per :class:`SectionPool` (``ctx``'s own when no
    pool adopted it), what it reads of ``ctx`` and those settings (its key below), the model states as their
    per-phase sums (they come first), the others as (phase, bytes) replayed into those sums in the order
    :func:`peak_of` adds them, so every sum is the same float. Bytes are never negative, so a phase no part is alive
    in (0.0 here, absent there) never changes the maximum."""
    t, p, c, sp = layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel, layout.sequence_parallel
    shards, zero = layout.optimizer_shards, layout.zero
    m, v, schedule, last = layout.micro_batches, layout.virtual_pipeline, layout.schedule, p - 1
    last_flight = _in_flight(p, m, v, schedule, last)
    # What each section reads of the layout (and below, of the stage): _model_states, _activations, _buffers.
    ids = ctx.section_ids
    if ids is None:
        SectionPool(ctx.arch).adopt(ctx)
        ids = ctx.section_ids
    states = (ids[0], t, p > 1, zero, shards)
    acts = (ids[1], t, sp, c, layout.recompute, layout.recompute_layers, last_flight[0], p == 1)
    bufs = (ids[2], t, sp, c, p > 1, layout.expert_parallel, layout.expert_tensor_parallel,
            layout.moe_capacity_factor, zero == 3 and shards > 1)
    get, worst, worst_stage = ctx.sections.get, -1.0, 0
    for r in stages:
        st = ctx.stage(layout, r)
        key = (*states, st.local)
        totals = get(key)
        totals = list(totals if totals is not None else _recorded(ctx, _model_states, key, layout, st, prefix=True))
        key = (*acts, last_flight if r == last else _in_flight(p, m, v, schedule, r), st.layers[r], r == last)
        entries = get(key)
        for i, nbytes in (entries if entries is not None else _recorded(ctx, _activations, key, layout, st)):
            totals[i] += nbytes
        key = (*bufs, st.first, st.last, st.local)
        entries = get(key)
        for i, nbytes in (entries if entries is not None else _recorded(ctx, _buffers, key, layout, st)):
            totals[i] += nbytes
        total = max(totals)
        if total > worst:
            worst, worst_stage = total, r
    return worst, worst_stage


def _recorded(ctx: Context, section: Callable, key: tuple, layout: Layout, st: _Stage, prefix: bool = False) -> list:
    """What ``section`` adds for ``key``, recorded in ``ctx``'s sections: its flat (phase index, bytes) entries, or
    (``prefix``) the per-phase sums they make from zero."""
    recorder = _Recorder(ctx.parts)
    section(ctx, layout, st, recorder)
    out = recorder.entries
    if prefix:
        out = [0.0] * len(_PHASE_INDEX)
        for i, nbytes in recorder.entries:
            out[i] += nbytes
    ctx.sections[key] = out
    return out
