"""Shared pytest fixtures. Add new fixtures below; keep each one self-contained."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from hubstub import HubStub
from reference import AVAILABLE, MISSING_REASON


def pytest_configure(config: pytest.Config) -> None:
    # Locally, tests that compare against ../shared/reference skip when it is absent; CI must never
    # pass by skipping them.
    if os.environ.get("CI") and not AVAILABLE:
        raise pytest.UsageError(f"CI run without reference data: {MISSING_REASON}")


@pytest.fixture
def hub_stub(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[HubStub]:
    """A running local Hub stub (see tests/hubstub.py) that ``HF_ENDPOINT`` points at.

    The stub starts empty: add repos with ``hub_stub.add("owner/name", StubRepo(...))`` and known tokens with
    ``hub_stub.valid_tokens.add("hf_...")``. No real token of the machine is sent: ``HF_TOKEN`` is unset and
    ``HF_HOME`` (and huggingface_hub's import-time token path) point into ``tmp_path``. Offline mode is off.
    """
    from huggingface_hub import constants as hf_constants

    hf_home = tmp_path / "hf_home"
    hf_home.mkdir()
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "HF_HUB_DISABLE_IMPLICIT_TOKEN",
                "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    # huggingface_hub reads these once at import, so the env vars above alone would not take effect.
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(hf_home / "token"), raising=False)
    monkeypatch.setattr(hf_constants, "HF_STORED_TOKENS_PATH", str(hf_home / "stored_tokens"), raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False, raising=False)
    monkeypatch.setattr(hf_constants, "HF_HUB_DISABLE_IMPLICIT_TOKEN", False, raising=False)

    stub = HubStub().start()
    monkeypatch.setenv("HF_ENDPOINT", stub.url)
    try:
        yield stub
    finally:
        stub.stop()


@pytest.fixture(autouse=True)
def _fresh_streamlit_cache():
    """The app caches public Hub reads with st.cache_data (process-wide): every test starts and ends empty."""
    import streamlit as st

    st.cache_data.clear()
    yield
    st.cache_data.clear()


@pytest.fixture(autouse=True)
def _own_plans_database(monkeypatch, tmp_path):
    """Every test's app saves plans in its own empty SQLite file (ui/plan_store.py), never in the checkout's."""
    monkeypatch.setenv("FINETUNE_FIT_PLANS_URL", f"sqlite:///{tmp_path / 'plans.sqlite'}")


APP = str(Path(__file__).resolve().parents[1] / "streamlit_app.py")


@pytest.fixture(params=["first_request", "served"])
def new_app(request, monkeypatch):
    """A factory of AppTests of streamlit_app.py, in two modes.

    ``first_request``: the test's first run is a fresh server's first request: with a ``pages/`` folder, Streamlit's
    legacy path runs the page file without the entrypoint, and the app reroutes it through ``st.navigation``
    (ui.layout.page_setup); every later run is served as a real server then serves it. (AppTest alone would reset
    Streamlit's process-wide flag before every run, which no server does.) ``served``: the flag off from the start,
    as on a server where any session has already run ``st.navigation``.
    """
    from streamlit.testing.v1 import AppTest
    import streamlit.testing.v1.app_test as app_test_module
    from streamlit.runtime.pages_manager import PagesManager

    runs = {"count": 0}

    class _Server(PagesManager):
        def __init__(self, *args, **kwargs):
            if request.param == "served" or runs["count"] > 0:
                PagesManager.uses_pages_directory = False  # after the entrypoint's st.navigation on this server
            else:
                PagesManager.uses_pages_directory = None  # a fresh server: decided from the pages/ folder
            runs["count"] += 1
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(app_test_module, "PagesManager", _Server)
    monkeypatch.setattr(PagesManager, "uses_pages_directory", PagesManager.uses_pages_directory)

    def make() -> AppTest:
        return AppTest.from_file(APP, default_timeout=60)

    return make
