"""Training-config import: values that gave a traceback, a wrong setting or a wrong word (issue 25 item 3), and a
token-looking value (item 2). Each file is the smallest one that showed the defect; what the tool itself does with
it is named beside each test (axolotl 0.19.0, accelerate 1.15.0, LLaMA-Factory 0.9.5, the versions the importers
model)."""

from __future__ import annotations

import json

import pytest

from engine.errors import TrainingConfigError
from engine.importers import import_configs
from engine.importers.model_ref import model_repo
from engine.importers.parse import parse_training_config
from engine.memory.parallel import Strategy
from engine.secrets import REDACTED

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


def one(text: str, name: str = "config.yaml"):
    return import_configs([(name, text.encode())])


@pytest.mark.parametrize(("name", "text"), [
    ("config.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: " + "9" * 5000 + "\n"),
    ("config.json", '{"per_device_train_batch_size": ' + "9" * 5000 + "}"),
    ("config.yaml", "base_model: meta-llama/Llama-3.2-1B\nsequence_len: " + "9" * 30 + "\n"),
    ("config.json", '{"per_device_train_batch_size": -' + "9" * 4400 + "}"),
])
def test_a_huge_integer_is_one_clear_error_not_a_traceback(name, text):
    with pytest.raises(TrainingConfigError) as info:
        one(text, name)
    message = str(info.value)
    assert "digit" in message and "check the file" in message and len(message) < 200, message


def test_an_empty_fsdp_config_turns_nothing_on():
    # axolotl enables FSDP from a non-empty fsdp_config (its checks read `if cfg.fsdp_config:`); the key was listed as
    # unsupported and turned on FULL_SHARD.
    result = one("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nfsdp_config:\n")
    assert "strategy" not in result.parallel
    assert "fsdp_config" not in result.unsupported and "fsdp_config" in result.ignored
    assert any("fsdp_config is empty" in n for n in result.notes)
    full = one("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nfsdp_config:\n  fsdp_offload_params: false\n")
    assert full.parallel["strategy"] is Strategy.FSDP_FULL_SHARD  # a section with settings still means FSDP


def test_axolotl_float16_with_fp16_off_says_what_runs():
    # float16: true loads the weights in fp16; fp16: false: no autocast, no GradScaler. The notes said bf16 'auto'
    # was assumed and read as bf16, neither of which applies.
    result = one("base_model: meta-llama/Llama-3.2-1B\nadapter: lora\nfloat16: true\nfp16: false\n")
    assert result.fields["precision"].value == "fp16"
    assert not any("bf16" in n for n in result.notes), result.notes
    assert any("without autocast or a gradient scaler" in n for n in result.notes)


def test_the_full_fine_tuning_fp16_warning_does_not_claim_trainer_fp16():
    from engine.memory.estimate import estimate_memory
    from engine.model.build import architecture_from_config
    from engine.model.sources import config_from_catalog

    result = one("base_model: meta-llama/Llama-3.2-1B\nsequence_len: 512\nfloat16: true\nfp16: false\n")
    est = estimate_memory(architecture_from_config(config_from_catalog("meta-llama/Llama-3.2-1B")[0]), result.scenario())
    warning = next(w for w in est.warnings if "fp16 weights" in w)
    assert "with a gradient scaler (Trainer(fp16=True), axolotl fp16: true) it fails" in warning


@pytest.mark.parametrize(("value", "ok"), [(0, False), (-1, True), (4, True)])
def test_accelerate_num_processes_zero_is_refused(value, ok):
    text = f"compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\nnum_processes: {value}\n"
    if ok:
        result = one(text)
        assert result.parallel.get("num_gpus") == (value if value > 0 else None)
        if value == -1:
            assert any("num_processes: -1 (not set)" in n for n in result.notes)
    else:
        with pytest.raises(TrainingConfigError, match=r"num_processes: must be an integer >= 1 \(or -1: not set\); 0 "):
            one(text)


def test_llamafactory_full_shows_as_full_under_mapped():
    result = one("model_name_or_path: meta-llama/Llama-3.2-1B\nstage: sft\nfinetuning_type: full\n")
    assert result.mapped["finetuning_type"] == "full"
    assert result.fields["method"].value == "full"


def test_a_token_as_base_model_is_redacted_and_refused():
    result = one(f"base_model: {TOKEN}\nadapter: lora\n")
    assert result.model == REDACTED and TOKEN not in json.dumps(result.to_json(), default=str)
    with pytest.raises(TrainingConfigError, match="not sent to the Hub") as info:
        model_repo(result)
    assert TOKEN not in str(info.value)


def test_a_token_anywhere_in_a_value_is_redacted():
    doc = parse_training_config(f'{{"hub_model_id": "me/x", "hub_token": "{TOKEN}", "list": ["a", "{TOKEN}"]}}'.encode())
    assert doc["hub_token"] == REDACTED and doc["list"] == ["a", REDACTED] and doc["hub_model_id"] == "me/x"
