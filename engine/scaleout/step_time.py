"""A PROVISIONAL step time for a parallel layout: compute + exposed communication + pipeline bubble.

THE SEAM (for the lead, at merge): ``engine/time/`` is being replaced by a step-time model (GEMMs at achievable
matmul rates, memory-bound work, overheads, and ``engine/time/collectives.py`` with ring all-reduce /
reduce-scatter / all-gather / all-to-all times over a link). Two functions here stand in for it and are the only
ones to reconnect:

- :func:`compute_seconds` (per-rank compute of one step) -> the new model's per-GPU step compute;
- :func:`collective_seconds` (one :class:`~engine.scaleout.comm_volumes.Collective` over its link) -> the new
  collectives module's time for (kind, message bytes, group size, link bandwidth).

Everything else (which collectives, their volumes, counts and links: :mod:`engine.scaleout.comm_volumes`; the
bubble fraction; what overlaps) stays. Until then: compute = executed FLOPs / (dense peak x
:data:`DEFAULT_MATMUL_EFFICIENCY`), FLOPs from :func:`engine.time.throughput.flops_per_token`; a collective = bytes
one rank sends (ring) / link bandwidth, no latency term.

Link bandwidths: inside a node, half of ``data/gpus.csv``'s ``gpu_link_gbps`` (datasheets print NVLink as the
bidirectional total: H100 SXM 900 GB/s = 450 GB/s each way), or PCIe x16 per direction when the GPU has no
NVLink; across nodes the cluster's network per GPU (:data:`DEFAULT_INTER_NODE_GBITS`, 400 Gb/s = 50 GB/s, one
ConnectX-7 per GPU as in DGX H100 and Llama 3's RoCE cluster).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from engine.hardware.gpus import Gpu
from engine.model.architecture import Architecture
from engine.scaleout.comm_volumes import Collective, Link, bubble_fraction
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.layout import Layout, Recompute
from engine.scaleout.recompute import recompute_flops_per_token
from engine.scenario.training import Scenario
from engine.time.throughput import flops_per_token, peak_flops_for

DEFAULT_MATMUL_EFFICIENCY = 0.6
"""Fraction of the dense peak the matmuls of a Megatron-class run achieve (provisional). Chosen so that the median
MFU error over the Megatron-LM README's H100 weak-scaling table (data/large_runs.csv, 9 rows, published MFU
41-49 %) is near zero once this module's communication and bubble are added; see
``engine.validation.scaleout`` and the Methodology page for every row's error."""

DEFAULT_INTER_NODE_GBITS = 400.0
"""Network bandwidth per GPU across nodes, Gb/s (one 400 Gb/s NIC per GPU: DGX H100, Llama 3 sec. 3.3.1)."""

PCIE_GBPS = {3: 16.0, 4: 32.0, 5: 64.0, 6: 128.0, 7: 256.0}
"""PCIe x16 bandwidth per direction by generation, GB/s (PCI-SIG: 8, 16, 32, 64, 128 GT/s per lane)."""


class Cluster(BaseModel):
    """GPUs of one kind in ``nodes`` nodes of ``gpus_per_node``, and the network between nodes (Gb/s per GPU)."""

    model_config = ConfigDict(frozen=True)

    gpu: Gpu
    nodes: int = Field(1, ge=1, le=4096)
    gpus_per_node: int = Field(8, ge=1, le=64)
    inter_node_gbits: float = Field(DEFAULT_INTER_NODE_GBITS, gt=0)
    intra_node_gbps: float | None = Field(None, gt=0)

    @property
    def num_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def bandwidth(self, link: Link) -> float:
        """Bytes/s one rank can send on ``link`` (see the module docstring)."""
        if link is Link.INTER_NODE:
            return self.inter_node_gbits / 8 * 1e9
        if self.intra_node_gbps is not None:
            return self.intra_node_gbps * 1e9
        if self.gpu.gpu_link_gbps > 0:
            return self.gpu.gpu_link_gbps / 2 * 1e9
        return PCIE_GBPS.get(self.gpu.pcie_gen, 16.0) * 1e9


class StepTime(BaseModel):
    """Seconds of one step of a layout on one rank of its most loaded stage, by cause; tokens/s of the whole run."""

    model_config = ConfigDict(frozen=True)

    compute_s: float
    comm_s: dict[str, float]
    exposed_comm_s: float
    bubble_fraction: float
    bubble_s: float
    optimizer_s: float
    step_s: float
    tokens_per_step: int
    tokens_per_second: float
    tokens_per_second_per_gpu: float
    mfu: float
    provisional: bool = True


def compute_seconds(arch: Architecture, sc: Scenario, layout: Layout, gpu: Gpu, fp8: Fp8Recipe | None,
                    efficiency: float) -> tuple[float, float]:
    """(seconds of matmul work one rank runs in a step, model FLOPs of the whole step). HOOK: see the module docstring.

    Every rank does 1/(TP x CP x PP) of its replica's FLOPs (EP ranks are DP ranks for the dense part and hold 1/EP
    of the experts with 1/EP of the routed tokens, so the same share). Selective recompute runs the attention
    core's forward again, torchtitan's op-level SAC the matmuls it does not keep
    (:func:`engine.scaleout.recompute.recompute_flops_per_token`), full recompute the whole forward; FP8 runs the
    block linears at the FP8 peak (``fp8_tflops``), the LM head and attention in bf16."""
    # The memory context checkpoints op-SAC blocks too; only full recompute reruns every block's forward.
    sc = sc.model_copy(update={"gradient_checkpointing": layout.recompute is Recompute.FULL})
    flops = flops_per_token(arch, sc)
    tokens = layout.micro_batches * layout.micro_batch_size * layout.data_parallel * sc.seq_len
    executed = flops.total + (flops.attention / 3 if layout.recompute is Recompute.SELECTIVE else 0.0)
    if layout.recompute is Recompute.SELECTIVE_OP:
        executed += recompute_flops_per_token(arch)
    peak = peak_flops_for(gpu, sc.precision).flops or 0.0
    if peak <= 0:
        raise ValueError(f"{gpu.name}: no dense peak for {sc.precision.value}")
    ranks = layout.world_size // layout.data_parallel
    per_rank_tokens = tokens / layout.data_parallel / ranks
    if fp8 is not None and gpu.fp8_tflops:
        # The block linears' share of the executed FLOPs (forward, backward, recompute), without the LM head.
        n = flops.matmul_parameters
        per_weight = (flops.dense + (2.0 * n if sc.gradient_checkpointing else 0.0)) / n
        linear = per_weight * (n - arch.vocab_size * arch.hidden_size)
        seconds = per_rank_tokens * (linear / (gpu.fp8_tflops * 1e12) + (executed - linear) / peak) / efficiency
    else:
        seconds = per_rank_tokens * executed / (peak * efficiency)
    return seconds, flops.model_flops * tokens


def collective_seconds(col: Collective, cluster: Cluster) -> float:
    """Seconds of all ``col.count`` calls: bytes one rank sends / the link's bandwidth. HOOK: see the module docstring."""
    return col.bytes_per_rank / cluster.bandwidth(col.link)


def step_time(arch: Architecture, sc: Scenario, layout: Layout, cluster: Cluster, collectives: list[Collective],
              optimizer_bytes: float, fp8: Fp8Recipe | None = None,
              efficiency: float = DEFAULT_MATMUL_EFFICIENCY) -> StepTime:
    """Step time of ``layout`` (one rank of its most loaded stage).

    step = (compute + critical-path communication) / (1 - bubble) + overlapped communication beyond the compute
    + the optimizer step (``optimizer_bytes`` read and written once at the GPU's memory bandwidth). Critical path:
    TP, EP and PP collectives; overlapped: DP gradient/weight traffic, FSDP gathers, the CP ring (their
    ``overlapped`` flag)."""
    compute, model_flops = compute_seconds(arch, sc, layout, cluster.gpu, fp8, efficiency)
    by_dim: dict[str, float] = {}
    critical = overlapped = 0.0
    for col in collectives:
        s = collective_seconds(col, cluster)
        by_dim[col.dimension] = by_dim.get(col.dimension, 0.0) + s
        if col.overlapped:
            overlapped += s
        else:
            critical += s
    bubble = bubble_fraction(layout)
    busy = compute + critical
    pipelined = busy / (1 - bubble)
    hidden_left = max(0.0, overlapped - compute)
    optimizer = optimizer_bytes / (cluster.gpu.memory_bandwidth_gbps * 1e9)
    step = pipelined + hidden_left + optimizer
    tokens = layout.micro_batches * layout.micro_batch_size * layout.data_parallel * sc.seq_len
    peak = peak_flops_for(cluster.gpu, sc.precision).flops or 1.0
    return StepTime(
        compute_s=compute, comm_s=by_dim, exposed_comm_s=critical + hidden_left, bubble_fraction=bubble,
        bubble_s=pipelined - busy, optimizer_s=optimizer, step_s=step, tokens_per_step=tokens,
        tokens_per_second=tokens / step, tokens_per_second_per_gpu=tokens / step / layout.world_size,
        mfu=model_flops / (step * layout.world_size * peak),
    )
