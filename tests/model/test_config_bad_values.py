"""A hand-edited or hostile config.json (issue 25 acceptance: no traceback, no silent wrong number): a key given twice
with different values, a flag written as a string, an optional size of the wrong type, a huge count, more experts per
token than experts. Each is a ConfigError naming the key, on one line; the catalog's real configs still build.

Found by fuzzing every field of every bundled and fixture config with booleans, strings, fractions, 0, -1, null,
lists, objects, 1e30 and 2**63 (the values that changed a count or raised are the rows here).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.model.build import architecture_from_config, architecture_or_approximation
from engine.model.sources import parse_config_bytes

ROOT = Path(__file__).resolve().parents[2]
LLAMA_1B = json.loads((ROOT / "data/models/meta-llama__Llama-3.2-1B.json").read_text())["config"]
QWEN3_MOE = json.loads((ROOT / "tests/fixtures/configs/Qwen__Qwen3-30B-A3B.json").read_text())
DEEPSEEK_V2_LITE = json.loads((ROOT / "tests/fixtures/configs/deepseek-ai__DeepSeek-V2-Lite.json").read_text())


def test_a_key_twice_with_different_values_is_refused_not_read_as_the_last():
    # json.loads keeps the last "num_hidden_layers" (160): a model ten times Llama 3.2 1B's 16 layers, without a word.
    text = json.dumps(LLAMA_1B)[:-1] + ', "num_hidden_layers": 160}'
    with pytest.raises(ConfigError) as info:
        parse_config_bytes(text.encode(), "config.json")
    message = str(info.value)
    assert "'num_hidden_layers' twice" in message and "16 and 160" in message and "\n" not in message, message


def test_the_same_value_twice_is_harmless():
    text = json.dumps(LLAMA_1B)[:-1] + ', "num_hidden_layers": 16}'
    assert parse_config_bytes(text.encode())["num_hidden_layers"] == 16


def test_a_nested_duplicate_is_refused_too():
    with pytest.raises(ConfigError, match="'factor' twice"):
        parse_config_bytes(b'{"model_type": "llama", "rope_scaling": {"factor": 8.0, "factor": 32.0}}')


@pytest.mark.parametrize("key, value", [
    ("max_position_embeddings", "abc"), ("max_position_embeddings", 4096.5), ("max_position_embeddings", []),
    ("max_position_embeddings", 1e30), ("max_position_embeddings", True), ("max_position_embeddings", 0),
    ("sliding_window", "4096"), ("sliding_window", -1),
])
def test_an_optional_size_of_the_wrong_type_names_the_key(key, value):
    # Before: "abc" and 4096.5 escaped as a pydantic ValidationError (a traceback in the CLI, the exception box in the
    # app); True and "4096" were read as 1 and 4096 without a word.
    config = {**LLAMA_1B, key: value}
    with pytest.raises(ConfigError, match=key):
        architecture_from_config(config)


@pytest.mark.parametrize("value", ["false", 0, 1, [], {}])
def test_a_flag_that_is_not_true_or_false_is_refused(value):
    # bool("false") is True: the string would tie Llama 3.2 1B's head to its embedding... or untie a tied one, moving
    # the count by 262M parameters either way.
    with pytest.raises(ConfigError, match="tie_word_embeddings' must be true or false"):
        architecture_from_config({**LLAMA_1B, "tie_word_embeddings": value})


def test_null_flags_and_sizes_keep_the_config_class_defaults():
    # LlamaConfig: tie_word_embeddings=False, max_position_embeddings=2048 in transformers; null means "not set".
    arch = architecture_from_config({**LLAMA_1B, "tie_word_embeddings": None, "max_position_embeddings": None})
    assert arch.tie_word_embeddings is False and arch.max_position_embeddings is None


def test_a_19_digit_shared_expert_count_is_refused():
    # Before: 2**63 shared experts gave DeepSeek-V2-Lite 2.07e27 parameters.
    with pytest.raises(ConfigError, match="n_shared_experts.*implausibly large"):
        architecture_from_config({**DEEPSEEK_V2_LITE, "n_shared_experts": 2**63})


def test_more_experts_per_token_than_experts_is_refused():
    # Qwen3-30B-A3B has 128 experts; a router cannot pick 200 of them (torch.topk would fail in the model).
    config = copy.deepcopy(QWEN3_MOE)
    config["num_experts_per_tok"] = 200
    with pytest.raises(ConfigError, match="200 experts per token.*only 128 experts"):
        architecture_or_approximation(config)


def test_every_bundled_and_fixture_config_still_builds():
    paths = sorted((ROOT / "data/models").glob("*.json")) + sorted((ROOT / "tests/fixtures/configs").glob("*.json"))
    assert len(paths) > 50
    for path in paths:
        config = json.loads(path.read_text())
        architecture_or_approximation(config.get("config", config))
