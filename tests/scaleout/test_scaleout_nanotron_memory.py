"""What a nanotron rank holds with fp32 gradient accumulation (``ACCUMULATE_GRAD_IN_FP32 = True`` in
``scripts/scaling_benchmarks.py``), read in huggingface/nanotron@e24d2483, modelled through the framework's
:class:`engine.scaleout.comm_volumes.DataParallelSync` record (``NANOTRON_DP_SYNC``). Bytes per parameter, worked
out from the source (P: the rank's parameters, d: the DP size, bf16 model):

- ``helpers.py`` ``init_optimizer_and_grad_accumulator`` (l. 361-388): the accumulator is built inside the optimizer
  builder, which ``ZeroDistributedOptimizer`` calls with its 1/d slices (``optim/zero.py`` l. 67-91), but with
  ``grad_buckets_named_params=named_parameters``, every parameter of the rank.
- ``optim/gradient_accumulator.py`` ``FP32GradientAccumulator.__init__`` (l. 59-115): ``build_grad_buffers`` over
  those: one fp32 gradient buffer of all P, "independently of ZeRO sharding" (l. 165-202): 4 B; the fp32 weights
  (``big_flat_buffer``) over the optimizer's parameters: 4 B at ZeRO-0, 4/d at ZeRO-1. AdamW's ``exp_avg`` and
  ``exp_avg_sq`` on those fp32 weights: 8 B, 8/d. With the bf16 weights (2 B): 18 B at ZeRO-0, 2 + 4 + 12/d at ZeRO-1.
- ``backward`` / ``_accumulate_grad`` (l. 204-236): ``loss.backward()`` makes every bf16 ``.grad`` (2 B), then each
  is added into the buffer and set to None: 2 B at the end of every micro batch's backward, gone before the next.
- ZeRO-0 with d > 1 runs PyTorch DDP (``trainer.py`` l. 786-852, no ``gradient_as_bucket_view``): the reducer's
  buckets, a bf16 copy of every gradient, 2 B for the whole run.
- ZeRO-1's step ends in ``_all_gather_params`` (``optim/zero.py`` l. 217-251) -> ``distributed.py``
  ``all_gather_coalesced`` (l. 153-206), which flattens this rank's slices (2/d B) and one output per rank (2 B in
  all): 2 + 2/d B at the optimizer step.
"""

from __future__ import annotations

import pytest

from engine.model.build import architecture_from_config
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.layout import Layout
from engine.scaleout.memory import context, peak_of, scaleout_memory, stage_parts
from engine.scaleout.stage_peaks import SectionPool, most_loaded_stage
from engine.scenario.training import Scenario
from engine.validation.run_configs import NANOTRON
from engine.scaleout.frameworks import NANOTRON_DP_SYNC

NANO_3B = architecture_from_config(NANOTRON["3.57"])  # 28 blocks, 3072 wide, vocab 131072 tied
SC = Scenario(seq_len=4096, micro_batch_size=1)
STATES = ("weights", "gradients", "master_weights", "optimizer_states")


def _rank(layout: Layout, sync=NANOTRON_DP_SYNC, sc: Scenario = SC):
    mem = scaleout_memory(NANO_3B, sc, layout, ctx=context(NANO_3B, sc, layout, master_weights=True, dp_sync=sync))
    st = mem.stages[0]
    return {c.key: c for c in st.estimate.parts}, st.parameters


def test_zero1_keeps_the_fp32_gradient_buffer_whole_and_shards_master_weights_and_adam():
    d = 8
    parts, p = _rank(Layout(data_parallel=d, zero=1, micro_batch_size=1, global_batch_size=8))
    assert p == NANO_3B.total_parameters  # TP 1, PP 1: the whole model on the rank
    per_param = {k: parts[k].bytes / p for k in STATES}
    assert per_param == pytest.approx({"weights": 2, "gradients": 4, "master_weights": 4 / d, "optimizer_states": 8 / d})
    assert sum(per_param.values()) == pytest.approx(2 + 4 + 12 / d)  # 7.5 B per parameter at DP 8
    # all_gather_coalesced's flattened copies: 2 + 2/d B, at the optimizer step only; no DDP at ZeRO-1
    assert parts["gather_buffers"].bytes / p == pytest.approx(2 + 2 / d)
    assert parts["gather_buffers"].phases == ("optimizer_step",)
    assert "ddp_buckets" not in parts


def test_zero0_adds_ddp_buckets_only_with_more_than_one_dp_rank():
    parts, p = _rank(Layout(data_parallel=8, zero=0, micro_batch_size=1, global_batch_size=8))
    assert sum(parts[k].bytes for k in STATES) / p == pytest.approx(2 + 4 + 4 + 8)  # 18 B: nothing sharded
    assert parts["ddp_buckets"].bytes / p == pytest.approx(2)  # bf16 bucket copy of every gradient
    assert set(parts["ddp_buckets"].phases) >= {"forward", "backward", "optimizer_step"}
    assert "gather_buffers" not in parts
    alone, _ = _rank(Layout(data_parallel=1, zero=0, micro_batch_size=1, global_batch_size=1))
    assert "ddp_buckets" not in alone  # make_ddp = dp > 1 and ...


def test_backward_ends_with_every_bf16_gradient_when_the_activations_are_small():
    # 128 tokens: one micro batch's saved tensors and loss tensors (well under 1 GB) are fewer bytes than the bf16
    # gradients of 3.57B parameters (7.1 GB), so the backward peaks at its end: the rest + 2 B x P.
    sc = Scenario(seq_len=128, micro_batch_size=1)
    layout = Layout(data_parallel=8, zero=1, micro_batch_size=1, global_batch_size=8)
    parts, p = _rank(layout, sc=sc)
    backward = sum(c.bytes for c in parts.values() if "backward" in c.phases)
    rest = sum(c.bytes for k, c in parts.items() if "backward" in c.phases
               and k not in ("activations", "logits_loss", "half_gradients"))
    assert backward == pytest.approx(rest + 2 * p)
    # 4096 tokens: a micro batch's saved tensors outweigh the gradients, the start of backward stays the peak
    big, _ = _rank(layout)
    assert "half_gradients" not in big  # nothing above the start of backward


def test_other_frameworks_hold_none_of_it():
    for zero in (0, 1):
        parts, _ = _rank(Layout(data_parallel=8, zero=zero, micro_batch_size=1, global_batch_size=8), sync=None)
        assert not {"ddp_buckets", "gather_buffers", "half_gradients"} & set(parts)


@pytest.mark.parametrize("zero,pp,dp,seq,schedule", [(0, 1, 8, 4096, "1f1b"), (1, 1, 8, 4096, "1f1b"),
                                                     (0, 2, 4, 4096, "1f1b"), (1, 2, 4, 128, "1f1b"),
                                                     (0, 2, 1, 128, "1f1b"), (1, 4, 2, 128, "gpipe")])
def test_layout_search_path_gives_the_same_peaks(zero, pp, dp, seq, schedule):
    # stage_peaks replays memoised sections: with the nanotron record, exactly peak_of(stage_parts), and a pool that
    # also holds a default context keeps the two apart. GPipe: stages 0 and 1 hold the same activations (the same
    # section key) but not the same parameters (the embedding), so their 16-bit gradients differ.
    sc = Scenario(seq_len=seq, micro_batch_size=1)
    layout = Layout(pipeline_parallel=pp, data_parallel=dp, zero=zero, micro_batch_size=1, global_batch_size=8 * dp,
                    schedule=schedule)
    pool = SectionPool(NANO_3B)
    for sync in (None, NANOTRON_DP_SYNC):
        ctx = context(NANO_3B, sc, layout, master_weights=True, dp_sync=sync)
        pool.adopt(ctx)
        peaks = [peak_of(stage_parts(ctx, layout, r, explain=False))[1] for r in range(pp)]
        assert most_loaded_stage(ctx, layout, range(pp)) == (max(peaks), peaks.index(max(peaks)))
        for r in range(pp):
            assert most_loaded_stage(ctx, layout, [r])[0] == peaks[r]


def test_pooled_sections_tell_one_dp_rank_from_many():
    # contexts of DP 1 and DP 8 with the same micro batches share their buffer sections in one pool; DDP's buckets
    # exist at DP 8 only, so the DP size is part of what those sections are kept under.
    pool = SectionPool(NANO_3B)
    for dp in (1, 8):
        layout = Layout(data_parallel=dp, zero=0, micro_batch_size=1, global_batch_size=8 * dp)
        ctx = context(NANO_3B, SC, layout, master_weights=True, dp_sync=NANOTRON_DP_SYNC)
        pool.adopt(ctx)
        assert most_loaded_stage(ctx, layout, [0])[0] == peak_of(stage_parts(ctx, layout, 0, explain=False))[1]


def test_estimate_layout_passes_the_record_to_memory():
    layout = Layout(data_parallel=8, zero=0, micro_batch_size=1, global_batch_size=8)
    est = estimate_layout(NANO_3B, SC, layout, master_weights=True, dp_sync=NANOTRON_DP_SYNC)
    assert "ddp_buckets" in {c.key for c in est.memory.max_stage.estimate.parts}


def test_ddp_cell_at_64_nodes():
    # the ultrascale playbook's heatmap, 8.86B on 64 nodes (TP 4 x DP 128, ZeRO-0, micro batch 2): 57.76 GB peak per
    # GPU. Without DDP's bf16 buckets the model said 50.1 (-13.3%); with them within 10%.
    from engine.files import labelled_csv_rows
    from engine.validation.scaleout import compare_row
    row = next(r for _, r in labelled_csv_rows("large_runs.csv") if r["id"] == "nanotron_8.86b_64n")
    mem = next(c for c in compare_row(row) if c.metric.startswith("memory"))
    assert mem.published == pytest.approx(57.76) and abs(mem.error_pct) < 10
