"""How a framework splits a model's layers over its pipeline stages when the user gives no split.

Megatron-LM, torchtitan and the estimate's default split the decoder layers evenly (the remainder on the first
stages, :meth:`engine.scaleout.layout.Layout.stage_layers`); the output layer and loss then ride on the last stage.
nanotron instead balances a compute cost over its pipeline blocks, the output layer counted as one: for a model whose
vocabulary is large beside its width (nanotron's 1.34B benchmark model: 131,072 x 2,048, the output layer worth four
decoder layers) the last stage gets fewer layers, none at all at PP 4. That split is :func:`cost_balanced_layers`.
"""

from __future__ import annotations

from engine.errors import ScenarioError
from engine.model.architecture import Architecture
from engine.scaleout.layout import Layout


def nanotron_block_costs(arch: Architecture) -> tuple[int, int]:
    """(one decoder layer, the output layer) in nanotron's cost units: weight elements its GEMMs multiply by.

    Source: huggingface/nanotron@2411b022 src/nanotron/models/llama.py ``LlamaModel.get_block_compute_costs``:
    a decoder layer costs ``4 x heads x head_dim x hidden + 3 x intermediate x hidden`` (q, k, v and o counted as
    square whatever the key/value heads: its formula, kept as written) and the output layer ``vocab x hidden``; every
    other block (embedding, final norm, the fp32 cast, the loss) costs 0.
    """
    h = arch.hidden_size
    layer = 4 * arch.num_attention_heads * (h // arch.num_attention_heads) * h + 3 * arch.intermediate_size * h
    return layer, arch.vocab_size * h


def cost_balanced_layers(arch: Architecture, pipeline_parallel: int, ranks: int | None = None) -> tuple[int, ...]:
    """Decoder layers per pipeline stage as nanotron assigns them, shape ``(pipeline_parallel,)``. ``ranks``: the GPUs
    left after TP x CP (PP x DP), so that a refusal names only the degrees that divide them.

    nanotron walks its pipeline blocks in order with a running cost sum and puts each on the current rank, then moves
    to the next rank once the sum passes ``total x (rank + 1) / PP`` (huggingface/nanotron@2411b022
    src/nanotron/models/base.py ``build_model``, "Balance compute across PP blocks"; costs from
    :func:`nanotron_block_costs`). The block that crosses a threshold stays on the rank it crossed on, so the first
    stages take the extra layer; the output layer sits on the last rank reached.

    Raises:
        ScenarioError: the walk puts the output layer before the last stage (more stages than the costs can fill:
            nanotron would give the later ranks only its fp32 cast and loss blocks, cost 0, which the estimate's
            stages, the output layer and loss on the last, cannot represent).
    """
    p = pipeline_parallel
    layers, rank = _walk(arch, p)
    if rank != p - 1:
        fits = [q for q in range(1, p) if _walk(arch, q)[1] == q - 1 and (ranks is None or ranks % q == 0)]
        which = f"1-{fits[-1]}" if fits == list(range(1, fits[-1] + 1)) else ", ".join(map(str, fits))
        works = (f"the pipeline degrees it splits this model into below {p}: {which} (one that also divides the GPU "
                 "count)" if ranks is None else f"the pipeline degrees below {p} that split this model and divide the "
                 f"{ranks} GPUs left after TP x CP: {which}")
        raise ScenarioError(f"Pipeline parallel {p}: nanotron's cost-balanced split of the {arch.num_layers} layers puts "
                            f"the output layer on stage {rank} (stages 0-{p - 1}) and leaves the later stages no layer "
                            f"(only the loss), a split this estimate does not model; {works}")
    return layers


def _walk(arch: Architecture, p: int) -> tuple[tuple[int, ...], int]:
    """nanotron's walk over ``p`` ranks: (layers per rank, the rank the final norm and output layer land on)."""
    layer, head = nanotron_block_costs(arch)
    total = arch.num_layers * layer + head
    thresholds = [total * ((r + 1) / p) for r in range(p)]  # floats, as nanotron's numpy thresholds
    layers = [0] * p
    rank, cum = 0, 0
    for _ in range(arch.num_layers):
        layers[rank] += 1
        cum += layer
        if cum > thresholds[rank]:
            rank += 1
    return tuple(layers), rank


def framework_split(arch: Architecture, layout: Layout, cost_balanced: bool) -> Layout:
    """``layout`` with the framework's split: :func:`cost_balanced_layers` where ``cost_balanced`` and the layout has
    pipeline stages and no split of its own (``layers_per_stage`` None), else ``layout`` unchanged.

    Raises:
        ScenarioError: see :func:`cost_balanced_layers`.
    """
    if not cost_balanced or layout.pipeline_parallel == 1 or layout.layers_per_stage is not None:
        return layout
    ranks = layout.world_size // (layout.tensor_parallel * layout.context_parallel)
    return layout.model_copy(update={"layers_per_stage": cost_balanced_layers(arch, layout.pipeline_parallel, ranks)})
