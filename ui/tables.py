"""Tables with one number format per column and the unit in the column header (``st.dataframe``'s column_config).

Left to itself, ``st.dataframe`` formats each column from its data, so a column of floats shows ``1234.5678`` beside a
column of pre-formatted text ``1,234.6``, and sorts that text as text. The pages instead keep numbers as numbers,
bytes converted to the sidebar's unit (:func:`bytes_in`), and describe each numeric column with a kind
(:data:`KINDS`): every cell of the column then has the same format, and the header says the unit. Display only: no
formula here beyond the byte-unit conversion.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from engine.units import Unit, to_unit

KINDS: dict[str, tuple[str, str]] = {
    # kind: (printf format of sprintf-js, as st.column_config takes it; unit in the header, "" for none)
    "bytes": ("%,.2f", ""),  # the unit is the sidebar's GB or GiB, given per table
    "count": ("%,d", ""),
    "tokens_per_second": ("%,.0f", "tokens/s"),
    "hours": ("%,.3f", "h"),
    "gpu_hours": ("%,.3f", "GPU-h"),
    "seconds": ("%,.4f", "s"),
    "usd": ("%,.2f", "USD"),
    "usd_per_gpu_hour": ("%,.2f", "USD per GPU-hour"),
    "fraction": ("%.3f", ""),
}
"""Number format and header unit of each kind of numeric column."""


def header(label: str, kind: str, unit: Unit | None = None) -> str:
    """``"wall time (h)"``: the label with the kind's unit (for bytes, ``unit``) in parentheses."""
    suffix = unit if kind == "bytes" else KINDS[kind][1]
    return f"{label} ({suffix})" if suffix else label


def number_columns(columns: dict[str, tuple[str, str]], unit: Unit | None = None) -> dict[str, Any]:
    """``st.dataframe``'s ``column_config`` for ``{column: (label, kind)}``: each column shown as its label with the
    unit and every cell in the kind's format. Raises ``KeyError`` for an unknown kind, ``ValueError`` for a bytes
    column without ``unit``."""
    if unit is None and any(kind == "bytes" for _, kind in columns.values()):
        raise ValueError("a bytes column needs the unit it is shown in")
    return {col: st.column_config.NumberColumn(header(label, kind, unit), format=KINDS[kind][0])
            for col, (label, kind) in columns.items()}


def bytes_in(frame: pd.DataFrame, columns: list[str], unit: Unit) -> pd.DataFrame:
    """A copy of ``frame`` with the byte counts of ``columns`` in ``unit`` (None stays None)."""
    out = frame.copy()
    for col in columns:
        out[col] = [None if v is None or pd.isna(v) else to_unit(float(v), unit) for v in out[col]]
    return out
