"""Fixed overhead of a step: the host time to launch its kernels, and the framework's per-step work.

PyTorch eager launches every op from Python: dispatch, autograd bookkeeping and ``cudaLaunchKernel`` cost about
:data:`SECONDS_PER_KERNEL` of CPU time per kernel. The GPU runs kernels asynchronously, so launches are hidden
while the GPU is busy; a pass (forward, backward) takes ``max(GPU time, kernels x SECONDS_PER_KERNEL)``. Small
models at micro batch 1 are bound by it (Horace He, "Making Deep Learning Go Brrrr From First Principles").
"""

from __future__ import annotations

from functools import lru_cache

from engine.model.architecture import Architecture
from engine.scenario.lora import resolve_targets
from engine.scenario.optimizer import HostLoop, Optimizer
from engine.scenario.precision import precision_spec
from engine.scenario.training import Attention, Framework, Method, Scenario
from engine.time.constants import current

SECONDS_PER_KERNEL = 13.5e-6
"""CPU time per kernel of an eager forward: 5-25 us per op on the Python -> dispatcher -> ``cudaLaunchKernel``
path (research notes, overheads.md sec. 1); 13.5 us from HF transformers' Llama-3.2-1B forward at batch 1 x 512 on
a B200, launch-bound: 8.1 ms for the 600 kernels :func:`layer_kernels` counts (16 layers x 37 + 8)
(stas00/ml-engineering@744d01e1 training/performance/README.md, "torch.compile" tables; row
``mle-l32-1b-full-b200-eager`` of data/throughput_measurements.csv, a fit row)."""

BACKWARD_HOST_FACTOR = 4.0
"""Host time of a backward pass / its forward's (autograd's engine, hooks and twice the kernels): the same
Llama-3.2-1B run takes 48.8 ms for forward + backward with checkpointing = forward 8.1 + recompute 8.1 + backward
32.6 ms, i.e. 4.0 x the forward."""

COMPILED_BACKWARD_HOST_FACTOR = 1.7
"""The same ratio under ``torch.compile`` (default mode): AOTAutograd compiles the backward into one graph whose
generated wrapper launches its kernels, so autograd's engine and hooks no longer run per op and only the kernel count
(about twice the forward's) remains. The same table's compiled cells: forward 3.4 ms, forward + backward with
checkpointing 12.6 ms = forward 3.4 + recompute 3.4 + backward 5.8 ms, i.e. 1.7 x the forward
(stas00/ml-engineering@744d01e1 training/performance/README.md, "torch.compile", the Llama 3.2 1B table)."""


def backward_host_factor(hf_stack: bool, fused: bool, compiled: bool = False) -> float:
    """Host time of a backward pass / its forward's: :data:`COMPILED_BACKWARD_HOST_FACTOR` where the run is
    torch.compiled (``compiled``: ``Scenario.torch_compile``, on any stack: AOTAutograd compiles the backward whoever
    calls it) or its ``fused`` kernels off the Hugging Face stack are torch.compile's (a measured row's plain loop or
    torchtune run with ``torch.compile``, stated as fused kernels), else :data:`BACKWARD_HOST_FACTOR`: Unsloth and
    Liger (``fused`` on the HF stack) fuse kernels inside eager autograd Functions, so their backward still runs
    autograd's engine per op."""
    return COMPILED_BACKWARD_HOST_FACTOR if compiled or (fused and not hf_stack) else BACKWARD_HOST_FACTOR

STEP_SECONDS = 0.004
"""Host work once per optimizer step outside the kernels (learning-rate scheduler, ``zero_grad``, logging,
loss ``.item()`` synchronisation, the data loader's hand-off): "a few ms"; ms-swift measures samples/s flat
across gradient accumulation 1..64 (modelscope/ms-swift docs/source_en/LLM/Benchmark.md), so it is small."""

def host_seconds_per_kernel(hf_stack: bool, fused: bool) -> float:
    """CPU seconds per launched kernel: :data:`SECONDS_PER_KERNEL` (a plain PyTorch loop over a transformers model),
    times the fitted :attr:`~engine.time.constants.TimeConstants.eager_host_factor` on the Hugging Face stack
    (``hf_stack``). There every module call also runs the Trainer's and accelerate's hooks and autocast wrapper,
    PEFT's ``LoraLayer.forward`` (Python dispatch over its adapters, dropout and scaling modules) and bitsandbytes'
    ``MatMul4Bit`` autograd function in Python (transformers ``Trainer.training_step``, peft ``tuners/lora/layer.py``,
    bitsandbytes ``autograd/_functions.py``): more host time per kernel. Fused kernels (``fused``: Unsloth, Liger, or
    torch.compile) cut the kernel count (:func:`layer_kernels`) but Unsloth and Liger still walk the modules in Python
    under the Trainer, so the factor stays (``fused`` is accepted for callers; it does not change the factor)."""
    factor = current().eager_host_factor if hf_stack else 1.0
    return SECONDS_PER_KERNEL * factor


PYTHON_SECONDS_PER_TENSOR = 20e-6
"""Host time per parameter tensor of optimizers that loop over tensors in Python (bitsandbytes' 8-bit and paged
optimizers, Adafactor): one kernel launch and its argument checks per tensor. bitsandbytes' loop also waits for the
GPU after each tensor, so its host time adds to the kernels' (:func:`optimizer_step_seconds`)."""


FLASH_ROTARY_KERNELS = 6
"""RoPE kernels of one block's forward where the modeling code applies flash-attn's fused rotary kernel (Qwen v1's
``modeling_qwen.py`` ``apply_rotary_pos_emb``, taken when ``apply_rotary_emb_func`` imported from
``flash_attn.layers.rotary`` and the tensor is on CUDA: ``t.float()``, ``apply_rotary_emb_func(t_, cos, sin)`` (one
Triton kernel, ``flash_attn/ops/triton/rotary.py``, flash-attn 2.3), ``.type_as(t)``): 3 kernels for the query, 3
for the key; the ``cos``/``sin`` slices are views. Its eager path (``t_ * cos + _rotate_half(t_) * sin``, the
``float`` casts and two ``cat``) launches about 8 per tensor, counted as the generic 10 per block."""


def layer_kernels(arch: Architecture, sc: Scenario, kernel: str, fused: bool, lora_modules: int | None = None) -> float:
    """Kernels one block's forward launches (its backward launches about twice as many).

    Eager, per the ops of transformers' Llama-style block: RMSNorm 6 each (LayerNorm 1), 2 residual adds, one GEMM
    per linear (per expert), RoPE ~10 (:data:`FLASH_ROTARY_KERNELS` where the model's code calls flash-attn's fused
    rotary kernel and the scenario runs flash-attn (``attention='flash_attention_2'``): ``arch.flash_rotary``), attention 1 (flash/memory-efficient) or ~6 (eager/math: matmul, mask,
    softmax, cast, dropout, matmul), the MLP activation 1-2, ~3 reshapes; a LoRA adapter adds 5 (dropout, A, B,
    scale, add), a 4-bit base weight 1 (dequantize). Fused kernels: norms, RoPE and activation one each, LoRA 3.
    On the Hugging Face stack the adapters are fp32 beside 16-bit compute (:func:`lora_cast_kernels`), which adds the
    casts each adapted module launches. ``lora_modules``: adapted modules per block, when the caller has resolved the
    targets.
    """
    gemms = sum(lin.count for lin in arch.layer_linears)
    norm = 1 if fused or arch.norm == "layernorm" else 6
    n = arch.norms_per_layer * norm + (0 if fused else 2) + gemms + (1 if fused else 3)
    if arch.positional == "rope":
        flash_rotary = arch.flash_rotary and sc.attention is Attention.FLASH_ATTENTION_2  # flash-attn installed
        n += 1 if fused else (FLASH_ROTARY_KERNELS if flash_rotary else 10)
    n += 1 if kernel in ("flash", "memory_efficient") else 6
    n += 1 if fused else (2 if arch.mlp == "gated" else 1)
    if sc.method is not Method.FULL:
        targets = _targets(arch, sc) if lora_modules is None else lora_modules
        n += targets * ((3 if fused else 5) + lora_cast_kernels(sc, fused))
        if sc.method is Method.QLORA:
            n += gemms
    return float(n)


def lora_cast_kernels(sc: Scenario, fused: bool) -> int:
    """Cast kernels one LoRA-adapted module's forward adds when its adapters are fp32 and the compute is 16-bit: the
    Hugging Face stack keeps adapters in fp32 (PEFT >= 0.12 ``autocast_adapter_dtype=True``; LLaMA-Factory casts every
    trainable parameter to fp32 unless ``pure_bf16``, ``model/adapter.py`` at 8963e89, 2024-03-21), torchtune and the
    other stacks create them in the weight dtype (0 there, and in fp32 training).

    - Unsloth (``fused`` on the HF stack): ``matmul_lora`` computes ``out += (X @ A.to(dtype)) @ (s * B.to(dtype))``
      (unslothai/unsloth@b9d5ca5 ``unsloth/kernels/fast_lora.py``, 2024-03-20): two casts and the ``s * B`` scale
      beside the three kernels counted: 3.
    - PEFT (eager): ``Linear.forward`` casts the input to the adapter's dtype (``x = x.to(lora_A.weight.dtype)``,
      ``_cast_input_dtype`` in later releases, peft ``tuners/lora/layer.py``); under autocast, ``lora_A``'s linear then
      casts that input and A back to 16 bits and ``lora_B``'s casts B (``linear`` is on autocast's lower-precision
      list, PyTorch AMP op reference): 4; without autocast the fp32 adapter output is cast back to the result's dtype
      (``result.to(torch_result_dtype)``): 2.
    """
    return _cast_kernels(sc.framework, sc.precision, fused)


@lru_cache(maxsize=64)
def _cast_kernels(framework: Framework, precision: str, fused: bool) -> int:
    spec = precision_spec(precision)
    if framework is not Framework.HF or spec.compute_bytes == 4:
        return 0
    if fused:
        return 3
    return 4 if spec.autocast else 2


def _targets(arch: Architecture, sc: Scenario) -> int:
    return sum(lin.count for lin in resolve_targets(arch, sc.lora_targets))


def optimizer_host_loop(optimizer: Optimizer) -> str:
    """How ``optimizer``'s step walks its tensors on the host, read from its record's ``host_loop``: ``per_tensor``
    (a Python loop, one launch and its checks per tensor: Adafactor), ``per_tensor_synced`` (the same loop waiting
    for the GPU after each tensor: bitsandbytes' 8-bit / paged / Lion optimizers), ``fused`` (torch
    ``AdamW(fused=True)``: one launch per chunk of tensors) or ``foreach`` (torch's foreach ops, ~12 per chunk). The
    one place the time model reads this per-optimizer fact."""
    loop = optimizer.record.host_loop
    if loop is HostLoop.PER_TENSOR:
        return "per_tensor"
    if loop is HostLoop.PER_TENSOR_SYNCED:
        return "per_tensor_synced"
    return "fused" if loop is HostLoop.FUSED_CHUNKS else "foreach"


def optimizer_host_seconds(optimizer: Optimizer, tensors: int) -> float:
    """Host time of one optimizer step over ``tensors`` trainable tensors (:func:`optimizer_host_loop`): per-tensor
    Python loops at :data:`PYTHON_SECONDS_PER_TENSOR`; torch's fused and foreach steps launch a kernel per chunk of 100
    tensors (1 fused, ~12 foreach ops)."""
    loop = optimizer_host_loop(optimizer)
    if loop in ("per_tensor", "per_tensor_synced"):
        return tensors * PYTHON_SECONDS_PER_TENSOR
    chunks = max(1, -(-tensors // 100))
    return chunks * (1 if loop == "fused" else 12) * SECONDS_PER_KERNEL


def optimizer_step_seconds(optimizer: Optimizer, tensors: int, gpu_seconds: float) -> float:
    """Wall seconds of one optimizer step whose kernels take ``gpu_seconds`` on the GPU and whose host loop takes
    :func:`optimizer_host_seconds` over ``tensors`` tensors.

    Kernels launch asynchronously, so the host's launches hide under the GPU's work and the step takes the longer of
    the two; except where the loop synchronises after every tensor (``per_tensor_synced``: bitsandbytes'
    ``Optimizer8bit.step`` calls ``torch.cuda.synchronize()`` after each parameter's update, 0.41.0-0.43.3), where
    the GPU idles while the host prepares the next tensor and the host waits while the GPU runs it: the sum.
    """
    host = optimizer_host_seconds(optimizer, tensors)
    if optimizer_host_loop(optimizer) == "per_tensor_synced":
        return gpu_seconds + host
    return max(gpu_seconds, host)
