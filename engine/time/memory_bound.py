"""Memory-bound work of a training step: bytes moved through HBM by the elementwise ops, the loss, the casts,
4-bit/8-bit dequantization and the optimizer step. Time = bytes / ``GpuRates.hbm_bytes_per_s``.

Bytes are counted per op as the op reads and writes its tensors in transformers' eager modelling code
(``modeling_llama.py`` and relatives, transformers 4.4x-5.x); with fused kernels (torch.compile, Unsloth,
Liger) a chain of elementwise ops reads its inputs and writes its output once. Backward of an elementwise op
reads the saved input and the incoming gradient and writes the outgoing one: :data:`BACKWARD_FACTOR` x forward
(the ratio of backward to forward traffic in Ivanov et al. 2021, "Data Movement Is All You Need", MLSys, table 2).
"""

from __future__ import annotations

from engine.model.architecture import Architecture
from engine.scenario.loss import LOSSES
from engine.scenario.optimizer import Optimizer, StepKernel
from engine.scenario.training import Method, QuantType, Scenario

BACKWARD_FACTOR = 2.0
"""Backward bytes of an elementwise op / its forward bytes (see the module docstring)."""

FUSED_OPTIMIZERS = tuple(o for o in Optimizer if o.record.step_kernel is StepKernel.FUSED)
"""Optimizers whose step is one kernel pass over each tensor (their record's ``step_kernel``): torch
``AdamW(fused=True)`` and bitsandbytes' blockwise kernels (``bnb.functional.optimizer_update_8bit_blockwise``, one
CUDA kernel per tensor)."""

MULTI_PASS_OPTIMIZER_PASSES = 3.0
"""Passes over the optimizer's tensors of torch's foreach AdamW/SGD and transformers' Adafactor (each of
their ~10 elementwise ops re-reads its operands). Measured: foreach AdamW on Llama-3.1-8B in pure bf16 takes
46.6 ms on a B200 (stas00/ml-engineering@744d01e1 training/performance/README.md, 637.3 - 590.7 ms): 14 B/param
minimum = 112 GB at 2.4 TB/s, 2.8x the minimum traffic at 0.85 x 8 TB/s; rounded to 3."""


def layer_forward_bytes(arch: Architecture, c: int, resid: int, fused: bool) -> float:
    """Bytes per token of one block's elementwise forward ops (norms, residual adds, RoPE, activation, dropout,
    attention reshapes), ``c`` bytes per compute element, ``resid`` per residual-stream element.

    Eager RMSNorm (``LlamaRMSNorm``): upcast (read resid, write 4), square (4+4), mean (4), scale (4+4), cast
    back (4+c), weight multiply (c+c) = ``resid + 28 + 3c`` per element; LayerNorm is one native kernel
    (``resid + c``). Residual add: read two, write one. RoPE (``apply_rotary_pos_emb``): rotate_half's negate and
    concatenate, two multiplies and an add = ``12c`` per query/key element. Gated MLP: activation (2c) and the
    gate product (3c) per intermediate element; plain: the activation (2c). Fused kernels: each chain once
    (norm ``resid + c``, RoPE ``2c``, gated MLP ``3c``).
    """
    return sum(layer_forward_bytes_by_width(arch, c, resid, fused))


def layer_forward_bytes_by_width(arch: Architecture, c: int, resid: int, fused: bool) -> tuple[float, float]:
    """:func:`layer_forward_bytes` in two parts: (the residual stream's ops: norms, residual adds, dropout, all
    ``hidden_size`` wide; the attention and MLP inner ops: RoPE, the o_proj input, the activation). Tensor
    parallelism splits the second part across its ranks and the first only with sequence parallelism
    (Korthikanti et al. 2022 sec. 4.2.2), which is why the scale-out time model needs them apart."""
    h, q, kv = arch.hidden_size, arch.q_out, arch.kv_out
    width = _mlp_width(arch)
    rms = arch.norm != "layernorm"
    if fused:
        norm = resid + c
        rope = 2 * c
        act = 3 * c if arch.mlp == "gated" else 2 * c
        adds = 2 * resid  # fused into the following norm: the sum is written once
    else:
        norm = (resid + 28 + 3 * c) if rms else (resid + c)
        rope = 12 * c
        act = 5 * c if arch.mlp == "gated" else 2 * c
        adds = 2 * 3 * resid
    stream = arch.norms_per_layer * norm * h + adds * h
    inner = act * width + 2 * c * q  # + o_proj input made contiguous
    if arch.positional == "rope":
        inner += rope * (q + kv)
    if arch.hidden_dropout > 0:
        stream += 2 * (2 * c + 1) * h
    return stream, inner


def _mlp_width(arch: Architecture) -> float:
    """Intermediate elements per token: routed experts at top-k, shared experts, dense width otherwise."""
    if arch.num_experts:
        return arch.intermediate_size * arch.experts_per_token + arch.shared_expert_intermediate_size
    return arch.intermediate_size


def runs_fused(sc: Scenario, other: bool = False) -> bool:
    """Whether the step's elementwise chains run fused: the run is ``torch.compile``d (``sc.torch_compile``, the
    scenario's one compile switch, which the memory estimate reads too) or it runs other fused kernels (``other``:
    Unsloth's or Liger's kernels, a NeMo / plain loop's Triton kernels, a parallel framework's own: the Time & cost
    page's "Other fused kernels", the CLI's ``--fused-kernels``, a measured row's ``fused_kernels``)."""
    return bool(other or sc.torch_compile)


def loss_bytes(arch: Architecture, sc: Scenario, c: int) -> float:
    """Bytes per token of the loss over the vocabulary, forward and backward (the logits' GEMM not included).

    An eager loss (transformers' ``ForCausalLMLoss``, torchtune's losses, torchtitan's, ...) upcasts the logits (read
    c, write 4), ``cross_entropy`` takes log-softmax (4+4) and its gradient (4+4), cast back (4+c): ``2c + 24`` per
    vocabulary entry, chunked or not. A fused cross-entropy (a loss whose :data:`~engine.scenario.loss.LOSSES`
    record gives ``on_chip``) keeps chunks on chip: ``2c + 8``. The loss is the run's own, :attr:`~engine.scenario.training.Scenario.loss`, the one the memory
    estimate counts: its compiled form when the run compiles (``Scenario.torch_compile``), not the step time's other
    fused kernels (:func:`runs_fused`), which do not compile a loss.
    """
    on_chip = LOSSES[sc.loss].on_chip is not None
    per = (2 * c + 8) if on_chip else (2 * c + 24)
    return per * arch.vocab_size if arch.kind != "encoder" else 0.0


def cast_bytes_per_use(autocast_fp32_weights: bool) -> tuple[float, float]:
    """Bytes per weight element of autocast's casts: (each forward use, each backward), 0 without autocast.

    AMP keeps fp32 weights and casts each to 16-bit on its forward use (read 4, write 2); backward casts the 16-bit
    weight gradient to fp32 and accumulates it into ``.grad`` (read 2 + 4, write 4)."""
    return (6.0, 10.0) if autocast_fp32_weights else (0.0, 0.0)


def dequant_bytes_per_use(sc: Scenario, c: int) -> float:
    """Bytes per quantized base weight each time bitsandbytes dequantizes it (QLoRA), 0 otherwise.

    ``MatMul4Bit`` dequantizes the whole weight to a 16-bit tensor on every forward and backward use, then a
    16-bit GEMM reads it (bitsandbytes ``autograd/_functions.py``; QLoRA paper, Dettmers et al. 2023, sec. 3):
    read 0.5 B (+ 4 B absmax per 64 weights, or 1 B per 64 + 4 B per 16,384 with double quantization),
    write c. LLM.int8 reads 1 B and writes c (plus its row/column statistics, not counted).
    """
    if sc.method is not Method.QLORA:
        return 0.0
    if sc.quant_type is QuantType.INT8:
        return 1.0 + c
    absmax = (1.0 / 64 + 4.0 / (64 * 256)) if sc.double_quant else 4.0 / 64
    return 0.5 + absmax + c


def optimizer_bytes(trainable_weight_bytes: float, state_bytes: float, grad_bytes: float, optimizer: Optimizer,
                    clip: bool) -> float:
    """Bytes one optimizer step moves: read weights, gradients and states, write weights and states, times
    the optimizer's passes (1 fused, :data:`MULTI_PASS_OPTIMIZER_PASSES` otherwise); gradient-norm clipping
    (``max_grad_norm``, the HF Trainer's default 1.0) reads the gradients, then scales them (read + write)."""
    passes = optimizer_passes(optimizer)
    moved = (2 * (trainable_weight_bytes + state_bytes) + grad_bytes) * passes
    return moved + (3 * grad_bytes if clip else 0.0)


def optimizer_passes(optimizer: Optimizer) -> float:
    """Passes of one optimizer step over its tensors, from its record's ``step_kernel``: 1 for a fused kernel,
    :data:`MULTI_PASS_OPTIMIZER_PASSES` for the foreach / per-op implementations."""
    return 1.0 if optimizer.record.step_kernel is StepKernel.FUSED else MULTI_PASS_OPTIMIZER_PASSES
