"""Checkpoints stored already quantized: read ``quantization_config`` and give bytes per weight.

A config.json with a ``quantization_config`` describes weights saved in a low-precision format; loading
it keeps them so, and a fine-tuning run can only train adapters on top (LoRA/QLoRA style). Formats and
their storage, per weight of a quantized linear layer (in x out elements):

- ``gptq`` (AutoGPTQ / GPTQModel, ``bits`` b, ``group_size`` g, default 128): ``qweight`` packs b-bit
  values into int32 (b/8 B), plus one fp16 scale (2/g B) and one b-bit zero point (b/8/g B) per group
  (Frantar et al. 2022, "GPTQ", sec. 5; ``desc_act``'s int32 ``g_idx`` per input row is under 0.1 %).
- ``awq`` (AutoAWQ, ``w_bit``/``bits``, ``q_group_size``/``group_size``): the same storage layout
  (Lin et al. 2023, "AWQ", sec. 4).
- ``bitsandbytes``: ``load_in_4bit`` stores NF4/FP4 with block constants (see engine.memory), and
  ``load_in_8bit`` stores LLM.int8 weights (1 B) with one fp32 scale per output row.
- ``fp8`` (e.g. DeepSeek-V3): 1 B per weight, one fp32 scale per ``weight_block_size`` block (128 x 128).
- ``compressed-tensors``: the ``weights`` entry of its first config group (``num_bits``, ``group_size``),
  with an fp16 scale per group.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.errors import ConfigError

DEFAULT_GROUP = 128


class StoredQuantization(BaseModel):
    """How a checkpoint's linear weights are stored: ``bytes_per_param`` includes scales and zeros."""

    model_config = ConfigDict(frozen=True)

    method: str
    bits: float
    group_size: int | None
    bytes_per_param: float
    description: str


def _grouped(method: str, bits: int, group: int | None) -> StoredQuantization:
    g = group if group and group > 0 else DEFAULT_GROUP  # group_size -1 means per-channel in GPTQ; 128 bounds it
    return StoredQuantization(
        method=method, bits=bits, group_size=g, bytes_per_param=bits / 8 + 2 / g + bits / 8 / g,
        description=f"{method.upper()} {bits}-bit, group size {g} (fp16 scales, {bits}-bit zeros)",
    )


def _int(qc: dict[str, Any], *keys: str, default: int | None = None) -> int | None:
    for key in keys:
        value = qc.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return default


def stored_quantization(config: dict[str, Any]) -> StoredQuantization | None:
    """The checkpoint's weight storage from ``config["quantization_config"]``; None when unquantized.

    Raises:
        ConfigError: a quantization_config that is not an object, or a method this engine does not know
            (the message names it and the known ones).
    """
    qc = config.get("quantization_config")
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise ConfigError("quantization_config must be a JSON object")
    method = str(qc.get("quant_method", "")).lower()
    if method in ("gptq", "awq"):
        bits = _int(qc, "bits", "w_bit", default=4)
        return _grouped(method, bits, _int(qc, "group_size", "q_group_size", default=DEFAULT_GROUP))
    if method == "bitsandbytes" or qc.get("load_in_4bit") or qc.get("load_in_8bit"):
        if qc.get("load_in_8bit"):
            return StoredQuantization(method="bitsandbytes", bits=8, group_size=None, bytes_per_param=1.0,
                                      description="LLM.int8 (int8 weights, fp32 scale per output row)")
        double = bool(qc.get("bnb_4bit_use_double_quant", False))
        bpp = 0.5 + (1 / 64 + 4 / (64 * 256) if double else 4 / 64)
        kind = str(qc.get("bnb_4bit_quant_type", "fp4")).upper()
        return StoredQuantization(method="bitsandbytes", bits=4, group_size=64, bytes_per_param=bpp,
                                  description=f"bitsandbytes {kind}{' + double quantization' if double else ''}")
    if method == "fp8":
        block = qc.get("weight_block_size") or [128, 128]
        per_block = block[0] * block[1] if isinstance(block, list) and len(block) == 2 else 128 * 128
        return StoredQuantization(method="fp8", bits=8, group_size=per_block, bytes_per_param=1 + 4 / per_block,
                                  description=f"FP8 weights, fp32 scale per {per_block}-weight block")
    if method == "compressed-tensors":
        groups = qc.get("config_groups") or {}
        weights = next((g.get("weights") for g in groups.values() if isinstance(g, dict) and g.get("weights")), None)
        if not isinstance(weights, dict):
            raise ConfigError("compressed-tensors quantization_config has no weights entry in config_groups")
        bits = _int(weights, "num_bits", default=8)
        return _grouped("compressed-tensors", bits, _int(weights, "group_size", default=DEFAULT_GROUP))
    raise ConfigError(
        f"quantization_config method {method or '(none)'!r} is not supported; known: gptq, awq, bitsandbytes, fp8, "
        "compressed-tensors"
    )
