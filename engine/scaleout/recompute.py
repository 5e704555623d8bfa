"""torchtitan's op-level selective activation checkpointing (``Recompute.SELECTIVE_OP``): what a block keeps.

Source: torchtitan ``torchtitan/parallelisms/parallelize_llama.py`` at 9dec370 (2024-12-26, the version of its
``benchmarks/llama3_h100_202412_torchtitan.md``; unchanged in ``torchtitan/models/llama3/parallelize_llama.py`` at
e7c0cae, 2025-06-13, which drops ``aten.abs`` from the list). With ``activation_checkpoint.mode = "selective"`` and
``selective_ac_option = "op"`` (the default of ``train_configs/llama3_8b.toml`` at both commits) every transformer
block is wrapped by ``checkpoint_wrapper`` (non-reentrant ``torch.utils.checkpoint``) with a policy from
``torch.utils.checkpoint.create_selective_checkpoint_contexts``: an op whose function is in ``_save_list`` is
``MUST_SAVE`` (its output is cached through backward), everything else ``PREFER_RECOMPUTE`` (freed, rerun in
backward). ``_save_list`` holds ``aten.mm``, ``aten._scaled_dot_product_flash_attention`` /
``_efficient_attention``, ``_c10d_functional.reduce_scatter_tensor`` and ``aten.abs`` / ``aten.max`` (scalars), and
the policy saves an ``aten.mm`` only when the block's running count of mm calls is odd ("every second mm" is
recomputed). So a block keeps, per token:

- its input (the checkpoint keeps the arguments it reruns the block on), / TP with sequence parallelism;
- the outputs of the 1st, 3rd, 5th, ... matmul in call order. Llama: wq (1), wk (2), wv (3), wo (4), w1 (5),
  w3 (6), w2 (7), so wq, wv, w1 and w2 are kept and wk, wo, w3 recomputed. Column-parallel outputs are / TP;
  a row-parallel matmul (attention and MLP output) yields the full-width partial sum on every TP rank;
- the flash / memory-efficient attention output and its fp32 log-sum-exp per head (/ TP); the math kernel is
  decomposed into ops outside the list and is recomputed;
- with TP + SP, the reduce-scatter output of each row-parallel linear, h / TP.

Everything else (norms, RoPE, SiLU, products, recomputed matmuls) is rerun in backward one block at a time, so
the block's full saved tensors exist again transiently while its backward runs. Float8 training keeps the same
set: torchao's ``Float8Linear`` calls ``torch.mm`` on its float8 tensor subclass, which the checkpoint's dispatch
mode sees as ``aten.mm`` before the subclass turns it into ``_scaled_mm`` (consistent with torchtitan's and torchao's
tables, where float8 leaves peak memory unchanged). Assumptions: the architecture's linears are called in the
order :func:`call_order` gives (attention as listed, then the MLP's input projections before its output
projection); routed experts (one mm per expert visited) keep half of their matmul outputs on average.
"""

from __future__ import annotations

from engine.model.architecture import Architecture, LinearLayer


def call_order(arch: Architecture) -> list[LinearLayer]:
    """The block's dense (non-expert) linears in forward call order: attention as listed (q, k, v, o), then the
    MLP's projections from the hidden state (router, gate, up) before the output projection (down)."""
    dense = [lin for lin in arch.layer_linears if lin.count == 1]
    attn = [lin for lin in dense if lin.role == "attention"]
    mlp = [lin for lin in dense if lin.role == "mlp"]
    mlp_in = [lin for lin in mlp if lin.in_features == arch.hidden_size]
    return attn + mlp_in + [lin for lin in mlp if lin.in_features != arch.hidden_size]


def row_parallel(arch: Architecture, order: list[LinearLayer] | None = None) -> set[str]:
    """The last linear of attention and of the MLP (their output projections): row-parallel under TP (Megatron
    ``RowParallelLinear``); the others are column-parallel (``ColumnParallelLinear``) except the router."""
    order = call_order(arch) if order is None else order
    out = set()
    for role in ("attention", "mlp"):
        mods = [lin.module for lin in order if lin.role == role]
        if mods:
            out.add(mods[-1])
    return out


def _share(arch: Architecture, lin: LinearLayer) -> float:
    """Blocks containing ``lin`` over all blocks (DeepSeek's dense first layers, cross-attention layers)."""
    return lin.blocks(arch.num_layers) / arch.num_layers


def saved_per_token(arch: Architecture, resid_bytes: float, compute_bytes: int, kernel: str, tp: int,
                    sequence_parallel: bool) -> float:
    """Bytes per token one block keeps on one rank under op-level SAC (see the module docstring), before CP.

    ``resid_bytes``: bytes per element of the block input (the residual stream); ``kernel``: the attention kernel
    (:func:`engine.memory.activations.attention_kernel`)."""
    h, c = arch.hidden_size, compute_bytes
    sp = tp if sequence_parallel else 1
    order = call_order(arch)
    rows = row_parallel(arch, order)
    total = resid_bytes * h / sp
    for i, lin in enumerate(order):
        row = lin.module in rows
        if i % 2 == 0:  # the 1st, 3rd, ... mm of the block (count starts at 1)
            replicated = lin.out_features == arch.num_experts and bool(arch.num_experts)  # the router
            width = lin.out_features if (row or replicated) else lin.out_features / tp
            total += c * width * _share(arch, lin)
        if row and tp > 1 and sequence_parallel:
            total += c * h / tp * _share(arch, lin)
    for lin in arch.layer_linears:
        if lin.count > 1 and arch.num_experts:
            total += 0.5 * c * lin.out_features * arch.experts_per_token * _share(arch, lin)
    if kernel in ("flash", "memory_efficient"):
        total += (c * arch.q_out + 4 * arch.num_attention_heads) / tp
    return total


def recompute_flops_per_token(arch: Architecture) -> float:
    """Forward FLOPs per token that op-level SAC reruns in backward: 2 x the weights of the recomputed (even)
    matmuls of every block, half of the routed experts' (element-wise ops not counted; attention is kept)."""
    total = 0.0
    for i, lin in enumerate(call_order(arch)):
        if i % 2 == 1:
            total += 2.0 * lin.in_features * lin.out_features * lin.blocks(arch.num_layers)
    for lin in arch.layer_linears:
        if lin.count > 1 and arch.num_experts:
            total += 0.5 * 2.0 * lin.in_features * lin.out_features * arch.experts_per_token * lin.blocks(arch.num_layers)
    return total


def torchtitan_layer_sac_layers(stage_layers: int, every: int) -> int:
    """Blocks of a stage torchtitan fully checkpoints with ``selective_ac_option = "k"`` (``every`` = k): every
    k-th block it wraps (``ptd_checkpoint_wrapper._count % k == 0``, parallelize_llama.py at 9dec370), i.e.
    ``stage_layers // k``; use it as ``Layout(recompute="full", recompute_layers=...)``.

    Raises:
        ValueError: ``every`` < 1.
    """
    if every < 1:
        raise ValueError("torchtitan's layer frequency must be a positive integer")
    return stage_layers // every
