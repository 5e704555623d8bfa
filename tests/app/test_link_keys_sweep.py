"""Every link key of ui.share.PARSERS at once with one bad value (issue 25: a link never shows a different scenario
than it says without a word): each key is named in the "ignored" warning, nothing raises; and a link that names two
models, or a revision without a repo, says which it opened instead of dropping one silently.

The sweep is a catalogue of what a careless or hostile link carries: empty values, nan, inf, 1e30, -1, a 5,000-digit
number, Markdown and HTML. A value valid for some keys ("0", "1") is not in it.
"""

from __future__ import annotations

import pytest

from apptest_support import no_exception, open_link, warnings_shown
from ui.share import PARSERS

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


@pytest.mark.parametrize("value", ["", "nan", "inf", "1e30", "-1", "9" * 5000, "[x](http://example.invalid/y)",
                                   "<b>x</b>", "fp33"], ids=["empty", "nan", "inf", "1e30", "-1", "5000-digits",
                                                             "markdown", "html", "fp33"])
def test_every_key_with_a_bad_value_is_named_in_the_warning(new_app, value):
    at = new_app()
    for key in PARSERS:
        at.query_params[key] = value
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    assert [key for key in PARSERS if f"{key}=" not in text] == []
    assert len(text) < 60_000  # a 5,000-digit value is quoted cut, not 60 times whole


def test_a_link_naming_a_catalog_model_and_a_hub_repo_says_which_it_opened(new_app):
    # Before: model= won and hub= was dropped without a word (the reader thought the Qwen repo was estimated).
    at = new_app()
    at.query_params["model"] = "meta-llama/Llama-3.2-1B"
    at.query_params["hub"] = "Qwen/Qwen2.5-7B"
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    assert at.session_state["catalog_repo"] == "meta-llama/Llama-3.2-1B"
    assert ("hub='Qwen/Qwen2.5-7B': the link also gives model='meta-llama/Llama-3.2-1B', which is the one opened"
            in " ".join(warnings_shown(at)))


@pytest.mark.parametrize("rev, quoted", [("v2.0", "rev='v2.0'"), (TOKEN, "rev=<redacted>")])
def test_a_revision_without_a_hub_repo_is_said_ignored(new_app, rev, quoted):
    at = new_app()
    at.query_params["model"] = "meta-llama/Llama-3.2-1B"
    at.query_params["rev"] = rev
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    assert "a revision of a Hub repo, and the link gives no hub=" in text and TOKEN not in text
    assert quoted.split("=")[0] in text


def test_a_huge_hub_value_or_unknown_key_is_quoted_cut(new_app):
    at = new_app()
    at.query_params["hub"] = "a" * 5000
    at.query_params["k" * 5000] = "1"
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    assert "(5,000 characters)" in text and "a" * 100 not in text and "k" * 100 not in text


def test_unknown_lora_targets_in_a_link_are_listed_cut(new_app):
    at = new_app()
    at.query_params["method"] = "lora"
    at.query_params["lora_targets"] = ",".join([f"t{i}" for i in range(30)] + ["z" * 5000, TOKEN])
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    text = " ".join(warnings_shown(at))
    assert "LoRA targets in the link not in this model were ignored: t0, t1" in text and "and 22 more" in text
    assert "z" * 100 not in text and TOKEN not in text


@pytest.mark.parametrize("params, note", [
    ({"fused_ce": "true", "loss_implementation": "megatron"},
     "loss_implementation='megatron': not used, fused_ce=true runs Liger's fused loss"),
    ({"loss_implementation": "torchtitan", "transformers_version": "<=4.45"},
     "transformers_version='<=4.45': not used, the transformers release decides only the Hugging Face loss"),
])
def test_a_link_setting_the_scenario_does_not_use_is_said(new_app, params, note):
    # Before: the sidebar greyed the box out and the estimate ran Liger's loss, while the link read "megatron".
    at = open_link(new_app(), "pages/memory.py", params)
    assert note in " ".join(warnings_shown(at))


def test_a_link_the_app_writes_by_default_gets_no_such_note(new_app):
    at = new_app().switch_page("pages/memory.py").run()
    written = dict(at.query_params)
    again = new_app()
    for key, value in written.items():
        again.query_params[key] = value if isinstance(value, str) else value[0]
    again.switch_page("pages/memory.py").run()
    no_exception(again)
    assert not any("not used" in w or "ignored" in w for w in warnings_shown(again)), warnings_shown(again)
