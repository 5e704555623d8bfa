"""GPT-style decoders with LayerNorm (weight and bias) and a plain two-layer MLP: gpt2, gpt_neox (Pythia),
gptj, falcon, phi (Phi-1/1.5/2), opt and bloom.

Module names are transformers' (the names PEFT targets): e.g. ``attention.query_key_value`` for
GPT-NeoX, ``self_attention.query_key_value`` for Falcon and BLOOM, ``attn.c_attn`` for GPT-2.
"""

from __future__ import annotations

from typing import Any

from engine.model.architecture import Architecture
from engine.model.config_fields import read_flag, read_probability, read_size
from engine.errors import ConfigError
from engine.model.families.common import (
    Dims,
    activation,
    dims,
    dropout,
    embeddings_and_head,
    linear,
    linear_tensors,
    make,
    norm,
    tensor,
    tied,
)


def gpt2(config: dict[str, Any], model_type: str) -> Architecture:
    """GPT-2 (``GPT2LMHeadModel``): learned positions, LayerNorm with bias, Conv1D layers with bias, tied head."""
    d = dims(config, hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"),
             heads=("n_head", "num_attention_heads"), kv_heads=(), head_dim=())
    positions = read_size(config, "n_positions", "max_position_embeddings")
    inner = read_size(config, "n_inner", default=4 * d.hidden)
    tie = tied(config, True)
    h = d.hidden
    # GPT-2's Conv1D stores weight as (in, out); the element count is the same as a Linear's.
    linears = [
        linear("attn.c_attn", h, 3 * h, True),
        linear("attn.c_proj", h, h, True),
        linear("mlp.c_fc", h, inner, True),
        linear("mlp.c_proj", inner, h, True),
    ]
    tensors = linear_tensors(linears, d.layers) + [
        tensor("wte", (d.vocab, h), "embeddings"),
        tensor("wpe", (positions, h), "embeddings"),
        *norm("layer_norms", h, d.layers * 2, "weight_bias"),  # ln_1, ln_2
        *norm("ln_f", h, 1, "weight_bias"),
    ]
    if not tie:
        tensors.append(tensor("lm_head", (d.vocab, h), "lm_head"))
    return make(model_type, config, d, intermediate=inner, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=True, fused_gate_up=False, sliding_window_layers=0,  # c_attn
                # GPT2Attention's eager softmax stays in the input dtype; each block's attn.bias causal mask
                # (positions x positions) is saved in the checkpoint but not loaded as a parameter
                eager_softmax_fp32=False, checkpoint_buffer_elements=d.layers * positions**2,
                max_position_embeddings=positions, norm="layernorm", norms_per_layer=2, mlp="plain",
                activation=activation(config, "activation_function", default="gelu_new"), positional="learned",
                # GPT2Config defaults all three dropouts to 0.1, and the published config sets them so.
                attention_dropout=read_probability(config, "attn_pdrop", 0.1),
                hidden_dropout=read_probability(config, "resid_pdrop", 0.1))


def gpt_neox(config: dict[str, Any], model_type: str) -> Architecture:
    """GPT-NeoX / Pythia (``GPTNeoXForCausalLM``): fused ``attention.query_key_value`` (bias from
    ``attention_bias``, default True), ``attention.dense``, ``mlp.dense_h_to_4h``/``dense_4h_to_h`` with
    bias, two LayerNorms per block (also with ``use_parallel_residual``), untied ``embed_out``."""
    d = dims(config, kv_heads=(), head_dim=())
    inter = read_size(config, "intermediate_size")
    tie = tied(config, False)
    bias = read_flag(config, "attention_bias", True)
    h = d.hidden
    linears = [
        linear("attention.query_key_value", h, 3 * h, bias, role="attention"),
        linear("attention.dense", h, h, bias, role="attention"),
        linear("mlp.dense_h_to_4h", h, inter, True),
        linear("mlp.dense_4h_to_h", inter, h, True),
    ]
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, h, tie)
               + norm("layer_norms", h, 2 * d.layers, "weight_bias") + norm("final_layer_norm", h, 1, "weight_bias"))
    return make(model_type, config, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=True, fused_gate_up=False, sliding_window_layers=0,  # query_key_value
                norm="layernorm", norms_per_layer=2, mlp="plain", positional="rope",
                activation=activation(config, "hidden_act", default="gelu"),
                parallel_attention=read_flag(config, "use_parallel_residual", True),
                attention_dropout=dropout(config, "attention_dropout"), hidden_dropout=dropout(config, "hidden_dropout"))


def gptj(config: dict[str, Any], model_type: str) -> Architecture:
    """GPT-J (``GPTJForCausalLM``): q/k/v/out_proj without bias, fc_in/fc_out with bias, one LayerNorm
    (``ln_1``) feeding attention and MLP in parallel, and an untied ``lm_head`` with bias."""
    d = dims(config, hidden=("n_embd", "hidden_size"), layers=("n_layer", "num_hidden_layers"),
             heads=("n_head", "num_attention_heads"), kv_heads=(), head_dim=())
    inner = read_size(config, "n_inner", default=4 * d.hidden)
    tie = tied(config, False)
    h = d.hidden
    linears = [linear(f"attn.{name}", h, h) for name in ("q_proj", "k_proj", "v_proj", "out_proj")]
    linears += [linear("mlp.fc_in", h, inner, True), linear("mlp.fc_out", inner, h, True)]
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, h, tie, head_bias=True)
               + norm("ln_1", h, d.layers, "weight_bias") + norm("ln_f", h, 1, "weight_bias"))
    return make(model_type, config, d, intermediate=inner, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # q_proj, k_proj, v_proj
                max_position_embeddings=config.get("n_positions"), norm="layernorm", norms_per_layer=1,
                mlp="plain", positional="rope", parallel_attention=True,
                activation=activation(config, "activation_function", default="gelu_new"),
                attention_dropout=dropout(config, "attn_pdrop"), hidden_dropout=dropout(config, "resid_pdrop"))


def _falcon_kv_heads(config: dict[str, Any], d: Dims) -> int:
    """Key/value heads of FalconAttention: ``num_kv_heads`` with the new decoder architecture, one with
    ``multi_query`` (the default), otherwise one per query head."""
    if read_flag(config, "new_decoder_architecture", False):
        kv = read_size(config, "num_kv_heads", default=d.heads)
        if d.heads % kv:
            raise ConfigError(f"num_attention_heads ({d.heads}) is not a multiple of num_kv_heads ({kv})")
        return kv
    return 1 if read_flag(config, "multi_query", True) else d.heads


def _falcon_norms(config: dict[str, Any]) -> int:
    """LayerNorms per block (FalconDecoderLayer): two without ``parallel_attn``; with it, ``ln_attn`` and
    ``ln_mlp`` when ``num_ln_in_parallel_attn`` is 2 (the default of the new decoder architecture),
    else one ``input_layernorm``."""
    if not read_flag(config, "parallel_attn", True):
        return 2
    n_ln = config.get("num_ln_in_parallel_attn")
    if n_ln is None and read_flag(config, "new_decoder_architecture", False):
        n_ln = 2
    return 2 if n_ln == 2 else 1


def falcon(config: dict[str, Any], model_type: str) -> Architecture:
    """Falcon (``FalconForCausalLM``): fused ``self_attention.query_key_value`` of (heads + 2 x kv heads)
    x head_dim outputs, ``self_attention.dense``, ``mlp.dense_h_to_4h``/``dense_4h_to_h``, biases only
    with ``bias``, LayerNorms with bias, tied head by default (FalconConfig)."""
    d = dims(config, hidden=("hidden_size", "n_embed"), kv_heads=(), head_dim=())
    if d.hidden % d.heads:
        raise ConfigError(f"hidden_size ({d.hidden}) is not divisible by num_attention_heads ({d.heads})")
    kv = _falcon_kv_heads(config, d)
    d = Dims(hidden=d.hidden, layers=d.layers, heads=d.heads, kv_heads=kv, head_dim=d.head_dim, vocab=d.vocab)
    inter = read_size(config, "ffn_hidden_size", default=4 * d.hidden)
    bias = read_flag(config, "bias", False)
    tie = tied(config, True)
    h, n_norms = d.hidden, _falcon_norms(config)
    linears = [
        linear("self_attention.query_key_value", h, (d.heads + 2 * kv) * d.head_dim, bias, role="attention"),
        linear("self_attention.dense", h, h, bias, role="attention"),
        linear("mlp.dense_h_to_4h", h, inter, bias),
        linear("mlp.dense_4h_to_h", inter, h, bias),
    ]
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, h, tie)
               + norm("layer_norms", h, n_norms * d.layers, "weight_bias") + norm("ln_f", h, 1, "weight_bias"))
    return make(model_type, config, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=True, fused_gate_up=False, sliding_window_layers=0,  # query_key_value
                norm="layernorm", norms_per_layer=n_norms, mlp="plain",
                positional="alibi" if read_flag(config, "alibi", False) else "rope",
                parallel_attention=read_flag(config, "parallel_attn", True),
                # FalconModel builds its causal mask with allow_is_causal_skip=False (ALiBi is added to it), so every
                # SDPA call gets an explicit mask. Since transformers 5.25.0 FalconAttention calls the shared attention
                # interface (integrations/sdpa_attention.py) with its num_kv_heads (new decoder architecture) or one
                # (multi-query) key/value heads, which repeat_kv copies to every query head when a mask is passed
                # (use_gqa_in_sdpa: no mask only): the default "enable_gqa" path. Up to 5.24 FalconAttention called
                # SDPA itself and handed a multi-query model its one key/value head broadcast ("broadcast": math).
                sdpa_mask="always",
                activation=activation(config, "activation", default="gelu"),
                attention_dropout=dropout(config, "attention_dropout"), hidden_dropout=dropout(config, "hidden_dropout"))


def phi(config: dict[str, Any], model_type: str) -> Architecture:
    """Phi-1/1.5/2 (``PhiForCausalLM``): q/k/v and ``dense`` with bias, fc1/fc2 with bias, one LayerNorm
    per block feeding attention and MLP in parallel, optional per-head q/k LayerNorms, ``lm_head`` with
    bias. Partial rotary embeddings change no parameter."""
    d = dims(config)
    inter = read_size(config, "intermediate_size")
    tie = tied(config, False)
    h, q_out, kv_out = d.hidden, d.heads * d.head_dim, d.kv_heads * d.head_dim
    linears = [
        linear("self_attn.q_proj", h, q_out, True),
        linear("self_attn.k_proj", h, kv_out, True),
        linear("self_attn.v_proj", h, kv_out, True),
        linear("self_attn.dense", q_out, h, True),
        linear("mlp.fc1", h, inter, True),
        linear("mlp.fc2", inter, h, True),
    ]
    qk_norm = read_flag(config, "qk_layernorm", False)
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, h, tie, head_bias=True)
               + norm("input_layernorm", h, d.layers, "weight_bias") + norm("final_layernorm", h, 1, "weight_bias"))
    if qk_norm:  # LayerNorm(hidden // heads) for q and for k
        tensors += norm("self_attn.qk_layernorms", h // d.heads, 2 * d.layers, "weight_bias")
    return make(model_type, config, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # q_proj, k_proj, v_proj
                norm="layernorm", norms_per_layer=1, mlp="plain", positional="rope", parallel_attention=True,
                qk_norm=qk_norm, activation=activation(config, "hidden_act", default="gelu_new"),
                attention_dropout=dropout(config, "attention_dropout"), hidden_dropout=dropout(config, "resid_pdrop"))


def opt(config: dict[str, Any], model_type: str) -> Architecture:
    """OPT (``OPTForCausalLM``): learned positions with an offset of 2 rows, q/k/v/out_proj and fc1/fc2
    with bias (``enable_bias``), LayerNorms (``layer_norm_elementwise_affine``), ``project_in``/
    ``project_out`` when ``word_embed_proj_dim`` differs from ``hidden_size`` (OPT-350m), tied head."""
    d = dims(config, kv_heads=(), head_dim=())
    h, ffn = d.hidden, read_size(config, "ffn_dim")
    proj = read_size(config, "word_embed_proj_dim", default=h)
    positions = read_size(config, "max_position_embeddings", default=2048)
    bias = read_flag(config, "enable_bias", True)
    affine = "weight_bias" if read_flag(config, "layer_norm_elementwise_affine", True) else "none"
    tie = tied(config, True)
    linears = [linear(f"self_attn.{n}", h, h, bias) for n in ("k_proj", "v_proj", "q_proj", "out_proj")]
    linears += [linear("fc1", h, ffn, bias), linear("fc2", ffn, h, bias)]
    tensors = linear_tensors(linears, d.layers) + [tensor("embed_positions", (positions + 2, h), "embeddings")]
    tensors += embeddings_and_head(d.vocab, proj, tie)
    tensors += norm("layer_norms", h, 2 * d.layers, affine)  # self_attn_layer_norm, final_layer_norm
    if read_flag(config, "do_layer_norm_before", True) and not read_flag(config, "_remove_final_layer_norm", False):
        tensors += norm("final_layer_norm", h, 1, affine)
    if proj != h:
        tensors.append(tensor("project_in_out", (proj, h), "embeddings", count=2))
    return make(model_type, config, d, intermediate=ffn, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # q_proj, k_proj, v_proj
                max_position_embeddings=positions, norm="layernorm", norms_per_layer=2, mlp="plain",
                positional="learned", activation=activation(config, "activation_function", default="relu"),
                attention_dropout=dropout(config, "attention_dropout"), hidden_dropout=dropout(config, "dropout", default=0.1))


def bloom(config: dict[str, Any], model_type: str) -> Architecture:
    """BLOOM (``BloomForCausalLM``): ALiBi (no position parameters), LayerNorm after the embeddings,
    ``self_attention.query_key_value``/``dense`` and ``mlp.dense_h_to_4h``/``dense_4h_to_h`` (4 x hidden)
    with bias, two LayerNorms per block, tied head."""
    d = dims(config, hidden=("hidden_size", "n_embed"), layers=("n_layer", "num_hidden_layers"),
             heads=("n_head", "num_attention_heads"), kv_heads=(), head_dim=())
    h, tie = d.hidden, tied(config, True)
    linears = [
        linear("self_attention.query_key_value", h, 3 * h, True, role="attention"),
        linear("self_attention.dense", h, h, True, role="attention"),
        linear("mlp.dense_h_to_4h", h, 4 * h, True),
        linear("mlp.dense_4h_to_h", 4 * h, h, True),
    ]
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, h, tie)
               + norm("word_embeddings_layernorm", h, 1, "weight_bias", role="embeddings")
               + norm("layer_norms", h, 2 * d.layers, "weight_bias") + norm("ln_f", h, 1, "weight_bias"))
    return make(model_type, config, d, intermediate=4 * h, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=True, fused_gate_up=False, sliding_window_layers=0,  # query_key_value
                norm="layernorm", norms_per_layer=2, mlp="plain", positional="alibi", activation="gelu",
                sdpa_mask="none",  # BloomAttention adds ALiBi in its own baddbmm: no SDPA path (no _supports_sdpa)
                attention_dropout=dropout(config, "attention_dropout"), hidden_dropout=dropout(config, "hidden_dropout"))


BUILDERS = {
    "gpt2": gpt2,
    "gpt_neox": gpt_neox,
    "gptj": gptj,
    "falcon": falcon,
    "phi": phi,
    "opt": opt,
    "bloom": bloom,
}
