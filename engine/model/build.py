"""From a ``config.json`` dict to an :class:`~engine.model.architecture.Architecture`.

Dispatches on ``model_type`` to the builders of :mod:`engine.model.families`, attaches the checkpoint's stored
weight format (:mod:`engine.model.quantization`), and offers a Llama-style approximation for a type the engine
cannot count exactly.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from engine.errors import ConfigError, UnsupportedModelError, explain_validation
from engine.model.architecture import Architecture
from engine.model.families import BUILDERS
from engine.model.quantization import stored_quantization

SUPPORTED_MODEL_TYPES: tuple[str, ...] = tuple(sorted(BUILDERS))
"""``model_type`` values the engine counts exactly: the keys of ``engine.model.families.BUILDERS`` (a family is
added there only)."""


def architecture_from_config(config: dict[str, Any]) -> Architecture:
    """Build the :class:`Architecture` of a Hugging Face ``config.json`` dict.

    Args:
        config: the parsed JSON object. Unknown keys are ignored.

    Raises:
        ConfigError: not a dict, or a needed size is missing, non-integer, zero or negative, or another value of the
            wrong type (named by its field).
        UnsupportedModelError: ``model_type`` is absent or not in :data:`SUPPORTED_MODEL_TYPES`.
    """
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a JSON object, got {type(config).__name__}")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise UnsupportedModelError(
            "config.json has no 'model_type'; supported types: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    builder = BUILDERS.get(model_type)
    if builder is None:
        raise UnsupportedModelError(
            f"model_type '{model_type}' is not supported yet; supported types: " + ", ".join(SUPPORTED_MODEL_TYPES)
        )
    try:
        return _with_quantization(builder(config, model_type), config)
    except ValidationError as exc:  # a value no builder reader checks (checked readers raise ConfigError themselves)
        raise ConfigError(f"config.json: {explain_validation(exc)}") from None


def _with_quantization(arch: Architecture, config: dict[str, Any]) -> Architecture:
    """Attach the checkpoint's stored weight format (``quantization_config``), if any."""
    stored = stored_quantization(config)
    return arch.model_copy(update={"stored_quantization": stored}) if stored else arch


def approximate_architecture(config: dict[str, Any]) -> Architecture:
    """A Llama-style stand-in for a ``model_type`` the engine cannot count exactly.

    Built from the sizes most decoder configs share (``hidden_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads``, ``head_dim``, ``intermediate_size``,
    ``vocab_size``, ``tie_word_embeddings``), looking inside ``text_config`` when the top level has none.
    The result is marked ``approximate_from`` with the real model_type, so every page can say the counts
    are approximate; the checkpoint's own count (engine.model.checkpoint) is the number to trust.

    Raises:
        ConfigError: the config lacks those sizes (nothing sensible can be estimated).
    """
    if not isinstance(config, dict):
        raise ConfigError(f"a config must be a JSON object, got {type(config).__name__}")
    source = config
    if not isinstance(config.get("hidden_size"), int) and isinstance(config.get("text_config"), dict):
        source = config["text_config"]
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "tie_word_embeddings", "max_position_embeddings")
    stand_in = {k: source[k] for k in keys if source.get(k) is not None}
    stand_in["model_type"] = "llama"
    try:
        arch = architecture_from_config(stand_in)
    except ConfigError as exc:
        raise ConfigError(
            f"model_type '{config.get('model_type')}' is not supported and its config lacks the usual sizes ({exc})"
        ) from None
    return _with_quantization(arch.model_copy(update={"approximate_from": str(config.get("model_type"))}), config)


def architecture_or_approximation(config: dict[str, Any]) -> tuple[Architecture, str | None]:
    """The exact architecture, or for an unsupported ``model_type`` an approximate one and a notice.

    Raises:
        ConfigError: malformed config, or an unsupported type without the usual sizes (the message says
            which types are supported).
    """
    try:
        return architecture_from_config(config), None
    except UnsupportedModelError as exc:
        if not isinstance(config, dict) or not config.get("model_type"):
            raise
        try:
            arch = approximate_architecture(config)
        except ConfigError:
            raise exc from None
    notice = (
        f"model_type '{arch.approximate_from}' is not counted exactly yet: it is estimated as a Llama-style decoder "
        f"with the same sizes ({arch.total_parameters:,} parameters, approximate). Compare with the checkpoint's "
        "own count on the Model page."
    )
    return arch, notice
