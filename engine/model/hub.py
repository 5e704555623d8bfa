"""Read a model's ``config.json`` from the Hugging Face Hub, with typed, actionable errors.

Pure Python (no UI imports). The HTTP is done by huggingface_hub's own client: the shared ``httpx2.Client`` from
:func:`huggingface_hub.utils.get_session` (which honours ``HF_HUB_OFFLINE``, proxies set through
``huggingface_hub.set_client_factory`` and adds the Hub's request id), with URLs built by
:func:`huggingface_hub.hf_hub_url`, headers (user agent, token) by :func:`huggingface_hub.utils.build_hf_headers`
and HTTP errors decoded by :func:`huggingface_hub.utils.hf_raise_for_status` (``X-Error-Code`` header ->
``GatedRepoError`` / ``RepositoryNotFoundError`` / ``RevisionNotFoundError`` / ``RemoteEntryNotFoundError``).

Why not :func:`huggingface_hub.hf_hub_download`: in huggingface_hub 2.4 it cannot honour a time budget. When its
first ``HEAD`` fails with a connection error, a timeout or a 5xx and the file is not cached, it retries the ``HEAD``
with a hard-coded 60 s timeout and 5 retries with 1-2-4-8-8 s back-off (``_ETAG_RETRY_TIMEOUT``,
``retry_on_errors=True``): about 23 s for a refused connection or a 503 whatever ``etag_timeout`` is, and minutes for
a server that hangs; its ``GET`` timeout is ``HF_HUB_DOWNLOAD_TIMEOUT``, read once at import. It also needs a cache
directory. A single streamed ``GET`` with an explicit timeout is bounded, needs no disk, and caps the body size.

The endpoint is read from the ``HF_ENDPOINT`` environment variable at call time (huggingface_hub itself reads it
once, at import, into ``huggingface_hub.constants.ENDPOINT``), so tests and mirrors can be switched at run time.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import os
import re
import threading
import time
from typing import Any, Callable, Hashable, TypeVar

import httpx2  # huggingface_hub 2.x's HTTP library (a dependency of huggingface_hub, not of this project directly)
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from huggingface_hub import hf_hub_url
from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

from engine.secrets import REDACTED, looks_like_token
from engine.errors import (
    ConfigError,
    EngineError,
    GatedRepoError,
    HubError,
    HubUnavailableError,
    InvalidRepoIdError,
    RepoNotFoundError,
)
from engine.model.config_fields import MAX_CONFIG_BYTES, load_config_json

__all__ = [
    "CONFIG_FILENAME", "DEFAULT_ENDPOINT", "DEFAULT_TIMEOUT_S", "MAX_CONFIG_BYTES", "TIMEOUT_ENV", "fetch_config",
    "fetch_config_shared", "hub_timeout_s", "shared_read", "validate_repo_id",
]

#: Name of the file read from the repo.
CONFIG_FILENAME = "config.json"
#: Endpoint used when ``HF_ENDPOINT`` is unset or empty.
DEFAULT_ENDPOINT = "https://huggingface.co"
#: Time budget of one Hub read, in seconds, when ``FINETUNE_FIT_HUB_TIMEOUT`` is not set.
DEFAULT_TIMEOUT_S = 10.0
#: Environment variable with the time budget of one Hub read in seconds (e.g. ``5``): what the app and the CLI wait
#: for a slow or hanging Hub before saying it is unreachable. Read at call time.
TIMEOUT_ENV = "FINETUNE_FIT_HUB_TIMEOUT"
_MAX_TIMEOUT_S = 300.0

_PART_MAX_LEN = 96
# One part of a repo id (owner or name), per the Hub's rules as huggingface_hub.utils.validate_repo_id encodes them:
# ASCII letters, digits, '-', '_', '.'; first and last characters are a letter, a digit or '_'.
_PART_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]*[A-Za-z0-9_])?", re.ASCII)
# A token as the Hub issues them (e.g. 'hf_...'): one line of printable ASCII without spaces.
_TOKEN_RE = re.compile(r"[\x21-\x7e]+", re.ASCII)
_EXAMPLE_ID = "meta-llama/Llama-3.2-1B"
_CATALOG_HINT = "pick the model from the bundled catalog or upload its config.json instead"


def _shown(text: str, limit: int = 60) -> str:
    """``repr`` of user text for messages, cut to ``limit`` characters; a pasted token is never echoed."""
    if looks_like_token(text):
        return REDACTED
    return repr(text if len(text) <= limit else text[:limit] + "…")


def validate_repo_id(repo_id: str) -> str:
    """Check that ``repo_id`` is a Hub model id of the form ``owner/name`` and return it cleaned.

    Surrounding whitespace is removed. Each of ``owner`` and ``name`` must be 1 to 96 characters of ASCII letters,
    digits, ``-``, ``_`` or ``.``, may not start or end with ``-`` or ``.``, may not contain ``--`` or ``..``, and the
    name may not end with ``.git`` (the Hub's rules, as huggingface_hub 2.4's ``validate_repo_id`` checks them;
    unlike the Hub, a namespace is required here, so legacy un-namespaced ids like ``gpt2`` must be written
    ``openai-community/gpt2``).

    Args:
        repo_id: text typed by the user, e.g. ``" meta-llama/Llama-3.2-1B "``.

    Returns:
        The stripped id, e.g. ``"meta-llama/Llama-3.2-1B"``.

    Raises:
        InvalidRepoIdError: the text is not a valid ``owner/name`` id (or looks like an access token, which the
            message does not repeat); the message says which rule is broken.
    """
    if not isinstance(repo_id, str):
        raise InvalidRepoIdError(
            f"A Hub repo id must be text like '{_EXAMPLE_ID}', not {type(repo_id).__name__}."
        )
    cleaned = repo_id.strip()
    if not cleaned:
        raise InvalidRepoIdError(f"Enter a Hub repo id of the form 'owner/name', e.g. '{_EXAMPLE_ID}'.")
    if looks_like_token(cleaned):  # pasted into the wrong box: not echoed, never sent as a path
        raise InvalidRepoIdError(f"The repo id box holds {REDACTED}; paste tokens into the token box only, and enter "
                                 f"a repo id like '{_EXAMPLE_ID}'.")
    if cleaned.startswith(("http://", "https://")) or "huggingface.co/" in cleaned:
        raise InvalidRepoIdError(
            f"Repo id {_shown(cleaned)} looks like a URL; enter only the 'owner/name' part, e.g. '{_EXAMPLE_ID}'."
        )
    parts = cleaned.split("/")
    if len(parts) != 2:
        raise InvalidRepoIdError(
            f"Repo id {_shown(cleaned)} must be exactly 'owner/name' with one '/', e.g. '{_EXAMPLE_ID}'."
        )
    for label, part in zip(("owner", "name"), parts):
        if not part:
            raise InvalidRepoIdError(f"Repo id {_shown(cleaned)} has an empty {label}; use 'owner/name'.")
        if len(part) > _PART_MAX_LEN:
            raise InvalidRepoIdError(
                f"Repo id {_shown(cleaned)} has {len(part)} characters in its {label}; the Hub allows at most"
                f" {_PART_MAX_LEN}."
            )
        if "--" in part or ".." in part:
            raise InvalidRepoIdError(f"Repo id {_shown(cleaned)} may not contain '--' or '..'.")
        if not _PART_RE.fullmatch(part):
            raise InvalidRepoIdError(
                f"Repo id {_shown(cleaned)} has an invalid {label}: use only ASCII letters, digits, '-', '_' and"
                " '.', not starting or ending with '-' or '.'."
            )
    if parts[1].endswith(".git"):
        raise InvalidRepoIdError(f"Repo id {_shown(cleaned)} may not end with '.git'; drop that suffix.")
    return cleaned


def hub_timeout_s() -> float:
    """The time budget of one Hub read: ``FINETUNE_FIT_HUB_TIMEOUT`` seconds as set now, else
    :data:`DEFAULT_TIMEOUT_S`. A value that is not a number in (0, 300] is ignored (the default is used): a typo in a
    deployment's environment must not make every read hang or fail at once."""
    text = (os.environ.get(TIMEOUT_ENV) or "").strip()
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return value if math.isfinite(value) and 0 < value <= _MAX_TIMEOUT_S else DEFAULT_TIMEOUT_S


def _endpoint() -> str:
    """The Hub base URL: ``HF_ENDPOINT`` as set now (not at import), without trailing '/', or huggingface.co."""
    return (os.environ.get("HF_ENDPOINT") or "").strip().rstrip("/") or DEFAULT_ENDPOINT


def _offline() -> bool:
    """Whether offline mode is on: huggingface_hub's import-time flag, or ``HF_HUB_OFFLINE`` set now."""
    now = (os.environ.get("HF_HUB_OFFLINE") or "").strip().upper() in {"1", "ON", "YES", "TRUE"}
    return now or hf_constants.is_offline_mode()


class _TooLarge(Exception):
    """Internal: the body exceeded MAX_CONFIG_BYTES."""


class _OutOfTime(Exception):
    """Internal: the overall deadline passed while the body was still arriving."""


class _NotAHub(Exception):
    """Internal: a 2xx answer without any X-Repo-Commit header (a proxy or captive portal, not a Hub)."""


class _ServerError(Exception):
    """Internal: a 5xx/408/429 answer; status code in args[0]."""


def _download(url: str, headers: dict[str, str], timeout_s: float) -> bytes:
    """GET ``url`` through huggingface_hub's shared client and return the body (at most MAX_CONFIG_BYTES bytes).

    Each network phase (connect, each read, write, pool wait) is limited to ``timeout_s`` seconds by httpx2, and
    the body loop gives up once ``timeout_s`` seconds have passed since the call started, so a slow or hanging
    server makes the call fail after about ``timeout_s`` seconds (worst case about ``2 * timeout_s``: a slow connect
    followed by a slow first byte). Redirects (the Hub's ``307`` to ``/api/resolve-cache/...``, renamed repos, CDN
    for LFS files) are followed by the client, which drops ``Authorization`` when leaving the origin.
    """
    deadline = time.monotonic() + timeout_s
    timeout = httpx2.Timeout(timeout_s)
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
        status = response.status_code
        if status >= 500 or status in (408, 429):
            raise _ServerError(status)  # body not needed (and not read: it may be large or slow)
        hf_raise_for_status(response)  # 4xx -> huggingface_hub's typed errors (reads the small error body)
        declared = response.headers.get("Content-Length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_CONFIG_BYTES:
            raise _TooLarge(int(declared))
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_CONFIG_BYTES:
                raise _TooLarge(len(body))
            if time.monotonic() > deadline:
                raise _OutOfTime()
        if not any(r.headers.get(hf_constants.HUGGINGFACE_HEADER_X_REPO_COMMIT) for r in (*response.history, response)):
            raise _NotAHub()
        return bytes(body)


def _clean_token(token: str | bool | None, repo_id: str) -> str | bool | None:
    """Strip a pasted token; '' means "not given" (None); False means "send no token". Raises GatedRepoError if it
    cannot be a token."""
    if token is None or token is False:
        return token
    if not isinstance(token, str):
        raise TypeError("token must be a string or None")
    token = token.strip()
    if not token:
        return None
    if not _TOKEN_RE.fullmatch(token):
        # Never echo the token: it is a secret, and may have been pasted into the wrong field.
        raise GatedRepoError(
            f"The token given for '{repo_id}' is malformed (it must be one line of printable ASCII, like 'hf_...');"
            " paste it again or set HF_TOKEN."
        )
    return token


def _map_hub_http_error(
    error: hf_errors.HfHubHTTPError, *, repo_id: str, revision: str, endpoint: str, token_sent: bool
) -> HubError:
    """Translate a huggingface_hub 2.4 HTTP error into this engine's typed error (message without any secret)."""
    status = error.response.status_code if error.response is not None else None
    page = f"{endpoint}/{repo_id}"
    server_message = (error.server_message or "") if isinstance(error.server_message, str) else ""

    if isinstance(error, hf_errors.GatedRepoError):  # subclass of RepositoryNotFoundError: test it first
        if token_sent:
            return GatedRepoError(
                f"'{repo_id}' is gated and the token has no access yet: accept the terms on the model page {page}"
                " (approval may take a while) with the account that owns the token, then retry."
            )
        return GatedRepoError(
            f"'{repo_id}' is gated: accept the terms on the model page {page}, then set HF_TOKEN or paste a token"
            " of that account."
        )
    if isinstance(error, hf_errors.RevisionNotFoundError):
        return RepoNotFoundError(
            f"Revision {_shown(revision)} does not exist in '{repo_id}'; use a branch, tag or commit id of that repo"
            " (e.g. 'main')."
        )
    if isinstance(error, hf_errors.RemoteEntryNotFoundError):
        return RepoNotFoundError(
            f"'{repo_id}' has no {CONFIG_FILENAME} at revision {_shown(revision)} (it may not be a transformers"
            f" model); {_CATALOG_HINT}."
        )
    if isinstance(error, hf_errors.DisabledRepoError):
        return RepoNotFoundError(f"'{repo_id}' has been disabled on the Hub; choose another model.")
    if isinstance(error, hf_errors.RepositoryNotFoundError):
        if token_sent:
            return RepoNotFoundError(
                f"Repo '{repo_id}' was not found on the Hub, or it is private and the token has no access; check the"
                " spelling of the id."
            )
        return RepoNotFoundError(
            f"Repo '{repo_id}' was not found on the Hub; check the spelling, or if it is private set HF_TOKEN or"
            " paste a token with access."
        )
    if status == 401:
        if token_sent or "invalid credentials" in server_message.lower():
            return GatedRepoError(
                f"The Hub rejected the token (invalid, expired or revoked) while reading '{repo_id}'; create a new"
                " one at https://huggingface.co/settings/tokens and paste it or set HF_TOKEN, or clear it to read"
                " public models."
            )
        return RepoNotFoundError(
            f"'{repo_id}' needs authentication (private or gated); set HF_TOKEN or paste a token with access."
        )
    if status == 403:
        return GatedRepoError(
            f"The Hub refused the token access to '{repo_id}' (HTTP 403); make sure the token can read this repo"
            " (fine-grained tokens need read access to public gated repos) and that you accepted its terms at"
            f" {page}."
        )
    if status == 404:
        return RepoNotFoundError(f"'{repo_id}' or its {CONFIG_FILENAME} was not found on the Hub (HTTP 404).")
    return HubError(f"The Hub refused the request for '{repo_id}' (HTTP {status}); check the repo id and revision.")


def _unavailable(repo_id: str, reason: str) -> HubUnavailableError:
    error = HubUnavailableError(f"The Hub is unreachable ({reason}) while reading '{repo_id}'; {_CATALOG_HINT}.")
    error.reason = reason
    return error


def _parse_config(repo_id: str, body: bytes) -> dict[str, Any]:
    """Decode ``body`` as a JSON object. Raises ConfigError for anything else."""
    try:
        data = load_config_json(body, f"The {CONFIG_FILENAME} of '{repo_id}'")  # bytes: UTF-8/16/32 per RFC 8259
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        failure: ConfigError = ConfigError(
            f"The {CONFIG_FILENAME} of '{repo_id}' is not valid JSON{where}; upload a valid config.json instead."
        )
    except RecursionError:
        failure = ConfigError(f"The {CONFIG_FILENAME} of '{repo_id}' is nested too deeply to be a model config.")
    else:
        if isinstance(data, dict):
            return data
        failure = ConfigError(
            f"The {CONFIG_FILENAME} of '{repo_id}' is a JSON {type(data).__name__}, not an object; a model config"
            " is a JSON object like {\"model_type\": ...}."
        )
    raise failure  # raised outside the except block: no chained upstream text


def fetch_config(
    repo_id: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """Download and parse ``config.json`` of the Hub model repo ``repo_id``.

    Makes one ``GET {HF_ENDPOINT}/{repo_id}/resolve/{revision}/config.json`` through huggingface_hub's HTTP client
    (relies on huggingface_hub 2.4 behaviour: ``get_session`` returns an ``httpx2.Client`` created with no default
    timeout and ``follow_redirects=True``; ``hf_raise_for_status`` maps the Hub's ``X-Error-Code`` header to typed
    errors, and maps a ``401`` whose ``X-Error-Message`` is ``Invalid credentials in Authorization header`` to a plain
    ``HfHubHTTPError``). Nothing is written to disk, no cache is used or filled, and nothing downloaded is executed
    (the body is only parsed with :func:`json.loads`).

    Args:
        repo_id: ``owner/name`` of a model repo; validated with :func:`validate_repo_id`.
        revision: branch, tag or 40-hex commit id; ``None`` or blank means ``"main"``.
        token: a Hub access token (``hf_...``); surrounding whitespace is stripped. ``None`` or blank means
            huggingface_hub's default: ``HF_TOKEN`` from the environment, else the token saved by ``hf auth login``
            (unless ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set). ``False`` sends no token at all (what the UI uses
            for the shared cache of public configs). The token is never put into any message.
        timeout_s: time budget in seconds (> 0); ``None`` means :func:`hub_timeout_s` (``FINETUNE_FIT_HUB_TIMEOUT``,
            default 10 s). Each network phase is limited to it and the body download stops
            once it is spent, so the call gives up after about ``timeout_s`` seconds (at worst about twice that).
            ``HF_HUB_ETAG_TIMEOUT`` / ``HF_HUB_DOWNLOAD_TIMEOUT`` do not apply.

    Returns:
        The parsed JSON object (a ``dict``; key order as in the file).

    Raises:
        InvalidRepoIdError: ``repo_id`` is malformed (no request is made).
        RepoNotFoundError: the repo, the revision or its ``config.json`` does not exist, or the repo is private and
            no token with access was sent.
        GatedRepoError: the repo is gated and no token, or a token without accepted terms, was sent; or the Hub
            rejected the token (invalid/revoked, HTTP 401) or refused it (HTTP 403); or ``token`` is malformed.
        HubUnavailableError: offline mode (``HF_HUB_OFFLINE``), connection refused or failed, DNS or TLS failure,
            timeout, HTTP 5xx/408/429, too many redirects, or an ``HF_ENDPOINT`` that does not answer like a Hub.
        HubError: any other HTTP refusal (e.g. 400).
        ConfigError: the body is larger than :data:`MAX_CONFIG_BYTES`, not JSON, or not a JSON object.
        ValueError: ``timeout_s`` is not a positive finite number (a programming error, not bad input).
    """
    if timeout_s is None:
        timeout_s = hub_timeout_s()
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) \
            or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    repo_id = validate_repo_id(repo_id)
    revision = (revision or "").strip() or hf_constants.DEFAULT_REVISION
    if looks_like_token(revision):  # pasted into the wrong box: never sent in the request path
        raise InvalidRepoIdError(f"The revision holds {REDACTED}; paste tokens into the token box only, and give a "
                                 "branch, tag or commit id as the revision.")
    token = _clean_token(token, repo_id)
    if _offline():
        raise _unavailable(repo_id, "offline mode is on: HF_HUB_OFFLINE is set")

    endpoint = _endpoint()
    failure: EngineError | None = None
    body = b""
    try:
        # token=None -> huggingface_hub resolves HF_TOKEN / the saved token itself.
        headers = build_hf_headers(token=token)
    except Exception:  # noqa: BLE001 - e.g. a broken token file or a failed OIDC exchange; never echo details
        failure = HubError(
            f"Could not load the Hugging Face token configured on this machine to read '{repo_id}'; paste a token"
            " or fix HF_TOKEN."
        )
    if failure is not None:
        raise failure
    token_sent = any(k.lower() == "authorization" for k in headers)
    url = hf_hub_url(repo_id, CONFIG_FILENAME, revision=revision, endpoint=endpoint)

    try:
        body = _download(url, headers, timeout_s)
    except hf_errors.OfflineModeIsEnabled:
        failure = _unavailable(repo_id, "offline mode is on: HF_HUB_OFFLINE is set")
    except hf_errors.HfHubHTTPError as exc:
        failure = _map_hub_http_error(
            exc, repo_id=repo_id, revision=revision, endpoint=endpoint, token_sent=token_sent
        )
    except _ServerError as exc:
        status = exc.args[0]
        reason = "rate limited, HTTP 429" if status == 429 else f"server error, HTTP {status}"
        failure = _unavailable(repo_id, reason)
    except (_OutOfTime, httpx2.TimeoutException):
        failure = _unavailable(repo_id, f"no answer within {timeout_s:g} s")
    except _TooLarge:
        failure = ConfigError(
            f"The {CONFIG_FILENAME} of '{repo_id}' is larger than {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, too big"
            " to be a model config; upload the right config.json instead."
        )
    except _NotAHub:
        failure = _unavailable(repo_id, f"{endpoint} does not answer like a Hugging Face Hub; check HF_ENDPOINT")
    except httpx2.TooManyRedirects:
        failure = _unavailable(repo_id, "too many redirects")
    except httpx2.ConnectError:
        failure = _unavailable(repo_id, "connection failed")
    except (httpx2.UnsupportedProtocol, httpx2.InvalidURL):
        failure = _unavailable(repo_id, f"invalid endpoint URL {_shown(endpoint)}; check HF_ENDPOINT")
    except (httpx2.HTTPError, httpx2.StreamError, OSError) as exc:
        failure = _unavailable(repo_id, f"network error: {type(exc).__name__}")
    # Raised outside the except blocks on purpose: the upstream exception (which may quote request headers) is not
    # chained as __cause__ or __context__.
    if failure is not None:
        raise failure
    return _parse_config(repo_id, body)


# --------------------------------------------------------------------------------------------------
# One read in flight per repo

T = TypeVar("T")


class _Flight:
    """One read in progress: its callers wait on ``done``, then all see the same value or failure."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


_FLIGHTS: dict[Hashable, _Flight] = {}
_FLIGHTS_LOCK = threading.Lock()


def shared_read(key: Hashable, read: Callable[[], T]) -> T:
    """``read()``, run once for all the threads that ask for the same ``key`` while it runs ("single flight").

    Why: a web server's visitors opening the same repo while the Hub hangs each waited out their own timeout one after
    another (a per-key lock around a read that fails and is not cached serves callers in turn: 10, 20, 30 s for three
    visitors at a 10 s timeout). Here the first caller reads and the others wait for that read's outcome: every caller
    is answered after one timeout. Followers get a deep copy of the value (no caller can change another's) or a copy
    of the exception (raised without the reader's traceback or chained causes). A read that finished is not
    remembered: caching is the caller's business (st.cache_data in the app).

    Raises:
        whatever ``read`` raises, to every caller of that flight.
    """
    while True:
        with _FLIGHTS_LOCK:
            flight = _FLIGHTS.get(key)
            leader = flight is None
            if leader:
                flight = _FLIGHTS[key] = _Flight()
        assert flight is not None
        if leader:
            try:
                flight.value = read()
            except BaseException as exc:  # noqa: BLE001 - handed to every caller below
                flight.error = exc
            finally:
                with _FLIGHTS_LOCK:
                    _FLIGHTS.pop(key, None)
                flight.done.set()
            if flight.error is not None:
                raise flight.error
            return flight.value
        flight.done.wait()
        if flight.error is None:
            return copy.deepcopy(flight.value)
        if isinstance(flight.error, Exception):
            error = copy.copy(flight.error)  # same type, message and attributes (HubUnavailableError.reason)
            error.__traceback__ = None
            raise error from None
        # The reader's thread was stopped (a rerun or stop of its script, an interrupt: not an Exception): not this
        # caller's outcome, so it reads again itself.


def _token_key(token: str | bool | None) -> str | bool | None:
    """What tells two callers' tokens apart in a flight key: a digest, never the token itself."""
    if isinstance(token, str) and token.strip():
        return hashlib.sha256(token.strip().encode()).hexdigest()[:16]
    return token if isinstance(token, bool) else None


def fetch_config_shared(
    repo_id: str,
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    timeout_s: float | None = None,
) -> dict[str, Any]:
    """:func:`fetch_config`, with concurrent callers for the same endpoint, repo, revision and token sharing one read
    and its one timeout (:func:`shared_read`). Same arguments, result and exceptions as :func:`fetch_config`."""
    key = ("config", _endpoint(), repo_id.strip() if isinstance(repo_id, str) else repo_id,
           (revision or "").strip() or hf_constants.DEFAULT_REVISION, _token_key(token))
    return shared_read(key, lambda: fetch_config(repo_id, revision=revision, token=token, timeout_s=timeout_s))
