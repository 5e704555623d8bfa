"""What the Plans page's Python snippet (:func:`engine.plan.training_code.training_code`) is: the framework it runs on, the
config objects it writes, and what of the plan it does not say.

The page's heading names these, so a reader knows before copying that the snippet is a Hugging Face ``Trainer``
setup with, say, a PEFT ``LoraConfig`` and a DeepSpeed ZeRO-3 dict, and not a torchtune or axolotl recipe (those are
the config files below it). It follows the branches of ``training_code``; a test keeps the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.plan.plans import Plan
from engine.plan.training_code import zero_stage
from engine.scenario.training import Framework, Method, QuantType

_FSDP = ("fsdp_full_shard", "fsdp_shard_grad_op")
_LORA_CONFIG = (Method.LORA, Method.QLORA)  # methods a plain LoraConfig expresses


@dataclass(frozen=True)
class CodeSummary:
    """``framework`` the snippet runs on; ``objects``: (library, object) pairs it writes, in the code's order;
    ``not_expressed``: parts of the plan the snippet does not say, each with where it is said instead."""

    framework: str
    objects: tuple[tuple[str, str], ...]
    not_expressed: tuple[str, ...]

    @property
    def title(self) -> str:
        """``"Hugging Face Trainer script: transformers TrainingArguments, PEFT LoraConfig"``-style heading text."""
        return f"{self.framework} script: " + ", ".join(f"{lib} {obj}" for lib, obj in self.objects)


def training_code_summary(plan: Plan) -> CodeSummary:
    """The framework, config objects and gaps of ``training_code(plan)`` (see the module docstring)."""
    objects: list[tuple[str, str]] = []
    gaps: list[str] = []
    if plan.method is Method.QLORA:
        bits = "8-bit" if plan.quant_type is QuantType.INT8 else f"4-bit {plan.quant_type.value.upper()}"
        objects.append(("bitsandbytes", f"BitsAndBytesConfig ({bits})"))
    if plan.method is not Method.FULL:
        objects.append(("PEFT", "LoraConfig"))
        if plan.method not in _LORA_CONFIG:
            gaps.append(f"the plan's {plan.method.value} adapter: the LoraConfig stands in for it; adapter_config.json "
                        "below has the method itself")
    stage = zero_stage(plan)
    if stage:
        objects.append(("DeepSpeed", f"ZeRO-{stage} config"))
    objects.append(("transformers", "TrainingArguments" + (f" (FSDP {plan.strategy.value.removeprefix('fsdp_')})"
                                                           if plan.strategy.value in _FSDP else "")))
    if plan.optimizer.record.trainer_optim is None:  # built in code, not named in TrainingArguments
        objects.append(("optimizer", plan.optimizer.record.label))
    if plan.framework is not Framework.HF:
        gaps.append(f"the plan's framework, {plan.framework.value}: this is the Hugging Face equivalent")
    return CodeSummary(framework="Hugging Face Trainer", objects=tuple(objects), not_expressed=tuple(gaps))
