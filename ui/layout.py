"""The app shell: page config, the shared model picker, and scenario inputs kept across page switches.

The entrypoint (``streamlit_app.py``) calls :func:`app_shell` before running the page, so the sidebar's
widgets belong to the app, not to one page, and keep their values when the user switches pages. A page
calls :func:`page_setup`, which returns the picked model.

Deep links on a fresh server: Streamlit decides once per server process, when the first session starts, whether the
app is a "pages/ directory" app (``PagesManager.uses_pages_directory``: a ``pages/`` folder beside the entrypoint),
and only a call of ``st.navigation`` turns that off. Until some session has run the entrypoint, a request for
``/memory`` runs ``pages/memory.py`` directly with Streamlit's list of file names as navigation (and the "Page not
found" dialog when the name is not a file). :func:`page_setup` notices that run (the entrypoint did not draw the
shell), switches the process to ``st.navigation`` routing and reruns: the rerun goes through ``streamlit_app.py``,
whose ``st.navigation`` resolves the same URL path to the same page, with the app's navigation.
"""

from __future__ import annotations

import gc

import streamlit as st

from engine.scenario.training import Scenario
from ui.hardware import KEYS as HARDWARE_KEYS
from ui.hardware import Hardware, hardware_sidebar
from ui.inputs import begin_run, stale_slot
from ui.model_picker import PickedModel, model_sidebar
from ui.peft_form import MORE_OPTIONS
from ui.scaleout import SCALEOUT_KEYS
from ui.scenario_form import TC_MORE, _targets_key, scenario_sidebar
from ui.share import apply_pending_targets, read_query_params, write_query_params
from ui.views import VIEWS
from ui.catalog_session import bundled_data_problem
from ui.collector import start_full_collections
from ui.formats import md_plain

_SHELL_FLAG = "_shell_drew_sidebar"


def _tune_garbage_collector() -> None:
    """Once per server process (this module is imported once): keep Python's full garbage collections rare and short.

    A rerun allocates many short-lived objects (protobufs, Plotly dicts, DataFrames), so with the default thresholds the
    server ran a full collection, scanning every object of every library and session, several times a second under
    load: 130-200 ms each, about a third of the server's time with 25 sessions (benchmarks/load.py). Objects alive now
    (the imported libraries, the bundled catalog) are moved out of the collector's view with ``gc.freeze()``, and the
    young generation is collected every 20,000 allocations instead of 700. Reference cycles are still collected: a full
    collection runs every 30 s from a background thread (:mod:`ui.collector`), else what only a full collection frees
    (closed sessions) piled up for minutes and the server's memory climbed without levelling off.
    """
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)
    start_full_collections()


_tune_garbage_collector()

# Streamlit drops a widget's state when a run does not draw that widget (and a widget's identity includes
# the script that draws it), so re-assigning these each run keeps the scenario, drawn only on the Memory
# page, and the picker (not its token field), should a page draw it itself, when the user switches pages. (A file uploader's
# value cannot be re-assigned; the entrypoint path keeps it.)
_KEPT_KEYS = (
    "method", "precision", "optimizer", "micro_batch_size", "seq_len", "grad_accum", "gradient_checkpointing",
    "attention", "lora_r", "lora_alpha", "lora_dropout", "quant_type", "double_quant", "prepare_kbit", "fused_ce", "framework",
    "loss_implementation", "transformers_version",
    # "More training options" (ui.peft_form): drawn only while the toggle is on, so kept here while they are not
    MORE_OPTIONS, "modules_to_save", "use_rslora", "liger_kernels", "gc_offload", "torch_compile",
    "model_source", "catalog_repo", "hub_repo_id", "hub_revision",
    *HARDWARE_KEYS,  # the sidebar's hardware, shared by every page (ui.hardware)
    # Time & cost inputs (ui.scenario_form.time_cost_sidebar)
    "tc_size_mode", "tc_examples", "tc_avg_tokens", "tc_total_tokens", "tc_epochs", "tc_packing", "tc_runs", "tc_measured",
    "tc_fused", "tc_price_source", "tc_basis", "tc_max_gpus", TC_MORE,
    # Memory page: the workload and serving (ui.scenario_form.inference_inputs)
    "mem_workload", "inf_weight_precision", "inf_kv_dtype", "inf_concurrency", "inf_seq_len", "inf_tp", "inf_util",
    # Scale out page (ui.scaleout.layout_inputs and pages/scale_out.py)
    *SCALEOUT_KEYS,
    *VIEWS,  # the section the GPU fit and Time & cost pages draw (ui.views)
)
# Not the token field: re-assigning a widget's value sends it back to the browser in the widget message.


_KEPT = frozenset(_KEPT_KEYS)


def _keep_scenario_state() -> None:
    # One snapshot of the state (Streamlit builds the whole key -> value dict for each read of its keys, and a read by
    # key deserialises the widget's value): the kept values are taken from it, not read again one by one.
    for key, value in st.session_state.to_dict().items():
        if key in _KEPT or key.startswith("lora_targets_"):
            st.session_state[key] = value


def app_shell() -> None:
    """Configure the page, keep scenario inputs and draw the model picker (entrypoint, every run)."""
    st.set_page_config(page_title="Fine-tune fit", layout="wide")
    begin_run()
    damaged = bundled_data_problem()
    if damaged is not None:  # one clear box instead of every page's exception box
        st.error(f"A bundled data file does not validate, so nothing can be computed: {md_plain(damaged)}. Restore "
                 "the file from the repository (git checkout data/) or correct that cell.")
        st.stop()
    _keep_scenario_state()
    read_query_params()  # once per session: a shared link's scenario into the widget state
    if model_sidebar() is None:
        # No model shown (a repo the Hub does not have or cannot serve, a bad upload, an empty repo id box): the link
        # follows the picker's inputs now, so it no longer names the model shown before, and it reopens what this page
        # shows (the same failed repo id and its message). The pages that show a model write it after their inputs.
        write_query_params(None)
    st.session_state[_SHELL_FLAG] = True


def page_start(title: str) -> PickedModel:
    """Shell, title and the place for out-of-range inputs of a page that needs a model; stops the run (after saying
    why) when there is none."""
    model = page_setup()
    st.title(title)
    stale_slot()
    if model is None:
        st.info("Pick a model in the sidebar: the bundled catalog works offline.")
        st.stop()
    if model.origin.notice:
        st.warning(md_plain(model.origin.notice))
    return model  # type: ignore[return-value]


def scenario_page(title: str, *, write_url: bool = True) -> tuple[PickedModel, Scenario, Hardware]:
    """:func:`page_start`, then the sidebar's hardware and training scenario; stops the run (after saying why) when
    the scenario is invalid. ``write_url=False``: the page writes the URL itself once its own inputs are drawn (one
    :func:`ui.share.write_query_params` per rerun, not two), and before anything that may stop its run."""
    model = page_start(title)
    hw = hardware_sidebar()
    apply_pending_targets(model.arch, _targets_key(model.arch))
    scenario = scenario_sidebar(model.arch)
    if scenario is None:
        st.stop()
    if write_url:
        write_query_params(scenario)  # the URL reproduces this page's scenario and hardware
    return model, scenario, hw  # type: ignore[return-value]


def _route_through_navigation() -> None:
    """Rerun through the entrypoint when Streamlit ran a page file by itself (its legacy ``pages/`` path).

    Streamlit runs the entrypoint, and so ``st.navigation``, for every session once the class-wide
    ``PagesManager.uses_pages_directory`` is False; ``st.navigation`` sets it so, but a fresh server's first sessions
    never reach it. Setting it here does what that call would have done; the rerun keeps the URL path, which
    ``st.navigation`` resolves to this page. A page run as the main script (AppTest of one page file) has no
    ``pages/`` beside it, so the flag is already False there and nothing happens.
    """
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def page_setup() -> PickedModel | None:
    """The model picked in the sidebar, drawing the shell first if the entrypoint did not run."""
    if not st.session_state.pop(_SHELL_FLAG, False):
        _route_through_navigation()
        app_shell()
        st.session_state.pop(_SHELL_FLAG, None)
    return st.session_state.get("model")
