"""A range, not a point: the band around every tokens/s the time model predicts, from its cross-validated misses.

The band of a prediction is the spread of ``measured / predicted`` over the published rows *comparable* to it, each
predicted with the constants refitted without its own source (leave-one-source-out, :mod:`engine.validation.crossval`):
the 10th and 90th percentiles of that ratio (:data:`COVERAGE` = 80%). Comparable rows are those of the same
:data:`GROUPS` entry: one GPU on the Hugging Face stack (Trainer + PEFT), one GPU on other stacks (torchtune, plain
PyTorch loops, NeMo AutoModel), many GPUs. ``tokens/s low..high = predicted x (low, high)``; hours and cost divide by
them (``hours_low`` uses ``high``).

"Calibrate to my run" removes what a source has in common (its stack, cluster and way of measuring: the source's
median miss), so a calibrated band is the spread of each row's ratio over its own source's median ratio: narrower.

The table itself (``data/time_bands.csv``: group, rows, sources, the four factors) is written by
``python benchmarks/validate_time.py --write-bands`` from the cross-validation, and a test checks it matches; this
module only reads it (through :mod:`engine.files`) and applies it. :func:`band_factors` is the pure percentile rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

from engine.errors import CatalogError
from engine.files import labelled_csv_rows

BANDS_FILE = "time_bands.csv"
COVERAGE = 0.80
"""Share of comparable published measurements the band is drawn to hold (10th to 90th percentile)."""

GROUPS = ("single_gpu_hf", "single_gpu_other", "multi_gpu")
"""Groups of comparable rows: one GPU on the Hugging Face stack, one GPU on other stacks, more than one GPU."""


def group_of(num_gpus: int, hf_stack: bool) -> str:
    """The :data:`GROUPS` entry of a prediction on ``num_gpus`` GPUs (``hf_stack``: transformers Trainer + PEFT)."""
    if num_gpus > 1:
        return "multi_gpu"
    return "single_gpu_hf" if hf_stack else "single_gpu_other"


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default) of an ascending sequence."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def band_factors(ratios: Sequence[float], coverage: float = COVERAGE) -> tuple[float, float]:
    """(low, high) factors of a band that holds ``coverage`` of ``ratios`` (measured / predicted): the
    ``(1 - coverage) / 2`` and ``(1 + coverage) / 2`` percentiles, widened to include 1 (the prediction itself).

    Raises:
        ValueError: no ratios, a non-positive ratio, or a coverage outside (0, 1).
    """
    if not ratios:
        raise ValueError("a band needs at least one measured / predicted ratio")
    if any(r <= 0 for r in ratios):
        raise ValueError("measured / predicted ratios must be positive")
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1) (got {coverage})")
    s = sorted(ratios)
    return min(1.0, _percentile(s, (1 - coverage) / 2)), max(1.0, _percentile(s, (1 + coverage) / 2))


@dataclass(frozen=True, slots=True)
class Band:
    """Factors on predicted tokens/s: ``low`` <= 1 <= ``high``; from ``rows`` comparable rows of ``sources`` sources
    (``group``); ``calibrated`` when a measurement of the user's own run set the level."""

    group: str
    low: float
    high: float
    rows: int
    sources: int
    calibrated: bool = False

    def tokens_per_second(self, value: float) -> tuple[float, float]:
        """(low, high) tokens/s around ``value``."""
        return value * self.low, value * self.high

    def duration(self, value: float | None) -> tuple[float | None, float | None]:
        """(low, high) of a time or a cost proportional to 1 / tokens/s (``value`` at the prediction)."""
        return (None, None) if value is None else (value / self.high, value / self.low)

    def narrowing_from(self, wider: "Band") -> float:
        """How many times narrower this band is than ``wider`` (ratio of their widths in log space: x0.8..x1.25 is
        twice as narrow as x0.64..x1.5625)."""
        return math.log(wider.high / wider.low) / max(math.log(self.high / self.low), 1e-9)

    def calibration_note(self, raw: "Band") -> str:
        """What calibrating did to the band, in words: this (calibrated) band against the uncalibrated ``raw``."""
        if self.narrowing_from(raw) > 1.0 + 1e-9:
            return (f"Calibration narrowed the band from x{raw.low:.2f}..x{raw.high:.2f} to x{self.low:.2f}..x{self.high:.2f} "
                    f"({self.narrowing_from(raw):.1f}x narrower): your measurement fixes the level, what is left is the "
                    "spread of a published source's rows around their own median.")
        return (f"Calibration keeps the band x{raw.low:.2f}..x{raw.high:.2f}: in this group a published source's own rows "
                "spread around their median as widely as the sources spread around the model, so your measurement "
                "fixes the level but not the spread.")

    @property
    def note(self) -> str:
        """The band in words: what it holds, from which rows."""
        label = {"single_gpu_hf": "one GPU, Hugging Face stack", "single_gpu_other": "one GPU, other stacks",
                 "multi_gpu": "several GPUs"}[self.group]
        how = ("after calibration to a measured run (the spread of each published row around its own source's median)"
               if self.calibrated else "cross-validated (constants refitted without each row's source)")
        return (f"{COVERAGE:.0%} band x{self.low:.2f}..x{self.high:.2f} of tokens/s: {self.rows} published rows of "
                f"{self.sources} sources ({label}), {how}")


@dataclass(frozen=True, slots=True)
class BandRow:
    """One row of ``data/time_bands.csv``."""

    group: str
    rows: int
    sources: int
    low: float
    high: float
    calibrated_low: float
    calibrated_high: float


@lru_cache(maxsize=1)
def load_bands() -> dict[str, BandRow]:
    """``data/time_bands.csv`` by group.

    Raises:
        CatalogError: an unreadable file, a bad or missing group, or factors that do not bracket 1.
    """
    out: dict[str, BandRow] = {}
    for label, row in labelled_csv_rows(BANDS_FILE):
        try:
            b = BandRow(group=row["group"], rows=int(row["rows"]), sources=int(row["sources"]), low=float(row["low"]),
                        high=float(row["high"]), calibrated_low=float(row["calibrated_low"]),
                        calibrated_high=float(row["calibrated_high"]))
        except (KeyError, ValueError) as exc:
            raise CatalogError(f"{label}: {exc}") from None
        if b.group not in GROUPS or not (0 < b.low <= 1 <= b.high and 0 < b.calibrated_low <= 1 <= b.calibrated_high):
            raise CatalogError(f"{label}: group must be one of {GROUPS} and each band must bracket 1")
        out[b.group] = b
    missing = [g for g in GROUPS if g not in out]
    if missing:
        raise CatalogError(f"{BANDS_FILE}: no band for {', '.join(missing)}")
    return out


def band_for(num_gpus: int, hf_stack: bool, calibrated: bool = False) -> Band:
    """The :class:`Band` of a prediction on ``num_gpus`` GPUs (``hf_stack``: the Hugging Face Trainer + PEFT stack);
    ``calibrated``: the user's measured tokens/s set the level (the narrower, within-source band). Where a group's
    rows spread around their own source's median as widely as the sources spread around the model (one GPU, other
    stacks: torchtune's RTX A6000 rows at their recipes' defaults beside its RTX 4090 and A100 rows), the within-source
    band is not narrower, and a calibrated prediction keeps the uncalibrated band: a measurement of the user's own run
    adds knowledge, it cannot make the estimate less certain."""
    row = load_bands()[group_of(num_gpus, hf_stack)]
    low, high = row.low, row.high
    if calibrated and math.log(row.calibrated_high / row.calibrated_low) < math.log(high / low):
        low, high = row.calibrated_low, row.calibrated_high
    return Band(group=row.group, low=low, high=high, rows=row.rows, sources=row.sources, calibrated=calibrated)
