"""Typed exceptions raised by the engine.

Every error the engine raises on bad input derives from :class:`EngineError`, so a UI or CLI can catch
one class and show its message; the message always says what was wrong and what to do instead.
"""

from typing import Any

from engine.secrets import redact_tokens


class EngineError(Exception):
    """Base class of every error the engine raises on bad input or an unreachable source. A token-looking word in
    the message (a token pasted into the wrong box, quoted back) is replaced on the way in
    (:func:`engine.secrets.redact_tokens`), so no message of the engine can show one."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*(redact_tokens(a) for a in args))


class ConfigError(EngineError):
    """A model config is malformed: not JSON, not an object, or missing/invalid sizes."""


class UnsupportedModelError(ConfigError):
    """The config's ``model_type`` is not one the engine can count exactly."""


class ScenarioError(EngineError):
    """A training scenario is invalid (e.g. batch size 0, unknown LoRA target, flash attention in fp32)."""


class CatalogError(EngineError):
    """A bundled data file (model or GPU catalog) is missing or does not validate."""


class AmbiguousGpuError(CatalogError):
    """A GPU name fits several GPUs of the catalog and is no GPU's alias, so the catalog declares no default for it
    ("A100 SXM": 40GB or 80GB; "A100" is the A100 80GB's alias and resolves to it with a note); ``candidates`` are
    their catalog names, which the message lists."""

    def __init__(self, message: str, candidates: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.candidates = candidates


class HubError(EngineError):
    """Base class of errors met while reading a config from the Hugging Face Hub."""


class InvalidRepoIdError(HubError):
    """The text is not a valid Hub repo id (``owner/name``)."""


class RepoNotFoundError(HubError):
    """The repo (or the revision, or its config.json) does not exist, or is private and the token has no access."""


class GatedRepoError(HubError):
    """The repo is gated: a token with accepted terms is needed."""


class HubUnavailableError(HubError):
    """The Hub could not be reached (no network, timeout, 5xx). ``reason`` says how, in a few words."""

    reason: str = "no answer"


class TrainingConfigError(EngineError):
    """A training config file (TrainingArguments, axolotl, DeepSpeed, ...) cannot be imported: not JSON or YAML, too
    large or too deeply nested, a key of the wrong type, a format the importer does not recognise, no model named."""


class ConflictingKeysError(TrainingConfigError):
    """Keys of one config, or of configs of different formats, set one setting to different values (``bf16`` and
    ``fp16`` both true; a DeepSpeed micro batch that differs from ``per_device_train_batch_size``)."""


def _shown(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (a 5,000-digit number stays a one-line message)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def explain_validation(exc: Any, default_where: str = "", *, all_errors: bool = False) -> str:
    """A pydantic ``ValidationError`` as one line: ``field: what is wrong (got value)``.

    ``default_where`` names the object when the error is not about one field (a model validator); with
    no name, only the message is given. ``all_errors`` joins every error with "; " (else the first).
    """
    errors = exc.errors() if all_errors else exc.errors()[:1]
    parts = []
    for err in errors:
        where = ".".join(str(p) for p in err["loc"]) or default_where
        message = err["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message} (got {_shown(err.get('input'))})" if where else message)
    return "; ".join(parts)



def validated_row(model: Any, row: dict[str, Any], label: str) -> Any:
    """``model.model_validate(row)`` for a row of a bundled or edited table; a bad row raises
    :class:`CatalogError` named by ``label`` (file, line, row) with the one-line reason."""
    from pydantic import ValidationError

    try:
        return model.model_validate(row)
    except ValidationError as exc:
        raise CatalogError(f"{label}: {explain_validation(exc)}") from None

def named_record(records: dict[str, Any], name: str | None, default: str, kind: str) -> Any:
    """The record of a registry (``records``: name -> record) called ``name``, case and spacing ignored; None:
    ``default``'s. One lookup for every registry (frameworks, network fabrics).

    Raises:
        ScenarioError: no record of that name (the message names ``kind`` and lists the known names).
    """
    key = (name or default).strip().lower()
    if key not in records:
        raise ScenarioError(f"unknown {kind} {name!r}: one of {', '.join(records)}")
    return records[key]


class TraceError(EngineError):
    """Base class of the errors of the fake-tensor tracer (:mod:`engine.trace`)."""


class TraceUnavailableError(TraceError):
    """The optional ``[trace]`` extra (torch, transformers, peft) is not installed, or its extension cannot be built."""


class NotTraceableError(TraceError):
    """The scenario needs CUDA kernels that fake tensors cannot run (bitsandbytes 4-bit weights or 8-bit/paged optimizers)."""


class TraceModelTypeError(TraceError, UnsupportedModelError):
    """The config's ``model_type`` is not a causal-LM architecture of the installed transformers."""


class TraceFailedError(TraceError):
    """The trace ran but failed (an error inside torch/transformers/peft) or ran past its time limit."""
