"""Spreadsheet formula injection: neutralising text cells of every CSV the app or the CLI writes.

OWASP "CSV Injection" guidance: a spreadsheet treats a cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return as a formula; prefixing such a cell with a single quote makes it text. :func:`neutralize` does that
to text cells (numbers are written by the program, never user text, and stay numbers) and also quotes a text that
already starts with a quote, so that :func:`restore` (used by the plans importer) gives back exactly the original:
the two are inverse for every string, and the plans CSV round trip stays byte for byte.
"""

from __future__ import annotations

from typing import Any

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
