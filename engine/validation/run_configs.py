"""Configs of the published runs' models that the bundled catalog does not carry, written from their published
architectures (each with its source). Used only to express published rows (``data/large_runs.csv``, and the rows of
``data/throughput_measurements.csv`` whose model is not bundled); the product's model list stays the catalog's.

Each entry is a transformers-style ``config.json`` (the keys the engine's builders read) for a ``model_type`` the
engine builds; where the architecture has no exact builder, the nearest one with the same GEMM shapes is used and the
difference is said in ``note``.
"""

from __future__ import annotations

from engine.model.architecture import Architecture
from engine.errors import CatalogError
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model


def _llama(layers: int, hidden: int, heads: int, kv_heads: int, ffn: int, vocab: int, tied: bool) -> dict:
    return {"model_type": "llama", "hidden_size": hidden, "intermediate_size": ffn, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv_heads, "vocab_size": vocab,
            "tie_word_embeddings": tied, "hidden_act": "silu", "max_position_embeddings": 131072}


NANOTRON = {
    "1.34": _llama(16, 2048, 32, 32, 8192, 131072, True),
    "3.57": _llama(28, 3072, 32, 32, 8192, 131072, True),
    "8.86": _llama(32, 4096, 32, 32, 14336, 131072, False),
    "80": _llama(80, 8192, 64, 64, 28672, 131072, False),
}
"""nanotron's scaling-benchmark models (the ultrascale playbook's heatmap): ``model_configs`` (layers, hidden, heads,
intermediate) of huggingface/nanotron ``scripts/scaling_benchmarks.py`` @ 0e0a27ea, with its ``VOCAB_SIZES =
[131072]``, ``NUM_KEY_VALUE_HEADS = None`` (as many KV heads as heads) and ``tie_word_embeddings = intermediate_size <
10_000``. Its ``estimate_num_params`` gives 1.34, 3.57, 8.86 and 79.98 B for them: the sizes the figure prints."""

CONFIGS: dict[str, tuple[dict, str]] = {
    "meta-llama/Llama-2-70b-hf": (_llama(80, 8192, 64, 8, 28672, 32000, False),
                                  "Llama-2-70B config.json (hf.co/meta-llama/Llama-2-70b-hf): 80 layers, 8192 wide, "
                                  "64 heads, 8 KV heads, SwiGLU 28672, vocab 32000"),
    "mistralai/Mixtral-8x22B-v0.1": ({"model_type": "mixtral", "hidden_size": 6144, "intermediate_size": 16384,
                                      "num_hidden_layers": 56, "num_attention_heads": 48, "num_key_value_heads": 8,
                                      "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32768,
                                      "tie_word_embeddings": False, "max_position_embeddings": 65536},
                                     "Mixtral-8x22B-v0.1 config.json (hf.co/mistralai/Mixtral-8x22B-v0.1): 56 layers, "
                                     "6144 wide, 48 heads, 8 KV heads, 8 experts of 16384, top 2, vocab 32768"),
    "Qwen/Qwen2.5-32B": ({"model_type": "qwen2", "hidden_size": 5120, "intermediate_size": 27648,
                          "num_hidden_layers": 64, "num_attention_heads": 40, "num_key_value_heads": 8,
                          "vocab_size": 152064, "tie_word_embeddings": False, "hidden_act": "silu",
                          "max_position_embeddings": 131072},
                         "Qwen2.5-32B config.json (hf.co/Qwen/Qwen2.5-32B): 64 layers, 5120 wide, 40 heads, 8 KV heads, "
                         "SwiGLU 27648, vocab 152064, untied; the model card's 32.5B parameters"),
    "Qwen/Qwen-72B-Chat": ({"model_type": "qwen", "hidden_size": 8192, "intermediate_size": 49152, "num_hidden_layers": 80,
                            "num_attention_heads": 64, "kv_channels": 128, "vocab_size": 152064, "no_bias": True,
                            "tie_word_embeddings": False, "layer_norm_epsilon": 1e-06, "rotary_emb_base": 1000000,
                            "rotary_pct": 1.0, "max_position_embeddings": 32768, "seq_length": 32768,
                            "attn_dropout_prob": 0.0, "emb_dropout_prob": 0.0},
                           "Qwen-72B-Chat config.json (hf.co/Qwen/Qwen-72B-Chat, remote code QWenLMHeadModel): 80 layers, "
                           "8192 wide, 64 heads of 128 (no GQA), intermediate_size 49152 (w1 and w2 of 24576 each), "
                           "vocab 152064, untied: 72.3B parameters"),
    "nvidia/Nemotron-4-340B-Base": ({"model_type": "starcoder2", "hidden_size": 18432, "intermediate_size": 73728,
                                     "num_hidden_layers": 96, "num_attention_heads": 96, "num_key_value_heads": 8,
                                     "vocab_size": 256000, "tie_word_embeddings": False, "use_bias": False,
                                     "max_position_embeddings": 4096, "hidden_act": "gelu_pytorch_tanh"},
                                    "Nemotron-4 340B (Nvidia 2024, arXiv:2406.11704, Table 1: 96 layers, hidden 18432, "
                                    "96 heads, 8 KV heads, FFN 73728 squared-ReLU, vocab 256000, RoPE), built as a "
                                    "StarCoder2-style decoder (LayerNorm, GQA, non-gated MLP): the same GEMMs"),
}


def run_architecture(model: str, params_b: str = "") -> tuple[Architecture, str] | None:
    """The architecture of a large run's model outside the catalog, with the note saying where it comes from; None when
    this module has no config for it. ``params_b``: the row's size (selects nanotron's benchmark model)."""
    if "nanotron" in model.lower():
        cfg = NANOTRON.get(params_b.strip())
        if cfg is None:
            return None
        return architecture_from_config(cfg), ("nanotron benchmark config (scripts/scaling_benchmarks.py @ 0e0a27ea: "
                                               f"{cfg['num_hidden_layers']} layers, {cfg['hidden_size']} wide, vocab 131072)")
    if model in CONFIGS:
        cfg, note = CONFIGS[model]
        return architecture_from_config(cfg), note
    return None


def row_architecture(repo_id: str) -> tuple[Architecture, str]:
    """The architecture and display name of a throughput row's model: the bundled catalog's, else a config of
    :data:`CONFIGS` (its repo id as the name).

    Raises:
        CatalogError: neither has ``repo_id``.
    """
    try:
        model = catalog_model(repo_id)
    except CatalogError:
        if repo_id not in CONFIGS:
            raise
        return architecture_from_config(CONFIGS[repo_id][0]), repo_id.split("/")[-1]
    return architecture_from_config(model.config), model.name
