"""engine.plan.code_summary: the Plans page's heading says what the snippet is, and agrees with training_code."""

from __future__ import annotations

import ast

import pytest

from engine.plan.code_summary import training_code_summary
from engine.plan.plans import Plan
from engine.plan.training_code import training_code

BASE = dict(name="p", model_repo_id="Qwen/Qwen2.5-0.5B", gpu="NVIDIA A100 80GB", dataset_total_tokens=1_000_000)


def plan(**fields) -> Plan:
    return Plan(**{**BASE, **fields})


def called(code: str) -> set[str]:
    """Names called in the snippet (``LoraConfig(...)``, ``TrainingArguments(...)``)."""
    return {n.func.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}


@pytest.mark.parametrize(("fields", "title", "calls", "absent"), [
    (dict(method="full"), "Hugging Face Trainer script: transformers TrainingArguments",
     {"TrainingArguments"}, {"LoraConfig", "BitsAndBytesConfig"}),
    (dict(method="lora"), "Hugging Face Trainer script: PEFT LoraConfig, transformers TrainingArguments",
     {"LoraConfig", "TrainingArguments"}, {"BitsAndBytesConfig"}),
    (dict(method="qlora", num_gpus=1), "Hugging Face Trainer script: bitsandbytes BitsAndBytesConfig (4-bit NF4), PEFT "
     "LoraConfig, transformers TrainingArguments", {"BitsAndBytesConfig", "LoraConfig", "TrainingArguments"}, set()),
    (dict(method="qlora", quant_type="int8"), "Hugging Face Trainer script: bitsandbytes BitsAndBytesConfig (8-bit), "
     "PEFT LoraConfig, transformers TrainingArguments", {"BitsAndBytesConfig"}, set()),
    (dict(method="full", num_gpus=4, strategy="zero3"), "Hugging Face Trainer script: DeepSpeed ZeRO-3 config, "
     "transformers TrainingArguments", {"TrainingArguments"}, {"LoraConfig"}),
    (dict(method="lora", num_gpus=2, strategy="zero2"), "Hugging Face Trainer script: PEFT LoraConfig, DeepSpeed ZeRO-2 "
     "config, transformers TrainingArguments", {"LoraConfig"}, set()),
    (dict(method="full", num_gpus=8, strategy="fsdp_full_shard"), "Hugging Face Trainer script: transformers "
     "TrainingArguments (FSDP full_shard)", {"TrainingArguments"}, set()),
])
def test_the_title_names_what_the_snippet_writes(fields, title, calls, absent):
    p = plan(**fields)
    summary = training_code_summary(p)
    assert summary.title == title and summary.not_expressed == ()
    code = training_code(p)
    assert calls <= called(code) and not absent & called(code)
    assert ("deepspeed=deepspeed_config" in code) == ("DeepSpeed" in title)
    assert ("fsdp=" in code) == ("FSDP" in title)


def test_what_the_snippet_does_not_express_is_said():
    # training_code writes a LoraConfig for every adapter method; the summary says so rather than passing it off.
    summary = training_code_summary(plan(method="ia3"))
    assert summary.not_expressed == ("the plan's ia3 adapter: the LoraConfig stands in for it; adapter_config.json "
                                     "below has the method itself",)
    assert "LoraConfig" in called(training_code(plan(method="ia3")))
    litgpt = training_code_summary(plan(method="lora", framework="litgpt"))
    assert litgpt.not_expressed == ("the plan's framework, litgpt: this is the Hugging Face equivalent",)
