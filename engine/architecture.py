"""Model architecture from a Hugging Face ``config.json`` (no network, no torch, no weights).

The first step of the data flow ``config -> architecture -> scenario -> estimate -> page``. A config dict
becomes an :class:`Architecture`: the sizes that memory formulas need, the shape of every parameter tensor
(grouped by role), and the linear layers of one decoder block by module name, because LoRA targets and
activation memory are computed from them.

Parameter counts are exact: they are sums over the tensor shapes that transformers' modelling code
creates for that ``model_type`` (transformers 4.4x-5.x, ``modeling_<type>.py``), with tied embeddings
counted once and non-persistent buffers (rotary tables, GPT-2's causal mask, DeepSeek-V3's
``e_score_correction_bias``) not counted, which is what ``sum(p.numel() for p in model.parameters())``
returns. The builders per ``model_type`` live in :mod:`engine.families`; this module holds the data
model, the config readers they share, and :func:`architecture_from_config`.

How the parts of a model are represented:

- ``tensors``: every parameter tensor of the *language model* (the part a fine-tuning run trains),
  grouped by shape and role. Totals are always sums over tensors, never ``num_layers x per-layer``,
  so models whose blocks differ (DeepSeek's first dense layers, Qwen-MoE's ``mlp_only_layers``,
  Mllama's cross-attention layers, T5's encoder and decoder) count exactly.
- ``layer_linears``: the distinct ``nn.Linear`` modules found in the blocks, by their module path inside
  a block. ``LinearLayer.layers`` says in how many blocks a module occurs (``None``: all
  ``num_layers``), ``count`` how many copies one block holds (routed experts).
- ``vision_tensors``: the vision tower and the multimodal projector of image-text models. They are
  part of ``total_parameters`` (they sit in GPU memory) but not of ``tensors``, because the default
  fine-tuning recipe freezes them; ``vision_exact`` is False when the tower's shapes had to be
  approximated.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from engine.errors import ConfigError, UnsupportedModelError
from engine.quantization import StoredQuantization, stored_quantization

Role = Literal["embeddings", "attention", "mlp", "norms", "lm_head", "head", "vision"]
"""Component a parameter tensor is counted under. Routers and experts count as ``mlp``; ``head`` is a
task head besides the output projection (BERT's masked-LM transform and output bias); ``vision`` is the
vision tower and projector of a multimodal model."""

BASE_ROLES: tuple[Role, ...] = ("embeddings", "attention", "mlp", "norms", "lm_head")
"""Roles every :attr:`Architecture.parameter_counts` lists; ``head`` and ``vision`` appear when present."""


class TensorGroup(BaseModel):
    """``count`` parameter tensors of one ``shape`` (e.g. the q_proj weight of every layer).

    ``linear`` marks weights of ``nn.Linear`` layers inside decoder blocks: the tensors that bitsandbytes
    quantizes for QLoRA and that autocast casts to the compute dtype. ``expert`` marks routed-expert
    weights of a mixture of experts, of which only ``experts_per_token`` of ``num_experts`` run per token.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    shape: tuple[int, ...]
    count: int
    role: Role
    linear: bool = False
    expert: bool = False

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


# First component of a module path that names an attention module, across the families.
_ATTENTION_PREFIXES = ("self_attn", "attn", "attention", "self_attention", "cross_attn")


class LinearLayer(BaseModel):
    """One linear module of a decoder block, as PEFT sees it.

    ``module`` is the path inside the block (``self_attn.q_proj``); PEFT's ``target_modules`` matches a
    name when it equals the last path component, which :meth:`matches` reproduces. ``count`` > 1 for
    experts (one module per expert). ``layers`` is the number of blocks that contain the module when not
    all do (DeepSeek's dense first layers, Mllama's cross-attention layers, T5's decoder-only
    cross-attention); ``None`` means every one of ``Architecture.num_layers``. ``role`` says whether the
    module belongs to attention or to the MLP (derived from the path when not given).
    """

    model_config = ConfigDict(frozen=True)

    module: str
    in_features: int
    out_features: int
    bias: bool
    count: int = 1
    layers: int | None = None
    role: Literal["attention", "mlp"] = "mlp"

    @model_validator(mode="before")
    @classmethod
    def _default_role(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("role") is None and isinstance(data.get("module"), str):
            first = data["module"].split(".")[0]
            data = {**data, "role": "attention" if first in _ATTENTION_PREFIXES else "mlp"}
        return data

    @property
    def target_name(self) -> str:
        """The short name users put in ``target_modules`` (``q_proj``, ``c_attn``, ``w1``)."""
        return self.module.rsplit(".", 1)[-1]

    def matches(self, target: str) -> bool:
        """True when PEFT's suffix rule would select this module for ``target``."""
        return self.module == target or self.module.endswith("." + target)

    def blocks(self, num_layers: int) -> int:
        """Blocks that contain this module."""
        return num_layers if self.layers is None else self.layers


class Architecture(BaseModel):
    """Sizes and parameter tensors of a transformer, derived from its config.

    Sizes are element counts (not bytes). ``head_dim`` is explicit because several families (Gemma,
    Qwen3, Llama 3.2) set it independently of ``hidden_size / num_attention_heads``.

    Field meanings beyond the obvious sizes:

    - ``num_layers``: transformer blocks the hidden state passes through (encoder + decoder blocks for
      an encoder-decoder; ``num_encoder_layers`` of them are encoder blocks).
    - ``intermediate_size``: MLP width of a typical block; for a mixture of experts, the width of one
      routed expert. ``dense_intermediate_size`` and ``dense_mlp_layers`` describe the dense-MLP
      blocks of an MoE model (DeepSeek's first ``first_k_dense_replace`` layers), and
      ``shared_expert_intermediate_size`` the always-active shared expert(s) (Qwen-MoE, DeepSeek).
    - ``norms_per_layer``: normalisation operations per block (they save activations), even when they
      have no parameters (OLMo's non-parametric LayerNorm).
    - ``parallel_attention``: attention and MLP read the same block input (GPT-J, Falcon, Phi-2,
      Cohere, GPT-NeoX with ``use_parallel_residual``).
    - ``kv_lora_rank`` / ``q_lora_rank`` / ``qk_rope_head_dim`` / ``v_head_dim``: DeepSeek's multi-head
      latent attention. ``head_dim`` is then the query/key head width (nope + rope part), and
      ``num_key_value_heads`` equals the query heads, as the kernels see them after ``kv_b_proj``.
    """

    model_config = ConfigDict(frozen=True)

    model_type: str
    kind: Literal["decoder", "encoder", "encoder_decoder"] = "decoder"
    hidden_size: int
    num_layers: int
    num_encoder_layers: int = 0
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
    positional: Literal["rope", "learned", "alibi", "relative"]
    parallel_attention: bool = False
    num_experts: int = 0
    experts_per_token: int = 0
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    dense_mlp_layers: int = 0
    dense_intermediate_size: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int | None = None
    attention_dropout: float = 0.0
    hidden_dropout: float = 0.0
    qk_norm: bool = False
    final_logit_softcapping: float | None = None
    tensors: tuple[TensorGroup, ...]
    layer_linears: tuple[LinearLayer, ...]
    vision_tensors: tuple[TensorGroup, ...] = ()
    vision_exact: bool = True
    vision_model_type: str | None = None
    approximate_from: str | None = None
    stored_quantization: StoredQuantization | None = None

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
        """Parameters by component (embeddings, attention, mlp, norms, lm_head; head and vision when the
        model has them) and ``total``."""
        counts: dict[str, int] = {role: 0 for role in BASE_ROLES}
        for group in self.tensors + self.vision_tensors:
            counts[group.role] = counts.get(group.role, 0) + group.parameters
        counts["total"] = sum(counts.values())
        return counts

    @property
    def language_parameters(self) -> int:
        """Parameters of ``tensors``: the language model that fine-tuning trains (no vision tower)."""
        return sum(g.parameters for g in self.tensors)

    @property
    def vision_parameters(self) -> int:
        """Parameters of the vision tower and projector (0 for text-only models)."""
        return sum(g.parameters for g in self.vision_tensors)

    @property
    def total_parameters(self) -> int:
        """Unique parameters held in memory (tied weights once), vision tower included."""
        return self.parameter_counts["total"]

    @property
    def active_parameters(self) -> int:
        """Parameters used per token: for MoE, only ``experts_per_token`` of ``num_experts`` routed
        experts; shared experts, routers, attention and embeddings always count.

        The whole embedding table counts, as in Mistral's and Qwen's published active counts (Mixtral
        12.9B, Qwen1.5-MoE 2.7B); DeepSeek's published figures leave the input embedding out."""
        if not self.num_experts:
            return self.total_parameters
        expert = sum(g.parameters for g in self.tensors if g.expert)
        return self.total_parameters - expert + expert * self.experts_per_token // self.num_experts

    def linear_target_names(self) -> list[str]:
        """Short module names LoRA can target in a decoder block, in block order, without repeats."""
        return list(dict.fromkeys(lin.target_name for lin in self.layer_linears))


# --------------------------------------------------------------------------------------------------
# Reading config values (shared by the builders in engine.families)


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


def _layers(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    """Number of layers, at most :data:`MAX_LAYERS`."""
    value = _size(config, *keys, default=default)
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


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    """A boolean switch; absent or null means the config class's ``default``."""
    value = config.get(key)
    return default if value is None else bool(value)


# --------------------------------------------------------------------------------------------------

SUPPORTED_MODEL_TYPES: tuple[str, ...] = (
    "bert", "bloom", "cohere", "deepseek_v2", "deepseek_v3", "falcon", "gemma", "gemma2", "gemma3",
    "gemma3_text", "gpt2", "gpt_neox", "gptj", "granite", "idefics3", "llama", "llava", "mistral",
    "mixtral", "mllama", "olmo", "olmo2", "olmoe", "opt", "phi", "phi3", "phimoe", "qwen", "qwen2", "qwen2_5_vl",
    "qwen2_moe", "qwen2_vl", "qwen3", "qwen3_moe", "roberta", "stablelm", "starcoder2", "t5",
)
"""``model_type`` values the engine counts exactly (the keys of ``engine.families.BUILDERS``; a test
keeps the two equal)."""


def architecture_from_config(config: dict[str, Any]) -> Architecture:
    """Build the :class:`Architecture` of a Hugging Face ``config.json`` dict.

    Args:
        config: the parsed JSON object. Unknown keys are ignored.

    Raises:
        ConfigError: not a dict, or a needed size is missing, non-integer, zero or negative.
        UnsupportedModelError: ``model_type`` is absent or not in :data:`SUPPORTED_MODEL_TYPES`.
    """
    # Imported here: the builders import this module's data model and readers.
    from engine.families import BUILDERS

    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UnsupportedModelError(
            "config.json has no 'model_type'; supported types: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    builder = BUILDERS.get(model_type)
    if builder is None:
        raise UnsupportedModelError(
            f"model_type '{model_type}' is not supported yet; supported types: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    return _with_quantization(builder(config, model_type), config)


def _with_quantization(arch: Architecture, config: dict[str, Any]) -> Architecture:
    """Attach the checkpoint's stored weight format (``quantization_config``), if any."""
    stored = stored_quantization(config)
    return arch.model_copy(update={"stored_quantization": stored}) if stored else arch


def approximate_architecture(config: dict[str, Any]) -> Architecture:
    """A Llama-style stand-in for a ``model_type`` the engine cannot count exactly.

    Built from the sizes most decoder configs share (``hidden_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
    ``vocab_size``, ``tie_word_embeddings``), looking inside ``text_config`` when the top level has none.
    The result is marked ``approximate_from`` with the real model_type, so every page can say the counts
    are approximate; the checkpoint's own count (engine.checkpoint) is the number to trust.

    Raises:
        ConfigError: the config lacks those sizes (nothing sensible can be estimated).
    """
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a JSON object, got {type(config).__name__}")
    source = config
    if not isinstance(config.get("hidden_size"), int) and isinstance(config.get("text_config"), dict):
        source = config["text_config"]
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings")
    stand_in = {k: source[k] for k in keys if source.get(k) is not None}
    stand_in["model_type"] = "llama"
    try:
        arch = architecture_from_config(stand_in)
    except ConfigError as exc:
        raise ConfigError(
            f"model_type '{config.get('model_type')}' is not supported and its config lacks the usual sizes ({exc})"
        ) from None
    return _with_quantization(arch.model_copy(update={"approximate_from": str(config.get("model_type"))}), config)


def architecture_or_approximation(config: dict[str, Any]) -> tuple[Architecture, str | None]:
    """The exact architecture, or for an unsupported ``model_type`` an approximate one and a notice.

    Raises:
        ConfigError: malformed config, or an unsupported type without the usual sizes (the message says
            which types are supported).
    """
    try:
        return architecture_from_config(config), None
    except UnsupportedModelError as exc:
        if not isinstance(config, dict) or not config.get("model_type"):
            raise
        try:
            arch = approximate_architecture(config)
        except ConfigError:
            raise exc from None
    notice = (
        f"model_type '{arch.approximate_from}' is not counted exactly yet: it is estimated as a Llama-style decoder "
        f"with the same sizes ({arch.total_parameters:,} parameters, approximate). Compare with the checkpoint's "
        "own count on the Model page."
    )
    return arch, notice
