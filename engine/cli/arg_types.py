"""argparse value types of ``python -m engine``: whole numbers >= 1 and finite numbers.

``type=float`` alone reads ``nan``, ``inf`` and a 400-digit number (as inf): NaN passes every ``>`` / ``<`` check of a
pydantic field and infinity reaches the JSON as ``Infinity``, which is not JSON. Each type refuses with a message that
argparse prints as one line naming the flag (exit 2).
"""

from __future__ import annotations

import argparse
import math


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1 (got {value})")
    return value


MAX_WORLD = 1 << 20
"""Most GPUs of one command (a parallel layout's bound, ``engine.scaleout.layout.Layout.data_parallel``); the
one-GPU-model strategies take at most :data:`engine.memory.parallel.MAX_GPUS` (said by ``estimate``)."""


def gpu_count(text: str) -> int:
    """argparse type: a GPU count, 1 to :data:`MAX_WORLD`."""
    value = positive_int(text)
    if value > MAX_WORLD:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WORLD:,} (got {value:,})")
    return value


def finite_float(text: str) -> float:
    """argparse type: a finite number. ``float()`` reads ``nan``, ``inf`` and a 400-digit number (as inf): NaN passes
    every ``>`` / ``<`` check of a pydantic field and infinity reaches the JSON as ``Infinity`` (not JSON)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number (got {text!r})")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (a bandwidth, a factor)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0 (got {text!r})")
    return value
