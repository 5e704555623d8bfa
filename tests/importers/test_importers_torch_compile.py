"""``torch_compile`` of TrainingArguments (TRL, LLaMA-Factory's YAML passes it through), axolotl and torchtune's
``compile`` become Scenario.torch_compile: the one switch memory and time read. What compile changes beyond the
loss's compiled form and the fused kernels (the compiled layers' saved activations) stays listed as not modelled."""

from __future__ import annotations

import pytest

from engine.errors import TrainingConfigError
from engine.importers import import_configs
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Scenario

TRAINER = "per_device_train_batch_size: 2\ntorch_compile: {value}\n"
AXOLOTL = "base_model: meta-llama/Llama-3.1-8B\nadapter: lora\nsequence_len: 2048\nmicro_batch_size: 2\ntorch_compile: {value}\n"
LLAMAFACTORY = ("model_name_or_path: meta-llama/Llama-3.1-8B\nstage: sft\nfinetuning_type: lora\ncutoff_len: 2048\n"
                "per_device_train_batch_size: 2\ntorch_compile: {value}\n")


@pytest.mark.parametrize("name, template, fmt", [("args.yaml", TRAINER, "TrainingArguments"),
                                                 ("axolotl.yaml", AXOLOTL, "axolotl"),
                                                 ("llamafactory.yaml", LLAMAFACTORY, "LLaMA-Factory")])
def test_torch_compile_maps_to_the_switch(name, template, fmt):
    on = import_configs([(name, template.format(value="true").encode())])
    assert fmt.lower() in " ".join(str(f) for f in on.files).lower()
    assert on.fields["torch_compile"] is True and "torch_compile" in on.unsupported
    sc = Scenario.build(**on.fields)
    assert sc.torch_compile and sc.loss is LossImplementation.HF  # transformers' loss: no measured compiled form
    off = import_configs([(name, template.format(value="false").encode())])
    assert off.fields["torch_compile"] is False and "torch_compile" not in off.unsupported


def test_axolotl_auto_is_said_not_guessed():
    r = import_configs([("axolotl.yaml", AXOLOTL.format(value="auto").encode())])
    assert "torch_compile" not in r.fields and "2.5.1" in r.unsupported["torch_compile"]
    with pytest.raises(TrainingConfigError):
        import_configs([("axolotl.yaml", AXOLOTL.format(value="maybe").encode())])


def test_exports_say_torch_compile_and_import_back():
    """A plan with torch_compile: the TRL, axolotl and LLaMA-Factory files and the training code say it, and each file
    imports back to the switch."""
    from engine.plan.config_export import config_files
    from engine.plan.plans import Plan
    from engine.plan.training_code import training_code

    plan = Plan(name="c", model_repo_id="meta-llama/Llama-3.1-8B", gpu="H100 SXM", method="lora", torch_compile=True,
                dataset_total_tokens=1_000_000)
    files = {f.name: f for f in config_files(plan)}
    for name in ("sft_config.yaml", "axolotl.yaml", "llamafactory.yaml"):
        f = next(v for k, v in files.items() if k.startswith(name.split(".")[0]))
        assert "torch_compile: true" in f.text
        assert import_configs([(f.name, f.text.encode())]).fields["torch_compile"] is True
    assert "torch_compile=True" in training_code(plan)
    plain = {f.name: f.text for f in config_files(plan.model_copy(update={"torch_compile": False}))}
    assert not any("torch_compile" in text for text in plain.values())
