"""Gradients of the trainable parameters and the temporaries of backward (tied embeddings' two gradients).
"""

from __future__ import annotations

from engine.memory.components import MemoryComponent, Phase, step_phases
from engine.memory.weights import ParamTensors
from engine.model.architecture import Architecture
from engine.scenario.precision import PrecisionSpec
from engine.scenario.training import Method, Scenario


def gradients_component(t: ParamTensors, sc: Scenario) -> MemoryComponent:
    # Gradients take the dtype of their parameter. With accumulation they persist across micro-batches,
    # so they are alive at the start of the next backward too; otherwise Trainer's zero_grad(set_to_none)
    # frees them before the forward.
    phases: tuple[Phase, ...] = step_phases(sc) if sc.gradient_accumulation_steps > 1 else ("backward_end", "optimizer_step")
    if sc.method is Method.ADALORA and len(phases) == 2:
        # AdaLoRA adds an orthogonality penalty on lora_A/lora_B to the loss (PEFT 0.21 AdaLoraModel.forward): its
        # backward runs first, so the adapters' gradients exist from the start of backward.
        phases = tuple(p for p in step_phases(sc) if p != "forward")
    if sc.optimizer.record.layerwise:
        # Layer-wise GaLore steps each parameter in its post-accumulate-grad hook and zero_grad()s it there
        # (LLaMA-Factory@8963e89 train/utils.py optimizer_hook; transformers _get_galore_optimizer): one parameter's
        # gradient is alive at a time, during backward (no accumulation: the scenario refuses it).
        return MemoryComponent(
            key="gradients", label="Gradients",
            bytes=max((g.numel * b for g, b in t.trainable), default=0.0), phases=("backward",),
            formula="the largest trainable tensor x bytes of its dtype (each gradient is freed at its in-backward step)",
            source="register_post_accumulate_grad_hook: the optimizer steps and zero_grad()s each parameter in backward",
        )
    return MemoryComponent(
        key="gradients",
        label="Gradients",
        bytes=sum(g.parameters * b for g, b in t.trainable),
        phases=phases,
        formula="trainable parameters x bytes of their dtype"
        + ("; alive during backward because gradient accumulation keeps them" if len(phases) > 2 else ""),
        source="torch autograd: .grad matches the parameter's dtype",
    )


def gradient_temporaries(arch: Architecture, t: ParamTensors, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """End of backward with tied input/output embeddings (full fine-tuning): the embedding's backward makes a
    dense vocab x hidden gradient that is added to the one the LM head already accumulated, while the LM head's
    own gradient product is still alive: two vocab x hidden tensors in the compute dtype (traced with in-place
    accumulation, as on a GPU: 8 B x V x h in fp32, 4 B in mixed and pure bf16, for GPT-2, Llama-3.2-1B and
    Qwen2.5-0.5B)."""
    nbytes = 0.0
    if arch.tie_word_embeddings and sc.method is Method.FULL and sc.trainable_layers is None and t.trainable:
        nbytes = 2.0 * arch.vocab_size * arch.hidden_size * spec.compute_bytes
    return MemoryComponent(
        key="gradient_temporaries",
        label="Backward temporaries",
        bytes=nbytes,
        phases=("backward_end",),
        formula="tied embedding: 2 x vocab x hidden x compute bytes (its two gradients being summed)" if nbytes else "none",
        source="torch autograd gradient accumulation (embedding_dense_backward + LM head); fake-tensor traces",
    )
