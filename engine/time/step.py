"""One training step on one GPU, added up from its work: matmuls, attention, memory-bound ops, dequantization,
the optimizer step, communication and fixed overhead.

The walk is the memory estimate's: the same :class:`~engine.model.architecture.Architecture` (``layer_linears``
for the GEMMs, sizes for the elementwise ops) and the same :class:`~engine.memory.result.MemoryEstimate` (bytes of
weights, gradients and optimizer states, the attention kernel). A micro batch runs

- forward: block and LM-head GEMMs (:mod:`engine.time.gemm`), attention (:mod:`engine.time.attention`), the
  elementwise ops and autocast's casts (:mod:`engine.time.memory_bound`), dequantization of 4-bit weights;
- backward: input- and weight-gradient GEMMs, attention backward, elementwise backward, the loss over the
  vocabulary, the embedding's gradient; with gradient checkpointing, each block's forward again (recompute);
  under freeze-tuning (:mod:`engine.scenario.freeze`) backward and recompute run through the N trainable blocks
  only (their input and weight gradients), with the frozen LM head's input gradient and no embedding gradient;

each pass taking ``max(GPU time, kernels x CPU time per kernel)`` (:mod:`engine.time.overhead`), except the backward
of a layer-wise optimizer that synchronises in every in-backward step (``galore_adamw_8bit_layerwise``), which takes
their sum. The optimizer step and gradient clipping run once per optimizer step (1/N of it per GPU under ZeRO/FSDP),
then collectives (:mod:`engine.time.collectives`) add what compute does not hide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from engine.hardware.gpus import Gpu
from engine.memory.parallel import Strategy
from engine.memory.result import MemoryEstimate
from engine.model.architecture import Architecture, LinearLayer
from engine.scenario.peft import LORA_FAMILY, effective_seq_len, targeted
from engine.scenario.freeze import backward_share, split_groups, weight_share
from engine.scenario.precision import precision_spec
from engine.scenario.training import Framework, Method, Scenario
from engine.time import collectives as cc
from engine.time.adapters import (
    extra_adapter_flops, galore_8bit_step_bytes, galore_flops_per_step, offload_transfer_bytes,
)
from engine.time.attention import attention_seconds, attention_work
from engine.time.gemm import GemmTable, GemmWork, gemm_shapes, routed_tokens
from engine.time.memory_bound import (
    BACKWARD_FACTOR, cast_bytes_per_use, dequant_bytes_per_use, layer_forward_bytes, loss_bytes, optimizer_bytes,
    runs_fused,
)
from engine.time.overhead import (
    STEP_SECONDS, backward_host_factor, host_seconds_per_kernel, layer_kernels, optimizer_step_seconds,
)
from engine.time.rates import GpuRates

CATEGORIES = ("matmul", "attention", "memory_bound", "dequantization", "optimizer", "communication", "overhead")
"""Categories of :attr:`StepTime.breakdown_s`, in display order."""

DDP_BUCKET_BYTES = 25e6
"""DDP's gradient bucket (``bucket_cap_mb=25``, torch.nn.parallel.DistributedDataParallel default)."""

HEAD_KERNELS = 8
"""Kernels of the final norm, LM head and loss in forward (embedding, norm, GEMM, upcast, log-softmax, NLL, mean)."""


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds of one optimizer step (micro batch x accumulation steps) on one GPU, by category, and the FLOPs
    it executes. ``breakdown_s`` maps each of :data:`CATEGORIES` to seconds; they add up to ``total_s``.

    A plain frozen dataclass, not a pydantic model: only :func:`step_time` builds it, from computed numbers (nothing
    to validate), once per plan; pydantic models that hold one (PlanEstimate) take the instance as it is."""

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


class _Work(NamedTuple):
    """What one micro batch and optimizer step do, independent of the GPU (cached per architecture and scenario)."""

    gemms: GemmWork  # the blocks' forward (also the recompute), the LM head's forward, the backward
    model_flops: float
    executed_flops: float
    attention_full: float
    elem_fwd_bytes: float
    casts_fwd_bytes: float
    casts_bwd_bytes: float
    head_bytes: float
    embed_grad_bytes: float
    dequant_bytes: float
    kernels_fwd: float
    kernels_bwd: float
    tensors: int
    adapter_flops: float  # PEFT methods' work beyond the base and LoRA GEMMs (engine.time.adapters)
    offload_bytes: float  # Unsloth-style offloaded checkpointing: block inputs to the CPU and back, per micro batch
    backward_share: float = 1.0  # freeze-tuning: the share of blocks backward and recompute run through


_WORK: dict[tuple[int, Scenario, bool, str], tuple[Architecture, _Work]] = {}
_WORK_SIZE = 512
"""Cached works (a page rerun, the plan search over every GPU and the shape sweep reuse them); keyed by the
architecture's identity, checked against the cached object itself."""

class _Method(NamedTuple):
    """The part of a work that does not depend on the micro batch's shape (cached per architecture and method)."""

    adapted: list[LinearLayer]  # the modules a PEFT method adapts
    targets: list[LinearLayer]  # those with LoRA's A/B GEMMs (the LoRA family only)
    gemms: GemmTable
    linear_params: int
    layer_bytes: float  # elementwise forward bytes per token of one block
    layer_kernels: float
    tensors: int


_METHODS: dict[int, tuple[Architecture, dict]] = {}
_METHODS_SIZE = 64
"""Per architecture (keyed like :data:`_WORK`), the :class:`_Method` of each method setting seen: a new sequence
length or micro batch then redoes only the token-dependent arithmetic (benchmarks/bench_engine.py times it)."""


def _method(arch: Architecture, sc: Scenario, kernel: str, fused: bool, c: int, resid: int) -> _Method:
    """The cached :class:`_Method` of ``sc`` on ``arch`` (a raised error, e.g. a bad target module, is not cached)."""
    hit = _METHODS.get(id(arch))
    if hit is None or hit[0] is not arch:
        if len(_METHODS) >= _METHODS_SIZE:
            _METHODS.clear()
        hit = _METHODS[id(arch)] = (arch, {})
    key = (sc.method, sc.lora_targets, sc.lora_r, sc.trainable_layers, sc.frozen_input_grads, sc.attention, kernel,
           fused, c, resid)
    m = hit[1].get(key)
    if m is None:
        adapted = targeted(arch, sc)  # LoRA's A/B GEMMs only for the LoRA family
        targets = adapted if sc.method in LORA_FAMILY else []
        train_base = sc.method is Method.FULL
        m = hit[1][key] = _Method(
            adapted=adapted, targets=targets,
            gemms=GemmTable(gemm_shapes(arch, train_base, targets, sc.lora_r, backward_share(arch, sc),
                                        weight_share(arch, sc)), c),
            linear_params=sum(gr.parameters for gr in arch.tensors if gr.linear),
            layer_bytes=layer_forward_bytes(arch, c, resid, fused),
            layer_kernels=layer_kernels(arch, sc, kernel, fused, sum(lin.count for lin in adapted)),
            tensors=_trainable_tensors(arch, sc, targets),
        )
    return m


def _work(arch: Architecture, sc: Scenario, kernel: str, fused: bool) -> _Work:
    """The GPU-independent work of ``sc`` on ``arch``: GEMM shapes, bytes, kernel counts (see the module docstring)."""
    key = (id(arch), sc, fused, kernel)
    hit = _WORK.get(key)
    if hit is not None and hit[0] is arch:
        return hit[1]
    spec = precision_spec(sc.precision)
    c = spec.compute_bytes
    t = float(sc.tokens_per_micro_batch)
    layers = arch.num_layers
    resid = 4 if (spec.weight_bytes == 4 or (sc.method is Method.QLORA and sc.prepare_kbit_training)) else spec.weight_bytes
    m = _method(arch, sc, kernel, fused, c, resid)
    ckpt = sc.gradient_checkpointing
    share = backward_share(arch, sc)  # 1 but under freeze-tuning: backward stops at the first trainable block
    gemms = m.gemms.work((t, routed_tokens(arch, t)))
    gemm_flops, recompute_flops = gemms.flops, (gemms.block_flops * share if ckpt else 0.0)
    full = attention_work(arch, t, sc.seq_len)
    # PaLM (Chowdhery et al. 2022, appendix B): model FLOPs count attention's full square three times (forward, two
    # backward matmuls); hardware FLOPs add the recompute.
    model_flops = gemm_flops + (1.0 + 2.0 * share) * full
    executed = model_flops + recompute_flops + (full * share if ckpt else 0.0)
    cast_f, cast_b = cast_bytes_per_use(spec.autocast and spec.weight_bytes == 4)
    k_fwd = layers * m.layer_kernels + HEAD_KERNELS
    w = _Work(
        gemms=gemms,
        model_flops=model_flops, executed_flops=executed, attention_full=full,
        elem_fwd_bytes=layers * m.layer_bytes * t,
        casts_fwd_bytes=cast_f * m.linear_params * weight_share(arch, sc),  # freeze-tuning: the frozen rest is 16-bit
        casts_bwd_bytes=(cast_b * weight_share(arch, sc) if sc.method is Method.FULL else 0.0) * m.linear_params,
        head_bytes=loss_bytes(arch, sc, c) * t + 2 * resid * arch.hidden_size * t,
        embed_grad_bytes=(2 * arch.vocab_size * arch.hidden_size * (4 if spec.weight_bytes == 4 else c)
                          if sc.method is Method.FULL and sc.trainable_layers is None else 0.0),
        dequant_bytes=dequant_bytes_per_use(sc, c) * m.linear_params,
        kernels_fwd=k_fwd,
        kernels_bwd=(backward_host_factor(sc.framework is Framework.HF, fused, sc.torch_compile)
                     * (layers * m.layer_kernels * share + HEAD_KERNELS)
                     + (layers * m.layer_kernels * share if ckpt else 0.0)),
        tensors=m.tensors,
        adapter_flops=extra_adapter_flops(arch, sc, m.adapted),
        offload_bytes=offload_transfer_bytes(arch, sc, resid),
        backward_share=share,
    )
    if len(_WORK) >= _WORK_SIZE:
        _WORK.clear()
    _WORK[key] = (arch, w)
    return w


def step_time(
    arch: Architecture, sc: Scenario, est: MemoryEstimate, gpu: Gpu, rates: GpuRates, *,
    num_gpus: int = 1, strategy: Strategy = Strategy.DDP, fused_kernels: bool = False, cuda_graphs: bool = False,
) -> StepTime:
    """The step of ``sc`` on one of ``num_gpus`` x ``gpu`` with ``strategy`` (see the module docstring).

    ``est`` is the memory estimate of ``sc`` (its attention kernel is the one timed); ``rates`` the GPU's
    :func:`engine.time.rates.gpu_rates`; fused elementwise chains (fewer bytes and kernels,
    :mod:`engine.time.memory_bound`, :mod:`engine.time.overhead`) when the run compiles (``sc.torch_compile``) or
    ``fused_kernels`` says it runs other fused kernels (Unsloth, Liger, Triton kernels:
    :func:`engine.time.memory_bound.runs_fused`).
    ``cuda_graphs``: the forward and backward are replayed as CUDA graphs (``torch.compile(mode="reduce-overhead")``,
    PyTorch's torch.compile docs: "reduces the overhead of Python with CUDA graphs"): one graph launch replaces the
    host's per-kernel launches, so the passes take their GPU time only (the host term below is 0; the GPU-side cost
    of each graph node is not counted). The optimizer step outside the compiled model keeps its host loop.
    """
    kernel = est.attention_kernel
    # Prompt tuning and P-tuning prepend virtual tokens: the model runs on s + n tokens per sequence (the tokens
    # trained on, and so tokens/s, stay the user's s).
    user_tokens = sc.tokens_per_micro_batch
    if effective_seq_len(sc) != sc.seq_len:
        sc = sc.model_copy(update={"seq_len": effective_seq_len(sc)})
    fused = runs_fused(sc, fused_kernels)
    w = _work(arch, sc, kernel, fused)
    bw, mm = rates.hbm_bytes_per_s, rates.matmul_flops
    g_block, g_head, g_bwd = w.gemms.seconds(mm, bw, rates.sm_count)
    g_fwd = g_block + g_head
    spec = precision_spec(sc.precision)
    a_fwd, a_bwd, _ = attention_seconds(arch, kernel, float(sc.tokens_per_micro_batch), sc.seq_len,
                                        spec.compute_bytes, rates)
    ckpt, share = sc.gradient_checkpointing, w.backward_share
    a_bwd *= share  # freeze-tuning: only the trainable blocks run backward (and their recompute)
    g_rec = g_block * share if ckpt else 0.0
    a_rec = a_fwd * share if ckpt else 0.0
    elem_fwd = w.elem_fwd_bytes / bw
    mb_fwd = elem_fwd + w.casts_fwd_bytes / bw
    mb_bwd = BACKWARD_FACTOR * elem_fwd * share + (w.casts_bwd_bytes + w.head_bytes + w.embed_grad_bytes) / bw
    mb_rec = mb_fwd * share if ckpt else 0.0
    dq = w.dequant_bytes / bw
    dq_rec = dq if ckpt else 0.0

    # Each pass: GPU time or the host's kernel launches, whichever is longer.
    # PEFT methods' extra work (a forward and two backward matmuls per adapted module, engine.time.adapters), at
    # the GEMM rate: a third in the forward (and the recompute), two thirds in the backward.
    ad = w.adapter_flops / mm
    ad_fwd, ad_bwd = ad / 3, 2 * ad / 3 + (ad / 3 if ckpt else 0.0)
    gpu_fwd = g_fwd + a_fwd + mb_fwd + dq + ad_fwd
    gpu_bwd = g_bwd + g_rec + a_bwd + a_rec + mb_bwd + mb_rec + dq + dq_rec + ad_bwd
    spk = host_seconds_per_kernel(sc.framework is Framework.HF, fused)
    # An optimizer stepped per parameter inside backward that waits for the GPU after each one (layer-wise GaLore
    # 8-bit: GaLoreAdamW8bit.step's torch.cuda.synchronize() in every post-accumulate-grad hook) empties the launch
    # queue at each parameter: the backward's host launches no longer run ahead of its kernels, so the two add.
    layerwise = sc.optimizer.record.layerwise
    host_bwd = w.kernels_bwd * spk if layerwise else max(0.0, w.kernels_bwd * spk - gpu_bwd)
    host = 0.0 if cuda_graphs else max(0.0, w.kernels_fwd * spk - gpu_fwd) + host_bwd
    gas = sc.gradient_accumulation_steps

    # The optimizer step, sharded over the GPUs by every ZeRO stage and FSDP.
    shards = num_gpus if strategy is not Strategy.DDP else 1
    parts = est.parts_by_key
    states = sum(p.bytes for p in est.parts if p.key == "optimizer_states")
    grads = parts["gradients"].bytes if "gradients" in parts else 0.0
    trainable_w = parts["weights"].bytes if sc.method is Method.FULL and sc.trainable_layers is None else \
        est.trainable_parameters * (4 if sc.framework is Framework.HF else spec.weight_bytes)
    if layerwise:
        opt_bytes = galore_8bit_step_bytes(arch, sc, spec.weight_bytes)
    else:
        opt_bytes = optimizer_bytes(trainable_w, states, grads, sc.optimizer, clip=sc.framework is Framework.HF)
    # GaLore projects every gradient and the update (and refreshes its SVD every update_proj_gap steps): matmul work.
    opt_gpu = opt_bytes / shards / bw + galore_flops_per_step(arch, sc) / shards / mm
    opt = optimizer_step_seconds(sc.optimizer, -(-w.tensors // shards), opt_gpu)

    comm, link = _communication(arch, sc, est, parts, gpu, num_gpus, strategy, gpu_fwd, gpu_bwd)
    # Offloaded checkpointing copies overlap compute (non_blocking); what the passes do not hide is exposed.
    offload = gas * max(0.0, w.offload_bytes / cc.host_link_bytes_per_s(gpu) - gpu_fwd - gpu_bwd) \
        if w.offload_bytes else 0.0
    breakdown = {
        "matmul": gas * (g_fwd + g_bwd + g_rec + ad_fwd + ad_bwd),
        "attention": gas * (a_fwd + a_bwd + a_rec),
        "memory_bound": gas * (mb_fwd + mb_bwd + mb_rec),
        "dequantization": gas * (2 * dq + dq_rec),
        "optimizer": opt_gpu,
        "communication": comm + offload,
        "overhead": gas * host + STEP_SECONDS + (opt - opt_gpu),
    }
    return StepTime(
        tokens=user_tokens * gas, breakdown_s=breakdown, executed_flops=w.executed_flops * gas,
        model_flops=w.model_flops * gas, attention_kernel=kernel, link=link,
    )


def _trainable_tensors(arch: Architecture, sc: Scenario, targets: list) -> int:
    """Trainable parameter tensors (the optimizer's per-tensor work)."""
    if sc.method is Method.FULL:
        return sum(gr.count for gr in (split_groups(arch, sc)[0] if sc.trainable_layers else arch.tensors))
    return 2 * sum(lin.count * lin.blocks(arch.num_layers) for lin in targets)


def _communication(arch: Architecture, sc: Scenario, est: MemoryEstimate, parts: dict, gpu: Gpu, n: int,
                   strategy: Strategy, gpu_fwd: float, gpu_bwd: float) -> tuple[float, str | None]:
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
