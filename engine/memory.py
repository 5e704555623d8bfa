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

from typing import Literal

from pydantic import BaseModel, ConfigDict, computed_field

from engine.architecture import Architecture, LinearLayer, TensorGroup
from engine.lora import adapter_tensors, resolve_targets
from engine.optimizer import Optimizer, is_paged, optimizer_state_bytes, step_temporary_bytes
from engine.errors import ScenarioError
from engine.precision import PrecisionSpec, precision_spec
from engine.quantization import StoredQuantization
from engine.scenario import Attention, Framework, Method, QuantType, Scenario

Phase = Literal["forward", "backward", "recompute", "backward_end", "optimizer_step", "inference"]
PHASES: tuple[Phase, ...] = ("forward", "backward", "recompute", "backward_end", "optimizer_step")
"""The moments of a training step at which the peak can sit, in order (fake-tensor traces,
../shared/reference/tracing-notes.md): the end of the forward (autocast's weight cache and the loss's forward
tensors alive), the start of backward (every saved activation and the loss gradients), the recompute of a
checkpointed block (with gradient checkpointing only), the end of backward (every gradient, plus the
temporaries of a tied embedding's two gradients) and the optimizer step. An inference estimate
(:mod:`engine.inference`) has the one phase ``inference``."""


def step_phases(sc: Scenario) -> tuple[Phase, ...]:
    """The phases of ``sc``'s training step (``recompute`` only with gradient checkpointing)."""
    return tuple(p for p in PHASES if p != "recompute" or sc.gradient_checkpointing)

NF4_BLOCK = 64
"""bitsandbytes 4-bit quantization block (``Params4bit`` blocksize 64): one absmax per 64 weights."""
DOUBLE_QUANT_BLOCK = 256

CUDA_CONTEXT_BYTES = 1343 * 2**20
"""What a process holds on the GPU before its first tensor: the CUDA context, kernels and cuBLAS/cuDNN
handles. transformers docs, "Model training anatomy" (performance guide): NVML reports 1343 MB (MiB) used
after creating one tiny tensor on the GPU. Lazy module loading (CUDA >= 11.7) can make it smaller; the
figure depends on the GPU, the driver and the libraries loaded, hence an explicit input."""

ALLOCATOR_RESERVE_FRACTION = 0.10
"""PyTorch's caching allocator keeps freed blocks and splits large segments, so ``max_memory_reserved``
exceeds ``max_memory_allocated``: published runs show +5 to +20% (../shared/reference/README.md, from
the runs that report both). Modelled as this fraction of the allocated peak."""
"""Double quantization groups 256 absmax values under one fp32 constant (Dettmers et al. 2023, "QLoRA", sec. 3)."""


def quantized_bytes_per_param(double_quant: bool, quant_type: QuantType = QuantType.NF4, in_features: int = 4096) -> float:
    """Bytes per weight of a bitsandbytes-quantized linear weight, constants included.

    4-bit (NF4 or FP4): 0.5 B packed data, plus one absmax per 64 weights: fp32 (4/64 = 0.0625 B) without
    double quantization, or int8 (1/64 B) plus one fp32 constant per 256 blocks (4/(64*256) B) with it
    (QLoRA paper, sec. 3 "Double Quantization": 0.5 -> 0.127 bits per parameter of constants).
    LLM.int8: 1 B per weight plus one fp32 scale per output row (``Int8Params.SCB``), 4 / ``in_features`` B
    per weight (Dettmers et al. 2022, "LLM.int8()", sec. 3.1, vector-wise quantization).
    """
    if quant_type is QuantType.INT8:
        return 1.0 + 4.0 / in_features
    if double_quant:
        return 0.5 + 1 / NF4_BLOCK + 4 / (NF4_BLOCK * DOUBLE_QUANT_BLOCK)
    return 0.5 + 4 / NF4_BLOCK


class MemoryComponent(BaseModel):
    """One named part of the memory, with the formula and the source that produced it.

    ``bytes`` is its size while alive; ``phases`` the phases of the step in which it is alive.
    """

    model_config = ConfigDict(frozen=True)

    key: str
    label: str
    bytes: float
    phases: tuple[Phase, ...]
    formula: str
    source: str


class MemoryEstimate(BaseModel):
    """Result of :func:`estimate_memory`. All sizes in bytes, counts in parameters."""

    model_config = ConfigDict(frozen=True)

    parts: tuple[MemoryComponent, ...]
    total_parameters: int
    trainable_parameters: int
    attention_kernel: str
    bytes_per_parameter: str
    assumptions: tuple[str, ...]
    not_modelled: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    pageable_bytes: float = 0.0
    """Paged optimizer states (CUDA unified memory): on the GPU while there is room, outside torch's allocator."""

    @property
    def phases(self) -> tuple[Phase, ...]:
        """The phases this estimate models: :data:`PHASES` for training, ``("inference",)`` for serving."""
        if any("inference" in p.phases for p in self.parts):
            return ("inference",)
        present = {ph for p in self.parts for ph in p.phases}
        return tuple(ph for ph in PHASES if ph in present)

    def phase_total(self, phase: Phase) -> float:
        """Bytes alive at ``phase``."""
        return sum(p.bytes for p in self.parts if phase in p.phases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_phase(self) -> Phase:
        """The phase whose total is largest; on ties the start of backward, then the optimizer step."""
        tie = {"backward": 2, "optimizer_step": 1}
        return max(self.phases, key=lambda ph: (self.phase_total(ph), tie.get(ph, 0)))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total_bytes(self) -> float:
        """Estimated peak: the total of :attr:`peak_phase`."""
        return self.phase_total(self.peak_phase)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def components(self) -> dict[str, float]:
        """Bytes of each component at the peak (0 for those not alive then); they sum to ``total_bytes``."""
        return self.components_at(self.peak_phase)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def first_step_peak_bytes(self) -> float:
        """Peak of the first training step: its backward runs before any optimizer state exists (torch and
        bitsandbytes create states lazily inside the first ``step()``), so only its optimizer step can reach
        the steady-state peak. Never above :attr:`total_bytes`."""
        if "optimizer_step" not in self.phases:
            return self.total_bytes
        states = sum(p.bytes for p in self.parts if p.key == "optimizer_states")
        return max(self.phase_total(ph) - (states if ph != "optimizer_step" else 0.0) for ph in self.phases)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_allocated_bytes(self) -> float:
        """``torch.cuda.max_memory_allocated()``: the tensor peak, less paged states (bitsandbytes allocates
        them with ``cudaMallocManaged``, outside torch's allocator)."""
        return self.total_bytes - self.pageable_bytes

    @computed_field  # type: ignore[prop-decorator]
    @property
    def peak_reserved_bytes(self) -> float:
        """``torch.cuda.max_memory_reserved()``: the allocated peak plus the caching allocator's reserve."""
        return device_memory(self.peak_allocated_bytes).reserved

    @computed_field  # type: ignore[prop-decorator]
    @property
    def device_used_bytes(self) -> float:
        """What ``nvidia-smi`` shows at the peak: reserved + resident paged states + the CUDA context."""
        return device_memory(self.peak_allocated_bytes, self.pageable_bytes).device_used

    @property
    def overheads(self) -> tuple[MemoryComponent, ...]:
        """The non-tensor memory at the peak, as components: allocator reserve and CUDA context."""
        return device_memory(self.peak_allocated_bytes, self.pageable_bytes).components()

    def components_at(self, phase: Phase) -> dict[str, float]:
        """Bytes of each component alive at ``phase`` (0 for the others)."""
        return {p.key: (p.bytes if phase in p.phases else 0.0) for p in self.parts}

    @property
    def parts_by_key(self) -> dict[str, MemoryComponent]:
        """The components by key, with their size while alive."""
        return {p.key: p for p in self.parts}


class DeviceMemory(BaseModel):
    """Allocated, reserved and nvidia-smi-visible bytes of one GPU at the peak.

    ``reserved`` = ``allocated`` x (1 + :data:`ALLOCATOR_RESERVE_FRACTION`) (``max_memory_reserved``);
    ``device_used`` = ``reserved`` + ``pageable`` (paged optimizer states, resident) + the CUDA context.
    """

    model_config = ConfigDict(frozen=True)

    allocated: float
    pageable: float = 0.0
    reserve_fraction: float = ALLOCATOR_RESERVE_FRACTION
    context: float = CUDA_CONTEXT_BYTES

    @property
    def reserve(self) -> float:
        """Bytes the caching allocator holds beyond the live tensors."""
        return self.allocated * self.reserve_fraction

    @property
    def reserved(self) -> float:
        """``max_memory_reserved()``."""
        return self.allocated + self.reserve

    @property
    def device_used(self) -> float:
        """NVML/nvidia-smi "used"."""
        return self.reserved + self.pageable + self.context

    def components(self) -> tuple[MemoryComponent, ...]:
        """The reserve and the context as components (their phase is the peak's, whichever it is)."""
        return (
            MemoryComponent(key="allocator_reserve", label="Allocator reserve", bytes=self.reserve, phases=PHASES,
                            formula=f"{self.reserve_fraction:.0%} of the allocated peak (cached, fragmented blocks)",
                            source="PyTorch CUDA caching allocator; +5-20% in published runs"),
            MemoryComponent(key="cuda_context", label="CUDA context", bytes=self.context, phases=PHASES,
                            formula=f"{self.context / 2**20:,.0f} MiB per process",
                            source="transformers docs 'Model training anatomy': 1343 MB used by NVML after init"),
        )


def device_memory(allocated_bytes: float, pageable_bytes: float = 0.0) -> DeviceMemory:
    """:class:`DeviceMemory` for a tensor peak of ``allocated_bytes`` (bytes) with the default reserve
    fraction and CUDA context."""
    return DeviceMemory(allocated=allocated_bytes, pageable=pageable_bytes)


def tensor_budget(device_bytes: float) -> float:
    """Largest allocated tensor peak whose device total (reserve and CUDA context added) fits in
    ``device_bytes``: ``(device_bytes - CUDA_CONTEXT_BYTES) / (1 + ALLOCATOR_RESERVE_FRACTION)``, at least 0."""
    return max(0.0, (device_bytes - CUDA_CONTEXT_BYTES) / (1 + ALLOCATOR_RESERVE_FRACTION))


# --------------------------------------------------------------------------------------------------
# Weights, gradients, optimizer


class _Tensors(BaseModel):
    """Parameter tensors split by how they are stored: (group, bytes per element)."""

    trainable: list[tuple[TensorGroup, float]]
    frozen: list[tuple[TensorGroup, float]]
    quantized: list[TensorGroup]
    quantized_bpp: float = 0.0
    quantized_label: str = ""


def _split_tensors(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> _Tensors:
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
        return _prequantized(arch, sc, spec, stored, vision)
    if sc.method is Method.FULL:
        return _Tensors(trainable=[(g, spec.weight_bytes) for g in arch.tensors], frozen=vision, quantized=[])
    adapters = [(g, _adapter_bytes(sc, spec)) for g in adapter_tensors(arch, sc.lora_r, sc.lora_targets)]
    if sc.method is Method.LORA:
        return _Tensors(trainable=adapters, frozen=[(g, spec.weight_bytes) for g in arch.tensors] + vision, quantized=[])
    # bitsandbytes replaces every nn.Linear but the LM head, the vision tower's included.
    other_bytes = 4.0 if sc.prepare_kbit_training else spec.weight_bytes
    everything = list(arch.tensors) + list(arch.vision_tensors)
    return _Tensors(
        trainable=adapters,
        frozen=[(g, other_bytes) for g in everything if not g.linear],
        quantized=[g for g in everything if g.linear],
        quantized_bpp=_mean_quantized_bpp([g for g in everything if g.linear], sc),
        quantized_label=("LLM.int8" if sc.quant_type is QuantType.INT8
                         else f"{sc.quant_type.value.upper()}{' + double quantization' if sc.double_quant else ''}"),
    )


def _adapter_bytes(sc: Scenario, spec: PrecisionSpec) -> float:
    """Bytes per LoRA adapter element: fp32 with PEFT (>= 0.12 ``autocast_adapter_dtype=True``), the weight
    dtype with LitGPT and torchtune, which create adapters like any other parameter."""
    return 4.0 if sc.framework is Framework.HF else float(spec.weight_bytes)


def _mean_quantized_bpp(groups: list[TensorGroup], sc: Scenario) -> float:
    """Bytes per quantized weight averaged over ``groups`` (LLM.int8's per-row scale depends on the shape)."""
    params = sum(g.parameters for g in groups)
    if not params:
        return quantized_bytes_per_param(sc.double_quant, sc.quant_type)
    return sum(g.parameters * quantized_bytes_per_param(sc.double_quant, sc.quant_type, g.shape[-1]) for g in groups) / params


def _prequantized(
    arch: Architecture, sc: Scenario, spec: PrecisionSpec, stored: StoredQuantization, vision: list
) -> _Tensors:
    """A checkpoint saved quantized (GPTQ, AWQ, FP8, bitsandbytes): its block linears keep the stored
    format and only adapters can train (transformers loads such weights frozen; PEFT trains LoRA on top).

    Raises:
        ScenarioError: full fine-tuning, which needs the unquantized weights.
    """
    if sc.method is Method.FULL:
        raise ScenarioError(
            f"this checkpoint is stored quantized ({stored.description}); full fine-tuning needs the unquantized "
            "weights: choose LoRA/QLoRA, or load the original model"
        )
    other_bytes = 4.0 if sc.method is Method.QLORA and sc.prepare_kbit_training else spec.weight_bytes
    return _Tensors(
        trainable=[(g, _adapter_bytes(sc, spec)) for g in adapter_tensors(arch, sc.lora_r, sc.lora_targets)],
        frozen=[(g, other_bytes) for g in arch.tensors if not g.linear] + vision,
        quantized=[g for g in arch.tensors if g.linear],
        quantized_bpp=stored.bytes_per_param,
        quantized_label=f"{stored.description}, as stored in the checkpoint",
    )


def _weights(t: _Tensors, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    trainable = sum(g.parameters * b for g, b in t.trainable)
    frozen = sum(g.parameters * b for g, b in t.frozen)
    q_params = sum(g.parameters for g in t.quantized)
    q_bpp = t.quantized_bpp
    if t.quantized:
        kept = ("fp32 after prepare_model_for_kbit_training" if sc.method is Method.QLORA and sc.prepare_kbit_training
                else f"{spec.weight_bytes} B")
        formula = (
            f"block linears {q_params / 1e9:.3f}B x {q_bpp:.4f} B ({t.quantized_label}) + embeddings/norms/LM head "
            f"({kept}) + adapters x {_adapter_bytes(sc, spec):g} B"
        )
    elif sc.method is Method.FULL:
        formula = f"all parameters x {spec.weight_bytes} B ({spec.weight_dtype} weights)"
    else:
        adapter = _adapter_bytes(sc, spec)
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


def _gradients(t: _Tensors, sc: Scenario) -> MemoryComponent:
    # Gradients take the dtype of their parameter. With accumulation they persist across micro-batches,
    # so they are alive at the start of the next backward too; otherwise Trainer's zero_grad(set_to_none)
    # frees them before the forward.
    phases: tuple[Phase, ...] = step_phases(sc) if sc.gradient_accumulation_steps > 1 else ("backward_end", "optimizer_step")
    return MemoryComponent(
        key="gradients",
        label="Gradients",
        bytes=sum(g.parameters * b for g, b in t.trainable),
        phases=phases,
        formula="trainable parameters x bytes of their dtype"
        + ("; alive during backward because gradient accumulation keeps them" if len(phases) > 2 else ""),
        source="torch autograd: .grad matches the parameter's dtype",
    )


def _optimizer_parts(t: _Tensors, sc: Scenario) -> list[MemoryComponent]:
    states = optimizer_state_bytes(t.trainable, sc.optimizer)
    temps = step_temporary_bytes(t.trainable, sc.optimizer)
    paged = " (paged: unified memory, may be evicted to CPU RAM)" if is_paged(sc.optimizer) else ""
    return [
        MemoryComponent(
            key="optimizer_states",
            label="Optimizer states",
            bytes=states,
            phases=step_phases(sc),
            formula=f"{sc.optimizer.value}: state tensors per trainable tensor{paged}",
            source="engine.optimizer (torch AdamW/SGD, bitsandbytes 8-bit/paged/Lion, transformers Adafactor)",
        ),
        MemoryComponent(
            key="optimizer_temporaries",
            label="Optimizer step temporaries",
            bytes=temps,
            phases=("optimizer_step",),
            formula="foreach AdamW: about one copy of the trainable parameters during step()" if temps else "none",
            source="fake-tensor traces of torch 2.13 AdamW (tracing-notes.md)",
        ),
    ]


def _low_precision_copies(arch: Architecture, t: _Tensors, sc: Scenario, spec: PrecisionSpec) -> tuple[MemoryComponent, float]:
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
        nbytes += (per_layer * arch.num_layers + _lm_head_params(arch)) * spec.compute_bytes
        notes.append("autocast cache: block linears and the LM head x 2 B")
        if sc.gradient_checkpointing:
            phases = ("forward",)  # checkpointed blocks saved none of them; the cache dies with the forward
            block = per_layer * spec.compute_bytes
            notes.append("freed after the forward (checkpointing); one block's copies again when it is recomputed")
    elif spec.autocast and sc.method is Method.LORA and not t.quantized:
        layers = 0 if sc.gradient_checkpointing else arch.num_layers
        nbytes += (per_layer * layers + _lm_head_params(arch)) * spec.compute_bytes
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
            nbytes += _lm_head_params(arch) * spec.compute_bytes
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


def _gradient_temporaries(arch: Architecture, t: _Tensors, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """End of backward with tied input/output embeddings (full fine-tuning): the embedding's backward makes a
    dense vocab x hidden gradient that is added to the one the LM head already accumulated, while the LM head's
    own gradient product is still alive: two vocab x hidden tensors in the compute dtype (traced with in-place
    accumulation, as on a GPU: 8 B x V x h in fp32, 4 B in mixed and pure bf16, for GPT-2, Llama-3.2-1B and
    Qwen2.5-0.5B)."""
    nbytes = 0.0
    if arch.tie_word_embeddings and sc.method is Method.FULL and t.trainable:
        nbytes = 2.0 * arch.vocab_size * arch.hidden_size * spec.compute_bytes
    return MemoryComponent(
        key="gradient_temporaries",
        label="Backward temporaries",
        bytes=nbytes,
        phases=("backward_end",),
        formula="tied embedding: 2 x vocab x hidden x compute bytes (its two gradients being summed)" if nbytes else "none",
        source="torch autograd gradient accumulation (embedding_dense_backward + LM head); fake-tensor traces",
    )


def _lm_head_params(arch: Architecture) -> int:
    """Elements of the output projection (the embedding matrix when tied)."""
    untied = sum(g.parameters for g in arch.tensors if g.role == "lm_head")
    return untied or arch.vocab_size * arch.hidden_size


# --------------------------------------------------------------------------------------------------
# Activations


def attention_kernel(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> str:
    """The attention kernel a GPU would run: ``flash``, ``memory_efficient``, ``math`` or ``eager``.

    PyTorch 2.x SDPA dispatch: flash needs fp16/bf16 and head_dim <= 256 (grouped-query allowed);
    memory-efficient takes fp32 but not ``enable_gqa``, which transformers passes for GQA models when no
    mask is needed; otherwise the math kernel, which materialises the s x s scores like eager attention.
    """
    if sc.attention is Attention.EAGER:
        return "eager"
    if sc.attention is Attention.FLASH_ATTENTION_2:
        return "flash"
    if spec.compute_bytes == 2 and arch.head_dim <= 256:
        return "flash"
    if arch.num_key_value_heads == arch.num_attention_heads:
        return "memory_efficient"
    return "math"


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


def _attention_core(arch: Architecture, sc: Scenario, c: int, kernel: str, frozen: bool = False) -> float:
    """Bytes per token saved by the attention (after the q/k/v projections), excluding s^2 terms. A frozen
    o_proj does not save its input (its weight gradient is not needed)."""
    q, kv = arch.q_out, arch.kv_out
    o_input = 0 if frozen else q
    if kernel in ("flash", "memory_efficient"):
        # q, k, v and the output kept by the kernel, the contiguous output copy o_proj saves, the
        # fp32 log-sum-exp per head.
        return c * (q + kv + kv + q + o_input) + 4 * arch.num_attention_heads
    # eager/math: k and v are repeated to all heads (repeat_kv), the probabilities are kept.
    return c * (q + q + q + q + o_input)


def _attention_scores(arch: Architecture, sc: Scenario, c: int, kernel: str, autocast: bool = False) -> float:
    """Bytes per token x sequence length for the s x s attention probabilities (0 for fused kernels).

    Eager: fp32 softmax output (4 B) and its cast to the compute dtype (2 B), per head; plus the dropout
    mask and output when attention dropout > 0. Math kernel: probabilities in the compute dtype.
    """
    if kernel in ("flash", "memory_efficient"):
        return 0.0
    per_head = (4 + (c if c != 4 else 0)) if kernel == "eager" else c
    if kernel == "eager" and arch.model_type == "gpt2" and not autocast:
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


def _lora_extra(arch: Architecture, sc: Scenario, c: int, autocast: bool = False) -> float:
    """Bytes per token each block's LoRA modules add: the input lora_A saves, dropout's 1-byte mask, and
    lora_B's r-wide input.

    PEFT keeps adapters in fp32 and casts the input to fp32: lora_A saves that fp32 tensor (4 B) or, under
    autocast, its 16-bit cast (c); lora_B's input is fp32 (16-bit under autocast). LitGPT and torchtune keep
    adapters in the compute dtype: c bytes each.
    """
    if sc.method is Method.FULL:
        return 0.0
    if sc.framework is Framework.HF:
        width = c if autocast else 4
    else:
        width = c
    mask = 1 if sc.lora_dropout > 0 else 0
    total = 0.0
    for lin in resolve_targets(arch, sc.lora_targets):
        # Averaged over blocks: a module present in some blocks only (cross-attention) counts for those.
        share = _token_share(arch, lin) * lin.blocks(arch.num_layers) / arch.num_layers
        total += share * ((width + mask) * lin.in_features + width * sc.lora_r)
    return total


def _token_share(arch: Architecture, lin: LinearLayer) -> float:
    """Expert modules see top-k/E of the tokens each (count x share = top-k)."""
    return lin.count * arch.experts_per_token / arch.num_experts if lin.count > 1 else 1.0


def _activations(arch: Architecture, sc: Scenario, spec: PrecisionSpec, block_copies: float = 0.0) -> tuple[MemoryComponent, MemoryComponent | None, str]:
    """Saved activations (alive from the forward to the start of backward) and, with gradient checkpointing,
    the recomputed block (alive while its backward runs, after the loss gradients are freed), and the kernel."""
    c = spec.compute_bytes
    # The residual stream has the dtype of the embeddings: fp32 for fp32/AMP and for QLoRA after
    # prepare_model_for_kbit_training, 16-bit in pure bf16/fp16.
    resid = 4 if (spec.weight_bytes == 4 or (sc.method is Method.QLORA and sc.prepare_kbit_training)) else spec.weight_bytes
    casts = spec.autocast or sc.method is Method.QLORA
    kernel = attention_kernel(arch, sc, spec)
    h = arch.hidden_size
    # LoRA/QLoRA freeze every base weight. A frozen torch linear saves no input, since only its weight gradient
    # would need it (autograd saves an operand only when the gradient that uses it is required); the adapters
    # save their own copies (_lora_extra). bitsandbytes' 4-bit matmul (QLoRA) saves its input whenever any
    # input needs a gradient (MatMul4Bit: ctx.tensors = (A, B)), so QLoRA keeps them. Frozen norm weights
    # save nothing in either case.
    frozen = sc.method is Method.LORA
    norm = _norm_saved(arch, resid, sc.method is not Method.FULL) * h
    attn_in = 0.0 if frozen else _linear_inputs(1 if arch.mlp == "plain" or arch.model_type == "phi3" else 3, resid, c, casts) * h
    mlp_in = 0.0 if frozen else _linear_inputs(
        1 if arch.mlp == "plain" or arch.model_type == "phi3" or arch.num_experts else 2, resid, c, casts) * h
    extra_norms = (arch.norms_per_layer - 2) * norm  # Gemma 2's post-attention/post-MLP norms
    qk_norm = _norm_saved(arch, c, sc.method is not Method.FULL) * (arch.q_out + arch.kv_out) if arch.qk_norm else 0.0  # Qwen3 q/k norms
    dropout_masks = 2 * h if arch.hidden_dropout > 0 else 0.0
    per_token = (
        2 * norm + attn_in + mlp_in + extra_norms + qk_norm + dropout_masks
        + _attention_core(arch, sc, c, kernel, frozen) + _mlp(arch, c, sc.framework, spec.autocast, frozen)
        + _lora_extra(arch, sc, c, spec.autocast)
    )
    per_token += _attention_scores(arch, sc, c, kernel, spec.autocast) * sc.seq_len
    tokens = sc.tokens_per_micro_batch
    layer = per_token * tokens
    # final norm + LM head input (the LM head is a torch linear, frozen under LoRA and QLoRA)
    head = (norm + (0.0 if sc.method is not Method.FULL else _linear_inputs(1, resid, c, casts) * h)) * tokens
    recompute = None
    if sc.gradient_checkpointing:
        # Checkpointed blocks keep only their input hidden state; backward recomputes one block at a time,
        # once the loss gradients are gone.
        total = arch.num_layers * resid * h * tokens + head
        formula = (
            f"{arch.num_layers} layers x {resid} B x seq x batch x hidden (checkpointed inputs) + final norm/LM head input"
        )
        recompute = MemoryComponent(
            key="recomputed_layer",
            label="Recomputed block",
            bytes=layer + block_copies,
            phases=("recompute",),
            formula=f"one block's saved tensors again ({per_token / h:.1f} B x seq x batch x hidden)"
            + (" + its 16-bit weight copies" if block_copies else ""),
            source="torch.utils.checkpoint (recompute in backward); saved tensors as without checkpointing",
        )
    else:
        total = arch.num_layers * layer + head
        formula = f"{arch.num_layers} layers x {per_token / h:.1f} B x seq x batch x hidden + final norm/LM head input"
    if kernel in ("eager", "math"):
        formula += f"; includes s x s attention probabilities ({kernel} kernel)"
    comp = MemoryComponent(
        key="activations",
        label="Activations",
        bytes=total,
        phases=("forward", "backward", "recompute") if sc.gradient_checkpointing else ("forward", "backward"),
        formula=formula,
        source="saved tensors of transformers' modules (autograd), cf. Korthikanti et al. 2022 sec. 4.1",
    )
    return comp, recompute, kernel


def _logits(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """Loss over the vocabulary at the start of backward.

    transformers' ``ForCausalLMLoss`` upcasts logits to fp32; cross-entropy keeps the fp32 log-softmax
    (4 B) and backward creates the nll and log-softmax gradients (4 B each) while it is alive: 12 bytes
    x batch x seq x vocab (traced, tracing-notes.md). Gemma 2 also keeps its tanh soft-capped logits.
    With a fused linear cross-entropy see :func:`_fused_logits`.
    """
    if sc.fused_cross_entropy:
        return _fused_logits(arch, sc, spec)
    if sc.framework is Framework.LITGPT:
        return _litgpt_logits(arch, sc, spec)
    per = 12.0 + (spec.compute_bytes if arch.final_logit_softcapping else 0.0)
    return _per_logit("logits_loss", "Logits and loss", per, arch, sc, ("backward",),
                      f"{per:g} B x batch x seq x vocab ({arch.vocab_size:,}): fp32 log-softmax + its gradients",
                      "transformers ForCausalLMLoss; fake-tensor traces (tracing-notes.md)")


def _per_logit(key: str, label: str, per: float, arch: Architecture, sc: Scenario, phases: tuple[Phase, ...],
               formula: str, source: str) -> MemoryComponent:
    """A component of ``per`` bytes for each logit (batch x seq x vocab)."""
    return MemoryComponent(key=key, label=label, bytes=per * sc.tokens_per_micro_batch * arch.vocab_size,
                           phases=phases, formula=formula, source=source)


def _logits_forward(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent | None:
    """The loss's forward with transformers' ``ForCausalLMLoss``: the LM head's logits (compute dtype), their
    fp32 upcast and the fp32 log-softmax are alive together, (compute bytes + 8) x batch x seq x vocab; the
    first two are freed when the loss returns. None where the logits are chunked (fused or LitGPT)."""
    if sc.fused_cross_entropy or sc.framework is Framework.LITGPT:
        return None
    per = spec.compute_bytes + 8.0 + (spec.compute_bytes if arch.final_logit_softcapping else 0.0)
    return _per_logit("logits_forward", "Logits and loss (forward)", per, arch, sc, ("forward",),
                      f"{per:g} B x batch x seq x vocab: logits ({spec.compute_bytes} B), their fp32 copy and the log-softmax",
                      "transformers ForCausalLMLoss (logits.float(), cross_entropy); fake-tensor traces")


def _litgpt_logits(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """LitGPT (``finetune``, ``lm_head_chunk_size=128``): the logits stay in the compute dtype, the training
    loop keeps the list of logit chunks alive through backward and ``F.cross_entropy`` saves each chunk's
    log-softmax: 2 x compute bytes per token and vocabulary entry; backward then works one chunk at a time."""
    per = 2.0 * spec.compute_bytes
    return _per_logit("logits_loss", "Logits and loss", per, arch, sc, ("forward", "backward"),
                      f"{per:g} B x batch x seq x vocab ({arch.vocab_size:,}): 16-bit logits + log-softmax, in chunks of 128 tokens",
                      "LitGPT chunked_cross_entropy (litgpt/utils.py) and GPT.forward(lm_head_chunk_size=128)")


def liger_chunk_tokens(tokens: int, vocab: int, hidden: int) -> int:
    """Tokens per chunk of Liger Kernel's fused linear cross-entropy (liger-kernel 0.5
    ``fused_linear_cross_entropy_forward``): ``next_power_of_2(ceil(tokens / ceil(vocab / hidden)))``,
    so that a chunk's logits are about as large as the hidden states."""
    inc = -(-vocab // hidden)
    chunk = -(-tokens // inc)
    return 1 << max(chunk - 1, 0).bit_length()


def _fused_logits(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent:
    """Fused linear cross-entropy: the LM head and the loss run chunk by chunk inside the forward, which
    computes the gradients right away, so the full logits never exist.

    Alive at the start of backward: the gradient with respect to the hidden states (tokens x hidden in
    the compute dtype), the LM head's weight gradient when it trains (vocab x hidden, in the weight's
    dtype; created in the forward), and one chunk's logits with their fp32 upcast.
    """
    tokens, h, v = sc.tokens_per_micro_batch, arch.hidden_size, arch.vocab_size
    chunk = liger_chunk_tokens(tokens, v, h)
    c = spec.compute_bytes
    head_grad = _lm_head_params(arch) * spec.weight_bytes if sc.method is Method.FULL else 0.0
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


# --------------------------------------------------------------------------------------------------


NOT_MODELLED = (
    "the caching allocator's exact fragmentation: reserved memory is modelled as a fixed fraction of the "
    "allocated peak (ALLOCATOR_RESERVE_FRACTION), real runs vary between +5 and +20%",
    "transients in the middle of backward (LM-head weight gradient created while loss gradients are alive, "
    "flash-attention backward workspace)",
    "multi-GPU: this estimate is one GPU; engine.parallel splits it per GPU for DDP, ZeRO-1/2/3, FSDP and CPU "
    "offload, but not tensor/pipeline/context parallelism, NVMe offload or NCCL's own buffers",
    "transformers 5 fused MoE expert tensors (experts are counted as separate linear modules, as in 4.x)",
    "Gemma 2 attention soft-capping under SDPA (transformers may force eager attention)",
    "optimizer 'step' scalars and bitsandbytes quantization maps (a few KB per tensor)",
)


def estimate_memory(arch: Architecture, scenario: Scenario) -> MemoryEstimate:
    """Estimate the steady-state peak GPU memory of ``scenario`` for ``arch``.

    Args:
        arch: from :func:`engine.architecture.architecture_from_config`.
        scenario: a validated :class:`~engine.scenario.Scenario`.
    Returns:
        A :class:`MemoryEstimate` whose ``components`` (bytes) sum to ``total_bytes`` at ``peak_phase``.
    Raises:
        ScenarioError: LoRA targets that match no module of ``arch``.
    """
    spec = precision_spec(scenario.precision)
    tensors = _split_tensors(arch, scenario, spec)
    copies, block_copies = _low_precision_copies(arch, tensors, scenario, spec)
    activations, recompute, kernel = _activations(arch, scenario, spec, block_copies)
    optional = (recompute, _logits_forward(arch, scenario, spec))
    parts = (
        _weights(tensors, scenario, spec),
        copies,
        _gradients(tensors, scenario),
        _gradient_temporaries(arch, tensors, scenario, spec),
        *_optimizer_parts(tensors, scenario),
        activations,
        _logits(arch, scenario, spec),
        *(p for p in optional if p is not None),
    )
    trainable = sum(g.parameters for g, _ in tensors.trainable)
    assumptions = [
        "Hugging Face Trainer defaults: zero_grad(set_to_none=True), loss in transformers' ForCausalLMLoss",
        f"attention kernel: {kernel}",
    ]
    if scenario.framework is not Framework.HF:
        assumptions[0] = f"{scenario.framework.value} single-device fine-tuning (see engine.scenario.Framework)"
    if scenario.method is not Method.FULL:
        assumptions.append("LoRA adapters in fp32 (PEFT autocast_adapter_dtype=True)" if scenario.framework is Framework.HF
                           else "LoRA adapters in the weight dtype")
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


def scenario_warnings(arch: Architecture, sc: Scenario) -> tuple[str, ...]:
    """Settings that compute but that a real run would reject or regret, in plain words."""
    out = []
    if arch.max_position_embeddings and sc.seq_len > arch.max_position_embeddings:
        out.append(
            f"Sequence length {sc.seq_len:,} exceeds this model's max_position_embeddings "
            f"({arch.max_position_embeddings:,}); training beyond it needs RoPE scaling or gives poor results."
        )
    if sc.method is not Method.FULL:
        narrow = [lin for lin in resolve_targets(arch, sc.lora_targets) if sc.lora_r > min(lin.in_features, lin.out_features)]
        if narrow:
            lin = narrow[0]
            out.append(
                f"LoRA rank {sc.lora_r} exceeds min(in, out) = {min(lin.in_features, lin.out_features):,} of "
                f"{lin.module}: the adapter is larger than a full-rank update of that module."
            )
    if sc.method is Method.FULL and sc.precision.value == "fp16":
        out.append(
            "Full fine-tuning with fp16 weights and Trainer(fp16=True) fails ('Attempting to unscale FP16 "
            "gradients'); use mixed fp16 (fp32 weights) or bf16."
        )
    return tuple(out)


def _bytes_per_parameter(parts: tuple[MemoryComponent, ...], t: _Tensors, total_params: int) -> str:
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
