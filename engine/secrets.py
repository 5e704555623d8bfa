"""Text that may be a Hugging Face access token, kept out of messages, links and files.

Users paste tokens into the wrong box (a repo id, a revision, a link). The Hub issues user access tokens as ``hf_``
followed by letters and digits (huggingface_hub 2.x documentation, "User access tokens"); any text that starts so is
treated as a token: never echoed in a message, never written to a URL (:func:`redacted`, :func:`looks_like_token`).
"""

from __future__ import annotations

TOKEN_PREFIX = "hf_"

REDACTED = "(text that looks like a Hugging Face token: not shown)"


def looks_like_token(text: object) -> bool:
    """True when ``text`` (after surrounding whitespace) starts like a Hub access token (``hf_``)."""
    return isinstance(text, str) and text.strip().lower().startswith(TOKEN_PREFIX)


def redacted(text: str) -> str:
    """``text``, or :data:`REDACTED` in its place when it looks like a token."""
    return REDACTED if looks_like_token(text) else text
