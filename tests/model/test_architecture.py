"""Parameter accounting against official counts (../shared/reference/configs/param_counts.json)."""

import pytest

from engine.model.build import SUPPORTED_MODEL_TYPES, architecture_from_config
from engine.errors import ConfigError, UnsupportedModelError
from reference import param_counts, reference_config, require_reference

require_reference()

COUNTS = param_counts()


@pytest.mark.parametrize("repo_id", sorted(COUNTS))
def test_total_equals_unique_parameters(repo_id):
    # Source: param_counts.json 'unique_parameters' (what transformers holds in memory).
    arch = architecture_from_config(reference_config(repo_id))
    assert arch.total_parameters == COUNTS[repo_id]["unique_parameters"]
    counts = arch.parameter_counts
    assert sum(v for k, v in counts.items() if k != "total") == counts["total"]


def test_checkpoint_differences_are_explained():
    # Qwen3-0.6B: the checkpoint also stores the tied lm_head (vocab x hidden = 151,936 x 1,024).
    qwen = architecture_from_config(reference_config("Qwen/Qwen3-0.6B"))
    ref = COUNTS["Qwen/Qwen3-0.6B"]
    assert qwen.tie_word_embeddings
    assert ref["checkpoint_total"] - ref["unique_parameters"] == qwen.vocab_size * qwen.hidden_size == 155_582_464
    # GPT-2: 12 non-persistent attn.bias buffers of n_positions x n_positions (1,024 x 1,024) in the checkpoint.
    gpt2 = architecture_from_config(reference_config("openai-community/gpt2"))
    ref = COUNTS["openai-community/gpt2"]
    assert ref["checkpoint_total"] - ref["unique_parameters"] == gpt2.num_layers * gpt2.max_position_embeddings**2


def test_llama_3_1_8b_components_by_hand():
    # Llama-3.1-8B: V=128,256, h=4,096, L=32, 32 heads, 8 KV heads, head_dim 128, I=14,336, untied.
    arch = architecture_from_config(reference_config("meta-llama/Llama-3.1-8B"))
    c = arch.parameter_counts
    assert c["embeddings"] == 128_256 * 4_096 == c["lm_head"]
    assert c["attention"] == 32 * (4_096 * 4_096 * 2 + 4_096 * 1_024 * 2)  # q,o full; k,v grouped-query
    assert c["mlp"] == 32 * 3 * 4_096 * 14_336
    assert c["norms"] == 32 * 2 * 4_096 + 4_096
    assert arch.kv_out == 1_024 and arch.q_out == 4_096


def test_qwen2_has_qkv_bias_and_gemma2_four_norms():
    q = architecture_from_config(reference_config("Qwen/Qwen2.5-0.5B"))
    biases = {g.name: g.parameters for g in q.tensors if g.name.endswith(".bias")}
    # Qwen2Attention: q/k/v with bias, o_proj without (896 = 14 x 64, kv 2 x 64 = 128).
    assert biases == {"self_attn.q_proj.bias": 24 * 896, "self_attn.k_proj.bias": 24 * 128, "self_attn.v_proj.bias": 24 * 128}
    g = architecture_from_config(reference_config("google/gemma-2-2b"))
    assert g.parameter_counts["norms"] == 26 * 4 * 2_304 + 2_304
    assert g.head_dim == 256 and g.q_out == 2_048  # explicit head_dim, not 2,304 / 8


def test_mixtral_active_parameters():
    arch = architecture_from_config(reference_config("mistralai/Mixtral-8x7B-v0.1"))
    expert = 3 * 4_096 * 14_336  # w1, w2, w3 of one expert
    assert arch.total_parameters - arch.active_parameters == 32 * 6 * expert  # 6 of 8 experts idle per token
    # Mistral AI's announcement: "12.9B active parameters per token" of 46.7B.
    assert round(arch.active_parameters / 1e9, 1) == 12.9


def test_phi3_fused_projections():
    arch = architecture_from_config(reference_config("microsoft/Phi-3-mini-4k-instruct"))
    assert arch.linear_target_names() == ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    qkv = next(lin for lin in arch.layer_linears if lin.target_name == "qkv_proj")
    assert qkv.out_features == 3 * 3_072


def test_unsupported_and_missing_fields():
    with pytest.raises(UnsupportedModelError, match="supported types: .*llama"):
        architecture_from_config({"model_type": "bogus"})
    with pytest.raises(UnsupportedModelError):
        architecture_from_config({"hidden_size": 8})
    base = reference_config("meta-llama/Llama-3.2-1B")
    for field, value in [("hidden_size", 0), ("hidden_size", -5), ("num_hidden_layers", True), ("vocab_size", "big"),
                         ("vocab_size", 10**30), ("hidden_size", 4096.0)]:
        with pytest.raises(ConfigError, match=field):
            architecture_from_config({**base, field: value})
    missing = {k: v for k, v in base.items() if k != "intermediate_size"}
    with pytest.raises(ConfigError, match="intermediate_size"):
        architecture_from_config(missing)
    with pytest.raises(ConfigError, match="multiple"):
        architecture_from_config({**base, "num_key_value_heads": 7})
    with pytest.raises(ConfigError):
        architecture_from_config(["not", "a", "dict"])  # type: ignore[arg-type]
    assert {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "gpt2"} <= set(SUPPORTED_MODEL_TYPES)
