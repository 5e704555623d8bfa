"""CSV downloads of tables: text cells neutralised against spreadsheet formula injection (engine.csv_cells)."""

from __future__ import annotations

import csv

import pandas as pd

from engine.csv_cells import neutralize


def csv_bytes(frame: pd.DataFrame) -> bytes:
    """``frame`` as UTF-8 CSV bytes (no index), every text cell starting with = + - @ tab CR (or a quote) prefixed
    with a quote, numbers untouched; text cells are quoted."""
    # Text quoted as well: a line break inside a cell then stays in its cell. Only columns that can hold text are
    # walked (cell by cell, numbers cost a third of a fit page's rerun; they are never changed).
    text = [c for c in frame.columns if frame[c].dtype == object or isinstance(frame[c].dtype, pd.StringDtype)]
    safe = frame.assign(**{str(c): frame[c].map(neutralize) for c in text}) if text else frame
    return safe.to_csv(index=False, quoting=csv.QUOTE_NONNUMERIC).encode("utf-8")
