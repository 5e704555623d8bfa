"""The bundled data files, loaded and validated in one place.

``data/models/*.json``: one real model per file, ``{"repo_id", "name", "gated", "source", "config"}``
where ``config`` holds the fields of the published ``config.json`` the engine reads.
``data/gpus.csv``: GPUs with their advertised memory (GiB) and the page it comes from.

The data folder is found next to the ``engine`` package (a source checkout or editable install), or at
``$FINETUNE_FIT_DATA`` when set.
"""

from __future__ import annotations

import csv
import difflib
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engine.errors import CatalogError

GIB = 1024**3


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


class Gpu(BaseModel):
    """A GPU and its memory. ``memory_gib`` is the advertised capacity (binary GiB for these parts)."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(min_length=1)
    vendor: str
    memory_gib: float = Field(gt=0)
    aliases: tuple[str, ...] = ()
    source: str

    @field_validator("aliases", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return tuple(a.strip() for a in value.split(";") if a.strip()) if isinstance(value, str) else value

    @property
    def memory_bytes(self) -> int:
        """Advertised memory in bytes."""
        return int(self.memory_gib * GIB)


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


@lru_cache(maxsize=1)
def load_gpus() -> tuple[Gpu, ...]:
    """Every GPU of ``data/gpus.csv``. Raises ``CatalogError`` naming the bad row (1-based, header = 1)."""
    path = data_dir() / "gpus.csv"
    gpus = []
    with path.open(encoding="utf-8", newline="") as fh:
        for row_no, row in enumerate(csv.DictReader(fh), start=2):
            try:
                gpus.append(Gpu.model_validate(row))
            except ValidationError as exc:
                raise CatalogError(f"gpus.csv row {row_no} ({row.get('name')!r}): {exc.errors()[0]['msg']}") from None
    return tuple(gpus)


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower().removeprefix("nvidia").removeprefix("amd"))


def find_gpu(name: str) -> Gpu:
    """Resolve a GPU name forgivingly: case, spaces, dashes and the vendor prefix do not matter.

    Raises:
        CatalogError: no match; the message lists the closest names.
    """
    wanted = _key(name)
    for gpu in load_gpus():
        if wanted in {_key(gpu.name), *(_key(a) for a in gpu.aliases)}:
            return gpu
    names = [g.name for g in load_gpus()]
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.3)
    raise CatalogError(f"unknown GPU '{name}'" + (f"; closest: {', '.join(close)}" if close else f"; known: {', '.join(names)}"))
