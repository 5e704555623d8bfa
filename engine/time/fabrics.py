"""The networks between nodes the step-time model knows, one record each: the share of the NICs' line rate NCCL's
ring reaches over it and the latency of one ring step that crosses it, each value with its source.

The one place these facts live: :class:`engine.scaleout.step_time.Cluster` carries a fabric by name, the validation
rows of ``data/large_runs.csv`` name theirs in its ``fabric`` column (:mod:`engine.validation.scaleout`), the command
line takes ``--inter-node-fabric NAME`` (:mod:`engine.cli.scaleout`) and the Scale out page a "Network" choice beside
its inter-node bandwidth; all read them here. ``infiniband`` is the default and the model as it was before fabrics
existed: the fitted :attr:`~engine.time.constants.TimeConstants.network_efficiency` and NCCL's network hop latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import named_record
from engine.time.collectives import HOP_LATENCY_S
from engine.time.constants import current

EFA_BUS_SHARE = 0.83
"""Share of the EFA line rate NCCL's ring reaches on AWS p5.48xlarge (8 H100, 32 x 100 Gb/s EFA v2 = 400 Gb/s per
GPU): nccl-tests on p5.48xlarge nodes under SageMaker HyperPod, Oct 2025 (crazyguitar/aws-gpu-communication-benchmark
@fd167f97 ``data/nccl_all_reduce.csv``, ``data/nccl_all_gather.csv``), the ring cells (4-32 nodes) at 2 GiB and
more: all-reduce busbw at 8 GiB 357.0, 355.4, 356.3, 321.1 GB/s on 4, 8, 16, 32 nodes, all-gather at 2 GiB 330.9,
293.7, 265.2, 262.8 GB/s. The model's ring formulas with :data:`EFA_HOP_LATENCY_S` meet those 16 cells best (least
squares of the log ratio, grid 0.01) at 0.83 of line rate, root-mean-square miss 7.7% (InfiniBand's fitted 0.96).

Hugging Face's own cluster measured less: the Ultra-Scale Playbook's "Communication Bandwidth by Number of Nodes
(size=256MB)" figure (nanotron/ultrascale-playbook, Feb 2025; copy in vinjn/nanotron-ultrascale-playbook@924e4d0b
``assets/data/benchmarks/pp_comm_bandwidth.html``), medians on 2, 4, 8, 16, 32, 64 nodes: all-reduce 361.7, 160.1,
99.6, 84.7, 64.9, 32.9 GB/s, all-gather 184.6, 119.0, 69.0, 55.0, 28.0, 11.0, reduce-scatter 181.6, 115.8, 68.6,
54.5, 27.9, 11.1; this record gives 1.7-2.4x more all-reduce and 2.3-7.2x more all-gather / reduce-scatter bus
bandwidth at that size from 4 nodes on (0.9x and 1.7x on 2 nodes). Those medians are not this record's
source: the model's formulas reproduce them only with a per-step latency of 200-290 us (fitted with a share of
0.50-0.57; root-mean-square miss 32% over all 18 medians, 13% over all-gather and reduce-scatter alone), 9-13x AWS's
own figure below, an effective cost that stands for what the model lacks (NCCL's tree all-reduce beyond 2 nodes, the
cluster's variance: the figure's 5th-95th percentiles at 64 nodes span 12-177 GB/s for all-reduce) rather than a
property of the fabric."""

EFA_HOP_LATENCY_S = 23e-6
"""Latency of one ring step between nodes over EFA on p5, s: AWS's own NCCL tuner models a p5 network step at
20 us (``TUNER_NET_LATENCY``, "2 nodes, 8B RDMA w/imm lat") + 3 us of completion overhead for the Simple protocol
(``TUNER_NET_COMP_OVERHEAD``, "overheads from libfabric and NCCL's proxy thread") (aws/aws-ofi-nccl@eacd69c3,
Dec 2023, ``src/tuner``; the same values at 2daf7d30, ``src/tuner/nccl_ofi_model.cpp``, ``include/nccl_ofi_param.h``).
InfiniBand's NCCL figure is 6.6 us."""


@dataclass(frozen=True)
class Fabric:
    """One network between nodes.

    - ``name``: the key (``data/large_runs.csv``'s ``fabric`` column, ``--inter-node-fabric``); ``label``: for display.
    - ``bus_share``: share of the NIC's line rate NCCL's ring reaches (bus bandwidth / line rate); None: the fitted
      :attr:`~engine.time.constants.TimeConstants.network_efficiency` (InfiniBand's rows pin it down).
    - ``hop_latency_s``: latency of one ring step that crosses nodes, s.
    - ``source``: where the two values come from.
    """

    name: str
    label: str
    bus_share: float | None
    hop_latency_s: float
    source: str

    def share(self) -> float:
        """The share of line rate in force: :attr:`bus_share`, or the fitted constant when that is None."""
        return current().network_efficiency if self.bus_share is None else self.bus_share


INFINIBAND = Fabric(
    name="infiniband", label="InfiniBand", bus_share=None, hop_latency_s=HOP_LATENCY_S["network"],
    source="the fitted network_efficiency (Megatron-LM's and NeMo's multi-node InfiniBand rows; 0.96 = 24 GB/s of "
           "busbw per 200 Gb/s NIC, NVIDIA nccl-tests issue 119) and NCCL's NET hop latency, 6.6 us (tuning.cc)")

EFA = Fabric(
    name="efa", label="AWS EFA", bus_share=EFA_BUS_SHARE,
    hop_latency_s=EFA_HOP_LATENCY_S,
    source="0.83 of line rate: nccl-tests on 4-32 p5.48xlarge nodes at 2-8 GiB (crazyguitar/aws-gpu-communication-"
           "benchmark@fd167f97); 23 us per network step: AWS's NCCL tuner model for p5 (aws/aws-ofi-nccl@eacd69c3)")

FABRICS: dict[str, Fabric] = {f.name: f for f in (INFINIBAND, EFA)}
DEFAULT_FABRIC = INFINIBAND.name


def fabric(name: str | None) -> Fabric:
    """The fabric called ``name`` (None: :data:`DEFAULT_FABRIC`).

    Raises:
        ScenarioError: no fabric of that name (the message lists the known ones).
    """
    return named_record(FABRICS, name, DEFAULT_FABRIC, "network fabric")
