"""Image-text models: llava, gemma3, idefics3, qwen2_vl, qwen2_5_vl and mllama.

The language model is built by the text family's own builder from the nested ``text_config`` (Qwen2-VL
and Qwen2.5-VL keep the text fields at the top level), with missing keys filled by that text config
class's defaults, as transformers does; published configs rely on this (llava-1.5's ``text_config``
holds little more than ``vocab_size``). The vision tower and projector become ``vision_tensors``:
counted in ``total_parameters``, kept out of ``tensors`` (what fine-tuning trains by default).
"""

from __future__ import annotations

from typing import Any, Callable

from engine.model.architecture import Architecture, LinearLayer
from engine.model.config_fields import read_flag, read_size
from engine.errors import ConfigError
import engine.model.families.vision as vision
from engine.model.families.common import dims, embeddings_and_head, linear_tensors, make, norm, tensor, tied
from engine.model.families.llama import FAMILIES, attention_linears, common_fields, gated_mlp, llama_like

# Defaults of the text config classes that image-text configs nest (LlamaConfig, MistralConfig,
# Qwen2Config, Gemma3TextConfig, MllamaTextConfig), applied only to nested text configs.
_TEXT_DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048),
    "mistral": dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                    num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, sliding_window=4096),
    "qwen2": dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768),
    "gemma3_text": dict(vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
                        num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
                        sliding_window=4096),
    "mllama_text_model": dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=40,
                              num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072),
}


def _sub(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"config.json field '{key}' must be a JSON object")
    return value


def _text_config(config: dict[str, Any], default_type: str) -> dict[str, Any]:
    """The nested text config with its class defaults. Tying follows the text config's
    ``tie_word_embeddings`` (transformers 4.x), else the top-level one, else the text class default.
    transformers 5 reads only the top-level flag (default True for Gemma3Config, False for
    Idefics3Config and LlavaConfig); the two agree on every published config, and differ only when a
    text config contradicts the top level."""
    text = _sub(config, "text_config")
    model_type = text.get("model_type") or default_type
    merged = {**_TEXT_DEFAULTS.get(model_type, {}), **text, "model_type": model_type}
    if text.get("tie_word_embeddings") is None and config.get("tie_word_embeddings") is not None:
        merged["tie_word_embeddings"] = config["tie_word_embeddings"]
    return merged


def _language(text: dict[str, Any], allowed: tuple[str, ...]) -> Architecture:
    """The language model of a nested text config, by its family's builder."""
    model_type = text["model_type"]
    if model_type not in allowed:
        raise ConfigError(f"text_config model_type '{model_type}' is not supported here (supported: {', '.join(allowed)})")
    return llama_like(text, model_type)


def _with_vision(lang: Architecture, model_type: str, tensors: list, exact: bool, kind: str) -> Architecture:
    return lang.model_copy(update=dict(model_type=model_type, vision_tensors=tuple(tensors), vision_exact=exact,
                                       vision_model_type=kind))


def _llava(config: dict[str, Any], model_type: str) -> Architecture:
    """LLaVA (``LlavaForConditionalGeneration``): vision tower, ``multi_modal_projector`` (linear_1 from
    the vision width x feature layers to the text width, GELU, linear_2; bias from
    ``multimodal_projector_bias``), language model. LlavaConfig's default tower is CLIP ViT-L/14-336."""
    lang = _language(_text_config(config, "llama"), ("llama", "mistral", "qwen2", "gemma", "gemma2"))
    vc = config.get("vision_config")
    if vc is None:
        vc = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "image_size": 336, "patch_size": 14}
    elif not isinstance(vc, dict):
        raise ConfigError("config.json field 'vision_config' must be a JSON object")
    tower, exact = vision.tower(vc)
    layers = config.get("vision_feature_layer", -2)
    n_feat = len(layers) if isinstance(layers, list) else 1
    vh = read_size(vc, "hidden_size", default=768)
    bias = read_flag(config, "multimodal_projector_bias", True)
    proj = (vision.linear_v("multi_modal_projector.linear_1", vh * n_feat, lang.hidden_size, bias)
            + vision.linear_v("multi_modal_projector.linear_2", lang.hidden_size, lang.hidden_size, bias))
    return _with_vision(lang, model_type, tower + proj, exact, vc.get("model_type", "clip_vision_model"))


def _gemma3(config: dict[str, Any], model_type: str) -> Architecture:
    """Gemma 3 image-text (``Gemma3ForConditionalGeneration``): SigLIP tower (the published configs set
    ``vision_use_head`` false), projector ``mm_input_projection_weight`` (vision x text width) and
    ``mm_soft_emb_norm`` (RMSNorm of the vision width), Gemma 3 text model with tied head."""
    lang = _language(_text_config(config, "gemma3_text"), ("gemma3_text",))
    vc = _sub(config, "vision_config")
    vh = read_size(vc, "hidden_size", default=768)
    proj = [tensor("multi_modal_projector.mm_input_projection_weight", (vh, lang.hidden_size), "vision"),
            tensor("multi_modal_projector.mm_soft_emb_norm", (vh,), "vision")]
    return _with_vision(lang, model_type, vision.siglip(vc) + proj, True, "siglip_vision_model")


def _idefics3(config: dict[str, Any], model_type: str) -> Architecture:
    """Idefics3 (``Idefics3ForConditionalGeneration``, also SmolVLM): SigLIP-style tower without head
    (Idefics3VisionConfig defaults), connector ``modality_projection.proj`` from vision width x
    ``scale_factor``^2 to the text width without bias, Llama text model (Idefics3Config ties nothing
    by default)."""
    lang = _language(_text_config(config, "llama"), ("llama", "mistral"))
    vc = _sub(config, "vision_config")
    vh = read_size(vc, "hidden_size", default=vision.IDEFICS3_VISION_DEFAULTS["hidden_size"])
    scale = read_size(config, "scale_factor", default=2)
    proj = vision.linear_v("connector.modality_projection.proj", vh * scale * scale, lang.hidden_size, bias=False)
    tower = vision.siglip(vc, vision.IDEFICS3_VISION_DEFAULTS, head=False)
    return _with_vision(lang, model_type, tower + proj, True, "idefics3_vision")


def _qwen_vl(config: dict[str, Any], model_type: str) -> Architecture:
    """Qwen2-VL / Qwen2.5-VL: a Qwen2 text model (q/k/v biases; M-RoPE changes no parameter) whose fields
    sit at the top level of the published configs (or in ``text_config``), and the ViT with its merger."""
    text = {**config, **_sub(config, "text_config"), "model_type": "qwen2"}
    lang = llama_like(text, "qwen2")
    vc = _sub(config, "vision_config")
    tower = vision.qwen2_vl(vc) if model_type == "qwen2_vl" else vision.qwen2_5_vl(vc)
    return _with_vision(lang, model_type, tower, True, model_type + "_vision")


def _mllama_text(text: dict[str, Any]) -> Architecture:
    """Mllama's text model: Llama blocks, except the ``cross_attention_layers``, whose ``cross_attn``
    (q/k/v/o, per-head q/k RMSNorms) replaces self-attention and which add two scalar gates; the token
    embedding has 8 extra rows (``vocab_size + 8``) beyond the untied ``lm_head``."""
    d = dims(text)
    cross = text.get("cross_attention_layers") or []
    if not isinstance(cross, list) or any(not isinstance(i, int) or not 0 <= i < d.layers for i in cross):
        raise ConfigError("config.json field 'cross_attention_layers' must list layer indices below num_hidden_layers")
    n_cross, fam = len(set(cross)), FAMILIES["llama"]
    attn = attention_linears({}, fam, d)
    linears: list[LinearLayer] = [lin.model_copy(update={"layers": d.layers - n_cross}) for lin in attn]
    linears += [lin.model_copy(update={"module": lin.module.replace("self_attn", "cross_attn"), "layers": n_cross})
                for lin in attn] if n_cross else []
    inter = read_size(text, "intermediate_size")
    linears += gated_mlp("mlp", d.hidden, inter)
    tie = tied(text, False)
    tensors = (linear_tensors(linears, d.layers) + embeddings_and_head(d.vocab, d.hidden, tie, embed_rows=d.vocab + 8)
               + norm("layer_norms", d.hidden, 2 * d.layers, "weight") + norm("final_norm", d.hidden, 1, "weight")
               + norm("cross_attn.qk_norms", d.head_dim, 2 * n_cross, "weight")
               + [tensor("cross_attn_gates", (1,), "attention", count=2 * n_cross)])
    return make("mllama", text, d, intermediate=inter, tie=tie, tensors=tensors, linears=linears, mlp="gated",
                fused_qkv=False, fused_gate_up=False, sliding_window_layers=0,
                **common_fields(text, fam, "llama"))


def _mllama(config: dict[str, Any], model_type: str) -> Architecture:
    """Llama 3.2 Vision (``MllamaForConditionalGeneration``): tiled ViT, ``multi_modal_projector``
    (``vision_output_dim`` to the text width, with bias), text model with cross-attention layers."""
    lang = _mllama_text(_text_config(config, "mllama_text_model"))
    vc = _sub(config, "vision_config")
    proj = vision.linear_v("multi_modal_projector", read_size(vc, "vision_output_dim", default=7680), lang.hidden_size)
    return _with_vision(lang, model_type, vision.mllama(vc) + proj, True, "mllama_vision_model")


BUILDERS: dict[str, Callable[[dict[str, Any], str], Architecture]] = {
    "llava": _llava,
    "gemma3": _gemma3,
    "idefics3": _idefics3,
    "qwen2_vl": _qwen_vl,
    "qwen2_5_vl": _qwen_vl,
    "mllama": _mllama,
}
