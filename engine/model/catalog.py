"""The bundled model catalog: ``data/models/*.json``, one real model per file.

Each file is ``{"repo_id", "name", "gated", "source", "config"}`` where ``config`` holds the fields of the
published ``config.json`` the engine reads. The files are read by :mod:`engine.files`; this module validates
them and looks models up by repo id.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.errors import CatalogError
from engine.files import model_config_files


class CatalogModel(BaseModel):
    """A bundled model: its Hub repo id, a display name and its config dict."""

    model_config = ConfigDict(frozen=True, defer_build=True)  # built when first used (a local estimate uses none)

    repo_id: str
    name: str
    gated: bool = False
    source: str
    config: dict[str, Any]


@lru_cache(maxsize=1)
def load_models() -> tuple[CatalogModel, ...]:
    """Every bundled model, sorted by display name. Raises ``CatalogError`` naming a bad file."""
    models = []
    for name, raw in model_config_files():
        try:
            models.append(CatalogModel.model_validate(raw))
        except ValidationError as exc:
            raise CatalogError(f"{name}: {exc}") from None
    if not models:
        raise CatalogError("no model configs in data/models")
    return tuple(sorted(models, key=lambda m: m.name.lower()))


def catalog_model(repo_id: str) -> CatalogModel:
    """The bundled model with ``repo_id`` (case-insensitive). Raises ``CatalogError`` if absent."""
    for model in load_models():
        if model.repo_id.lower() == repo_id.strip().lower():
            return model
    raise CatalogError(f"'{repo_id}' is not in the bundled catalog")


