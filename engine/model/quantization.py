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
- ``compressed-tensors`` (llm-compressor, e.g. neuralmagic/RedHatAI ``Meta-Llama-3.1-8B-Instruct-FP8``): the
  ``weights`` entry of its first config group: ``num_bits``, ``type`` (``float`` = FP8, ``int``) and ``strategy``:
  ``tensor`` (one fp32 scale per tensor) and ``channel`` (one per output row) add a few bytes per row, counted as
  nothing; ``group`` adds an fp16 scale per ``group_size`` weights (and, for int, a zero point).

``shardable``: whether FSDP / ZeRO-3 can divide the stored weights over GPUs. They flatten and partition
floating-point ``nn.Parameter`` s only: GPTQ/AWQ kernels keep ``qweight``/``qzeros``/``scales`` as int32/fp16
*buffers* (AutoGPTQ / GPTQModel ``QuantLinear.register_buffer``), which neither shards; bitsandbytes 4-bit
``Params4bit`` are parameters, shardable only when packed into a float ``bnb_4bit_quant_storage`` (transformers
``BitsAndBytesConfig``, default ``uint8``; the PEFT/Accelerate FSDP-QLoRA and DeepSpeed-ZeRO-3-QLoRA guides set it
to the compute dtype); LLM.int8 weights are int8 parameters (not shardable); FP8 weights are float8 parameters
(shardable).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.errors import ConfigError

DEFAULT_GROUP = 128


class StoredQuantization(BaseModel):
    """How a checkpoint's linear weights are stored: ``bytes_per_param`` includes scales and zeros."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    method: str
    bits: float
    group_size: int | None
    bytes_per_param: float
    description: str
    shardable: bool = True
    storage_note: str = ""


BUFFERS_NOTE = "packed int32 buffers (qweight, qzeros, scales): FSDP and ZeRO-3 shard parameters, not buffers"
FLOAT_STORAGE = ("float16", "bfloat16", "float32")
"""``bnb_4bit_quant_storage`` values that let FSDP / ZeRO-3 flatten the packed 4-bit weights with the other parameters."""


def _grouped(method: str, bits: int, group: int | None, *, shardable: bool = False, note: str = BUFFERS_NOTE) -> StoredQuantization:
    g = group if group and group > 0 else DEFAULT_GROUP  # group_size -1 means per-channel in GPTQ; 128 bounds it
    return StoredQuantization(
        method=method, bits=bits, group_size=g, bytes_per_param=bits / 8 + 2 / g + bits / 8 / g,
        description=f"{method.upper()} {bits}-bit, group size {g} (fp16 scales, {bits}-bit zeros)",
        shardable=shardable, storage_note=note,
    )


def bnb_storage_shardable(storage: object) -> bool:
    """Whether a ``bnb_4bit_quant_storage`` value (``"uint8"``, ``"bfloat16"``, ``"torch.bfloat16"``...) is a float
    dtype FSDP / ZeRO-3 can shard; None (absent) is transformers' default ``uint8``."""
    return str(storage or "uint8").removeprefix("torch.") in FLOAT_STORAGE


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
                                      description="LLM.int8 (int8 weights, fp32 scale per output row)",
                                      shardable=False, storage_note="int8 parameters: FSDP and ZeRO-3 shard float parameters only")
        double = bool(qc.get("bnb_4bit_use_double_quant", False))
        bpp = 0.5 + (1 / 64 + 4 / (64 * 256) if double else 4 / 64)
        kind = str(qc.get("bnb_4bit_quant_type", "fp4")).upper()
        storage = qc.get("bnb_4bit_quant_storage") or "uint8"
        float_storage = bnb_storage_shardable(storage)
        return StoredQuantization(method="bitsandbytes", bits=4, group_size=64, bytes_per_param=bpp,
                                  description=f"bitsandbytes {kind}{' + double quantization' if double else ''}",
                                  shardable=float_storage,
                                  storage_note=f"bnb_4bit_quant_storage {storage}" + (
                                      "" if float_storage else ": FSDP and ZeRO-3 shard float parameters only"))
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
        is_float = str(weights.get("type", "int")).lower() == "float"
        strategy = str(weights.get("strategy") or "group").lower()
        if strategy in ("tensor", "channel"):
            # One scale per tensor or per output row: a few bytes per row of thousands of weights, counted as none.
            kind = "FP8" if is_float and bits == 8 else f"{'float' if is_float else 'int'}{bits}"
            return StoredQuantization(method="compressed-tensors", bits=bits, group_size=None, bytes_per_param=bits / 8,
                                      description=f"compressed-tensors {kind} weights, one scale per {strategy}",
                                      shardable=is_float, storage_note="" if is_float else
                                      "packed int parameters: FSDP and ZeRO-3 shard float parameters only")
        return _grouped("compressed-tensors", bits, _int(weights, "group_size", default=DEFAULT_GROUP), shardable=is_float,
                        note="" if is_float else "packed int parameters: FSDP and ZeRO-3 shard float parameters only")
    raise ConfigError(
        f"quantization_config method {method or '(none)'!r} is not supported; known: gptq, awq, bitsandbytes, fp8, "
        "compressed-tensors"
    )
