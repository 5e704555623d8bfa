"""The attention kernel a training step runs, decided per call as transformers and PyTorch decide it.

Modelled versions: transformers 5.x (``integrations/sdpa_attention.py`` ``sdpa_attention_forward`` and
``use_gqa_in_sdpa``; ``masking_utils._ignore_causal_mask_sdpa``; the families' own attention code, summarised on the
:class:`~engine.model.architecture.Architecture` by ``sdpa_mask`` / ``sdpa_kv``) and PyTorch 2.5-2.13 on CUDA
(``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp``: priority flash > memory-efficient > math).

What decides the kernel of one SDPA call:

- **the mask**: transformers passes none (``is_causal=True``) unless the batch needs one: a sliding-window layer once
  the sequence reaches the window (``kv_length >= sliding_window``), a key/value prefix (prefix tuning: keys longer
  than queries), or a family that always passes one (``sdpa_mask="always"``). Flash takes no explicit mask.
- **grouped-query attention**: with no mask and head_dim <= 256 transformers passes the grouped key/value heads with
  ``enable_gqa=True``, which flash and math take and memory-efficient does not; with a mask it repeats them to every
  query head (``repeat_kv``), which every kernel takes.
- **dtype and head dim**: flash needs fp16/bf16 and head_dim <= 256, a multiple of 8; memory-efficient takes fp32 too
  (head_dim a multiple of 4, 8 in 16 bits); flash's backward refuses head_dim > 192 on sm86-sm89 (RTX 30/40, A10, L4,
  L40S: ``check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89``).
- **the GPU**: flash needs compute capability >= 8.0 (``check_sm_version``).
- **dropout** (``attention_dropout`` > 0 in training) does not change the choice: flash and memory-efficient draw it
  from a Philox seed (no mask saved); only math and eager keep a dropout mask.

The tracer's router (:mod:`engine.trace.kernels`) applies the same PyTorch rules to the arguments transformers really
passes; tests/trace/test_attention_kernels.py checks this module against it family by family.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from engine.errors import ScenarioError
from engine.model.architecture import Architecture
from engine.scenario.precision import PrecisionSpec
from engine.scenario.training import Attention, Method, Scenario

if TYPE_CHECKING:  # a type only: the GPU catalog is not imported for an estimate without --gpu
    from engine.hardware.gpus import Gpu

FLASH_MIN_COMPUTE_CAPABILITY = 8.0
"""FlashAttention-2 and SDPA's flash backend need Ampere or newer (PyTorch ``sdp_utils.cpp``
``check_sm_version`` / flash-attn's "FlashAttention only supports Ampere GPUs or newer")."""

FLASH_MAX_HEAD_DIM = 256
FLASH_TRAIN_MAX_HEAD_DIM_SM86_89 = 192
"""Flash's backward on sm86-sm89 supports head_dim <= 192 (PyTorch ``sdp_utils.cpp``)."""


class AttentionChoice(NamedTuple):
    """The attention kernel a run executes and why.

    ``kernel``: ``flash``, ``memory_efficient``, ``math`` or ``eager``, the kernel of most layers; ``kv_repeated``: it
    keeps key/value at the query's width (repeated or expanded to every head). Where the layers run two kernels (the
    sliding-window layers under a mask beside full-attention layers), ``other_layers`` run ``other_kernel`` (with
    ``other_kv_repeated``).
    """

    kernel: str
    reason: str
    kv_repeated: bool = False
    other_layers: int = 0
    other_kernel: str | None = None
    other_kv_repeated: bool = False


def _where(gpu: Gpu | None) -> tuple[float | None, str]:
    cc = gpu.compute_capability if gpu is not None else None
    where = f"{gpu.name} (compute capability {cc:.1f})" if gpu is not None and cc is not None else "an Ampere-or-newer GPU"
    return cc, where


def _sliding_layers(arch: Architecture) -> int:
    from engine.memory.inference import sliding_window_layers  # the one place that knows which layers slide

    return sliding_window_layers(arch)


def masked_layers(arch: Architecture, sc: Scenario) -> tuple[int, str]:
    """Layers whose SDPA call gets an explicit mask in training (an unpadded batch), and why."""
    if arch.sdpa_mask == "always":
        return arch.num_layers, "the family passes an explicit mask on every call"
    if sc.method is Method.PREFIX_TUNING:
        return arch.num_layers, "prefix tuning's key/value prefix makes keys longer than queries (a mask is built)"
    sliding = _sliding_layers(arch)
    if sliding and arch.sliding_window and sc.seq_len >= arch.sliding_window:
        return sliding, (f"the {sliding} sliding-window layers, which need a mask (sequence {sc.seq_len:,} >= window "
                         f"{arch.sliding_window:,})")
    return 0, ""


def _sdpa_kernel(arch: Architecture, dtype_bytes: int, mask: bool, cc: float | None) -> tuple[str, bool, str]:
    """PyTorch's choice for one call: (kernel, key/value at query width, why not a faster kernel)."""
    d = arch.head_dim
    gqa = arch.num_key_value_heads < arch.num_attention_heads
    if not gqa or arch.sdpa_kv == "expanded":
        kv_mode = "equal"
    elif arch.sdpa_kv == "broadcast":
        kv_mode = "broadcast"
    else:  # transformers' use_gqa_in_sdpa: no mask and head_dim <= 256
        kv_mode = "enable_gqa" if not mask and d <= FLASH_MAX_HEAD_DIM else "repeated"
    repeated = gqa and kv_mode in ("repeated", "equal")
    old = cc is not None and cc < FLASH_MIN_COMPUTE_CAPABILITY
    sm86_89 = cc is not None and 8.6 <= cc < 9.0
    flash_limit = FLASH_TRAIN_MAX_HEAD_DIM_SM86_89 if sm86_89 else FLASH_MAX_HEAD_DIM
    no_flash = ("fp32 (flash needs fp16/bf16)" if dtype_bytes != 2 else
                "an explicit mask (flash takes none)" if mask else
                f"head_dim {d} > {flash_limit}" + (" (flash's backward on sm86-sm89)" if sm86_89 and d <= 256 else "")
                if d > flash_limit else
                f"head_dim {d} not a multiple of 8" if d % 8 else
                "a GPU older than Ampere (flash needs sm80+)" if old else
                "one key/value head broadcast without enable_gqa" if kv_mode == "broadcast" else "")
    if not no_flash:
        return "flash", repeated, ""
    align = 8 if dtype_bytes == 2 else 4
    no_me = ("grouped key/value heads with enable_gqa (memory-efficient does not take it)" if kv_mode == "enable_gqa" else
             "one key/value head broadcast to the query heads" if kv_mode == "broadcast" else
             f"head_dim {d} not a multiple of {align}" if d % align else "")
    if not no_me:
        return "memory_efficient", repeated, no_flash
    return "math", repeated, f"{no_flash}, and {no_me}"


def attention_input_bytes(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> int:
    """Bytes per element of the q/k/v SDPA receives: the compute dtype, except LLM.int8 without autocast over an fp32
    residual stream (``prepare_model_for_kbit_training``), whose ``Linear8bitLt`` returns its fp32 input's dtype
    (bitsandbytes ``int8_mm_dequant(dtype=A.dtype)``), so SDPA runs in fp32."""
    from engine.memory.int8 import int8_linear_output_bytes

    if spec.autocast:
        return spec.compute_bytes
    return int8_linear_output_bytes(sc, spec) or spec.compute_bytes


def attention_choice(arch: Architecture, sc: Scenario, spec: PrecisionSpec, gpu: Gpu | None = None) -> AttentionChoice:
    """The attention kernel of ``sc`` on ``gpu`` (None: an Ampere-or-newer GPU), call by call (see the module).

    ``attn_implementation="eager"`` is eager; ``"flash_attention_2"`` is flash-attn's kernel (grouped heads and sliding
    windows natively). ``"sdpa"`` on a family without an SDPA path (``sdpa_mask="none"``) runs eager: transformers
    refuses ``sdpa`` for it and picks eager by default. AMD Instinct GPUs (no CUDA compute capability) have SDPA flash
    through AOTriton on ROCm.

    Raises:
        ScenarioError: ``flash_attention_2`` on a GPU older than Ampere (flash-attn refuses to run there).
    """
    cc, where = _where(gpu)
    if sc.attention is Attention.EAGER:
        return AttentionChoice("eager", "attn_implementation='eager': softmax(QK^T)V in separate ops")
    if sc.attention is Attention.FLASH_ATTENTION_2:
        if cc is not None and cc < FLASH_MIN_COMPUTE_CAPABILITY:
            raise ScenarioError(f"flash_attention_2 needs an Ampere or newer GPU (compute capability 8.0+); {where} "
                                "cannot run it: use sdpa or eager")
        return AttentionChoice("flash", f"attn_implementation='flash_attention_2' on {where}")
    if arch.sdpa_mask == "none":
        return AttentionChoice("eager", f"transformers has no SDPA path for {arch.model_type} (_supports_sdpa is False): "
                                        "it runs eager attention")
    a = attention_input_bytes(arch, sc, spec)
    masked, why_mask = masked_layers(arch, sc)
    free_kernel, free_rep, free_why = _sdpa_kernel(arch, a, False, cc)
    if not masked:
        reason = (f"SDPA picks flash: {a * 8}-bit, head_dim {arch.head_dim}, no mask, on {where}" if free_kernel == "flash"
                  else f"SDPA falls back to {free_kernel}: {free_why}")
        return AttentionChoice(free_kernel, reason, free_rep)
    mask_kernel, mask_rep, mask_why = _sdpa_kernel(arch, a, True, cc)
    mask_text = f"{mask_kernel} ({mask_why})" if mask_why else mask_kernel
    if masked == arch.num_layers or mask_kernel == free_kernel and mask_rep == free_rep:
        return AttentionChoice(mask_kernel, f"SDPA runs {mask_text}: {why_mask}"
                               + ("; key/value repeated to every query head" if mask_rep else ""), mask_rep)
    free = arch.num_layers - masked
    reason = f"SDPA runs {mask_text} on {why_mask}, and {free_kernel} on the other {free} layers"
    if masked >= free:
        return AttentionChoice(mask_kernel, reason, mask_rep, free, free_kernel, free_rep)
    return AttentionChoice(free_kernel, reason, free_rep, masked, mask_kernel, mask_rep)


def attention_kernel(arch: Architecture, sc: Scenario, spec: PrecisionSpec, gpu: Gpu | None = None) -> str:
    """The kernel of :func:`attention_choice` (of most layers): ``flash``, ``memory_efficient``, ``math`` or ``eager``."""
    return attention_choice(arch, sc, spec, gpu).kernel
