"""FP8 training: what TransformerEngine and torchao float8 keep in memory, and which matmuls run at the FP8 rate.

Both recipes keep the model states in high precision (bf16/fp32 weights, fp32 gradients and Adam states: TE#1429,
maintainer pggPL: "FP8 training keeps weights, gradients and optimizer state in higher precision and casts to FP8
before each GEMM") and run the block linears' GEMMs in FP8; the embedding, the output layer, norms, attention
and the router stay in bf16 (DeepSeek-V3 arXiv:2412.19437 sec. 3.3; torchtitan's float8 converter filters
``output``).

- ``te`` (NVIDIA TransformerEngine, ``te.Linear`` under ``fp8_autocast``, DelayedScaling): on Hopper the FP8
  tensor cores run only TN GEMMs, so TE caches an FP8 copy **and** an FP8 transpose of each weight across the
  micro batches (TE#1261): +2 B per block-linear parameter on top of the bf16/fp32 weight, which is why TE FP8
  can need more memory than bf16 (TE#1429). Linear layers save their input for backward as FP8 (TE#1764): the
  saved linear inputs take 1 B instead of 2. Each FP8 tensor keeps an fp32 amax history (``amax_history_len``
  1024 in TE's ``DelayedScaling``; Megatron sets 1) and a scale. ``fp8_model_init`` / Megatron
  ``--fp8-param-gather`` drop the bf16 weight copy (not modelled: the default is modelled).
- ``torchao`` (``Float8Linear``, dynamic tensorwise scaling, torchao 0.10 / torchtitan): FP8 casts are made per
  use and freed; no weight cache, no history. Measured peak memory is unchanged by float8 (torchao
  ``docs/source/workflows/training.md``: 47.65 GB bf16 vs 47.77 GB float8 on Llama 3 8B; torchtitan
  77.0 vs 76.8 GiB). With FSDP2 the weight shards are cast before the all-gather
  (``enable_fsdp_float8_all_gather``), halving the parameter all-gather volume.
- ``torchao_rowwise`` (``Float8LinearRecipeName.ROWWISE``, torchtitan ``--float8.recipe_name rowwise``): the same
  memory as ``torchao``, but (1) its all-gathers stay 16-bit (torchtitan's converter enables the FP8 all-gather and
  ``Float8ColwiseParallel`` for tensorwise scaling only); (2) its backward GEMMs run with slow accumulation, which
  torchao routes through cuBLAS's tensorwise kernel with unit scales followed by a separate rescale of the output
  by the row and column scales, because the row-wise CUTLASS kernel is too slow without fast accumulation (torchao
  PR #1325, ``float8/float8_python_api.py``; torchao issue #2184: "at least one extra triton kernel per GEMM ...
  just for the rescaling"): one extra read and write of each backward GEMM's output; (3) under async TP its
  all-gather-matmul patterns are not fused (pytorch/pytorch#149990, open: only the matmul-reduce-scatters fuse
  with row-wise scales), so the TP all-gathers stay on the critical path.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

from engine.errors import ScenarioError

if TYPE_CHECKING:  # a type only: the GPU catalog is not imported for an estimate without --gpu
    from engine.hardware.gpus import Gpu


class Fp8Recipe(str, Enum):
    """FP8 implementation: TransformerEngine (delayed scaling, cached FP8 weights) or torchao float8 (dynamic,
    tensorwise or row-wise scaling)."""

    TE = "te"
    TORCHAO = "torchao"
    TORCHAO_ROWWISE = "torchao_rowwise"

    @classmethod
    def of(cls, value: Fp8Recipe | str | None) -> Fp8Recipe | None:
        """The recipe ``value`` names: a member, or its value as a string (``"torchao"``); None for None (no FP8).

        Every public entry point of the layout model takes its recipe through here, so that a string never reaches
        a comparison with a member as an unknown recipe (``"torchao" is Fp8Recipe.TORCHAO`` is False).

        Raises:
            ScenarioError: a string that names no recipe.
        """
        if value is None or isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ScenarioError(f"unknown FP8 recipe {value!r}: one of "
                                f"{', '.join(r.value for r in cls)}") from None

    @property
    def caches_fp8_weights(self) -> bool:
        """TransformerEngine's delayed scaling: an FP8 weight and its transpose cached across micro batches
        (TE#1261), amax histories, FP8-saved linear inputs (TE#1764)."""
        return self is Fp8Recipe.TE

    @property
    def gathers_in_fp8(self) -> bool:
        """FSDP2 / TP all-gathers move 1-byte weights: torchao's tensorwise recipe only (torchtitan's float8 converter
        sets ``enable_fsdp_float8_all_gather`` and ``Float8ColwiseParallel`` for tensorwise scaling)."""
        return self is Fp8Recipe.TORCHAO

    @property
    def fuses_tp_all_gathers(self) -> bool:
        """Async TP fuses the all-gather-matmuls: not with row-wise scales (pytorch/pytorch#149990)."""
        return self is not Fp8Recipe.TORCHAO_ROWWISE

    @property
    def rescales_backward_gemms(self) -> bool:
        """A separate rescale pass after each backward GEMM (row-wise scales, slow accumulation: torchao PR #1325)."""
        return self is Fp8Recipe.TORCHAO_ROWWISE


TE_WEIGHT_CACHE_BYTES = 2.0
"""Bytes per block-linear parameter of TE's cached FP8 weight and FP8 transpose (TE#1261)."""
TE_AMAX_HISTORY = 1024
"""TransformerEngine ``DelayedScaling.amax_history_len`` default (``transformer_engine/common/recipe``)."""
TE_TENSORS_PER_LINEAR = 3
"""FP8 tensors with scaling state per linear: input, weight, output gradient."""
FP8_LINEAR_INPUT_BYTES = 1.0
"""Bytes per element of a linear input TE saves for backward (FP8, TE#1764) instead of 2 (bf16)."""


def fp8_weight_cache_bytes(recipe: Fp8Recipe | None, linear_parameters: float) -> float:
    """The FP8 weight copies a rank keeps for its block linears (0 unless TE)."""
    return TE_WEIGHT_CACHE_BYTES * linear_parameters if recipe is not None and recipe.caches_fp8_weights else 0.0


def fp8_scaling_bytes(recipe: Fp8Recipe | None, linear_modules: float) -> float:
    """TE's amax histories and scales (fp32): history + 1 scale per FP8 tensor per linear module."""
    if recipe is None or not recipe.caches_fp8_weights:
        return 0.0
    return linear_modules * TE_TENSORS_PER_LINEAR * (TE_AMAX_HISTORY + 1) * 4.0


def linear_input_factor(recipe: Fp8Recipe | None, compute_bytes: int) -> float:
    """Scale of the saved linear inputs: 1/2 under TE (FP8 instead of bf16), else 1."""
    return FP8_LINEAR_INPUT_BYTES / compute_bytes if recipe is not None and recipe.caches_fp8_weights else 1.0



def fp8_cast_bytes(recipe: Fp8Recipe, c: int, x: float, w: float, dy: float, micro_batches: int) -> tuple[float, float]:
    """HBM bytes of the FP8 casts around one linear's three GEMMs in one micro batch: (forward, backward). ``x``,
    ``w``, ``dy``: elements of its input, weight and output gradient; ``c`` bytes per 16-bit element.

    - ``torchao`` (``Float8Linear``, dynamic tensorwise scaling, torchao ``float8/float8_scaling_utils.py``): each
      operand gets an amax reduction (read c) and a scaled cast (read c, write 1) on its first use, and a cast to
      the transposed layout for the other GEMM that reads it (Hopper's FP8 tensor cores take only TN GEMMs; read c,
      write 1): forward ``(2c + 1)(x + w)``, backward ``(2c + 1) dy + (c + 1)(x + w + dy)``. Eager; torch.compile
      fuses part of it into neighbouring ops (not modelled).
    - ``te`` (TransformerEngine, delayed scaling): the scale comes from the amax history and one fused cast-transpose
      kernel reads the 16-bit tensor once and writes both FP8 layouts (``transformer_engine/common/transpose/
      cast_transpose.cu``): ``(c + 2)`` per x element forward and per dy element backward; the weight's FP8 copy
      and transpose are made once per step and cached across the micro batches (TE#1261, Megatron's
      ``is_first_microbatch``): ``(c + 2) w / micro batches``.
    - ``torchao_rowwise``: as ``torchao``, plus the rescale pass after each slow-accumulation backward GEMM (torchao
      PR #1325: cuBLAS tensorwise GEMM, then the output times the row and column scales, read c and write c per
      output element): the input gradient has ``x`` elements and the weight gradient ``w``: ``+ 2c (x + w)``."""
    if recipe.caches_fp8_weights:
        return (c + 2.0) * (x + w / max(micro_batches, 1)), (c + 2.0) * dy
    forward, backward = (2.0 * c + 1.0) * (x + w), (2.0 * c + 1.0) * dy + (c + 1.0) * (x + w + dy)
    if recipe.rescales_backward_gemms:
        backward += 2.0 * c * (x + w)
    return forward, backward


def check_fp8_gpu(fp8: Fp8Recipe | None, gpu: Gpu) -> None:
    """FP8 training needs FP8 tensor cores (Hopper, Ada, Blackwell; the catalog's ``fp8`` column).

    Raises:
        ScenarioError: ``fp8`` on a GPU without them (TransformerEngine and torchao refuse to run FP8 matmuls there).
    """
    if fp8 is not None and not gpu.fp8:
        raise ScenarioError(f"{gpu.name} has no FP8 tensor cores (Hopper, Ada or newer): FP8 training cannot run there; "
                            "use bf16 mixed precision or a GPU with FP8")
