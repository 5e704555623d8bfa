"""One training step on one GPU, added up from its work: matmuls, attention, memory-bound ops, dequantization,
the optimizer step, communication and fixed overhead.

The walk is the memory estimate's: the same :class:`~engine.model.architecture.Architecture` (``layer_linears``
for the GEMMs, sizes for the elementwise ops) and the same :class:`~engine.memory.result.MemoryEstimate` (bytes of
weights, gradients and optimizer states, the attention kernel). A micro batch runs

- forward: block and LM-head GEMMs (:mod:`engine.time.gemm`), attention (:mod:`engine.time.attention`), the
  elementwise ops and autocast's casts (:mod:`engine.time.memory_bound`), dequantization of 4-bit weights;
- backward: input- and weight-gradient GEMMs, attention backward, elementwise backward, the loss over the
  vocabulary, the embedding's gradient; with gradient checkpointing, each block's forward again (recompute);

each pass taking ``max(GPU time, kernels x CPU time per kernel)`` (:mod:`engine.time.overhead`). The optimizer
step and gradient clipping run once per optimizer step (1/N of it per GPU under ZeRO/FSDP), then collectives
(:mod:`engine.time.collectives`) add what compute does not hide.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.hardware.gpus import Gpu
from engine.memory.parallel import Strategy
from engine.memory.result import MemoryEstimate
from engine.model.architecture import Architecture
from engine.scenario.lora import resolve_targets
from engine.scenario.precision import precision_spec
from engine.scenario.training import Framework, Method, Scenario
from engine.time import collectives as cc
from engine.time.attention import attention_seconds
from engine.time.gemm import gemm_seconds, step_gemms
from engine.time.memory_bound import (
    BACKWARD_FACTOR, cast_bytes_per_use, dequant_bytes_per_use, layer_forward_bytes, loss_bytes, optimizer_bytes,
)
from engine.time.overhead import BACKWARD_HOST_FACTOR, SECONDS_PER_KERNEL, STEP_SECONDS, layer_kernels, optimizer_host_seconds
from engine.time.rates import GpuRates

CATEGORIES = ("matmul", "attention", "memory_bound", "dequantization", "optimizer", "communication", "overhead")
"""Categories of :attr:`StepTime.breakdown_s`, in display order."""

DDP_BUCKET_BYTES = 25e6
"""DDP's gradient bucket (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel default)."""

HEAD_KERNELS = 8
"""Kernels of the final norm, LM head and loss in forward (embedding, norm, GEMM, upcast, log-softmax, NLL, mean)."""


class StepTime(BaseModel):
    """Seconds of one optimizer step (micro batch x accumulation steps) on one GPU, by category, and the FLOPs
    it executes. ``breakdown_s`` maps each of :data:`CATEGORIES` to seconds; they add up to ``total_s``."""

    model_config = ConfigDict(frozen=True)

    tokens: int
    breakdown_s: dict[str, float]
    executed_flops: float
    model_flops: float
    attention_kernel: str
    link: str | None = None

    @property
    def total_s(self) -> float:
        """Wall seconds of the step."""
        return sum(self.breakdown_s.values())

    @property
    def tokens_per_second(self) -> float:
        """Tokens per second of one GPU."""
        return self.tokens / self.total_s


def step_time(
    arch: Architecture, sc: Scenario, est: MemoryEstimate, gpu: Gpu, rates: GpuRates, *,
    num_gpus: int = 1, strategy: Strategy = Strategy.DDP, fused_kernels: bool = False,
) -> StepTime:
    """The step of ``sc`` on one of ``num_gpus`` x ``gpu`` with ``strategy`` (see the module docstring).

    ``est`` is the memory estimate of ``sc`` (its attention kernel is the one timed); ``rates`` the GPU's
    :func:`engine.time.rates.gpu_rates`; ``fused_kernels``: torch.compile, Unsloth or Liger fuse the elementwise
    chains (fewer bytes and kernels, :mod:`engine.time.memory_bound`, :mod:`engine.time.overhead`).
    """
    spec = precision_spec(sc.precision)
    c = spec.compute_bytes
    bw, mm = rates.hbm_bytes_per_s, rates.matmul_flops
    kernel = est.attention_kernel
    t = float(sc.tokens_per_micro_batch)
    layers = arch.num_layers
    resid = 4 if (spec.weight_bytes == 4 or (sc.method is Method.QLORA and sc.prepare_kbit_training)) else spec.weight_bytes

    # Matmuls, by phase; the blocks' forward again under checkpointing.
    g = {"forward": 0.0, "backward": 0.0, "recompute": 0.0}
    gemm_flops = recompute_flops = 0.0
    for gm in step_gemms(arch, sc, c):
        s = gemm_seconds(gm, mm, bw)
        g[gm.phase] += s
        gemm_flops += gm.flops
        if sc.gradient_checkpointing and gm.phase == "forward" and gm.part != "lm_head":
            g["recompute"] += s
            recompute_flops += gm.flops
    a_fwd, a_bwd, a_full = attention_seconds(arch, kernel, t, sc.seq_len, c, rates)
    a_rec = a_fwd if sc.gradient_checkpointing else 0.0
    # PaLM (Chowdhery et al. 2022, appendix B): model FLOPs count attention's full square three times (forward,
    # two backward matmuls each); hardware FLOPs add the recompute.
    model_flops = gemm_flops + 3.0 * a_full
    flops = model_flops + recompute_flops + (a_full if sc.gradient_checkpointing else 0.0)

    # Memory-bound ops.
    fused = fused_kernels
    elem_fwd = layers * layer_forward_bytes(arch, c, resid, fused) * t / bw
    linear_params = sum(gr.parameters for gr in arch.tensors if gr.linear)
    cast_f, cast_b = cast_bytes_per_use(spec.autocast and spec.weight_bytes == 4)
    casts_fwd = cast_f * linear_params / bw
    casts_bwd = (cast_b if sc.method is Method.FULL else 0.0) * linear_params / bw
    head = (loss_bytes(arch, sc, c) * t + 2 * resid * arch.hidden_size * t) / bw
    embed_grad = 2 * arch.vocab_size * arch.hidden_size * (4 if spec.weight_bytes == 4 else c) / bw \
        if sc.method is Method.FULL else 0.0
    mb_fwd = elem_fwd + casts_fwd
    mb_bwd = BACKWARD_FACTOR * elem_fwd + casts_bwd + head + embed_grad
    mb_rec = mb_fwd if sc.gradient_checkpointing else 0.0
    dq = dequant_bytes_per_use(sc, c) * linear_params / bw
    dq_fwd, dq_bwd, dq_rec = dq, dq, (dq if sc.gradient_checkpointing else 0.0)

    # Each pass: GPU time or the host's kernel launches, whichever is longer.
    k_layer = layer_kernels(arch, sc, kernel, fused)
    k_fwd = layers * k_layer + HEAD_KERNELS
    k_bwd = BACKWARD_HOST_FACTOR * k_fwd + (layers * k_layer if sc.gradient_checkpointing else 0.0)
    gpu_fwd = g["forward"] + a_fwd + mb_fwd + dq_fwd
    gpu_bwd = g["backward"] + g["recompute"] + a_bwd + a_rec + mb_bwd + mb_rec + dq_bwd + dq_rec
    host = max(0.0, k_fwd * SECONDS_PER_KERNEL - gpu_fwd) + max(0.0, k_bwd * SECONDS_PER_KERNEL - gpu_bwd)
    gas = sc.gradient_accumulation_steps

    # The optimizer step, sharded over the GPUs by every ZeRO stage and FSDP.
    shards = num_gpus if strategy is not Strategy.DDP else 1
    parts = est.parts_by_key
    states = sum(p.bytes for p in est.parts if p.key == "optimizer_states")
    grads = parts["gradients"].bytes if "gradients" in parts else 0.0
    trainable_w = parts["weights"].bytes if sc.method is Method.FULL else \
        est.trainable_parameters * (4 if sc.framework is Framework.HF else spec.weight_bytes)
    opt_bytes = optimizer_bytes(trainable_w, states, grads, sc.optimizer, clip=sc.framework is Framework.HF)
    tensors = _trainable_tensors(arch, sc)
    opt_gpu = opt_bytes / shards / bw
    opt = max(opt_gpu, optimizer_host_seconds(sc.optimizer, -(-tensors // shards)))

    comm, link = _communication(arch, sc, est, gpu, num_gpus, strategy, gpu_fwd, gpu_bwd)
    breakdown = {
        "matmul": gas * (g["forward"] + g["backward"] + g["recompute"]),
        "attention": gas * (a_fwd + a_bwd + a_rec),
        "memory_bound": gas * (mb_fwd + mb_bwd + mb_rec),
        "dequantization": gas * (dq_fwd + dq_bwd + dq_rec),
        "optimizer": opt_gpu,
        "communication": comm,
        "overhead": gas * host + STEP_SECONDS + (opt - opt_gpu),
    }
    return StepTime(
        tokens=int(t) * gas, breakdown_s=breakdown, executed_flops=flops * gas, model_flops=model_flops * gas,
        attention_kernel=kernel, link=link,
    )


def _trainable_tensors(arch: Architecture, sc: Scenario) -> int:
    """Trainable parameter tensors (the optimizer's per-tensor work)."""
    if sc.method is Method.FULL:
        return sum(gr.count for gr in arch.tensors)
    return 2 * sum(lin.count * lin.blocks(arch.num_layers) for lin in resolve_targets(arch, sc.lora_targets))


def _communication(arch: Architecture, sc: Scenario, est: MemoryEstimate, gpu: Gpu, n: int, strategy: Strategy,
                   gpu_fwd: float, gpu_bwd: float) -> tuple[float, str | None]:
    """Exposed seconds of the data-parallel collectives of one optimizer step, and the link's name.

    DDP: one all-reduce of the gradients per optimizer step (``no_sync`` on accumulation micro batches), in
    :data:`DDP_BUCKET_BYTES` buckets, under the last backward. ZeRO-1: a reduce-scatter per step, then an all-gather
    of the updated 16-bit weights (not hidden). ZeRO-2 / FSDP SHARD_GRAD_OP: the reduce-scatter every micro batch
    (under backward) and the all-gather once. ZeRO-3 / FSDP FULL_SHARD: every micro batch all-gathers the weights
    in forward and again in backward and reduce-scatters the gradients, one call per block, prefetched under
    compute (Rajbhandari et al. 2020, "ZeRO", sec. 7: 1.5x DDP's volume).
    """
    if n <= 1:
        return 0.0, None
    link = cc.data_parallel_link(gpu, n)
    parts = est.parts_by_key
    grads = parts["gradients"].bytes if "gradients" in parts else 0.0
    weights = parts["weights"].bytes
    gas = sc.gradient_accumulation_steps
    calls = arch.num_layers
    if strategy is Strategy.DDP:
        ar = cc.all_reduce_seconds(grads, n, link, calls=max(1, int(grads // DDP_BUCKET_BYTES) + 1))
        return cc.exposed_seconds(ar, gpu_bwd), link.name
    gather_w = 2.0 * est.trainable_parameters if sc.method is Method.FULL else 0.0  # updated 16-bit weights
    if strategy is Strategy.ZERO1:
        rs = cc.reduce_scatter_seconds(grads, n, link, calls)
        return cc.exposed_seconds(rs, gpu_bwd) + cc.all_gather_seconds(gather_w, n, link, calls), link.name
    if strategy in (Strategy.ZERO2, Strategy.FSDP_SHARD_GRAD_OP):
        rs = cc.reduce_scatter_seconds(grads, n, link, calls)
        return gas * cc.exposed_seconds(rs, gpu_bwd) + cc.all_gather_seconds(gather_w, n, link, calls), link.name
    ag = cc.all_gather_seconds(weights, n, link, calls)
    rs = cc.reduce_scatter_seconds(grads, n, link, calls)
    return gas * (cc.exposed_seconds(ag, gpu_fwd) + cc.exposed_seconds(ag + rs, gpu_bwd)), link.name
