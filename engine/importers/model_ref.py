"""The base model an imported config names, read through the same paths as the model picker
(:mod:`engine.model.sources`: the Hub, with the bundled copy standing in when the Hub is unreachable; the bundled
catalog alone when offline)."""

from __future__ import annotations

from typing import Any

from engine.errors import TrainingConfigError
from engine.importers.combine import ImportResult
from engine.model.sources import ConfigOrigin, config_from_catalog, config_from_hub
from engine.secrets import REDACTED


def model_repo(result: ImportResult) -> str | None:
    """The Hub repo id the files name, or None when they name none.

    Raises:
        TrainingConfigError: the files name a local path (``base_model: /data/llama``), which the estimate cannot read
            by itself: its config.json must be given instead; or a token-looking text, which is never sent.
    """
    ref = result.model
    if ref is None:
        return None
    if ref == REDACTED or result.revision == REDACTED:  # engine.importers.parse replaced a token-looking value
        raise TrainingConfigError(f"{result.model_key or 'the model'} or its revision holds {REDACTED}; it is not sent "
                                  "to the Hub: name the model's repo id (owner/name) in the file, or give --model")
    if ref.startswith(("/", "./", "../", "~", ".\\")) or "\\" in ref or ref.count("/") > 1 or ":" in ref:
        raise TrainingConfigError(f"{result.model_key or 'the model'} {ref!r} is a local path: pass that model's "
                                  "config.json with --config (or pick the model), and the training config beside it")
    return ref


def load_imported_model(result: ImportResult, *, offline: bool = False,
                        token: str | bool | None = None) -> tuple[dict[str, Any], ConfigOrigin] | None:
    """The config.json of the model the files name (None when they name none).

    Raises:
        TrainingConfigError: a local path (see :func:`model_repo`).
        CatalogError: offline and not bundled. InvalidRepoIdError, RepoNotFoundError, GatedRepoError,
        HubUnavailableError, ConfigError: as :func:`engine.model.sources.config_from_hub`.
    """
    repo = model_repo(result)
    if repo is None:
        return None
    if offline:
        return config_from_catalog(repo)
    return config_from_hub(repo, revision=result.revision, token=token)
