"""The bundled data files, loaded and validated in one place.

``data/models/*.json``: one real model per file, ``{"repo_id", "name", "gated", "source", "config"}``
where ``config`` holds the fields of the published ``config.json`` the engine reads.
``data/gpus.csv`` and ``data/gpu_prices.csv``: the GPU catalog and price sources, loaded and validated by
:mod:`engine.gpus` (re-exported here: ``Gpu``, ``load_gpus``, ``find_gpu``, ...).
``data/throughput_measurements.csv``: published measured training tokens/s, one row per (model, method,
GPU, batch) with its source and locator (:func:`load_throughput_measurements`; compared with the FLOPs
model by :mod:`engine.calibration`).

The data folder is found next to the ``engine`` package (a source checkout or editable install), or at
``$FINETUNE_FIT_DATA`` when set.
"""

from __future__ import annotations

import csv
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from engine.errors import CatalogError, explain_validation


def data_dir() -> Path:
    """Folder of the bundled data files. Raises ``CatalogError`` when it cannot be found."""
    env = os.environ.get("FINETUNE_FIT_DATA")
    folder = Path(env) if env else Path(__file__).resolve().parent.parent / "data"
    if not folder.is_dir():
        raise CatalogError(f"data folder not found at {folder}; run from a source checkout or set FINETUNE_FIT_DATA")
    return folder


class CatalogModel(BaseModel):
    """A bundled model: its Hub repo id, a display name and its config dict."""

    model_config = ConfigDict(frozen=True)

    repo_id: str
    name: str
    gated: bool = False
    source: str
    config: dict[str, Any]


@lru_cache(maxsize=1)
def load_models() -> tuple[CatalogModel, ...]:
    """Every bundled model, sorted by display name. Raises ``CatalogError`` naming a bad file."""
    models = []
    for path in sorted((data_dir() / "models").glob("*.json")):
        try:
            models.append(CatalogModel.model_validate(json.loads(path.read_text(encoding="utf-8"))))
        except (ValueError, ValidationError) as exc:
            raise CatalogError(f"{path.name}: {exc}") from None
    if not models:
        raise CatalogError("no model configs in data/models")
    return tuple(sorted(models, key=lambda m: m.name.lower()))


def catalog_model(repo_id: str) -> CatalogModel:
    """The bundled model with ``repo_id`` (case-insensitive). Raises ``CatalogError`` if absent."""
    for model in load_models():
        if model.repo_id.lower() == repo_id.strip().lower():
            return model
    raise CatalogError(f"'{repo_id}' is not in the bundled catalog")


MEASUREMENTS_FILE = "throughput_measurements.csv"


class ThroughputMeasurement(BaseModel):
    """One published training throughput: ``tokens_per_second`` of all ``num_gpus`` GPUs together.

    ``repo_id`` names a bundled catalog model; ``gpu`` any name :func:`find_gpu` resolves (kept as written;
    :func:`load_throughput_measurements` checks that it resolves). ``locator`` says where in ``source`` the
    number is printed; ``notes`` what the source states or what was assumed about the setup.
    """

    model_config = ConfigDict(frozen=True)

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    locator: str = Field(min_length=1)
    repo_id: str = Field(min_length=1)
    method: str = Field(pattern=r"^(full|lora|qlora)$")
    micro_batch_size: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    gradient_checkpointing: bool
    gpu: str = Field(min_length=1)
    num_gpus: int = Field(ge=1)
    tokens_per_second: float = Field(gt=0)
    notes: str = ""


@lru_cache(maxsize=1)
def load_throughput_measurements() -> tuple[ThroughputMeasurement, ...]:
    """Every row of ``data/throughput_measurements.csv``, in file order.

    Raises:
        CatalogError: an unreadable file, a bad row (named by its line, header = 1, and its id), a duplicate
            id, a model that is not bundled or a GPU the catalog does not know.
    """
    path = data_dir() / MEASUREMENTS_FILE
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            rows = [(reader.line_num, row) for row in reader]
    except OSError as exc:
        raise CatalogError(f"cannot read {path}: {exc.strerror}") from None
    out: list[ThroughputMeasurement] = []
    for line, row in rows:
        label = f"{MEASUREMENTS_FILE} row {line} ({row.get('id')!r})"
        if None in row or any(v is None for v in row.values()):
            raise CatalogError(f"{label}: wrong number of fields")
        try:
            m = ThroughputMeasurement.model_validate(row)
        except ValidationError as exc:
            raise CatalogError(f"{label}: {explain_validation(exc)}") from None
        if any(o.id == m.id for o in out):
            raise CatalogError(f"{label}: duplicate id")
        try:
            catalog_model(m.repo_id)
            find_gpu(m.gpu)
        except CatalogError as exc:
            raise CatalogError(f"{label}: {exc}") from None
        out.append(m)
    return tuple(out)


# The GPU catalog and prices live in engine.gpus; importable from here as before.
from engine.gpus import Gpu, GpuPrice, closest_gpus, find_gpu, load_gpus, load_prices, prices_for  # noqa: E402

__all__ = [
    "CatalogModel", "Gpu", "GpuPrice", "ThroughputMeasurement", "catalog_model", "closest_gpus", "data_dir", "find_gpu",
    "load_gpus", "load_models", "load_prices", "load_throughput_measurements", "prices_for",
]
