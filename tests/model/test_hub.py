"""Tests of engine.model.hub against a local HTTP stub of the Hub (tests/hubstub.py); no network beyond 127.0.0.1."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import pytest

from engine.errors import (
    ConfigError,
    GatedRepoError,
    HubError,
    HubUnavailableError,
    InvalidRepoIdError,
    RepoNotFoundError,
)
from engine.model.hub import MAX_CONFIG_BYTES, fetch_config, validate_repo_id
from hubstub import StubRepo, refused_endpoint
from reference import config_path

REFERENCE = config_path("meta-llama/Llama-3.2-1B")
LLAMA = "meta-llama/Llama-3.2-1B"
GOOD_TOKEN = "hf_GoodTokenAcceptedTerms0123456789"
OTHER_TOKEN = "hf_ValidButNoAccessToGated987654321"
BAD_TOKEN = "hf_RevokedTokenNobodyKnows55555555"
CONFIG_PATH = "/{repo}/resolve/{rev}/config.json"


@pytest.fixture(scope="module")
def llama_config() -> dict:
    """The real Llama-3.2-1B config (key fields), read by the test only; the product never reads ../shared."""
    if not REFERENCE.is_file():
        pytest.skip(f"reference config {REFERENCE} not available")
    return json.loads(REFERENCE.read_text())


def _all_texts(exc: BaseException) -> str:
    """Every text an exception exposes: str/repr/args of it and of its whole cause/context chain, and tracebacks."""
    parts: list[str] = []
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        e = pending.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        parts += [str(e), repr(e), repr(e.args), "".join(traceback.format_exception(e))]
        pending += [x for x in (e.__cause__, e.__context__) if x is not None]
    return "\n".join(parts)


# --- success paths -------------------------------------------------------------------------------------------------


def test_config_round_trips_exactly(hub_stub, llama_config):
    hub_stub.add(LLAMA, StubRepo(config=llama_config))

    got = fetch_config(LLAMA, timeout_s=5)

    assert got == llama_config
    assert list(got) == list(llama_config)  # key order kept
    assert got["hidden_size"] == 2048
    assert got["num_hidden_layers"] == 16
    assert got["num_key_value_heads"] == 8
    assert got["vocab_size"] == 128256
    assert got["tie_word_embeddings"] is True
    assert got["rms_norm_eps"] == 1e-05
    # One GET of the resolve URL, no token sent, nothing else requested.
    assert [(r.method, r.path, r.has_authorization) for r in hub_stub.requests] == [
        ("GET", CONFIG_PATH.format(repo=LLAMA, rev="main"), False)
    ]
    assert hub_stub.unexpected == []


def test_follows_the_hubs_resolve_cache_redirect(hub_stub, llama_config):
    hub_stub.add(LLAMA, StubRepo(config=llama_config, redirect=True))

    assert fetch_config(LLAMA, timeout_s=5) == llama_config

    paths = hub_stub.paths("GET")
    assert paths[0] == CONFIG_PATH.format(repo=LLAMA, rev="main")
    assert paths[1].startswith(f"/api/resolve-cache/models/{LLAMA}/")
    assert len(paths) == 2


def test_repo_id_is_stripped_before_use(hub_stub):
    hub_stub.add("acme/tiny", StubRepo(config={"model_type": "llama"}))
    assert fetch_config("  acme/tiny \n", timeout_s=5) == {"model_type": "llama"}
    assert hub_stub.paths() == [CONFIG_PATH.format(repo="acme/tiny", rev="main")]


@pytest.mark.parametrize(
    ("revision", "path_rev"),
    [
        ("v1.0", "v1.0"),
        ("0123456789abcdef0123456789abcdef01234567", "0123456789abcdef0123456789abcdef01234567"),
        ("refs/pr/1", "refs%2Fpr%2F1"),  # huggingface_hub quotes the revision as one path segment
    ],
)
def test_revision_is_passed_through(hub_stub, revision, path_rev):
    cfg = {"model_type": "llama", "hidden_size": 64}
    hub_stub.add("acme/tiny", StubRepo(config=cfg, revisions=frozenset({"main", "v1.0", "refs/pr/1"})))

    assert fetch_config("acme/tiny", revision=revision, timeout_s=5) == cfg
    assert hub_stub.paths() == [CONFIG_PATH.format(repo="acme/tiny", rev=path_rev)]


def test_unknown_revision_is_repo_not_found(hub_stub):
    hub_stub.add("acme/tiny", StubRepo(config={"a": 1}))
    with pytest.raises(RepoNotFoundError, match=r"Revision 'nope' does not exist in 'acme/tiny'"):
        fetch_config("acme/tiny", revision="nope", timeout_s=5)


def test_stub_speaks_the_hub_protocol_to_hf_hub_download(hub_stub, tmp_path, llama_config):
    """Guard for the stub itself: huggingface_hub's own downloader (HEAD + GET) accepts its answers."""
    import os

    from huggingface_hub import hf_hub_download

    hub_stub.add(LLAMA, StubRepo(config=llama_config, redirect=True))
    path = hf_hub_download(LLAMA, "config.json", cache_dir=tmp_path / "cache", endpoint=os.environ["HF_ENDPOINT"])
    assert json.loads(Path(path).read_text()) == llama_config
    assert [r.method for r in hub_stub.requests] == ["HEAD", "HEAD", "GET"]
    assert hub_stub.unexpected == []


# --- gated, private, tokens ----------------------------------------------------------------------------------------


def test_gated_without_token(hub_stub, llama_config):
    hub_stub.valid_tokens.add(GOOD_TOKEN)
    hub_stub.add(LLAMA, StubRepo(config=llama_config, gated=True))

    with pytest.raises(GatedRepoError) as info:
        fetch_config(LLAMA, timeout_s=5)

    msg = str(info.value)
    assert LLAMA in msg
    assert "accept the terms" in msg
    assert "HF_TOKEN" in msg and "paste a token" in msg
    assert hub_stub.requests[0].has_authorization is False


def test_gated_with_the_right_token(hub_stub, llama_config):
    hub_stub.valid_tokens.add(GOOD_TOKEN)
    hub_stub.add(LLAMA, StubRepo(config=llama_config, gated=True))

    assert fetch_config(LLAMA, token=f"  {GOOD_TOKEN}\n", timeout_s=5) == llama_config  # pasted with whitespace
    assert [(r.has_authorization, r.token_accepted) for r in hub_stub.requests] == [(True, True)]


def test_token_none_uses_hf_token_from_environment(hub_stub, monkeypatch, llama_config):
    hub_stub.valid_tokens.add(GOOD_TOKEN)
    hub_stub.add(LLAMA, StubRepo(config=llama_config, gated=True))
    monkeypatch.setenv("HF_TOKEN", GOOD_TOKEN)

    assert fetch_config(LLAMA, timeout_s=5) == llama_config
    assert hub_stub.requests[0].token_accepted is True


def test_gated_with_a_valid_token_that_has_no_access(hub_stub, llama_config):
    hub_stub.valid_tokens.update({GOOD_TOKEN, OTHER_TOKEN})
    hub_stub.add(LLAMA, StubRepo(config=llama_config, gated=True, granted=frozenset({GOOD_TOKEN})))

    with pytest.raises(GatedRepoError, match="accept the terms") as info:
        fetch_config(LLAMA, token=OTHER_TOKEN, timeout_s=5)
    assert LLAMA in str(info.value)


@pytest.mark.parametrize("gated", [True, False])
def test_wrong_token_is_reported_as_rejected(hub_stub, llama_config, gated):
    hub_stub.valid_tokens.add(GOOD_TOKEN)
    hub_stub.add(LLAMA, StubRepo(config=llama_config, gated=gated))

    with pytest.raises(GatedRepoError) as info:
        fetch_config(LLAMA, token=BAD_TOKEN, timeout_s=5)

    msg = str(info.value)
    assert "rejected the token" in msg and LLAMA in msg
    assert [(r.has_authorization, r.token_accepted) for r in hub_stub.requests] == [(True, False)]


def test_private_repo_without_access_is_not_found(hub_stub):
    hub_stub.valid_tokens.update({GOOD_TOKEN, OTHER_TOKEN})
    hub_stub.add("acme/secret", StubRepo(config={"a": 1}, private=True, granted=frozenset({GOOD_TOKEN})))

    with pytest.raises(RepoNotFoundError, match="acme/secret"):
        fetch_config("acme/secret", timeout_s=5)  # 401 RepoNotFound
    with pytest.raises(RepoNotFoundError, match="private and the token has no access"):
        fetch_config("acme/secret", token=OTHER_TOKEN, timeout_s=5)  # 404 RepoNotFound
    assert fetch_config("acme/secret", token=GOOD_TOKEN, timeout_s=5) == {"a": 1}


@pytest.mark.parametrize(
    "scenario",
    ["gated_no_access", "wrong_token", "missing_repo", "server_error", "malformed_token", "non_json"],
)
def test_token_never_appears_in_errors(hub_stub, llama_config, scenario):
    secret = "hf_SuperSecretValue_DoNotLeak_42"
    hub_stub.valid_tokens.add(GOOD_TOKEN)
    hub_stub.add(LLAMA, StubRepo(config=llama_config, gated=True, granted=frozenset({GOOD_TOKEN})))
    hub_stub.add("acme/down", StubRepo(config={}, status=500))
    hub_stub.add("acme/html", StubRepo(config=b"<html>oops</html>"))
    token, repo = secret, LLAMA
    if scenario == "gated_no_access":
        hub_stub.valid_tokens.add(secret)
    elif scenario == "missing_repo":
        hub_stub.valid_tokens.add(secret)
        repo = "acme/nothing-here"
    elif scenario == "server_error":
        repo = "acme/down"
    elif scenario == "malformed_token":
        token = secret + "\nX-Injected: 1"
    elif scenario == "non_json":
        hub_stub.valid_tokens.add(secret)
        repo = "acme/html"

    with pytest.raises(HubError if scenario != "non_json" else ConfigError) as info:
        fetch_config(repo, token=token, timeout_s=5)

    text = _all_texts(info.value)
    assert secret not in text
    assert "SuperSecret" not in text
    assert info.value.__cause__ is None and info.value.__context__ is None  # nothing upstream is chained


# --- not found -----------------------------------------------------------------------------------------------------


def test_missing_repo(hub_stub):
    with pytest.raises(RepoNotFoundError) as info:
        fetch_config("acme/does-not-exist", timeout_s=5)
    assert "acme/does-not-exist" in str(info.value)
    assert hub_stub.paths() == [CONFIG_PATH.format(repo="acme/does-not-exist", rev="main")]


def test_missing_repo_with_a_valid_token(hub_stub):
    hub_stub.valid_tokens.add(GOOD_TOKEN)
    with pytest.raises(RepoNotFoundError, match="acme/does-not-exist"):
        fetch_config("acme/does-not-exist", token=GOOD_TOKEN, timeout_s=5)


def test_repo_without_config_json(hub_stub):
    hub_stub.add("acme/dataset-like", StubRepo(config=None, files={"README.md": b"hi"}))
    with pytest.raises(RepoNotFoundError, match=r"'acme/dataset-like' has no config\.json"):
        fetch_config("acme/dataset-like", timeout_s=5)


# --- unavailable ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_unavailable_without_retries(hub_stub, status):
    hub_stub.add("acme/down", StubRepo(config={"a": 1}, status=status))
    start = time.monotonic()
    with pytest.raises(HubUnavailableError) as info:
        fetch_config("acme/down", timeout_s=5)
    assert time.monotonic() - start < 2
    msg = str(info.value)
    assert f"HTTP {status}" in msg and "acme/down" in msg
    assert "bundled catalog" in msg and "upload" in msg
    assert len(hub_stub.requests) == 1  # no hidden retry/back-off loop


def test_rate_limited_is_unavailable(hub_stub):
    hub_stub.add("acme/busy", StubRepo(config={"a": 1}, status=429))
    with pytest.raises(HubUnavailableError, match="429"):
        fetch_config("acme/busy", timeout_s=5)


def test_connection_refused(monkeypatch):
    with refused_endpoint() as url:
        monkeypatch.setenv("HF_ENDPOINT", url)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        start = time.monotonic()
        with pytest.raises(HubUnavailableError) as info:
            fetch_config("acme/tiny", timeout_s=5)
        assert time.monotonic() - start < 2
    assert "acme/tiny" in str(info.value) and "bundled catalog" in str(info.value)


def test_slow_server_times_out_within_budget(hub_stub):
    hub_stub.add("acme/slow", StubRepo(config={"a": 1}, delay_s=4.0))
    timeout_s = 1.0
    start = time.monotonic()
    with pytest.raises(HubUnavailableError, match=r"no answer within 1 s") as info:
        fetch_config("acme/slow", timeout_s=timeout_s)
    elapsed = time.monotonic() - start
    assert timeout_s * 0.9 <= elapsed < timeout_s + 2.0
    assert "acme/slow" in str(info.value)


def test_trickling_body_hits_the_overall_deadline(hub_stub):
    # Each piece arrives well within the per-read timeout, but the whole body takes ~3.2 s.
    hub_stub.add("acme/trickle", StubRepo(config={"pad": "x" * 4000}, trickle_s=0.4))
    start = time.monotonic()
    with pytest.raises(HubUnavailableError, match=r"no answer within 1 s"):
        fetch_config("acme/trickle", timeout_s=1.0)
    assert time.monotonic() - start < 1.0 + 1.0


def test_offline_mode_makes_no_request(hub_stub, monkeypatch):
    hub_stub.add("acme/tiny", StubRepo(config={"a": 1}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubUnavailableError, match="HF_HUB_OFFLINE"):
        fetch_config("acme/tiny", timeout_s=5)
    assert hub_stub.requests == []


def test_endpoint_is_read_at_call_time(hub_stub, monkeypatch):
    hub_stub.add("acme/tiny", StubRepo(config={"a": 1}))
    assert fetch_config("acme/tiny", timeout_s=5) == {"a": 1}
    with refused_endpoint() as url:
        monkeypatch.setenv("HF_ENDPOINT", url + "/")
        with pytest.raises(HubUnavailableError):
            fetch_config("acme/tiny", timeout_s=5)
    assert len(hub_stub.requests) == 1


# --- bad bodies ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (b"<!doctype html><html><body>Sign in</body></html>", r"not valid JSON at line 1, column 1"),
        (b'{"hidden_size": 2048,', r"not valid JSON"),
        (b"\xff\xfe\x00garbage", r"not valid JSON"),
        (b"[1, 2, 3]", r"is a JSON list, not an object"),
        (b'"just a string"', r"is a JSON str, not an object"),
        (b"null", r"is a JSON NoneType, not an object"),
        (b"[" * 100_000 + b"]" * 100_000, r"nested too deeply|not valid JSON"),
    ],
)
def test_bad_bodies_are_config_errors(hub_stub, body, pattern):
    hub_stub.add("acme/bad", StubRepo(config=body))
    with pytest.raises(ConfigError, match=pattern) as info:
        fetch_config("acme/bad", timeout_s=5)
    assert "acme/bad" in str(info.value)


def test_json_array_config(hub_stub):
    hub_stub.add("acme/array", StubRepo(config=[{"hidden_size": 2048}]))
    with pytest.raises(ConfigError, match="not an object"):
        fetch_config("acme/array", timeout_s=5)


def test_oversized_body_is_rejected(hub_stub):
    big = b'{"pad": "' + b"x" * MAX_CONFIG_BYTES + b'"}'
    hub_stub.add("acme/huge", StubRepo(config=big))
    with pytest.raises(ConfigError, match="larger than 2 MiB"):
        fetch_config("acme/huge", timeout_s=5)


def test_body_of_exactly_the_limit_is_accepted(hub_stub):
    head, tail = b'{"pad": "', b'"}'
    exact = head + b"x" * (MAX_CONFIG_BYTES - len(head) - len(tail)) + tail
    assert len(exact) == MAX_CONFIG_BYTES
    hub_stub.add("acme/big", StubRepo(config=exact))
    assert len(fetch_config("acme/big", timeout_s=5)["pad"]) == MAX_CONFIG_BYTES - len(head) - len(tail)


# --- repo id validation ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "noslash",
        "a/b/c",
        "a/../b",
        "owner/na me",
        "x" * 200,
        "owner/" + "x" * 97,
        "/name",
        "owner/",
        "-owner/name",
        "owner/name-",
        "owner/.name",
        "owner/name.",
        "own--er/name",
        "owner/na..me",
        "owner/name.git",
        "owner/näme",
        "owner/name?x=1",
        "https://huggingface.co/meta-llama/Llama-3.2-1B",
    ],
)
def test_malformed_ids_are_rejected_without_a_request(hub_stub, bad):
    with pytest.raises(InvalidRepoIdError) as info:
        fetch_config(bad, timeout_s=5)
    assert "owner/name" in str(info.value) or "Repo id" in str(info.value)
    with pytest.raises(InvalidRepoIdError):
        validate_repo_id(bad)
    assert hub_stub.requests == []


def test_invalid_repo_id_message_names_the_id_and_the_rule():
    with pytest.raises(InvalidRepoIdError, match=r"'owner/na me' has an invalid name"):
        validate_repo_id("owner/na me")
    with pytest.raises(InvalidRepoIdError, match=r"exactly 'owner/name'"):
        validate_repo_id("noslash")
    with pytest.raises(InvalidRepoIdError, match=r"at most 96"):
        validate_repo_id("owner/" + "x" * 200)


@pytest.mark.parametrize(
    "good",
    ["meta-llama/Llama-3.2-1B", "Qwen/Qwen2.5-0.5B", "a/b", "_x/y_", "owner/" + "x" * 96, "A1/b.c-d_e"],
)
def test_valid_ids_pass(good):
    assert validate_repo_id(f" {good} ") == good


def test_non_string_repo_id():
    with pytest.raises(InvalidRepoIdError):
        validate_repo_id(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout_s", [0, -1, float("nan"), float("inf")])
def test_bad_timeout_is_a_programming_error(timeout_s):
    with pytest.raises(ValueError):
        fetch_config("acme/tiny", timeout_s=timeout_s)


def test_fallback_notice_says_what_happened(hub_stub, llama_config):
    # A 503 for a bundled repo: the bundled copy is shown, and the notice says so (and that the revision was
    # not checked) instead of asking the user to pick the catalog.
    from engine.model.sources import config_from_hub

    hub_stub.add(LLAMA, StubRepo(config=llama_config, status=503))
    config, origin = config_from_hub(LLAMA, revision="v2", timeout_s=5)
    assert origin.kind == "catalog_fallback" and config["hidden_size"] == 2048
    assert origin.notice.startswith("The Hub is unreachable (server error, HTTP 503): showing the bundled copy")
    assert "'v2'" in origin.notice and "pick the model" not in origin.notice
