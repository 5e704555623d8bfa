"""Citations shared by many rows of the GPU catalog, kept once in ``data/gpu_sources.csv`` and referenced by id.

A text cell of ``data/gpus.csv`` may start with ``[id]`` (``rates_source: "[rates]; GeForce 40/50: ..."``,
``matmul_source: "[mamf] row 'NVIDIA H100 SXM' (...)"``): :func:`expand_sources` replaces the reference by the
citation of that id (``id, citation`` rows), so every loaded :class:`~engine.hardware.gpus.Gpu` carries the full
text and a citation is written, and corrected, in one place. Only ``[id]`` at the start of a cell is a reference; an
id the table does not define is an error naming the row, never left as it is.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Mapping, Sequence

from engine.errors import CatalogError
from engine.files import csv_rows, data_file

SOURCES_FILE = "gpu_sources.csv"
REFERENCE = re.compile(r"^\[([a-z0-9_-]+)\]")
"""A reference at the start of a cell: ``[id]`` (lower-case letters, digits, ``-``, ``_``)."""


@lru_cache(maxsize=1)
def gpu_sources() -> dict[str, str]:
    """id -> citation of ``data/gpu_sources.csv``. Raises ``CatalogError`` for an empty or repeated id or citation."""
    sources: dict[str, str] = {}
    for line, row in csv_rows(data_file(SOURCES_FILE)):
        key, text = (row.get("id") or "").strip(), (row.get("citation") or "").strip()
        if not REFERENCE.fullmatch(f"[{key}]") or not text:
            raise CatalogError(f"{SOURCES_FILE} row {line}: needs an id ([a-z0-9_-]) and a citation")
        if key in sources:
            raise CatalogError(f"{SOURCES_FILE} row {line}: id {key!r} is defined twice")
        sources[key] = text
    return sources


def expand_sources(rows: Sequence[tuple[int, Mapping[str, str]]], source: str,
                   sources: Mapping[str, str] | None = None) -> list[tuple[int, dict[str, str]]]:
    """``rows`` (line number, row) with every ``[id]`` reference replaced by its citation.

    Raises:
        CatalogError: a reference to an id :func:`gpu_sources` does not define, named by ``source`` and the row.
    """
    table = gpu_sources() if sources is None else sources
    out = []
    for line, row in rows:
        expanded = {}
        for key, value in row.items():
            m = REFERENCE.match(value) if isinstance(value, str) else None
            if m:
                if m.group(1) not in table:
                    raise CatalogError(f"{source} row {line} ({row.get('name')!r}): {key} cites [{m.group(1)}], which "
                                       f"{SOURCES_FILE} does not define (ids: {', '.join(sorted(table))})")
                value = table[m.group(1)] + value[m.end():]
            expanded[key] = value
        out.append((line, expanded))
    return out
