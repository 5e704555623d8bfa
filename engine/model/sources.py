"""Where a model config comes from: a local file, the bundled catalog, or the Hub (with fallback).

Every path returns the parsed config dict plus a :class:`ConfigOrigin` saying where it came from, so the
UI and the CLI can tell the user when a bundled copy stood in for the Hub.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.secrets import REDACTED, looks_like_token
from engine.model.config_fields import MAX_CONFIG_BYTES, load_config_json
from engine.errors import CatalogError, ConfigError, HubUnavailableError



class ConfigOrigin(BaseModel):
    """Where a config came from: ``kind`` is ``file``, ``catalog``, ``hub`` or ``catalog_fallback``."""

    model_config = ConfigDict(frozen=True)

    kind: str
    name: str
    repo_id: str | None = None
    revision: str | None = None
    notice: str | None = None


def parse_config_bytes(data: bytes, name: str = "config.json") -> dict[str, Any]:
    """Parse uploaded/file bytes as a config JSON object.

    Raises:
        ConfigError: larger than :data:`MAX_CONFIG_BYTES`, not UTF-8, not JSON, or not a JSON object.
    """
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{name} is {len(data):,} bytes; a config.json is at most {MAX_CONFIG_BYTES:,} bytes")
    try:
        # utf-8-sig: editors on Windows save JSON with a byte-order mark, which is harmless.
        config = load_config_json(data.decode("utf-8-sig"), name)
    except UnicodeDecodeError:
        raise ConfigError(f"{name} is not UTF-8 text; upload the model's config.json") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:
        raise ConfigError(f"{name} is nested too deeply to be a model config") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{name} must hold a JSON object, not a {type(config).__name__}")
    return config


def config_from_file(path: str | Path) -> tuple[dict[str, Any], ConfigOrigin]:
    """Read a local config.json. Raises ``ConfigError`` when missing or malformed."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)  # bounded: /dev/zero or a weights file must not hang us
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror}") from None
    config = parse_config_bytes(data, p.name)
    if "model_type" not in config and isinstance(config.get("config"), dict) and "repo_id" in config:
        # A bundled catalog entry (data/models/*.json) wraps the config with its repo id and source.
        raise ConfigError(f"{p.name} is a bundled catalog entry, not a config.json: its model is "
                          f"'{config['repo_id']}', which --model {config['repo_id']} reads from the catalog offline")
    return config, ConfigOrigin(kind="file", name=p.name)


def config_from_catalog(repo_id: str) -> tuple[dict[str, Any], ConfigOrigin]:
    """The bundled config of ``repo_id``. Raises ``CatalogError`` when it is not bundled."""
    from engine.model.catalog import catalog_model  # the catalog: not for a local config file (bench_cli_start)

    model = catalog_model(repo_id)
    return dict(model.config), ConfigOrigin(kind="catalog", name=model.name, repo_id=model.repo_id)


def config_from_hub(
    repo_id: str, *, revision: str | None = None, token: str | bool | None = None, timeout_s: float | None = None
) -> tuple[dict[str, Any], ConfigOrigin]:
    """Read ``config.json`` from the Hub; if the Hub is unreachable and the repo is bundled, use the
    bundled copy and say so in ``origin.notice``. ``token=False`` sends no token at all. ``timeout_s`` None: the
    ``FINETUNE_FIT_HUB_TIMEOUT`` budget (:func:`engine.model.hub.hub_timeout_s`), as the app.

    Raises:
        InvalidRepoIdError, RepoNotFoundError, GatedRepoError, ConfigError: as :func:`engine.model.hub.fetch_config`.
        HubUnavailableError: the Hub is unreachable and the repo is not bundled.
    """
    from engine.model import hub  # here: a local file or the catalog never imports the Hub client

    try:
        config = hub.fetch_config(repo_id, revision=revision, token=token, timeout_s=timeout_s)
    except HubUnavailableError as exc:
        return catalog_fallback(repo_id, exc, revision)
    return config, hub_origin(repo_id, revision)


def hub_origin(repo_id: str, revision: str | None) -> ConfigOrigin:
    """The origin of a config read from the Hub."""
    return ConfigOrigin(kind="hub", name=repo_id.strip(), repo_id=repo_id.strip(), revision=revision)


def catalog_fallback(
    repo_id: str, exc: HubUnavailableError, revision: str | None = None
) -> tuple[dict[str, Any], ConfigOrigin]:
    """The bundled copy of ``repo_id`` standing in for an unreachable Hub, with a notice; re-raises
    ``exc`` when the repo is not bundled."""
    try:
        config, origin = config_from_catalog(repo_id)
    except CatalogError:
        raise exc from None
    notice = f"The Hub is unreachable ({exc.reason}): showing the bundled copy of {origin.repo_id}."
    if revision:
        shown = REDACTED if looks_like_token(revision) else repr(revision)
        notice += f" (The bundled copy is of the main branch; revision {shown} could not be checked.)"
    return config, origin.model_copy(update={"kind": "catalog_fallback", "notice": notice})


def catalog_choices() -> list[tuple[str, str]]:
    """(repo id, display name) of every bundled model, for pickers."""
    from engine.model.catalog import load_models

    return [(m.repo_id, m.name) for m in load_models()]
