"""Qwen (v1): ``QWenLMHeadModel`` from the remote code of Qwen/Qwen-1_8B, Qwen-7B, Qwen-14B and their -Chat
variants (``model_type`` ``"qwen"``, ``trust_remote_code=True``; Qwen1.5 and later are ``qwen2``).

Shapes follow ``modeling_qwen.py`` of those repos:

- ``transformer.wte``: Embedding(vocab, hidden); ``lm_head``: Linear(hidden, vocab, bias=False), never tied;
- per block ``QWenBlock``: ``ln_1`` and ``ln_2`` RMSNorm(hidden) (weight only);
  ``attn.c_attn`` = Linear(hidden, 3 x projection_size, bias=True) (fused q, k, v, always with bias),
  ``attn.c_proj`` = Linear(projection_size, hidden, bias=not no_bias), where projection_size =
  kv_channels x num_attention_heads (multi-head attention: every head has its own k and v);
  ``mlp.w1``, ``mlp.w2`` = Linear(hidden, intermediate_size / 2, bias=not no_bias) and ``mlp.c_proj`` =
  Linear(intermediate_size / 2, hidden, bias=not no_bias): the config's ``intermediate_size`` counts both
  halves of the gated MLP, whose output is ``c_proj(w1(x) * silu(w2(x)))``;
- ``transformer.ln_f``: RMSNorm(hidden). Rotary positions have no parameters. With flash-attn installed
  (``use_flash_attn="auto"``), ``_import_flash_attn`` binds ``apply_rotary_emb_func`` from
  ``flash_attn.layers.rotary`` and ``apply_rotary_pos_emb`` takes that fused kernel for CUDA tensors
  (``flash_rotary``; the RMSNorm stays PyTorch's unless flash-attn's separately built ``csrc/layer_norm`` extension
  is installed, which its wheel does not ship).

Check: Qwen-7B counts 7,721,324,544 parameters, the figure published in parameter tables of Qwen-7B
(``Qwen-7B | 7.72B | 7721324544``) and printed by applications that load it ("with 7721324544 (7.7B)
parameters"); tests/test_validation.py asserts it.
"""

from __future__ import annotations

from typing import Any

from engine.model.architecture import Architecture
from engine.model.config_fields import read_flag, read_size
from engine.errors import ConfigError
from engine.model.families.common import Dims, dims, dropout, embeddings_and_head, linear, linear_tensors, make, norm


def qwen(config: dict[str, Any], model_type: str) -> Architecture:
    """Qwen v1 (``QWenLMHeadModel``): see the module docstring for the tensors.

    Raises:
        ConfigError: a missing or invalid size, or an odd ``intermediate_size`` (it must hold two halves).
    """
    d = dims(config, kv_heads=(), head_dim=("kv_channels",))
    d = Dims(hidden=d.hidden, layers=d.layers, heads=d.heads, kv_heads=d.heads, head_dim=d.head_dim, vocab=d.vocab)
    full = read_size(config, "intermediate_size")
    if full % 2:
        raise ConfigError(f"intermediate_size ({full}) must be even: Qwen's w1 and w2 take half of it each")
    inter = full // 2
    bias = not read_flag(config, "no_bias", True)
    h, proj = d.hidden, d.heads * d.head_dim
    linears = [
        linear("attn.c_attn", h, 3 * proj, True, role="attention"),
        linear("attn.c_proj", proj, h, bias, role="attention"),
        linear("mlp.w1", h, inter, bias),
        linear("mlp.w2", h, inter, bias),
        linear("mlp.c_proj", inter, h, bias),
    ]
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, h, tied=False)
               + norm("layer_norms", h, 2 * d.layers, "weight") + norm("ln_f", h, 1, "weight"))
    return make(model_type, config, d, intermediate=inter, tie=False, tensors=tensors, linears=linears,
                fused_qkv=True, fused_gate_up=False, sliding_window_layers=0,  # c_attn; w1 and w2 apart
                max_position_embeddings=config.get("max_position_embeddings") or config.get("seq_length"),
                norm="rmsnorm", norms_per_layer=2, mlp="gated", activation="silu", positional="rope", flash_rotary=True,
                attention_dropout=dropout(config, "attn_dropout_prob"), hidden_dropout=dropout(config, "emb_dropout_prob"))


BUILDERS = {"qwen": qwen}
