"""A Hugging Face token is never rendered, logged, cached under a shared key, exported or put in a URL, and nothing
downloaded is executed (issue #10).

A known fake token reaches the app in each of the three documented ways (``HF_TOKEN`` on the server, ``st.secrets``,
the sidebar's password field) while a session reads a gated repo from the local Hub stub (tests/hubstub.py) and
visits every page. Then it is searched for in everything the app sent (every element of the main area and the
sidebar, as protobuf), in ``st.query_params``, in every file a download button offers (the CSV exports), in every
log record of every logger at DEBUG level (streamlit's, huggingface_hub's, httpx's) and in the process's
stdout/stderr. The stub proves the token was really used (its requests are recorded as accepted).
"""

from __future__ import annotations

import json
import logging

import pytest
import streamlit.testing.v1.app_test as app_test_module
from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage
from streamlit.testing.v1 import AppTest

from apptest_support import hub, no_exception, rendered_text as sent_to_browser, shown
from engine.model.sources import config_from_catalog
from hubstub import StubRepo

TOKEN = "hf_TokenSafetyFake_NeverShowMe_7Q3x"
QWEN_05B = "Qwen/Qwen2.5-0.5B"
QWEN_05B_PARAMS = 494_032_768  # ../shared/reference/configs/param_counts.json unique_parameters
QWEN = config_from_catalog(QWEN_05B)[0]
GATED = "acme/gated-qwen"
PUBLIC = "acme/public-qwen"
PAGES = ["pages/memory.py", "pages/model.py", "pages/fit.py", "pages/time_cost.py", "pages/plans.py",
         "pages/gpus.py", "pages/methodology.py"]


# --- capture helpers --------------------------------------------------------------------------------------------------


class _RecordingStorage(MemoryMediaFileStorage):
    """AppTest's in-memory media storage, keeping every file a run hands to it (download buttons' data)."""

    files: list[tuple[str | None, bytes]] = []

    def load_and_get_id(self, path_or_data, mimetype, kind, filename=None):  # noqa: ANN001 - Streamlit's signature
        data = path_or_data if isinstance(path_or_data, bytes) else str(path_or_data).encode()
        _RecordingStorage.files.append((filename, data))
        return super().load_and_get_id(path_or_data, mimetype, kind, filename)


@pytest.fixture
def downloads(monkeypatch) -> list[tuple[str | None, bytes]]:
    _RecordingStorage.files = []
    monkeypatch.setattr(app_test_module, "MemoryMediaFileStorage", _RecordingStorage)
    return _RecordingStorage.files


class _ListHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(f"{record.name}: {text}")


@pytest.fixture
def all_logs():
    """Every logger (root, streamlit.*, huggingface_hub.*, httpx2/httpcore, ...) at DEBUG into one list."""
    handler = _ListHandler()
    names = ["", "streamlit", "huggingface_hub", "httpx", "httpx2", "httpcore", "urllib3", "engine", "ui",
             *logging.root.manager.loggerDict]
    saved, quieted = [], []
    for name in dict.fromkeys(names):
        logger = logging.getLogger(name)
        saved.append((logger, logger.level))
        for other in logger.handlers:  # the loggers' own handlers (streamlit's writes to a stderr pytest may close)
            quieted.append((other, other.level))
            other.setLevel(logging.CRITICAL + 1)
        logger.setLevel(logging.DEBUG)
        logger.addHandler(handler)
    try:
        yield handler.lines
    finally:
        for logger, level in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
        for other, level in quieted:
            other.setLevel(level)


def parameters_help(at: AppTest) -> str:
    return next(m.help for m in at.metric if m.label == "Parameters")


# --- the token never leaves ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("source", ["env", "secrets", "password_field"])
def test_token_never_rendered_exported_logged_or_in_the_url(new_app, hub_stub, monkeypatch, downloads, all_logs,
                                                             capfd, source):
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(GATED, StubRepo(config=QWEN, gated=True))
    if source == "env":
        monkeypatch.setenv("HF_TOKEN", TOKEN)
    at = new_app()
    if source == "secrets":
        at.secrets["HF_TOKEN"] = TOKEN
    at.run()
    no_exception(at)
    hub(at, GATED, token=TOKEN if source == "password_field" else None)
    assert at.error.values == [], at.error.values
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in parameters_help(at)  # the gated config was read...
    assert any(r.token_accepted for r in hub_stub.requests_for(GATED))  # ...with the token

    seen: list[str] = []
    for page in PAGES:
        at.switch_page(page).run()
        no_exception(at)
        if source == "password_field" and not at.text_input(key="hf_token_input").value:
            # multipage-v1 path (a fresh server's first request): the page draws its own picker, whose password field
            # is deliberately not carried over (ui/layout.py), so the user types the token again.
            at.text_input(key="hf_token_input").input(TOKEN).run()
            no_exception(at)
        if page == "pages/plans.py":
            at.button(key="plan_save").click().run()  # a saved plan brings the plans CSV downloads
            no_exception(at)
            assert len(at.session_state["saved_plans"]) == 1
        seen.append(sent_to_browser(at))
        assert TOKEN not in json.dumps(dict(at.query_params)), page
    at.switch_page("pages/memory.py").run()
    seen.append(sent_to_browser(at))

    rendered = "\n".join(seen)
    assert "Qwen" in rendered and GATED in rendered  # the search covers the pages' real content
    assert TOKEN not in rendered and "NeverShowMe" not in rendered
    assert dict(at.query_params).get("hub") == GATED and TOKEN not in json.dumps(dict(at.query_params))

    names = [name for name, _ in downloads]
    assert {"plans.csv", "fit_models_x_gpus.csv", "gpus.csv"} <= set(names), names  # plans, fit and GPU exports
    plans_csv = next(data for name, data in downloads if name == "plans.csv").decode()
    assert plans_csv.splitlines()[0].startswith("name,") and GATED in plans_csv
    for name, data in downloads:
        assert TOKEN.encode() not in data, name

    logs = "\n".join(all_logs)
    assert "streamlit" in logs  # DEBUG records were captured
    assert TOKEN not in logs and "NeverShowMe" not in logs
    out, err = capfd.readouterr()
    assert TOKEN not in out and TOKEN not in err


def test_gated_config_read_with_a_token_is_not_served_to_another_session(new_app, hub_stub):
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(GATED, StubRepo(config=QWEN, gated=True))

    first = hub(new_app().run(), GATED, token=TOKEN)
    assert first.error.values == []
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in parameters_help(first)
    assert [r.token_accepted for r in hub_stub.requests_for(GATED)] == [False, True]  # shared no-token try, then token

    second = hub(new_app().run(), GATED)  # no token in this session
    errs = [shown(e) for e in second.error.values]  # as read: ui.formats.md_plain's escapes removed
    assert len(errs) == 1 and f"'{GATED}' is gated" in errs[0] and "paste a token" in errs[0]
    assert [m.label for m in second.metric] == []
    assert not hub_stub.requests_for(GATED)[-1].has_authorization  # asked the Hub itself, without a token


def test_gated_config_is_read_once_per_session_and_token(new_app, hub_stub):
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(GATED, StubRepo(config=QWEN, gated=True))
    at = hub(new_app().run(), GATED, token=TOKEN)
    with_token = lambda: [r for r in hub_stub.requests_for(GATED) if r.has_authorization]  # noqa: E731
    assert len(with_token()) == 1
    at.radio(key="method").set_value("lora").run()
    at.switch_page("pages/fit.py").run()
    no_exception(at)
    assert len(with_token()) == 1  # reruns use this session's copy
    other = "hf_TokenSafetySecond_Token_99"
    hub_stub.valid_tokens.add(other)
    at.text_input(key="hf_token_input").input(other).run()
    assert len(with_token()) == 2  # another token: read again with it


def test_public_config_is_cached_for_everyone(new_app, hub_stub):
    hub_stub.add(PUBLIC, StubRepo(config=QWEN))
    first = hub(new_app().run(), PUBLIC)
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in parameters_help(first)
    assert len(hub_stub.requests_for(PUBLIC)) == 1
    second = hub(new_app().run(), PUBLIC)
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in parameters_help(second)
    assert len(hub_stub.requests_for(PUBLIC)) == 1  # the second session did not reach the Hub
    assert not hub_stub.requests_for(PUBLIC)[0].has_authorization


def test_public_config_cache_is_keyed_without_the_token(new_app, hub_stub, monkeypatch):
    # A public config read by a session with a token comes from the same cache entry as one without.
    hub_stub.valid_tokens.add(TOKEN)
    hub_stub.add(PUBLIC, StubRepo(config=QWEN))
    hub(new_app().run(), PUBLIC, token=TOKEN)
    hub(new_app().run(), PUBLIC)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub(new_app().run(), PUBLIC)
    requests = hub_stub.requests_for(PUBLIC)
    assert len(requests) == 1 and not requests[0].has_authorization


def test_configs_are_data_never_code(new_app, hub_stub):
    # A config naming custom code (auto_map, as trust_remote_code models do) is read as data: the code file is never
    # requested, and the model is counted from its sizes.
    evil = {**QWEN, "model_type": "qwen2", "auto_map": {"AutoModelForCausalLM": "modeling_evil.EvilForCausalLM"},
            "trust_remote_code": True}
    hub_stub.add("acme/remote-code", StubRepo(config=evil, files={"modeling_evil.py": b"raise SystemExit('pwned')\n"}))
    at = hub(new_app().run(), "acme/remote-code")
    assert at.error.values == []
    assert f"{QWEN_05B_PARAMS:,} unique parameters" in parameters_help(at)
    at.switch_page("pages/model.py").run()
    no_exception(at)
    assert not any("modeling_evil" in p for p in hub_stub.paths())
    assert all(p.endswith((".json", ".safetensors")) for p in hub_stub.paths()), hub_stub.paths()
