"""Sidebar model picker: bundled catalog, any Hub repo id, or an uploaded config.json.

The picked model is kept in ``st.session_state["model"]`` as a :class:`PickedModel` for every page.
A Hugging Face token comes from a password field (kept in this session only), ``st.secrets`` or
``HF_TOKEN``; it is never rendered, logged, cached, exported or put in a URL.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

import streamlit as st

from engine.model.architecture import Architecture
from engine.model.build import architecture_or_approximation
from engine.model.checkpoint import CheckpointCount, fetch_checkpoint_count
from engine.errors import (
    ConfigError, EngineError, GatedRepoError, HubUnavailableError, RepoNotFoundError, UnsupportedModelError,
)
from engine.model.hub import fetch_config_shared, hub_timeout_s, shared_read
from engine.model.sources import ConfigOrigin, catalog_choices, catalog_fallback, config_from_catalog, hub_origin, parse_config_bytes
from ui.formats import md_plain

DEFAULT_REPO = "meta-llama/Llama-3.1-8B"
SOURCES = ("Catalog", "Hub repo id", "Upload config.json")
#: After the Hub was unreachable for a repo, this session does not ask the Hub again for it for this many seconds:
#: a hung Hub costs a user one timeout (``FINETUNE_FIT_HUB_TIMEOUT``, 10 s by default), not one per widget change.
OUTAGE_RETRY_S = 60.0
_OUTAGES = "_hub_outages"  # session state: (endpoint, repo, revision) -> (monotonic expiry, reason, message)
_TOKEN_READS = "_hub_token_reads"  # session state: (endpoint, repo, revision, token fingerprint) -> config
_UPLOAD_HINT = "upload the model's own config.json (the JSON file of a few kB in its Hub repo)"
# Checkpoint headers are read by huggingface_hub's HfApi, whose HEAD requests wait for its own timeouts and retries
# (tens of seconds for a hung or failing Hub); the page waits at most the Hub timeout for them.
_CHECKPOINT_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="hub-checkpoint")


@dataclass(frozen=True)
class PickedModel:
    """The model every page works on."""

    arch: Architecture
    origin: ConfigOrigin
    config: dict[str, Any]

    @property
    def title(self) -> str:
        """Display name with the repo id when known."""
        if self.origin.repo_id and self.origin.repo_id != self.origin.name:
            return f"{self.origin.name} ({self.origin.repo_id})"
        return self.origin.name


def _token() -> str | None:
    """Token from the session's password field, then Streamlit secrets, then ``HF_TOKEN``."""
    typed = st.session_state.get("hf_token_input", "").strip()
    if typed:
        return typed
    try:
        secret = st.secrets.get("HF_TOKEN")
    except Exception:  # no secrets.toml: Streamlit raises rather than returning None
        secret = None
    return secret or os.environ.get("HF_TOKEN") or None


def _endpoint_now() -> str:
    return (os.environ.get("HF_ENDPOINT") or "").strip().rstrip("/")


@st.cache_data(ttl=3600, max_entries=256, show_spinner="Reading config.json from the Hub…")
def _cached_public_config(repo_id: str, revision: str | None, endpoint: str) -> dict[str, Any]:
    # Cached for everyone: only configs readable without any token land here (token=False sends none), keyed by repo,
    # revision and endpoint, never by a token; errors are not cached.
    return fetch_config_shared(repo_id, revision=revision, token=False, timeout_s=hub_timeout_s())


def _public_config(repo_id: str, revision: str | None, endpoint: str) -> dict[str, Any]:
    """The public config, visitors asking at once sharing one read: st.cache_data's own per-key lock would serve them
    one after another, each waiting out its own timeout when the Hub hangs (errors are not cached), so the flight is
    taken before the cache (engine.model.hub.shared_read); a cached config is answered at once either way."""
    return shared_read(("public_config", repo_id, revision, endpoint),
                       lambda: _cached_public_config(repo_id, revision, endpoint))


def _fingerprint(token: str) -> str:
    # Session-local memo key: a digest, so the token itself is not copied into another structure.
    return hashlib.sha256(token.encode()).hexdigest()[:16]


def _recent_outage(key: tuple) -> HubUnavailableError | None:
    """The Hub failure this session met for ``key`` less than OUTAGE_RETRY_S ago, rebuilt, or None."""
    outages: dict = st.session_state.setdefault(_OUTAGES, {})
    seen = outages.get(key)
    if seen is None:
        return None
    expiry, reason, message = seen
    left = expiry - time.monotonic()
    if left <= 0:
        outages.pop(key, None)
        return None
    error = HubUnavailableError(f"{message} (This session asks the Hub again in {left:.0f} s.)")
    error.reason = reason
    return error


def _hub_config(repo_id: str, revision: str | None) -> tuple[dict[str, Any], ConfigOrigin]:
    """Public configs come from the shared cache; gated/private ones are fetched with the user's token and kept only
    in this session, so one user's access is never served to another. An unreachable Hub falls back to the bundled
    copy when there is one, and is not asked again by this session for OUTAGE_RETRY_S seconds."""
    endpoint = _endpoint_now()
    key = (endpoint, repo_id.strip(), revision)
    try:
        outage = _recent_outage(key)
        if outage is not None:
            raise outage
        try:
            return _public_config(repo_id, revision, endpoint), hub_origin(repo_id, revision)
        except (GatedRepoError, RepoNotFoundError):
            token = _token()
            if not token:
                raise
            reads: dict = st.session_state.setdefault(_TOKEN_READS, {})
            memo_key = (*key, _fingerprint(token))
            if memo_key not in reads:
                with st.spinner("Reading config.json with your token…"):
                    reads[memo_key] = fetch_config_shared(repo_id, revision=revision, token=token, timeout_s=hub_timeout_s())
            return reads[memo_key], hub_origin(repo_id, revision)
    except HubUnavailableError as exc:
        outages: dict = st.session_state.setdefault(_OUTAGES, {})
        if key not in outages:
            outages[key] = (time.monotonic() + OUTAGE_RETRY_S, exc.reason, str(exc))
        return catalog_fallback(repo_id, exc, revision)


def _catalog_widget() -> tuple[dict[str, Any], ConfigOrigin]:
    choices = dict(catalog_choices())
    ids = list(choices)
    st.session_state.setdefault("catalog_repo", DEFAULT_REPO if DEFAULT_REPO in ids else ids[0])
    st.selectbox(
        "Model",
        ids,
        format_func=lambda rid: f"{choices[rid]} · {rid}",
        key="catalog_repo",
    )
    return config_from_catalog(st.session_state["catalog_repo"])


def _hub_widget() -> tuple[dict[str, Any], ConfigOrigin] | None:
    st.text_input("Hub repo id", placeholder="owner/name, e.g. Qwen/Qwen2.5-7B", key="hub_repo_id")
    st.text_input("Revision", placeholder="main", key="hub_revision")
    st.text_input(
        "Hugging Face token (gated repos)",
        type="password",
        key="hf_token_input",
        help="Kept in this browser session only. HF_TOKEN or st.secrets['HF_TOKEN'] on the server work too.",
    )
    repo_id = st.session_state.get("hub_repo_id", "").strip()
    if not repo_id:
        st.info("Type a repo id to read its config.json from the Hub.")
        return None
    return _hub_config(repo_id, st.session_state.get("hub_revision", "").strip() or None)


def _upload_widget() -> tuple[dict[str, Any], ConfigOrigin] | None:
    upload = st.file_uploader("config.json", type=["json"], key="config_upload")
    if upload is None:
        st.info("Upload a model's config.json (parsed as data; nothing is executed).")
        return None
    try:
        config = parse_config_bytes(upload.getvalue(), upload.name)
    except ConfigError as exc:
        message = str(exc)
        raise ConfigError(message if "upload" in message else f"{message}; {_UPLOAD_HINT}") from None
    return config, ConfigOrigin(kind="file", name=upload.name)


@st.cache_resource(max_entries=64, ttl=3600, show_spinner=False)
def _architecture(key: str, _config: dict[str, Any]) -> tuple[Architecture, str | None]:
    return architecture_or_approximation(_config)


def shared_architecture(config: dict[str, Any]) -> tuple[Architecture, str | None]:
    """:func:`architecture_or_approximation` of ``config``, one object per config for every rerun and session.

    Why (issue 26): the engine remembers its per-architecture sums by the architecture's identity (engine.memo,
    engine.time.step, engine.scenario.lora) and keeps the object beside them. A new Architecture built on every rerun
    missed all of them and stayed alive in them (hundreds on a busy server, tens of MB, until each memo's size is
    reached), and cost its construction again each time. Keyed by the config's exact JSON (a config is a few kB), at
    most 64 configs for an hour: the catalog's models and some Hub repos or uploads. Errors are not cached."""
    return _architecture(json.dumps(config, sort_keys=True, default=str), config)


def model_sidebar() -> PickedModel | None:
    """Draw the picker in the sidebar and return the model, or None after showing why there is none."""
    with st.sidebar:
        st.header("Model")
        source = st.radio("Source", SOURCES, key="model_source", horizontal=False)
        try:
            if source == SOURCES[0]:
                loaded = _catalog_widget()
            elif source == SOURCES[1]:
                loaded = _hub_widget()
            else:
                loaded = _upload_widget()
            if loaded is None:
                st.session_state["model"] = None
                return None
            config, origin = loaded
            try:
                arch, approximation = shared_architecture(config)
            except ConfigError as exc:
                if isinstance(exc, UnsupportedModelError):
                    raise
                # Missing, zero, negative or absurd sizes: say what to check as well.
                raise ConfigError(f"{exc}. The sizes must be those of a transformers config.json: check the file, or "
                                  "pick the model from the catalog.") from None
            picked = PickedModel(arch=arch, origin=origin, config=config)
        except EngineError as exc:
            st.error(md_plain(exc))
            st.session_state["model"] = None
            return None
        if origin.notice:
            # Short here; the pages show the full notice.
            st.caption(":orange[Hub unreachable: bundled copy shown.]")
        if approximation:
            st.warning(md_plain(approximation))
        st.caption(f"{md_plain(picked.arch.model_type)} · {picked.arch.total_parameters:,} parameters · from {origin.kind.replace('_', ' ')}")
    st.session_state["model"] = picked
    return picked


class _NotCached(Exception):
    """Internal: a checkpoint count that failed for a passing reason (the Hub down or slow), so it is not cached."""

    def __init__(self, count: CheckpointCount) -> None:
        super().__init__(count.reason)
        self.count = count


def _bounded_count(repo_id: str, revision: str | None, token: str | bool) -> CheckpointCount:
    """fetch_checkpoint_count, given up after the Hub timeout (the worker thread finishes on its own)."""
    timeout_s = hub_timeout_s()
    future = _CHECKPOINT_POOL.submit(fetch_checkpoint_count, repo_id, revision=revision, token=token,
                                     timeout_s=timeout_s)
    try:
        return future.result(timeout=timeout_s)
    except concurrent.futures.TimeoutError:
        return CheckpointCount(total=None, reason=f"the Hub did not answer within {timeout_s:g} s; try again later")


def _passing_failure(count: CheckpointCount) -> bool:
    reason = count.reason or ""
    return count.total is None and any(
        s in reason for s in ("could not be read", "did not answer", "(HTTP 5", "(HTTP 429", "(HTTP 408"))


@st.cache_data(ttl=3600, max_entries=256, show_spinner="Reading safetensors headers from the Hub…")
def _public_checkpoint_count(repo_id: str, revision: str | None, endpoint: str) -> CheckpointCount:
    count = _bounded_count(repo_id, revision, token=False)
    if _passing_failure(count):
        raise _NotCached(count)
    return count


def checkpoint_count(picked: PickedModel) -> CheckpointCount:
    """The checkpoint's stored parameter count for the picked model's repo (public: shared cache;
    gated: read with the user's token, uncached). Waits at most about the Hub timeout."""
    repo_id, revision = picked.origin.repo_id or "", picked.origin.revision
    try:
        count = _public_checkpoint_count(repo_id, revision, _endpoint_now())
    except _NotCached as exc:
        return exc.count
    token = _token()
    if count.total is None and "gated" in (count.reason or "") and token:
        with st.spinner("Reading safetensors headers with your token…"):
            count = _bounded_count(repo_id, revision, token=token)
    return count
