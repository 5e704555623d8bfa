"""Spreadsheet formula injection: neutralising text cells of every CSV the app or the CLI writes.

OWASP "CSV Injection" guidance: a spreadsheet treats a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return as a formula; prefixing such a cell with a single quote makes it text. :func:`neutralize` does that
to text cells (numbers are written by the program, never user text, and stay numbers) and also quotes a text that
already starts with a quote, so that :func:`restore` (used by the plans importer) gives back exactly the original:
the two are inverse for every string, and the plans CSV round trip stays byte for byte.

:func:`csv_text` writes a whole CSV that way (the downloads of the pages and the CLI's layout CSV): cells quoted only
where a reader needs it, booleans as :data:`BOOLEAN_WORDS`, empty for a missing value.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, Iterable

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
"""First characters a spreadsheet may read as a formula (OWASP CSV injection guidance)."""
QUOTE = "'"


def neutralize(value: Any) -> Any:
    """``value`` with a leading ``'`` when it is a string that starts with a formula trigger or a quote; anything
    else unchanged."""
    if isinstance(value, str) and value.startswith((*FORMULA_TRIGGERS, QUOTE)):
        return QUOTE + value
    return value


def restore(text: str) -> str:
    """The inverse of :func:`neutralize` for a cell read back from CSV: one leading ``'`` removed."""
    return text[1:] if text.startswith(QUOTE) else text


BOOLEAN_WORDS = {True: "true", False: "false"}
"""How every CSV of the app and the CLI writes a boolean (the plans CSV's words; the plans importer reads them)."""

_NEEDS_QUOTES = re.compile('[,"\n\r]')
"""A cell holding one of these is quoted: a comma, a quote or a line break (``\\r`` too, which Python 3.11's ``csv``
module leaves bare with ``\\n`` line ends)."""


def _text(value: Any) -> str:
    """A text cell: :func:`neutralize`-d, quoted (quotes doubled) where a reader needs it."""
    text = neutralize(value)
    return '"' + text.replace('"', '""') + '"' if _NEEDS_QUOTES.search(text) else text


def cell_value(value: Any) -> str:
    """One cell's text before CSV quoting: None and NaN empty, a boolean in :data:`BOOLEAN_WORDS`, an enum its value,
    text :func:`neutralize`-d, a number as Python writes it (a NumPy scalar as the Python number it holds). The one
    rule both writers share: :func:`cell_text` (quoted where needed) and the plans CSV (``csv.writer`` quotes)."""
    kind = type(value)
    if kind is float:  # the common cell first (a fit matrix has thousands): a computed number, NaN a missing value
        return "" if value != value else repr(value)
    if kind is int:
        return repr(value)
    if kind is str:
        return neutralize(value)
    if value is None:
        return ""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):  # NumPy scalars, pandas' numbers
        value = value.item()
    if isinstance(value, bool):
        return BOOLEAN_WORDS[value]
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        return neutralize(value)
    if isinstance(value, float) and value != value:
        return ""
    return str(value)


def cell_text(value: Any) -> str:
    """One CSV cell as it is written: :func:`cell_value`, quoted (quotes doubled) only where a reader needs it
    (:data:`_NEEDS_QUOTES`)."""
    kind = type(value)
    if kind is float:  # numbers inline (a fit matrix has thousands of cells; a call each costs a quarter more)
        return "" if value != value else repr(value)
    if kind is int:
        return repr(value)
    text = neutralize(value) if kind is str else cell_value(value)
    return '"' + text.replace('"', '""') + '"' if _NEEDS_QUOTES.search(text) else text


def csv_text(columns: Iterable[Any], rows: Iterable[Iterable[Any]]) -> str:
    """A CSV (``\\n`` line ends) of a header and rows, each cell :func:`cell_text`: quoted only where needed, as
    pandas' ``to_csv`` writes, booleans as ``true`` / ``false``, text cells never a spreadsheet formula."""
    lines = [",".join(_text(str(c)) for c in columns)]
    lines.extend(",".join(map(cell_text, row)) for row in rows)
    return "\n".join(lines) + "\n"
