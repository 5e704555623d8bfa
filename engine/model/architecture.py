"""Model architecture from a Hugging Face ``config.json`` (no network, no torch, no weights).

The first step of the data flow ``config -> architecture -> scenario -> estimate -> page``. A config dict
becomes an :class:`Architecture`: the sizes that memory formulas need, the shape of every parameter tensor
(grouped by role), and the linear layers of one decoder block by module name, because LoRA targets and
activation memory are computed from them.

Parameter counts are exact: they are sums over the tensor shapes that transformers' modelling code
creates for that ``model_type`` (transformers 4.4x-5.x, ``modeling_<type>.py``), with tied embeddings
counted once and non-persistent buffers (rotary tables, GPT-2's causal mask, DeepSeek-V3's
``e_score_correction_bias``) not counted, which is what ``sum(p.numel() for p in model.parameters())``
returns. The builders per ``model_type`` live in :mod:`engine.model.families`, the config readers they share in
:mod:`engine.model.config_fields`, and :func:`~engine.model.build.architecture_from_config` dispatches to them; this
module holds the data model.

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

import math

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, computed_field, model_validator

from engine.memo import by_identity
from engine.model.quantization import StoredQuantization

Role = Literal["embeddings", "attention", "mlp", "norms", "lm_head", "head", "vision"]
"""Component a parameter tensor is counted under. Routers and experts count as ``mlp``; ``head`` is a
task head besides the output projection (BERT's masked-LM transform and output bias); ``vision`` is the
vision tower and projector of a multimodal model."""

BASE_ROLES: tuple[Role, ...] = ("embeddings", "attention", "mlp", "norms", "lm_head")

SdpaMask = Literal["when_needed", "always", "none"]
"""How the family's transformers attention calls ``F.scaled_dot_product_attention`` in training (transformers 5.x):
``when_needed`` = through ``integrations/sdpa_attention.py`` with ``is_causal`` and no mask unless the batch needs
one (a sliding window within reach, a key/value prefix, padding); ``always`` = an explicit mask on every call
(Falcon materialises its causal mask, ``allow_is_causal_skip=False``; T5 adds its position bias as a float mask);
``none`` = the class has no SDPA path (``_supports_sdpa = False``: Gemma 2's soft-capping, BLOOM's ALiBi), so it
runs eager attention."""

SdpaKv = Literal["enable_gqa", "expanded", "broadcast"]
"""How grouped key/value heads reach SDPA: ``enable_gqa`` = transformers' ``use_gqa_in_sdpa`` (``enable_gqa=True``
without a mask and with head_dim <= 256, else ``repeat_kv`` copies them to every query head); ``expanded`` = the
family copies them to every head itself; ``broadcast`` = one key/value head passed as it is, which only SDPA's math
kernel takes. Falcon called SDPA those two ways (new decoder architecture / multi-query) up to transformers 5.24; since
5.25.0 it goes through the shared attention interface like the other families (``enable_gqa``), and no bundled family
uses the other two now."""
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
        return math.prod(self.shape)  # in C: the fit matrices ask this tens of thousands of times per page

    @property
    def parameters(self) -> int:
        """Elements of all ``count`` tensors."""
        return math.prod(self.shape) * self.count


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
    - Structure facts, set by each family builder (:func:`engine.model.families.common.make` requires them) and read
      by the memory, time and checkpoint code instead of the ``model_type``: ``fused_qkv`` (q, k and v are one
      projection: GPT-2's and Qwen v1's ``c_attn``, Phi-3's ``qkv_proj``, GPT-NeoX/Falcon/BLOOM ``query_key_value``),
      ``fused_gate_up`` (the gated MLP's gate and up are one projection: Phi-3's ``gate_up_proj``),
      ``attention_norm_readers`` / ``mlp_norm_readers`` (the linear modules that read the attention / MLP norm's
      output: under autocast each saves its own 16-bit copy of it), ``sliding_window_layers`` (blocks whose
      attention and KV cache are capped at ``sliding_window``: every one for Mistral, alternate ones for Gemma 2,
      five of six for Gemma 3, none where a config's window is switched off), ``positional`` (rope, learned,
      alibi, relative), ``eager_softmax_fp32`` (eager attention takes its softmax in fp32; GPT-2's does not) and
      ``flash_rotary`` (the modeling code applies RoPE with flash-attn's fused rotary kernel when flash-attn is
      installed: Qwen v1's remote code, :mod:`engine.model.families.qwen`; the time model's kernel count reads it) and
      ``checkpoint_buffer_elements`` (buffers a checkpoint stores that transformers does not load as parameters:
      GPT-2's per-block ``attn.bias`` causal masks, layers x positions^2; :mod:`engine.model.checkpoint`).
    - ``sdpa_mask`` / ``sdpa_kv``: how the family's attention code calls SDPA (:data:`SdpaMask`, :data:`SdpaKv`),
      set by each family builder; :func:`engine.memory.activations.attention_choice` decides the kernel from them.
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
    fused_qkv: bool
    fused_gate_up: bool
    attention_norm_readers: int
    mlp_norm_readers: int
    sliding_window_layers: int
    eager_softmax_fp32: bool = True
    flash_rotary: bool = False
    checkpoint_buffer_elements: int = 0
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
    sdpa_mask: SdpaMask = "when_needed"
    sdpa_kv: SdpaKv = "enable_gqa"
    tensors: tuple[TensorGroup, ...]
    layer_linears: tuple[LinearLayer, ...]
    vision_tensors: tuple[TensorGroup, ...] = ()
    vision_exact: bool = True
    vision_model_type: str | None = None
    approximate_from: str | None = None
    stored_quantization: StoredQuantization | None = None

    @model_validator(mode="after")
    def _routed_experts_exist(self) -> "Architecture":
        # A router cannot pick more experts per token than there are (MixtralSparseMoeBlock's torch.topk would fail);
        # accepting it would give more active than total expert parameters per token.
        if self.num_experts and self.experts_per_token > self.num_experts:
            raise ValueError(f"{self.experts_per_token} experts per token (num_experts_per_tok) but only "
                             f"{self.num_experts} experts")
        return self

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
        return dict(_parameter_counts(self))  # a copy: the cached dict is shared

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
        return _parameter_counts(self)["total"]

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


@by_identity()
def _parameter_counts(arch: Architecture) -> dict[str, int]:
    """:attr:`Architecture.parameter_counts`, summed once per architecture (a fit matrix asks it of every row)."""
    counts: dict[str, int] = {role: 0 for role in BASE_ROLES}
    for group in arch.tensors + arch.vision_tensors:
        counts[group.role] = counts.get(group.role, 0) + group.parameters
    counts["total"] = sum(counts.values())
    return counts
