"""Collective communication: ring all-reduce, reduce-scatter, all-gather and all-to-all over a link, and how much
of it compute hides. Pure functions of bytes, GPU count and a :class:`Link`; reusable by any parallelism.

Ring algorithm costs (NCCL, NVIDIA/nccl-tests ``doc/PERFORMANCE.md``): for an array of ``S`` bytes per rank
over ``n`` ranks, every rank sends and receives

- all-reduce: ``2 (n-1)/n x S``;
- reduce-scatter, all-gather, all-to-all: ``(n-1)/n x S`` (``S`` the full, unsharded array),

at the link's *bus bandwidth* (what nccl-tests report as busbw: about 80% of the unidirectional NVLink rate on
A100/H100/H200 rings, ml-engineering network/README.md). Each call also pays NCCL's ring latency: a base
(:data:`CALL_LATENCY_S`) plus one hop latency per ring step (``2(n-1)`` steps for an all-reduce, ``n-1`` for the
others), of which only the steps that cross nodes (``2(k-1)`` for an all-reduce over k nodes, ``k-1`` for the others)
pay the network's hop latency and the rest the NVLink/PCIe one (:data:`HOP_LATENCY_S`; NCCL's ring latency model,
``nInterSteps`` in ``src/graph/tuning.cc``), so many small buckets over many ranks cost more than one large message
over few.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.hardware.gpus import Gpu
from engine.time.constants import current

NVLINK_BUS_EFFICIENCY = 0.80
"""Ring busbw / unidirectional NVLink bandwidth: 8x A100 all-reduce 234.9 of 300 GB/s (78%), 8x H200 367.6 of 450
(82%), all-gather/reduce-scatter 361-363 (80-81%) (stas00/ml-engineering@744d01e1 network/README.md)."""

PCIE_BUS_EFFICIENCY = 0.75
"""Ring busbw / unidirectional PCIe x16 bandwidth: NCCL's topology model gives a Gen4 x16 path 24 GB/s of 31.5
(NCCL INFO log in github.com/NVIDIA/nccl-tests/issues/307)."""

CROSS_SOCKET_BYTES_PER_S = 10e9
"""A PCIe ring that crosses CPU sockets (more than :data:`GPUS_PER_PCIE_SWITCH` GPUs in one server) is limited by
the inter-socket path: NCCL's topology model gives SYS paths 10 GB/s (nccl-tests issue #307)."""

GPUS_PER_PCIE_SWITCH = 4
"""GPUs behind one CPU socket's PCIe root in the usual 8-GPU PCIe server (two sockets, four GPUs each)."""

NO_P2P_FACTOR = 0.5
"""GPUs without peer-to-peer (GeForce 40/50 series) stage each transfer through host memory: every byte crosses
PCIe twice."""

NIC_BYTES_PER_S = 200e9 / 8
"""Line rate of one 200 Gb/s InfiniBand NIC per GPU (the DGX/HGX A100 layout)."""

NETWORK_BYTES_PER_S = 24e9
"""Inter-node bus bandwidth per GPU: one 200 Gb/s InfiniBand NIC per GPU (the DGX/HGX layout) reaches 24 GB/s of
all-reduce busbw ("24 GB/s per 200G NIC", NCCL maintainer, github.com/NVIDIA/nccl-tests/issues/119)."""

CALL_LATENCY_S = 8.4e-6
"""Base latency of one ring collective call: NCCL's ``baseLat`` for Ring / Simple, 8.4 us (NVIDIA/nccl
``src/graph/tuning.cc``)."""

HOP_LATENCY_S = {"intra": 2.5e-6, "network": 6.6e-6}
"""Latency of one ring step: NCCL's ``hwLat`` for Ring, inside a node (NVLink / PCIe, LL128: 2.5 us) and over the
network (NET, Simple: 6.6 us) (NVIDIA/nccl ``src/graph/tuning.cc``). Check: an 8x A100 32 KiB all-reduce takes 8.4 +
14 x 2.5 = 43.4 us here, 43.8 us measured (nccl-tests sweep, stas00/ml-engineering@744d01e1 network/README.md)."""

OVERLAP = 0.9
"""Share of a collective that runs under compute when there is enough compute to hide it: DDP's bucketed
all-reduce and FSDP's prefetched all-gathers overlap backward/forward; measured exposed communication is 5-10% on
NVLink/InfiniBand (DDP ResNet 91-93% scaling on 8 V100, pytorch benchmarks/distributed/ddp; FSDP 90-99%,
llm-foundry and torchtitan scaling tables)."""

GPUS_PER_NODE = 8
"""GPUs in one server (DGX/HGX nodes hold 8); more span nodes over :data:`NETWORK_BYTES_PER_S`."""


class Link(BaseModel):
    """The path a ring collective runs over: ``bus_bytes_per_s`` of bus bandwidth per GPU, ``name`` for display."""

    model_config = ConfigDict(frozen=True)

    name: str
    bus_bytes_per_s: float
    latency_s: float = CALL_LATENCY_S
    hop_latency_s: float = HOP_LATENCY_S["intra"]
    nodes: int = 1
    network_hop_latency_s: float = HOP_LATENCY_S["network"]
    all_reduce_bytes_per_s: float | None = None
    all_to_all_bytes_per_s: float | None = None
    network_bound: bool = False
    """The ring runs at the network between nodes, not at the link inside a node."""

    @property
    def all_reduce_bus_bytes_per_s(self) -> float:
        """Bus bandwidth of an all-reduce (NCCL's tree on 2 nodes beats the ring: :func:`data_parallel_link`)."""
        return self.all_reduce_bytes_per_s or self.bus_bytes_per_s

    @property
    def all_to_all_bus_bytes_per_s(self) -> float:
        """Bus bandwidth of an all-to-all (one NIC per rank across nodes: :func:`data_parallel_link`)."""
        return self.all_to_all_bytes_per_s or self.bus_bytes_per_s

    def call_latency_s(self, steps: int, inter_steps: int = 0) -> float:
        """Latency of one call of ``steps`` ring steps, ``inter_steps`` of them between nodes: base + the inter-node
        steps x the network's hop + the others x the link's hop (NCCL ``tuning.cc``: ``(nsteps - nInterSteps) x
        intraLat + nInterSteps x interLat``)."""
        inter = min(inter_steps, steps)
        return self.latency_s + (steps - inter) * self.hop_latency_s + inter * self.network_hop_latency_s

    def inter_node_steps(self, steps: int, all_reduce: bool) -> int:
        """Ring steps of one call that cross nodes: ``2(k-1)`` for an all-reduce over this link's k nodes, ``k-1`` for
        a reduce-scatter / all-gather / all-to-all (NCCL ``tuning.cc`` ``nInterSteps``), at most ``steps``."""
        k = max(1, self.nodes)
        return min(steps, (2 if all_reduce else 1) * (k - 1))


XGMI = "Infinity Fabric"
"""AMD's name in the catalog's ``interconnect`` for the GPU-to-GPU links; ROCm and RCCL call the link xGMI."""


def node_mismatch(num_gpus: int, gpus_per_node: int | None) -> str | None:
    """Why the one-node step time does not time the nodes a run states, in words, or None when it does.

    The data-parallel ring of :mod:`engine.time.step` puts ``min(num_gpus, GPUS_PER_NODE)`` GPUs on a node (NVLink or
    PCIe inside it, the network between); ``gpus_per_node`` (the sidebar's or the CLI's) that says otherwise would
    get another cluster's time (2 GPUs on nodes of 1 is a network ring, not NVLink). None when it agrees or is not
    given. The Scale out page's and a layout's cluster model nodes of any size."""
    if gpus_per_node is None or min(gpus_per_node, num_gpus) == min(num_gpus, GPUS_PER_NODE):
        return None
    return (f"time and cost put up to {GPUS_PER_NODE} GPUs on a node (NVLink or PCIe inside it, the network between), "
            f"here {min(num_gpus, GPUS_PER_NODE)}, not the {gpus_per_node} per node given")


def gpu_link_name(gpu: Gpu) -> str:
    """The GPU-to-GPU link's name as the catalog's ``interconnect`` gives it: "NVLink" for NVIDIA's (bridge, SXM,
    NVSwitch), "Infinity Fabric (xGMI)" for AMD Instinct's; the link's first words otherwise."""
    text = gpu.interconnect.strip()
    if text.startswith("NVLink"):
        return "NVLink"
    if text.startswith(XGMI):
        return f"{XGMI} (xGMI)"
    return text.split(",")[0].split("(")[0].rstrip(" 0123456789./GBs") or "GPU link"


def data_parallel_link(gpu: Gpu, num_gpus: int, gpus_per_node: int = GPUS_PER_NODE,
                       network_bytes_per_s: float | None = None, network_hop_latency_s: float = HOP_LATENCY_S["network"],
                       network_name: str = "InfiniBand") -> Link:
    """The link a ring over ``num_gpus`` x ``gpu`` is limited by.

    Within a node: NVLink (SXM / NVSwitch parts for up to ``gpus_per_node`` GPUs; bridged parts, whose
    ``interconnect`` says "bridge", for 2) at :data:`NVLINK_BUS_EFFICIENCY`, otherwise PCIe at
    :data:`PCIE_BUS_EFFICIENCY` (capped by :data:`CROSS_SOCKET_BYTES_PER_S` beyond :data:`GPUS_PER_PCIE_SWITCH`
    GPUs, halved without peer-to-peer). Across k nodes, with r of the ring's ranks on each node (the fewest, on
    a node the ring fills last), each rank driving its own NIC:

    - ring (reduce-scatter, all-gather; all-reduce over 3+ nodes): NCCL's channels cross each node boundary at
      different GPUs, so every NIC of the node is busy and busbw = min(intra, r x NIC). Check: "On an Nvidia
      DGX-A100 system we have 8x200Gbit/s IB cards and we measure 192GB/s AllReduce BusBW" (= 8 x 24 GB/s, NVIDIA,
      github.com/NVIDIA/nccl/issues/812); 4 nodes of 8 B200 with 8 x 50 GB/s EFA, 377-382 GB/s at 4-16 GiB (8 x 48
      = 384; stas00/ml-engineering@744d01e1 network/README.md "Inter-node speed depends on intra-node speed", where
      NCCL picked Ring on the 4-node H200 cluster). NCCL has no tree for reduce-scatter and all-gather (NVIDIA/nccl
      ``src/graph/tuning.cc``: Ring, PAT, NVLS, CollNet only).
    - all-reduce over exactly 2 nodes: NCCL's tree, which "on 2 nodes ... [has] 2x less traffic on the network than
      on the intra-node connections ... can go up to ~2x the network speed", and NCCL picks it there for large sizes
      (NCCL maintainer, github.com/NVIDIA/nccl/issues/946; nccl-tests issue 196): each node sends the payload once
      over its r NICs, busbw = min(intra, r x NIC x 2(n-1)/n) (= NIC x (n-1) for 8 + 8 GPUs).
    - all-to-all: "Alltoall cannot aggregate the bandwidth of multiple NICs" (NCCL maintainer,
      github.com/NVIDIA/nccl-tests/issues/267): each rank sends the (n-r)/n of its data bound off-node over its own
      NIC, busbw = min(intra, NIC x (n-1)/(n-r)).

    The hierarchical bound NIC x (n-1)/(k-1) (reduce in the node, exchange 1/g of the payload, ml-engineering's
    model 3) is the 2-node tree's and is above the ring's measured busbw from 3 nodes on (4 nodes: 31/3 x 48 = 496
    GB/s against 377-382 measured).
    ``network_bytes_per_s``: the NIC's bus bandwidth per GPU (default: a 200 Gb/s NIC, :data:`NIC_BYTES_PER_S`, at the
    fitted :attr:`~engine.time.constants.TimeConstants.network_efficiency`; 0.96 = :data:`NETWORK_BYTES_PER_S`);
    ``network_hop_latency_s``: one ring step between nodes, s, and ``network_name`` the network's name in the link's
    (a :class:`engine.time.fabrics.Fabric`'s; default InfiniBand's).
    """
    if network_bytes_per_s is None:
        network_bytes_per_s = NIC_BYTES_PER_S * current().network_efficiency
    per_node = min(num_gpus, gpus_per_node)
    nvlink = (gpu.nvlink_gbps_per_direction or 0.0) * 1e9
    bridged = "bridge" in gpu.interconnect.lower()
    if nvlink > 0 and (not bridged or per_node <= 2):
        intra, name = nvlink * NVLINK_BUS_EFFICIENCY, gpu_link_name(gpu)
    else:
        pcie = (gpu.pcie_gbps_per_direction or 15.75) * 1e9 * PCIE_BUS_EFFICIENCY
        if per_node > GPUS_PER_PCIE_SWITCH:
            pcie = min(pcie, CROSS_SOCKET_BYTES_PER_S)
        if not gpu.p2p:
            pcie *= NO_P2P_FACTOR
        intra, name = pcie, "PCIe" + ("" if gpu.p2p else " (no peer-to-peer: through host memory)")
    nodes = -(-num_gpus // gpus_per_node)
    if nodes > 1:
        n, r = num_gpus, min(per_node, num_gpus - (nodes - 1) * per_node)
        ring = network_bytes_per_s * r
        tree = ring * 2 * (n - 1) / n if nodes == 2 else ring
        a2a = network_bytes_per_s * (n - 1) / (n - r)
        extra = dict(nodes=nodes, all_reduce_bytes_per_s=min(intra, tree), all_to_all_bytes_per_s=min(intra, a2a),
                     network_hop_latency_s=network_hop_latency_s)
        if ring < intra:
            return Link(name=f"{network_name} between {nodes} nodes", bus_bytes_per_s=ring, network_bound=True,
                        **extra)
        return Link(name=name + f" ({nodes} nodes)", bus_bytes_per_s=intra, **extra)
    return Link(name=name, bus_bytes_per_s=intra)


def host_link_bytes_per_s(gpu: Gpu) -> float:
    """Bytes/s one way between a GPU and its host (CPU RAM): PCIe at :data:`PCIE_BUS_EFFICIENCY` of its per-direction
    figure (a PCIe 3.0 x16 link's 15.75 GB/s when the catalog has none). Used for CPU offload traffic."""
    return (gpu.pcie_gbps_per_direction or 15.75) * 1e9 * PCIE_BUS_EFFICIENCY


def all_reduce_seconds(nbytes: float, n: int, link: Link, calls: int = 1) -> float:
    """Ring all-reduce of ``nbytes`` per rank over ``n`` ranks in ``calls`` buckets: ``2(n-1)/n x S / busbw``
    + the ring latency of ``2(n-1)`` steps per call (``2(k-1)`` of them over the network on k nodes). 0 for one rank."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    steps = 2 * (n - 1)
    return 2 * (n - 1) / n * nbytes / link.all_reduce_bus_bytes_per_s + calls * link.call_latency_s(
        steps, link.inter_node_steps(steps, all_reduce=True))


def reduce_scatter_seconds(nbytes: float, n: int, link: Link, calls: int = 1) -> float:
    """Ring reduce-scatter of a full array of ``nbytes`` (each rank keeps 1/n): ``(n-1)/n x S / busbw`` + the ring
    latency of ``n-1`` steps per call."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) / n * nbytes / link.bus_bytes_per_s + calls * link.call_latency_s(
        n - 1, link.inter_node_steps(n - 1, all_reduce=False))


def all_gather_seconds(nbytes: float, n: int, link: Link, calls: int = 1) -> float:
    """Ring all-gather into a full array of ``nbytes`` (each rank holds 1/n): the cost of a reduce-scatter."""
    return reduce_scatter_seconds(nbytes, n, link, calls)


def all_to_all_seconds(nbytes: float, n: int, link: Link, calls: int = 1) -> float:
    """All-to-all of ``nbytes`` per rank (expert parallel token exchange): ``(n-1)/n x S`` at the link's all-to-all
    bus bandwidth + the latency of ``n-1`` steps per call."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return (n - 1) / n * nbytes / link.all_to_all_bus_bytes_per_s + calls * link.call_latency_s(
        n - 1, link.inter_node_steps(n - 1, all_reduce=False))


def exposed_seconds(comm_s: float, compute_s: float, overlap: float = OVERLAP) -> float:
    """Communication left on the critical path when it runs beside ``compute_s`` of compute: at least
    ``(1 - overlap)`` of it (the last bucket, the first gather), all that exceeds ``overlap x compute_s``."""
    if comm_s <= 0:
        return 0.0
    return max(comm_s - overlap * compute_s, (1 - overlap) * comm_s)
