"""issue 16 item 7: a scenario without a chosen precision gets its method's usual one (engine.scenario.training
DEFAULT_PRECISION: what the Hugging Face docs and PEFT examples do), in the engine, the CLI and the app."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import DEFAULT_PRECISION, Method, Scenario

MISTRAL = "mistralai/Mistral-7B-v0.1"


@pytest.mark.parametrize(("method", "precision"), [("full", "amp_bf16"), ("lora", "bf16"), ("qlora", "bf16")])
def test_each_method_gets_its_usual_precision_unless_one_is_chosen(method, precision):
    assert Scenario.build(method=method).precision is PrecisionMode(precision)
    assert Scenario.build(method=method, precision=None).precision is PrecisionMode(precision)
    assert Scenario.build(method=method, precision="fp32").precision is PrecisionMode.FP32  # a choice is kept
    assert DEFAULT_PRECISION[Method(method)] is PrecisionMode(precision)


def test_mistral_lora_default_is_the_bf16_base_not_fp32_weights_under_autocast(capsys):
    # Mistral-7B-v0.1 (7,241,732,096 parameters), LoRA at 512 tokens: the bf16 base the PEFT examples load
    # (torch_dtype=bfloat16, bf16=True) is 2 B per weight, 14.48 GB; the old default (fp32 weights under
    # autocast) was 4 B, 28.97 GB of weights and 43.4 GiB in all.
    arch = architecture_from_config(config_from_catalog(MISTRAL)[0])
    est = estimate_memory(arch, Scenario.build(method="lora", seq_len=512))
    adapters = est.trainable_parameters * 4
    assert est.parts_by_key["weights"].bytes == 2 * 7_241_732_096 + adapters
    assert main(["estimate", "--model", MISTRAL, "--offline", "--method", "lora", "--seq-len", "512"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["precision"] == "bf16" and out["total_bytes"] < 20 * 2**30
    assert main(["estimate", "--model", MISTRAL, "--offline", "--method", "lora", "--seq-len", "512",
                 "--precision", "amp_bf16"]) == 0
    assert json.loads(capsys.readouterr().out)["total_bytes"] > 40 * 2**30  # the alternative, when chosen


def test_app_switches_the_precision_with_the_method_until_the_user_picks_one(new_app):
    at = new_app().run()
    assert at.selectbox(key="precision").value is PrecisionMode.AMP_BF16  # full fine-tuning
    at.radio(key="method").set_value(Method.LORA).run()
    assert at.selectbox(key="precision").value is PrecisionMode.BF16
    at.selectbox(key="precision").set_value(PrecisionMode.FP32).run()
    at.radio(key="method").set_value(Method.QLORA).run()
    assert at.selectbox(key="precision").value is PrecisionMode.FP32  # the user's choice is kept
    assert not at.exception
