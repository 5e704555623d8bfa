"""The one place that opens the bundled data files (``data/``).

Every table and config the engine ships is read here: the model configs (``data/models/*.json``), the GPU
catalog and prices, and the measured and traced tables. The modules that give those rows a meaning
(:mod:`engine.model.catalog`, :mod:`engine.hardware.gpus`, :mod:`engine.validation.measurements`) validate
what these readers return; none of them opens a file itself.

The data folder is found next to the ``engine`` package (a source checkout or editable install), or at
``$FINETUNE_FIT_DATA`` when set. This module imports nothing from the engine but its errors.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from engine.errors import CatalogError


# Resolved once: ``Path.resolve`` walks every component with a system call, and the app asks for its data files on
# every rerun (about 1% of a busy server's CPU, py-spy).
_BESIDE_ENGINE = Path(__file__).resolve().parent.parent / "data"


def data_dir() -> Path:
    """Folder of the bundled data files. Raises ``CatalogError`` when it cannot be found."""
    env = os.environ.get("FINETUNE_FIT_DATA")
    folder = Path(env) if env else _BESIDE_ENGINE
    if not folder.is_dir():
        raise CatalogError(f"data folder not found at {folder}; run from a source checkout or set FINETUNE_FIT_DATA")
    return folder


def data_file(name: str) -> Path:
    """Path of ``data/<name>`` (not checked for existence; the readers report a missing file)."""
    return data_dir() / name


def _read_csv(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """(header, [(1-based line number, row)]); the header is line 1. Raises ``CatalogError`` if unreadable."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            rows = [(reader.line_num, row) for row in reader]
            return list(reader.fieldnames or []), rows
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror}") from None


def _ragged(row: dict[str, Any]) -> bool:
    return None in row or any(v is None for v in row.values())


def csv_rows(path: Path) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) pairs of a CSV file (the GPU catalog's and prices' format).

    Raises:
        CatalogError: an unreadable file, or a row with a number of fields other than the header's.
    """
    header, rows = _read_csv(path)
    for line, row in rows:
        if _ragged(row):
            raise CatalogError(f"{path.name} row {line}: wrong number of fields (the header has {len(header)})")
    return rows


def labelled_csv_rows(filename: str) -> list[tuple[str, dict[str, str]]]:
    """(label, row) for each row of ``data/<filename>``; the label names the file, the line (header = 1) and the
    row's id, for error messages.

    Raises:
        CatalogError: an unreadable file or a row with the wrong number of fields.
    """
    _, rows = _read_csv(data_file(filename))
    out = []
    for line, row in rows:
        label = f"{filename} row {line} ({row.get('id')!r})"
        if _ragged(row):
            raise CatalogError(f"{label}: wrong number of fields")
        out.append((label, row))
    return out


def model_config_files() -> list[tuple[str, Any]]:
    """(file name, parsed JSON) of every ``data/models/*.json``, sorted by file name.

    Raises:
        CatalogError: a file that cannot be read or is not JSON, named.
    """
    out = []
    for path in sorted((data_dir() / "models").glob("*.json")):
        try:
            out.append((path.name, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError) as exc:
            raise CatalogError(f"{path.name}: {exc}") from None
    return out
