"""Which scaled-dot-product-attention kernel a CUDA GPU would run, decided without torch.

The rules follow PyTorch 2.x's selection for CUDA (``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``,
priority flash > memory-efficient > math; cuDNN attention is not in the default order):

- flash: fp16/bf16 inputs, no explicit ``attn_mask``, head dim <= 256 and a multiple of 8;
  grouped-query attention (``enable_gqa``) is allowed;
- memory-efficient: fp32/fp16/bf16, a mask is allowed, head dim a multiple of 8 (4 for fp32),
  but no grouped-query attention (key/value heads must equal query heads);
- math otherwise, which materialises the ``seq x seq`` scores (so fp32 with GQA does, even on a GPU).
"""

from __future__ import annotations

FLASH = "flash"
MEMORY_EFFICIENT = "memory_efficient"
MATH = "math"
EAGER = "eager"

_HALF = ("float16", "bfloat16")


def choose_kernel(dtype: str, head_dim: int, has_mask: bool, q_heads: int, kv_heads: int) -> str:
    """The SDPA kernel for inputs of ``dtype`` (``"float32"``, ``"bfloat16"``, ``"float16"``).

    ``has_mask``: an explicit ``attn_mask`` is passed (``is_causal`` alone is not a mask);
    ``q_heads``/``kv_heads``: heads of the query and of the key/value tensors given to the kernel
    (different only when grouped-query attention is left to the kernel).
    """
    if dtype in _HALF and not has_mask and head_dim <= 256 and head_dim % 8 == 0:
        return FLASH
    align = 4 if dtype == "float32" else 8
    if dtype in _HALF + ("float32",) and q_heads == kv_heads and head_dim % align == 0:
        return MEMORY_EFFICIENT
    return MATH
