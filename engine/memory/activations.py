"""Saved activations of the decoder blocks, by module, with the attention kernel of
:mod:`engine.memory.attention_kernel`.

Derived from the tensors PyTorch autograd saves for the ops of transformers' modelling code (see
:mod:`engine.memory.estimate` for the validation against traces).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from engine.memory.attention_kernel import (  # noqa: F401  (re-exported: the kernel choice's home is attention_kernel)
    FLASH_MIN_COMPUTE_CAPABILITY, AttentionChoice, attention_choice, attention_input_bytes, attention_kernel,
)
from engine.memory.components import MemoryComponent
from engine.memory.int8 import int8_linear_output_bytes, is_int8, residual_bytes
from engine.model.architecture import Architecture
from engine.memory.adapters import offloaded_inputs_bytes, saved_per_layer, saved_per_token
from engine.scenario.peft import trains_lm_head
from engine.scenario.precision import PrecisionSpec
from engine.scenario.freeze import graph_blocks
from engine.scenario.training import Framework, Method, Scenario

if TYPE_CHECKING:  # a type only: the GPU catalog is not imported for an estimate without --gpu
    from engine.hardware.gpus import Gpu


def _norm_saved(arch: Architecture, resid: int, frozen: bool = False) -> float:
    """Bytes per token a norm saves for backward, in units of hidden_size elements.

    Llama RMSNorm upcasts to fp32 (4 B saved), saves the normalised value in the input dtype for the
    weight product; Gemma's RMSNorm keeps both in fp32 and returns a cast; LayerNorm saves its input.
    With a frozen norm weight (LoRA, QLoRA) the weight product saves nothing: autograd saves an operand only
    when the gradient that needs it is required (``MulBackward0`` keeps ``other`` only if ``self`` requires grad).
    """
    if arch.norm == "rmsnorm":
        return 4 + (0 if frozen else resid)
    if arch.norm == "gemma_rmsnorm":
        return 4 if frozen else 8 + (resid if resid != 4 else 0)
    return resid


def _linear_inputs(consumers: int, resid: int, c: int, casts: bool) -> float:
    """Bytes per token (x hidden) of the input saved by the linears reading a norm's output.

    Without casting one tensor serves all consumers; autocast (or bitsandbytes' cast to the compute
    dtype) makes one 16-bit copy per consumer.
    """
    if casts and resid != c:
        return consumers * c
    return resid


def _attention_core(arch: Architecture, sc: Scenario, c: int, kernel: str, frozen: bool = False,
                    kv_repeated: bool = False) -> float:
    """Bytes per token saved by the attention (after the q/k/v projections), excluding s^2 terms. A frozen
    o_proj does not save its input (its weight gradient is not needed). ``kv_repeated``: the kernel gets key/value
    at the query's width (``repeat_kv`` under a mask, or a family that expands them)."""
    q = arch.q_out
    kv = q if kv_repeated else arch.kv_out
    o_input = 0 if frozen else q
    if kernel in ("flash", "memory_efficient"):
        # q, k, v and the output kept by the kernel, the contiguous output copy o_proj saves, the
        # fp32 log-sum-exp per head.
        return c * (q + kv + kv + q + o_input) + 4 * arch.num_attention_heads
    # eager/math: k and v are repeated to all heads (repeat_kv), the probabilities are kept.
    return c * (q + q + q + q + o_input)


def _attention_saved(arch: Architecture, sc: Scenario, c: int, choice: AttentionChoice, frozen: bool,
                     autocast: bool) -> tuple[float, float]:
    """(core bytes per token, s x s bytes per token and position) averaged over the layers, which may run two kernels
    (sliding-window layers under a mask beside full-attention layers)."""
    core = _attention_core(arch, sc, c, choice.kernel, frozen, choice.kv_repeated)
    scores = _attention_scores(arch, sc, c, choice.kernel, autocast)
    if not choice.other_layers or choice.other_kernel is None:
        return core, scores
    share = choice.other_layers / arch.num_layers
    other_core = _attention_core(arch, sc, c, choice.other_kernel, frozen, choice.other_kv_repeated)
    other_scores = _attention_scores(arch, sc, c, choice.other_kernel, autocast)
    return (1 - share) * core + share * other_core, (1 - share) * scores + share * other_scores


def _attention_scores(arch: Architecture, sc: Scenario, c: int, kernel: str, autocast: bool = False) -> float:
    """Bytes per token x sequence length for the s x s attention probabilities (0 for fused kernels).

    Eager: fp32 softmax output (4 B) and its cast to the compute dtype (2 B), per head; plus the dropout
    mask and output when attention dropout > 0. Math kernel: probabilities in the compute dtype.
    """
    if kernel in ("flash", "memory_efficient"):
        return 0.0
    per_head = (4 + (c if c != 4 else 0)) if kernel == "eager" else c
    if kernel == "eager" and not arch.eager_softmax_fp32 and not autocast:
        per_head = c  # GPT-2's eager attention takes the softmax in the input dtype (no fp32 upcast)
    if arch.attention_dropout > 0:
        per_head += 1 + c
    return per_head * arch.num_attention_heads


def _mlp(arch: Architecture, c: int, framework: Framework = Framework.HF, autocast: bool = False,
         frozen: bool = False) -> float:
    """Bytes per token saved inside the MLP after its input projection(s). A frozen output projection
    (down_proj, c_proj, fc2) does not save its input."""
    i = arch.intermediate_size
    gated = 3 * c * i if frozen else 4 * c * i
    if arch.num_experts:
        # Each token visits top-k experts: its gathered input, the gated MLP's four tensors, the
        # weighted output; the router keeps fp32 softmax probabilities; shared experts see every token.
        # Dense-MLP blocks (DeepSeek's first layers) are averaged in by their share of the blocks.
        k = arch.experts_per_token
        moe = k * (c * arch.hidden_size * 2 + gated) + (4 + c) * arch.num_experts
        moe += gated / i * (arch.shared_expert_intermediate_size or 0)
        dense_layers = min(arch.dense_mlp_layers or 0, arch.num_layers)
        dense = gated / i * (arch.dense_intermediate_size or i)
        return (dense_layers * dense + (arch.num_layers - dense_layers) * moe) / arch.num_layers
    last = 0 if frozen else c  # the output projection's saved input
    if arch.mlp == "gated":
        # gate output (saved by the activation), activation output and up output (saved by the
        # product), product (saved by down_proj).
        return gated
    if arch.activation == "gelu_new" and framework is Framework.HF and autocast:
        # Under autocast pow runs in fp32: its fp32 input copy (4), tanh's fp32 output (4), 0.5 x input (c),
        # the fp32 (1 + tanh) (4) and the fp32 product cast back to c for the next linear.
        return (12 + c + last) * i
    if arch.activation == "gelu_new" and framework is Framework.HF:
        # transformers' NewGELUActivation is unfused: input, tanh output, two product operands, result.
        # (LitGPT calls torch's fused F.gelu(approximate="tanh"), which saves its input only.)
        return (4 * c + last) * i
    return (c + last) * i


def _liger_norm_saved(arch: Architecture, resid: int, h: int, trainable: bool) -> float:
    """Bytes per token Liger Kernel's RMSNorm saves: its input in the input dtype and one fp32 1/rms per row
    (``LigerRMSNormFunction``: ``save_for_backward(X, W, RSTD)``, liger-kernel 0.5), whether or not the weight
    trains; a LayerNorm model keeps torch's norm (Liger's LayerNorm is not patched in by transformers)."""
    if arch.norm not in ("rmsnorm", "gemma_rmsnorm"):
        return _norm_saved(arch, resid, not trainable) * h
    return resid * h + 4


def _liger_swiglu_saving(arch: Architecture, c: int) -> float:
    """Bytes per token Liger's SwiGLU saves over transformers' gated MLP: ``LigerSiLUMulFunction`` keeps the gate and
    up outputs and recomputes SiLU in backward, so the activation's c x intermediate output is not kept."""
    if arch.mlp != "gated" or arch.num_experts:
        return 0.0
    return float(c * arch.intermediate_size)


class BlockActivations(BaseModel):
    """Bytes per token that one decoder block saves for backward, by where they sit (one micro batch, one GPU).

    ``norms``: the norm outputs/inputs and dropout masks outside the attention and MLP regions; ``linear_inputs``:
    the inputs of the first linears of attention and MLP (they read the norm's output); ``inner``: everything
    after the input projections (attention core, MLP intermediates, q/k norms, LoRA tensors); ``scores``: the
    s x s probabilities per token and per position of the sequence (0 for fused kernels). ``per_token`` is the
    block's total at the scenario's sequence length, ``head`` the final norm and LM-head input per token,
    ``per_layer`` the bytes per block that do not scale with tokens (PEFT methods' weight-sized saved tensors: DoRA's cast
    weight, LoHa / LoKr's delta weight; :mod:`engine.memory.adapters`).
    :mod:`engine.scaleout` splits these over tensor and context parallel ranks (Korthikanti et al. 2022, sec. 4.2).
    """

    model_config = ConfigDict(frozen=True)

    norms: float
    linear_inputs: float
    inner: float
    scores: float
    per_token: float
    head: float
    resid: float
    kernel: str
    per_layer: float = 0.0
    other_kernel: str | None = None
    other_layers: int = 0


def block_activations(arch: Architecture, sc: Scenario, spec: PrecisionSpec, gpu: Gpu | None = None) -> BlockActivations:
    """The saved tensors of one block per token (see :class:`BlockActivations`), as :func:`activations_components`
    sums them; the attention kernel is :func:`attention_choice`'s on ``gpu``."""
    c = spec.compute_bytes
    # The residual stream has the dtype of the embeddings: fp32 for fp32/AMP and for QLoRA after
    # prepare_model_for_kbit_training, 16-bit in pure bf16/fp16.
    resid = residual_bytes(sc, spec)
    # bitsandbytes 4-bit casts each linear's input to the compute dtype; LLM.int8 does not (engine.memory.int8).
    int8 = is_int8(sc)
    casts = spec.autocast or (sc.method is Method.QLORA and not int8)
    choice = attention_choice(arch, sc, spec, gpu)
    kernel = choice.kernel
    a = attention_input_bytes(arch, sc, spec)  # what SDPA / eager attention computes in
    m = int8_linear_output_bytes(sc, spec) or c  # the MLP's intermediates: an int8 linear returns its input's dtype
    h = arch.hidden_size
    # LoRA/QLoRA freeze every base weight. A frozen torch linear saves no input, since only its weight gradient
    # would need it (autograd saves an operand only when the gradient that uses it is required); the adapters
    # save their own copies (engine.memory.adapters). bitsandbytes' 4-bit matmul (QLoRA) saves its input whenever any
    # input needs a gradient (MatMul4Bit: ctx.tensors = (A, B)), so QLoRA keeps them. Frozen norm weights
    # save nothing in either case.
    frozen = sc.method not in (Method.FULL, Method.QLORA)  # every PEFT method but QLoRA keeps torch's frozen linears
    norm = (_liger_norm_saved(arch, resid, h, sc.method is not Method.FULL) if sc.liger_kernels
            else _norm_saved(arch, resid, sc.method is not Method.FULL) * h)
    # the linears reading each norm's output (a structure fact of the family: fused q/k/v read it once)
    attn_in = 0.0 if frozen else _linear_inputs(arch.attention_norm_readers, resid, c, casts) * h
    mlp_in = 0.0 if frozen else _linear_inputs(arch.mlp_norm_readers, resid, c, casts) * h
    if int8:  # MatMul8bitLt (a custom Function: no autocast cast) saves its input A itself, one tensor for all its readers
        attn_in, mlp_in = float(resid * h), float(resid * h)
    extra_norms = (arch.norms_per_layer - 2) * norm  # Gemma 2's post-attention/post-MLP norms
    qk_norm = _norm_saved(arch, c, sc.method is not Method.FULL) * (arch.q_out + arch.kv_out) if arch.qk_norm else 0.0  # Qwen3 q/k norms
    dropout_masks = 2 * h if arch.hidden_dropout > 0 else 0.0
    core, scores = _attention_saved(arch, sc, a, choice, frozen, spec.autocast)
    mlp = _mlp(arch, m, sc.framework, spec.autocast, frozen) - (_liger_swiglu_saving(arch, m) if sc.liger_kernels else 0.0)
    adapters = saved_per_token(arch, sc, c, spec.autocast)
    per_token = 2 * norm + attn_in + mlp_in + extra_norms + qk_norm + dropout_masks + core + mlp + adapters
    per_token += scores * sc.seq_len
    # final norm + LM head input (the LM head is a torch linear, frozen under PEFT unless modules_to_save copies it)
    head_trains = (sc.method is Method.FULL and sc.trainable_layers is None) or trains_lm_head(sc)
    head = norm + (_linear_inputs(1, resid, c, casts) * h if head_trains else 0.0)
    return BlockActivations(norms=2 * norm + extra_norms + dropout_masks, linear_inputs=attn_in + mlp_in,
                            inner=qk_norm + core + mlp + adapters, scores=scores, per_token=per_token, head=head,
                            resid=resid, kernel=kernel, other_kernel=choice.other_kernel,
                            other_layers=choice.other_layers,
                            per_layer=saved_per_layer(arch, sc, c, spec.autocast, spec.weight_bytes))


def scores_backward_bytes(arch: Architecture, sc: Scenario, a: int, b: BlockActivations) -> float:
    """Bytes the backward of one block's eager or math attention holds beyond the probabilities it saved, per
    batch x heads x seq x seq: the probabilities' gradient and the softmax's input gradient are alive beside the saved
    probabilities (``MmBackward`` -> ``ToCopyBackward`` -> ``SoftmaxBackward``). Eager with an fp32 softmax cast to
    16 bits (Llama and most families): +4 B (the fp32 gradient and the 16-bit input gradient, the 16-bit probabilities
    already freed); fp32 throughout: +8 B; math (probabilities in the compute dtype, ``_safe_softmax``): +2 x bytes.
    0 for flash and memory-efficient (their backward workspace is per block row, not s x s)."""
    def per_score(kernel: str | None) -> float:
        if kernel == "eager" and b.scores / arch.num_attention_heads > a:  # an fp32 softmax kept beside its cast
            return 4.0
        if kernel in ("eager", "math"):
            return 2.0 * a
        return 0.0
    extra = max(per_score(b.kernel), per_score(b.other_kernel))
    return extra * sc.micro_batch_size * arch.num_attention_heads * sc.seq_len * sc.seq_len


def activations_components(arch: Architecture, sc: Scenario, spec: PrecisionSpec, block_copies: float = 0.0,
                           gpu: Gpu | None = None) -> tuple[MemoryComponent, MemoryComponent | None, str]:
    """Saved activations (alive from the forward to the start of backward) and, with gradient checkpointing,
    the recomputed block (alive while its backward runs, after the loss gradients are freed), and the kernel
    (:func:`attention_choice` on ``gpu``)."""
    b = block_activations(arch, sc, spec, gpu)
    resid, kernel, per_token, h = b.resid, b.kernel, b.per_token, arch.hidden_size
    # Freeze-tuning: the frozen blocks below the first trainable one record no graph (engine.scenario.freeze), so
    # only the N trainable blocks save tensors (or, checkpointed, their inputs).
    saving = graph_blocks(arch, sc)
    tokens = sc.tokens_per_micro_batch
    layer = per_token * tokens + b.per_layer
    head = b.head * tokens
    recompute = None
    if sc.gradient_checkpointing:
        # Checkpointed blocks keep only their input hidden state; backward recomputes one block at a time,
        # once the loss gradients are gone.
        total = saving * resid * h * tokens + head
        formula = (
            f"{saving} layers x {resid} B x seq x batch x hidden (checkpointed inputs) + final norm/LM head input"
        )
        offloaded = offloaded_inputs_bytes(arch, sc, resid)
        if offloaded:  # Unsloth-style: the block inputs wait in CPU RAM; one comes back for its recompute
            total -= offloaded
            formula = f"final norm/LM head input; {arch.num_layers} checkpointed block inputs offloaded to CPU RAM"
        scores_grad = scores_backward_bytes(arch, sc, attention_input_bytes(arch, sc, spec), b)
        recompute = MemoryComponent(
            key="recomputed_layer",
            label="Recomputed block",
            bytes=layer + block_copies + (resid * h * tokens if offloaded else 0.0) + scores_grad,
            phases=("recompute",),
            formula=f"one block's saved tensors again ({per_token / h:.1f} B x seq x batch x hidden)"
            + (" + its 16-bit weight copies" if block_copies else "")
            + (" + its s x s attention gradients in backward" if scores_grad else ""),
            source="torch.utils.checkpoint (recompute in backward); saved tensors as without checkpointing; "
                   "softmax / matmul backward of eager and math attention",
        )
    else:
        total = saving * layer + head
        formula = f"{saving} layers x {per_token / h:.1f} B x seq x batch x hidden + final norm/LM head input"
    if saving < arch.num_layers:
        formula += f" (freeze-tuning: the {arch.num_layers - saving} frozen blocks below save nothing)"
    formula += f"; attention kernel: {kernel.replace('_', '-')}"
    if b.other_kernel and b.other_kernel != kernel:
        formula += f" ({b.other_kernel.replace('_', '-')} on {b.other_layers} layers)"
    if kernel in ("eager", "math") or b.other_kernel in ("eager", "math"):
        formula += "; includes s x s attention probabilities"
    comp = MemoryComponent(
        key="activations",
        label="Activations",
        bytes=total,
        phases=("forward", "backward", "recompute") if sc.gradient_checkpointing else ("forward", "backward"),
        formula=formula,
        source="saved tensors of transformers' modules (autograd), cf. Korthikanti et al. 2022 sec. 4.1",
    )
    return comp, recompute, kernel
