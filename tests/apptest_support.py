"""Helpers shared by the Streamlit AppTest modules."""

from __future__ import annotations

import json

from streamlit.testing.v1 import AppTest


def no_exception(at: AppTest) -> None:
    """Fail with the exception texts when the app raised."""
    assert not at.exception, [e.value for e in at.exception]


def charts(at: AppTest) -> list[dict]:
    """The Plotly figure specs the page drew, in order."""
    return [json.loads(c.proto.spec) for c in at.get("plotly_chart")]


def metric(at: AppTest, label: str) -> str:
    """The value of the st.metric with ``label``."""
    return next(m.value for m in at.metric if m.label == label)
