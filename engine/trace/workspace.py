"""Memory a CUDA attention kernel allocates inside itself, which no tensor operator shows.

Fake tensors run an operator's meta function, which allocates its outputs only. FlashAttention-2's backward
(``mha_bwd`` in PyTorch's copy, ``aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp``)
also takes transient buffers from the caching allocator, alive only while the kernel runs:

- ``softmax_d``: fp32, (batch, heads, seq_q rounded up to 128);
- ``dq_accum``: fp32, (batch, seq_q rounded to 128, heads, head_dim rounded up to 32 (64 above 128)),
  when the key length exceeds one block (``seq_k > 128`` for head_dim > 64, else 256);
- with grouped-query attention, ``dk_expanded`` and ``dv_expanded`` (batch, seq_k, heads, head_dim) in the
  input dtype, summed into the key/value heads afterwards.

:func:`transient_bytes` returns their sizes so the counter can add them around the operator.
"""

from __future__ import annotations

from typing import Any

import torch


def _round(x: int, m: int) -> int:
    return -(-x // m) * m


def flash_backward_transients(grad_out: torch.Tensor, query: torch.Tensor, key: torch.Tensor) -> list[int]:
    """Bytes of each transient buffer of FlashAttention-2's backward for (batch, heads, seq, head_dim) inputs."""
    b, h, s_q, d = query.shape
    h_k, s_k = key.shape[1], key.shape[2]
    s_q_r = _round(s_q, 128)
    d_r = _round(d, 32 if d <= 128 else 64)
    sizes = [4 * b * h * s_q_r]  # softmax_d
    block = 128 if d > 64 else 256
    if s_k > block:
        sizes.append(4 * b * s_q_r * h * d_r)  # dq_accum
    if h_k != h:
        sizes += [b * s_k * h * d * query.element_size()] * 2  # dk_expanded, dv_expanded
    return sizes


def transient_bytes(func: Any, args: tuple) -> list[int]:
    """Transient buffers (bytes each) of ``func`` called with ``args``; empty for operators without any."""
    if func is torch.ops.aten._scaled_dot_product_flash_attention_backward.default:
        grad_out, query, key = args[0], args[1], args[2]
        return flash_backward_transients(grad_out, query, key)
    return []
