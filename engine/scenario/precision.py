"""Number formats and the precision modes of a training run.

Bytes per element are the storage sizes of the formats (IEEE 754 binary32/binary16, bfloat16, int8,
4-bit packed two per byte); the table is the one in the seed chapter "Cálculo de Memoria de GPU"
(../shared/seeds/000_*.txt, "Tamaños de Precisión").

A *precision mode* says in which format the weights live and in which format the matrix multiplications
run, as users meet them in Hugging Face Trainer (transformers ``TrainingArguments(bf16=/fp16=)`` and the
``torch_dtype`` the model is loaded with):

- ``fp32``: fp32 weights, fp32 compute.
- ``amp_bf16`` / ``amp_fp16``: fp32 weights, ``torch.autocast`` runs matmuls in bf16/fp16 (PyTorch AMP;
  Micikevicius et al. 2018, "Mixed Precision Training", sec. 3). The optimizer updates the fp32 weights.
- ``bf16`` / ``fp16``: the model is loaded in 16 bits (``torch_dtype=torch.bfloat16``); weights, gradients
  and (for torch optimizers) optimizer states are 16-bit. No fp32 master copy exists.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

DTYPE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "int8": 1.0, "int4": 0.5}
"""Bytes per parameter by format, as in the seed chapter's table (float32 4, bfloat16 2, float16 2,
int8 1, int4 0.5)."""


class PrecisionMode(str, Enum):
    """How weights are stored and matmuls computed (see module docstring)."""

    FP32 = "fp32"
    AMP_BF16 = "amp_bf16"
    AMP_FP16 = "amp_fp16"
    BF16 = "bf16"
    FP16 = "fp16"


class PrecisionSpec(BaseModel):
    """Byte sizes implied by a :class:`PrecisionMode`.

    ``weight_dtype``/``weight_bytes``: format and bytes of a stored weight element; ``compute_bytes``: bytes per element of matmul
    inputs/outputs; ``autocast``: whether ``torch.autocast`` is active (it keeps low-precision copies of
    the weights it casts).
    """

    model_config = ConfigDict(frozen=True)

    mode: PrecisionMode
    label: str
    short: str
    weight_dtype: str
    weight_bytes: int
    compute_bytes: int
    autocast: bool


_SPECS = {
    PrecisionMode.FP32: PrecisionSpec(mode=PrecisionMode.FP32, label="fp32", short="fp32", weight_dtype="fp32", weight_bytes=4, compute_bytes=4, autocast=False),
    PrecisionMode.AMP_BF16: PrecisionSpec(
        mode=PrecisionMode.AMP_BF16, label="mixed bf16 (fp32 weights)", short="mixed bf16", weight_dtype="fp32", weight_bytes=4, compute_bytes=2, autocast=True
    ),
    PrecisionMode.AMP_FP16: PrecisionSpec(
        mode=PrecisionMode.AMP_FP16, label="mixed fp16 (fp32 weights)", short="mixed fp16", weight_dtype="fp32", weight_bytes=4, compute_bytes=2, autocast=True
    ),
    PrecisionMode.BF16: PrecisionSpec(mode=PrecisionMode.BF16, label="pure bf16", short="pure bf16", weight_dtype="bf16", weight_bytes=2, compute_bytes=2, autocast=False),
    PrecisionMode.FP16: PrecisionSpec(mode=PrecisionMode.FP16, label="pure fp16", short="pure fp16", weight_dtype="fp16", weight_bytes=2, compute_bytes=2, autocast=False),
}


def precision_spec(mode: PrecisionMode | str) -> PrecisionSpec:
    """The :class:`PrecisionSpec` of ``mode``. Raises ``ValueError`` for an unknown mode name."""
    return _SPECS[PrecisionMode(mode)]
