"""Serving (inference) memory on one GPU: weights at the serving precision, the KV cache of the concurrent
sequences, and an activation workspace; and the longest context / most concurrent sequences that fit.

The result is a :class:`engine.memory.result.MemoryEstimate` with the single phase ``inference``, so the fit engine
(:func:`engine.plan.fit.check_fit`) and the charts take it like a training estimate. It is one GPU's memory: with
``tensor_parallel`` = t, one rank of a t-way tensor-parallel replica, as vLLM (``tensor_parallel_size``) and TGI
(``--num-shard``) split a model: the attention and MLP linears column/row-parallel (Shoeybi et al. 2019 sec. 3;
vLLM ``QKVParallelLinear``, ``MergedColumnParallelLinear``, ``RowParallelLinear``), the embedding and LM head
vocabulary-parallel (``VocabParallelEmbedding``, ``ParallelLMHead``), norms whole on every rank, and the KV cache
of ``kv_heads / t`` heads per rank, one head when t exceeds the KV heads (vLLM replicates them:
``QKVParallelLinear`` ``num_kv_head_replicas``); an MLA latent cache is not split. t must divide the attention
heads, and the KV heads must divide or be divided by t (vLLM's checks). Several replicas serve independently.

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
residual and normed hidden state, q, k, v, attention output, and the MLP's gate, up and product, in 16 bits
(all but the hidden states / t under tensor parallelism), plus fp32 logits of the last token of every sequence
(gathered whole on the first rank, vLLM ``LogitsProcessor``). Engine workspaces (CUDA graphs, the sampler) are not
modelled.

KV-cache budget (:func:`kv_cache_budget`): vLLM gives a rank ``gpu_memory_utilization`` x the GPU's memory and fills
what its weights, activation peak and non-PyTorch memory (CUDA context, NCCL) leave with cache blocks
(``vllm/worker`` ``determine_num_available_blocks``; its log "Maximum concurrency for N tokens per request" is
that cache over N); None (the default) budgets the whole usable memory, as transformers and TGI's default
``--cuda-memory-fraction 1.0`` do.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.search import largest_true
from engine.model.architecture import Architecture
from engine.errors import ScenarioError, explain_validation
from engine.memory.components import MemoryComponent
from engine.memory.device import CUDA_CONTEXT_BYTES
from engine.memory.result import MemoryEstimate

MAX_CONTEXT = 1 << 21
MAX_TENSOR_PARALLEL = 64
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

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built when first used

    weight_precision: WeightPrecision | None = None
    """None: as the checkpoint stores them (its ``quantization_config``), bf16 when it is not quantized."""
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.BF16
    concurrency: int = Field(1, ge=1, le=MAX_CONCURRENCY)
    seq_len: int = Field(4096, ge=1, le=MAX_CONTEXT)
    prefill_chunk_tokens: int = Field(DEFAULT_PREFILL_CHUNK, ge=1, le=1 << 20)
    tensor_parallel: int = Field(1, ge=1, le=MAX_TENSOR_PARALLEL)
    """GPUs of one replica (vLLM ``tensor_parallel_size``, TGI ``--num-shard``); the estimate is one rank's."""
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1)
    """vLLM's share of the GPU's memory for weights, activations and KV cache; None: all of the usable memory."""

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


def kv_heads_per_rank(arch: Architecture, tp: int) -> float:
    """Key/value heads one of ``tp`` ranks caches: kv_heads / tp, at least one (vLLM replicates a KV head over the
    ranks that share it when tp > kv_heads). An MLA latent (no heads) is whole on every rank."""
    return max(arch.num_key_value_heads / tp, 1.0)


def kv_values_per_token_per_rank(arch: Architecture, tp: int = 1) -> float:
    """:func:`kv_values_per_token_per_layer` on one of ``tp`` tensor-parallel ranks."""
    if arch.kv_lora_rank or tp == 1:
        return kv_values_per_token_per_layer(arch)
    return 2 * kv_heads_per_rank(arch, tp) * arch.head_dim


def kv_cache_bytes_per_token(arch: Architecture, dtype: KvCacheDtype = KvCacheDtype.BF16, tp: int = 1) -> int:
    """Bytes one token adds to one rank's cache with every layer caching it: 2 x layers x kv_heads (/ TP) x head_dim x
    bytes."""
    return round(arch.num_layers * kv_values_per_token_per_rank(arch, tp) * KV_BYTES[dtype])


def kv_cache_bytes(arch: Architecture, seq_len: int, concurrency: int = 1, dtype: KvCacheDtype = KvCacheDtype.BF16,
                   tp: int = 1) -> int:
    """KV cache of ``concurrency`` sequences of ``seq_len`` tokens on one of ``tp`` ranks; sliding-window layers hold
    min(seq, window)."""
    per_layer_token = kv_values_per_token_per_rank(arch, tp) * KV_BYTES[dtype]
    sliding = sliding_window_layers(arch)
    tokens = (arch.num_layers - sliding) * seq_len + sliding * min(seq_len, arch.sliding_window or seq_len)
    return round(per_layer_token * tokens * concurrency)


def tensor_parallel_problems(arch: Architecture, tp: int) -> list[str]:
    """Why ``arch`` cannot be served over ``tp`` tensor-parallel ranks (empty when it can): vLLM's checks."""
    out = []
    if tp > 1 and arch.kind != "decoder":
        out.append("tensor-parallel serving is modelled for decoder-only models")
    if arch.num_attention_heads % tp:
        out.append(f"tensor parallel {tp} does not divide the {arch.num_attention_heads} attention heads")
    kv = arch.num_key_value_heads
    if not arch.kv_lora_rank and kv % tp and tp % kv:
        out.append(f"tensor parallel {tp} and the {kv} key/value heads: one must divide the other")
    return out


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
    t = isc.tensor_parallel
    lin = sum(g.parameters for g in arch.tensors if g.linear)
    vocab = sum(g.parameters for g in arch.tensors if g.role in ("embeddings", "lm_head"))
    other = arch.total_parameters - lin - vocab  # norms, routers: whole on every rank
    b, label, _ = serving_weight_precision(arch, isc)
    split = f" / TP {t}" if t > 1 else ""
    return MemoryComponent(
        key="weights", label="Weights", bytes=lin * b / t + vocab * 2.0 / t + other * 2.0, phases=("inference",),
        formula=f"{lin:,} linear-layer params{split} x {b:.4g} B ({label}) + {vocab:,} embedding and LM-head params"
                f"{split} x 2 B + {other:,} other params (norms) x 2 B",
        source="the checkpoint's quantization_config when stored quantized (engine.model.quantization); else GPTQ/AWQ "
               "group 128 (0.5 B + fp16 scale and zero per 128); int8/FP8 1 B; embeddings and LM head kept 16-bit",
    )


def _kv(arch: Architecture, isc: InferenceScenario) -> MemoryComponent:
    sliding = sliding_window_layers(arch)
    t = isc.tensor_parallel
    per_tok = kv_cache_bytes_per_token(arch, isc.kv_cache_dtype, t)
    heads = kv_heads_per_rank(arch, t)
    what = ("(kv_lora_rank + qk_rope_head_dim)" if arch.kv_lora_rank
            else f"2 x {heads:g} kv heads" + (f" (of {arch.num_key_value_heads}, TP {t})" if t > 1 else "")
            + f" x {arch.head_dim} head_dim")
    formula = (f"{isc.concurrency} sequences x {isc.seq_len:,} tokens x {arch.num_layers} layers x {what} x "
               f"{KV_BYTES[isc.kv_cache_dtype]} B ({per_tok:,} B per token)")
    if sliding:
        formula += f"; {sliding} sliding-window layers hold at most {arch.sliding_window:,} tokens"
    return MemoryComponent(
        key="kv_cache", label="KV cache", bytes=kv_cache_bytes(arch, isc.seq_len, isc.concurrency, isc.kv_cache_dtype, t),
        phases=("inference",), formula=formula,
        source="transformers DynamicCache / vLLM paged KV cache; Gemma 2 HybridCache; vLLM MLA latent cache",
    )


def _workspace(arch: Architecture, isc: InferenceScenario) -> MemoryComponent:
    tokens = min(isc.prefill_chunk_tokens, isc.concurrency * isc.seq_len)
    inter = arch.intermediate_size * max(arch.experts_per_token, 1)
    t = isc.tensor_parallel
    per_tok = 2 * arch.hidden_size + (2 * arch.q_out + 2 * arch.kv_out + 3 * inter) / t
    layer = tokens * per_tok * 2
    logits = isc.concurrency * arch.vocab_size * 4
    return MemoryComponent(
        key="activation_workspace", label="Activation workspace", bytes=layer + logits, phases=("inference",),
        formula=f"one layer over {tokens:,} tokens x (2 hidden + (2 q + 2 kv + 3 x MLP width){f' / TP {t}' if t > 1 else ''}) x 2 B + "
                f"{isc.concurrency} x vocab {arch.vocab_size:,} x 4 B fp32 logits",
        source="transient tensors of one decoder layer (nothing kept for backward); prefill chunk as vLLM max_num_batched_tokens",
    )


def estimate_inference(arch: Architecture, isc: InferenceScenario) -> MemoryEstimate:
    """Serving memory of ``isc`` on one GPU (one tensor-parallel rank), as a one-phase
    :class:`~engine.memory.result.MemoryEstimate`.

    Raises:
        ScenarioError: a tensor-parallel degree the model cannot be split over (:func:`tensor_parallel_problems`).
    """
    problems = tensor_parallel_problems(arch, isc.tensor_parallel)
    if problems:
        raise ScenarioError("; ".join(problems))
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
        assumptions=(("one replica per GPU" if isc.tensor_parallel == 1 else
                      f"one rank of a {isc.tensor_parallel}-way tensor-parallel replica (vLLM / TGI sharding)"),
                     f"prefill chunk {isc.prefill_chunk_tokens:,} tokens"),
        not_modelled=("CUDA context and allocator reserve here (the KV-cache budget counts the CUDA context); CUDA graphs",
                      "pipeline parallelism and expert parallelism at serving time; vocabulary padding to 64 x TP",
                      "paged-cache block rounding (vLLM blocks of 16 tokens) and prefix caching",
                      "speculative decoding draft models, LoRA adapters at serving time"),
        warnings=tuple(warnings),
    )


class InferenceLimits(BaseModel):
    """What one rank's memory budget allows: the longest context at the scenario's concurrency, the most sequences at
    its context, and the KV cache the budget leaves (bytes and tokens) at the scenario's own settings."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    usable_bytes: float
    budget_bytes: float
    kv_cache_budget_bytes: float
    kv_cache_tokens: int
    max_seq_len: int | None
    max_concurrency: int | None


def memory_budget(isc: InferenceScenario, usable_bytes: float) -> float:
    """Bytes the tensors of one rank may take: ``usable_bytes``, or vLLM's ``gpu_memory_utilization`` x it less the
    non-PyTorch memory it counts inside that share (the CUDA context, :data:`engine.memory.device.CUDA_CONTEXT_BYTES`)."""
    if isc.gpu_memory_utilization is None:
        return usable_bytes
    return usable_bytes * isc.gpu_memory_utilization - CUDA_CONTEXT_BYTES


def inference_limits(arch: Architecture, isc: InferenceScenario, usable_bytes: float) -> InferenceLimits:
    """Binary searches (the total grows with context and with concurrency) within :func:`memory_budget`: the longest
    context (up to the model's ``max_position_embeddings``) at ``isc.concurrency``, and the most sequences at
    ``isc.seq_len``; and the KV cache left beside the weights and the workspace (vLLM's "GPU KV cache size")."""
    cap = min(arch.max_position_embeddings or MAX_CONTEXT, MAX_CONTEXT)
    budget = memory_budget(isc, usable_bytes)

    def total(**kw: int) -> float:
        return estimate_inference(arch, isc.model_copy(update=kw)).total_bytes

    est = estimate_inference(arch, isc).components
    kv_budget = max(budget - est["weights"] - est["activation_workspace"], 0.0)
    per_tok = kv_cache_bytes_per_token(arch, isc.kv_cache_dtype, isc.tensor_parallel)
    return InferenceLimits(
        usable_bytes=usable_bytes, budget_bytes=budget, kv_cache_budget_bytes=kv_budget,
        kv_cache_tokens=int(kv_budget // per_tok),
        max_seq_len=largest_true(lambda s: total(seq_len=s) <= budget, 1, cap),
        max_concurrency=largest_true(lambda c: total(concurrency=c) <= budget, 1, MAX_CONCURRENCY),
    )
