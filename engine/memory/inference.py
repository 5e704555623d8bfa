"""Serving (inference) memory on one GPU: weights at the serving precision, the KV cache of the concurrent
sequences, and an activation workspace; and the longest context / most concurrent sequences that fit.

The result is a :class:`engine.memory.result.MemoryEstimate` with the single phase ``inference``, so the fit engine
(:func:`engine.plan.fit.check_fit`) and the charts take it like a training estimate. Several GPUs serve as
independent replicas (data parallel): the per-GPU memory is the one-GPU estimate; tensor parallelism, which
would divide weights and KV heads, is not modelled.

KV cache (transformers ``DynamicCache`` / vLLM paged cache): per token and layer, a key and a value vector
per key/value head: ``2 x layers x kv_heads x head_dim x dtype bytes`` per token (Llama 3.1 8B in bf16:
2 x 32 x 8 x 128 x 2 = 131,072 B = 128 KiB). Sliding-window layers keep at most ``sliding_window`` tokens
(Mistral 7B v0.1: 4,096 on every layer; Gemma 2: every other layer, from layer 0, transformers
``Gemma2DecoderLayer.is_sliding = not bool(layer_idx % 2)``; Gemma 3: five of six layers). Multi-head latent
attention (DeepSeek V2/V3) caches the compressed latent, ``kv_lora_rank + qk_rope_head_dim`` values per
token and layer (vLLM's MLA cache; transformers' eager path caches decompressed K and V instead).

Weights: linear layers of the decoder at the serving precision; embeddings, norms and the LM head stay
16-bit, as GPTQ/AWQ/bitsandbytes/FP8 checkpoints keep them. int4 = 0.5 B + an fp16 scale and zero point
per group of 128 (GPTQ/AWQ ``group_size=128``): 0.53125 B; int8 and FP8 = 1 B (per-channel or per-tensor
scales, a few bytes per row, left out). A checkpoint stored quantized (its config's ``quantization_config``:
FP8 / compressed-tensors, GPTQ, AWQ, bitsandbytes; :func:`engine.model.quantization.stored_quantization`, the same
reader training uses) is served as stored: vLLM and transformers load its packed weights and run them with
their own kernels, so its bytes per weight replace the serving precision (``weight_precision=None``, the
default, means "as stored; bf16 when unquantized"; an explicit other choice is reported as ignored).

Activation workspace: inference keeps no activations for backward; the transient peak is one decoder layer
over the tokens processed at once (a prefill chunk, vLLM ``max_num_batched_tokens``, default here 2,048):
residual and normed hidden state, q, k, v, attention output, and the MLP's gate, up and product, in 16 bits,
plus fp32 logits of the last token of every sequence. Engine workspaces (CUDA graphs, vLLM's
``gpu_memory_utilization`` reserve, the sampler) are not modelled.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.search import largest_true
from engine.model.architecture import Architecture
from engine.errors import ScenarioError, explain_validation
from engine.memory.components import MemoryComponent
from engine.memory.result import MemoryEstimate

MAX_CONTEXT = 1 << 21
MAX_CONCURRENCY = 1 << 20
DEFAULT_PREFILL_CHUNK = 2048
INT4_GROUP = 128


class WeightPrecision(str, Enum):
    """Storage of the decoder's linear weights when serving."""

    BF16 = "bf16"
    FP16 = "fp16"
    INT8 = "int8"
    FP8 = "fp8"
    INT4 = "int4"


class KvCacheDtype(str, Enum):
    """Element type of the KV cache (vLLM ``kv_cache_dtype``; fp8 = e4m3/e5m2)."""

    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"


WEIGHT_BYTES: dict[WeightPrecision, float] = {
    WeightPrecision.BF16: 2.0, WeightPrecision.FP16: 2.0, WeightPrecision.INT8: 1.0, WeightPrecision.FP8: 1.0,
    WeightPrecision.INT4: 0.5 + 2 * 2 / INT4_GROUP,
}
KV_BYTES: dict[KvCacheDtype, int] = {KvCacheDtype.BF16: 2, KvCacheDtype.FP16: 2, KvCacheDtype.FP8: 1, KvCacheDtype.INT8: 1}
WEIGHT_LABELS = {
    WeightPrecision.BF16: "bf16", WeightPrecision.FP16: "fp16", WeightPrecision.INT8: "int8 (W8)",
    WeightPrecision.FP8: "FP8", WeightPrecision.INT4: "4-bit (GPTQ/AWQ, group 128)",
}


class InferenceScenario(BaseModel):
    """Serving ``concurrency`` sequences of up to ``seq_len`` tokens (prompt + generated) each."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    weight_precision: WeightPrecision | None = None
    """None: as the checkpoint stores them (its ``quantization_config``), bf16 when it is not quantized."""
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.BF16
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY)
    seq_len: int = Field(4096, ge=1, le=MAX_CONTEXT)
    prefill_chunk_tokens: int = Field(DEFAULT_PREFILL_CHUNK, ge=1, le=1 << 20)

    @classmethod
    def build(cls, **fields: Any) -> "InferenceScenario":
        """Validate ``fields``; ScenarioError (one line) instead of pydantic's error."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise ScenarioError(explain_validation(exc, "inference")) from None


def sliding_window_layers(arch: Architecture) -> int:
    """How many layers cap their KV cache at ``arch.sliding_window`` (0 without a window): the family's structure fact
    :attr:`~engine.model.architecture.Architecture.sliding_window_layers` (all of Mistral's, Gemma 2's even layers,
    five of six of Gemma 3's; none of Qwen2's, which ships a sliding_window with use_sliding_window=false)."""
    return arch.sliding_window_layers if arch.sliding_window else 0


def kv_values_per_token_per_layer(arch: Architecture) -> int:
    """Cached values per token and layer: 2 x kv_heads x head_dim (MLA: kv_lora_rank + qk_rope_head_dim)."""
    if arch.kv_lora_rank:
        return arch.kv_lora_rank + arch.qk_rope_head_dim
    return 2 * arch.num_key_value_heads * arch.head_dim


def kv_cache_bytes_per_token(arch: Architecture, dtype: KvCacheDtype = KvCacheDtype.BF16) -> int:
    """Bytes one token adds to the cache with every layer caching it: 2 x layers x kv_heads x head_dim x bytes."""
    return arch.num_layers * kv_values_per_token_per_layer(arch) * KV_BYTES[dtype]


def kv_cache_bytes(arch: Architecture, seq_len: int, concurrency: int = 1, dtype: KvCacheDtype = KvCacheDtype.BF16) -> int:
    """KV cache of ``concurrency`` sequences of ``seq_len`` tokens; sliding-window layers hold min(seq, window)."""
    per_layer_token = kv_values_per_token_per_layer(arch) * KV_BYTES[dtype]
    sliding = sliding_window_layers(arch)
    tokens = (arch.num_layers - sliding) * seq_len + sliding * min(seq_len, arch.sliding_window or seq_len)
    return per_layer_token * tokens * concurrency


def serving_weight_precision(arch: Architecture, isc: "InferenceScenario") -> tuple[float, str, str | None]:
    """(bytes per linear weight, label, warning) of serving ``arch``: the checkpoint's stored format when it has a
    ``quantization_config``, else ``isc.weight_precision`` (bf16 when None). The warning says when an explicit
    precision differs from the stored one (the stored one is what loads)."""
    stored = arch.stored_quantization
    if stored is not None:
        warning = None
        if isc.weight_precision is not None:
            warning = (f"This checkpoint is stored quantized ({stored.description}); it is served as stored, not at "
                       f"the chosen weight precision {isc.weight_precision.value}.")
        return stored.bytes_per_param, f"{stored.description}, as stored in the checkpoint", warning
    wp = isc.weight_precision or WeightPrecision.BF16
    return WEIGHT_BYTES[wp], wp.value, None


def _weights(arch: Architecture, isc: InferenceScenario) -> MemoryComponent:
    lin = sum(g.parameters for g in arch.tensors if g.linear)
    other = arch.total_parameters - lin
    b, label, _ = serving_weight_precision(arch, isc)
    return MemoryComponent(
        key="weights", label="Weights", bytes=lin * b + other * 2.0, phases=("inference",),
        formula=f"{lin:,} linear-layer params x {b:.4g} B ({label}) + {other:,} other params "
                f"(embeddings, norms, LM head) x 2 B",
        source="the checkpoint's quantization_config when stored quantized (engine.model.quantization); else GPTQ/AWQ "
               "group 128 (0.5 B + fp16 scale and zero per 128); int8/FP8 1 B; embeddings and LM head kept 16-bit",
    )


def _kv(arch: Architecture, isc: InferenceScenario) -> MemoryComponent:
    sliding = sliding_window_layers(arch)
    per_tok = kv_cache_bytes_per_token(arch, isc.kv_cache_dtype)
    what = ("(kv_lora_rank + qk_rope_head_dim)" if arch.kv_lora_rank
            else f"2 x {arch.num_key_value_heads} kv heads x {arch.head_dim} head_dim")
    formula = (f"{isc.concurrency} sequences x {isc.seq_len:,} tokens x {arch.num_layers} layers x {what} x "
               f"{KV_BYTES[isc.kv_cache_dtype]} B ({per_tok:,} B per token)")
    if sliding:
        formula += f"; {sliding} sliding-window layers hold at most {arch.sliding_window:,} tokens"
    return MemoryComponent(
        key="kv_cache", label="KV cache", bytes=kv_cache_bytes(arch, isc.seq_len, isc.concurrency, isc.kv_cache_dtype),
        phases=("inference",), formula=formula,
        source="transformers DynamicCache / vLLM paged KV cache; Gemma 2 HybridCache; vLLM MLA latent cache",
    )


def _workspace(arch: Architecture, isc: InferenceScenario) -> MemoryComponent:
    tokens = min(isc.prefill_chunk_tokens, isc.concurrency * isc.seq_len)
    inter = arch.intermediate_size * max(arch.experts_per_token, 1)
    per_tok = 2 * arch.hidden_size + 2 * arch.q_out + 2 * arch.kv_out + 3 * inter
    layer = tokens * per_tok * 2
    logits = isc.concurrency * arch.vocab_size * 4
    return MemoryComponent(
        key="activation_workspace", label="Activation workspace", bytes=layer + logits, phases=("inference",),
        formula=f"one layer over {tokens:,} tokens x (2 hidden + 2 q + 2 kv + 3 x MLP width) x 2 B + "
                f"{isc.concurrency} x vocab {arch.vocab_size:,} x 4 B fp32 logits",
        source="transient tensors of one decoder layer (nothing kept for backward); prefill chunk as vLLM max_num_batched_tokens",
    )


def estimate_inference(arch: Architecture, isc: InferenceScenario) -> MemoryEstimate:
    """Serving memory of ``isc`` on one GPU, as a one-phase :class:`~engine.memory.result.MemoryEstimate`."""
    parts = (_weights(arch, isc), _kv(arch, isc), _workspace(arch, isc))
    warnings = []
    stored_warning = serving_weight_precision(arch, isc)[2]
    if stored_warning:
        warnings.append(stored_warning)
    if arch.max_position_embeddings and isc.seq_len > arch.max_position_embeddings:
        warnings.append(f"Context {isc.seq_len:,} exceeds max_position_embeddings ({arch.max_position_embeddings:,}).")
    return MemoryEstimate(
        parts=parts, total_parameters=arch.total_parameters, trainable_parameters=0, attention_kernel="inference",
        bytes_per_parameter=f"{parts[0].bytes / arch.total_parameters:.3g} B per parameter of weights",
        assumptions=("one replica per GPU (no tensor parallelism)", f"prefill chunk {isc.prefill_chunk_tokens:,} tokens"),
        not_modelled=("CUDA context and allocator reserve; vLLM gpu_memory_utilization reserve and CUDA graphs",
                      "tensor parallelism (would divide weights and KV heads over GPUs)",
                      "paged-cache block rounding (vLLM blocks of 16 tokens) and prefix caching",
                      "speculative decoding draft models, LoRA adapters at serving time"),
        warnings=tuple(warnings),
    )


class InferenceLimits(BaseModel):
    """Longest context for the scenario's concurrency, and most sequences at its context, that fit."""

    model_config = ConfigDict(frozen=True)

    usable_bytes: float
    max_seq_len: int | None
    max_concurrency: int | None


def inference_limits(arch: Architecture, isc: InferenceScenario, usable_bytes: float) -> InferenceLimits:
    """Binary searches (the total grows with context and with concurrency): the longest context (up to the
    model's ``max_position_embeddings``) at ``isc.concurrency``, and the most sequences at ``isc.seq_len``."""
    cap = min(arch.max_position_embeddings or MAX_CONTEXT, MAX_CONTEXT)

    def total(**kw: int) -> float:
        return estimate_inference(arch, isc.model_copy(update=kw)).total_bytes

    return InferenceLimits(
        usable_bytes=usable_bytes,
        max_seq_len=largest_true(lambda s: total(seq_len=s) <= usable_bytes, 1, cap),
        max_concurrency=largest_true(lambda c: total(concurrency=c) <= usable_bytes, 1, MAX_CONCURRENCY),
    )
