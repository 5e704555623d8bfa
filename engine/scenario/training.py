"""A training scenario: what the user would put in ``TrainingArguments``, ``LoraConfig`` and
``BitsAndBytesConfig``, validated.

Field names follow the Hugging Face terms (micro batch size = ``per_device_train_batch_size``,
gradient accumulation steps, sequence length, LoRA rank/alpha/dropout/target modules, NF4, double
quantization, ``attn_implementation``).
"""

from __future__ import annotations

from enum import Enum
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.errors import ScenarioError, explain_validation
from engine.secrets import looks_like_token
from engine.scenario.methods import Method
from engine.scenario.loss import LossImplementation, TransformersVersion, runs_as
from engine.scenario.optimizer import Optimizer
from engine.scenario.precision import PrecisionMode

MAX_SEQ_LEN = 1 << 21
"""Longest sequence length accepted (2,097,152 tokens): beyond any published context window."""
MAX_MICRO_BATCH = 65_536


class Attention(str, Enum):
    """``attn_implementation`` passed to ``from_pretrained``."""

    EAGER = "eager"
    SDPA = "sdpa"
    FLASH_ATTENTION_2 = "flash_attention_2"


class QuantType(str, Enum):
    """bitsandbytes quantization of the frozen base: 4-bit NF4/FP4 (``load_in_4bit``, ``bnb_4bit_quant_type``;
    both pack two values per byte) or LLM.int8 (``load_in_8bit``; Dettmers et al. 2022, "LLM.int8()")."""

    NF4 = "nf4"
    FP4 = "fp4"
    INT8 = "int8"

    @property
    def bits(self) -> int:
        """Bits per stored weight."""
        return 8 if self is QuantType.INT8 else 4


class Framework(str, Enum):
    """Training stack whose tensor dtypes and fused ops the estimate follows.

    - ``hf``: transformers + PEFT + bitsandbytes + Trainer (the default): PEFT keeps LoRA adapters in fp32,
      ``ForCausalLMLoss`` upcasts the logits to fp32, GPT-2-style MLPs use the unfused ``gelu_new``.
    - ``litgpt``: LitGPT's ``finetune`` with ``precision=bf16-true``: every parameter, adapters included, in
      the weight dtype; the LM head and the loss in chunks of 128 tokens on 16-bit logits
      (``chunked_cross_entropy``); GELU is torch's fused ``F.gelu``.
    - ``torchtune``: torchtune's single-device recipes: adapters in the weight dtype; the loss its recipe configs run
      since 0.3.0, ``CEWithChunkedOutputLoss`` (``torchtune_chunked``: 8 chunks of 16-bit logits, each upcast on its
      own; :data:`FRAMEWORKS`; compiled, ``torchtune_chunked_compiled``: :attr:`Scenario.loss`); otherwise
      like ``hf``.
    """

    HF = "hf"
    LITGPT = "litgpt"
    TORCHTUNE = "torchtune"

    @property
    def record(self) -> "FrameworkRecord":
        """This framework's :class:`FrameworkRecord` (:data:`FRAMEWORKS`)."""
        return FRAMEWORKS[self]


class FrameworkRecord(NamedTuple):
    """What a one-GPU training framework is to the estimate.

    - ``label``: its name on the pages.
    - ``loss``: the loss its recipes run by default, which the estimate counts when none is chosen (``Scenario.loss``).
    """

    label: str
    loss: LossImplementation


FRAMEWORKS: dict[Framework, FrameworkRecord] = {
    Framework.HF: FrameworkRecord("Hugging Face (Trainer + PEFT)", LossImplementation.HF),
    Framework.LITGPT: FrameworkRecord("LitGPT", LossImplementation.LITGPT_CHUNKED),
    # torchtune's recipe configs name CEWithChunkedOutputLoss as their loss component since pytorch/torchtune@4fba6cd4
    # (2024-08-28, released in 0.3.0; e.g. recipes/configs/llama3_1/8B_lora_single_device.yaml at a6290a5b, 0.6.1).
    # A run with another loss says so (loss_implementation: torchtune_ce, or torchtune_ce_v02 for 0.1-0.2).
    Framework.TORCHTUNE: FrameworkRecord("torchtune", LossImplementation.TORCHTUNE_CHUNKED),
}
"""Every one-GPU training framework's record."""


class QuantStorage(str, Enum):
    """``bnb_4bit_quant_storage``: the dtype the packed 4-bit weights are stored in (two values per byte either way).
    transformers' ``BitsAndBytesConfig`` default is ``uint8``; FSDP and DeepSpeed ZeRO-3 shard only floating-point
    parameters, so the PEFT / Accelerate FSDP-QLoRA and ZeRO-3-QLoRA guides set it to the compute dtype (``bf16``)."""

    UINT8 = "uint8"
    BF16 = "bf16"
    FP16 = "fp16"
    FP32 = "fp32"

    @property
    def is_float(self) -> bool:
        """Whether FSDP / ZeRO-3 can shard weights stored in this dtype."""
        return self is not QuantStorage.UINT8


FRAMEWORK_LABELS = {f: r.label for f, r in FRAMEWORKS.items()}
"""Each framework's label (its record in :data:`FRAMEWORKS`)."""

METHOD_LABELS = {m: m.record.label for m in Method}
"""Each method's label (its record in :data:`engine.scenario.methods.RECORDS`)."""

DEFAULT_PRECISION: dict[Method, PrecisionMode] = {m: m.record.default_precision for m in Method}
"""The precision a scenario gets when none is chosen (each method's record): what the Hugging Face docs and PEFT
examples do per method.

- Full fine-tuning: the model loaded in fp32 and ``TrainingArguments(bf16=True)``: mixed bf16 with fp32 master
  weights (transformers "Methods and tools for efficient training on a single GPU", mixed precision).
- LoRA: the base loaded with ``torch_dtype=torch.bfloat16`` and ``bf16=True`` (PEFT quicktour and LoRA examples,
  TRL ``SFTTrainer`` + ``peft_config`` examples): pure bf16 frozen weights, adapters fp32 (PEFT
  ``autocast_adapter_dtype=True``).
- QLoRA: ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.bfloat16)`` with
  ``torch_dtype=torch.bfloat16`` (transformers bitsandbytes docs, PEFT QLoRA examples): 4-bit base, bf16 compute.

Every other PEFT method (DoRA, IA3, VeRA, LoHa, LoKr, AdaLoRA, prompt / prefix / P-tuning) is set up like LoRA in
the PEFT examples: a bf16 base. Other precisions stay one choice away (and the
technique chart, :mod:`engine.memory.sweep`, shows them side by side).
"""


def default_precision(method: "Method | str") -> PrecisionMode:
    """:data:`DEFAULT_PRECISION` of ``method`` (mixed bf16 for a method not listed). Raises ``ValueError`` for a name
    that is no method."""
    return DEFAULT_PRECISION.get(Method(method), PrecisionMode.AMP_BF16)


class Scenario(BaseModel):
    """One fine-tuning run on one GPU.

    Sizes are counts (tokens, sequences); ``lora_targets=None`` means the model's attention projections.
    ``precision`` not given (or None): the method's :data:`DEFAULT_PRECISION` (LoRA/QLoRA pure bf16, full mixed bf16).
    Build it with :meth:`build` to get a :class:`~engine.errors.ScenarioError` instead of pydantic's error.
    ``fused_cross_entropy``: the LM head and the loss computed in chunks without materialising the logits
    (Liger Kernel's fused linear cross-entropy, ``TrainingArguments(use_liger_kernel=True)``).
    ``framework``: see :class:`Framework` (the Hugging Face stack by default).
    ``loss_implementation``: the cross-entropy code (:class:`~engine.scenario.loss.LossImplementation`); None = the
    framework's default (transformers' for hf, LitGPT's chunked loss for litgpt, torchtune's CEWithChunkedOutputLoss
    for torchtune: :data:`FRAMEWORKS`); ``liger`` is the same
    choice as ``fused_cross_entropy=True`` (and sets it). ``transformers_version``: the release range whose
    loss path the hf loss follows (:class:`~engine.scenario.loss.TransformersVersion`; a release number such as
    ``"4.41.2"`` is accepted and read as its range).
    ``quant_storage``: QLoRA's ``bnb_4bit_quant_storage`` (:class:`QuantStorage`; matters only over many GPUs).
    PEFT methods and tricks (:mod:`engine.scenario.peft`): ``num_virtual_tokens`` (prompt/prefix/P-tuning),
    ``modules_to_save`` (trainable copies, e.g. ``embed_tokens``, ``lm_head``), ``use_rslora`` (scaling alpha/sqrt(r):
    no memory effect), ``loraplus_lr_ratio`` (LoRA+: B's learning rate ratio, no memory effect), ``galore_rank``
    (``optim=galore_adamw``), ``gradient_checkpointing_offload`` (Unsloth-style: checkpointed layer inputs in CPU
    RAM), ``liger_kernels`` (Liger's RMSNorm, SwiGLU and RoPE kernels; the fused loss is ``fused_cross_entropy``).
    ``trainable_layers``: freeze-tuning, full fine-tuning of only the last N decoder blocks (None: every parameter
    trains; see :mod:`engine.scenario.freeze`); ``frozen_input_grads``: with it, the embeddings' output requires
    grad (transformers' ``enable_input_require_grads``), so backward also runs through the frozen blocks.
    ``torch_compile``: the run is ``torch.compile``d (``TrainingArguments(torch_compile=True)``, axolotl's
    ``torch_compile``, torchtune's ``compile: True``): the one switch both the memory estimate and the step time read.
    Memory: :attr:`loss` is the loss's compiled form where its framework compiles it and it was measured (the
    ``compiled_form`` of its :data:`~engine.scenario.loss.LOSSES` record: torchtune's chunked loss ->
    ``torchtune_chunked_compiled``); the compiled model's other tensors are counted as eager. Time: fused elementwise kernels and, off the Hugging Face
    stack's eager hooks, a compiled backward's launches (:func:`engine.time.memory_bound.runs_fused`).
    """

    # allow_inf_nan=False: NaN or Infinity in a file or a link is an error, never a number (every float field).
    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False, allow_inf_nan=False)

    method: Method = Method.FULL
    precision: PrecisionMode = PrecisionMode.AMP_BF16
    optimizer: Optimizer = Optimizer.ADAMW_FUSED
    micro_batch_size: int = Field(1, ge=1, le=MAX_MICRO_BATCH)
    seq_len: int = Field(2048, ge=1, le=MAX_SEQ_LEN)
    gradient_accumulation_steps: int = Field(1, ge=1, le=1_000_000)
    gradient_checkpointing: bool = False
    attention: Attention = Attention.SDPA
    lora_r: int = Field(16, ge=1, le=65_536)
    lora_alpha: float = Field(32.0, gt=0, le=1e6)
    lora_dropout: float = Field(0.05, ge=0.0, lt=1.0)
    lora_targets: tuple[str, ...] | None = None
    quant_type: QuantType = QuantType.NF4
    double_quant: bool = True
    quant_storage: QuantStorage = QuantStorage.UINT8
    prepare_kbit_training: bool = True
    fused_cross_entropy: bool = False
    framework: Framework = Framework.HF
    num_virtual_tokens: int = Field(20, ge=1, le=65_536)
    modules_to_save: tuple[str, ...] | None = None
    use_rslora: bool = False
    loraplus_lr_ratio: float | None = Field(None, gt=0)
    galore_rank: int = Field(128, ge=1, le=65_536)
    gradient_checkpointing_offload: bool = False
    liger_kernels: bool = False
    loss_implementation: LossImplementation | None = None
    transformers_version: TransformersVersion = TransformersVersion.V4_50_PLUS
    trainable_layers: int | None = Field(None, ge=1, le=100_000)
    frozen_input_grads: bool = False
    torch_compile: bool = False

    @model_validator(mode="before")
    @classmethod
    def _one_loss(cls, data: Any) -> Any:
        # loss_implementation="liger" is fused_cross_entropy=True (the switch every importer and export reads).
        if not isinstance(data, dict):
            return data
        loss = data.get("loss_implementation")
        if loss is not None and str(getattr(loss, "value", loss)) == LossImplementation.LIGER.value:
            return {**data, "fused_cross_entropy": True}
        return data

    @field_validator("loss_implementation", mode="before")
    @classmethod
    def _empty_loss(cls, value: Any) -> Any:
        return None if value == "" else value

    @field_validator("transformers_version", mode="before")
    @classmethod
    def _version_range(cls, value: Any) -> Any:
        # "4.41.2" as users know their install (pip show transformers) -> its range; other text: the enum's own error.
        try:
            return TransformersVersion.of(value)
        except ValueError:
            return value

    @model_validator(mode="before")
    @classmethod
    def _method_default_precision(cls, data: Any) -> Any:
        # No precision chosen (absent or None): the method's usual one (DEFAULT_PRECISION), not one for all methods.
        if isinstance(data, dict) and data.get("precision") is None:
            try:
                return {**data, "precision": default_precision(data.get("method", Method.FULL))}
            except ValueError:
                return data  # an invalid method: its own field error says so
        return data

    @field_validator("lora_targets", "modules_to_save", mode="before")
    @classmethod
    def _split_targets(cls, value: Any) -> Any:
        # Accept "q_proj,v_proj" as well as a list, as users type it on the command line.
        if isinstance(value, str):
            value = [t.strip() for t in value.split(",") if t.strip()]
        if value is None:
            return None
        if isinstance(value, (list, tuple)) and any(looks_like_token(t) for t in value):
            # a token pasted as a module name would be written into every plan CSV and export of the scenario
            raise ValueError("a module name looks like a Hugging Face token; paste tokens into the token box only")
        try:  # a name given twice is one module, as PEFT reads it (a set of targets; one copy per module to save)
            return tuple(dict.fromkeys(value))
        except TypeError:  # an unhashable item: the field's own type error names it
            return tuple(value)

    @model_validator(mode="after")
    def _consistent(self) -> "Scenario":
        if self.attention is Attention.FLASH_ATTENTION_2 and self.precision is PrecisionMode.FP32:
            raise ValueError("flash_attention_2 runs only in fp16/bf16; choose a 16-bit or mixed precision, or sdpa/eager")
        if self.fused_cross_entropy and self.loss_implementation not in (None, LossImplementation.LIGER):
            raise ValueError(f"fused_cross_entropy is Liger's fused loss; it cannot run with loss_implementation "
                             f"{self.loss_implementation.value}: choose one loss")
        _check_peft(self)
        return self

    @property
    def loss(self) -> LossImplementation:
        """The loss that runs: Liger's with ``fused_cross_entropy``, else ``loss_implementation``, else the
        framework's default (its record's ``loss``: LitGPT's chunked loss for litgpt, torchtune's
        CEWithChunkedOutputLoss for torchtune, transformers' for hf); with ``torch_compile``, its compiled form where
        its framework compiles it (the ``compiled_form`` of its :data:`~engine.scenario.loss.LOSSES` record:
        torchtune's chunked loss, the framework's default or chosen, becomes ``torchtune_chunked_compiled``). A ``loss_implementation`` that already
        names a compiled form stays that form either way."""
        if self.fused_cross_entropy:
            chosen = LossImplementation.LIGER
        elif self.loss_implementation is not None:
            chosen = self.loss_implementation
        else:
            chosen = self.framework.record.loss
        return runs_as(chosen, self.torch_compile)

    @property
    def tokens_per_micro_batch(self) -> int:
        """Tokens in one forward pass: micro batch size x sequence length."""
        return self.micro_batch_size * self.seq_len

    @classmethod
    def build(cls, **fields: Any) -> "Scenario":
        """Validate ``fields`` into a Scenario.

        Raises:
            ScenarioError: one line per invalid field, e.g. ``micro_batch_size: must be >= 1 (got 0)``.
        """
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise ScenarioError(explain_validation(exc, all_errors=True)) from None


_LORA_PAIRS = tuple(m for m in Method if m.record.lora_pairs)  # the method records' lora_pairs


def _check_peft(sc: Scenario) -> None:
    """Combinations PEFT, transformers or the optimizer would reject (ValueError, shown by :meth:`Scenario.build`)."""
    name, requires = sc.optimizer.value, sc.optimizer.record.requires
    if requires == "full" and sc.method is not Method.FULL:
        raise ValueError(f"{name} projects the gradients of full weights: use it with method full")
    if sc.optimizer.record.layerwise and sc.gradient_accumulation_steps > 1:
        # transformers _get_galore_optimizer and LLaMA-Factory _create_galore_optimizer both raise for it
        raise ValueError(f"{name} steps each parameter inside backward: it does not support gradient accumulation")
    if requires == "lora_pairs" and sc.method not in _LORA_PAIRS:
        raise ValueError(f"{name} freezes LoRA's A matrices: use it with method lora, qlora or dora")
    if (sc.use_rslora or sc.loraplus_lr_ratio is not None) and sc.method not in _LORA_PAIRS:
        raise ValueError("use_rslora / loraplus_lr_ratio apply to LoRA's A and B: use method lora, qlora or dora")
    if sc.trainable_layers is not None and sc.method is not Method.FULL:
        raise ValueError("trainable_layers is freeze-tuning (full fine-tuning of the last N blocks, LLaMA-Factory "
                         "finetuning_type: freeze): use it with method full")
    if sc.frozen_input_grads and sc.trainable_layers is None:
        raise ValueError("frozen_input_grads is a freeze-tuning setting: set trainable_layers too")
    if sc.trainable_layers is not None and requires == "full":
        raise ValueError(f"{name} with freeze-tuning is not modelled: choose another optimizer or train every block")
    if sc.modules_to_save and sc.method is Method.FULL:
        raise ValueError("modules_to_save is for PEFT methods; full fine-tuning already trains every module")
    if sc.method is Method.PREFIX_TUNING and sc.gradient_checkpointing:
        raise ValueError("PEFT 0.21 rejects prefix tuning with gradient checkpointing ('PREFIX_TUNING does not work with "
                         "gradient checkpointing'); turn one of them off")
    if sc.gradient_checkpointing_offload and not sc.gradient_checkpointing:
        raise ValueError("gradient_checkpointing_offload offloads the checkpointed layer inputs: turn on gradient_checkpointing")
