"""Logits and the loss over the vocabulary, by loss implementation (:class:`~engine.scenario.loss.LossImplementation`):
transformers' fp32 upcast by release range, LitGPT's chunked 16-bit loss, Liger's fused linear cross-entropy, and the
per-logit paths of :mod:`engine.memory.loss_paths` (torchtune's chunked loss, Megatron-LM's vocab-parallel loss,
torchtitan's, fused in-place kernels).
"""

from __future__ import annotations

from engine.memory.components import MemoryComponent, Phase
from engine.memory.loss_paths import loss_path
from engine.memory.weights import lm_head_params
from engine.model.architecture import Architecture
from engine.scenario.precision import PrecisionSpec
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Method, Scenario


def logits_component(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """Loss over the vocabulary at the start of backward, for the loss that runs (``Scenario.loss``).

    transformers' loss (every version, :class:`~engine.scenario.loss.TransformersVersion`): cross-entropy keeps the
    fp32 log-softmax (4 B) and backward creates the nll and log-softmax gradients (4 B each) while it is alive:
    12 bytes x batch x seq x vocab (fake-tensor traces, tracing-notes.md; measured on real CPU tensors with
    transformers 4.41.2, 4.46.3 and 5.24.0 by ``scripts/loss_probe.py``: 12.0 B each). Gemma 2 also keeps its tanh
    soft-capped logits. Liger's fused loss: :func:`fused_logits_component`; LitGPT's chunked loss:
    :func:`litgpt_logits_component`; the others: :func:`loss_path`.
    """
    loss = sc.loss
    if loss is LossImplementation.LIGER:
        return fused_logits_component(arch, sc, spec)
    if loss is LossImplementation.LITGPT_CHUNKED:
        return litgpt_logits_component(arch, sc, spec)
    path = loss_path(arch, sc, spec)
    return per_logit_component("logits_loss", "Logits and loss", path.backward, arch, sc, ("backward",),
                               f"{path.backward:g} B x batch x seq x vocab ({arch.vocab_size:,}): {path.backward_text}",
                               path.source)


def per_logit_component(key: str, label: str, per: float, arch: Architecture, sc: Scenario, phases: tuple[Phase, ...],
               formula: str, source: str) -> MemoryComponent:
    """A component of ``per`` bytes for each logit (batch x seq x vocab)."""
    return MemoryComponent(key=key, label=label, bytes=per * sc.tokens_per_micro_batch * arch.vocab_size,
                           phases=phases, formula=formula, source=source)


def logits_forward_component(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent | None:
    """The loss's forward: what is alive together while the loss runs (:func:`loss_path`'s ``forward``), freed
    when the loss returns. None where the logits are chunked inside the loss (Liger, LitGPT)."""
    if sc.loss in (LossImplementation.LIGER, LossImplementation.LITGPT_CHUNKED):
        return None
    path = loss_path(arch, sc, spec)
    return per_logit_component("logits_forward", "Logits and loss (forward)", path.forward, arch, sc, ("forward",),
                               f"{path.forward:g} B x batch x seq x vocab: {path.forward_text}", path.source)


def litgpt_logits_component(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """LitGPT (``finetune``, ``lm_head_chunk_size=128``): the logits stay in the compute dtype, the training
    loop keeps the list of logit chunks alive through backward and ``F.cross_entropy`` saves each chunk's
    log-softmax: 2 x compute bytes per token and vocabulary entry; backward then works one chunk at a time."""
    per = 2.0 * spec.compute_bytes
    return per_logit_component("logits_loss", "Logits and loss", per, arch, sc, ("forward", "backward"),
                      f"{per:g} B x batch x seq x vocab ({arch.vocab_size:,}): 16-bit logits + log-softmax, in chunks of 128 tokens",
                      "LitGPT chunked_cross_entropy (litgpt/utils.py) and GPT.forward(lm_head_chunk_size=128)")


def liger_chunk_tokens(tokens: int, vocab: int, hidden: int) -> int:
    """Tokens per chunk of Liger Kernel's fused linear cross-entropy (liger-kernel 0.5
    ``fused_linear_cross_entropy_forward``): ``next_power_of_2(ceil(tokens / ceil(vocab / hidden)))``,
    so that a chunk's logits are about as large as the hidden states."""
    inc = -(-vocab // hidden)
    chunk = -(-tokens // inc)
    return 1 << max(chunk - 1, 0).bit_length()


def fused_logits_component(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """Fused linear cross-entropy: the LM head and the loss run chunk by chunk inside the forward, which
    computes the gradients right away, so the full logits never exist.

    Alive at the start of backward: the gradient with respect to the hidden states (tokens x hidden in
    the compute dtype), the LM head's weight gradient when it trains (vocab x hidden, in the weight's
    dtype; created in the forward), and one chunk's logits with their fp32 upcast.
    """
    tokens, h, v = sc.tokens_per_micro_batch, arch.hidden_size, arch.vocab_size
    chunk = liger_chunk_tokens(tokens, v, h)
    c = spec.compute_bytes
    # (freeze-tuning keeps the LM head frozen: no weight gradient)
    head_grad = lm_head_params(arch) * spec.weight_bytes if sc.method is Method.FULL and sc.trainable_layers is None else 0.0
    nbytes = tokens * h * c + chunk * v * (c + 4) + head_grad
    formula = (f"hidden-state gradient (batch x seq x hidden x {c} B) + one chunk of {chunk:,} tokens x vocab x "
               f"({c} + 4) B")
    if head_grad:
        formula += " + the LM head's weight gradient, created in the forward"
    return MemoryComponent(
        key="logits_loss",
        label="Logits and loss (fused)",
        bytes=nbytes,
        phases=("forward", "backward"),
        formula=formula,
        source="Liger Kernel 0.5 LigerFusedLinearCrossEntropyLoss (Hsu et al. 2024, sec. 3.3)",
    )
