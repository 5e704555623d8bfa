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
    Context, _activations, _buffers, _in_flight, _logits_in_flight, _model_states, _Parts, _Stage, buffers_reads, states_reads,
    sync_layout_reads,
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
    layout, r, explain=False))[1]`` of each, to the last bit, faster: the layout search's path (through a
    :class:`StageFamily` of its own here).

    Each of the three sections (model states, activations, buffers) reads only a few of the layout's settings, and
    many layouts share them: what a section adds is recorded once per :class:`SectionPool` (``ctx``'s own when no
    pool adopted it), what it reads of ``ctx`` and those settings (its keys in :class:`StageFamily`), the model
    states as their per-phase sums (they come first), the others as (phase, bytes) replayed into those sums in the
    order :func:`~engine.scaleout.memory.peak_of` adds them, so every sum is the same float. Bytes are never
    negative, so a phase no part is alive in (0.0 here, absent there) never changes the maximum."""
    return StageFamily(ctx, layout, stages).most_loaded(layout)


class StageFamily:
    """:func:`most_loaded_stage` of the layouts that share ``ctx``, ``stages`` and every setting of ``layout`` but the
    ZeRO stage, the recompute and the virtual pipeline (its schedule): in the layout search, the settings of one
    parallel shape and micro batch with one context. What each section adds is looked up once per value of the
    settings among those three it reads (the model states and buffers: the ZeRO stage; the activations: the
    recompute and pipeline chunks), then only replayed. A layout outside the family gets another's numbers.

    ``shape``: a dict shared by the families of one parallel shape (their contexts in one :class:`SectionPool`),
    where the model states and buffers are kept per section id and ZeRO stage: contexts that share a section id
    (:meth:`SectionPool.adopt`) share what it adds at every stage of the shape. ``activations``: the same for the
    activations, shared more widely, by the shapes that differ only in their expert parallelism (which the
    activations do not read)."""

    def __init__(self, ctx: Context, layout: Layout, stages: Iterable[int], shape: dict | None = None,
                 activations: dict | None = None):
        if ctx.section_ids is None:
            SectionPool(ctx.arch).adopt(ctx)
        self.ctx, self.stages = ctx, tuple(stages)
        self._at = [ctx.stage(layout, r) for r in self.stages]
        self._shape: dict[tuple[int, int], list] = shape if shape is not None else {}
        self._acts: dict[tuple, list] = activations if activations is not None else {}

    def most_loaded(self, layout: Layout) -> tuple[float, int]:
        """:func:`most_loaded_stage` of ``layout``, a member of the family."""
        zero, ids = layout.zero, self.ctx.section_ids
        states = self._shape.get((ids[0], zero))
        if states is None:
            states = self._shape[(ids[0], zero)] = self._model_states(layout)
        key = (ids[1], layout.recompute, layout.virtual_pipeline, layout.schedule)
        acts = self._acts.get(key)
        if acts is None:
            acts = self._acts[key] = self._activations(layout)
        bufs = self._shape.get((ids[2], zero))
        if bufs is None:
            bufs = self._shape[(ids[2], zero)] = self._buffers(layout)
        worst, worst_stage = -1.0, 0
        for r, prefix, a, b in zip(self.stages, states, acts, bufs):
            totals = list(prefix)
            for i, nbytes in a:
                totals[i] += nbytes
            for i, nbytes in b:
                totals[i] += nbytes
            total = max(totals)
            if total > worst:
                worst, worst_stage = total, r
        return worst, worst_stage

    # What each section reads of the layout (and of the stage): _model_states, _activations, _buffers.
    def _model_states(self, layout: Layout) -> list:
        ctx, t, p = self.ctx, layout.tensor_parallel, layout.pipeline_parallel
        key = (ctx.section_ids[0], t, p > 1, layout.zero, layout.optimizer_shards)
        return [_entries(ctx, _model_states, (*key, st.local), layout, st, prefix=True) for st in self._at]

    def _activations(self, layout: Layout) -> list:
        ctx, t, p = self.ctx, layout.tensor_parallel, layout.pipeline_parallel
        m, v, schedule, last = layout.micro_batches, layout.virtual_pipeline, layout.schedule, p - 1
        key = (ctx.section_ids[1], t, layout.sequence_parallel, layout.context_parallel, layout.recompute,
               layout.recompute_layers, _logits_in_flight(p, m, v, schedule), p == 1)
        half = ctx.dp_sync.half_gradients_per_backward  # the stage's 16-bit gradients: its parameters
        return [_entries(ctx, _activations, (*key, _in_flight(p, m, v, schedule, st.index), st.layers[st.index],
                                             st.index == last, st.local if half else None), layout, st) for st in self._at]

    def _buffers(self, layout: Layout) -> list:
        ctx, t, p, shards = self.ctx, layout.tensor_parallel, layout.pipeline_parallel, layout.optimizer_shards
        key = (ctx.section_ids[2], t, layout.sequence_parallel, layout.context_parallel, p > 1, layout.expert_parallel,
               layout.expert_tensor_parallel, layout.moe_capacity_factor, layout.zero == 3 and shards > 1,
               *sync_layout_reads(ctx, layout))
        return [_entries(ctx, _buffers, (*key, st.first, st.last, st.local), layout, st) for st in self._at]


def _entries(ctx: Context, section: Callable, key: tuple, layout: Layout, st: _Stage, prefix: bool = False) -> list:
    """What ``section`` adds for ``key``: recorded in ``ctx``'s sections, or recorded now (:func:`_recorded`)."""
    found = ctx.sections.get(key)
    return found if found is not None else _recorded(ctx, section, key, layout, st, prefix)


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
