"""AppTest tests of the Scale out page (pages/scale_out.py): per-stage bars, the step time, exports and the search."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from apptest_support import metric, no_exception
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scaleout.estimate import estimate_layout
from engine.scaleout.layout import Layout
from engine.scaleout.step_time import Cluster
from engine.hardware.gpus import find_gpu
from engine.scenario.training import Scenario

PAGE = "pages/scale_out.py"


@pytest.fixture
def page(new_app) -> AppTest:
    at = new_app().switch_page(PAGE).run()
    no_exception(at)
    return at


def test_page_shows_every_stage_and_the_most_loaded_rank(page):
    at = page
    at.number_input(key="so_pp").set_value(4).run()
    at.number_input(key="so_nodes").set_value(2).run()
    no_exception(at)
    bars = at.get("plotly_chart")
    assert bars, "the per-stage chart is drawn"
    # the headline equals the engine's most loaded rank for the same inputs (default model: Llama 3.1 8B, seq 2048)
    arch = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
    layout = Layout(pipeline_parallel=4, data_parallel=4, zero=1, recompute="selective", global_batch_size=64)
    est = estimate_layout(arch, Scenario(), layout, Cluster(gpu=find_gpu("H100 SXM"), nodes=2), master_weights=True)
    assert metric(at, "Most loaded rank (allocated)") == f"{est.memory.max_rank_peak_allocated_bytes / 2**30:.1f} GiB"
    assert any("no pipeline" in i.value for i in at.info)  # accelerate (first engine) cannot run PP: it says so
    at.radio(key="so_export").set_value("megatron").run()
    assert "--pipeline-model-parallel-size 4" in at.code[0].value


def test_bad_layout_says_why(page):
    at = page
    at.selectbox(key="so_ep").set_value(2).run()  # a dense model has no experts
    no_exception(at)
    assert any("mixture-of-experts" in e.value for e in at.error)


def test_search_lists_fits_and_reasons(page):
    at = page
    at.button(key="so_search").click().run(timeout=120)
    no_exception(at)
    assert any("layouts searched" in m.value for m in at.markdown)
