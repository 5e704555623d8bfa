"""Share a scenario as a URL: the scenario's widget values live in ``st.query_params``.

:func:`read_query_params` runs once per session (from :func:`ui.layout.app_shell`): each known parameter is
validated and put into the widget state before any widget is drawn; a bad value is ignored with an ``st.warning``.
:func:`write_query_params` runs on every page with a valid scenario and mirrors the current values into the URL.
The token field is never a parameter, and nothing else is written.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st

from engine.scenario.lora import ALL_LINEAR
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import Offload, Strategy
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import MAX_MICRO_BATCH, MAX_SEQ_LEN, Attention, Framework, Method, QuantType, Scenario

_READ_FLAG = "_query_params_read"
_PENDING_TARGETS = "_url_lora_targets"


def _ranged(cast: Callable[[str], Any], lo: float, hi: float) -> Callable[[str], Any]:
    """A parser: ``cast(text)`` checked to lie in [lo, hi] (ValueError otherwise)."""
    def parse(text: str) -> Any:
        try:
            value = cast(text)
        except ValueError:
            raise ValueError(f"must be a{'n integer' if cast is int else ' number'} between {lo} and {hi}") from None
        if not lo <= value <= hi:
            raise ValueError(f"must be between {lo} and {hi}")
        return value
    return parse


def _int(lo: int, hi: int) -> Callable[[str], int]:
    return _ranged(int, lo, hi)


def _float(lo: float, hi: float) -> Callable[[str], float]:
    return _ranged(float, lo, hi)


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def _enum_values(values: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in values:
            raise ValueError("must be one of " + ", ".join(values))
        return text
    return parse


def _enum(kind: type) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise ValueError("must be one of " + ", ".join(m.value for m in kind)) from None
    return parse


def _num_gpus(text: str) -> Any:
    from ui.scenario_form import FEWEST

    return FEWEST if text == "fewest" else _int(1, 64)(text)


# URL parameter = widget key; value parsers validate.
PARSERS: dict[str, Callable[[str], Any]] = {
    "method": _enum(Method), "precision": _enum(PrecisionMode), "optimizer": _enum(Optimizer),
    "micro_batch_size": _int(1, MAX_MICRO_BATCH), "seq_len": _int(1, MAX_SEQ_LEN), "grad_accum": _int(1, 1_000_000),
    "gradient_checkpointing": _bool, "attention": _enum(Attention), "lora_r": _int(1, 65_536),
    "lora_alpha": _float(1.0, 1e9), "lora_dropout": _float(0.0, 0.99), "quant_type": _enum(QuantType),
    "double_quant": _bool, "prepare_kbit": _bool, "fused_ce": _bool, "framework": _enum(Framework),
    "tc_gpu": str, "tc_num_gpus": _num_gpus, "tc_strategy": _enum(Strategy), "tc_epochs": _float(0.01, 10_000.0),
    "tc_examples": _int(1, 10**12), "tc_avg_tokens": _float(1.0, 1e7),
    # Memory page: many GPUs and the GPU line
    "mem_num_gpus": _int(1, 1024), "mem_gpus_per_node": _int(1, 64), "mem_strategy": _enum(Strategy),
    "mem_offload": _enum(Offload), "gpu": str, "unit": _enum_values(("GB", "GiB")),
}


def _encode(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "value"):
        return str(value.value)
    if isinstance(value, str) and value.startswith("fewest"):
        return "fewest"
    return str(value)


def read_query_params() -> None:
    """Once per session: validated URL parameters into the widget state; bad ones ignored with a warning."""
    if st.session_state.get(_READ_FLAG):
        return
    st.session_state[_READ_FLAG] = True
    params = st.query_params
    bad: list[str] = []
    if "model" in params:
        from engine.model.sources import catalog_choices

        repo = params["model"]
        if repo in dict(catalog_choices()):
            st.session_state["model_source"] = "Catalog"
            st.session_state["catalog_repo"] = repo
        else:
            bad.append(f"model={repo!r}: not in the bundled catalog")
    elif "hub" in params:
        repo = params["hub"].strip()
        if repo and len(repo) <= 200 and not repo.startswith("hf_"):
            st.session_state["model_source"] = "Hub repo id"
            st.session_state["hub_repo_id"] = repo
            st.session_state["hub_revision"] = params.get("rev", "")
        else:
            bad.append(f"hub={repo!r}: not a repo id")
    for key, parse in PARSERS.items():
        if key not in params:
            continue
        try:
            st.session_state[key] = parse(params[key])
        except ValueError as exc:
            bad.append(f"{key}={params[key]!r}: {exc}")
    if "precision" in st.session_state and "precision" in params:
        st.session_state["precision_chosen"] = True  # the link's precision, not the method's default
    if "lora_targets" in params:
        st.session_state[_PENDING_TARGETS] = [t for t in params["lora_targets"].split(",") if t]
    known = {*PARSERS, "model", "hub", "rev", "lora_targets"}
    bad += [f"{key}: not a setting of this app" for key in params if key not in known]
    if bad:
        st.warning("Some settings in the link were ignored: " + "; ".join(bad))


def apply_pending_targets(arch, targets_key: str) -> None:
    """LoRA targets from the URL, once the model (and so its module names) is known."""
    pending = st.session_state.pop(_PENDING_TARGETS, None)
    if pending is None:
        return
    names = arch.linear_target_names() + [ALL_LINEAR]
    unknown = [t for t in pending if t not in names]
    if unknown:
        st.warning(f"LoRA targets in the link not in this model were ignored: {', '.join(unknown)}")
    good = [t for t in pending if t in names]
    if good:
        st.session_state[targets_key] = good


def write_query_params(scenario: Scenario) -> None:
    """Mirror the model and the scenario's widget values into the URL (never the token)."""
    state = st.session_state
    out: dict[str, str] = {}
    source = state.get("model_source")
    if source == "Catalog" and state.get("catalog_repo"):
        out["model"] = state["catalog_repo"]
    elif source == "Hub repo id" and str(state.get("hub_repo_id", "")).strip():
        out["hub"] = str(state["hub_repo_id"]).strip()
        if str(state.get("hub_revision", "")).strip():
            out["rev"] = str(state["hub_revision"]).strip()
    for key in PARSERS:
        if key in state:
            out[key] = _encode(state[key])
    if scenario.lora_targets is not None and scenario.method is not Method.FULL:
        out["lora_targets"] = ",".join(scenario.lora_targets)
    token = str(state.get("hf_token_input", "") or "").strip()
    out = {k: v for k, v in out.items() if not (token and token in v)}
    if dict(st.query_params) != out:
        st.query_params.from_dict(out)
