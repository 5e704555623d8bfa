"""The GPU catalog and prices this browser session works with: the bundled files, or the user's edits.

Edits live in ``st.session_state`` only (never on disk, never shared with other users) and are validated
by the engine like the bundled CSV files.
"""

from __future__ import annotations

import json
from typing import Any

import streamlit as st

from engine.errors import CatalogError
from engine.hardware.gpus import Gpu, GpuPrice, gpus_from_rows, load_gpus, load_prices, prices_from_rows
from engine.model.catalog import load_models
from engine.memo import by_identity

_GPUS, _PRICES = "session_gpus", "session_prices"


def session_gpus() -> tuple[Gpu, ...]:
    """The session's GPUs (edited, else bundled)."""
    return st.session_state.get(_GPUS) or load_gpus()


def session_prices() -> tuple[GpuPrice, ...]:
    """The session's price rows (edited, else bundled)."""
    return st.session_state.get(_PRICES) or load_prices()


def bundled_data_problem() -> str | None:
    """Why the bundled tables every page reads (``data/gpus.csv``, ``data/gpu_prices.csv``, ``data/models/``) do not
    load, naming the file, row and column (:class:`~engine.errors.CatalogError`'s message), or None. The loaders
    cache what they read, so this costs nothing after the first run."""
    try:
        load_gpus()
        load_prices()
        load_models()
    except CatalogError as exc:
        return str(exc)
    return None


@by_identity(size=16)
def table_key(rows: tuple) -> str:
    """A GPU or price table (bundled, or a session's edits) as exact text, once per table object: part of the key of
    results kept for every session (a session's edited table gives another key than the bundled one)."""
    return json.dumps([r.model_dump(mode="json") for r in rows], sort_keys=True, default=str)


def is_edited() -> bool:
    """Whether this session uses edited tables."""
    return _GPUS in st.session_state or _PRICES in st.session_state


def apply_edits(gpu_rows: list[dict[str, Any]], price_rows: list[dict[str, Any]]) -> None:
    """Validate edited rows and use them for this session.

    Raises:
        CatalogError: the first bad row, named by table and row number (1-based).
    """
    gpus = gpus_from_rows(list(enumerate(gpu_rows, start=1)), "edited GPU table")
    prices = prices_from_rows(list(enumerate(price_rows, start=1)), gpus, "edited price table")
    st.session_state[_GPUS], st.session_state[_PRICES] = gpus, prices


def reset_edits() -> None:
    """Back to the bundled catalog and prices."""
    st.session_state.pop(_GPUS, None)
    st.session_state.pop(_PRICES, None)
