"""Memory beyond live tensors: the caching allocator's reserve and the CUDA context.

What ``max_memory_reserved()`` and nvidia-smi show, derived from the allocated tensor peak, and the inverse
(:func:`tensor_budget`: the tensor peak a GPU of a given size can hold).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.memory.components import MemoryComponent, PHASES


CUDA_CONTEXT_BYTES = 1343 * 2**20
"""What a process holds on the GPU before its first tensor: the CUDA context, kernels and cuBLAS/cuDNN
handles. transformers docs, "Model training anatomy" (performance guide): NVML reports 1343 MB (MiB) used
after creating one tiny tensor on the GPU. Lazy module loading (CUDA >= 11.7) can make it smaller; the
figure depends on the GPU, the driver and the libraries loaded, hence an explicit input."""

ALLOCATOR_RESERVE_FRACTION = 0.10
"""PyTorch's caching allocator keeps freed blocks and splits large segments, so ``max_memory_reserved``
exceeds ``max_memory_allocated``: published runs show +5 to +20% (../shared/reference/README.md, from
the runs that report both). Modelled as this fraction of the allocated peak."""


class DeviceMemory(BaseModel):
    """Allocated, reserved and nvidia-smi-visible bytes of one GPU at the peak.

    ``reserved`` = ``allocated`` x (1 + :data:`ALLOCATOR_RESERVE_FRACTION`) (``max_memory_reserved``);
    ``device_used`` = ``reserved`` + ``pageable`` (paged optimizer states, resident) + the CUDA context.
    """

    model_config = ConfigDict(frozen=True)

    allocated: float
    pageable: float = 0.0
    reserve_fraction: float = ALLOCATOR_RESERVE_FRACTION
    context: float = CUDA_CONTEXT_BYTES

    @property
    def reserve(self) -> float:
        """Bytes the caching allocator holds beyond the live tensors."""
        return self.allocated * self.reserve_fraction

    @property
    def reserved(self) -> float:
        """``max_memory_reserved()``."""
        return self.allocated + self.reserve

    @property
    def device_used(self) -> float:
        """NVML/nvidia-smi "used"."""
        return self.reserved + self.pageable + self.context

    def components(self) -> tuple[MemoryComponent, ...]:
        """The reserve and the context as components (their phase is the peak's, whichever it is)."""
        return (
            MemoryComponent(key="allocator_reserve", label="Allocator reserve", bytes=self.reserve, phases=PHASES,
                            formula=f"{self.reserve_fraction:.0%} of the allocated peak (cached, fragmented blocks)",
                            source="PyTorch CUDA caching allocator; +5-20% in published runs"),
            MemoryComponent(key="cuda_context", label="CUDA context", bytes=self.context, phases=PHASES,
                            formula=f"{self.context / 2**20:,.0f} MiB per process",
                            source="transformers docs 'Model training anatomy': 1343 MB used by NVML after init"),
        )


def device_memory(allocated_bytes: float, pageable_bytes: float = 0.0) -> DeviceMemory:
    """:class:`DeviceMemory` for a tensor peak of ``allocated_bytes`` (bytes) with the default reserve
    fraction and CUDA context."""
    return DeviceMemory(allocated=allocated_bytes, pageable=pageable_bytes)


def device_used_bytes(allocated_bytes: float) -> float:
    """``device_memory(allocated_bytes).device_used``, the same sum in the same order, without building the model
    (the layout search asks it of thousands of layouts)."""
    return allocated_bytes + allocated_bytes * ALLOCATOR_RESERVE_FRACTION + 0.0 + CUDA_CONTEXT_BYTES


def tensor_budget(device_bytes: float) -> float:
    """Largest allocated tensor peak whose device total (reserve and CUDA context added) fits in
    ``device_bytes``: ``(device_bytes - CUDA_CONTEXT_BYTES) / (1 + ALLOCATOR_RESERVE_FRACTION)``, at least 0."""
    return max(0.0, (device_bytes - CUDA_CONTEXT_BYTES) / (1 + ALLOCATOR_RESERVE_FRACTION))
