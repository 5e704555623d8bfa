"""Bad input, table-driven: each row of issue #10's list, in the engine (a typed error with a message that says what
to do) and through the app (``streamlit.testing.v1.AppTest``: an ``st.error``/``st.warning`` with that message, never
an exception box).

Hub rows talk only to the local stub of tests/hubstub.py on 127.0.0.1 (slow answers, 5xx, dropped connections) or to
a port where nothing listens (connection refused), through the real huggingface_hub client. The 671B row uses the key
fields of DeepSeek-V3's published config.json (tests/fixtures/configs/deepseek-ai__DeepSeek-V3.json), whose total,
671,026,404,352 parameters, tests/test_architectures_more.py checks against the technical report.

| row                        | engine raises                       | the app shows                                        |
|----------------------------|-------------------------------------|------------------------------------------------------|
| malformed repo id          | InvalidRepoIdError                  | st.error "... must be exactly 'owner/name' ..."      |
| repo that does not exist   | RepoNotFoundError                   | st.error "... was not found on the Hub; check ..."   |
| gated repo without a token | GatedRepoError                      | st.error "... is gated: accept the terms ... token"  |
| revoked token              | GatedRepoError                      | st.error "The Hub rejected the token ... create ..." |
| Hub timeout                | HubUnavailableError (within budget) | st.error "unreachable (no answer within 0.5 s)"      |
| Hub down: 5xx              | HubUnavailableError                 | st.error "unreachable (server error, HTTP 503)"      |
| Hub down: refused/dropped  | HubUnavailableError                 | st.error "unreachable (connection failed)"           |
| non-JSON upload            | ConfigError                         | st.error "not valid JSON ...; upload the model's..." |
| huge upload                | ConfigError                         | st.error "... at most 2,097,152 bytes; upload ..."   |
| missing/zero/negative size | ConfigError                         | st.error "... check the file, or pick ... catalog"   |
| unsupported model_type     | UnsupportedModelError / estimate    | st.error listing supported types / st.warning        |
| batch 0, seq 10M           | ScenarioError                       | link value ignored with st.warning; widget bounds    |
| 10,000 GPUs                | ScenarioError                       | widget bounds; link value ignored with st.warning    |
| negative price             | CatalogError                        | st.error "Not applied: edited price table row 1 ..." |
| 671B MoE (DeepSeek-V3)     | computes in well under a second     | every page renders, 671.0B parameters                |
| training config: not YAML, | TrainingConfigError /               | st.error "Cannot import this config: ..." in the     |
| YAML bomb, wrong type,     | ConflictingKeysError                | import section (Memory page); the estimate stays     |
| conflicting keys, a path   | (tests/importers/test_bad_configs)  |                                                      |
| config naming no Hub repo  | RepoNotFoundError                   | the picker's st.error after "Apply"                  |
| 5,000-digit int, 1e999, NaN, Infinity in config.json (file or Hub) | ConfigError | st.error "... holds a 5,000-digit integer ..." |
| plans CSV: required columns missing, not UTF-8, no row loads (CLI) | PlanImport.file_error | exit 2, one line on stderr |

The CLI rows (:data:`CLI_ROWS`) run ``python -m engine`` in a subprocess: exit status 2, exactly one line on stderr,
never a traceback (issue 16).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from apptest_support import hub, no_exception, open_link, shown, warnings_shown
from engine.model.build import architecture_from_config
from engine.errors import (
    CatalogError,
    ConfigError,
    EngineError,
    GatedRepoError,
    HubUnavailableError,
    InvalidRepoIdError,
    RepoNotFoundError,
    ScenarioError,
    UnsupportedModelError,
)
from engine.plan.fit import check_fit
from engine.hardware.gpus import find_gpu, load_gpus, load_prices, prices_from_rows
from engine.model.hub import MAX_CONFIG_BYTES, TIMEOUT_ENV, fetch_config, hub_timeout_s
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.scenario.training import Method, Scenario
from engine.model.sources import config_from_catalog, parse_config_bytes
from hubstub import StubRepo, refused_endpoint

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
DEEPSEEK_V3 = json.loads((FIXTURES / "deepseek-ai__DeepSeek-V3.json").read_text())
DEEPSEEK_V3_PARAMS = 671_026_404_352  # tests/test_architectures_more.py TOTALS (technical report: 671B total)
LLAMA_1B = config_from_catalog("meta-llama/Llama-3.2-1B")[0]  # bundled copy of the published config.json
GOOD = "hf_BadInputsGoodToken_0001"
REVOKED = "hf_BadInputsRevokedToken_0002"
FAST_TIMEOUT_S = 0.5  # FINETUNE_FIT_HUB_TIMEOUT in the timeout rows: the stub waits 3 s, far longer


def _without(config: dict, key: str) -> dict:
    return {k: v for k, v in config.items() if k != key}


def _numbers(**raw: str) -> bytes:
    """LLAMA_1B's config.json with the given fields' values written as raw JSON text (numbers json.dumps cannot make)."""
    text = json.dumps({**LLAMA_1B, **{k: 0 for k in raw}})
    for key, value in raw.items():
        text = text.replace(f'"{key}": 0', f'"{key}": {value}', 1)
    return text.encode()


# --- engine rows ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineRow:
    id: str
    call: Callable[[Any], Any]  # gets the stub (or None) and must raise
    error: type[EngineError]
    needles: tuple[str, ...]  # all must be in the message: what was wrong, and what to do
    repo: tuple[str, StubRepo] | None = None


ENGINE_ROWS = [
    EngineRow("malformed_repo_id", lambda s: fetch_config("not a repo id"), InvalidRepoIdError,
              ("'not a repo id'", "must be exactly 'owner/name'", "e.g. 'meta-llama/Llama-3.2-1B'")),
    EngineRow("repo_id_is_a_url", lambda s: fetch_config("https://huggingface.co/acme/x"), InvalidRepoIdError,
              ("looks like a URL", "enter only the 'owner/name' part")),
    EngineRow("repo_does_not_exist", lambda s: fetch_config("acme/does-not-exist"), RepoNotFoundError,
              ("'acme/does-not-exist' was not found on the Hub", "check the spelling", "set HF_TOKEN")),
    EngineRow("gated_without_token", lambda s: fetch_config("acme/gated"), GatedRepoError,
              ("'acme/gated' is gated", "accept the terms on the model page", "set HF_TOKEN or paste a token"),
              repo=("acme/gated", StubRepo(config=LLAMA_1B, gated=True))),
    EngineRow("revoked_token", lambda s: fetch_config("acme/gated", token=REVOKED), GatedRepoError,
              ("rejected the token (invalid, expired or revoked)", "create a new one at https://huggingface.co/settings/tokens"),
              repo=("acme/gated", StubRepo(config=LLAMA_1B, gated=True))),
    EngineRow("hub_5xx", lambda s: fetch_config("acme/down"), HubUnavailableError,
              ("The Hub is unreachable (server error, HTTP 503)", "pick the model from the bundled catalog or upload"),
              repo=("acme/down", StubRepo(config=LLAMA_1B, status=503))),
    EngineRow("hub_drops_the_connection", lambda s: fetch_config("acme/crashed"), HubUnavailableError,
              ("The Hub is unreachable (network error: RemoteProtocolError)", "upload its config.json instead"),
              repo=("acme/crashed", StubRepo(config=LLAMA_1B, drop=True))),
    EngineRow("hub_non_json_body", lambda s: fetch_config("acme/html"), ConfigError,
              ("config.json of 'acme/html' is not valid JSON at line 1, column 1", "upload a valid config.json")),
    EngineRow("hub_huge_body", lambda s: fetch_config("acme/huge"), ConfigError,
              ("larger than 2 MiB", "upload the right config.json instead")),
    EngineRow("upload_non_json", lambda s: parse_config_bytes(b"<html>not json</html>"), ConfigError,
              ("config.json is not valid JSON (line 1, column 1",)),
    EngineRow("upload_huge", lambda s: parse_config_bytes(b" " * (MAX_CONFIG_BYTES + 1)), ConfigError,
              ("2,097,153 bytes", "at most 2,097,152 bytes")),
    EngineRow("config_missing_size", lambda s: architecture_from_config(_without(LLAMA_1B, "hidden_size")), ConfigError,
              ("config.json has no 'hidden_size'",)),
    EngineRow("config_zero_size", lambda s: architecture_from_config({**LLAMA_1B, "num_hidden_layers": 0}), ConfigError,
              ("'num_hidden_layers' must be a positive integer, got 0",)),
    EngineRow("config_negative_size", lambda s: architecture_from_config({**LLAMA_1B, "vocab_size": -5}), ConfigError,
              ("'vocab_size' must be a positive integer, got -5",)),
    EngineRow("config_5000_digit_integer", lambda s: parse_config_bytes(_numbers(hidden_size="9" * 5000)), ConfigError,
              ("config.json holds a 5,000-digit integer; no config value has more than 20 digits: check the file",)),
    EngineRow("config_huge_float", lambda s: parse_config_bytes(_numbers(rms_norm_eps="1e999")), ConfigError,
              ("config.json holds the number 1e999, beyond the range of a 64-bit float",)),
    EngineRow("config_nan", lambda s: parse_config_bytes(_numbers(hidden_size="NaN")), ConfigError,
              ("config.json holds NaN, which is not a number (JSON has no NaN or Infinity)",)),
    EngineRow("config_infinity", lambda s: parse_config_bytes(_numbers(rms_norm_eps="-Infinity")), ConfigError,
              ("config.json holds -Infinity, which is not a number",)),
    EngineRow("hub_config_5000_digit_integer", lambda s: fetch_config("acme/digits"), ConfigError,
              ("The config.json of 'acme/digits' holds a 5,000-digit integer",)),
    EngineRow("scenario_infinite_lora_alpha", lambda s: Scenario.build(lora_alpha=float("inf")), ScenarioError,
              ("lora_alpha: Input should be a finite number",)),
    EngineRow("unsupported_model_type", lambda s: architecture_from_config({**LLAMA_1B, "model_type": "bogus"}),
              UnsupportedModelError, ("model_type 'bogus' is not supported yet; supported types: bert,", "llama")),
    EngineRow("batch_zero", lambda s: Scenario.build(micro_batch_size=0), ScenarioError,
              ("micro_batch_size: Input should be greater than or equal to 1 (got 0)",)),
    EngineRow("seq_len_ten_million", lambda s: Scenario.build(seq_len=10_000_000), ScenarioError,
              ("seq_len: Input should be less than or equal to 2097152 (got 10000000)",)),
    EngineRow("ten_thousand_gpus",
              lambda s: check_fit(architecture_from_config(LLAMA_1B), Scenario(), find_gpu("H100 SXM"), Strategy.ZERO3,
                                  10_000),
              ScenarioError, ("num_gpus: must be between 1 and 1024 (got 10000)",)),
]


def _negative_price_rows(field: str) -> list:
    rows = [(i, {**p.model_dump(), "date": p.date.isoformat()}) for i, p in enumerate(load_prices(), start=1)]
    rows[0][1][field] = -2.0
    return rows


ENGINE_ROWS += [
    EngineRow(f"negative_{field}", lambda s, f=field: prices_from_rows(_negative_price_rows(f), load_gpus(), "edited price table"),
              CatalogError, ("edited price table row 1", f"{field}: Input should be greater than 0 (got -2.0)"))
    for field in ("on_demand_usd_per_hour", "spot_usd_per_hour")
]


@pytest.mark.parametrize("row", ENGINE_ROWS, ids=lambda r: r.id)
def test_engine_raises_a_typed_error_that_says_what_to_do(hub_stub, row):
    hub_stub.valid_tokens.add(GOOD)
    hub_stub.add("acme/html", StubRepo(config=b"<html>Sign in</html>"))
    hub_stub.add("acme/huge", StubRepo(config=b"{" + b" " * (MAX_CONFIG_BYTES + 10) + b"}"))
    hub_stub.add("acme/digits", StubRepo(config=_numbers(vocab_size="9" * 5000)))
    if row.repo:
        hub_stub.add(*row.repo)
    with pytest.raises(row.error) as info:
        row.call(hub_stub)
    assert type(info.value) is row.error  # the exact class, not only a parent
    message = str(info.value)
    for needle in row.needles:
        assert needle in message, message
    assert info.value.__cause__ is None  # no chained upstream text (which could quote request headers)
    for secret in (GOOD, REVOKED):
        assert secret not in message


def test_engine_hub_timeout_gives_up_within_the_budget(hub_stub, monkeypatch):
    # FINETUNE_FIT_HUB_TIMEOUT sets the budget at call time; the stub answers after 3 s.
    hub_stub.add("acme/slow", StubRepo(config=LLAMA_1B, delay_s=3.0))
    monkeypatch.setenv(TIMEOUT_ENV, str(FAST_TIMEOUT_S))
    assert hub_timeout_s() == FAST_TIMEOUT_S
    start = time.monotonic()
    with pytest.raises(HubUnavailableError, match=r"unreachable \(no answer within 0\.5 s\).*bundled catalog"):
        fetch_config("acme/slow")
    assert time.monotonic() - start < 2 * FAST_TIMEOUT_S + 0.5  # not the stub's 3 s


def test_engine_connection_refused(monkeypatch, hub_stub):
    with refused_endpoint() as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        start = time.monotonic()
        with pytest.raises(HubUnavailableError, match=r"unreachable \(connection failed\)"):
            fetch_config("acme/anything")
        assert time.monotonic() - start < 2.0  # no retries with back-off


@pytest.mark.parametrize(("value", "expected"), [("", 10.0), ("2.5", 2.5), ("abc", 10.0), ("0", 10.0), ("-3", 10.0),
                                                 ("nan", 10.0), ("1e9", 10.0)])
def test_hub_timeout_setting_ignores_nonsense(monkeypatch, value, expected):
    monkeypatch.setenv(TIMEOUT_ENV, value)
    assert hub_timeout_s() == expected


def test_engine_671b_moe_computes_fast():
    start = time.perf_counter()
    arch = architecture_from_config(DEEPSEEK_V3)
    estimates = [estimate_memory(arch, Scenario.build(method=m)) for m in Method]
    fit = check_fit(arch, Scenario.build(method=Method.QLORA), find_gpu("H100 SXM"), Strategy.ZERO3, 1)
    elapsed = time.perf_counter() - start
    assert arch.total_parameters == DEEPSEEK_V3_PARAMS
    assert all(e.total_bytes > 0 for e in estimates)
    assert estimates[0].total_bytes >= 16 * DEEPSEEK_V3_PARAMS  # mixed bf16 full FT: >= 16 B/param model states
    assert not fit.fits and fit.peak_bytes > fit.usable_memory_bytes  # QLoRA of 671B does not fit one H100
    assert elapsed < 2.0, elapsed


# --- the app ----------------------------------------------------------------------------------------------------------


def errors(at: AppTest) -> list[str]:
    """Every st.error as the user reads it (ui.formats.md_plain's escapes removed)."""
    return [shown(e.value) for e in at.error]


def warnings(at: AppTest) -> list[str]:
    return warnings_shown(at)


def upload(at: AppTest, data: bytes) -> AppTest:
    at.radio(key="model_source").set_value("Upload config.json").run()
    no_exception(at)
    at.file_uploader(key="config_upload").set_value(("config.json", data, "application/json")).run()
    no_exception(at)
    return at


@dataclass(frozen=True)
class AppRow:
    id: str
    act: Callable[[AppTest], Any]
    needles: tuple[str, ...]  # all in the one st.error shown


APP_ROWS = [
    AppRow("malformed_repo_id", lambda at: hub(at, "owner/name/extra"),
           ("'owner/name/extra' must be exactly 'owner/name' with one '/'",)),
    AppRow("repo_does_not_exist", lambda at: hub(at, "acme/does-not-exist"),
           ("'acme/does-not-exist' was not found on the Hub", "check the spelling")),
    AppRow("gated_without_token", lambda at: hub(at, "acme/gated"),
           ("'acme/gated' is gated", "accept the terms", "paste a token")),
    AppRow("revoked_token", lambda at: hub(at, "acme/gated", token=REVOKED),
           ("The Hub rejected the token (invalid, expired or revoked)", "https://huggingface.co/settings/tokens")),
    AppRow("hub_5xx", lambda at: hub(at, "acme/down"),
           ("The Hub is unreachable (server error, HTTP 503) while reading 'acme/down'",
            "pick the model from the bundled catalog or upload its config.json")),
    AppRow("hub_drops_the_connection", lambda at: hub(at, "acme/crashed"),
           ("The Hub is unreachable (network error: RemoteProtocolError)",)),
    AppRow("upload_non_json", lambda at: upload(at, b"<html>not json</html>"),
           ("config.json is not valid JSON (line 1, column 1", "upload the model's own config.json")),
    AppRow("upload_huge", lambda at: upload(at, b"{" + b" " * (3 * 2**20) + b"}"),
           ("config.json is 3,145,730 bytes; a config.json is at most 2,097,152 bytes",
            "upload the model's own config.json")),
    AppRow("config_missing_size", lambda at: upload(at, json.dumps(_without(LLAMA_1B, "hidden_size")).encode()),
           ("config.json has no 'hidden_size'", "check the file, or pick the model from the catalog")),
    AppRow("config_zero_size", lambda at: upload(at, json.dumps({**LLAMA_1B, "num_attention_heads": 0}).encode()),
           ("'num_attention_heads' must be a positive integer, got 0", "check the file")),
    AppRow("config_negative_size", lambda at: upload(at, json.dumps({**LLAMA_1B, "intermediate_size": -8192}).encode()),
           ("'intermediate_size' must be a positive integer, got -8192", "check the file")),
    AppRow("config_5000_digit_integer", lambda at: upload(at, _numbers(hidden_size="9" * 5000)),
           ("config.json holds a 5,000-digit integer", "check the file")),
    AppRow("config_nan", lambda at: upload(at, _numbers(num_attention_heads="NaN")),
           ("config.json holds NaN, which is not a number",)),
    AppRow("unsupported_model_type_without_sizes", lambda at: upload(at, b'{"model_type": "bogus"}'),
           ("model_type 'bogus' is not supported yet; supported types: bert,",)),
]


@pytest.fixture
def stub_repos(hub_stub):
    hub_stub.valid_tokens.add(GOOD)
    hub_stub.add("acme/gated", StubRepo(config=LLAMA_1B, gated=True))
    hub_stub.add("acme/down", StubRepo(config=LLAMA_1B, status=503))
    hub_stub.add("acme/crashed", StubRepo(config=LLAMA_1B, drop=True))
    hub_stub.add("acme/slow", StubRepo(config=LLAMA_1B, delay_s=3.0))
    hub_stub.add("deepseek-ai/DeepSeek-V3", StubRepo(config=DEEPSEEK_V3))
    return hub_stub


@pytest.mark.parametrize("row", APP_ROWS, ids=lambda r: r.id)
def test_app_shows_one_error_that_says_what_to_do(new_app, stub_repos, row):
    at = new_app().run()
    no_exception(at)
    row.act(at)
    no_exception(at)  # never a traceback box
    errs = errors(at)
    assert len(errs) == 1, errs
    for needle in row.needles:
        assert needle in errs[0], errs[0]
    assert [m.label for m in at.metric] == []  # no estimate from bad input
    assert any("Pick a model" in i.value for i in at.info)


def test_app_hub_timeout_costs_one_timeout_per_session_not_one_per_click(new_app, stub_repos, monkeypatch):
    monkeypatch.setenv(TIMEOUT_ENV, str(FAST_TIMEOUT_S))
    at = new_app().run()
    at.radio(key="model_source").set_value("Hub repo id").run()
    start = time.monotonic()
    at.text_input(key="hub_repo_id").input("acme/slow").run()
    assert time.monotonic() - start < 2.5  # the stub would answer after 3 s
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and "The Hub is unreachable (no answer within 0.5 s) while reading 'acme/slow'" in errs[0]
    assert len(stub_repos.requests_for("acme/slow")) == 1
    # The next reruns of this session (any widget change, another page) do not wait for the hung Hub again.
    start = time.monotonic()
    at.run()
    at.switch_page("pages/fit.py").run()
    assert time.monotonic() - start < 1.5
    errs = errors(at)
    assert len(errs) == 1 and "no answer within 0.5 s" in errs[0] and "asks the Hub again in" in errs[0], errs
    assert len(stub_repos.requests_for("acme/slow")) == 1


def test_app_connection_refused(new_app, hub_stub, monkeypatch):
    with refused_endpoint() as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        at = hub(new_app().run(), "acme/anything")
        errs = errors(at)
        assert len(errs) == 1 and "The Hub is unreachable (connection failed) while reading 'acme/anything'" in errs[0]


def test_app_hub_down_for_a_bundled_model_falls_back_with_a_warning(new_app, hub_stub):
    hub_stub.add("meta-llama/Llama-3.2-1B", StubRepo(config=LLAMA_1B, status=503))
    at = hub(new_app().run(), "meta-llama/Llama-3.2-1B")
    assert errors(at) == []
    assert any("The Hub is unreachable (server error, HTTP 503): showing the bundled copy of meta-llama/Llama-3.2-1B"
               in w for w in warnings(at)), warnings(at)
    assert next(m.value for m in at.metric if m.label == "Parameters") == "1.24B"  # 1,235,814,400 (param_counts.json)


def test_app_unsupported_model_type_with_sizes_is_estimated_with_a_warning(new_app):
    at = upload(new_app().run(), json.dumps({**LLAMA_1B, "model_type": "bogus"}).encode())
    assert errors(at) == []
    assert any("model_type 'bogus' is not counted exactly yet" in w for w in warnings(at)), warnings(at)
    assert next(m.value for m in at.metric if m.label == "Parameters") == "1.24B"  # as Llama 3.2 1B's sizes


@pytest.mark.parametrize(
    ("params", "needles"),
    [
        ({"micro_batch_size": "0"}, ("micro_batch_size='0': must be between 1 and 65536",)),
        ({"seq_len": "10000000"}, ("seq_len='10000000': must be between 1 and 2097152",)),
        ({"num_gpus": "10000"}, ("num_gpus='10000': must be between 1 and 1024",)),
        ({"lora_r": "-4", "tc_epochs": "-1"}, ("lora_r='-4': must be between 1 and 65536",
                                               "tc_epochs='-1': must be between 0.01 and 10000.0")),
    ],
    ids=["batch_zero", "seq_len_ten_million", "ten_thousand_gpus", "negative_rank_and_epochs"],
)
def test_app_absurd_numbers_in_a_link_are_ignored_with_a_warning(new_app, params, needles):
    at = open_link(new_app(), "pages/time_cost.py", params)
    text = " ".join(warnings(at))
    assert "Some settings in the link were ignored" in text
    for needle in needles:
        assert needle in text
    assert at.number_input(key="micro_batch_size").value == 1 and at.number_input(key="seq_len").value == 2048
    assert errors(at) == []


@pytest.mark.parametrize(
    ("page", "key", "value", "kept", "words"),
    [("pages/memory.py", "micro_batch_size", 0, 1, "Micro batch size: 0 is out of range; it must be a whole number from 1 "
      "to 65,536. The results use 1."),
     ("pages/memory.py", "seq_len", 10_000_000, 2048, "Sequence length: 10,000,000 is out of range; it must be a whole "
      "number from 1 to 2,097,152. The results use 2,048."),
     ("pages/fit.py", "num_gpus", 10_000, 1, "GPUs: 10,000 is out of range; it must be a whole number from 1 to 1,024. "
      "The results use 1."),
     ("pages/time_cost.py", "tc_measured", -1.0, 0, "Calibrate to my run: measured tokens/s: -1 is out of range; it "
      "must be from 0 to 1,000,000,000. The results use 0.")],
    ids=["batch_zero", "seq_len_ten_million", "ten_thousand_gpus", "negative_measured_tokens_per_second"],
)
def test_app_absurd_numbers_in_a_widget_are_said_in_words_and_the_results_marked_stale(new_app, page, key, value, kept,
                                                                                       words):
    # Streamlit's own bounds would keep the previous value behind a red "!" tooltip; the app takes the typed number,
    # says under the input why it is out of range, lists it above the results and computes with the last valid value.
    at = new_app().switch_page(page).run()
    if key == "tc_measured":  # drawn under "More run options" (ui.scenario_form)
        at.toggle(key="tc_more").set_value(True).run()
    before = {m.label: m.value for m in at.metric}
    at.number_input(key=key).set_value(value).run()
    no_exception(at)
    assert at.number_input(key=key).value == value  # what the user typed stays visible
    assert [e.value for e in at.sidebar.error] == [words]
    stale = [w.value for w in at.warning if w.value.startswith("Results below are not for the inputs as shown")]
    assert len(stale) == 1 and f"so {kept:,} is used" in stale[0], stale
    assert {m.label: m.value for m in at.metric} == before  # the results of the last valid value
    assert f"{key}=" not in " ".join(f"{k}={v}" for k, v in at.query_params.items() if v == [str(value)])


def test_app_negative_price_in_the_editor_is_not_applied(new_app, monkeypatch):
    # AppTest cannot type into a data editor's grid: the grid's return value is what a user's edit produces, so it is
    # replaced by the table with the first row's on-demand price set to -2. The page's validation and message are real.
    real_editor = st.data_editor

    def edited(data, *args, **kwargs):
        frame = real_editor(data, *args, **kwargs)
        if kwargs.get("key") == "price_editor":
            frame = frame.copy()
            frame.loc[0, "on_demand_usd_per_hour"] = -2.0
        return frame

    monkeypatch.setattr(st, "data_editor", edited)
    at = new_app().switch_page("pages/gpus.py").run()
    no_exception(at)
    at.button[0].click().run()  # "Use these tables for this session"
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1, errs
    assert errs[0].startswith("Not applied: edited price table row 1 ('NVIDIA T4', 'seed chapter (approx.)')")
    assert "on_demand_usd_per_hour: Input should be greater than 0 (got -2.0)" in errs[0]
    assert "session_prices" not in at.session_state  # the bundled prices stay in use


PAGES = ["pages/memory.py", "pages/model.py", "pages/fit.py", "pages/time_cost.py", "pages/plans.py"]


def test_app_671b_moe_from_the_hub_renders_every_page_fast(new_app, stub_repos):
    at = new_app().run()
    hub(at, "deepseek-ai/DeepSeek-V3")
    assert errors(at) == []
    for page in PAGES:
        start = time.monotonic()
        at.switch_page(page).run()
        elapsed = time.monotonic() - start
        no_exception(at)
        assert errors(at) == [], (page, errors(at))
        assert elapsed < 20, (page, elapsed)
    at.switch_page("pages/memory.py").run()
    params = next(m for m in at.metric if m.label == "Parameters")
    assert params.value == "671.0B" and f"{DEEPSEEK_V3_PARAMS:,} unique parameters" in params.help
    # One read of config.json for all pages: the public config is cached.
    assert len(stub_repos.requests_for("deepseek-ai/DeepSeek-V3")) == 1


def test_app_model_page_does_not_wait_for_a_hung_checkpoint_read(new_app, hub_stub, monkeypatch):
    # config.json answers at once; the safetensors headers (read by huggingface_hub's HfApi, whose own timeouts and
    # retries are long) hang: the Model page gives up after the Hub timeout and says so.
    monkeypatch.setenv(TIMEOUT_ENV, str(FAST_TIMEOUT_S))
    hub_stub.add("acme/slow-weights", StubRepo(config=LLAMA_1B, file_delay_s={"model.safetensors": 3.0}))
    at = hub(new_app().run(), "acme/slow-weights")
    start = time.monotonic()
    at.switch_page("pages/model.py").run()
    elapsed = time.monotonic() - start
    no_exception(at)
    assert elapsed < 2.5, elapsed  # not the stub's 3 s (nor huggingface_hub's 10 s)
    infos = [shown(i.value) for i in at.info]
    assert any("No checkpoint count for acme/slow-weights: the Hub did not answer within 0.5 s; try again later" in i
               for i in infos), infos
    assert next(m.value for m in at.metric if m.label == "Parameters") == "1.24B"  # the page itself is complete


# --- training-config import (Memory page, ui/config_import.py) ---------------------------------------------------------
# Each row pastes a bad config: one st.error in the import section says what is wrong, the page keeps its estimate.

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n" for p, n in zip("abcd", "bcde"))

IMPORT_ROWS = [
    ("not_yaml", "model: [unclosed\n  - {", ("Cannot import this config: pasted config is not valid YAML (line",)),
    ("yaml_bomb", BOMB, ("expands to more than 50,000 values (YAML aliases included)",)),
    ("wrong_type", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: two\n",
     ("micro_batch_size: must be an integer >= 1 (got 'two')",)),
    ("conflicting_keys", '{"per_device_train_batch_size": 2, "bf16": true, "fp16": true}',
     ("bf16 and fp16 are both true",)),
    ("local_path_model", "base_model: /data/models/llama\nmicro_batch_size: 1\n",
     ("base_model '/data/models/llama' is a local path",)),
    ("not_a_training_config", "foo: 1\nbar: [2]\n", ("not a training config this importer recognises",)),
]


@pytest.mark.parametrize(("text", "needles"), [r[1:] for r in IMPORT_ROWS], ids=[r[0] for r in IMPORT_ROWS])
def test_app_config_import_shows_one_error(new_app, text, needles):
    at = new_app().run()
    at.text_area(key="cfg_import_text").input(text).run()
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1, errs
    for needle in needles:
        assert needle in errs[0], errs[0]
    assert "\n" not in errs[0]
    assert len(at.metric) >= 4  # the page's own estimate is still there
    assert not any(b.key == "cfg_import_apply" for b in at.button)  # nothing to apply


def test_app_config_import_unknown_model_is_the_pickers_error(new_app, stub_repos):
    at = new_app().run()
    at.text_area(key="cfg_import_text").input("base_model: acme/does-not-exist\nmicro_batch_size: 2\n").run()
    at.button(key="cfg_import_apply").click().run()
    no_exception(at)
    errs = errors(at)
    assert len(errs) == 1 and "'acme/does-not-exist' was not found on the Hub" in errs[0], errs


# --- the CLI: exit 2, one line on stderr, never a traceback --------------------------------------------------------------


@dataclass(frozen=True)
class CliRow:
    id: str
    files: Callable[[], dict[str, bytes]]  # file name -> bytes, written to a temporary folder
    argv: tuple[str, ...]  # {dir} is that folder
    needles: tuple[str, ...]


def _plans_csv(method: str = "qlora", n: int = 3) -> bytes:
    from engine.plan.plans import Plan, evaluate_plan, plans_to_csv

    plans = [Plan(name=f"p{i}", model_repo_id="meta-llama/Llama-3.2-1B", method=method, seq_len=512, gpu="NVIDIA A100 80GB",
                  dataset_total_tokens=1_000_000) for i in range(n)]
    return plans_to_csv([(p, evaluate_plan(p)) for p in plans], version="0.1.0", exported_at="2026-01-01T00:00:00Z")


def _drop(data: bytes, *names: str) -> bytes:
    import csv
    import io

    rows = list(csv.reader(io.StringIO(data.decode())))
    keep = [i for i, h in enumerate(rows[0]) if h not in names]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in keep] for r in rows])
    return buf.getvalue().encode()


CLI_ROWS = [
    CliRow("config_5000_digit_integer", lambda: {"config.json": _numbers(hidden_size="9" * 5000)},
           ("estimate", "--config", "{dir}/config.json"), ("5,000-digit integer",)),
    CliRow("config_huge_float", lambda: {"config.json": _numbers(rms_norm_eps="1e999")},
           ("estimate", "--config", "{dir}/config.json"), ("1e999, beyond the range of a 64-bit float",)),
    CliRow("config_nan", lambda: {"config.json": _numbers(hidden_size="NaN")},
           ("estimate", "--config", "{dir}/config.json"), ("holds NaN",)),
    CliRow("config_infinity", lambda: {"config.json": _numbers(vocab_size="Infinity")},
           ("params", "--config", "{dir}/config.json"), ("holds Infinity",)),
    CliRow("plans_missing_method_and_seq_len", lambda: {"plans.csv": _drop(_plans_csv(), "method", "seq_len")},
           ("plan", "--input", "{dir}/plans.csv", "--offline"), ("missing required columns 'method', 'seq_len'",)),
    CliRow("plans_not_utf8", lambda: {"plans.csv": _plans_csv(n=50).replace(b"NVIDIA A100 80GB", "NVIDIA A100 80GB é".encode())
                                      .decode("utf-8").encode("latin-1")},
           ("plan", "--input", "{dir}/plans.csv", "--offline"), ("not UTF-8 text",)),
    CliRow("plans_no_row_loads", lambda: {"plans.csv": _plans_csv(n=1).replace(b"NVIDIA A100 80GB", b"Voodoo 5 6000")},
           ("plan", "--input", "{dir}/plans.csv", "--offline"), ("no plan in", "row 1: unknown GPU 'Voodoo 5 6000'")),
    CliRow("plans_nan_epochs", lambda: {"plans.csv": _drop(_plans_csv(n=1), "epochs").replace(b"dataset_total_tokens,", b"epochs,dataset_total_tokens,", 1)
                                        .replace(b",1000000,", b",nan,1000000,", 1)},
           ("plan", "--input", "{dir}/plans.csv", "--offline"), ("no plan in",)),
]


@pytest.mark.parametrize("row", CLI_ROWS, ids=lambda r: r.id)
def test_cli_bad_input_exits_2_with_one_line_on_stderr(tmp_path, row):
    import subprocess
    import sys

    for name, data in row.files().items():
        (tmp_path / name).write_bytes(data)
    argv = [a.replace("{dir}", str(tmp_path)) for a in row.argv]
    done = subprocess.run([sys.executable, "-m", "engine", *argv], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for needle in row.needles:
        assert needle in lines[0], lines[0]
