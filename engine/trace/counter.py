"""Counting tensor storage allocations and frees on one device, labelled by phase.

A :class:`~torch.utils._python_dispatch.TorchDispatchMode` sees the outputs of every ATen operator; each
output whose storage is new is an allocation, rounded up to 512 bytes like the CUDA caching allocator's
blocks. A weakref callback on the storage's Python object records its release (storages keep one Python
object for their whole life, so the callback fires when the memory would be returned to the allocator).
The same counting runs on fake tensors and on real CPU tensors, which is how the tests check that
faking does not change the timeline.

Labels are given at creation from the current phase and can be changed later (a gradient is created as a
backward temporary, then recognised by a hook); :meth:`AllocationLog.replay` applies the final labels.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from engine.trace.result import CATEGORIES, PHASES, StepPeak
from engine.trace.workspace import transient_bytes

BLOCK = 512
"""CUDA caching allocator rounding (``kMinBlockSize``): every block is a multiple of 512 bytes."""

_PHASE_LABEL = {"forward": "activations", "backward": "backward_temporaries", "optimizer": "optimizer_temporaries"}


def rounded(nbytes: int) -> int:
    """Bytes the CUDA caching allocator counts for a request of ``nbytes`` (0 stays 0: no allocation)."""
    return -(-nbytes // BLOCK) * BLOCK


def storage_key(t: torch.Tensor) -> int:
    """Identity of the storage behind ``t`` (the address of its C++ StorageImpl)."""
    return t.untyped_storage()._cdata


@dataclass
class AllocationLog:
    """Every allocation and free, in order, with phase marks and final labels."""

    device_type: str
    events: list[tuple[str, int, int]] = field(default_factory=list)
    """("a", id, bytes) for an allocation, ("f", id, bytes) for a free."""
    labels: dict[int, str] = field(default_factory=dict)
    marks: list[tuple[int, int, str]] = field(default_factory=list)
    """(index of the first event, step, phase): the phase that starts there."""
    live: dict[int, int] = field(default_factory=dict)
    """storage key -> allocation id, for storages alive now."""
    step: int = 0
    phase: str = "setup"
    ops: dict[int, str] = field(default_factory=dict)
    """allocation id -> the operator that produced it (for diagnosis)."""
    sizes: dict[int, int] = field(default_factory=dict)
    """allocation id -> bytes."""
    owner: dict[int, int] = field(default_factory=dict)
    """allocation id -> key of the storage that holds it now."""
    _next: int = 0
    _refs: dict[tuple[int, int], weakref.ref] = field(default_factory=dict)
    """Weak references to the watched storages (kept so that their callbacks fire)."""

    def mark(self, step: int, phase: str) -> None:
        """Start ``phase`` of ``step`` (1-based); allocations from now on are labelled by it."""
        self.step, self.phase = step, phase
        self.marks.append((len(self.events), step, phase))

    def track(self, t: torch.Tensor, label: str | None = None, op: str = "") -> None:
        """Record ``t``'s storage as allocated now, unless it is already tracked or on another device."""
        if t.device.type != self.device_type or t.is_sparse:
            return
        st = t.untyped_storage()
        key = st._cdata
        if key in self.live:
            return
        nbytes = rounded(st.nbytes())
        if nbytes == 0:  # an empty tensor: the allocator hands out no block
            return
        aid = self._next
        self._next += 1
        self.live[key] = aid
        self.labels[aid] = label or _PHASE_LABEL.get(self.phase, "activations")
        self.ops[aid] = op
        self.sizes[aid] = nbytes
        self.events.append(("a", aid, nbytes))

        self._watch(st, key, aid, nbytes)

    def _watch(self, st: torch.UntypedStorage, key: int, aid: int, nbytes: int) -> None:
        """Record the free of allocation ``aid`` when storage ``st`` (its current owner) dies."""
        self.owner[aid] = key

        def freed(_ref: weakref.ref) -> None:
            self._refs.pop((aid, key), None)
            if self.live.get(key) == aid:
                del self.live[key]
            if self.owner.get(aid) == key:  # not handed over to another storage (see take_over)
                del self.owner[aid]
                self.events.append(("f", aid, nbytes))

        self._refs[(aid, key)] = weakref.ref(st, freed)

    def take_over(self, old: torch.Tensor, new: torch.Tensor) -> bool:
        """Let ``new``'s storage continue ``old``'s allocation (an in-place update on a GPU, out-of-place
        here); False when ``old`` is not tracked."""
        aid = self.live.get(storage_key(old))
        st = new.untyped_storage()
        if aid is None or st._cdata in self.live:
            return False
        del self.live[storage_key(old)]
        self.live[st._cdata] = aid
        self._watch(st, st._cdata, aid, self.sizes[aid])
        return True

    def transient(self, sizes: list[int]) -> None:
        """Buffers a kernel allocates and frees inside itself (after its outputs): allocate all, free all."""
        ids = []
        for size in sizes:
            nbytes = rounded(size)
            if nbytes:
                aid = self._next
                self._next += 1
                self.labels[aid] = _PHASE_LABEL.get(self.phase, "activations")
                self.ops[aid], self.sizes[aid] = "workspace", nbytes
                self.events.append(("a", aid, nbytes))
                ids.append(aid)
        for aid in ids:
            self.events.append(("f", aid, self.sizes[aid]))

    def relabel(self, t: torch.Tensor, label: str) -> None:
        """Give the live storage behind ``t`` the label ``label`` (for the whole of its life)."""
        aid = self.live.get(storage_key(t))
        if aid is not None:
            self.labels[aid] = label

    def timeline(self, ops: bool = False) -> list[tuple]:
        """(kind, bytes, final label) per event: what the fake-vs-real tests compare; with ``ops``, the
        producing operator's name is appended (diagnosis)."""
        if ops:
            return [(kind, nbytes, self.labels[aid], self.ops[aid]) for kind, aid, nbytes in self.events]
        return [(kind, nbytes, self.labels[aid]) for kind, aid, nbytes in self.events]

    def replay(self, step: int) -> StepPeak:
        """Peak of ``step``: its largest live total, the phase it happened in, per-phase peaks and the
        live bytes per category (final labels) at that moment."""
        bounds = self.marks
        totals = {c: 0 for c in CATEGORIES}
        total = 0
        peak, peak_phase, snapshot = -1, "", dict(totals)
        phase_peaks = {p: 0 for p in PHASES}
        mark_i, cur_step, cur_phase = 0, 0, "setup"
        for idx, (kind, aid, nbytes) in enumerate(self.events):
            while mark_i < len(bounds) and bounds[mark_i][0] <= idx:
                _, cur_step, cur_phase = bounds[mark_i]
                mark_i += 1
                if cur_step == step:  # the live total at a phase start counts for that phase
                    phase_peaks[cur_phase] = max(phase_peaks[cur_phase], total)
                    if total > peak:
                        peak, peak_phase, snapshot = total, cur_phase, dict(totals)
            sign = 1 if kind == "a" else -1
            total += sign * nbytes
            totals[self.labels[aid]] += sign * nbytes
            if cur_step == step and kind == "a":
                phase_peaks[cur_phase] = max(phase_peaks[cur_phase], total)
                if total > peak:
                    peak, peak_phase, snapshot = total, cur_phase, dict(totals)
        return StepPeak(peak_allocated_bytes=max(peak, 0), peak_phase=peak_phase, phase_peaks=phase_peaks,
                        breakdown=snapshot)


def _plain_same(a: Any, b: Any, out: Any) -> bool:
    """``a + b -> out`` without broadcasting or type promotion, ``a`` not a view (so it owns its block)."""
    return (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(out, torch.Tensor)
            and a.shape == b.shape == out.shape and a.dtype == out.dtype and not a._is_view())


class CountingMode(TorchDispatchMode):
    """Tracks the storages of every operator's outputs in ``log``.

    ``weight_keys``: storages of parameters; a ``_to_copy`` of one of them in forward/backward is an
    autocast weight copy. Kernels' internal buffers (:mod:`engine.trace.workspace`) are added around them.
    """

    def __init__(self, log: AllocationLog, weight_keys: set[int]):
        super().__init__()
        self.log = log
        self.weight_keys = weight_keys
        self.depth = 0

    def _accumulates(self, func, args, kwargs, out) -> bool:
        """Whether this is the autograd engine summing two gradients (``InputBuffer``/``AccumulateGrad``).

        Without a dispatch mode the engine adds in place (``old.add_(new)``) when the old gradient is not a
        view and nothing else holds it; any active TorchDispatchMode makes tensors "subclass-like" and
        forces ``old + new`` (``can_accumulate_inplace``, torch/csrc/autograd/input_buffer.cpp). Checked
        against the profiler on real tensors: exactly the non-view cases are in place. The copy counted
        here would not exist on a GPU, so the sum takes over the old gradient's block instead.
        """
        return (func is torch.ops.aten.add.Tensor and self.log.phase == "backward" and not torch.is_grad_enabled()
                and len(args) == 2 and not kwargs and _plain_same(args[0], args[1], out))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        # Only the outermost operator counts: FakeTensorMode runs Python decompositions of operators
        # that have no meta kernel (silu_backward, _foreach_norm, ...) as their meta kernels, and their
        # intermediates, freed before the operator returns, do not exist on a GPU, where the operator is
        # one kernel. Inside a meta-kernel invocation the Meta key is in the thread's include set.
        if self.depth or torch._C._meta_in_tls_dispatch_include():
            return func(*args, **(kwargs or {}))
        self.depth += 1
        try:
            out = func(*args, **(kwargs or {}))
        finally:
            self.depth -= 1
        if self._accumulates(func, args, kwargs, out) and self.log.take_over(args[0], out):
            return out
        label = None
        if (func is torch.ops.aten._to_copy.default and self.log.phase in ("forward", "backward")
                and isinstance(args[0], torch.Tensor) and storage_key(args[0]) in self.weight_keys):
            label = "weight_copies"
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.log.track(t, label, func.__name__)
        self.log.transient(transient_bytes(func, args))
        return out
