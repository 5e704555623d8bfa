"""Which parameters a rank holds under tensor, pipeline and expert parallelism, from the architecture's tensors.

Tensor parallelism (Shoeybi et al. 2019, "Megatron-LM", sec. 3; Megatron ``ColumnParallelLinear`` /
``RowParallelLinear`` / ``VocabParallelEmbedding``): the q/k/v and MLP input projections are split by output
columns, the attention output and MLP output projections by input rows, the word embedding and the output layer
by vocabulary rows, so each of those weights is divided by TP exactly. Norm weights, the MoE router and
position embeddings stay whole on every TP rank (``replicated``). Routed experts are divided by EP x expert-TP.
Megatron-LM's ``theoretical_memory_usage.py`` (d98e8a64) makes the same three-way split (TP-sharded,
replicated, expert-sharded).

Pipeline parallelism puts consecutive blocks on each stage; the first stage also holds the input embedding, the
last the final norm and the output layer. A tied embedding is held by both when PP > 1 (Megatron keeps a copy of
the word embedding on the last stage and all-reduces its gradient between the two).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture, TensorGroup


class ParameterSplit(BaseModel):
    """Parameter counts by how they are held; ``*_per_block`` has one entry per decoder block (floats: a group
    whose tensors do not divide evenly over the blocks is spread as a fraction)."""

    model_config = ConfigDict(frozen=True)

    tp_per_block: tuple[float, ...]
    replicated_per_block: tuple[float, ...]
    expert_per_block: tuple[float, ...]
    linear_per_block: tuple[float, ...]
    vocab_embedding: int
    other_embedding: int
    head: int
    tied: bool
    final: int
    vision: int
    total: int

    def stage_parameters(self, first: int, last: int, stage: int, stages: int, tp: int, ep_tp: int) -> float:
        """Parameters one rank of ``stage`` (0-based, of ``stages``) holds for blocks ``first..last-1``, TP ``tp``
        and experts divided by ``ep_tp`` (= EP x expert-TP)."""
        n = (sum(self.tp_per_block[first:last]) / tp + sum(self.replicated_per_block[first:last])
             + sum(self.expert_per_block[first:last]) / ep_tp)
        if stage == 0:
            n += self.vocab_embedding / tp + self.other_embedding + self.vision
        if stage == stages - 1:
            n += self.final + (self.head / tp if (not self.tied or stages > 1) else 0.0)
        return n

    @property
    def uniform_blocks(self) -> bool:
        """True when every block holds the same parameters of each kind (not so for DeepSeek's dense first layers)."""
        return all(len(set(kind)) <= 1 for kind in (self.tp_per_block, self.replicated_per_block, self.expert_per_block))

    def block_parameters(self, block: int, tp: int, ep_tp: int) -> float:
        """Parameters of one block on one rank."""
        return self.tp_per_block[block] / tp + self.replicated_per_block[block] + self.expert_per_block[block] / ep_tp


_LARGEST: dict[tuple[int, int, int, int, int], tuple[ParameterSplit, float]] = {}


def largest_block(split: ParameterSplit, first: int, last: int, tp: int, ep_tp: int) -> float:
    """The most parameters one rank holds of any of blocks ``first .. last - 1`` (0 for none), remembered per split
    (kept beside its id, so the id is not reused while the entry lives) and range: the layout search asks for the
    same stages again and again."""
    key = (id(split), first, last, tp, ep_tp)
    hit = _LARGEST.get(key)
    if hit is not None and hit[0] is split:
        return hit[1]
    value = max(split.block_parameters(i, tp, ep_tp) for i in range(first, last)) if last > first else 0.0
    if len(_LARGEST) >= 4096:
        _LARGEST.clear()
    _LARGEST[key] = (split, value)
    return value


def _is_router(arch: Architecture, g: TensorGroup) -> bool:
    return bool(arch.num_experts) and g.role == "mlp" and not g.expert and g.shape[0] == arch.num_experts


def _blocks_of(arch: Architecture, g: TensorGroup) -> list[float]:
    """How many parameters of ``g`` each block holds: spread over all blocks, the first dense-MLP blocks
    (DeepSeek's ``first_k_dense_replace``) or the MoE blocks after them."""
    L, dense = arch.num_layers, min(arch.dense_mlp_layers or 0, arch.num_layers)
    out = [0.0] * L
    moe_like = g.expert or _is_router(arch, g)
    if g.count % L == 0 and not (dense and moe_like):
        return [float(g.parameters // L)] * L
    if dense and moe_like and g.count % (L - dense) == 0:
        for i in range(dense, L):
            out[i] = g.parameters / (L - dense)
        return out
    if dense and g.role == "mlp" and g.count % dense == 0:
        for i in range(dense):
            out[i] = g.parameters / dense
        return out
    return [g.parameters / L] * L


def parameter_split(arch: Architecture) -> ParameterSplit:
    """Split ``arch``'s parameters into TP-sharded, replicated and expert parts per block, plus embeddings, head,
    final norm and (frozen, first-stage) vision tower. ``total`` equals ``arch.total_parameters``."""
    L = arch.num_layers
    tp, rep, exp, lin = [0.0] * L, [0.0] * L, [0.0] * L, [0.0] * L
    vocab_emb = other_emb = head = final = 0
    for g in arch.tensors:
        if g.role == "embeddings":
            if g.shape and g.shape[0] == arch.vocab_size:
                vocab_emb += g.parameters
            else:
                other_emb += g.parameters
            continue
        if g.role in ("lm_head", "head"):
            head += g.parameters
            continue
        if g.role == "norms" and g.count % L and g.count < L:
            final += g.parameters  # the final norm (count 1)
            continue
        per_block = _blocks_of(arch, g)
        target = rep if (g.role == "norms" or _is_router(arch, g)) else exp if g.expert else tp
        for i, n in enumerate(per_block):
            target[i] += n
            if g.linear and target is not rep:
                lin[i] += n
    tied = head == 0
    if tied:
        head = arch.vocab_size * arch.hidden_size
    return ParameterSplit(
        tp_per_block=tuple(tp), replicated_per_block=tuple(rep), expert_per_block=tuple(exp),
        linear_per_block=tuple(lin), vocab_embedding=vocab_emb, other_embedding=other_emb, head=head, tied=tied,
        final=final, vision=arch.vision_parameters, total=arch.total_parameters,
    )
