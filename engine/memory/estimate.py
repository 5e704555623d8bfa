"""Peak GPU memory of one training step on one GPU, by named component, in bytes.

What is modelled is ``torch.cuda.max_memory_allocated()`` in the steady state (second and later steps)
of a Hugging Face Trainer run (transformers 4.4x-5.x, PEFT 0.1x, bitsandbytes 0.4x): the bytes of live
tensors. The caching allocator's reserve and the CUDA context are not tensors: :class:`DeviceMemory` adds
them to give ``max_memory_reserved()`` and what nvidia-smi shows.

The peak is never "everything at once" (fake-tensor traces, engine.trace and data/traced_scenarios.csv): it
sits at one of the moments of :data:`PHASES` - the end of the forward, the **start of backward** (weights,
optimizer states, every saved activation and the loss gradients alive; weight gradients not yet created
unless gradient accumulation keeps them), the recompute of a checkpointed block, the end of backward, or the
**optimizer step** (weights, gradients, states and the step's temporaries; activations freed). The estimate
computes each and reports the largest with its phase. Against 132 traced steps it is within 2.8% (median
0.1%).

Activations are summed from the tensors each module saves for backward (derived from PyTorch autograd's
saved tensors for the ops used in transformers' modelling code; cf. Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", sec. 4.1, which does the same for Megatron's
fused layer and gets 34 bytes x s x b x h per layer). Hugging Face's unfused modules save more: the
derivation below gives 51 x s x b x h per layer for Llama-3.1-8B in pure bf16 with SDPA, where traces
measured about 53, and 61 with bf16 autocast, where traces measured about 63.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.memory.activations import activations_components, attention_choice
from engine.memory.components import MemoryComponent
from engine.memory.result import MemoryEstimate
from engine.memory.gradients import gradient_temporaries, gradients_component
from engine.memory.logits import logits_component, logits_forward_component
from engine.memory.optimizer_states import optimizer_components
from engine.memory.weights import ParamTensors, low_precision_copies, split_tensors, weights_component
from engine.model.architecture import Architecture
from engine.memory.adapters import adalora_scores_component, forward_transient_component, prefix_kv_component
from engine.memory.components import step_phases
from engine.scenario.loss import LOSSES, TRANSFORMERS_VERSION_LABELS, LossImplementation
from engine.scenario.peft import LORA_FAMILY, effective_seq_len, targeted
from engine.scenario.optimizer import is_paged
from engine.scenario.precision import precision_spec
from engine.scenario.training import METHOD_LABELS, Framework, Method, Scenario

if TYPE_CHECKING:  # a type only: the GPU catalog is not imported for an estimate without --gpu
    from engine.hardware.gpus import Gpu


NOT_MODELLED = (
    "the caching allocator's exact fragmentation: reserved memory is modelled as a fixed fraction of the "
    "allocated peak (ALLOCATOR_RESERVE_FRACTION), real runs vary between +5 and +20%",
    "transients in the middle of backward (LM-head weight gradient created while loss gradients are alive, "
    "flash-attention backward workspace)",
    "multi-GPU: this estimate is one GPU; engine.memory.parallel splits it per GPU for DDP, ZeRO-1/2/3, FSDP and CPU "
    "offload; tensor/pipeline/context/expert parallelism is engine.scaleout's per-rank estimate (the Scale out page); "
    "NVMe offload is not modelled",
    "transformers 5 fused MoE expert tensors (experts are counted as separate linear modules, as in 4.x)",
    "the explicit causal mask Falcon materialises (batch x seq x seq, 1 B, shared by its layers) and the math "
    "kernel's backward transients (two seq x seq gradients of one layer)",
    "optimizer 'step' scalars and bitsandbytes quantization maps (a few KB per tensor)",
)


def estimate_memory(arch: Architecture, scenario: Scenario, gpu: Gpu | None = None) -> MemoryEstimate:
    """Estimate the steady-state peak GPU memory of ``scenario`` for ``arch``.

    Args:
        arch: from :func:`engine.model.architecture.architecture_from_config`.
        scenario: a validated :class:`~engine.scenario.training.Scenario`.
        gpu: the GPU, which decides the attention kernel (:func:`engine.memory.activations.attention_choice`);
            None = an Ampere-or-newer GPU.
    Returns:
        A :class:`MemoryEstimate` whose ``components`` (bytes) sum to ``total_bytes`` at ``peak_phase``.
    Raises:
        ScenarioError: LoRA targets that match no module of ``arch``; flash_attention_2 on a pre-Ampere ``gpu``.
    """
    spec = precision_spec(scenario.precision)
    tensors = split_tensors(arch, scenario, spec)
    copies, block_copies = low_precision_copies(arch, tensors, scenario, spec)
    # Prompt tuning and P-tuning prepend their virtual tokens: every layer and the loss run on s + n tokens.
    run = scenario.model_copy(update={"seq_len": effective_seq_len(scenario)})
    activations, recompute, kernel = activations_components(arch, run, spec, block_copies, gpu)
    kernel_reason = attention_choice(arch, run, spec, gpu).reason
    optional = (recompute, logits_forward_component(arch, run, spec), forward_transient_component(arch, scenario, spec),
                prefix_kv_component(arch, scenario, spec), adalora_scores_component(arch, scenario, step_phases(scenario)))
    parts = (
        weights_component(tensors, scenario, spec),
        copies,
        gradients_component(tensors, scenario),
        gradient_temporaries(arch, tensors, scenario, spec),
        *optimizer_components(tensors, scenario),
        activations,
        logits_component(arch, run, spec),
        *(p for p in optional if p is not None),
    )
    trainable = sum(g.parameters for g, _ in tensors.trainable)
    assumptions = [
        "Hugging Face Trainer defaults: zero_grad(set_to_none=True), " + _loss_assumption(scenario),
        f"attention kernel: {kernel} ({kernel_reason})",
    ]
    if scenario.framework is not Framework.HF:
        assumptions[0] = (f"{scenario.framework.value} single-device fine-tuning (see engine.scenario.training.Framework); "
                          + _loss_assumption(scenario))
    if scenario.method is not Method.FULL:
        name = METHOD_LABELS[scenario.method]
        assumptions.append(f"{name} adapters in fp32 (PEFT 0.21 autocast_adapter_dtype=True)" if scenario.framework is Framework.HF
                           else f"{name} adapters in the weight dtype")
    pageable = sum(p.bytes for p in parts if p.key == "optimizer_states") if is_paged(scenario.optimizer) else 0.0
    return MemoryEstimate(
        pageable_bytes=pageable,
        warnings=scenario_warnings(arch, scenario),
        parts=parts,
        total_parameters=arch.total_parameters,
        trainable_parameters=trainable,
        attention_kernel=kernel,
        bytes_per_parameter=_bytes_per_parameter(parts, tensors, arch.total_parameters),
        assumptions=tuple(assumptions),
        not_modelled=NOT_MODELLED,
    )


def _loss_assumption(sc: Scenario) -> str:
    """Which loss code the logits components follow (engine.memory.loss_paths): the chosen one, else the
    framework's default (:data:`engine.scenario.training.FRAMEWORKS`)."""
    if sc.loss is LossImplementation.HF:
        return (f"loss as in transformers {TRANSFORMERS_VERSION_LABELS[sc.transformers_version]} "
                "(ForCausalLMLoss, or the model's forward up to 4.45)")
    return f"loss: {LOSSES[sc.loss].label}"


def _beyond_context(arch: Architecture) -> str:
    """What a sequence past ``max_position_embeddings`` means for this position encoding."""
    if arch.positional == "learned":
        # GPT-2's wpe, BERT's position_embeddings: one learned row per position, no row past the last.
        return (f"its learned position embeddings have no row past position {arch.max_position_embeddings - 1:,}, so "
                "transformers fails with an index error: use a sequence length within it, or another model.")
    if arch.positional == "rope":
        return "training beyond it needs RoPE scaling (rope_scaling in the config) or gives poor results."
    return "the model was not trained on longer sequences, so quality beyond it is not assured."


def scenario_warnings(arch: Architecture, sc: Scenario) -> tuple[str, ...]:
    """Settings that compute but that a real run would reject or regret, in plain words."""
    out = []
    if arch.max_position_embeddings and sc.seq_len > arch.max_position_embeddings:
        out.append(f"Sequence length {sc.seq_len:,} exceeds this model's max_position_embeddings "
                   f"({arch.max_position_embeddings:,}); " + _beyond_context(arch))
    if sc.method in LORA_FAMILY or sc.method in (Method.ADALORA, Method.LOHA):
        narrow = [lin for lin in targeted(arch, sc) if sc.lora_r > min(lin.in_features, lin.out_features)]
        if narrow:
            lin = narrow[0]
            out.append(
                f"LoRA rank {sc.lora_r} exceeds min(in, out) = {min(lin.in_features, lin.out_features):,} of "
                f"{lin.module}: the adapter is larger than a full-rank update of that module."
            )
    if sc.method is Method.FULL and sc.precision.value == "fp16":
        out.append(
            "Full fine-tuning of fp16 weights: with a gradient scaler (Trainer(fp16=True), axolotl fp16: true) it "
            "fails ('Attempting to unscale FP16 gradients'); without one, small fp16 updates round away. Use mixed "
            "fp16 (fp32 weights) or bf16."
        )
    return tuple(out)


def _bytes_per_parameter(parts: tuple[MemoryComponent, ...], t: ParamTensors, total_params: int) -> str:
    """Model-state bytes per parameter, spelled out (why tools say 8, 16, 18 or 20)."""
    b = {p.key: p.bytes for p in parts}
    trainable = sum(g.parameters for g, _ in t.trainable)
    train_w = sum(g.parameters * x for g, x in t.trainable) / trainable
    grads, states = b["gradients"] / trainable, b["optimizer_states"] / trainable
    core = train_w + grads + states
    text = f"weights {train_w:.3g} + gradients {grads:.3g} + optimizer {states:.3g} = {core:.3g} B per trainable parameter"
    if t.frozen or t.quantized:
        base = (b["weights"] - train_w * trainable) / total_params
        text = f"frozen base {base:.3g} B per base parameter; adapters: " + text
    elif b["weight_copies"]:
        text += f"; + {b['weight_copies'] / trainable:.3g} autocast copies = {core + b['weight_copies'] / trainable:.3g} in backward"
    if b["optimizer_temporaries"]:
        temps = b["optimizer_temporaries"] / trainable
        text += f"; + {temps:.3g} step temporaries = {core + temps:.3g} at the optimizer step"
    return text
