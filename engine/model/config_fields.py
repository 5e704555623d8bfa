"""Readers for the values of a Hugging Face ``config.json``, shared by the builders in :mod:`engine.model.families`.

Each reader returns a checked value or raises :class:`~engine.errors.ConfigError` naming the key, so a bad
config becomes a one-line message. Sizes are bounded (:data:`MAX_SIZE`, :data:`MAX_LAYERS`) because a huge
number in a config is a typo, not a model.
"""

from __future__ import annotations

import json
import math
from typing import Any

from engine.errors import ConfigError

#: Largest accepted ``config.json``, in bytes (2 MiB). Real configs are a few KiB; the biggest (with long
#: ``id2label`` maps) stay well under 1 MiB. Here, not in engine.model.hub, so that reading a local file does not
#: import the Hub client.
MAX_CONFIG_BYTES = 2 * 1024 * 1024
MAX_INT_DIGITS = 20
"""Most digits accepted in an integer of a config.json: every real value fits 64 bits (at most 20 digits); Python
refuses to even convert integers of over 4,300 digits, so longer ones are refused here with a one-line message."""


def _int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise ConfigError(f"holds a {digits:,}-digit integer; no config value has more than {MAX_INT_DIGITS} digits")
    return int(text)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ConfigError(f"holds the number {text[:40]}, beyond the range of a 64-bit float")
    return value


def _constant(name: str) -> Any:
    raise ConfigError(f"holds {name}, which is not a number (JSON has no NaN or Infinity)")


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json.loads``' object hook: the object as a dict, refusing a key given twice with different values. json
    (and so transformers' ``PretrainedConfig``) silently keeps the last one: ``"num_hidden_layers": 16`` then ``160``
    is a model ten times the size without a word. The same value twice is harmless and kept.

    Raises:
        ValueError: a key twice with different values (the callers word it with the file's name).
    """
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out and out[key] != value:
            raise DuplicateKey(key, out[key], value)
        out[key] = value
    return out


class DuplicateKey(ValueError):
    """A JSON object's key given twice with different values (:func:`unique_keys`)."""

    def __init__(self, key: str, first: Any, last: Any, reader: str = "JSON") -> None:
        super().__init__(f"has the key {key[:60]!r} twice, with different values ({_short(first)} and {_short(last)}); "
                         f"a {reader} reader would keep the last one without a word: keep one")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def load_config_json(data: str | bytes, name: str = "config.json") -> Any:
    """``json.loads`` with every number range-checked: integers of at most :data:`MAX_INT_DIGITS` digits, finite
    floats, no ``NaN`` / ``Infinity`` (which Python's json accepts and JSON does not); a key given twice with different
    values is refused (:func:`unique_keys`), not read as its last value.

    Raises:
        ConfigError: such a number or key, named with ``name`` (one line).
        json.JSONDecodeError, UnicodeDecodeError, RecursionError: as ``json.loads`` (the callers word them).
    """
    try:
        return json.loads(data, parse_int=_int, parse_float=_float, parse_constant=_constant, object_pairs_hook=unique_keys)
    except DuplicateKey as exc:
        raise ConfigError(f"{name} {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{name} {exc}: check the file") from None

def read_value(config: dict[str, Any], *keys: str, default: Any = None, required: bool = True) -> Any:
    """First present, non-null key of ``keys``; ``ConfigError`` naming the keys when required and absent."""
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    if required and default is None:
        raise ConfigError(f"config.json has no '{keys[0]}'" + (f" (nor {', '.join(keys[1:])})" if keys[1:] else ""))
    return default


def _shown(value: int) -> str:
    """A large integer as people can read it in a one-line message."""
    text = f"{value:,}"
    return text if len(text) <= 30 else f"a {len(str(value)):,}-digit number"


MAX_SIZE = 1 << 24
"""Largest size accepted for any config dimension (16,777,216): above every published model (the largest
vocabularies are ~256k, hidden sizes ~16k), so a larger value is a typo, not a model."""


def read_size(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    """A strictly positive integer size from the config, at most :data:`MAX_SIZE`."""
    value = read_value(config, *keys, default=default)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"config.json field '{keys[0]}' must be a positive integer, got {_value_shown(value)}")
    if value > MAX_SIZE:
        raise ConfigError(f"config.json field '{keys[0]}' is {_shown(value)}, implausibly large (at most {MAX_SIZE:,})")
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
    """A boolean switch; absent or null means the config class's ``default``.

    Raises:
        ConfigError: a value that is not true or false: ``"false"`` (a string, which ``bool()`` would read as true),
            ``0`` / ``1``, a list. Such a config is a hand edit gone wrong, and guessing either way moves the count.
    """
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ConfigError(f"config.json field '{key}' must be true or false, got {_value_shown(value)}")
    return value


def read_optional_size(config: dict[str, Any], key: str) -> int | None:
    """An optional positive integer size (``max_position_embeddings``, ``sliding_window``): None when absent or null,
    else as :func:`read_size` (a string, a fraction, a bool, zero or a huge value refused naming the key)."""
    return None if config.get(key) is None else read_size(config, key)


def _value_shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


