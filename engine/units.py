"""Byte units shown to users. The engine works in bytes; the UI offers GB (1e9, what cloud providers
and the seed chapters print) or GiB (2**30, what ``torch.cuda`` and ``nvidia-smi`` report)."""

from __future__ import annotations

from typing import Literal

Unit = Literal["GB", "GiB"]
UNIT_BYTES: dict[str, int] = {"GB": 10**9, "GiB": 2**30}


def to_unit(nbytes: float, unit: Unit) -> float:
    """``nbytes`` expressed in ``unit``. Raises ``KeyError`` for an unknown unit."""
    return nbytes / UNIT_BYTES[unit]


_LARGER = {"GB": (1000, ("TB", "PB")), "GiB": (1024, ("TiB", "PiB"))}


def fmt_bytes(nbytes: float, unit: Unit, digits: int = 2) -> str:
    """``'12.34 GiB'``-style text; 10,000 GB or more steps up to TB/PB (TiB/PiB) in the same system."""
    value, label = to_unit(nbytes, unit), unit
    step, larger = _LARGER[unit]
    for bigger in larger:
        if abs(value) < 10_000:
            break
        value, label = value / step, bigger
    return f"{value:,.{digits}f} {label}"


def fmt_count(n: int) -> str:
    """Parameter counts as people say them: 8.03B, 134.5M, 13.6M, 4,096."""
    for div, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if n >= div:
            return f"{n / div:,.3g}{suffix}" if n / div < 100 else f"{n / div:,.1f}{suffix}"
    return f"{n:,}"
