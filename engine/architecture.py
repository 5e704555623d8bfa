"""Model architecture from a Hugging Face ``config.json`` (no network, no torch, no weights).

The first step of the data flow ``config -> architecture -> scenario -> estimate -> page``. A config dict
becomes an :class:`Architecture`: the sizes that memory formulas need, the shape of every parameter tensor
(grouped by role), and the linear layers of one decoder block by module name, because LoRA targets and
activation memory are computed from them.

Parameter counts are exact: they are sums over the tensor shapes that transformers' modelling code
creates for that ``model_type`` (transformers 4.4x-5.x, ``modeling_<type>.py``), with tied embeddings
counted once and non-persistent buffers (rotary tables, GPT-2's causal mask) not counted, which is what
``sum(p.numel() for p in model.parameters())`` returns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, computed_field

from engine.errors import ConfigError, UnsupportedModelError

Role = Literal["embeddings", "attention", "mlp", "norms", "lm_head"]
"""Component a parameter tensor is counted under. Routers and experts count as ``mlp``."""


class TensorGroup(BaseModel):
    """``count`` parameter tensors of one ``shape`` (e.g. the q_proj weight of every layer).

    ``linear`` marks weights of ``nn.Linear`` layers inside decoder blocks: the tensors that bitsandbytes
    quantizes for QLoRA and that autocast casts to the compute dtype.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    shape: tuple[int, ...]
    count: int
    role: Role
    linear: bool = False

    @property
    def numel(self) -> int:
        """Elements of one tensor."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def parameters(self) -> int:
        """Elements of all ``count`` tensors."""
        return self.numel * self.count


class LinearLayer(BaseModel):
    """One linear module of a decoder block, as PEFT sees it.

    ``module`` is the path inside the block (``self_attn.q_proj``); PEFT's ``target_modules`` matches a
    name when it equals the last path component, which :meth:`matches` reproduces. ``count`` > 1 for
    experts (one module per expert).
    """

    model_config = ConfigDict(frozen=True)

    module: str
    in_features: int
    out_features: int
    bias: bool
    count: int = 1

    @property
    def target_name(self) -> str:
        """The short name users put in ``target_modules`` (``q_proj``, ``c_attn``, ``w1``)."""
        return self.module.rsplit(".", 1)[-1]

    def matches(self, target: str) -> bool:
        """True when PEFT's suffix rule would select this module for ``target``."""
        return self.module == target or self.module.endswith("." + target)


class Architecture(BaseModel):
    """Sizes and parameter tensors of a transformer, derived from its config.

    Sizes are element counts (not bytes). ``head_dim`` is explicit because several families (Gemma,
    Qwen3, Llama 3.2) set it independently of ``hidden_size / num_attention_heads``.
    """

    model_config = ConfigDict(frozen=True)

    model_type: str
    hidden_size: int
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_position_embeddings: int | None = None
    norm: Literal["rmsnorm", "gemma_rmsnorm", "layernorm"]
    norms_per_layer: int
    mlp: Literal["gated", "plain"]
    activation: str
    positional: Literal["rope", "learned"]
    num_experts: int = 0
    experts_per_token: int = 0
    sliding_window: int | None = None
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    qk_norm: bool = False
    final_logit_softcapping: float | None = None
    tensors: tuple[TensorGroup, ...]
    layer_linears: tuple[LinearLayer, ...]

    @property
    def q_out(self) -> int:
        """Width of the query projection: heads x head_dim."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_out(self) -> int:
        """Width of the key (= value) projection: key/value heads x head_dim (GQA/MQA make it smaller)."""
        return self.num_key_value_heads * self.head_dim

    @computed_field  # type: ignore[prop-decorator]
    @property
    def parameter_counts(self) -> dict[str, int]:
        """Parameters by component (embeddings, attention, mlp, norms, lm_head) and ``total``."""
        counts = {role: 0 for role in ("embeddings", "attention", "mlp", "norms", "lm_head")}
        for group in self.tensors:
            counts[group.role] += group.parameters
        counts["total"] = sum(counts.values())
        return counts

    @property
    def total_parameters(self) -> int:
        """Unique parameters held in memory (tied weights once)."""
        return self.parameter_counts["total"]

    @property
    def active_parameters(self) -> int:
        """Parameters used per token: for MoE, only ``experts_per_token`` of ``num_experts`` experts."""
        if not self.num_experts:
            return self.total_parameters
        expert = sum(g.parameters for g in self.tensors if ".experts." in g.name)
        return self.total_parameters - expert + expert * self.experts_per_token // self.num_experts

    def linear_target_names(self) -> list[str]:
        """Short module names LoRA can target in a decoder block, in block order, without repeats."""
        return list(dict.fromkeys(lin.target_name for lin in self.layer_linears))


# --------------------------------------------------------------------------------------------------
# Reading config values


def _get(config: dict[str, Any], *keys: str, default: Any = None, required: bool = True) -> Any:
    """First present, non-null key of ``keys``; ``ConfigError`` naming the keys when required and absent."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if required and default is None:
        raise ConfigError(f"config.json has no '{keys[0]}'" + (f" (nor {', '.join(keys[1:])})" if keys[1:] else ""))
    return default


MAX_SIZE = 1 << 24
"""Largest size accepted for any config dimension (16,777,216): above every published model (the largest
vocabularies are ~256k, hidden sizes ~16k), so a larger value is a typo, not a model."""


def _size(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    """A strictly positive integer size from the config, at most :data:`MAX_SIZE`."""
    value = _get(config, *keys, default=default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"config.json field '{keys[0]}' must be a positive integer, got {value!r}")
    if value > MAX_SIZE:
        raise ConfigError(f"config.json field '{keys[0]}' is {value:,}, implausibly large (at most {MAX_SIZE:,})")
    return value


MAX_LAYERS = 10_000
"""Most decoder layers accepted: published models have at most a few hundred."""


def _layers(config: dict[str, Any], *keys: str) -> int:
    """Number of layers, at most :data:`MAX_LAYERS`."""
    value = _size(config, *keys)
    if value > MAX_LAYERS:
        raise ConfigError(f"config.json field '{keys[0]}' is {value:,}, implausibly many layers (at most {MAX_LAYERS:,})")
    return value


def _probability(config: dict[str, Any], key: str, default: float = 0.0) -> float:
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(f"config.json field '{key}' must be a probability in [0, 1), got {value!r}")
    return float(value)


@dataclass(frozen=True)
class _Family:
    """What differs between the Llama-like families, as hard-coded in each ``modeling_<type>.py``."""

    tie_default: bool
    qkv_bias: bool | None = None  # None: follow config 'attention_bias' for q, k, v and o
    norm: Literal["rmsnorm", "gemma_rmsnorm"] = "rmsnorm"
    norms_per_layer: int = 2
    qk_norm: bool = False
    fused: bool = False  # Phi-3 fuses qkv_proj and gate_up_proj
    moe: bool = False


# Defaults are those of each transformers config class (e.g. LlamaConfig.tie_word_embeddings=False,
# GemmaConfig=True); Qwen2 always has q/k/v biases and no o_proj bias (Qwen2Attention).
_FAMILIES: dict[str, _Family] = {
    "llama": _Family(tie_default=False),
    "mistral": _Family(tie_default=False),
    "mixtral": _Family(tie_default=False, moe=True),
    "qwen2": _Family(tie_default=False, qkv_bias=True),
    "qwen3": _Family(tie_default=False, qk_norm=True),
    "gemma": _Family(tie_default=True, norm="gemma_rmsnorm"),
    "gemma2": _Family(tie_default=True, norm="gemma_rmsnorm", norms_per_layer=4),
    "phi3": _Family(tie_default=False, fused=True),
}


def _llama_like(config: dict[str, Any], model_type: str) -> Architecture:
    """Decoder with RoPE, RMSNorm and a gated MLP (Llama, Mistral, Mixtral, Qwen2/3, Gemma 1/2, Phi-3)."""
    fam = _FAMILIES[model_type]
    h = _size(config, "hidden_size")
    layers = _layers(config, "num_hidden_layers")
    heads = _size(config, "num_attention_heads")
    kv_heads = _size(config, "num_key_value_heads", default=heads)
    if heads % kv_heads:
        raise ConfigError(f"num_attention_heads ({heads}) is not a multiple of num_key_value_heads ({kv_heads})")
    if config.get("head_dim") is None and h % heads:
        raise ConfigError(f"hidden_size ({h}) is not divisible by num_attention_heads ({heads}) and no head_dim is set")
    head_dim = _size(config, "head_dim", default=h // heads)
    inter = _size(config, "intermediate_size")
    vocab = _size(config, "vocab_size")
    tied = bool(config.get("tie_word_embeddings", fam.tie_default))
    attn_bias = bool(config.get("attention_bias", False))
    mlp_bias = bool(config.get("mlp_bias", False))
    q_out, kv_out = heads * head_dim, kv_heads * head_dim

    if fam.fused:
        linears = [
            LinearLayer(module="self_attn.qkv_proj", in_features=h, out_features=q_out + 2 * kv_out, bias=False),
            LinearLayer(module="self_attn.o_proj", in_features=q_out, out_features=h, bias=False),
        ]
    else:
        qkv_bias = attn_bias if fam.qkv_bias is None else fam.qkv_bias
        o_bias = attn_bias if fam.qkv_bias is None else False
        linears = [
            LinearLayer(module="self_attn.q_proj", in_features=h, out_features=q_out, bias=qkv_bias),
            LinearLayer(module="self_attn.k_proj", in_features=h, out_features=kv_out, bias=qkv_bias),
            LinearLayer(module="self_attn.v_proj", in_features=h, out_features=kv_out, bias=qkv_bias),
            LinearLayer(module="self_attn.o_proj", in_features=q_out, out_features=h, bias=o_bias),
        ]
    experts, top_k = 0, 0
    if fam.moe:
        experts = _size(config, "num_local_experts")
        top_k = _size(config, "num_experts_per_tok")
        linears += [
            LinearLayer(module="block_sparse_moe.gate", in_features=h, out_features=experts, bias=False),
            LinearLayer(module="block_sparse_moe.experts.w1", in_features=h, out_features=inter, bias=False, count=experts),
            LinearLayer(module="block_sparse_moe.experts.w2", in_features=inter, out_features=h, bias=False, count=experts),
            LinearLayer(module="block_sparse_moe.experts.w3", in_features=h, out_features=inter, bias=False, count=experts),
        ]
    elif fam.fused:
        linears += [
            LinearLayer(module="mlp.gate_up_proj", in_features=h, out_features=2 * inter, bias=False),
            LinearLayer(module="mlp.down_proj", in_features=inter, out_features=h, bias=False),
        ]
    else:
        linears += [
            LinearLayer(module="mlp.gate_proj", in_features=h, out_features=inter, bias=mlp_bias),
            LinearLayer(module="mlp.up_proj", in_features=h, out_features=inter, bias=mlp_bias),
            LinearLayer(module="mlp.down_proj", in_features=inter, out_features=h, bias=mlp_bias),
        ]

    tensors = _linear_tensors(linears, layers)
    tensors.append(TensorGroup(name="embed_tokens", shape=(vocab, h), count=1, role="embeddings"))
    tensors.append(TensorGroup(name="layer_norms", shape=(h,), count=layers * fam.norms_per_layer, role="norms"))
    if fam.qk_norm:
        tensors.append(TensorGroup(name="qk_norms", shape=(head_dim,), count=layers * 2, role="norms"))
    tensors.append(TensorGroup(name="final_norm", shape=(h,), count=1, role="norms"))
    if not tied:
        tensors.append(TensorGroup(name="lm_head", shape=(vocab, h), count=1, role="lm_head"))

    return Architecture(
        model_type=model_type,
        hidden_size=h,
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=inter,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=config.get("max_position_embeddings"),
        norm=fam.norm,
        norms_per_layer=fam.norms_per_layer,
        mlp="gated",
        activation=str(config.get("hidden_activation") or config.get("hidden_act") or "silu"),
        positional="rope",
        num_experts=experts,
        experts_per_token=top_k,
        sliding_window=config.get("sliding_window"),
        attention_dropout=_probability(config, "attention_dropout"),
        qk_norm=fam.qk_norm,
        # Gemma2Config defaults final_logit_softcapping to 30.0 (tanh over the logits, saved for backward).
        final_logit_softcapping=config.get("final_logit_softcapping", 30.0 if model_type == "gemma2" else None),
        tensors=tuple(tensors),
        layer_linears=tuple(linears),
    )


def _linear_tensors(linears: list[LinearLayer], layers: int) -> list[TensorGroup]:
    """Weight and bias tensors of a block's linear layers, repeated over ``layers`` blocks."""
    groups = []
    for lin in linears:
        # Routers and experts are MLP; everything under self_attn/attn is attention.
        role: Role = "attention" if lin.module.split(".")[0] in ("self_attn", "attn") else "mlp"
        groups.append(
            TensorGroup(name=lin.module, shape=(lin.out_features, lin.in_features), count=layers * lin.count, role=role, linear=True)
        )
        if lin.bias:
            groups.append(TensorGroup(name=lin.module + ".bias", shape=(lin.out_features,), count=layers * lin.count, role=role))
    return groups


def _gpt2(config: dict[str, Any], model_type: str) -> Architecture:
    """GPT-2 (``GPT2LMHeadModel``): learned positions, LayerNorm with bias, Conv1D layers with bias, tied head."""
    h = _size(config, "n_embd", "hidden_size")
    layers = _layers(config, "n_layer", "num_hidden_layers")
    heads = _size(config, "n_head", "num_attention_heads")
    if h % heads:
        raise ConfigError(f"n_embd ({h}) is not divisible by n_head ({heads})")
    positions = _size(config, "n_positions", "max_position_embeddings")
    inner = _size(config, "n_inner", default=4 * h)
    vocab = _size(config, "vocab_size")
    tied = bool(config.get("tie_word_embeddings", True))
    # GPT-2's Conv1D stores weight as (in, out); the element count is the same as a Linear's.
    linears = [
        LinearLayer(module="attn.c_attn", in_features=h, out_features=3 * h, bias=True),
        LinearLayer(module="attn.c_proj", in_features=h, out_features=h, bias=True),
        LinearLayer(module="mlp.c_fc", in_features=h, out_features=inner, bias=True),
        LinearLayer(module="mlp.c_proj", in_features=inner, out_features=h, bias=True),
    ]
    tensors = _linear_tensors(linears, layers)
    tensors += [
        TensorGroup(name="wte", shape=(vocab, h), count=1, role="embeddings"),
        TensorGroup(name="wpe", shape=(positions, h), count=1, role="embeddings"),
        # ln_1 and ln_2 per block, ln_f at the end: weight and bias each.
        TensorGroup(name="layer_norms", shape=(h,), count=layers * 2 * 2, role="norms"),
        TensorGroup(name="ln_f", shape=(h,), count=2, role="norms"),
    ]
    if not tied:
        tensors.append(TensorGroup(name="lm_head", shape=(vocab, h), count=1, role="lm_head"))
    return Architecture(
        model_type=model_type,
        hidden_size=h,
        num_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=h // heads,
        intermediate_size=inner,
        vocab_size=vocab,
        tie_word_embeddings=tied,
        max_position_embeddings=positions,
        norm="layernorm",
        norms_per_layer=2,
        mlp="plain",
        activation=str(config.get("activation_function", "gelu_new")),
        positional="learned",
        # GPT2Config defaults all three dropouts to 0.1, and the published config sets them so.
        attention_dropout=_probability(config, "attn_pdrop", 0.1),
        hidden_dropout=_probability(config, "resid_pdrop", 0.1),
        tensors=tuple(tensors),
        layer_linears=tuple(linears),
    )


_BUILDERS: dict[str, Callable[[dict[str, Any], str], Architecture]] = {
    **{name: _llama_like for name in _FAMILIES},
    "gpt2": _gpt2,
}

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(_BUILDERS))
"""``model_type`` values the engine counts exactly."""


def architecture_from_config(config: dict[str, Any]) -> Architecture:
    """Build the :class:`Architecture` of a Hugging Face ``config.json`` dict.

    Args:
        config: the parsed JSON object. Unknown keys are ignored.

    Raises:
        ConfigError: not a dict, or a needed size is missing, non-integer, zero or negative.
        UnsupportedModelError: ``model_type`` is absent or not in :data:`SUPPORTED_MODEL_TYPES`.
    """
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UnsupportedModelError(
            "config.json has no 'model_type'; supported types: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    builder = _BUILDERS.get(model_type)
    if builder is None:
        raise UnsupportedModelError(
            f"model_type '{model_type}' is not supported yet; supported types: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    return builder(config, model_type)
