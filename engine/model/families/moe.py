"""Mixtures of experts: mixtral, phimoe, qwen2_moe, qwen3_moe, olmoe, deepseek_v2, deepseek_v3.

Expert modules are named as in transformers 4.x, where each expert is its own set of ``nn.Linear``
modules (``block_sparse_moe.experts.N.w1``, ``mlp.experts.N.gate_proj``): the names PEFT's
``target_modules`` match. transformers 5 fuses each layer's experts into 3-D tensors of the same total
size, so the counts hold for both.

Blocks may differ: Qwen-MoE's ``mlp_only_layers`` / ``decoder_sparse_step`` and DeepSeek's
``first_k_dense_replace`` give some blocks a dense MLP. Their linears carry ``layers`` (how many blocks
hold them), and every total is a sum over tensors, so nothing assumes identical blocks.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from engine.model.architecture import Architecture, LinearLayer, TensorGroup
from engine.model.config_fields import MAX_SIZE, read_flag, read_value, read_size
from engine.errors import ConfigError
from engine.model.families.common import Dims, dims, embeddings_and_head, linear, linear_tensors, make, norm, tensor, tied
from engine.model.families.llama import Family, attention_linears, block_norms, common_fields, gated_mlp

_MIXTRAL = Family(tie_default=False, qkv_bias=False, o_bias=False)
# PhiMoE: LayerNorm with bias, q/k/v/o biases from 'attention_bias', an lm_head bias from 'lm_head_bias'.
_PHIMOE = Family(tie_default=False, norm="layernorm", norm_params="weight_bias")


def _block_sparse(h: int, inter: int, experts: int, layers: int | None = None) -> list[LinearLayer]:
    """Mixtral/PhiMoE ``block_sparse_moe``: router ``gate`` and experts w1 (gate), w3 (up), w2 (down)."""
    return [
        linear("block_sparse_moe.gate", h, experts, layers=layers),
        linear("block_sparse_moe.experts.w1", h, inter, count=experts, layers=layers),
        linear("block_sparse_moe.experts.w2", inter, h, count=experts, layers=layers),
        linear("block_sparse_moe.experts.w3", h, inter, count=experts, layers=layers),
    ]


def _routed(h: int, inter: int, experts: int, layers: int, router: bool = True, bias: bool = False) -> list[LinearLayer]:
    """``mlp.gate`` router (an ``nn.Linear`` unless DeepSeek's) and ``mlp.experts.N.{gate,up,down}_proj``."""
    gate = [linear("mlp.gate", h, experts, layers=layers)] if router else []
    return gate + gated_mlp("mlp.experts", h, inter, bias, count=experts, layers=layers)


def _mixtral_like(config: dict[str, Any], model_type: str) -> Architecture:
    """Mixtral and PhiMoE: every block's MLP is ``block_sparse_moe`` with ``num_local_experts``."""
    fam = _MIXTRAL if model_type == "mixtral" else _PHIMOE
    d = dims(config)
    inter = read_size(config, "intermediate_size")
    experts, top_k = read_size(config, "num_local_experts"), read_size(config, "num_experts_per_tok")
    tie = tied(config, fam.tie_default)
    linears = attention_linears(config, fam, d) + _block_sparse(d.hidden, inter, experts)
    head_bias = model_type == "phimoe" and read_flag(config, "lm_head_bias", False)
    tensors = linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, d.hidden, tie, head_bias) + block_norms(fam, d)
    return make(model_type, config, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears, mlp="gated",
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # Mixtral's window: not modelled
                num_experts=experts, experts_per_token=top_k, **common_fields(config, fam, model_type))


def _sparse_layers(config: dict[str, Any], layers: int, experts: int) -> int:
    """Blocks with an MoE MLP in Qwen2-MoE/Qwen3-MoE: ``layer_idx not in mlp_only_layers and
    (layer_idx + 1) % decoder_sparse_step == 0`` (Qwen2MoeDecoderLayer)."""
    step = read_size(config, "decoder_sparse_step", default=1)
    only_dense = config.get("mlp_only_layers") or []
    if not isinstance(only_dense, list):
        raise ConfigError("config.json field 'mlp_only_layers' must be a list of layer indices")
    if not experts:
        return 0
    return sum(1 for i in range(layers) if i not in only_dense and (i + 1) % step == 0)


_QWEN_MOE = {
    # Qwen2-MoE: q/k/v biases from 'qkv_bias' (default True; 4.x hard-codes True), no o_proj bias.
    "qwen2_moe": Family(tie_default=False, qkv_bias=True, o_bias=False),
    "qwen3_moe": Family(tie_default=False, qk_norm="head"),
    # OLMoE: RMSNorm q_norm/k_norm over all heads, every block an MoE, no shared expert.
    "olmoe": Family(tie_default=False, qk_norm="full"),
}


def _qwen_moe(config: dict[str, Any], model_type: str) -> Architecture:
    """Qwen2-MoE (routed + gated shared expert), Qwen3-MoE and OLMoE (routed only)."""
    fam = _QWEN_MOE[model_type]
    if model_type == "qwen2_moe":
        fam = dataclasses.replace(fam, qkv_bias=read_flag(config, "qkv_bias", True))
    d = dims(config)
    dense_inter = read_size(config, "intermediate_size")
    experts = read_size(config, "num_experts", "num_local_experts")
    top_k = read_size(config, "num_experts_per_tok")
    # OLMoE's experts use intermediate_size; the Qwen MoEs have a separate moe_intermediate_size.
    expert_inter = dense_inter if model_type == "olmoe" else read_size(config, "moe_intermediate_size")
    sparse = d.layers if model_type == "olmoe" else _sparse_layers(config, d.layers, experts)
    dense = d.layers - sparse
    linears = attention_linears(config, fam, d)
    if dense:
        linears += gated_mlp("mlp", d.hidden, dense_inter, layers=dense)
    shared = 0
    if sparse:
        linears += _routed(d.hidden, expert_inter, experts, sparse)
        if model_type == "qwen2_moe":
            shared = read_size(config, "shared_expert_intermediate_size")
            linears += gated_mlp("mlp.shared_expert", d.hidden, shared, layers=sparse)
            linears.append(linear("mlp.shared_expert_gate", d.hidden, 1, layers=sparse))
    tie = tied(config, fam.tie_default)
    tensors = linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, d.hidden, tie) + block_norms(fam, d)
    return make(model_type, config, d, intermediate=expert_inter, tie=tie, tensors=tensors, linears=linears, mlp="gated",
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,
                num_experts=experts if sparse else 0, experts_per_token=top_k if sparse else 0,
                num_shared_experts=1 if shared else 0, shared_expert_intermediate_size=shared,
                dense_mlp_layers=dense, dense_intermediate_size=dense_inter if dense else 0,
                **common_fields(config, fam, model_type))


# --------------------------------------------------------------------------------------------------
# DeepSeek V2/V3: multi-head latent attention (MLA) and shared + routed experts


def _count(config: dict[str, Any], key: str, default: int) -> int:
    """A non-negative integer (0 allowed: no dense layers, no shared experts), at most :data:`MAX_SIZE` (a 19-digit
    ``n_shared_experts`` is a typo, not a model of 10^27 parameters)."""
    value = read_value(config, key, default=default, required=False)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"config.json field '{key}' must be a non-negative integer, got {value!r}")
    if value > MAX_SIZE:
        raise ConfigError(f"config.json field '{key}' is {value:,}, implausibly large (at most {MAX_SIZE:,})")
    return value


def _mla_linears(config: dict[str, Any], d: Dims) -> tuple[list[LinearLayer], list[TensorGroup], dict[str, int]]:
    """MLA projections (DeepseekV2Attention/DeepseekV3Attention), their low-rank norms, and sizes.

    Queries: ``q_proj`` (h -> heads x (nope + rope)) when ``q_lora_rank`` is null, else ``q_a_proj``
    (h -> q_lora_rank), ``q_a_layernorm``, ``q_b_proj``. Keys/values: ``kv_a_proj_with_mqa`` (h ->
    kv_lora_rank + rope), ``kv_a_layernorm``, ``kv_b_proj`` (kv_lora_rank -> heads x (nope + v)).
    Output: ``o_proj`` (heads x v -> h). Biases on q_a, kv_a and o follow ``attention_bias``.
    """
    h, heads = d.hidden, d.heads
    nope, rope = read_size(config, "qk_nope_head_dim", default=128), read_size(config, "qk_rope_head_dim", default=64)
    v_dim, kv_rank = read_size(config, "v_head_dim", default=128), read_size(config, "kv_lora_rank", default=512)
    q_rank = config.get("q_lora_rank", 1536)  # DeepseekV2/V3Config default 1536; null: no query compression
    bias = read_flag(config, "attention_bias", False)
    qk = nope + rope
    if q_rank is None:
        q = [linear("self_attn.q_proj", h, heads * qk)]
    else:
        q_rank = read_size(config, "q_lora_rank", default=1536)
        q = [linear("self_attn.q_a_proj", h, q_rank, bias), linear("self_attn.q_b_proj", q_rank, heads * qk)]
    linears = q + [
        linear("self_attn.kv_a_proj_with_mqa", h, kv_rank + rope, bias),
        linear("self_attn.kv_b_proj", kv_rank, heads * (nope + v_dim)),
        linear("self_attn.o_proj", heads * v_dim, h, bias),
    ]
    norms = norm("self_attn.kv_a_layernorm", kv_rank, d.layers, "weight")
    if q_rank is not None:
        norms += norm("self_attn.q_a_layernorm", q_rank, d.layers, "weight")
    sizes = dict(kv_lora_rank=kv_rank, q_lora_rank=q_rank or 0, qk_rope_head_dim=rope, v_head_dim=v_dim, qk=qk)
    return linears, norms, sizes


def _deepseek_moe(config: dict[str, Any], d: Dims, model_type: str) -> tuple[list[LinearLayer], list[TensorGroup], dict[str, Any]]:
    """Dense MLPs of the first ``first_k_dense_replace`` blocks, then in every other block: a router
    (``mlp.gate``, a plain parameter of experts x hidden, not an ``nn.Linear``), ``n_routed_experts``
    routed experts and one gated MLP for the ``n_shared_experts`` shared experts (their widths summed).
    DeepSeek-V3's ``e_score_correction_bias`` (experts per MoE block) is a buffer in transformers' native
    DeepseekV3TopkRouter (4.5x and 5.x), so not counted; DeepSeek's own remote code
    (``trust_remote_code``, MoEGate) makes it an ``nn.Parameter``, which adds 58 x 256 = 14,848 for V3."""
    default_dense = 3 if model_type == "deepseek_v3" else 0
    first_dense = min(_count(config, "first_k_dense_replace", default=default_dense), d.layers)
    sparse = d.layers - first_dense
    experts = read_size(config, "n_routed_experts", default=256 if model_type == "deepseek_v3" else 64)
    top_k = read_size(config, "num_experts_per_tok", default=8 if model_type == "deepseek_v3" else None)
    shared_n = _count(config, "n_shared_experts", default=1 if model_type == "deepseek_v3" else 2)
    dense_inter = read_size(config, "intermediate_size")
    expert_inter = read_size(config, "moe_intermediate_size")
    bias = model_type == "deepseek_v2" and read_flag(config, "mlp_bias", False)
    linears = gated_mlp("mlp", d.hidden, dense_inter, bias, layers=first_dense) if first_dense else []
    routers: list[TensorGroup] = []
    if sparse:
        linears += _routed(d.hidden, expert_inter, experts, sparse, router=False, bias=bias)
        if shared_n:
            linears += gated_mlp("mlp.shared_experts", d.hidden, expert_inter * shared_n, bias, layers=sparse)
        routers.append(tensor("mlp.gate", (experts, d.hidden), "mlp", count=sparse))
    fields = dict(num_experts=experts if sparse else 0, experts_per_token=top_k if sparse else 0,
                  num_shared_experts=shared_n, shared_expert_intermediate_size=expert_inter * shared_n,
                  dense_mlp_layers=first_dense, dense_intermediate_size=dense_inter if first_dense else 0,
                  expert_inter=expert_inter)
    return linears, routers, fields


def _deepseek(config: dict[str, Any], model_type: str) -> Architecture:
    """DeepSeek-V2 / V3 (``DeepseekV2ForCausalLM``/``DeepseekV3ForCausalLM``): MLA attention, RMSNorm,
    MoE blocks after the dense ones. The checkpoint's multi-token-prediction layers
    (``num_nextn_predict_layers``) are not loaded by transformers and not counted."""
    d = dims(config)
    attn, mla_norms, mla = _mla_linears(config, d)
    mlp, routers, moe = _deepseek_moe(config, d, model_type)
    linears = attn + mlp
    tie = tied(config, False)
    fam = Family(tie_default=False)
    tensors = (linear_tensors(linears, d.layers) + routers + embeddings_and_head(d.vocab, d.hidden, tie)
               + block_norms(fam, d) + mla_norms)
    # Kernels see keys and values per query head after kv_b_proj: head_dim is the q/k width (nope + rope).
    d = dataclasses.replace(d, kv_heads=d.heads, head_dim=mla.pop("qk"))
    return make(model_type, config, d, intermediate=moe.pop("expert_inter"), tie=tie, tensors=tensors, linears=linears,
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # MLA's q and kv_a projections apart
                mlp="gated", **moe, **mla, **common_fields(config, fam, model_type))


BUILDERS = {
    "mixtral": _mixtral_like,
    "phimoe": _mixtral_like,
    "qwen2_moe": _qwen_moe,
    "qwen3_moe": _qwen_moe,
    "olmoe": _qwen_moe,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
}
