"""Training FLOPs per token by the parameter-count rule, for display beside the step-time model.

Kaplan et al. 2020, sec. 2.1; Chowdhery et al. 2022 "PaLM", appendix B: a matmul with N weights costs 2N FLOPs per
token forward, 2N for the input gradient and 2N for the weight gradient, so full training is 6N, plus attention's
12 x layers x (heads x head_dim) x sequence. Frozen weights (LoRA/QLoRA) need no weight gradient: 4N. Gradient
checkpointing runs the forward again: +2N and +4 x layers x q x s. Freeze-tuning of the last n of L blocks: input
gradients and the recompute in n / L of them (all with ``frozen_input_grads``), weight gradients in n / L. N counts the weights that multiply each token:
the linear layers of the blocks (only the routed top-k experts for MoE) and the LM head; the embedding lookup is
not a matmul. The step-time model (:mod:`engine.time.step`) counts the same FLOPs GEMM by GEMM.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture
from engine.scenario.freeze import backward_share, weight_share
from engine.scenario.lora import adapter_tensors
from engine.scenario.training import Method, Scenario


class FlopsPerToken(BaseModel):
    """Training FLOPs per token, split so the UI can show where they go."""

    model_config = ConfigDict(frozen=True)

    matmul_parameters: int
    dense: float
    attention: float
    recompute: float
    adapters: float

    @property
    def total(self) -> float:
        """FLOPs the GPU executes per token, recompute included."""
        return self.dense + self.attention + self.recompute + self.adapters

    @property
    def model_flops(self) -> float:
        """FLOPs per token without recompute: the numerator of MFU as PaLM defines it."""
        return self.dense + self.attention + self.adapters


def matmul_parameters(arch: Architecture) -> int:
    """Weights multiplying each token: block linears (routed experts at top-k / E) and the LM head."""
    total = 0
    for lin in arch.layer_linears:
        share = arch.experts_per_token / arch.num_experts if lin.count > 1 and arch.num_experts else 1.0
        total += round(lin.in_features * lin.out_features * lin.count * share) * lin.blocks(arch.num_layers)
    return total + arch.vocab_size * arch.hidden_size


def flops_per_token(arch: Architecture, sc: Scenario) -> FlopsPerToken:
    """Training FLOPs per token of ``sc`` (see the module docstring for the formula and sources)."""
    n = matmul_parameters(arch)
    attn_fwd = 4 * arch.num_layers * arch.q_out * sc.seq_len
    frozen = sc.method is not Method.FULL
    adapters = 0.0
    if frozen:
        adapters = 6.0 * sum(g.parameters for g in adapter_tensors(arch, sc.lora_r, sc.lora_targets))
    # Freeze-tuning: input gradients through backward_share of the blocks, weight gradients in weight_share of them
    # (engine.scenario.freeze; the LM head counted with the blocks, as N does).
    b, w = (1.0, 0.0) if frozen else (backward_share(arch, sc), weight_share(arch, sc))
    return FlopsPerToken(
        matmul_parameters=n,
        dense=(2.0 + 2.0 * b + 2.0 * w) * n,
        attention=(1.0 + 2.0 * b) * attn_fwd,
        recompute=b * (2.0 * n + attn_fwd) if sc.gradient_checkpointing else 0.0,
        adapters=adapters,
    )
