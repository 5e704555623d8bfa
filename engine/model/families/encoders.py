"""Encoder-only (bert, roberta) and encoder-decoder (t5) models.

Counted as the class their published checkpoints name in ``architectures``: ``BertForMaskedLM`` and
``RobertaForMaskedLM`` (encoder without pooler, masked-LM head with its decoder tied to the word
embeddings) and ``T5ForConditionalGeneration``. Fine-tuning for classification swaps the masked-LM head
for a small classifier; the encoder, which is nearly all of the parameters, is the same.
"""

from __future__ import annotations

from typing import Any

from engine.model.architecture import Architecture, LinearLayer, TensorGroup
from engine.model.config_fields import read_layers, read_size
from engine.model.families.common import Dims, activation, dims, dropout, linear, linear_tensors, make, norm, tensor, tied


def _bert_layer(h: int, inter: int) -> list[LinearLayer]:
    """One ``BertLayer``: self-attention query/key/value, its output dense, intermediate and output dense,
    all with bias (module paths as PEFT sees them inside ``encoder.layer.N``)."""
    return [
        linear("attention.self.query", h, h, True, role="attention"),
        linear("attention.self.key", h, h, True, role="attention"),
        linear("attention.self.value", h, h, True, role="attention"),
        linear("attention.output.dense", h, h, True, role="attention"),
        linear("intermediate.dense", h, inter, True),
        linear("output.dense", inter, h, True),
    ]


def _mlm_head(h: int, vocab: int, tie: bool) -> list[TensorGroup]:
    """Masked-LM head (BertLMPredictionHead / RobertaLMHead): dense h x h with bias, LayerNorm, output
    bias of vocab; the decoder weight is the word embedding unless untied."""
    groups = [
        tensor("lm_head.dense", (h, h), "head"),
        tensor("lm_head.dense.bias", (h,), "head"),
        *norm("lm_head.layer_norm", h, 1, "weight_bias", role="head"),
        tensor("lm_head.bias", (vocab,), "head"),
    ]
    if not tie:
        groups.append(tensor("lm_head.decoder", (vocab, h), "lm_head"))
    return groups


def bert(config: dict[str, Any], model_type: str) -> Architecture:
    """BERT / RoBERTa masked LM: word, position and token-type embeddings with a LayerNorm, post-norm
    encoder layers (two LayerNorms each), masked-LM head. RoBERTa differs only in defaults (its configs
    set ``max_position_embeddings`` 514 and ``type_vocab_size`` 1)."""
    d = dims(config, kv_heads=(), head_dim=())
    inter = read_size(config, "intermediate_size")
    positions = read_size(config, "max_position_embeddings", default=512)
    types = read_size(config, "type_vocab_size", default=2)
    tie = tied(config, True)
    h = d.hidden
    linears = _bert_layer(h, inter)
    tensors = linear_tensors(linears, d.layers) + [
        tensor("word_embeddings", (d.vocab, h), "embeddings"),
        tensor("position_embeddings", (positions, h), "embeddings"),
        tensor("token_type_embeddings", (types, h), "embeddings"),
        *norm("embeddings.LayerNorm", h, 1, "weight_bias"),
        *norm("layer_norms", h, 2 * d.layers, "weight_bias"),
        *_mlm_head(h, d.vocab, tie),
    ]
    return make(model_type, config, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # query, key, value; dense MLP
                max_position_embeddings=positions, kind="encoder", norm="layernorm", norms_per_layer=2,
                mlp="plain", positional="learned", activation=activation(config, "hidden_act", default="gelu"),
                attention_dropout=dropout(config, "attention_probs_dropout_prob", default=0.1),
                hidden_dropout=dropout(config, "hidden_dropout_prob", default=0.1))


def _t5_attention(prefix: str, attn: str, h: int, inner: int, layers: int) -> list[LinearLayer]:
    """T5Attention's q, k, v (h -> heads x d_kv) and o (back to h), without bias, in ``layers`` blocks."""
    qkv = [linear(f"{prefix}.{attn}.{n}", h, inner, role="attention", layers=layers) for n in ("q", "k", "v")]
    return qkv + [linear(f"{prefix}.{attn}.o", inner, h, role="attention", layers=layers)]


def _t5_ff(prefix: str, h: int, ff: int, gated: bool, layers: int) -> list[LinearLayer]:
    """``DenseReluDense``: wi (or wi_0 and wi_1 for gated-gelu) and wo, without bias."""
    wi = ["wi_0", "wi_1"] if gated else ["wi"]
    return [linear(f"{prefix}.DenseReluDense.{n}", h, ff, layers=layers) for n in wi] + [
        linear(f"{prefix}.DenseReluDense.wo", ff, h, layers=layers)]


def t5(config: dict[str, Any], model_type: str) -> Architecture:
    """T5 (``T5ForConditionalGeneration``): shared embedding, encoder blocks (self-attention, feed-forward)
    and decoder blocks (self-attention, cross-attention ``EncDecAttention``, feed-forward), RMS-style
    ``T5LayerNorm`` (weight only) before each sub-layer and after each stack, a relative position bias
    (buckets x heads) in the first block of each stack. ``lm_head`` is separate when
    ``tie_word_embeddings`` is false (T5 v1.1; transformers 4.x keeps it, 5.x forces tying)."""
    d = dims(config, hidden=("d_model", "hidden_size"), layers=("num_layers", "num_hidden_layers"),
             heads=("num_heads", "num_attention_heads"), kv_heads=(), head_dim=("d_kv",))
    enc, dec = d.layers, read_layers(config, "num_decoder_layers", default=d.layers)
    h, inner, ff = d.hidden, d.heads * d.head_dim, read_size(config, "d_ff")
    gated = str(config.get("feed_forward_proj", "relu")).startswith("gated-")
    buckets = read_size(config, "relative_attention_num_buckets", default=32)
    tie = tied(config, True)
    linears = (_t5_attention("layer.0", "SelfAttention", h, inner, enc + dec)
               + _t5_attention("layer.1", "EncDecAttention", h, inner, dec)
               + _t5_ff("layer.1", h, ff, gated, enc) + _t5_ff("layer.2", h, ff, gated, dec))
    tensors = linear_tensors(linears, enc + dec) + [
        tensor("shared", (d.vocab, h), "embeddings"),
        tensor("relative_attention_bias", (buckets, d.heads), "embeddings", count=2),
        *norm("layer_norms", h, 2 * enc + 3 * dec + 2, "weight"),  # + encoder/decoder final_layer_norm
    ]
    if not tie:
        tensors.append(tensor("lm_head", (d.vocab, h), "lm_head"))
    both = Dims(hidden=h, layers=enc + dec, heads=d.heads, kv_heads=d.heads, head_dim=d.head_dim, vocab=d.vocab)
    # T5Config: dense_act_fn is the part after "gated-", except that "gated-gelu" means gelu_new.
    proj = str(config.get("feed_forward_proj", "relu"))
    act = "gelu_new" if proj == "gated-gelu" else proj.removeprefix("gated-")
    return make(model_type, config, both, intermediate=ff, tie=tie, tensors=tensors, linears=linears,
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,  # q, k, v; wi_0 and wi_1 apart
                max_position_embeddings=config.get("n_positions"), kind="encoder_decoder", num_encoder_layers=enc,
                norm="rmsnorm", norms_per_layer=2, mlp="gated" if gated else "plain", positional="relative",
                sdpa_mask="always",  # the relative position bias reaches SDPA as a float mask (create_position_bias_mask)
                activation=act,
                attention_dropout=dropout(config, "dropout_rate", default=0.1),
                hidden_dropout=dropout(config, "dropout_rate", default=0.1))


BUILDERS = {"bert": bert, "roberta": bert, "t5": t5}
