"""Building blocks shared by the per-family builders: sizes read from a config, linear layers and their
tensors, norms, embeddings and the final :class:`Architecture`.

Every helper mirrors a module of transformers' modelling code: ``nn.Linear(in, out, bias)`` has a weight
of ``out x in`` and a bias of ``out``; ``nn.LayerNorm(n)`` a weight and a bias of ``n`` (only a weight
with ``bias=False``); the RMSNorms a weight of ``n``; ``nn.Embedding(v, n)`` a weight of ``v x n``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from engine.model.architecture import Architecture, LinearLayer, Role, TensorGroup
from engine.model.config_fields import read_flag, read_layers, read_optional_size, read_probability, read_size
from engine.errors import ConfigError

NormParams = Literal["weight", "weight_bias", "none"]
"""Parameters of one norm: RMSNorm/LayerNorm without bias, LayerNorm with bias, non-parametric."""


@dataclass(frozen=True)
class Dims:
    """The sizes nearly every decoder config carries."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int


def dims(
    config: dict[str, Any],
    *,
    hidden: tuple[str, ...] = ("hidden_size",),
    layers: tuple[str, ...] = ("num_hidden_layers",),
    heads: tuple[str, ...] = ("num_attention_heads",),
    kv_heads: tuple[str, ...] = ("num_key_value_heads",),
    head_dim: tuple[str, ...] = ("head_dim",),
) -> Dims:
    """Read hidden size, layers, heads, key/value heads (default: heads) and head_dim (default:
    hidden / heads) under the given key aliases (first present wins, as transformers' attribute_map)."""
    h = read_size(config, *hidden)
    n_layers = read_layers(config, *layers)
    n_heads = read_size(config, *heads)
    n_kv = read_size(config, *kv_heads, default=n_heads)
    if n_heads % n_kv:
        raise ConfigError(f"num_attention_heads ({n_heads}) is not a multiple of num_key_value_heads ({n_kv})")
    if all(config.get(k) is None for k in head_dim) and h % n_heads:
        raise ConfigError(f"hidden_size ({h}) is not divisible by num_attention_heads ({n_heads}) and no head_dim is set")
    hd = read_size(config, *head_dim, default=h // n_heads)
    return Dims(hidden=h, layers=n_layers, heads=n_heads, kv_heads=n_kv, head_dim=hd, vocab=read_size(config, "vocab_size"))


def linear(module: str, in_f: int, out_f: int, bias: bool = False, **kw: Any) -> LinearLayer:
    """A ``LinearLayer`` (``nn.Linear(in_f, out_f, bias)`` at ``module`` inside a block)."""
    return LinearLayer(module=module, in_features=in_f, out_features=out_f, bias=bias, **kw)


def linear_tensors(linears: list[LinearLayer], layers: int) -> list[TensorGroup]:
    """Weight and bias tensors of the blocks' linear layers: each over the blocks that contain it."""
    groups = []
    for lin in linears:
        n = lin.blocks(layers) * lin.count
        expert = lin.count > 1  # one module per routed expert
        groups.append(TensorGroup(name=lin.module, shape=(lin.out_features, lin.in_features), count=n,
                                  role=lin.role, linear=True, expert=expert))
        if lin.bias:
            groups.append(TensorGroup(name=lin.module + ".bias", shape=(lin.out_features,), count=n, role=lin.role,
                                      expert=expert))
    return groups


def norm(name: str, width: int, count: int, params: NormParams, role: Role = "norms") -> list[TensorGroup]:
    """``count`` norms of ``width``: weight, weight and bias, or nothing (non-parametric)."""
    if params == "none" or count == 0:
        return []
    per = 2 if params == "weight_bias" else 1
    return [TensorGroup(name=name, shape=(width,), count=count * per, role=role)]


def tensor(name: str, shape: tuple[int, ...], role: Role, count: int = 1, **kw: Any) -> TensorGroup:
    """A plain parameter tensor group (embeddings, gates, routers that are not ``nn.Linear``)."""
    return TensorGroup(name=name, shape=shape, count=count, role=role, **kw)


def embeddings_and_head(vocab: int, hidden: int, tied: bool, head_bias: bool = False, embed_rows: int | None = None) -> list[TensorGroup]:
    """Token embedding and, when not tied to it, the output projection (with GPT-J/Phi's bias)."""
    groups = [tensor("embed_tokens", (embed_rows or vocab, hidden), "embeddings")]
    if not tied:
        groups.append(tensor("lm_head", (vocab, hidden), "lm_head"))
    if head_bias:
        groups.append(tensor("lm_head.bias", (vocab,), "lm_head"))
    return groups


def activation(config: dict[str, Any], *keys: str, default: str) -> str:
    """Activation name under the first present key."""
    for key in keys:
        if config.get(key):
            return str(config[key])
    return default


def tied(config: dict[str, Any], default: bool) -> bool:
    """``tie_word_embeddings``, or the config class's default when absent (ConfigError when not true or false)."""
    return read_flag(config, "tie_word_embeddings", default)


def dropout(config: dict[str, Any], *keys: str, default: float = 0.0) -> float:
    """First present dropout probability among ``keys``."""
    for key in keys:
        if config.get(key) is not None:
            return read_probability(config, key)
    return default


def make(
    model_type: str,
    config: dict[str, Any],
    d: Dims,
    *,
    intermediate: int,
    tie: bool,
    tensors: list[TensorGroup],
    linears: list[LinearLayer],
    fused_qkv: bool,
    fused_gate_up: bool,
    sliding_window_layers: int,
    **fields: Any,
) -> Architecture:
    """The :class:`Architecture` from the sizes, tensors and linears; ``fields`` set the rest.

    Every builder states the structure facts (``fused_qkv``, ``fused_gate_up``, ``sliding_window_layers``; see
    :class:`~engine.model.architecture.Architecture`); the norm readers follow from them (:func:`norm_readers`)
    unless the builder gives ``attention_norm_readers`` / ``mlp_norm_readers`` itself."""
    if "max_position_embeddings" not in fields:
        fields["max_position_embeddings"] = read_optional_size(config, "max_position_embeddings")
    if "sliding_window" not in fields:
        fields["sliding_window"] = read_optional_size(config, "sliding_window")
    attention_readers, mlp_readers = norm_readers(fields["mlp"], fused_qkv, fused_gate_up, fields.get("num_experts", 0))
    fields.setdefault("attention_norm_readers", attention_readers)
    fields.setdefault("mlp_norm_readers", mlp_readers)
    return Architecture(
        model_type=model_type,
        hidden_size=d.hidden,
        num_layers=d.layers,
        num_attention_heads=d.heads,
        num_key_value_heads=d.kv_heads,
        head_dim=d.head_dim,
        intermediate_size=intermediate,
        vocab_size=d.vocab,
        tie_word_embeddings=tie,
        tensors=tuple(tensors),
        layer_linears=tuple(linears),
        fused_qkv=fused_qkv,
        fused_gate_up=fused_gate_up,
        sliding_window_layers=sliding_window_layers if fields["sliding_window"] else 0,
        **fields,
    )


def norm_readers(mlp: str, fused_qkv: bool, fused_gate_up: bool, experts: int) -> tuple[int, int]:
    """(linears reading the attention norm's output, linears reading the MLP norm's output), as the activation
    model counts the 16-bit copies autocast saves of each (traced: ../shared/reference/tracing-notes.md).

    A gated block's q, k and v each read the attention norm (3; one fused projection: 1) and its gate and up the MLP
    norm (2; fused: 1); a mixture of experts' router reads it once (the experts read their routed tokens). Blocks
    with a plain MLP (GPT-2, NeoX, Falcon, BLOOM, OPT, Phi-2, StarCoder2, BERT, T5) count one reader each, as the
    activation model has since its traces of GPT-2 (fused c_attn); OPT's, Phi-2's and StarCoder2's separate q/k/v
    under autocast are not traced yet (kept at 1 so their estimates did not move with this refactor)."""
    plain = mlp == "plain"
    return (1 if plain or fused_qkv else 3), (1 if plain or fused_gate_up or experts else 2)
