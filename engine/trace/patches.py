"""The few changes that make a Hugging Face training step on a fake ``cuda`` device behave as on a GPU.

See ../shared/reference/tracing-notes.md. Each patch is undone by :func:`restore`; the worker process
applies them once and exits, so restoring is for tests that trace in-process.

1. ``torch.autocast("cuda")`` turns itself off when CUDA looks absent: its two availability checks are
   answered "available", so the real CUDA autocast op lists apply (bf16 matmuls, fp32 softmax/loss,
   cached weight casts).
2. ``F.scaled_dot_product_attention`` is replaced by a router that calls the kernel a GPU would choose
   (:mod:`engine.trace.kernels`): on a CPU build the dispatcher would always take the math path. The
   function itself is replaced (not a TorchFunctionMode) because a checkpointed forward is recomputed in
   backward, outside any mode entered around the step.
3. operators with a composite fallback get a (never called) CUDA kernel, see :func:`register_cuda_kernels`.
4. transformers' packed-sequence detection is answered "not packed" (see :func:`patch_packed_sequences`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
import torch.nn.functional as F

from engine.trace import kernels

_ORIGINALS: dict[str, Any] = {}
KERNEL_CALLS: Counter[str] = Counter()
"""Attention kernel -> calls, counted by the router (reset by the worker per trace)."""

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _save(name: str, owner: Any, attr: str) -> None:
    _ORIGINALS.setdefault(name, (owner, attr, getattr(owner, attr)))


def patch_autocast() -> None:
    """Let ``torch.autocast("cuda", dtype=bf16/fp16)`` switch on without a real CUDA runtime."""
    import torch.cuda.amp.common as amp_common

    _save("amp", amp_common, "amp_definitely_not_available")
    _save("bf16", torch.cuda, "is_bf16_supported")
    amp_common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *a, **k: True


def sdpa_router(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """``F.scaled_dot_product_attention`` running the kernel a CUDA GPU would pick.

    flash and memory-efficient call the CUDA operators (``aten._scaled_dot_product_flash_attention``,
    ``aten._scaled_dot_product_efficient_attention``): their fake implementations allocate the outputs
    and the log-sum-exp the real kernels save for backward. Math calls the composite math operator,
    which materialises the scores as the GPU's math path does.
    """
    device = query.device.type
    if torch.is_autocast_enabled(device):
        # SDPA is on autocast's lower-precision list: the autocast wrapper casts the floating inputs, then
        # runs the kernel with autocast off. Replacing the function bypasses that wrapper, so do it here.
        low = torch.get_autocast_dtype(device)
        query, key, value = (t.to(low) for t in (query, key, value))
        if attn_mask is not None and attn_mask.is_floating_point():
            attn_mask = attn_mask.to(low)
        with torch.autocast(device, enabled=False):
            return _route(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    return _route(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)


def _route(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa):
    """Call the kernel :func:`engine.trace.kernels.choose_kernel` picks (inputs already cast)."""
    dtype = _DTYPE_NAMES.get(query.dtype, str(query.dtype))
    q_heads, kv_heads = query.shape[-3], key.shape[-3]
    kernel = kernels.choose_kernel(dtype, query.shape[-1], attn_mask is not None, q_heads,
                                   kv_heads if enable_gqa else q_heads)
    if kernel == kernels.MEMORY_EFFICIENT and kv_heads != q_heads:
        kernel = kernels.MATH
    KERNEL_CALLS[kernel] += 1
    if query.device.type != "cuda":  # real tensors on the CPU (tests): only the math operator exists
        kernel = kernels.MATH
    if kernel == kernels.FLASH:
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
        return out
    if kernel == kernels.MEMORY_EFFICIENT:
        needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, needs_lse, dropout_p, is_causal, scale=scale)[0]
    return torch.ops.aten._scaled_dot_product_attention_math(
        query, key, value, attn_mask, dropout_p, is_causal, None, scale=scale, enable_gqa=enable_gqa)[0]


def patch_sdpa() -> None:
    """Route ``F.scaled_dot_product_attention`` through :func:`sdpa_router`."""
    _save("sdpa", F, "scaled_dot_product_attention")
    F.scaled_dot_product_attention = sdpa_router


def patch_packed_sequences() -> None:
    """Treat every batch as unpacked (one sequence per row), as a collator without packing produces.

    transformers looks at ``position_ids`` for packed sequences when no attention mask is given; on fake
    tensors it cannot read the values and assumes packing, which builds a 4-D mask and rules out flash
    attention. On real tensors of an unpacked batch the check answers "not packed": the same answer.
    """
    import transformers.masking_utils as masking

    _save("packed", masking, "find_packed_sequence_indices")
    masking.find_packed_sequence_indices = lambda position_ids: None


_CUDA_LIB: list[Any] = []


def register_cuda_kernels() -> None:
    """Give CUDA a kernel for the operators that have a CPU kernel and a composite fallback.

    On a CPU build, an operator without a CUDA kernel but with a ``CompositeImplicitAutograd`` one
    (``silu_backward``, ``mish_backward``) is decomposed for ``cuda`` tensors before fake tensors see it,
    so its intermediates would be counted; a CUDA build runs one kernel with one output. Registering a
    CUDA kernel (never called: fake tensors are handled at the Python key first) restores the GPU's
    dispatch.
    """
    if _CUDA_LIB:
        return
    lib = torch.library.Library("aten", "IMPL")
    for name in torch._C._dispatch_get_all_op_names():
        if (name.startswith("aten::") and not torch._C._dispatch_has_kernel_for_dispatch_key(name, "CUDA")
                and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
                and torch._C._dispatch_has_kernel_for_dispatch_key(name, "CompositeImplicitAutograd")):
            lib.impl(name.removeprefix("aten::"), _no_cuda_kernel, "CUDA", with_keyset=False)
    _CUDA_LIB.append(lib)


def _no_cuda_kernel(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("a real CUDA kernel was called on a CPU-only torch build (the tracer expects fake tensors)")


def apply() -> None:
    """Apply every patch (idempotent)."""
    register_cuda_kernels()
    patch_autocast()
    patch_sdpa()
    patch_packed_sequences()


def restore() -> None:
    """Undo every patch."""
    for owner, attr, value in _ORIGINALS.values():
        setattr(owner, attr, value)
    _ORIGINALS.clear()
