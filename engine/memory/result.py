"""The result of a memory estimate: its components and the peak over the moments of a step.

Built by :func:`engine.memory.estimate.estimate_memory`; split per GPU by :mod:`engine.memory.parallel`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, computed_field

from engine.memory.components import PHASES, MemoryComponent, Phase
from engine.memory.device import device_memory


class MemoryEstimate(BaseModel):
    """Result of :func:`estimate_memory`. All sizes in bytes, counts in parameters."""

    model_config = ConfigDict(frozen=True)

    parts: tuple[MemoryComponent, ...]
    total_parameters: int
    trainable_parameters: int
    attention_kernel: str
    bytes_per_parameter: str
    assumptions: tuple[str, ...]
    not_modelled: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    pageable_bytes: float = 0.0
    """Paged optimizer states (CUDA unified memory): on the GPU while there is room, outside torch's allocator."""

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The phases this estimate models: :data:`PHASES` for training, ``("inference",)`` for serving."""
        if any("inference" in p.phases for p in self.parts):
            return ("inference",)
        present = {ph for p in self.parts for ph in p.phases}
        return tuple(ph for ph in PHASES if ph in present)

    def phase_total(self, phase: Phase) -> float:
        """Bytes alive at ``phase``."""
        return sum(p.bytes for p in self.parts if phase in p.phases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_phase(self) -> Phase:
        """The phase whose total is largest; on ties the start of backward, then the optimizer step."""
        tie = {"backward": 2, "optimizer_step": 1}
        return max(self.phases, key=lambda ph: (self.phase_total(ph), tie.get(ph, 0)))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> float:
        """Estimated peak: the total of :attr:`peak_phase`."""
        return self.phase_total(self.peak_phase)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def components(self) -> dict[str, float]:
        """Bytes of each component at the peak (0 for those not alive then); they sum to ``total_bytes``."""
        return self.components_at(self.peak_phase)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def first_step_peak_bytes(self) -> float:
        """Peak of the first training step: its backward runs before any optimizer state exists (torch and
        bitsandbytes create states lazily inside the first ``step()``), so only its optimizer step can reach
        the steady-state peak. Never above :attr:`total_bytes`."""
        if "optimizer_step" not in self.phases:
            return self.total_bytes
        states = sum(p.bytes for p in self.parts if p.key == "optimizer_states")
        return max(self.phase_total(ph) - (states if ph != "optimizer_step" else 0.0) for ph in self.phases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_allocated_bytes(self) -> float:
        """``torch.cuda.max_memory_allocated()``: the tensor peak, less paged states (bitsandbytes allocates
        them with ``cudaMallocManaged``, outside torch's allocator)."""
        return self.total_bytes - self.pageable_bytes

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_reserved_bytes(self) -> float:
        """``torch.cuda.max_memory_reserved()``: the allocated peak plus the caching allocator's reserve."""
        return device_memory(self.peak_allocated_bytes).reserved

    @computed_field  # type: ignore[prop-decorator]
    @property
    def device_used_bytes(self) -> float:
        """What ``nvidia-smi`` shows at the peak: reserved + resident paged states + the CUDA context."""
        return device_memory(self.peak_allocated_bytes, self.pageable_bytes).device_used

    @property
    def overheads(self) -> tuple[MemoryComponent, ...]:
        """The non-tensor memory at the peak, as components: allocator reserve and CUDA context."""
        return device_memory(self.peak_allocated_bytes, self.pageable_bytes).components()

    def components_at(self, phase: Phase) -> dict[str, float]:
        """Bytes of each component alive at ``phase`` (0 for the others)."""
        return {p.key: (p.bytes if phase in p.phases else 0.0) for p in self.parts}

    @property
    def parts_by_key(self) -> dict[str, MemoryComponent]:
        """The components by key, with their size while alive."""
        return {p.key: p for p in self.parts}
