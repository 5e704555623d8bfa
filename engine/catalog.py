"""The bundled data files, loaded and validated in one place.

``data/models/*.json``: one real model per file, ``{"repo_id", "name", "gated", "source", "config"}``
where ``config`` holds the fields of the published ``config.json`` the engine reads.
``data/gpus.csv`` and ``data/gpu_prices.csv``: the GPU catalog and price sources, loaded and validated by
:mod:`engine.gpus` (re-exported here: ``Gpu``, ``load_gpus``, ``find_gpu``, ...).

The data folder is found next to the ``engine`` package (a source checkout or editable install), or at
``$FINETUNE_FIT_DATA`` when set.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.errors import CatalogError


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


# The GPU catalog and prices live in engine.gpus; importable from here as before.
from engine.gpus import Gpu, GpuPrice, closest_gpus, find_gpu, load_gpus, load_prices, prices_for  # noqa: E402

__all__ = [
    "CatalogModel", "Gpu", "GpuPrice", "catalog_model", "closest_gpus", "data_dir", "find_gpu", "load_gpus",
    "load_models", "load_prices", "prices_for",
]
