"""Nothing a visitor types, nor a link carries, is drawn as Markdown by the app (issue 25 item 1): payloads of
Markdown links and images, raw HTML, bare URLs (GitHub-flavoured auto-links), e-mail addresses and Streamlit's colour
and icon shortcodes go into every text input and every link key; every element that shows them must show them as
typed (``ui.formats.md_plain``), never as live syntax. What Streamlit's frontend renders from the escaped text (no
anchor, no image, no backslash) is checked in headless Chromium by tests/e2e/test_browser.py; here the Markdown each
element is sent with is checked: no unescaped ``[`` ... ``](``, ``<tag``, ``http://``, ``www.``, ``a@b`` or
``:name[``.

The old model picker drew ``st.error(str(exc))``: the repo id ``[Sign in again](http://example.invalid/x)`` became a
live link in the app's own red box (the first row below fails on that code).
"""

from __future__ import annotations

import re

import pytest

from apptest_support import hub, no_exception, shown
from ui.share import PARSERS

MARK = "ZQX"  # in every payload, to find the elements that show one
PAYLOADS = {
    "md_link": f"[Sign in again {MARK}](http://example.invalid/x)",
    "md_image": f"![{MARK}](http://example.invalid/i.png)",
    "html": f"<a href='http://example.invalid/h'>{MARK}</a><b>bold</b>",
    "bare_url": f"{MARK} see http://example.invalid/login now",
    "www": f"{MARK} www.example.invalid/y",
    "email": f"{MARK} admin@example.invalid",
    "shortcodes": f":red[{MARK}] :material/home: **{MARK}**",
}
# Live Markdown in the text sent: an unescaped '[' ... '](' link or image, an HTML tag, an auto-link, a shortcode.
LIVE = [
    re.compile(r"(?<!\\)\[[^\]]*(?<!\\)\]\("),
    re.compile(r"(?<!\\)<[A-Za-z/]"),
    re.compile(r"(?i)\bhttps?://"),
    re.compile(r"(?i)\bwww\\?\.(?!\u200b)"),
    re.compile(r"[A-Za-z0-9]@[A-Za-z0-9]"),
    re.compile(r":(red|blue|green|orange|violet|gray|grey|rainbow|primary|material)[\[/]"),
    re.compile(r"(?<!\\)\*\*" + MARK),
]

MARKDOWN_ELEMENTS = ("error", "warning", "info", "success", "caption", "markdown", "subheader", "header", "title",
                     "toast", "exception")


def _shown_with_payload(at) -> list[str]:
    out = []
    for kind in MARKDOWN_ELEMENTS:
        for el in getattr(at, kind, []):
            value = getattr(el, "value", "")
            if isinstance(value, str) and MARK in value:
                out.append(value)
    return out


def live_markdown(at) -> list[str]:
    """The messages holding a payload with any live Markdown left in them."""
    return [v for v in _shown_with_payload(at) if any(p.search(v) for p in LIVE)]


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_repo_id_payload_is_shown_as_typed(new_app, hub_stub, name):
    at = hub(new_app().run(), PAYLOADS[name])
    no_exception(at)
    assert live_markdown(at) == []
    seen = [shown(v) for v in _shown_with_payload(at)]
    assert seen, "the repo id is quoted back in the error"
    assert all("\\" not in s for s in seen)  # no escaping backslash is left for the visitor to see


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_revision_payload_is_shown_as_typed(new_app, hub_stub, name):
    # The repo exists on the stub; the revision does not: the Hub's answer quotes it ("Revision ... does not exist").
    from engine.model.sources import config_from_catalog
    from hubstub import StubRepo

    hub_stub.add("acme/exists", StubRepo(config=config_from_catalog("meta-llama/Llama-3.2-1B")[0]))
    at = new_app().run()
    at.radio(key="model_source").set_value("Hub repo id").run()
    at.text_input(key="hub_revision").input(PAYLOADS[name])
    at.text_input(key="hub_repo_id").input("acme/exists").run()
    no_exception(at)
    assert live_markdown(at) == []
    assert any(MARK in shown(e.value) for e in at.error), [e.value for e in at.error]


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_pasted_training_config_payloads_are_shown_as_typed(new_app, name):
    # The payload as a key (unsupported), as the model name (the picker's error after Apply) and as a value.
    text = f'"{PAYLOADS[name]}": 1\nmicro_batch_size: 2\nbase_model: "{PAYLOADS[name]}"\n'
    at = new_app().run()
    at.text_area(key="cfg_import_text").input(text).run()
    no_exception(at)
    assert live_markdown(at) == []
    text = f'base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: "{PAYLOADS[name]}"\n'
    at.text_area(key="cfg_import_text").input(text).run()
    no_exception(at)
    assert live_markdown(at) == []
    assert any(MARK in shown(e.value) for e in at.error)


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_plan_name_payload_is_shown_as_typed(new_app, name):
    at = new_app().switch_page("pages/plans.py").run()
    at.text_input(key="plan_name").input(PAYLOADS[name]).run()
    at.button(key="plan_save").click().run()
    at.button(key="plan_save").click().run()  # the clash warning quotes the name
    no_exception(at)
    assert live_markdown(at) == []
    assert any(MARK in shown(v) for v in _shown_with_payload(at))


LINK_KEYS = [*PARSERS, "model", "lora_targets", PAYLOADS["md_link"]]


@pytest.mark.parametrize("name", list(PAYLOADS))
def test_every_link_key_with_a_payload_is_shown_as_typed(new_app, name):
    # Every key of the link (each widget's, the model's, an unknown one named by a payload) carries the payload.
    at = new_app()
    for key in LINK_KEYS:
        at.query_params[key] = PAYLOADS[name]
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    assert live_markdown(at) == []
    ignored = " ".join(shown(w.value) for w in at.warning)
    assert "Some settings in the link were ignored" in ignored and MARK in ignored
    # The Hub's pair of keys: the repo id and the revision.
    at = new_app()
    at.query_params["hub"], at.query_params["rev"] = "acme/x", PAYLOADS[name]
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    assert live_markdown(at) == []


def test_the_phishing_link_of_the_issue(new_app, hub_stub):
    at = new_app()
    at.query_params["hub"] = "[Sign in again](http://example.invalid/x)"
    at.switch_page("pages/memory.py").run()
    no_exception(at)
    boxes = [e.value for e in at.error] + [w.value for w in at.warning]
    assert any("Sign in again" in shown(b) for b in boxes), boxes
    assert not any(p.search(b) for b in boxes for p in LIVE), boxes
