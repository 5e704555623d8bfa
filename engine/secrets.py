"""Text that may be a Hugging Face access token, kept out of messages, links, files and Hub requests.

Users paste tokens into the wrong box (a repo id, a revision, a link, a training config's ``base_model``). The Hub
issues user access tokens as ``hf_`` followed by letters and digits (huggingface_hub 2.x documentation, "User access
tokens"; 34 letters today). Two rules:

- a whole value that starts with ``hf_`` (any case, after surrounding whitespace) is a token (:func:`looks_like_token`
  on a value alone), and so is a value holding a token-looking word anywhere (``meta-llama/hf_...``): such a value is
  never echoed in a message and never sent to the Hub as a repo id or revision;
- inside longer text (an error message, CLI JSON), every token-looking word (:data:`TOKEN_WORD`: ``hf_`` at the start
  of a word followed by at least 8 token characters) is replaced by :data:`REDACTED_WORD` (:func:`redact_tokens`).
  Eight characters keep the project's own words ("HF_TOKEN" is upper case, "hf_home" is short) while a real token
  has 34.
"""

from __future__ import annotations

import re
from typing import Any

TOKEN_PREFIX = "hf_"

REDACTED = "(text that looks like a Hugging Face token: not shown)"
REDACTED_WORD = "hf_…(token-like text not shown)"
TOKEN_WORD = re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9_\-]{8,}")


def looks_like_token(text: object) -> bool:
    """True when ``text`` (after surrounding whitespace) starts like a Hub access token (``hf_``), or holds a
    token-looking word anywhere (``meta-llama/hf_AbCdEfGh...``)."""
    return isinstance(text, str) and (text.strip().lower().startswith(TOKEN_PREFIX) or TOKEN_WORD.search(text) is not None)


def redacted(text: str) -> str:
    """``text``, or :data:`REDACTED` in its place when it looks like a token."""
    return REDACTED if looks_like_token(text) else text


def redact_tokens(text: Any) -> Any:
    """``text`` with every token-looking word replaced by :data:`REDACTED_WORD` (non-text passes through)."""
    return TOKEN_WORD.sub(REDACTED_WORD, text) if isinstance(text, str) else text


def redact_values(value: Any) -> Any:
    """A parsed document (dicts, lists, scalars) with every string value that :func:`looks_like_token` replaced by
    :data:`REDACTED` (keys are kept: they are the tool's names)."""
    if isinstance(value, dict):
        return {k: redact_values(v) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_values(v) for v in value]
    return redacted(value) if isinstance(value, str) else value
