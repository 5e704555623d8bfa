"""Helpers shared by the Streamlit AppTest modules."""

from __future__ import annotations

import json
import re

from streamlit.testing.v1 import AppTest


def shown(markdown: str) -> str:
    """What a user reads of an alert's Markdown: ui.formats.md_plain's backslash escapes and zero-width spaces
    removed."""
    return re.sub(r"\\(.)", r"\1", markdown).replace("\u200b", "")


def warnings_shown(at: AppTest) -> list[str]:
    """Every st.warning of the run as the user reads it (escapes removed)."""
    return [shown(w.value) for w in at.warning]


def no_exception(at: AppTest) -> None:
    """Fail with the exception texts when the app raised."""
    assert not at.exception, [e.value for e in at.exception]


def charts(at: AppTest) -> list[dict]:
    """The Plotly figure specs the page drew, in order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def metric(at: AppTest, label: str) -> str:
    """The value of the st.metric with ``label``."""
    return next(m.value for m in at.metric if m.label == label)


def rendered_text(at: AppTest) -> str:
    """Everything the app sent to the browser: every element's protobuf and repr, recursively from the root."""
    parts: list[str] = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        parts.append(repr(node))
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main.root)
    return "\n".join(parts)


def open_link(at: AppTest, page: str, params: dict[str, str]) -> AppTest:
    """``at`` opened on ``page`` with ``params`` as the link's query (a fresh session reading a shared link), run once,
    without an exception box."""
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page(page).run()
    no_exception(at)
    return at


def hub(at: AppTest, repo_id: str, token: str | None = None) -> AppTest:
    if at.radio(key="model_source").value != "Hub repo id":
        at.radio(key="model_source").set_value("Hub repo id").run()
        no_exception(at)
    if token is not None:
        at.text_input(key="hf_token_input").input(token)
    at.text_input(key="hub_repo_id").input(repo_id).run()
    no_exception(at)
    return at


def table(at: AppTest, column: str):
    """The first st.dataframe with ``column`` (AppTest does not expose a dataframe's key)."""
    return next(d for d in at.dataframe if column in d.value.columns)


def column_config(frame) -> dict:
    """The column_config an st.dataframe was drawn with: {column: {"label": ..., "type_config": {...}}}."""
    return json.loads(frame.proto.columns or "{}")
