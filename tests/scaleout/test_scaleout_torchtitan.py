"""torchtitan's behaviour as modelled: op-level selective checkpointing, FSDP2's root unit, FSDP + PP without
reshard, its default pipeline split. Expected values are worked out by hand from the sources cited in
engine/scaleout/recompute.py and engine/scaleout/memory.py."""

from __future__ import annotations

import pytest

from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout import recompute
from engine.scaleout.layout import Layout
from engine.scaleout.memory import scaleout_memory
from engine.scaleout.partition import parameter_split
from engine.scenario.training import Scenario
from engine.validation.scaleout import torchtitan_stage_layers

LLAMA31_8B = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
H, KV, F, HEADS = 4096, 1024, 14336, 32


def test_op_sac_keeps_the_block_input_every_second_matmul_and_the_flash_output():
    # Llama: mm 1 wq (kept), 2 wk, 3 wv (kept), 4 wo, 5 w1 (kept), 6 w3, 7 w2 (kept); + SDPA out and fp32 LSE.
    expected = 2 * (H + H + KV + F + H + H) + 4 * HEADS
    assert recompute.saved_per_token(LLAMA31_8B, 2, 2, "flash", 1, False) == expected == 63616
    # the math kernel is recomputed: no attention output kept
    assert recompute.saved_per_token(LLAMA31_8B, 2, 2, "math", 1, False) == expected - 2 * H - 4 * HEADS


def test_op_sac_under_tp8_with_sequence_parallelism():
    # input / 8; wq, wv, w1 column-parallel / 8; w2 row-parallel: the full-width partial sum; both reduce-scatter
    # outputs (after wo and w2) h / 8; the attention output and LSE / 8.
    expected = 2 * (H / 8 + H / 8 + KV / 8 + F / 8 + H + 2 * H / 8) + (2 * H + 4 * HEADS) / 8
    assert recompute.saved_per_token(LLAMA31_8B, 2, 2, "flash", 8, True) == pytest.approx(expected)


def test_op_sac_recomputes_the_even_matmuls():
    assert recompute.recompute_flops_per_token(LLAMA31_8B) == 2 * (H * KV + H * H + H * F) * 32


def test_layer_frequency_option():
    assert recompute.torchtitan_layer_sac_layers(32, 2) == 16
    with pytest.raises(ValueError):
        recompute.torchtitan_layer_sac_layers(32, 0)


def test_selective_op_stage_activations_and_recomputed_block():
    sc = Scenario(seq_len=8192, micro_batch_size=2, precision="amp_bf16")
    mem = scaleout_memory(LLAMA31_8B, sc, Layout(data_parallel=8, zero=3, recompute="selective_op", micro_batch_size=2),
                          master_weights=True)
    parts = mem.stages[0].estimate.parts_by_key
    tokens = 2 * 8192
    full = scaleout_memory(LLAMA31_8B, sc, Layout(data_parallel=8, zero=3, recompute="none", micro_batch_size=2),
                           master_weights=True).stages[0].estimate.parts_by_key["activations"].bytes
    saved = 32 * 63616 * tokens
    head_bytes = parts["activations"].bytes - saved
    # what is left beyond the 32 blocks' kept tensors is the final norm and LM-head input (RMSNorm fp32 + 16-bit x2)
    assert head_bytes == pytest.approx((4 + 2 + 2) * H * tokens)
    # the recomputed block: one block's saved tensors less what op-SAC already keeps
    per_block = (full - head_bytes) / 32
    assert parts["recomputed_layer"].bytes == pytest.approx(per_block - 63616 * tokens)
    assert "recompute" in parts["activations"].phases


def test_fsdp2_root_unit_stays_gathered_and_no_16bit_shard():
    sc = Scenario(seq_len=8192, micro_batch_size=1, precision="amp_bf16")
    parts = scaleout_memory(LLAMA31_8B, sc, Layout(data_parallel=8, zero=3, recompute="full"),
                            master_weights=True).stages[0].estimate.parts_by_key
    split = parameter_split(LLAMA31_8B)
    block = split.block_parameters(0, 1, 1)
    root = split.vocab_embedding + split.final + split.head
    assert parts["gathered_weights"].bytes == pytest.approx(2 * (2 * block + root))
    assert parts["weights"].bytes == 0.0
    # fp32 shard + fp32 gradient shard + Adam: 16 B per parameter / 8
    states = sum(parts[k].bytes for k in ("master_weights", "gradients", "optimizer_states"))
    assert states == pytest.approx(16 * split.total / 8)


def test_fsdp_with_pp_keeps_the_stage_gathered_and_accumulates_fp32_gradients_unsharded():
    sc = Scenario(seq_len=4096, micro_batch_size=1, precision="amp_bf16")
    layout = Layout(pipeline_parallel=4, data_parallel=2, zero=3, recompute="full", global_batch_size=16)
    mem = scaleout_memory(LLAMA31_8B, sc, layout, master_weights=True)
    for st in mem.stages:
        parts = st.estimate.parts_by_key
        assert parts["gathered_weights"].bytes == pytest.approx(2 * st.parameters)
        assert parts["fsdp_accumulated_grads"].bytes == pytest.approx(4 * st.parameters)
        assert "forward" not in parts["gradients"].phases


def test_torchtitan_default_pipeline_split():
    # generate_split_points at 9dec370: 126 layers over 8 stages: 15, six of 16, 15; over 16 stages 7, 8 x 14, 7,
    # rank r holding stages r and r + 8.
    assert torchtitan_stage_layers(126, 8) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert torchtitan_stage_layers(126, 8, 2) == (15, 16, 16, 16, 16, 16, 16, 15)
    assert torchtitan_stage_layers(32, 4) == (8, 8, 8, 8)
    assert torchtitan_stage_layers(30, 4) == (7, 8, 8, 7)


def test_exports_name_the_right_recompute():
    from engine.errors import ScenarioError
    from engine.scaleout.exports import megatron_args, torchtitan_toml
    sc = Scenario(seq_len=8192, precision="amp_bf16")
    op = Layout(data_parallel=8, zero=3, recompute="selective_op")
    assert 'mode = "selective"\nselective_ac_option = "op"' in torchtitan_toml(LLAMA31_8B, sc, op, None)
    # Korthikanti's selective has no torchtitan setting; with flash SDPA it keeps what "none" keeps
    assert 'mode = "none"' in torchtitan_toml(LLAMA31_8B, sc, Layout(data_parallel=8, zero=3, recompute="selective"), None)
    with pytest.raises(ScenarioError, match="op-level"):
        megatron_args(LLAMA31_8B, sc, Layout(data_parallel=8, zero=1, recompute="selective_op"), None)
