"""Parameter tensors and their copies: how each is stored (trainable, frozen, quantized), the weights
component, autocast's low-precision copies, and the bytes per weight of bitsandbytes and pre-quantized formats.
"""

from __future__ import annotations

from pydantic import BaseModel

from engine.errors import ScenarioError
from engine.memory.components import MemoryComponent, Phase, step_phases
from engine.model.architecture import Architecture, TensorGroup
from engine.model.quantization import StoredQuantization
from engine.memory.adapters import peft_tensor_bytes
from engine.scenario.precision import PrecisionSpec
from engine.scenario.freeze import is_freeze, split_groups, stored_bytes, trainable_blocks
from engine.scenario.training import Framework, Method, QuantType, Scenario


NF4_BLOCK = 64
"""bitsandbytes 4-bit quantization block (``Params4bit`` blocksize 64): one absmax per 64 weights."""
DOUBLE_QUANT_BLOCK = 256
"""Double quantization groups 256 absmax values under one fp32 constant (Dettmers et al. 2023, "QLoRA", sec. 3)."""


def quantized_bytes_per_param(double_quant: bool, quant_type: QuantType = QuantType.NF4, in_features: int = 4096) -> float:
    """Bytes per weight of a bitsandbytes-quantized linear weight, constants included.

    4-bit (NF4 or FP4): 0.5 B packed data, plus one absmax per 64 weights: fp32 (4/64 = 0.0625 B) without
    double quantization, or int8 (1/64 B) plus one fp32 constant per 256 blocks (4/(64*256) B) with it
    (QLoRA paper, sec. 3 "Double Quantization": 0.5 -> 0.127 bits per parameter of constants).
    LLM.int8: 1 B per weight plus one fp32 scale per output row (``Int8Params.SCB``), 4 / ``in_features`` B
    per weight (Dettmers et al. 2022, "LLM.int8()", sec. 3.1, vector-wise quantization); the int8 data ``CB`` is
    one tensor shared by the parameter and ``MatmulLtState`` (bitsandbytes 0.45-0.50 ``Linear8bitLt.init_8bit_state``;
    its training-time dtypes: :mod:`engine.memory.int8`).
    """
    if quant_type is QuantType.INT8:
        return 1.0 + 4.0 / in_features
    if double_quant:
        return 0.5 + 1 / NF4_BLOCK + 4 / (NF4_BLOCK * DOUBLE_QUANT_BLOCK)
    return 0.5 + 4 / NF4_BLOCK


class ParamTensors(BaseModel):
    """Parameter tensors split by how they are stored: (group, bytes per element)."""

    trainable: list[tuple[TensorGroup, float]]
    frozen: list[tuple[TensorGroup, float]]
    quantized: list[TensorGroup]
    quantized_bpp: float = 0.0
    quantized_label: str = ""


def split_tensors(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> ParamTensors:
    """Which tensors train, which are frozen, which are 4-bit, and their bytes per element.

    LoRA adapters are fp32 in every mode: PEFT >= 0.12 casts adapters to fp32 when the base is 16-bit
    (``autocast_adapter_dtype=True``). QLoRA quantizes every ``nn.Linear`` of the decoder blocks
    (transformers' bitsandbytes integration skips ``lm_head``); ``prepare_model_for_kbit_training`` casts
    every remaining 16-bit parameter (embeddings, norms, LM head) to fp32 (PEFT ``other.py``).
    """
    # The vision tower of an image-text model stays frozen (the usual recipe fine-tunes the language model).
    vision = [(g, spec.weight_bytes) for g in arch.vision_tensors]
    stored = arch.stored_quantization
    if stored is not None:
        return prequantized(arch, sc, spec, stored, vision)
    if is_freeze(arch, sc):  # freeze-tuning: the last N blocks train (fp32 under mixed precision), the rest is frozen
        trainable, frozen = split_groups(arch, sc)
        train_b, frozen_b = stored_bytes(spec)
        return ParamTensors(trainable=[(g, train_b) for g in trainable],
                            frozen=[(g, frozen_b) for g in frozen] + vision, quantized=[])
    if sc.method is Method.FULL:
        return ParamTensors(trainable=[(g, spec.weight_bytes) for g in arch.tensors], frozen=vision, quantized=[])
    adapters, buffers = peft_tensor_bytes(arch, sc, spec)  # LoRA's A/B or another PEFT method's tensors
    if sc.method is not Method.QLORA:
        return ParamTensors(trainable=adapters, frozen=[(g, spec.weight_bytes) for g in arch.tensors] + vision + buffers,
                            quantized=[])
    # bitsandbytes replaces every nn.Linear but the LM head, the vision tower's included.
    other_bytes = 4.0 if sc.prepare_kbit_training else spec.weight_bytes
    everything = list(arch.tensors) + list(arch.vision_tensors)
    return ParamTensors(
        trainable=adapters,
        frozen=[(g, other_bytes) for g in everything if not g.linear],
        quantized=[g for g in everything if g.linear],
        quantized_bpp=mean_quantized_bpp([g for g in everything if g.linear], sc),
        quantized_label=("LLM.int8" if sc.quant_type is QuantType.INT8
                         else f"{sc.quant_type.value.upper()}{' + double quantization' if sc.double_quant else ''}"),
    )


def adapter_bytes(sc: Scenario, spec: PrecisionSpec) -> float:
    """Bytes per LoRA adapter element: fp32 with PEFT (>= 0.12 ``autocast_adapter_dtype=True``), the weight
    dtype with LitGPT and torchtune, which create adapters like any other parameter."""
    return 4.0 if sc.framework is Framework.HF else float(spec.weight_bytes)


def mean_quantized_bpp(groups: list[TensorGroup], sc: Scenario) -> float:
    """Bytes per quantized weight averaged over ``groups`` (LLM.int8's per-row scale depends on the shape)."""
    params = sum(g.parameters for g in groups)
    if not params:
        return quantized_bytes_per_param(sc.double_quant, sc.quant_type)
    return sum(g.parameters * quantized_bytes_per_param(sc.double_quant, sc.quant_type, g.shape[-1]) for g in groups) / params


def prequantized(
    arch: Architecture, sc: Scenario, spec: PrecisionSpec, stored: StoredQuantization, vision: list
) -> ParamTensors:
    """A checkpoint saved quantized (GPTQ, AWQ, FP8, bitsandbytes): its block linears keep the stored
    format and only adapters can train (transformers loads such weights frozen; PEFT trains LoRA on top).
    Its other frozen weights (embeddings, norms, LM head) are 16-bit under mixed precision (``amp_bf16`` /
    ``amp_fp16`` load no fp32 copy of a quantized checkpoint), fp32 only in fp32 mode or after
    ``prepare_model_for_kbit_training`` (QLoRA).

    Raises:
        ScenarioError: full fine-tuning, which needs the unquantized weights.
    """
    if sc.method is Method.FULL:
        raise ScenarioError(
            f"this checkpoint is stored quantized ({stored.description}); full fine-tuning needs the unquantized "
            "weights: choose LoRA/QLoRA, or load the original model"
        )
    # The stored format of frozen weights never depends on the autocast mode: the packed linears keep their bytes,
    # and the checkpoint's other weights load in 16 bits under mixed precision too (transformers' GPTQ, AWQ and
    # bitsandbytes quantizers set torch_dtype=float16 when none is given; an fp32 load must ask for it: fp32 mode).
    other_bytes = 4.0 if sc.method is Method.QLORA and sc.prepare_kbit_training else float(spec.compute_bytes)
    return ParamTensors(
        trainable=peft_tensor_bytes(arch, sc, spec)[0],
        frozen=[(g, other_bytes) for g in arch.tensors if not g.linear] + vision,
        quantized=[g for g in arch.tensors if g.linear],
        quantized_bpp=stored.bytes_per_param,
        quantized_label=f"{stored.description}, as stored in the checkpoint",
    )


def weights_component(t: ParamTensors, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    trainable = sum(g.parameters * b for g, b in t.trainable)
    frozen = sum(g.parameters * b for g, b in t.frozen)
    q_params = sum(g.parameters for g in t.quantized)
    q_bpp = t.quantized_bpp
    if t.quantized:
        kept = ("fp32 after prepare_model_for_kbit_training" if sc.method is Method.QLORA and sc.prepare_kbit_training
                else f"{t.frozen[0][1]:g} B" if t.frozen else f"{spec.weight_bytes} B")
        formula = (
            f"block linears {q_params / 1e9:.3f}B x {q_bpp:.4f} B ({t.quantized_label}) + embeddings/norms/LM head "
            f"({kept}) + adapters x {adapter_bytes(sc, spec):g} B"
        )
    elif sc.method is Method.FULL and sc.trainable_layers is not None:
        train_b, frozen_b = stored_bytes(spec)
        formula = f"frozen x {frozen_b:g} B + the last {sc.trainable_layers} blocks (trainable) x {train_b:g} B"
    elif sc.method is Method.FULL:
        formula = f"all parameters x {spec.weight_bytes} B ({spec.weight_dtype} weights)"
    else:
        adapter = adapter_bytes(sc, spec)
        formula = (f"frozen base x {spec.weight_bytes} B ({spec.weight_dtype}) + adapters x {adapter:g} B "
                   f"({'fp32' if adapter == 4 else spec.weight_dtype})")
    return MemoryComponent(
        key="weights",
        label="Weights",
        bytes=trainable + frozen + q_params * q_bpp,
        phases=step_phases(sc),
        formula=formula,
        source="parameter shapes from modeling_<type>.py; QLoRA constants: Dettmers et al. 2023, sec. 3",
    )


def low_precision_copies(arch: Architecture, t: ParamTensors, sc: Scenario, spec: PrecisionSpec) -> tuple[MemoryComponent, float]:
    """16-bit copies of weights that exist only while computing, and the bytes of one block's copies made again
    when a checkpointed block is recomputed.

    - Autocast caches the bf16/fp16 cast of every fp32 leaf weight that requires grad until the forward's
      autocast region exits (PyTorch autocast ``cached_cast``); autograd keeps them for backward unless
      gradient checkpointing discarded the block's saved tensors, in which case they live only to the end of
      the forward.
    - Frozen fp32 weights are cast per use, not cached, but ``linear`` saves the cast for the input
      gradient: all blocks' copies without checkpointing, the LM head's only with it.
    - QLoRA dequantizes one 4-bit weight at a time to the compute dtype (bitsandbytes ``matmul_4bit``).
    """
    nbytes, block = 0.0, 0.0
    notes = []
    phases: tuple[Phase, ...] = ("forward", "backward")
    per_layer = sum(g.parameters for g in arch.tensors if g.linear) / arch.num_layers
    if spec.autocast and sc.method is Method.FULL:
        # The LM head's cast is cached too: its own weight, or the embedding matrix when tied (GPT-2, Llama 3.2 1B).
        # Freeze-tuning: only the trainable blocks hold fp32 weights to cast (the frozen rest is 16-bit already).
        cast = (per_layer * trainable_blocks(arch, sc) if is_freeze(arch, sc)
                else per_layer * arch.num_layers + lm_head_params(arch))
        nbytes += cast * spec.compute_bytes
        notes.append(f"autocast cache: the {trainable_blocks(arch, sc)} trainable blocks' linears x 2 B"
                     if is_freeze(arch, sc) else "autocast cache: block linears and the LM head x 2 B")
        if sc.gradient_checkpointing:
            phases = ("forward",)  # checkpointed blocks saved none of them; the cache dies with the forward
            block = per_layer * spec.compute_bytes
            notes.append("freed after the forward (checkpointing); one block's copies again when it is recomputed")
    elif spec.autocast and sc.method is not Method.QLORA and not t.quantized:
        layers = 0 if sc.gradient_checkpointing else arch.num_layers
        nbytes += (per_layer * layers + lm_head_params(arch)) * spec.compute_bytes
        block = per_layer * spec.compute_bytes if sc.gradient_checkpointing else 0.0
        notes.append(f"frozen fp32 linears cast for backward: {layers or 'no'} block(s) + LM head x 2 B"
                     + ("; one block's when it is recomputed" if block else ""))
    if t.quantized:
        largest = max(g.numel for g in t.quantized)
        nbytes += largest * spec.compute_bytes
        notes.append("one dequantized weight at a time")
        phases = step_phases(sc)[:3] if sc.gradient_checkpointing else ("forward", "backward")
        if sc.method is Method.QLORA and sc.prepare_kbit_training and spec.compute_bytes == 2:
            # The LM head stays fp32 after prepare_model_for_kbit_training; autocast casts it for the matmul
            # and linear saves that copy for the input gradient.
            nbytes += lm_head_params(arch) * spec.compute_bytes
            notes.append("fp32 LM head cast to 16 bits for its matmul")
    comp = MemoryComponent(
        key="weight_copies",
        label="Low-precision weight copies",
        bytes=nbytes,
        phases=phases,
        formula="; ".join(notes) or "none in this precision mode",
        source="PyTorch autocast cached_cast; bitsandbytes 0.4x matmul_4bit",
    )
    return comp, block


def lm_head_params(arch: Architecture) -> int:
    """Elements of the output projection (the embedding matrix when tied)."""
    untied = sum(g.parameters for g in arch.tensors if g.role == "lm_head")
    return untied or arch.vocab_size * arch.hidden_size
