"""LLM.int8 (bitsandbytes ``Linear8bitLt`` / ``MatMul8bitLt``) in training: the dtypes and buffers that differ from
the 4-bit path. Read from bitsandbytes 0.45-0.50 (``nn/modules.py`` ``Int8Params`` / ``Linear8bitLt``,
``autograd/_functions.py`` ``MatMul8bitLt``, ``backends/cuda/ops.py`` and ``backends/default/ops.py``):

- stored weight: ``Int8Params._quantize`` keeps ``CB`` (int8, 1 B per weight) as the parameter's data and ``SCB`` (one
  fp32 absmax per output row); ``Linear8bitLt.init_8bit_state`` moves both into ``MatmulLtState`` and points the
  weight's data at ``state.CB``: one copy (:func:`engine.memory.weights.quantized_bytes_per_param`).
- **no cast of the input**: unlike ``Linear4bit`` (which casts ``x`` to ``compute_dtype``), ``Linear8bitLt.forward``
  hands ``x`` to ``MatMul8bitLt`` as it is; the int8 matmul's result is dequantized to the input's dtype
  (``int8_scaled_mm(..., dtype=A.dtype)``). Over an fp32 residual stream (``prepare_model_for_kbit_training`` casts
  the embeddings and norms to fp32) every q/k/v, MLP and output projection returns **fp32**, so the MLP's
  intermediates and, without autocast, the attention run in fp32 (:func:`int8_linear_output_bytes`).
- saved for backward: ``ctx.tensors = (CAt, subA, A)``: ``A`` is the layer's input itself (one tensor however many
  linears read it: no per-consumer cast copy), ``CAt`` is None for a frozen weight, ``subA`` the outlier columns
  (``|x| >= llm_int8_threshold``, 6.0) of the input: data-dependent, a few columns of large models, not counted.
- transients: the fp16 copy of the input and its int8 quantization in the forward, one weight dequantized to the
  input's dtype in backward (``state.CB.to(dtype_A, copy=True)``: :func:`engine.memory.weights.low_precision_copies`).
"""

from __future__ import annotations

from engine.scenario.precision import PrecisionSpec
from engine.scenario.training import Method, QuantType, Scenario


def residual_bytes(sc: Scenario, spec: PrecisionSpec) -> int:
    """Bytes per element of the residual stream: fp32 for fp32 weights and for a quantized base after
    ``prepare_model_for_kbit_training``, the weight dtype otherwise."""
    return 4 if (spec.weight_bytes == 4 or (sc.method is Method.QLORA and sc.prepare_kbit_training)) else spec.weight_bytes


def is_int8(sc: Scenario) -> bool:
    """Whether the base is LLM.int8 (bitsandbytes ``load_in_8bit``)."""
    return sc.method is Method.QLORA and sc.quant_type is QuantType.INT8


def int8_linear_output_bytes(sc: Scenario, spec: PrecisionSpec) -> int:
    """Bytes per element the LLM.int8 linears return when that is not the compute dtype: the residual's fp32 (their
    input's dtype), or 0 when the int8 linears return the compute dtype (a 16-bit residual) or the base is not int8."""
    if not is_int8(sc):
        return 0
    resid = residual_bytes(sc, spec)
    return resid if resid != spec.compute_bytes else 0
