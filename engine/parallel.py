"""Per-GPU memory of a data-parallel run: a minimal, explicit model of two strategies.

Starting point: the single-GPU estimate of :mod:`engine.memory`, split by component and phase. Each
strategy says which components every GPU holds whole (*replicated*) and which are divided by the number
of GPUs N (*sharded*); the per-GPU peak is the largest phase total ``sharded / N + replicated``. It never
grows with N, so the fewest GPUs that fit is found by a monotone (binary) search over 1..1024.

- ``ddp`` (PyTorch DistributedDataParallel): every GPU holds the whole model, its gradients, optimizer
  states and its own micro batch's activations, so per-GPU memory is the single-GPU estimate. More GPUs
  add throughput, not memory: the fewest GPUs is 1 if it fits on one, else none.
- ``zero3`` (DeepSpeed ZeRO stage 3 = PyTorch FSDP ``FULL_SHARD``): weights, gradients and optimizer
  states (and the optimizer step's temporaries, computed on the shards) are partitioned over the N
  data-parallel GPUs: Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion
  Parameter Models", sec. 5 (P_os+g+p: model states (2 + 2 + K) x params / N); Zhao et al. 2023,
  "PyTorch FSDP", sec. 3. Activations and the loss tensors stay per GPU (each GPU runs its own micro
  batch). During forward and backward a GPU gathers the full weights of one unit at a time, in the
  compute dtype. At the start of backward, the peak phase, the unit being gathered is the LM head, so
  the gathered unit counted is the larger of the largest decoder layer and the largest embedding / LM
  head matrix. Autocast's cached 16-bit copies of the whole model (``weight_copies``) are replaced by
  these gathered copies; QLoRA's dequantized weight stays.

Not modelled here (left to the multi-GPU issue): DDP's gradient buckets (up to one more gradient-sized
buffer unless ``gradient_as_bucket_view=True``); ZeRO-3/FSDP prefetching of the next unit (up to two
units live), DeepSpeed's ``stage3_max_live_parameters`` and reduce-scatter buckets, FSDP's root unit
(embeddings and LM head gathered together), parameters kept whole below the persistence threshold,
CPU/NVMe offload, tensor and pipeline parallelism, and communication buffers.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

from engine.architecture import Architecture
from engine.memory import PHASES, MemoryEstimate, Phase
from engine.precision import precision_spec
from engine.scenario import Method, Scenario

MAX_GPUS = 1024
"""Largest number of GPUs searched for :meth:`ParallelPlan.min_gpus`."""

SHARDED_COMPONENTS = ("weights", "gradients", "optimizer_states", "optimizer_temporaries")
"""Components ZeRO-3 / FSDP FULL_SHARD divides over the GPUs (model states, Rajbhandari et al. 2020 sec. 5)."""


class Strategy(str, Enum):
    """Multi-GPU data-parallel strategy."""

    DDP = "ddp"
    ZERO3 = "zero3"


STRATEGY_LABELS = {
    Strategy.DDP: "DDP (every GPU holds everything)",
    Strategy.ZERO3: "ZeRO-3 / FSDP full shard",
}


class PhaseSplit(BaseModel):
    """Bytes of one phase: ``sharded`` is divided by the number of GPUs, ``replicated`` is on every GPU."""

    model_config = ConfigDict(frozen=True)

    phase: Phase
    sharded: float
    replicated: float


class ParallelPlan(BaseModel):
    """How one estimate spreads over N GPUs with one strategy. Sizes in bytes."""

    model_config = ConfigDict(frozen=True)

    strategy: Strategy
    phases: tuple[PhaseSplit, ...]
    gathered_bytes: float = 0.0
    gathered_unit: str = ""

    def per_gpu_bytes(self, num_gpus: int) -> float:
        """Peak bytes on each of ``num_gpus`` GPUs: the largest phase's ``sharded / N + replicated``."""
        return max(p.sharded / num_gpus + p.replicated for p in self.phases)

    def peak_phase(self, num_gpus: int) -> Phase:
        """The phase holding the per-GPU peak at ``num_gpus`` (start of backward on ties)."""
        return max(self.phases, key=lambda p: p.sharded / num_gpus + p.replicated).phase

    def min_gpus(self, usable_bytes: float, max_gpus: int = MAX_GPUS) -> int | None:
        """Fewest GPUs (1..``max_gpus``) whose per-GPU peak fits in ``usable_bytes``; None if none does.

        Binary search: the per-GPU peak never increases with N.
        """
        if self.per_gpu_bytes(1) <= usable_bytes:
            return 1
        if self.strategy is Strategy.DDP or self.per_gpu_bytes(max_gpus) > usable_bytes:
            return None
        lo, hi = 1, max_gpus  # lo does not fit, hi fits
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.per_gpu_bytes(mid) <= usable_bytes:
                hi = mid
            else:
                lo = mid
        return hi


def decoder_layer_parameters(arch: Architecture) -> int:
    """Parameters of one decoder block: the per-layer tensor groups (count a multiple of the layer count)
    divided by the number of layers. Blocks of the supported families are identical in size."""
    per_layer = sum(
        g.parameters for g in arch.tensors
        if g.role in ("attention", "mlp", "norms") and g.count >= arch.num_layers and g.count % arch.num_layers == 0
    )
    return per_layer // arch.num_layers


def largest_gathered_unit(arch: Architecture) -> tuple[int, str]:
    """(parameters, description) of the largest unit ZeRO-3 / FSDP gathers at once: a decoder layer, or
    the embedding / LM head matrix when that is larger (it is for most models with large vocabularies)."""
    layer = decoder_layer_parameters(arch)
    matrices = [(g.numel, g.name) for g in arch.tensors if g.role in ("embeddings", "lm_head")]
    biggest, name = max(matrices, default=(0, ""))
    if biggest > layer:
        return biggest, f"{name} matrix ({biggest:,} parameters; a decoder layer has {layer:,})"
    return layer, f"one decoder layer ({layer:,} parameters)"


def plan_parallel(est: MemoryEstimate, arch: Architecture, scenario: Scenario, strategy: Strategy) -> ParallelPlan:
    """Split the single-GPU estimate ``est`` of ``scenario`` on ``arch`` for ``strategy`` (see module docstring)."""
    if strategy is Strategy.DDP:
        return ParallelPlan(
            strategy=strategy,
            phases=tuple(PhaseSplit(phase=ph, sharded=0.0, replicated=est.phase_total(ph)) for ph in PHASES),
        )
    params, unit = largest_gathered_unit(arch)
    gathered = params * precision_spec(scenario.precision).compute_bytes
    keep_copies = scenario.method is Method.QLORA  # the dequantized 4-bit weight is a temporary, not a cache
    phases = []
    for ph in PHASES:
        comps = est.components_at(ph)
        sharded = sum(comps.get(k, 0.0) for k in SHARDED_COMPONENTS)
        replicated = sum(v for k, v in comps.items() if k not in SHARDED_COMPONENTS and (k != "weight_copies" or keep_copies))
        if ph == "backward":
            replicated += gathered
        phases.append(PhaseSplit(phase=ph, sharded=sharded, replicated=replicated))
    return ParallelPlan(strategy=strategy, phases=tuple(phases), gathered_bytes=gathered, gathered_unit=unit)
