"""``BitsAndBytesConfig`` / a ``quantization_config`` (transformers 4.57.6 = 5.24.0 ``utils/quantization_config.py``).

``load_in_4bit`` -> a 4-bit base (NF4 or FP4 from ``bnb_4bit_quant_type``; note the class default is ``fp4``, the
QLoRA recipe's is ``nf4``), ``bnb_4bit_use_double_quant`` -> double quantization, ``load_in_8bit`` -> LLM.int8.
Quantization alone trains nothing: with no adapter named anywhere, the import assumes QLoRA (and says so).
"""

from __future__ import annotations

from typing import Any

from engine.importers.table import IGNORE, Handling, Map, Reading, Sub, Unmodelled, Unsupported, collect
from engine.importers.values import boolean, choice
from engine.scenario.training import QuantType

FORMAT, VERSION = "BitsAndBytesConfig", "transformers 4.57.6 / 5.24.0"

QUANT_TYPES = {"nf4": QuantType.NF4, "fp4": QuantType.FP4}
KEYS: dict[str, Handling] = {
    "quant_method": Map("bnb_method", choice({"bitsandbytes": "bitsandbytes",
                                              **{m: Unmodelled(f"pre-quantized {m} weights: their bytes per weight are not "
                                                               "modelled for training (bitsandbytes NF4/FP4/int8 are)")
                                                 for m in ("gptq", "awq", "aqlm", "quanto", "eetq", "hqq", "fp8", "mxfp4",
                                                           "compressed-tensors", "torchao", "bitnet", "higgs", "vptq")}})),
    "load_in_4bit": Map("load_in_4bit", boolean), "_load_in_4bit": Map("load_in_4bit", boolean),
    "load_in_8bit": Map("load_in_8bit", boolean), "_load_in_8bit": Map("load_in_8bit", boolean),
    "bnb_4bit_quant_type": Map("quant_type", choice(QUANT_TYPES)),
    "bnb_4bit_use_double_quant": Map("double_quant", boolean),
    # The matmul dtype of the dequantized weight follows the run's precision in the estimate; the storage dtype only
    # changes how the packed bytes are typed (same bytes; FSDP/ZeRO-3 can shard them).
    "bnb_4bit_compute_dtype": IGNORE, "bnb_4bit_quant_storage": IGNORE, "llm_int8_threshold": IGNORE,
    "llm_int8_skip_modules": Unsupported("these modules stay in 16 bits: more weight memory than a fully quantized base"),
    "llm_int8_enable_fp32_cpu_offload": Unsupported("modules offloaded to the CPU in fp32: less GPU memory, not modelled"),
    "llm_int8_has_fp16_weight": Unsupported("keeps fp16 weights beside the int8 ones (int8 training): not modelled"),
}
_BNB_KEYS = ("load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "llm_int8_threshold",
             "_load_in_4bit", "_load_in_8bit")


def matches(doc: dict[str, Any]) -> bool:
    """A bare BitsAndBytesConfig: its own keys, and no key of a trainer format (formats.md, decision 3)."""
    return (doc.get("quant_method") == "bitsandbytes" or any(k in doc for k in _BNB_KEYS)) and all(
        k in KEYS for k in doc)


def read(doc: dict[str, Any], class_defaults: bool = True) -> Reading:
    """Read a BitsAndBytesConfig dict (a file, or an inline ``quantization_config`` / ``bnb_config_kwargs``).

    ``class_defaults``: the keys it leaves out take BitsAndBytesConfig's defaults (``fp4``, no double quantization);
    axolotl's ``bnb_config_kwargs`` pass False (axolotl's own nf4 + double quantization stand).
    """
    r = collect(doc, KEYS, FORMAT, VERSION)
    r.settings.pop("bnb_method", None)
    if class_defaults and r.settings.get("load_in_4bit"):
        if "quant_type" not in r.settings:
            r.defaults["quant_type"] = QuantType.FP4
            r.notes.append("bnb_4bit_quant_type not given: BitsAndBytesConfig's default fp4 (QLoRA recipes use nf4)")
        r.defaults.setdefault("double_quant", False)
    return r


# A model's config.json whose checkpoint is stored quantized (decision 2): only its quantization_config matters here;
# the architecture itself is read by the model picker / --config.
FORMAT_MODEL, VERSION_MODEL = "model config.json (quantization_config)", "transformers 4.57.6 / 5.24.0"
MODEL_KEYS: dict[str, Handling] = {"quantization_config": Sub(read, "quantization_config must be a mapping"), "*": IGNORE}


def matches_model_config(doc: dict[str, Any]) -> bool:
    return isinstance(doc.get("quantization_config"), dict) and ("model_type" in doc or "architectures" in doc)


def read_model_config(doc: dict[str, Any]) -> Reading:
    """The quantization of a model config.json; every other key is the architecture's (ignored here)."""
    r = collect({"quantization_config": doc["quantization_config"]}, MODEL_KEYS, FORMAT_MODEL, VERSION_MODEL)
    r.ignored += [k for k in doc if k != "quantization_config"]
    r.notes.append("a model's config.json: pick or pass the same file as the model (--config) for its architecture")
    return r
