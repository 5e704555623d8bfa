"""How published multi-GPU runs schedule their pipeline, attention and TP traffic (issue 23), each from its source:
Llama 3's interleaved pipeline with one layer per chunk, Megatron-LM's pre-FlashAttention attention core, DTensor TP
without Megatron's backward re-gather."""

from __future__ import annotations

from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.comm_volumes import bubble_fraction, model_parallel_collectives
from engine.scaleout.layout import Layout, layout_problems
from engine.scaleout.partition import parameter_split
from engine.time.attention import fused_softmax_score_bytes, score_bytes
from engine.validation.scaleout import embedding_chunk_layers


def _arch(repo: str):
    return architecture_from_config(config_from_catalog(repo)[0])


def test_llama3_405b_pipeline_has_eight_one_layer_chunks_per_rank():
    # Grattafiori et al. 2024 sec. 3.3.2: one layer fewer on the first and last of 16 stages, so that the first chunk
    # of the first stage holds only the embedding and the last chunk of the last stage only the output: 126 + 2 = 128
    # one-layer chunks, 8 per rank; bubble (PP - 1) / (V * M) = 15 / (8 * 16) of the ideal at M = 16.
    arch = _arch("meta-llama/Llama-3.1-405B")
    split = embedding_chunk_layers(arch.num_layers, 16)
    assert split == (7,) + (8,) * 14 + (7,)
    layout = Layout(tensor_parallel=8, pipeline_parallel=16, data_parallel=128, sequence_parallel=True,
                    virtual_pipeline=8, layers_per_stage=split, zero=3, micro_batch_size=1, global_batch_size=2048)
    assert layout_problems(arch, layout, 8192) == []
    assert abs(bubble_fraction(layout) - 15 / (8 * 16 + 15)) < 1e-12
    # An even split keeps Megatron's rule (v divides every stage): 126 layers do not split into 16 x 8 chunks.
    even = layout.model_copy(update={"layers_per_stage": None})
    assert any("virtual pipeline 8" in p or "needs at least 8" in p for p in layout_problems(arch, even, 8192))


def test_megatron_fused_softmax_moves_fewer_bytes_than_transformers_eager():
    # Megatron-LM's CoreAttention (baddbmm -> FusedScaleMaskSoftmax -> dropout -> bmm), bf16 (c = 2), dropout 0.1:
    # forward c + 2c + (2c + 1) + c = 13 B per score, backward c + c + (2c + 1) + 3c + 2c = 19 B; transformers' eager
    # path (mask add, fp32 softmax and its cast back) moves 6c + 8 + 2c + 1 = 25 B forward.
    assert fused_softmax_score_bytes(2, True) == (13.0, 19.0)
    assert fused_softmax_score_bytes(2, False) == (8.0, 14.0)
    assert score_bytes(2, True)[0] == 25.0


def test_dtensor_tp_gathers_each_input_once_and_in_fp8_with_float8():
    # Megatron's sequence parallelism re-gathers each column-parallel input in backward for the weight gradient
    # (LinearWithGradAccumulationAndAsyncCommunication); DTensor's ColwiseParallel keeps the gathered input, and
    # torchao's Float8ColwiseParallel gathers it in FP8 (1 byte instead of 2).
    arch = _arch("meta-llama/Llama-3.1-8B")
    layout = Layout(tensor_parallel=8, data_parallel=8, sequence_parallel=True, zero=3, micro_batch_size=2,
                    global_batch_size=16)
    split = parameter_split(arch)

    def gathered(**kw) -> float:
        cols = model_parallel_collectives(arch, layout, split, 8192, 2, 8, **kw)
        return sum(c.message_bytes * c.count for c in cols if c.kind == "all_gather")

    m, L, act = layout.micro_batches, arch.num_layers, 8192 * 2 * arch.hidden_size * 2
    assert gathered() == 6 * L * m * act  # 2 forward + 2 backward (grad of reduce-scatter) + 2 re-gathers
    assert gathered(dtensor_tp=True) == 4 * L * m * act
    assert gathered(dtensor_tp=True, fp8_tp_all_gather=True) == 3 * L * m * act  # the forward two at half
