"""Megatron-LM's own memory estimate, ``theoretical_memory_usage``, for the same model and layout (for comparison).

Re-derived from ``megatron/training/theoretical_memory_usage.py`` of NVIDIA/Megatron-LM at commit
``d98e8a64ddf34856e74b24714e3bedb2f5a39553`` (the file last changed in ``1bcb3b9e``, "Fix LatentMoE theoretical
memory estimate (#5145)"); the maths, not the code. It reports the first pipeline stage (assumed the most loaded),
in bytes (the file prints MiB and calls them MB):

- weights and optimizer: parameters split into TP-sharded (attention, dense and shared-expert MLPs, embeddings /
  TP), replicated (norms, router) and expert-sharded (routed experts / (expert-TP x EP)); bytes per parameter 18
  (bf16 weight 2 + fp32 gradient 4 + fp32 master 4 + Adam 8) or, with ``--use-distributed-optimizer``, 6 + 12 / DP
  (6 + 12 / expert-DP for the experts);
- activations, only with ``--sequence-parallel`` and ``--recompute-granularity selective``: s b h (18 + 4 f / h)
  x L (1F1B stage 0 holds L layers' worth) + 8 s b PP + s b h PP, times 1 + (PP - 1)/(PP v) when interleaved or
  min(1, m / PP), + 4 s b h (1 + V / h) when PP = 1, all / TP (Korthikanti et al. 2022, Table 2);
- otherwise the fallback branch: s b h (10 + 24 / TP) per layer, the same extra terms, + 2 (s b V / TP + s b h)
  when PP = 1, times 1.05.

Known differences from the runtime (why our estimate differs): it ignores CP (activations should be / CP) and
shards the distributed optimizer over DP, not DP x CP; it counts SwiGLU's MLP as a GeLU one (one f-wide tensor
fewer); it leaves out the CUDA context, NCCL and allocator reserve, the logits of the last stage (PP > 1), the
attention scores without flash/selective, full recompute (the fallback assumes selective) and FP8 copies.
Its distributed optimizer is ZeRO-1: a layout with ZeRO-2 / ZeRO-3 (FSDP) also shards the gradients / the weights,
which the formula keeps whole. Where the two figures are more than 2x apart, :meth:`MegatronEstimate.apart` says why in
words (the Scale out page's caption).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
MEGATRON_FILE = "megatron/training/theoretical_memory_usage.py"


APART = 2.0
"""How far apart (either way) the formula and our estimate are before the page says why (:meth:`MegatronEstimate.apart`)."""


class MegatronEstimate(BaseModel):
    """Megatron-LM's estimate (bytes, first pipeline stage) and what it was computed from."""

    model_config = ConfigDict(frozen=True)

    weight_and_optimizer_bytes: float
    activation_bytes: float | None
    branch: str
    note: str

    applies_to: str = "full training"
    """What the formula describes: Megatron-LM trains every parameter (16-bit weights, fp32 gradients and Adam),
    so for a PEFT run it is the full-training figure of the same model and layout, not an estimate of that run."""

    counts_more: tuple[str, ...] = ()
    """What the formula counts that this layout's run does not hold (:func:`departures`): why it can be far above
    our estimate."""

    @property
    def total_bytes(self) -> float:
        return self.weight_and_optimizer_bytes + (self.activation_bytes or 0.0)

    def caveat(self, method: str) -> str | None:
        """The sentence to show beside it for a run of ``method`` ("full" or a PEFT method's name), None for full."""
        if method == "full":
            return None
        return (f"Megatron-LM's formula is for full training (every parameter's weights, gradients and Adam states); "
                f"this run trains {method} adapters, so the formula is the full-training figure, not this run's")

    def apart(self, ours_bytes: float, method: str, factor: float = APART) -> str | None:
        """Why the formula and our estimate of the same first stage (``ours_bytes`` allocated) differ, when one is more
        than ``factor`` times the other; None when they are closer. The reasons are this run's departures from what
        the formula assumes (:attr:`counts_more`, the full-training :meth:`caveat`), or what it leaves out."""
        if ours_bytes <= 0 or 1 / factor <= self.total_bytes / ours_bytes <= factor:
            return None
        ratio = self.total_bytes / ours_bytes
        if ratio > factor:
            full = None if method == "full" else (f"it counts full training (every parameter's weights, gradients "
                                                  f"and Adam states), while this run trains {method} adapters")
            reasons = [r for r in (full, *self.counts_more) if r]
            return (f"Megatron-LM's formula is {ratio:.1f}x our estimate of the same first stage: "
                    + ("; ".join(reasons) if reasons else "no assumption of the formula that this run departs from "
                       "explains it"))
        return (f"Megatron-LM's formula is {1 / ratio:.1f}x below our estimate of the same first stage: it leaves out "
                "what the runtime adds beside its weights, optimizer and Korthikanti activations (the logits and loss, "
                "the attention scores without flash attention, FP8 copies, the communication buffers)")


def departures(*, zero: int, shards: int, recompute: str, context_parallel: int) -> tuple[str, ...]:
    """What the formula counts that a run with this ZeRO stage (``shards``: the ranks it divides over), recompute
    (``none``, ``selective``, ``selective_op``, ``full``) and CP does not hold, in words
    (:attr:`MegatronEstimate.counts_more`)."""
    out = []
    if zero >= 2 and shards > 1:
        sharded = "the 16-bit weights and the gradients" if zero == 3 else "the gradients"
        out.append(f"its distributed optimizer (ZeRO-1) shards only the fp32 master weights and Adam states (12 B per "
                   f"parameter) and keeps every rank's 16-bit weights and fp32 gradients whole (6 B per parameter of "
                   f"the stage), while this layout's ZeRO-{zero} also shards {sharded} over its {shards} "
                   "data-parallel ranks")
    if recompute == "full":
        out.append("it counts every layer's activations as selective recompute keeps them, while full recompute keeps "
                   "only each layer's input")
    if context_parallel > 1:
        out.append(f"it ignores context parallelism: its activations are not divided by CP {context_parallel}")
    return tuple(out)


def padded_vocab(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Megatron pads the vocabulary to a multiple of ``make_vocab_size_divisible_by`` x TP (128 by default)."""
    m = divisible_by * tp
    return -(-vocab // m) * m


def weight_and_optimizer_bytes(*, h: int, layers: int, heads: int, kv_heads: int, kv_channels: int, ffn: int,
                               vocab: int, swiglu: bool, rmsnorm: bool, untied: bool, tp: int, pp: int, dp: int,
                               distributed_optimizer: bool, experts: int = 0, moe_ffn: int = 0, shared_ffn: int = 0,
                               dense_layers: int = 0, ep: int = 1, etp: int = 1, world: int | None = None) -> float:
    """Weights + gradients + optimizer of the most loaded (first) stage, in bytes (see the module docstring)."""
    glu = 1.5 if swiglu else 1.0
    norm = 1 if rmsnorm else 2
    attn = 2 * h * heads * kv_channels + 2 * h * kv_heads * kv_channels
    mlp = 2 * h * ffn * glu
    norms = 2 * h * norm
    moe_layers = layers - dense_layers if experts else 0
    dense = layers - moe_layers
    shared = 2 * h * shared_ffn * glu
    routed = 2 * h * moe_ffn * experts * glu
    router = h * experts
    tp_sharded = (attn + mlp) * dense + (attn + shared) * moe_layers
    replicated = norms * dense + (norms + router) * moe_layers + norm * h
    expert_sharded = routed * moe_layers
    emb = h * vocab
    n_tp = (tp_sharded / pp + emb) / tp
    if untied and pp == 1:
        n_tp += emb / tp
    n_rep = replicated / pp
    n_ep = expert_sharded / pp / (etp * ep)
    world = world if world is not None else tp * pp * dp
    edp = world // (etp * ep * pp)

    def beta(d: int) -> float:
        return 6 + 12 / d if distributed_optimizer else 18

    return (n_tp + n_rep) * beta(dp) + n_ep * beta(max(edp, 1))


def activation_bytes(*, s: int, b: int, h: int, ffn: int, layers: int, vocab: int, tp: int, pp: int,
                     sequence_parallel: bool, selective: bool, virtual: int | None = None,
                     micro_batches: int | None = None) -> tuple[float, str]:
    """Activations of the first stage, in bytes, and which branch of the file produced them."""
    if sequence_parallel and selective:
        act = s * b * h * (18 + 4 * ffn / h) * layers + 8 * s * b * pp + s * b * h * pp
        branch = "sequence parallel + selective recompute (Korthikanti Table 2)"
    else:
        act = s * b * h * (10 + 24 / tp) * layers + 8 * s * b * pp + s * b * h * pp
        branch = "fallback (no SP or no selective recompute): sbh(10 + 24/t) x 1.05"
    if virtual is not None and virtual > 1:
        act *= 1 + (pp - 1) / (pp * virtual)
    elif pp > 1 and micro_batches is not None:
        act *= min(1, micro_batches / pp)
    if sequence_parallel and selective:
        if pp == 1:
            act += s * b * h * 4 * (1 + vocab / h)
        return act / tp, branch
    if pp == 1:
        act += 2 * (s * b * vocab / tp + s * b * h)
    return act * 1.05, branch


def megatron_estimate(arch: Architecture, *, seq_len: int, micro_batch: int, tp: int, pp: int, dp: int,
                      sequence_parallel: bool, selective: bool, distributed_optimizer: bool,
                      virtual: int | None = None, micro_batches: int | None = None, ep: int = 1, etp: int = 1,
                      cp: int = 1) -> MegatronEstimate:
    """Megatron-LM's ``theoretical_memory_usage`` for ``arch`` under this layout (first stage, bytes).

    ``cp`` only enters the world size (the file ignores CP otherwise). The vocabulary is padded as Megatron pads it.
    """
    vocab = padded_vocab(arch.vocab_size, tp)
    # Megatron's ffn_hidden_size is the dense MLP's width; an MoE model's expert width is moe_ffn_hidden_size.
    ffn = (arch.dense_intermediate_size or arch.intermediate_size) if arch.num_experts else arch.intermediate_size
    world = tp * pp * dp * cp
    wo = weight_and_optimizer_bytes(
        h=arch.hidden_size, layers=arch.num_layers, heads=arch.num_attention_heads, kv_heads=arch.num_key_value_heads,
        kv_channels=arch.head_dim, ffn=ffn,
        vocab=vocab, swiglu=arch.mlp == "gated", rmsnorm=arch.norm != "layernorm", untied=not arch.tie_word_embeddings,
        tp=tp, pp=pp, dp=dp, distributed_optimizer=distributed_optimizer, experts=arch.num_experts,
        moe_ffn=arch.intermediate_size if arch.num_experts else 0,
        shared_ffn=arch.shared_expert_intermediate_size or 0, dense_layers=arch.dense_mlp_layers or 0, ep=ep, etp=etp,
        world=world)
    act, branch = activation_bytes(s=seq_len, b=micro_batch, h=arch.hidden_size, ffn=ffn, layers=arch.num_layers,
                                   vocab=vocab, tp=tp, pp=pp, sequence_parallel=sequence_parallel, selective=selective,
                                   virtual=virtual, micro_batches=micro_batches)
    return MegatronEstimate(
        weight_and_optimizer_bytes=wo, activation_bytes=act, branch=branch,
        note=f"Megatron-LM {MEGATRON_FILE} @ {MEGATRON_COMMIT[:8]}: first stage, no CUDA context/NCCL/allocator reserve"
             + ("; ignores CP (activations not / CP)" if cp > 1 else ""))
