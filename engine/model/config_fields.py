"""Readers for the values of a Hugging Face ``config.json``, shared by the builders in :mod:`engine.model.families`.

Each reader returns a checked value or raises :class:`~engine.errors.ConfigError` naming the key, so a bad
config becomes a one-line message. Sizes are bounded (:data:`MAX_SIZE`, :data:`MAX_LAYERS`) because a huge
number in a config is a typo, not a model.
"""

from __future__ import annotations

from typing import Any

from engine.errors import ConfigError

def read_value(config: dict[str, Any], *keys: str, default: Any = None, required: bool = True) -> Any:
    """First present, non-null key of ``keys``; ``ConfigError`` naming the keys when required and absent."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if required and default is None:
        raise ConfigError(f"config.json has no '{keys[0]}'" + (f" (nor {', '.join(keys[1:])})" if keys[1:] else ""))
    return default


MAX_SIZE = 1 << 24
"""Largest size accepted for any config dimension (16,777,216): above every published model (the largest
vocabularies are ~256k, hidden sizes ~16k), so a larger value is a typo, not a model."""


def read_size(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    """A strictly positive integer size from the config, at most :data:`MAX_SIZE`."""
    value = read_value(config, *keys, default=default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"config.json field '{keys[0]}' must be a positive integer, got {value!r}")
    if value > MAX_SIZE:
        raise ConfigError(f"config.json field '{keys[0]}' is {value:,}, implausibly large (at most {MAX_SIZE:,})")
    return value


MAX_LAYERS = 10_000
"""Most decoder layers accepted: published models have at most a few hundred."""


def read_layers(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    """Number of layers, at most :data:`MAX_LAYERS`."""
    value = read_size(config, *keys, default=default)
    if value > MAX_LAYERS:
        raise ConfigError(f"config.json field '{keys[0]}' is {value:,}, implausibly many layers (at most {MAX_LAYERS:,})")
    return value


def read_probability(config: dict[str, Any], key: str, default: float = 0.0) -> float:
    value = config.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ConfigError(f"config.json field '{key}' must be a probability in [0, 1), got {value!r}")
    return float(value)


def read_flag(config: dict[str, Any], key: str, default: bool) -> bool:
    """A boolean switch; absent or null means the config class's ``default``."""
    value = config.get(key)
    return default if value is None else bool(value)


