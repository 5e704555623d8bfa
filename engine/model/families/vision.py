"""Vision towers of image-text models, as parameter tensors (role ``vision``).

Each function mirrors one vision model of transformers and fills missing config keys with that vision
config class's defaults (as transformers does): CLIP and SigLIP (``modeling_clip.py``,
``modeling_siglip.py``), Idefics3's SigLIP variant, Qwen2-VL's and Qwen2.5-VL's ViT with its patch
merger, and Mllama's tiled ViT. A tower of another ``model_type`` is approximated as a CLIP-style ViT
from its sizes (:func:`tower`, exact=False).
"""

from __future__ import annotations

from typing import Any

from engine.model.architecture import TensorGroup
from engine.model.config_fields import read_layers, read_size
from engine.errors import ConfigError
from engine.model.families.common import NormParams, tensor


def _v(config: dict[str, Any], key: str, default: int) -> int:
    """A vision size, the config class's default when absent."""
    return read_size(config, key, default=default)


def _square(config: dict[str, Any], key: str, default: int) -> int:
    """Image or patch size: an int, or a [height, width] pair (square in every published tower)."""
    value = config.get(key, default)
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    return read_size({key: value}, key)


def linear_v(name: str, in_f: int, out_f: int, bias: bool = True, count: int = 1) -> list[TensorGroup]:
    """An ``nn.Linear`` of the vision side: weight (marked linear) and bias."""
    groups = [tensor(name, (out_f, in_f), "vision", count=count, linear=True)]
    if bias:
        groups.append(tensor(name + ".bias", (out_f,), "vision", count=count))
    return groups


def norm_v(name: str, width: int, count: int, params: NormParams = "weight_bias") -> list[TensorGroup]:
    """Vision norms: LayerNorm (weight and bias) or RMSNorm (weight)."""
    return [tensor(name, (width,), "vision", count=count * (2 if params == "weight_bias" else 1))]


def vit_layers(prefix: str, h: int, inter: int, layers: int, qkv_bias: bool = True) -> list[TensorGroup]:
    """``layers`` pre-norm ViT blocks: q/k/v/out projections, two LayerNorms, fc1/fc2 with bias."""
    return (linear_v(f"{prefix}.self_attn.qkvo", h, h, qkv_bias, count=4 * layers)
            + norm_v(f"{prefix}.layer_norms", h, 2 * layers)
            + linear_v(f"{prefix}.mlp.fc1", h, inter, count=layers) + linear_v(f"{prefix}.mlp.fc2", inter, h, count=layers))


def clip(vc: dict[str, Any]) -> list[TensorGroup]:
    """``CLIPVisionModel``: class embedding, patch conv without bias, (patches + 1) learned positions,
    ``pre_layrnorm``, encoder, ``post_layernorm`` (CLIPVisionConfig defaults: 768/3072/12 layers,
    image 224, patch 32, 3 channels)."""
    h, inter = _v(vc, "hidden_size", 768), _v(vc, "intermediate_size", 3072)
    layers, ch = read_layers(vc, "num_hidden_layers", default=12), _v(vc, "num_channels", 3)
    image, patch = _square(vc, "image_size", 224), _square(vc, "patch_size", 32)
    return [
        tensor("vision.class_embedding", (h,), "vision"),
        tensor("vision.patch_embedding", (h, ch, patch, patch), "vision"),
        tensor("vision.position_embedding", ((image // patch) ** 2 + 1, h), "vision"),
        *norm_v("vision.pre_post_layernorm", h, 2),
        *vit_layers("vision.encoder", h, inter, layers),
    ]


def siglip(vc: dict[str, Any], defaults: dict[str, int] | None = None, head: bool | None = None) -> list[TensorGroup]:
    """``SiglipVisionModel`` (also Idefics3's vision model, with ``defaults``): patch conv with bias,
    one learned position per patch, encoder, ``post_layernorm``, and with ``vision_use_head`` (default
    True) the attention-pooling head: probe, ``nn.MultiheadAttention``, LayerNorm, MLP."""
    dv = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12, "image_size": 224,
          "patch_size": 16, **(defaults or {})}
    h, inter = _v(vc, "hidden_size", dv["hidden_size"]), _v(vc, "intermediate_size", dv["intermediate_size"])
    layers, ch = read_layers(vc, "num_hidden_layers", default=dv["num_hidden_layers"]), _v(vc, "num_channels", 3)
    image, patch = _square(vc, "image_size", dv["image_size"]), _square(vc, "patch_size", dv["patch_size"])
    groups = [
        tensor("vision.patch_embedding", (h, ch, patch, patch), "vision"),
        tensor("vision.patch_embedding.bias", (h,), "vision"),
        tensor("vision.position_embedding", ((image // patch) ** 2, h), "vision"),
        *vit_layers("vision.encoder", h, inter, layers),
        *norm_v("vision.post_layernorm", h, 1),
    ]
    use_head = vc.get("vision_use_head", True) if head is None else head
    if use_head:
        groups += [tensor("vision.head.probe", (1, 1, h), "vision"), *linear_v("vision.head.attention.in_proj", h, 3 * h),
                   *linear_v("vision.head.attention.out_proj", h, h), *norm_v("vision.head.layernorm", h, 1),
                   *linear_v("vision.head.mlp.fc1", h, inter), *linear_v("vision.head.mlp.fc2", inter, h)]
    return groups


IDEFICS3_VISION_DEFAULTS = {"hidden_size": 1152, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "image_size": 224, "patch_size": 32}
"""Idefics3VisionConfig defaults (a SigLIP without pooling head)."""


def qwen2_vl(vc: dict[str, Any]) -> list[TensorGroup]:
    """Qwen2-VL's ``Qwen2VisionTransformerPretrainedModel``: Conv3d patch embedding (temporal x patch x
    patch, no bias), ``depth`` blocks (LayerNorms, fused qkv and proj with bias, fc1/fc2 of
    ``embed_dim x mlp_ratio``), and the patch merger (LayerNorm ``ln_q``, two linears from
    ``embed_dim x merge^2`` to the text ``hidden_size``). Qwen2VLVisionConfig defaults."""
    e, depth = _v(vc, "embed_dim", 1280), read_layers(vc, "depth", default=32)
    out, ratio = _v(vc, "hidden_size", 3584), _v(vc, "mlp_ratio", 4)
    ch, patch = _v(vc, "in_channels", 3), _v(vc, "patch_size", 14)
    t, merge = _v(vc, "temporal_patch_size", 2), _v(vc, "spatial_merge_size", 2)
    m = e * merge * merge
    return [
        tensor("visual.patch_embed", (e, ch, t, patch, patch), "vision"),
        *norm_v("visual.blocks.norms", e, 2 * depth),
        *linear_v("visual.blocks.attn.qkv", e, 3 * e, count=depth), *linear_v("visual.blocks.attn.proj", e, e, count=depth),
        *linear_v("visual.blocks.mlp.fc1", e, e * ratio, count=depth),
        *linear_v("visual.blocks.mlp.fc2", e * ratio, e, count=depth),
        *norm_v("visual.merger.ln_q", e, 1), *linear_v("visual.merger.mlp.0", m, m), *linear_v("visual.merger.mlp.2", m, out),
    ]


def qwen2_5_vl(vc: dict[str, Any]) -> list[TensorGroup]:
    """Qwen2.5-VL's vision tower: like Qwen2-VL's but with RMSNorms, a gated MLP with bias
    (``intermediate_size``) and the merger projecting to ``out_hidden_size``. Window attention
    (``fullatt_block_indexes``) changes no parameter. Qwen2_5_VLVisionConfig defaults."""
    e, depth = _v(vc, "hidden_size", 3584), read_layers(vc, "depth", default=32)
    inter, out = _v(vc, "intermediate_size", 3420), _v(vc, "out_hidden_size", 3584)
    ch, patch = _v(vc, "in_channels", 3), _v(vc, "patch_size", 14)
    t, merge = _v(vc, "temporal_patch_size", 2), _v(vc, "spatial_merge_size", 2)
    m = e * merge * merge
    return [
        tensor("visual.patch_embed", (e, ch, t, patch, patch), "vision"),
        *norm_v("visual.blocks.norms", e, 2 * depth, "weight"),
        *linear_v("visual.blocks.attn.qkv", e, 3 * e, count=depth), *linear_v("visual.blocks.attn.proj", e, e, count=depth),
        *linear_v("visual.blocks.mlp.gate_up_proj", e, inter, count=2 * depth),
        *linear_v("visual.blocks.mlp.down_proj", inter, e, count=depth),
        *norm_v("visual.merger.ln_q", e, 1, "weight"), *linear_v("visual.merger.mlp.0", m, m), *linear_v("visual.merger.mlp.2", m, out),
    ]


_MLLAMA_RATIOS = 8
"""Default ``supported_aspect_ratios`` of MllamaVisionConfig: [1,1] [1,2] [1,3] [1,4] [2,1] [2,2] [3,1] [4,1]."""


def mllama(vc: dict[str, Any]) -> list[TensorGroup]:
    """``MllamaVisionModel``: class embedding, patch conv without bias, gated position embedding with a
    per-aspect-ratio tile embedding, gated pre/post tile position embeddings, pre/post LayerNorms, a
    local encoder (attention without bias) and a global encoder whose layers add two scalar gates."""
    h, inter = _v(vc, "hidden_size", 1280), _v(vc, "intermediate_size", 5120)
    local, glob = read_layers(vc, "num_hidden_layers", default=32), read_layers(vc, "num_global_layers", default=8)
    ch, image, patch = _v(vc, "num_channels", 3), _square(vc, "image_size", 448), _square(vc, "patch_size", 14)
    tiles = _v(vc, "max_num_tiles", 4)
    ratios = vc.get("supported_aspect_ratios")
    if ratios is not None and not isinstance(ratios, list):
        raise ConfigError("config.json field 'supported_aspect_ratios' must be a list")
    ids = (len(ratios) if ratios else _MLLAMA_RATIOS) + 1  # aspect-ratio ids start at 1; 0 is padding
    positions = (image // patch) ** 2 + 1
    return [
        tensor("vision.class_embedding", (h,), "vision"),
        tensor("vision.patch_embedding", (h, ch, patch, patch), "vision"),
        tensor("vision.gates", (1,), "vision", count=3 + 2 * glob),
        tensor("vision.gated_positional_embedding", (positions, h), "vision"),
        tensor("vision.gated_positional_embedding.tile_embedding", (ids, tiles * positions * h), "vision"),
        tensor("vision.pre_post_tile_positional_embedding", (ids, tiles * h), "vision", count=2),
        *norm_v("vision.layernorm_pre_post", h, 2),
        *vit_layers("vision.transformer", h, inter, local, qkv_bias=False),
        *vit_layers("vision.global_transformer", h, inter, glob, qkv_bias=False),
    ]


def tower(vc: dict[str, Any]) -> tuple[list[TensorGroup], bool]:
    """The vision tower of a llava-style ``vision_config`` and whether its count is exact: CLIP or SigLIP
    exactly; another ``model_type`` approximated as a CLIP-style ViT of its sizes."""
    kind = vc.get("model_type", "clip_vision_model")
    if kind == "clip_vision_model":
        return clip(vc), True
    if kind == "siglip_vision_model":
        return siglip(vc), True
    return clip(vc), False
