"""The layout search's fast path (shared contexts, memoised stage sections, cached rank compute) gives exactly (==)
what a straightforward evaluation of every layout on its own gives: a fresh :func:`estimate_layout` per layout, its
most loaded stage, its step time, over the layouts the search's docstring names (enumerated here on their own). Same
candidates, same order, same reasons, same numbers to the last bit (==, which is stricter than any relative
tolerance): every shortcut the search takes (memos, hoisting, pruning) is checked against the public per-layout
estimate, which shares none of the search's state."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.hardware.gpus import find_gpu
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.fp8 import Fp8Recipe
from engine.scaleout.frameworks import framework
from engine.scaleout.layout import Layout, Recompute, layout_problems
from engine.scaleout.memory import scaleout_memory
from engine.scaleout.search import Candidate, candidate_layouts, search_layouts
from engine.scaleout.step_time import Cluster
from engine.scenario.training import Scenario


def _documented_space(arch, cluster: Cluster, global_batch: int) -> list[dict]:
    """The layouts the search's docstring names, in plain nested loops of their own (not the search's enumeration,
    so a shortcut taken there shows too): GPU counts 1, 2, 4 ... a node, then whole nodes 1, 2, 4 ... and all of
    them; TP powers of two up to a node; CP powers of two up to 8; PP dividing the ranks left (world // (TP x CP)),
    up to the layer count, DP the rest; EP powers of two up to DP x CP dividing the experts; micro batch 1, 2, 4, 8
    dividing the global batch with DP; every recompute; ZeRO 0, 1, 2, 3; v = 1, 2 with PP > 1."""
    per_node, nodes = cluster.gpus_per_node, cluster.nodes
    powers = lambda n: [2**k for k in range(n.bit_length()) if 2**k <= n]  # noqa: E731
    worlds = sorted(set(powers(per_node)) | {per_node * k for k in powers(nodes)} | {per_node * nodes})
    out = []
    for world in worlds:
        for tp in powers(min(per_node, world)):
            for cp in powers(min(8, world // tp)):
                left = world // (tp * cp)
                for pp in [p for p in range(1, left + 1) if left % p == 0 and p <= arch.num_layers]:
                    dp = left // pp
                    eps = [e for e in powers(dp * cp) if arch.num_experts % e == 0] if arch.num_experts else [1]
                    for ep in eps:
                        for mb in (1, 2, 4, 8):
                            if global_batch % (mb * dp):
                                continue
                            for rec in Recompute:
                                for zero in (0, 1, 2, 3):
                                    for v in ((1, 2) if pp > 1 else (1,)):
                                        out.append(dict(tensor_parallel=tp, context_parallel=cp, pipeline_parallel=pp,
                                                        data_parallel=dp, expert_parallel=ep, sequence_parallel=tp > 1,
                                                        recompute=rec, zero=zero, micro_batch_size=mb,
                                                        global_batch_size=global_batch, virtual_pipeline=v))
    return out


def _one_by_one(arch, sc: Scenario, cluster: Cluster, global_batch: int, fp8, master: bool, fused: bool,
                price: float, **framework) -> list[Candidate]:
    """Every candidate layout estimated on its own, nothing shared between layouts; ``framework``: the framework
    settings of :func:`estimate_layout` (tp_comm_overlap, dtensor_tp, dp_sync)."""
    usable = cluster.gpu.usable_memory_bytes
    out = []
    for fields in _documented_space(arch, cluster, global_batch):
        try:
            layout = Layout(**fields)
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
            out.append(Candidate(Layout.model_construct(**fields), False, reason, 0.0, 0.0, 0, None, None, None, None))
            continue
        problems = layout_problems(arch, layout, sc.seq_len)
        if problems:
            out.append(Candidate(layout, False, problems[0], 0.0, 0.0, 0, None, None, None, None))
            continue
        est = estimate_layout(arch, sc, layout, cluster, fp8, master_weights=master, fused_kernels=fused, **framework)
        stage = est.memory.max_stage
        peak, device = stage.peak_allocated_bytes, stage.device_used_bytes
        if device > usable:
            reason = (f"out of memory: stage {stage.stage} needs {device / 2**30:.1f} GiB (nvidia-smi), "
                      f"{usable / 2**30:.1f} GiB usable")
            out.append(Candidate(layout, False, reason, peak, device, stage.stage, None, None, None, None))
            continue
        t = est.time
        gpu_h = layout.world_size * t.step_s / 3600 / t.tokens_per_step * 1e6
        out.append(Candidate(layout, True, "", peak, device, stage.stage, t.step_s, t.tokens_per_second, gpu_h,
                             gpu_h * price))
    out.sort(key=lambda c: (not c.fits, c.step_s if c.step_s is not None else float("inf"), c.peak_allocated_bytes))
    return out


# model, GPU, nodes x GPUs per node, global batch, sequence length, FP8, master weights, fused kernels
GRID = [
    ("meta-llama/Llama-3.1-8B", "H100 SXM", 1, 8, 32, 4096, None, True, False),  # dense GQA, every recompute mode
    ("deepseek-ai/DeepSeek-V2-Lite", "H100 SXM", 3, 2, 12, 2048, Fp8Recipe.TORCHAO, True, True),  # MoE, dense 1st layer, 6 GPUs
    ("Qwen/Qwen2.5-0.5B", "H100 SXM", 3, 4, 24, 1024, Fp8Recipe.TE, False, False),  # tied embedding, 14 heads, 12 GPUs
    ("mistralai/Mixtral-8x7B-v0.1", "A100 80GB", 1, 8, 8, 8192, None, False, False),  # MoE without master weights
    # two whole nodes: DP and ZeRO shards up to 16 across the network, PP (interleaved) and TP x CP spanning nodes
    ("Qwen/Qwen2.5-0.5B", "H100 SXM", 2, 8, 16, 1024, None, True, True),
]


def _search(repo, gpu, nodes, per_node, gbs, seq, fp8, master, fused, **framework):
    arch = architecture_from_config(config_from_catalog(repo)[0])
    cluster = Cluster(gpu=find_gpu(gpu), nodes=nodes, gpus_per_node=per_node)
    sc = Scenario(seq_len=seq)
    found = search_layouts(arch, sc, cluster, gbs, fp8, usd_per_gpu_hour=PRICE, master_weights=master, fused_kernels=fused,
                           **framework)
    return arch, cluster, sc, found


PRICE = 2.5


@pytest.mark.parametrize("case", GRID, ids=[f"{c[0].split('/')[1]}-{c[2]}x{c[3]}" for c in GRID])
def test_search_equals_one_layout_at_a_time(case):
    arch, cluster, sc, found = _search(*case)
    repo, gpu, nodes, per_node, gbs, seq, fp8, master, fused = case
    assert candidate_layouts(arch, cluster, gbs, seq) == _documented_space(arch, cluster, gbs)
    assert found == _one_by_one(arch, sc, cluster, gbs, fp8, master, fused, PRICE)


@pytest.mark.parametrize("name", ["nanotron", "torchtitan", "megatron"])
def test_search_equals_one_layout_at_a_time_for_each_framework(name):
    """A framework's settings (engine.scaleout.frameworks: fused kernels, nanotron's DP sync and what it holds,
    torchtitan's DTensor TP with torchao float8's FP8 all-gathers, TP overlap) reach every layout of the search as
    estimate_layout takes them: the same candidates to the last bit, on two nodes (DP and TP x CP across the network;
    ZeRO 0-3, so a ZeRO-0 layout's DDP buckets must not be reused for a ZeRO-1 one of the same shape)."""
    fw = framework(name)
    settings = dict(tp_comm_overlap=fw.tp_comm_overlap_available, dtensor_tp=fw.dtensor_tp, dp_sync=fw.dp_sync)
    case = ("Qwen/Qwen2.5-0.5B", "H100 SXM", 2, 4, 16, 1024, fw.fp8_recipe if fw.dtensor_tp else None, True,
            fw.fused_kernels)
    arch, cluster, sc, found = _search(*case, **settings)
    assert found == _one_by_one(arch, sc, cluster, *case[4:5], case[6], case[7], case[8], PRICE, **settings)
    plain = _search(*case)[3]
    assert [c.step_s for c in found] != [c.step_s for c in plain]  # the settings change the step times


def test_a_search_does_not_reuse_another_searchs_numbers():
    """Whatever the search keeps between layouts stays inside one search: the same search after another one on a
    different GPU (equal model, batch and layouts) gives what it gave the first time, and the two differ."""
    case = ("Qwen/Qwen2.5-0.5B", "H100 SXM", 1, 4, 8, 1024, None, True, False)
    first = _search(*case)[3]
    other = _search(case[0], "H200", *case[2:])[3]
    again = _search(*case)[3]
    assert again == first
    assert [c.layout for c in other] != [c.layout for c in first] or [c.step_s for c in other] != [c.step_s for c in first]


def test_the_grid_reaches_every_path():
    """Fitting and out-of-memory layouts, op-level SAC that fits, rejections by validation (EP not dividing DP x CP)
    and by the model (TP not dividing the heads): the equality above covers each of them."""
    found = [c for case in GRID for c in _search(*case)[3]]
    reasons = {c.reason.split(":")[0] for c in found}
    assert any(c.fits for c in found) and "out of memory" in reasons
    assert any(c.fits and c.layout.recompute is Recompute.SELECTIVE_OP for c in found)
    assert any(r.startswith("expert parallel 2 must divide DP x CP = 3") for r in reasons)
    assert "TP 4 does not divide the 14 attention heads" in reasons


def test_dense_first_layer_puts_the_most_loaded_rank_in_the_middle():
    """DeepSeek-V2-Lite (27 layers, the first with a dense MLP) on PP 4: stage 1's 7 MoE blocks hold more than
    stage 0's 7 blocks with the dense one, so the search looks at every stage."""
    arch, _, sc, found = _search("deepseek-ai/DeepSeek-V2-Lite", "H100 SXM", 2, 4, 16, 2048, None, True, False)
    c = next(c for c in found if c.layout.label() == "TP2 PP4 DP1 SP, mb 4, full recompute, DDP")
    peaks = [s.peak_allocated_bytes for s in scaleout_memory(arch, sc, c.layout, master_weights=True).stages]
    assert arch.dense_mlp_layers == 1 and peaks[1] > peaks[0]
    assert c.max_stage == 1 and c.peak_allocated_bytes == max(peaks)
