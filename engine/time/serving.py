"""Serving speed of one replica: prefill and decode tokens per second on the step-time model's rates.

One decode step produces one token for each of the ``concurrency`` sequences. It reads every weight of the rank
once and each sequence's KV cache (the memory estimate's per-rank bytes, :mod:`engine.memory.inference`), so it is
bandwidth-bound until the batch's FLOPs catch up:

    decode step = max(weights + KV read) / HBM rate, 2 x matmul parameters / TP x B / matmul rate)
                  + 2 x layers tensor-parallel all-reduces of B x hidden x 2 B

(the memory-bound decode of Pope et al. 2022, "Efficiently Scaling Transformer Inference", sec. 2-3; the all-reduces
after the row-parallel attention output and MLP down projections, Shoeybi et al. 2019 sec. 3, as vLLM's
``RowParallelLinear`` runs them). A prefill chunk of T tokens is compute-bound: 2 x matmul parameters / TP x T plus
the causal attention's 2 x layers x q width / TP x context x T FLOPs at the matmul rate, the weights read once,
and the same all-reduces over T tokens. Rates: :func:`engine.time.rates.gpu_rates` (the catalog's measured matmul
rate, HBM x :data:`engine.time.rates.HBM_FRACTION`); links and all-reduce: :mod:`engine.time.collectives`. The KV
read is the full context of every sequence (the step at the end of a generation: the slowest one).

Left out: the scheduler's and sampler's host time (CUDA graphs hide kernel launches in vLLM's decode), speculative
decoding, prefix caching, and prefill and decode mixed in one step (chunked prefill).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.hardware.gpus import Gpu
from engine.memory.inference import InferenceScenario, estimate_inference
from engine.model.architecture import Architecture
from engine.scenario.precision import PrecisionMode
from engine.time.collectives import all_reduce_seconds, data_parallel_link
from engine.time.flops import matmul_parameters
from engine.time.rates import gpu_rates

ACTIVATION_BYTES = 2
"""16-bit activations between the tensor-parallel ranks (vLLM serves in the checkpoint's bf16 / fp16)."""


class ServingSpeed(BaseModel):
    """Tokens per second of one replica (``tensor_parallel`` GPUs), and what bounds its decode step."""

    model_config = ConfigDict(frozen=True)

    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    """All ``concurrency`` sequences together, one replica."""
    decode_tokens_per_second_per_sequence: float
    decode_step_s: float
    decode_bytes_per_step: float
    decode_bound: str
    """``memory bandwidth`` or ``compute``: which side of the max sets the decode step."""
    tensor_parallel_comm_s: float
    link: str | None
    hbm_bytes_per_s: float
    matmul_flops: float


def serving_speed(arch: Architecture, isc: InferenceScenario, gpu: Gpu) -> ServingSpeed:
    """:class:`ServingSpeed` of ``isc`` (its concurrency, context and tensor parallelism) on ``gpu`` (see the module
    docstring for the formulas and their sources).

    Raises:
        ScenarioError: a tensor-parallel degree the model cannot be split over.
        ValueError: the catalog has no bf16/fp16 peak for ``gpu``.
    """
    t, b, ctx = isc.tensor_parallel, isc.concurrency, isc.seq_len
    comps = estimate_inference(arch, isc).components
    rates = gpu_rates(gpu, PrecisionMode.BF16 if gpu.bf16 else PrecisionMode.FP16)
    flops_per_token = 2.0 * matmul_parameters(arch) / t
    link = data_parallel_link(gpu, t, gpus_per_node=t) if t > 1 else None

    def comm(tokens: float) -> float:
        if link is None:
            return 0.0
        return all_reduce_seconds(tokens * arch.hidden_size * ACTIVATION_BYTES, t, link, calls=2 * arch.num_layers)

    read = comps["weights"] + comps["kv_cache"]
    memory_s = read / rates.hbm_bytes_per_s
    attention = 2.0 * arch.num_layers * arch.q_out / t * ctx  # QK^T and PV over the context, per new token
    compute_s = (flops_per_token + attention) * b / rates.matmul_flops
    tp_comm = comm(b)
    step = max(memory_s, compute_s) + tp_comm
    chunk = min(isc.prefill_chunk_tokens, ctx)
    prefill_attention = attention / 2  # causal: each prompt token attends to half the context on average
    prefill_s = (max((flops_per_token + prefill_attention) * chunk / rates.matmul_flops,
                     comps["weights"] / rates.hbm_bytes_per_s) + comm(chunk))
    return ServingSpeed(
        prefill_tokens_per_second=chunk / prefill_s, decode_tokens_per_second=b / step,
        decode_tokens_per_second_per_sequence=1.0 / step, decode_step_s=step, decode_bytes_per_step=read,
        decode_bound="memory bandwidth" if memory_s >= compute_s else "compute", tensor_parallel_comm_s=tp_comm,
        link=link.name if link else None, hbm_bytes_per_s=rates.hbm_bytes_per_s, matmul_flops=rates.matmul_flops,
    )
