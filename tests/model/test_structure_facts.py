"""Structure facts on the Architecture, set by every family builder (engine.model.families.common.make requires them)
and read by the memory, time and checkpoint code instead of the model_type.

Each fact is checked against the module shapes the builder itself lists (a builder that claims fused q/k/v must have
one attention projection from the hidden size to q + k + v), and on named models; a new family without a config here
fails :func:`test_every_builder_is_covered`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.memory.estimate import estimate_memory
from engine.memory.inference import sliding_window_layers
from engine.model.architecture import Architecture
from engine.model.build import SUPPORTED_MODEL_TYPES, architecture_from_config
from engine.model.catalog import catalog_model
from engine.model.families import BUILDERS
from engine.model.families.common import norm_readers
from engine.scenario.training import Scenario

ROOT = Path(__file__).resolve().parents[2]
IDEFICS3 = {"model_type": "idefics3", "scale_factor": 2,
            "text_config": {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                            "intermediate_size": 96, "vocab_size": 100},
            "vision_config": {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "image_size": 32, "patch_size": 8}}


def _configs() -> dict[str, dict]:
    """One config per model type: the bundled catalog, the test fixtures, and a small Idefics3."""
    out: dict[str, dict] = {"idefics3": IDEFICS3}
    for path in sorted((ROOT / "data/models").glob("*.json")) + sorted((ROOT / "tests/fixtures/configs").glob("*.json")):
        raw = json.loads(path.read_text(encoding="utf-8"))
        cfg = raw.get("config", raw)
        out.setdefault(cfg["model_type"], cfg)
    return out


CONFIGS = _configs()


def test_supported_types_are_the_builders():
    assert SUPPORTED_MODEL_TYPES == tuple(sorted(BUILDERS))


def test_every_builder_is_covered():
    assert set(BUILDERS) <= set(CONFIGS), "add a config of the new family to data/models or tests/fixtures/configs"


def _fused_qkv_by_shape(a: Architecture) -> bool:
    """An attention projection from the hidden size to q + k + v (or a multiple of 3 x hidden for a model whose kv
    heads are all heads)."""
    want = a.q_out + 2 * a.kv_out
    return any(lin.role == "attention" and lin.in_features == a.hidden_size and lin.out_features == want
               for lin in a.layer_linears)


def _fused_gate_up_by_shape(a: Architecture) -> bool:
    """One MLP linear reads the hidden state and writes twice what its module's output projection reads (gate and up
    in one matrix), where a gated MLP otherwise has two readers (gate_proj, up_proj) and a plain one writes the width
    its output projection reads."""
    groups: dict[str, list] = {}
    for lin in a.layer_linears:
        if lin.role == "mlp" and lin.out_features != a.num_experts:  # leave routers out
            groups.setdefault(lin.module.rpartition(".")[0], []).append(lin)
    for lins in groups.values():
        readers = [x for x in lins if x.in_features == a.hidden_size and x.out_features != a.hidden_size]
        outputs = [x for x in lins if x.out_features == a.hidden_size]
        if len(readers) == 1 and outputs and readers[0].out_features == 2 * outputs[0].in_features:
            return True
    return False


@pytest.mark.parametrize("model_type", sorted(BUILDERS))
def test_every_builder_sets_every_structure_fact(model_type):
    a = architecture_from_config(CONFIGS[model_type])
    assert a.fused_qkv == _fused_qkv_by_shape(a), "fused_qkv must match the builder's own attention linears"
    assert a.fused_gate_up == _fused_gate_up_by_shape(a), "fused_gate_up must match the builder's own MLP linears"
    assert (a.attention_norm_readers, a.mlp_norm_readers) == norm_readers(a.mlp, a.fused_qkv, a.fused_gate_up,
                                                                          a.num_experts)
    assert 0 <= a.sliding_window_layers <= a.num_layers
    assert a.sliding_window or a.sliding_window_layers == 0
    assert a.positional in ("rope", "learned", "alibi", "relative")


def test_make_refuses_a_builder_that_omits_a_fact():
    from engine.model.families.common import dims, make

    cfg = CONFIGS["llama"]
    with pytest.raises(TypeError, match="fused_qkv"):
        make("llama", cfg, dims(cfg), intermediate=1, tie=False, tensors=[], linears=[], fused_gate_up=False,
             sliding_window_layers=0, mlp="gated", norm="rmsnorm", norms_per_layer=2, activation="silu",
             positional="rope")


@pytest.mark.parametrize(("model_type", "fused", "readers"), [
    ("qwen", True, (1, 2)),   # Qwen v1: c_attn fuses q/k/v; w1 and w2 read the MLP norm (modeling_qwen.py)
    ("phi3", True, (1, 1)),   # qkv_proj and gate_up_proj
    ("gpt2", True, (1, 1)),   # c_attn, plain MLP
    ("llama", False, (3, 2)),
    ("mixtral", False, (3, 1)),  # the router reads the MLP norm
])
def test_named_families(model_type, fused, readers):
    a = architecture_from_config(CONFIGS[model_type])
    assert a.fused_qkv is fused and (a.attention_norm_readers, a.mlp_norm_readers) == readers


@pytest.mark.parametrize(("repo", "layers"), [
    ("mistralai/Mistral-7B-v0.1", 32),        # every layer (modeling_mistral.py)
    ("google/gemma-2-2b", 13),                # 26 layers, the even ones slide (modeling_gemma2.py)
    ("google/gemma-3-1b-pt", 22),             # 26 layers, every sixth global (modeling_gemma3.py)
    ("Qwen/Qwen2.5-7B", 0),                   # ships sliding_window with use_sliding_window false
])
def test_sliding_window_pattern(repo, layers):
    a = architecture_from_config(catalog_model(repo).config)
    assert a.sliding_window_layers == sliding_window_layers(a) == layers


QWEN_7B_TRACED_ACTIVATIONS = 18_138_359_296
"""Bytes of activations (saved tensors, logits, loss) at the peak of a traced step of Qwen-7B-Chat: full fine-tuning,
mixed bf16, 1 x 2,048 tokens, SDPA (flash), no checkpointing, fused AdamW. scripts/trace_fused_qkv.py traced it
(torch 2.13.0+cpu, transformers 5.24.0: transformers' Llama block with q/k/v fused into one c_attn(hidden, 3 x hidden,
bias), Qwen-7B's sizes; 7,721,324,544 parameters, Qwen-7B's published count). With q/k/v apart the same trace gives
19,212,101,120 B: fusing saves one 16-bit copy of the norm output per projection and layer."""


def test_qwen_v1_activations_match_the_trace():
    a = architecture_from_config(catalog_model("Qwen/Qwen-7B-Chat").config)
    sc = Scenario.build(method="full", precision="amp_bf16", seq_len=2048, micro_batch_size=1, attention="sdpa",
                        gradient_checkpointing=False, optimizer="adamw_fused")
    parts = estimate_memory(a, sc).components
    activations = sum(parts.get(k, 0.0) for k in ("activations", "recomputed_layer", "logits_loss", "logits_forward",
                                                   "gradient_temporaries"))
    assert activations == pytest.approx(QWEN_7B_TRACED_ACTIVATIONS, rel=0.03)
