"""The seed chapters' quick rules, reproduced exactly so the app can show them beside the detailed
estimate.

Source: ../shared/seeds/000_e5ea2c620e992cc5.txt ("Capítulo 2: Requisitos Computacionales"), sections
"Fórmula de Cálculo de Memoria", "Ejemplo: Modelo de 7B Parámetros" and "Estimar Antes de Entrenar".
They count model states only, with gigabytes of 1e9 bytes in the worked example and GiB (1024**3) in
the ``estimate_memory`` function; activations there are a fixed 4 bytes x batch x seq x 4096 whatever the
model. The detailed estimate (:mod:`engine.memory`) differs because it counts the activations and the
loss tensors of the actual architecture, the dtype of optimizer states in pure 16-bit training, and
which tensors are alive at the peak.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.scenario.precision import DTYPE_BYTES

GB = 1e9
GIB = 1024**3

SEED_MULTIPLIERS: dict[str, tuple[float, float]] = {"inference": (1.0, 1.0), "adamw_training": (4.0, 6.0)}
"""The seed's ``Memory = Parameters x Precision x Multiplier`` multipliers (inference 1; AdamW 4-6)."""


class SeedQuickRule(BaseModel):
    """Model-state bytes by the seed's 7B worked example: weights + gradients + 2 fp32 Adam states."""

    model_config = ConfigDict(frozen=True)

    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float

    @property
    def total_bytes(self) -> float:
        """Sum of the three, in bytes."""
        return self.weights_bytes + self.gradients_bytes + self.optimizer_bytes


def seed_quick_rule(parameters: int, precision: str) -> SeedQuickRule:
    """The seed's full fine-tuning rule.

    ``precision="fp32"``: weights 4 + gradients 4 + optimizer 4 x 2 bytes per parameter (7B: 28 + 28 +
    56 = 112 GB). ``precision="bf16"`` ("bfloat16 + mixed precision"): 2 + 2 + 8 (7B: 14 + 14 + 56 = 84 GB);
    the optimizer states stay fp32 in both.

    Raises:
        ValueError: ``precision`` other than ``fp32``, ``bf16`` or ``fp16``.
    """
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"the seed rule covers fp32, bf16 and fp16, not {precision!r}")
    width = DTYPE_BYTES[precision]
    return SeedQuickRule(
        weights_bytes=parameters * width,
        gradients_bytes=parameters * width,
        optimizer_bytes=parameters * DTYPE_BYTES["fp32"] * 2,
    )


class SeedEstimate(BaseModel):
    """Output of the seed's ``estimate_memory(model, batch_size, seq_len, precision)``, in GiB."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    total_gib: float


def seed_estimate_memory(param_count: int, batch_size: int, seq_len: int, precision: str = "bf16") -> SeedEstimate:
    """The seed's ``estimate_memory`` function, line for line, taking the parameter count directly.

    bytes per parameter = 2 if ``precision == "bf16"`` else 4 (so fp16 counts 4, as in the seed);
    optimizer = params x 4 x 2; activations = batch x seq x 4096 x 4 bytes; all divided by 1024**3.
    """
    bytes_per_param = 2 if precision == "bf16" else 4
    weights = param_count * bytes_per_param / GIB
    optimizer = param_count * 4 * 2 / GIB
    activations = batch_size * seq_len * 4096 * 4 / GIB
    return SeedEstimate(
        weights_gib=weights,
        gradients_gib=weights,
        optimizer_gib=optimizer,
        activations_gib=activations,
        total_gib=weights + weights + optimizer + activations,
    )


def seed_multiplier_range(parameters: int, precision: str, use: str = "adamw_training") -> tuple[float, float]:
    """Bytes by ``Parameters x Precision x Multiplier`` as a (low, high) range.

    Raises:
        KeyError: unknown ``precision`` (see :data:`engine.scenario.precision.DTYPE_BYTES`) or ``use``.
    """
    low, high = SEED_MULTIPLIERS[use]
    width = DTYPE_BYTES[precision]
    return parameters * width * low, parameters * width * high


class SeedComparisonRow(BaseModel):
    """One line of the "simple rule vs faithful estimate" table; ``total_bytes`` in bytes."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    rule: str
    total_bytes: float
    counts: str


def seed_comparison(parameters: int, micro_batch_size: int, seq_len: int, precision_is_fp32: bool) -> list[SeedComparisonRow]:
    """The seed's rules for a model of ``parameters`` parameters, for the side-by-side table.

    The rules see only the parameter count (and, for ``estimate_memory``, batch and sequence), never the
    technique, optimizer or architecture, which is why they are shown beside the detailed estimate.
    """
    fp32 = seed_quick_rule(parameters, "fp32")
    bf16 = seed_quick_rule(parameters, "bf16")
    seed_precision = "fp32" if precision_is_fp32 else "bf16"
    fn = seed_estimate_memory(parameters, micro_batch_size, seq_len, seed_precision)
    low, high = seed_multiplier_range(parameters, seed_precision)
    return [
        SeedComparisonRow(rule="Seed quick rule, fp32 (4 + 4 + 8 B/param)", total_bytes=fp32.total_bytes,
                          counts="weights + gradients + 2 fp32 Adam states; no activations"),
        SeedComparisonRow(rule="Seed quick rule, bf16 mixed (2 + 2 + 8 B/param)", total_bytes=bf16.total_bytes,
                          counts="bf16 weights and gradients, fp32 Adam states; no activations"),
        SeedComparisonRow(rule=f"Seed estimate_memory(batch={micro_batch_size}, seq={seq_len}, '{seed_precision}')",
                          total_bytes=fn.total_gib * GIB,
                          counts="model states + batch x seq x 4096 x 4 B activations, whatever the model"),
        SeedComparisonRow(rule=f"Seed multiplier rule, low (params x {DTYPE_BYTES[seed_precision]:g} B x 4)", total_bytes=low,
                          counts="'AdamW training: 4-6' times the weights"),
        SeedComparisonRow(rule=f"Seed multiplier rule, high (params x {DTYPE_BYTES[seed_precision]:g} B x 6)", total_bytes=high,
                          counts="'AdamW training: 4-6' times the weights"),
    ]
