"""Results kept for every session (``st.cache_resource``) by the Memory, GPU fit and Time & cost pages.

Why here and not in the pages (issue 26): a page script is executed anew on every rerun, so a cached function defined
in it was made anew on every rerun too, and Streamlit computes a cached function's identity from its source
(``inspect.getsource``, tokenised, then hashed: ``streamlit.runtime.caching.cache_utils._make_function_key``, Streamlit
1.67) each time it is made: about 0.4 ms per function and rerun (this module's body, six functions, runs in 2.4 ms,
timeit), 1.6 ms of GPU fit's rerun with its four. A module is imported once per process, so these are made once. The caches, their keys and bounds are the ones the pages had.

Every entry is keyed by exact, cheap-to-hash inputs (``key``: JSON strings of the scenario, the model config and the
GPU table); the arguments whose name starts with ``_`` are not hashed. Bounded in entries and an hour, so a
long-running server's memory levels off.
"""

from __future__ import annotations

from typing import Any, Callable

import streamlit as st

from engine.memory.parallel import Strategy
from engine.memory.sweep import sweep_techniques
from engine.model.build import architecture_from_config
from engine.model.catalog import load_models
from engine.plan.fit import model_matrix, technique_matrix
from engine.plan.largest import seed_largest_model_table
from engine.scenario.training import Scenario
from ui.charts import fit_heatmap, memory_stack_figure
from ui.downloads import records_csv

# GPU fit: an entry keeps only what the page draws, not the matrix: the models matrix (33 models x 28 GPUs) holds
# 1.3 MB of pydantic cells beside its 0.5 MB figure and 0.1 MB CSV (tracemalloc), so 32 scenarios stay near 20 MB per
# cache instead of 62 MB (issue 26's soak).
_FIT_CACHE = dict(max_entries=32, ttl=3600, show_spinner=False)


@st.cache_resource(max_entries=1, show_spinner=False)
def catalog_architectures() -> list:
    """(name, Architecture) of every bundled catalog model, built once per process."""
    return [(m.name, architecture_from_config(m.config)) for m in load_models()]


def _drawn(matrix, unit: str, labels: str) -> tuple[tuple[tuple[str, str], ...], object, bytes]:
    # What the page shows of a matrix, built once and kept (a scenario seen before, another visitor's or this one's
    # earlier value, costs neither the matrix, nor its figure, nor its download again): the rows that could not be
    # computed (label, why), the heatmap and the CSV.
    errors = tuple((row.label, row.error) for row in matrix.rows if row.error)
    return errors, fit_heatmap(matrix, unit, labels=labels), records_csv(matrix.records())


@st.cache_resource(**_FIT_CACHE)
def models_fit(_scenario: Scenario, _gpus: tuple, _strategy: Strategy, unit: str, labels: str, key: tuple):
    """GPU fit's catalog models x GPUs matrix, drawn: (row errors, heatmap, CSV bytes). ``key``: the scenario's JSON,
    the GPU table's key and the strategy."""
    return _drawn(model_matrix(catalog_architectures(), _scenario, _gpus, _strategy), unit, labels)


@st.cache_resource(**_FIT_CACHE)
def techniques_fit(_arch, _scenario: Scenario, _gpus: tuple, unit: str, labels: str, key: tuple):
    """GPU fit's techniques x GPUs matrix for one model, drawn: (row errors, heatmap, CSV bytes). ``key``: the model
    config's JSON, the scenario's JSON and the GPU table's key."""
    return _drawn(technique_matrix(_arch, _scenario, _gpus), unit, labels)


@st.cache_resource(**_FIT_CACHE)
def seed_rows(_full: Scenario, _efficient: Scenario, _gpus: tuple, key: tuple):
    """The seed chapter's largest-model table recomputed (engine.plan.largest). ``key``: both scenarios' JSON and the
    GPU table's key."""
    return seed_largest_model_table(catalog_architectures(), _full, _efficient, _gpus)


@st.cache_resource(max_entries=32, ttl=3600, show_spinner=False)
def memory_techniques(_arch, _scenario, unit: str, _gpu, key: str):
    """The Memory page's technique sweep and its chart, kept under the exact JSON of their inputs (``key``: the model's
    config, the scenario, the unit and the GPU): the sweep estimates a dozen scenarios and the figure is built from
    them. Bounded (32 scenarios, an hour)."""
    rows = sweep_techniques(_arch, _scenario)
    return rows, memory_stack_figure(rows, unit, _gpu)


@st.cache_resource(max_entries=128, ttl=3600, show_spinner=False)
def time_cost_shared(what: str, key: str, _compute: Callable[[], Any]):
    """``_compute()``, kept under the exact JSON of its inputs (``key``): Time & cost's plan search and its
    per-technique and per-shape sweeps with their figures, the costly part of that page's rerun; visitors often share
    a scenario (the defaults, a link). Bounded (four kinds of entry for each of 32 scenarios, an hour)."""
    return _compute()
