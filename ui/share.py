"""Share a scenario as a URL: the scenario's widget values live in ``st.query_params``.

:func:`read_query_params` runs once per session (from :func:`ui.layout.app_shell`): each known parameter is
validated and put into the widget state before any widget is drawn; a bad value is ignored with an ``st.warning``,
and a value applied with a note (``gpu=A100``, read as the catalog's A100 80GB) is said in another.
:func:`write_query_params` runs on every page with a valid scenario and mirrors the current values into the URL.
The token field is never a parameter, and nothing else is written.

The URL is the source of truth of a session's scenario: a session that starts afresh, as when the browser reconnects
to another replica after its own died (or to the same one restarted), reads every setting back from the URL the
browser still shows instead of writing the defaults over it (tests/app/test_share_links.py, tests/e2e).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import streamlit as st

from engine.scenario.lora import ALL_LINEAR
from engine.scenario.loss import LossImplementation, TransformersVersion
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import Offload, Strategy
from engine.scenario.precision import PrecisionMode
from engine.errors import AmbiguousGpuError, CatalogError
from engine.secrets import REDACTED, looks_like_token, redact_tokens
from engine.scenario.training import Attention, Framework, Method, QuantType, Scenario
from engine.memory.inference import KvCacheDtype, WeightPrecision
from ui.inputs import LIMITS, valid_value
from ui.peft_form import FRAMEWORK_LOSS, MORE_OPTIONS, chosen_loss
from ui.scaleout import CHOICES as SCALEOUT_CHOICES, FLAGS as SCALEOUT_FLAGS, NUMBERS as SCALEOUT_NUMBERS
from ui.scenario_form import AS_STORED, INFERENCE, SIZE_EXAMPLES, SIZE_TOKENS, TC_MORE, WORKLOADS
from ui.views import VIEWS

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


def _non_liger_loss(text: str) -> LossImplementation:
    """The sidebar's loss choice (Liger's is the fused_ce switch, not an option of that box)."""
    loss = _enum(LossImplementation)(text)
    if loss is LossImplementation.LIGER:
        raise ValueError("liger is the fused_ce switch (fused_ce=true)")
    return loss


def _choice(values: tuple[str, ...]) -> Callable[[str], str]:
    """One of ``values``, in any letter case (``mem_workload=inference``)."""
    def parse(text: str) -> str:
        for value in values:
            if text.strip().lower() == value.lower():
                return value
        raise ValueError("must be one of " + ", ".join(values))
    return parse


def _weight_precision(text: str) -> Any:
    """Serving weights: ``as_stored`` (the checkpoint's own format) or a :class:`WeightPrecision`."""
    if text == AS_STORED:
        return AS_STORED
    try:
        return WeightPrecision(text)
    except ValueError:
        raise ValueError("must be one of " + ", ".join((AS_STORED, *(w.value for w in WeightPrecision)))) from None


class _Noted(NamedTuple):
    """A parsed value applied with a note the link's reader must see (a GPU name read as one of several)."""

    value: Any
    note: str


def _gpu(text: str) -> str | _Noted:
    """A GPU of this session's catalog, by any name it accepts; a family name ("A100") reads as the catalog's GPU for it
    with the note saying so (old links keep working); a name of several GPUs that is nobody's alias: the GPUs it names,
    unknown: the closest names, as the CLI says."""
    from engine.hardware.gpus import _resolve, gpu_name_note
    from ui.catalog_session import session_gpus

    try:
        gpu, note = _resolve(text, session_gpus()), gpu_name_note(text, session_gpus())
    except AmbiguousGpuError as exc:
        raise ValueError("ambiguous: " + str(exc).removeprefix(f"ambiguous GPU '{text}': ")) from None
    except CatalogError as exc:
        raise ValueError("not a GPU of the catalog; " + str(exc).removeprefix(f"unknown GPU '{text}'").lstrip(";: ")) from None
    return gpu.name if note is None else _Noted(gpu.name, note)


def _enum_values_int(values: tuple[int, ...]) -> Callable[[str], int]:
    """One of the integer options of a selectbox."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value not in values:
            raise ValueError("must be one of " + ", ".join(str(v) for v in values))
        return value
    return parse


def _saveable(text: str) -> list[str]:
    """``modules_to_save``: comma-separated names the engine knows (engine.scenario.peft.SAVEABLE)."""
    from engine.scenario.peft import SAVEABLE

    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(n not in SAVEABLE for n in names):
        raise ValueError("must be one or more of " + ", ".join(sorted(SAVEABLE)) + ", separated by commas")
    return list(dict.fromkeys(names))


def _price_source(text: str) -> str:
    """A price source of this session's price table (data/gpu_prices.csv, or the session's edits)."""
    from engine.plan.cost import price_source_names
    from ui.catalog_session import session_prices

    names = price_source_names(session_prices())
    if text not in names:
        raise ValueError("not a price source; one of " + ", ".join(names))
    return text


def _gpu_count_limit(text: str) -> int:
    from engine.plan.cost import PLAN_GPU_COUNTS

    if text.strip() not in {str(n) for n in PLAN_GPU_COUNTS}:
        raise ValueError("must be one of " + ", ".join(str(n) for n in PLAN_GPU_COUNTS))
    return int(text)


def _limited(key: str) -> Callable[[str], Any]:
    lo, hi = LIMITS[key]
    return _int(lo, hi) if isinstance(lo, int) and isinstance(hi, int) else _float(lo, hi)


# URL parameter = widget key; value parsers validate (numbers in the ranges the sidebar's inputs check).
PARSERS: dict[str, Callable[[str], Any]] = {
    "method": _enum(Method), "precision": _enum(PrecisionMode), "optimizer": _enum(Optimizer),
    "micro_batch_size": _limited("micro_batch_size"), "seq_len": _limited("seq_len"), "grad_accum": _limited("grad_accum"),
    "gradient_checkpointing": _bool, "attention": _enum(Attention), "lora_r": _limited("lora_r"),
    "lora_alpha": _limited("lora_alpha"), "lora_dropout": _limited("lora_dropout"), "quant_type": _enum(QuantType),
    "double_quant": _bool, "prepare_kbit": _bool, "fused_ce": _bool, "framework": _enum(Framework),
    "loss_implementation": _non_liger_loss,
    "transformers_version": _enum(TransformersVersion),
    MORE_OPTIONS: _bool,  # whether the sidebar draws its less-used training inputs (ui.peft_form)
    "modules_to_save": _saveable, "use_rslora": _bool, "liger_kernels": _bool, "gc_offload": _bool,
    "torch_compile": _bool,
    # the sidebar's hardware (ui.hardware), shared by every page
    "gpu": _gpu, "num_gpus": _limited("num_gpus"), "gpus_per_node": _limited("gpus_per_node"),
    "strategy": _enum(Strategy), "offload": _enum(Offload), "unit": _enum_values(("GB", "GiB")),
    # Time & cost (and Plans): the dataset, run, calibration and prices of ui.scenario_form.time_cost_sidebar, so a
    # session that starts afresh (a reconnect to another replica) restores all of them from the URL
    "tc_size_mode": _choice((SIZE_EXAMPLES, SIZE_TOKENS)), "tc_epochs": _limited("tc_epochs"),
    "tc_examples": _limited("tc_examples"), "tc_avg_tokens": _limited("tc_avg_tokens"),
    "tc_total_tokens": _limited("tc_total_tokens"), "tc_runs": _limited("tc_runs"), "tc_packing": _bool,
    "tc_fused": _bool, "tc_measured": _limited("tc_measured"), "tc_price_source": _price_source,
    "tc_basis": _enum_values(("on_demand", "spot")), "tc_max_gpus": _gpu_count_limit, TC_MORE: _bool,
    # Memory page: the workload and the serving inputs (ui.scenario_form.inference_inputs)
    "mem_workload": _choice(WORKLOADS), "inf_weight_precision": _weight_precision, "inf_kv_dtype": _enum(KvCacheDtype),
    "inf_concurrency": _limited("inf_concurrency"), "inf_seq_len": _limited("inf_seq_len"),
    "inf_tp": _enum_values_int((1, 2, 4, 8, 16)), "inf_util": _limited("inf_util"),
    # Scale out page (ui.scaleout): the layout, the cluster, FP8, master weights and the export shown
    **{k: (_enum_values_int(v) if isinstance(v[0], int) else _enum_values(v)) for k, v in SCALEOUT_CHOICES.items()},
    **{k: _limited(k) for k in SCALEOUT_NUMBERS}, **{k: _bool for k in SCALEOUT_FLAGS}, "so_gpu": _gpu,
    # the section a long page draws (ui.views: fit_view, tc_view)
    **{k: _enum_values(tuple(v)) for k, v in VIEWS.items()},
}
LEGACY = {"mem_num_gpus": "num_gpus", "mem_gpus_per_node": "gpus_per_node", "mem_strategy": "strategy",
          "mem_offload": "offload", "tc_gpu": "gpu", "tc_num_gpus": "num_gpus", "tc_strategy": "strategy"}
"""Keys of links made before the pages shared one hardware setting, read as the key they became."""


def _quoted(text: str, limit: int = 60) -> str:
    """``repr(text)`` for a warning, cut past ``limit`` characters with the length said (a 5,000-digit value in every
    key of a link is not quoted whole sixty times)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def _encode(value: Any) -> str:
    if isinstance(value, list):  # a multiselect's names (modules_to_save)
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if hasattr(value, "value"):
        return str(value.value)
    return str(value)


def _method_inference(given: dict[str, tuple[str, str]], notes: list[str], bad: list[str]) -> None:
    """``method=inference`` (the CLI's ``--method inference``) read as the Memory page's workload: serving is not a
    training method of the sidebar but the ``mem_workload`` choice, so the link means ``mem_workload=Inference``."""
    name, text = given.get("method", ("", ""))
    if text.strip().lower() != "inference":
        return
    del given["method"]
    if "mem_workload" in given and given["mem_workload"][1].strip().lower() != INFERENCE.lower():
        bad.append(f"method={_quoted(text)}: inference is the Memory page's workload, and the link also gives "
                   f"mem_workload={_quoted(given['mem_workload'][1])}")
        return
    given["mem_workload"] = (name, INFERENCE)
    notes.append(f"method={_quoted(text)} read as mem_workload={INFERENCE!r}: inference is the Memory page's workload "
                 "(the training method stays as it was)")


def _unused_by_the_link(given: dict[str, tuple[str, str]], notes: list[str]) -> None:
    """Notes for link settings the scenario the link opens does not use, where the sidebar shows them greyed out:
    ``fused_ce=true`` runs Liger's fused loss whatever ``loss_implementation`` says, and the transformers release only
    decides the Hugging Face loss. Without the note, ``loss_implementation=megatron`` would read as the estimate's."""
    state = st.session_state
    fused = bool(state.get("fused_ce"))
    loss = chosen_loss(state.get("loss_implementation"))
    if fused and "loss_implementation" in given and loss not in (None, LossImplementation.HF):
        notes.append(f"{given['loss_implementation'][0]}={_quoted(given['loss_implementation'][1])}: not used, "
                     "fused_ce=true runs Liger's fused loss")
    version = state.get("transformers_version")
    if ("transformers_version" in given and version is not None and version != Scenario().transformers_version
            and (fused or loss not in (None, LossImplementation.HF))):
        notes.append(f"{given['transformers_version'][0]}={_quoted(given['transformers_version'][1])}: not used, the "
                     "transformers release decides only the Hugging Face loss")


def read_query_params() -> None:
    """Once per session: validated URL parameters into the widget state; bad ones ignored with a warning."""
    if st.session_state.get(_READ_FLAG):
        return
    st.session_state[_READ_FLAG] = True
    bad: list[str] = []
    notes: list[str] = []  # settings applied as read, with what the reader must know
    # A key given twice (?micro_batch_size=2&micro_batch_size=8) is ignored with a warning: taking the last value
    # without a word would show another scenario than the one the sender may have meant.
    params: dict[str, str] = {}
    for key in st.query_params:
        values = st.query_params.get_all(key)
        if len(values) > 1:
            shown = ", ".join(REDACTED if looks_like_token(v) else repr(v[:40]) for v in values[:4])
            bad.append(f"{key} is given {len(values)} times ({shown}{', ...' if len(values) > 4 else ''}): ignored; a "
                       "link gives each setting once")
        else:
            params[key] = st.query_params[key]
    if "model" in params and "hub" in params:  # two models: the catalog's is opened, and the link's reader is told
        hub_text = params["hub"]
        bad.append(f"hub={REDACTED if looks_like_token(hub_text) else _quoted(hub_text)}: the link also gives "
                   f"model={_quoted(params['model'])}, which is the one opened (a link names one model)")
    if "rev" in params and "hub" not in params:
        rev_text = params["rev"]
        bad.append(f"rev={REDACTED if looks_like_token(rev_text) else _quoted(rev_text)}: a revision of a Hub "
                   "repo, and the link gives no hub=")
    if "model" in params:
        from engine.model.sources import catalog_choices

        repo = params["model"]
        if repo in dict(catalog_choices()):
            st.session_state["model_source"] = "Catalog"
            st.session_state["catalog_repo"] = repo
        else:
            bad.append(f"model={_quoted(repo)}: not in the bundled catalog")
    elif "hub" in params:
        repo = params["hub"].strip()
        rev = params.get("rev", "")
        if repo and len(repo) <= 200 and not looks_like_token(repo):
            st.session_state["model_source"] = "Hub repo id"
            st.session_state["hub_repo_id"] = repo
            st.session_state["hub_revision"] = "" if looks_like_token(rev) else rev
            if looks_like_token(rev):
                bad.append(f"rev={REDACTED}: not a revision")
        else:
            bad.append(f"hub={REDACTED if looks_like_token(repo) else _quoted(repo)}: not a repo id")
    given = {LEGACY.get(k, k): (k, params[k]) for k in params if k in LEGACY}
    given |= {k: (k, params[k]) for k in params if k in PARSERS}
    _method_inference(given, notes, bad)
    for key, parse in PARSERS.items():
        if key not in given:
            continue
        name, text = given[key]
        try:
            value = parse(text)
        except ValueError as exc:
            bad.append(f"{name}={_quoted(text)}: {exc}")
            continue
        if isinstance(value, _Noted):
            notes.append(f"{name}={_quoted(text)}: {value.note}")
            value = value.value
        st.session_state[key] = value
    _unused_by_the_link(given, notes)
    if "precision" in st.session_state and "precision" in given:
        st.session_state["precision_chosen"] = True  # the link's precision, not the method's default
    if "lora_targets" in params:
        st.session_state[_PENDING_TARGETS] = [t for t in params["lora_targets"].split(",") if t]
    known = {*PARSERS, *LEGACY, "model", "hub", "rev", "lora_targets"}
    bad += [f"{key if len(key) <= 60 else _quoted(key)}: not a setting of this app" for key in params if key not in known]
    from ui.formats import md_plain

    # The link's text is anyone's: shown as typed, never as Markdown (a key "[x](https://...)" would be a live link)
    if bad:
        st.warning("Some settings in the link were ignored: " + md_plain(redact_tokens("; ".join(bad))))
    if notes:
        st.warning("Read from the link: " + md_plain(redact_tokens("; ".join(notes))))


def apply_pending_targets(arch, targets_key: str) -> None:
    """LoRA targets from the URL, once the model (and so its module names) is known."""
    pending = st.session_state.pop(_PENDING_TARGETS, None)
    if pending is None:
        return
    names = arch.linear_target_names() + [ALL_LINEAR]
    unknown = [t for t in pending if t not in names]
    if unknown:
        from ui.formats import md_plain

        shown = ", ".join(t if len(t) <= 60 else _quoted(t) for t in unknown[:10]) + (
            f" and {len(unknown) - 10} more" if len(unknown) > 10 else "")
        st.warning("LoRA targets in the link not in this model were ignored: " + md_plain(redact_tokens(shown)))
    good = [t for t in pending if t in names]
    if good:
        st.session_state[targets_key] = good


def write_query_params(scenario: Scenario | None) -> None:
    """Mirror the model and the scenario's widget values into the URL (never the token). A number typed out of
    range is written as the value the results use (:func:`ui.inputs.valid_value`). Called once per rerun, after the
    page's own inputs; the URL is set only when it changed. ``scenario`` None (a page without the training scenario,
    or no model loaded): the LoRA targets already in the URL stay while it names the same model."""
    # One snapshot of the state: each read of st.session_state by key goes through Streamlit's lock and deserialises the
    # widget's value, and this reads some sixty keys
    state = st.session_state.to_dict()
    out: dict[str, str] = {}
    source = state.get("model_source")
    if source == "Catalog" and state.get("catalog_repo"):
        out["model"] = state["catalog_repo"]
    elif source == "Hub repo id" and str(state.get("hub_repo_id", "")).strip():
        # a token pasted into the repo id or revision box never goes into a link
        if not looks_like_token(state["hub_repo_id"]):
            out["hub"] = str(state["hub_repo_id"]).strip()
            rev = str(state.get("hub_revision", "")).strip()
            if rev and not looks_like_token(rev):
                out["rev"] = rev
    for key in PARSERS:
        value = valid_value(key, state) if key in state else None
        if value is not None and value != [] and value != FRAMEWORK_LOSS:  # the framework's loss: no parameter
            out[key] = _encode(value)
    if scenario is not None and scenario.lora_targets is not None and scenario.method is not Method.FULL:
        out["lora_targets"] = ",".join(scenario.lora_targets)
    elif scenario is None and "lora_targets" in st.query_params and all(
            st.query_params.get(k) == out.get(k) for k in ("model", "hub", "rev")):
        out["lora_targets"] = st.query_params["lora_targets"]  # a page without the scenario: the same model's targets stay
    token = str(state.get("hf_token_input", "") or "").strip()
    out = {k: v for k, v in out.items() if not (token and token in v)}
    if dict(st.query_params) != out:
        st.query_params.from_dict(out)
