"""Sidebar model picker: bundled catalog, any Hub repo id, or an uploaded config.json.

The picked model is kept in ``st.session_state["model"]`` as a :class:`PickedModel` for every page.
A Hugging Face token comes from a password field (kept in this session only), ``st.secrets`` or
``HF_TOKEN``; it is never rendered, logged, cached, exported or put in a URL.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import streamlit as st

from engine.architecture import Architecture, architecture_or_approximation
from engine.checkpoint import CheckpointCount, fetch_checkpoint_count
from engine.errors import EngineError, GatedRepoError, HubUnavailableError, RepoNotFoundError
from engine.hub import fetch_config
from engine.sources import ConfigOrigin, catalog_choices, catalog_fallback, config_from_catalog, hub_origin, parse_config_bytes

DEFAULT_REPO = "meta-llama/Llama-3.1-8B"
SOURCES = ("Catalog", "Hub repo id", "Upload config.json")


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


@st.cache_data(ttl=3600, max_entries=256, show_spinner="Reading config.json from the Hub…")
def _public_config(repo_id: str, revision: str | None) -> dict[str, Any]:
    # Cached for everyone: only configs readable without any token land here; errors are not cached.
    return fetch_config(repo_id, revision=revision, token=False)


def _hub_config(repo_id: str, revision: str | None) -> tuple[dict[str, Any], ConfigOrigin]:
    """Public configs come from the shared cache; gated/private ones are fetched with the user's token
    and never cached, so one user's access is never served to another. An unreachable Hub falls back
    to the bundled copy when there is one."""
    try:
        try:
            return _public_config(repo_id, revision), hub_origin(repo_id, revision)
        except (GatedRepoError, RepoNotFoundError):
            token = _token()
            if not token:
                raise
            with st.spinner("Reading config.json with your token…"):
                return fetch_config(repo_id, revision=revision, token=token), hub_origin(repo_id, revision)
    except HubUnavailableError as exc:
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
    config = parse_config_bytes(upload.getvalue(), upload.name)
    return config, ConfigOrigin(kind="file", name=upload.name)


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
            arch, approximation = architecture_or_approximation(config)
            picked = PickedModel(arch=arch, origin=origin, config=config)
        except EngineError as exc:
            st.error(str(exc))
            st.session_state["model"] = None
            return None
        if origin.notice:
            # Short here; the pages show the full notice.
            st.caption(":orange[Hub unreachable: bundled copy shown.]")
        if approximation:
            st.warning(approximation)
        st.caption(f"{picked.arch.model_type} · {picked.arch.total_parameters:,} parameters · from {origin.kind.replace('_', ' ')}")
    st.session_state["model"] = picked
    return picked


@st.cache_data(ttl=3600, max_entries=256, show_spinner="Reading safetensors headers from the Hub…")
def _public_checkpoint_count(repo_id: str, revision: str | None) -> CheckpointCount:
    return fetch_checkpoint_count(repo_id, revision=revision, token=False)


def checkpoint_count(picked: PickedModel) -> CheckpointCount:
    """The checkpoint's stored parameter count for the picked model's repo (public: shared cache;
    gated: read with the user's token, uncached)."""
    repo_id, revision = picked.origin.repo_id or "", picked.origin.revision
    count = _public_checkpoint_count(repo_id, revision)
    token = _token()
    if count.total is None and "gated" in (count.reason or "") and token:
        with st.spinner("Reading safetensors headers with your token…"):
            count = fetch_checkpoint_count(repo_id, revision=revision, token=token)
    return count
