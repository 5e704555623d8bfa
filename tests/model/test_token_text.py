"""A Hugging Face token pasted into the wrong box (repo id, revision, a link) is never echoed in a message or written
to a URL (engine.secrets; the developers' guide: "A Hugging Face token is never shown, logged, exported or put in a
URL"). Tokens are 'hf_' + letters and digits (huggingface_hub's user access tokens)."""

from __future__ import annotations

import pytest

from engine.errors import HubError
from engine.model.hub import validate_repo_id
from engine.model.sources import catalog_fallback
from engine.errors import HubUnavailableError
from engine.secrets import REDACTED, looks_like_token, redacted

SECRET = "hf_SUPERSECRETTOKEN123"


def test_token_like_text_is_recognised_and_redacted():
    assert looks_like_token(SECRET) and looks_like_token("  HF_abc ") and not looks_like_token("meta-llama/hf_x")
    assert redacted(SECRET) == REDACTED and redacted("main") == "main"


@pytest.mark.parametrize("text", [SECRET, "hf_owner/name", "  hf_abc  "])
def test_a_token_in_the_repo_id_box_is_refused_without_repeating_it(text):
    with pytest.raises(HubError) as err:
        validate_repo_id(text)
    assert text.strip() not in str(err.value) and "SECRET" not in str(err.value) and REDACTED in str(err.value)


def test_a_token_as_revision_is_not_repeated_in_the_fallback_notice():
    _, origin = catalog_fallback("meta-llama/Llama-3.2-1B", HubUnavailableError("offline"), revision=SECRET)
    assert SECRET not in origin.notice and REDACTED in origin.notice
    _, plain = catalog_fallback("meta-llama/Llama-3.2-1B", HubUnavailableError("offline"), revision="v1.0")
    assert "'v1.0' could not be checked" in plain.notice
