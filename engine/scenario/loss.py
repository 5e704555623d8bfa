"""Which code computes the loss over the vocabulary: the loss implementation and, for transformers' loss, the
version range of transformers whose code path holds different tensors.

The bytes each one holds are :mod:`engine.memory.loss_paths`' (and :mod:`engine.memory.logits`'); this module names the
choices (Scenario fields) and keeps one :class:`LossRecord` per loss in :data:`LOSSES`, from which its label, its
compiled form and the time model's on-chip losses derive.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum


class LossImplementation(str, Enum):
    """The cross-entropy over the vocabulary a training stack runs (``Scenario.loss_implementation``).

    - ``hf``: transformers' loss (``ForCausalLMLoss``, or the model's own forward before 4.46): fp32 upcast of the
      full logits, ``F.cross_entropy``; what it holds depends on :class:`TransformersVersion`.
    - ``liger``: Liger Kernel's fused linear cross-entropy (``use_liger_kernel=True``; ``Scenario.fused_cross_entropy``).
    - ``litgpt_chunked``: LitGPT's ``chunked_cross_entropy`` on 16-bit logits in chunks of 128 tokens.
    - ``torchtune_chunked``: torchtune's ``CEWithChunkedOutputLoss`` (8 output chunks, each upcast on its own),
      not compiled: the loss of its recipe configs since torchtune 0.3.0 (pytorch/torchtune@4fba6cd4) and the
      torchtune framework's default when the run is not compiled.
    - ``torchtune_chunked_compiled``: the same loss with ``compile: True``: the recipes ``torch.compile`` each
      chunk's upcast + cross-entropy (``compute_cross_entropy``); the torchtune framework's default under
      torch.compile (its :data:`LOSSES` record's ``compiled_form``).
    - ``torchtune_ce``: torchtune 0.3+ with ``torch.nn.CrossEntropyLoss`` (the loss component set to it): the model
      upcasts its whole output (``self.output(h).float()``) and the recipe deletes the logits before backward.
    - ``torchtune_ce_v02``: torchtune 0.1-0.2 (``torch.nn.CrossEntropyLoss``, its configs' loss then): fp32 logits
      from the model, a shifted copy ``logits[..., :-1, :].contiguous()`` that the recipe keeps through backward.
    - ``megatron``: Megatron-LM's ``_VocabParallelCrossEntropy`` (one fp32 copy, softmax and gradient in place).
    - ``torchtitan``: torchtitan's ``cross_entropy_loss`` (``F.cross_entropy(pred.float())``), not compiled.
    - ``inplace_fused``: a fused cross-entropy kernel that saves the 16-bit logits and writes the gradient into
      them (flash-attn's Triton ``CrossEntropyLoss(inplace_backward=True)``; llm.c's fused classifier does the same).
    """

    HF = "hf"
    LIGER = "liger"
    LITGPT_CHUNKED = "litgpt_chunked"
    TORCHTUNE_CHUNKED = "torchtune_chunked"
    TORCHTUNE_CHUNKED_COMPILED = "torchtune_chunked_compiled"
    TORCHTUNE_CE = "torchtune_ce"
    TORCHTUNE_CE_V02 = "torchtune_ce_v02"
    MEGATRON = "megatron"
    TORCHTITAN = "torchtitan"
    INPLACE_FUSED = "inplace_fused"


@dataclass(frozen=True)
class LossRecord:
    """Every fact of one loss implementation that the stages above the scenario read (one record per loss).

    ``label``: its name in the UI and in the estimate's notes. ``compiled_form``: the loss a run's ``torch.compile``
    turns it into, where its framework compiles it and the compiled code holds other tensors
    (:attr:`engine.scenario.training.Scenario.loss`); None: it runs as it is. ``on_chip``: why the loss keeps each
    chunk's upcast, softmax and gradient on chip (``2c + 8`` bytes per logit for the step time,
    :func:`engine.time.memory_bound.loss_bytes`), with its source; None: an eager loss (``2c + 24``). The bytes it
    holds are :mod:`engine.memory.loss_paths`' (a stage above this one).
    """

    label: str
    compiled_form: LossImplementation | None = None
    on_chip: str | None = None


LOSSES: dict[LossImplementation, LossRecord] = {
    LossImplementation.HF: LossRecord("Hugging Face transformers (fp32 logits)"),
    LossImplementation.LIGER: LossRecord(
        "Liger fused linear cross-entropy",
        on_chip="Liger's fused linear cross-entropy: every chunk's logits, softmax and gradient in one kernel "
                "(liger-kernel 0.5)"),
    LossImplementation.LITGPT_CHUNKED: LossRecord("LitGPT chunked (16-bit logits)"),
    LossImplementation.TORCHTUNE_CHUNKED: LossRecord(
        "torchtune CEWithChunkedOutputLoss (8 chunks)",
        # torchtune training.compile_loss (pytorch/torchtune@a6290a5b): for CEWithChunkedOutputLoss it compiles only
        # compute_cross_entropy, the chunk's upcast + F.cross_entropy; the recipes call it when compile is on.
        compiled_form=LossImplementation.TORCHTUNE_CHUNKED_COMPILED),
    LossImplementation.TORCHTUNE_CHUNKED_COMPILED: LossRecord(
        "torchtune CEWithChunkedOutputLoss (8 chunks), compiled",
        on_chip="torchtune's recipes compile CEWithChunkedOutputLoss.compute_cross_entropy (one chunk's upcast + "
                "F.cross_entropy: training.compile_loss, pytorch/torchtune@a6290a5b)"),
    LossImplementation.TORCHTUNE_CE: LossRecord("torchtune 0.3+ torch.nn.CrossEntropyLoss (fp32 logits)"),
    LossImplementation.TORCHTUNE_CE_V02: LossRecord("torchtune 0.1-0.2 torch.nn.CrossEntropyLoss (fp32 logits kept)"),
    LossImplementation.MEGATRON: LossRecord("Megatron-LM vocab-parallel cross-entropy"),
    LossImplementation.TORCHTITAN: LossRecord("torchtitan cross_entropy_loss (eager)"),
    LossImplementation.INPLACE_FUSED: LossRecord("Fused in-place cross-entropy (flash-attn, llm.c)"),
}
"""Every loss implementation's record: labels, compiled forms and the on-chip losses all derive from it."""


def runs_as(loss: LossImplementation, torch_compile: bool) -> LossImplementation:
    """The loss that runs for ``loss``: under ``torch_compile`` its record's compiled form where its framework
    compiles it (torchtune's chunked loss), else ``loss`` itself."""
    compiled = LOSSES[loss].compiled_form
    return compiled if torch_compile and compiled is not None else loss


class TransformersVersion(str, Enum):
    """transformers releases whose causal-LM loss path holds different tensors (``Scenario.transformers_version``).

    - ``4.50+`` (4.50 to 5.x, the default): ``ForCausalLMLoss`` upcasts the model's 16-bit logits and pads and shifts
      the *labels* (``nn.functional.pad(labels, (0, 1))``): no copy of the logits.
    - ``4.46-4.49``: ``ForCausalLMLoss`` upcasts the 16-bit logits and makes the shifted copy
      ``logits[..., :-1, :].contiguous()`` (a real copy only when the micro batch is > 1: for one sequence the slice
      is already contiguous).
    - ``<=4.45`` (4.41 of the LLaMA-Factory report among them): the model's forward runs ``logits = logits.float()``
      itself (the 16-bit logits are freed at once and the output holds fp32 logits), then the same shifted copy.
    """

    V4_50_PLUS = "4.50+"
    V4_46_TO_4_49 = "4.46-4.49"
    V4_45_AND_OLDER = "<=4.45"

    @classmethod
    def of(cls, value: "TransformersVersion | str") -> "TransformersVersion":
        """The range of a member, a member's value, or a release number such as ``"4.41.2"`` or ``"5.0"``.

        Raises:
            ValueError: a text that is neither a range nor a release number.
        """
        if isinstance(value, cls):
            return value
        text = str(value).strip()
        for member in cls:
            if text == member.value:
                return member
        match = re.fullmatch(r"v?(\d{1,3})\.(\d{1,3})(?:\.\d{1,4})?(?:\.?(?:dev|rc)\d{0,4})?", text)
        if not match:
            raise ValueError(f"a transformers release such as 4.41.2, or one of {', '.join(m.value for m in cls)}")
        major, minor = int(match[1]), int(match[2])
        if major < 4 or (major == 4 and minor <= 45):
            return cls.V4_45_AND_OLDER
        if major == 4 and minor <= 49:
            return cls.V4_46_TO_4_49
        return cls.V4_50_PLUS


TRANSFORMERS_VERSION_LABELS = {
    TransformersVersion.V4_50_PLUS: "4.50 to 5.x (current)",
    TransformersVersion.V4_46_TO_4_49: "4.46 to 4.49",
    TransformersVersion.V4_45_AND_OLDER: "4.45 and older (e.g. 4.41)",
}
