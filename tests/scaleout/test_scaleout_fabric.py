"""A cluster's network fabric (:mod:`engine.time.fabrics`) through the layout model, the command line's
``--inter-node-fabric`` and ``data/large_runs.csv``'s ``fabric`` column: the default is InfiniBand, exactly the link
the model gave before fabrics existed; AWS EFA (p5: 0.83 of line rate, 23 us per network step) is nanotron's, whose
benchmark ran on Hugging Face's AWS cluster (huggingface/nanotron@e24d2483: slurm partition ``hopper-prod`` in
``scripts/scaling_benchmarks.py``, ``FI_PROVIDER="efa"`` in ``examples/train_tiny_llama.sh``)."""

from __future__ import annotations

import csv
import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.files import data_file
from engine.hardware.gpus import find_gpu
from engine.scaleout.comm_volumes import Collective, Link
from engine.scaleout.step_time import Cluster, collective_seconds
from engine.time import collectives as cc
from engine.time.constants import FITTED
from engine.time.fabrics import FABRICS

H100 = find_gpu("H100 SXM")
# a data-parallel all-reduce of 1 GiB over 32 ranks, one per node (32 nodes), and the same over 4 nodes of 8
ONE_PER_NODE = Collective(dimension="dp", name="gradients", kind="all_reduce", message_bytes=2**30, count=1,
                          group_size=32, link=Link.INTER_NODE, overlapped=False, source="test", ranks_per_node=1)
EIGHT_PER_NODE = ONE_PER_NODE._replace(ranks_per_node=8)


@pytest.mark.parametrize("col", [ONE_PER_NODE, EIGHT_PER_NODE])
def test_default_fabric_is_the_link_of_before(col):
    """Cluster() and Cluster(fabric="infiniband") give the link the model gave before: data_parallel_link at the
    NIC's line rate x the fitted network_efficiency, NCCL's 6.6 us per network step, InfiniBand in its name."""
    nodes = 32 if col.ranks_per_node == 1 else 4
    before = cc.data_parallel_link(H100, 32, col.ranks_per_node, network_bytes_per_s=400 / 8 * 1e9 * FITTED.network_efficiency)
    assert Cluster(gpu=H100, nodes=nodes).link(col) == before
    assert Cluster(gpu=H100, nodes=nodes, fabric="infiniband").link(col) == before
    assert Cluster(gpu=H100, nodes=nodes).fabric == "infiniband"


def test_efa_cluster_link_and_seconds():
    """One rank per node: each rank's own 400 Gb/s EFA NIC at 0.83 = 41.5 GB/s (InfiniBand: 0.96 = 48 GB/s), and
    62 network steps of 23 us (6.6 us); the 1 GiB all-reduce takes 2 x 31/32 x 1 GiB / 41.5 GB/s + 8.4 us + 62 x 23 us."""
    efa = Cluster(gpu=H100, nodes=32, gpus_per_node=8, fabric="EFA")
    link = efa.link(ONE_PER_NODE)
    assert efa.fabric == "efa" and link.name == "AWS EFA between 32 nodes"
    assert link.bus_bytes_per_s == pytest.approx(41.5e9) and link.network_hop_latency_s == 23e-6
    assert collective_seconds(ONE_PER_NODE, efa) == pytest.approx(2 * 31 / 32 * 2**30 / 41.5e9 + 8.4e-6 + 62 * 23e-6)
    ib = Cluster(gpu=H100, nodes=32, gpus_per_node=8)
    assert ib.link(ONE_PER_NODE).bus_bytes_per_s == pytest.approx(48e9)
    assert collective_seconds(ONE_PER_NODE, efa) > collective_seconds(ONE_PER_NODE, ib)
    assert hash(efa) != hash(ib) and efa != ib  # the link cache keys on the fabric


def test_given_intra_node_bandwidth_keeps_the_fabric_latency():
    """A ring NVLink binds (8 ranks per node on 4 nodes over InfiniBand) with a given intra-node bandwidth keeps the
    network's per-step latency for its steps between nodes."""
    cluster = Cluster(gpu=H100, nodes=4, intra_node_gbps=300.0)
    link = cluster.link(EIGHT_PER_NODE)
    assert link.name == "intra-node (given)" and link.bus_bytes_per_s == pytest.approx(240e9)
    assert link.network_hop_latency_s == 6.6e-6 and link.nodes == 4


def test_unknown_fabric_is_refused():
    with pytest.raises(ScenarioError, match="unknown network fabric 'roce'"):
        Cluster(gpu=H100, nodes=2, fabric="roce")


def test_large_runs_name_their_fabric():
    """Every row of data/large_runs.csv names a known fabric; nanotron's rows (Hugging Face's AWS cluster) EFA, the
    others InfiniBand."""
    rows = list(csv.DictReader(data_file("large_runs.csv").open(encoding="utf-8")))
    assert all(r["fabric"] in FABRICS for r in rows)
    assert {r["fabric"] for r in rows if r["framework"] == "nanotron"} == {"efa"}
    assert {r["fabric"] for r in rows if r["framework"] != "nanotron"} == {"infiniband"}


BASE = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "8", "--num-nodes", "4",
        "--seq-len", "4096", "--global-batch-size", "32"]


def run(capsys, *extra: str) -> tuple[int, str, str]:
    code = main([*BASE, *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_inter_node_fabric(capsys):
    code, out, err = run(capsys, "--gpu", "H100 80GB", "--inter-node-fabric", "efa")
    assert code == 0, err
    efa = json.loads(out)
    code, out, err = run(capsys, "--gpu", "H100 80GB")
    assert code == 0, err
    ib = json.loads(out)
    assert efa["inter_node_fabric"] == "efa" and ib["inter_node_fabric"] == "infiniband"
    assert "AWS EFA between 4 nodes" in {c["link_name"] for c in efa["collectives"]}
    assert efa["step_time"]["step_s"] > ib["step_time"]["step_s"]
    code, _, err = run(capsys, "--inter-node-fabric", "efa")
    assert code == 2 and "--inter-node-fabric sets the step time's network: it needs --gpu" in err
