"""The ``bnb_4bit_quant_storage`` a QLoRA run over FSDP / ZeRO-3 uses when the user names none.

transformers' ``BitsAndBytesConfig`` stores the packed 4-bit weights as ``uint8``; FSDP flattens a wrapped module's
parameters into one ``FlatParameter`` of a single dtype and shards float parameters only (DeepSpeed ZeRO-3 likewise),
so uint8 storage beside the float adapters is not sharded: every GPU keeps the whole 4-bit base. The documented
FSDP-QLoRA and ZeRO-3-QLoRA recipes therefore set ``bnb_4bit_quant_storage`` to the compute dtype (PEFT docs
"Use PEFT QLoRA and FSDP" / "DeepSpeed ZeRO-3 with QLoRA", ``examples/sft`` ``bnb_4bit_quant_storage=torch.bfloat16``;
Answer.AI's FSDP-QLoRA). A run that shards weights and does not say otherwise is estimated that way, and says so;
``quant_storage`` chosen explicitly (``--quant-storage uint8``) is kept, with the replication it implies.
"""

from __future__ import annotations

from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Framework, Method, QuantStorage, QuantType, Scenario


def sharded_quant_storage(scenario: Scenario) -> tuple[Scenario, str]:
    """``scenario`` with the compute dtype as its 4-bit storage when it is a bitsandbytes 4-bit QLoRA whose
    ``quant_storage`` was not set, and the sentence saying so ("" when nothing changed). For a strategy that shards
    weights (FSDP full shard, ZeRO-3) only: elsewhere the storage changes nothing."""
    if (scenario.method is not Method.QLORA or scenario.quant_type is QuantType.INT8
            or scenario.framework is not Framework.HF or "quant_storage" in scenario.model_fields_set):
        return scenario, ""
    dtype = QuantStorage.FP16 if scenario.precision in (PrecisionMode.FP16, PrecisionMode.AMP_FP16) else QuantStorage.BF16
    note = (f"bnb_4bit_quant_storage set to {dtype.value}, the compute dtype, as the FSDP/ZeRO-3 QLoRA recipes do: "
            "transformers' default uint8 storage is not sharded (each GPU would hold the whole 4-bit base); "
            "choose uint8 explicitly (--quant-storage uint8) to estimate that")
    return scenario.model_copy(update={"quant_storage": dtype}), note
