"""Llama-like decoders: RoPE, q/k/v/o projections, a gated (or plain) MLP, one or more norms per block.

Covers llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, phi3, granite, olmo, olmo2, cohere,
stablelm and starcoder2. What differs between them is hard-coded in each ``modeling_<type>.py`` and
captured by :class:`Family`; defaults are those of each ``configuration_<type>.py``. The attention and
MLP pieces are reused by the mixture-of-experts families (:mod:`engine.model.families.moe`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from engine.model.architecture import Architecture, LinearLayer, SdpaMask, TensorGroup
from engine.model.config_fields import read_flag, read_probability, read_size
from engine.model.families.common import (
    Dims,
    NormParams,
    activation,
    dims,
    embeddings_and_head,
    linear,
    linear_tensors,
    make,
    norm,
    tied,
)

QkNorm = Literal["", "head", "full", "head_matrix", "head_layernorm"]
"""Query/key norms: none; one RMSNorm(head_dim) each (Qwen3, Gemma 3); RMSNorm over all heads
(OLMo 2, OLMoE); Cohere's LayerNorm over (heads, head_dim); StableLM's one LayerNorm(head_dim) per head."""


@dataclass(frozen=True)
class Family:
    """What differs between the Llama-like families, as hard-coded in each ``modeling_<type>.py``."""

    tie_default: bool
    qkv_bias: bool | None = None  # None: config 'attention_bias' for q, k, v
    o_bias: bool | None = None  # None: config 'attention_bias' for o_proj
    mlp_bias_key: str | None = None  # config key of the MLP bias (Llama, Granite: 'mlp_bias')
    norm: Literal["rmsnorm", "gemma_rmsnorm", "layernorm"] = "rmsnorm"
    norm_params: NormParams = "weight"
    norms_per_layer: int = 2
    qk_norm: QkNorm = ""
    fused: bool = False  # Phi-3 fuses qkv_proj and gate_up_proj
    sliding: Literal["none", "all", "even", "five_of_six"] = "none"
    """Blocks with sliding-window attention when the config sets ``sliding_window``: none (the window is off or
    ignored, e.g. Qwen2's ``use_sliding_window: false``), all (Mistral), the even ones (Gemma 2: layers 0, 2, 4, ...),
    all but every sixth (Gemma 3: five local layers per global one)."""
    mlp: Literal["gated", "plain"] = "gated"
    parallel: bool = False
    act_default: str = "silu"
    sdpa_mask: SdpaMask = "when_needed"  # Gemma 2: no SDPA path (Gemma2PreTrainedModel._supports_sdpa = False)


# Defaults are those of each transformers config class (e.g. LlamaConfig.tie_word_embeddings=False,
# GemmaConfig=True). Mistral, Mixtral and Phi-3 hard-code bias=False; Qwen2 hard-codes q/k/v biases and
# no o_proj bias (Qwen2Attention); OLMo's LayerNorm has no parameters (OlmoLayerNorm).
FAMILIES: dict[str, Family] = {
    "llama": Family(tie_default=False, mlp_bias_key="mlp_bias"),
    "granite": Family(tie_default=False, mlp_bias_key="mlp_bias"),
    "mistral": Family(tie_default=False, qkv_bias=False, o_bias=False, sliding="all"),
    "qwen2": Family(tie_default=False, qkv_bias=True, o_bias=False),
    "qwen3": Family(tie_default=False, qk_norm="head"),
    "gemma": Family(tie_default=True, norm="gemma_rmsnorm", act_default="gelu_pytorch_tanh"),
    "gemma2": Family(tie_default=True, norm="gemma_rmsnorm", norms_per_layer=4, act_default="gelu_pytorch_tanh",
                     sliding="even", sdpa_mask="none"),
    "gemma3_text": Family(tie_default=True, norm="gemma_rmsnorm", norms_per_layer=4, qk_norm="head",
                          act_default="gelu_pytorch_tanh", sliding="five_of_six"),
    "phi3": Family(tie_default=False, qkv_bias=False, o_bias=False, fused=True),
    "olmo": Family(tie_default=False, norm="layernorm", norm_params="none"),
    # OLMo 2 normalises after attention and after the MLP (post_attention/post_feedforward_layernorm).
    "olmo2": Family(tie_default=False, qk_norm="full"),
    "cohere": Family(tie_default=True, norm="layernorm", norms_per_layer=1, parallel=True),
    "stablelm": Family(tie_default=False, qkv_bias=False, o_bias=False, norm="layernorm", norm_params="weight_bias"),
    "starcoder2": Family(tie_default=True, norm="layernorm", norm_params="weight_bias", mlp="plain",
                         act_default="gelu_pytorch_tanh"),
}


def family(config: dict[str, Any], model_type: str) -> Family:
    """The family, adjusted by the config switches some families read (StableLM, Cohere, StarCoder2)."""
    fam = FAMILIES[model_type]
    if model_type == "stablelm":
        parallel = read_flag(config, "use_parallel_residual", False)
        fam = dataclasses.replace(
            fam, qkv_bias=read_flag(config, "use_qkv_bias", False), parallel=parallel, norms_per_layer=1 if parallel else 2,
            qk_norm="head_layernorm" if read_flag(config, "qk_layernorm", False) else "",
        )
    elif model_type == "cohere" and read_flag(config, "use_qk_norm", False):
        fam = dataclasses.replace(fam, qk_norm="head_matrix")
    elif model_type == "starcoder2":
        bias = read_flag(config, "use_bias", True)
        fam = dataclasses.replace(fam, qkv_bias=bias, o_bias=bias)
    return fam


def attention_linears(config: dict[str, Any], fam: Family, d: Dims) -> list[LinearLayer]:
    """q/k/v/o projections (or Phi-3's fused qkv_proj) with the family's biases."""
    h, q_out, kv_out = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    attn_bias = read_flag(config, "attention_bias", False)
    qkv_bias = attn_bias if fam.qkv_bias is None else fam.qkv_bias
    o_bias = attn_bias if fam.o_bias is None else fam.o_bias
    if fam.fused:
        return [linear("self_attn.qkv_proj", h, q_out + 2 * kv_out, qkv_bias), linear("self_attn.o_proj", q_out, h, o_bias)]
    return [
        linear("self_attn.q_proj", h, q_out, qkv_bias),
        linear("self_attn.k_proj", h, kv_out, qkv_bias),
        linear("self_attn.v_proj", h, kv_out, qkv_bias),
        linear("self_attn.o_proj", q_out, h, o_bias),
    ]


def gated_mlp(prefix: str, h: int, inter: int, bias: bool = False, **kw: Any) -> list[LinearLayer]:
    """gate_proj, up_proj, down_proj under ``prefix`` (``mlp``, ``mlp.shared_expert`` ...)."""
    return [
        linear(f"{prefix}.gate_proj", h, inter, bias, **kw),
        linear(f"{prefix}.up_proj", h, inter, bias, **kw),
        linear(f"{prefix}.down_proj", inter, h, bias, **kw),
    ]


def mlp_linears(config: dict[str, Any], fam: Family, h: int, inter: int) -> list[LinearLayer]:
    """The dense MLP: gated (gate/up/down), Phi-3's fused gate_up_proj, or StarCoder2's c_fc/c_proj."""
    if fam.fused:
        return [linear("mlp.gate_up_proj", h, 2 * inter), linear("mlp.down_proj", inter, h)]
    if fam.mlp == "plain":
        bias = bool(fam.qkv_bias)  # StarCoder2: config 'use_bias' for every linear
        return [linear("mlp.c_fc", h, inter, bias), linear("mlp.c_proj", inter, h, bias)]
    bias = read_flag(config, fam.mlp_bias_key, False) if fam.mlp_bias_key else False
    return gated_mlp("mlp", h, inter, bias)


def qk_norm_tensors(fam: Family, d: Dims, layers: int) -> list[TensorGroup]:
    """Query/key norm weights of ``layers`` blocks (see :data:`QkNorm`)."""
    if fam.qk_norm == "head":
        return norm("self_attn.qk_norms", d.head_dim, 2 * layers, "weight")
    if fam.qk_norm == "full":
        return norm("self_attn.q_norm", d.heads * d.head_dim, layers, "weight") + norm(
            "self_attn.k_norm", d.kv_heads * d.head_dim, layers, "weight")
    if fam.qk_norm == "head_matrix":
        return norm("self_attn.qk_norms", d.head_dim, (d.heads + d.kv_heads) * layers, "weight")
    if fam.qk_norm == "head_layernorm":
        # StableLM: a ModuleList of LayerNorm(head_dim, bias=False), one per query head and per key head.
        return norm("self_attn.qk_layernorms", d.head_dim, (d.heads + d.kv_heads) * layers, "weight")
    return []


def block_norms(fam: Family, d: Dims) -> list[TensorGroup]:
    """Per-block norms, qk-norms, and the final norm."""
    return (
        norm("layer_norms", d.hidden, d.layers * fam.norms_per_layer, fam.norm_params)
        + qk_norm_tensors(fam, d, d.layers)
        + norm("final_norm", d.hidden, 1, fam.norm_params)
    )


def common_fields(config: dict[str, Any], fam: Family, model_type: str) -> dict[str, Any]:
    """Architecture fields shared by the Llama-like and the MoE builders."""
    return dict(
        norm=fam.norm,
        norms_per_layer=fam.norms_per_layer,
        activation=activation(config, "hidden_activation", "hidden_act", default=fam.act_default),
        positional="rope",
        parallel_attention=fam.parallel,
        attention_dropout=read_probability(config, "attention_dropout"),
        qk_norm=bool(fam.qk_norm),
        sdpa_mask=fam.sdpa_mask,
        # Gemma2Config defaults final_logit_softcapping to 30.0 (tanh over the logits, saved for backward).
        final_logit_softcapping=config.get("final_logit_softcapping", 30.0 if model_type == "gemma2" else None),
    )


def llama_like(config: dict[str, Any], model_type: str) -> Architecture:
    """Decoder with RoPE and a Llama-style block (see :data:`FAMILIES`)."""
    fam = family(config, model_type)
    d = dims(config)
    inter = read_size(config, "intermediate_size")
    tie = tied(config, fam.tie_default)
    linears = attention_linears(config, fam, d) + mlp_linears(config, fam, d.hidden, inter)
    tensors = linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, d.hidden, tie) + block_norms(fam, d)
    fields = common_fields(config, fam, model_type)
    if model_type == "starcoder2":
        fields["hidden_dropout"] = read_probability(config, "residual_dropout")
    if model_type == "stablelm":
        fields["hidden_dropout"] = read_probability(config, "hidden_dropout")
    return make(model_type, config, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=fam.fused, fused_gate_up=fam.fused, sliding_window_layers=sliding_layers(fam, d.layers),
                mlp=fam.mlp, **fields)


def sliding_layers(fam: Family, layers: int) -> int:
    """Blocks of ``layers`` with sliding-window attention (:attr:`Family.sliding`; 0 for "none"); the caller's
    ``make`` sets 0 when the config has no window. Sources: transformers ``modeling_mistral.py`` (every layer),
    ``modeling_gemma2.py`` (``layer_idx % 2 == 0`` slides), ``modeling_gemma3.py`` (``(layer_idx + 1) % 6 != 0``
    slides, ``sliding_window_pattern`` 6)."""
    return {"none": 0, "all": layers, "even": (layers + 1) // 2, "five_of_six": layers - layers // 6}[fam.sliding]


BUILDERS = {name: llama_like for name in FAMILIES}
