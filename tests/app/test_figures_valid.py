"""Every figure the pages draw is a valid Plotly figure: ui.charts.prebuilt skips plotly.py's validation when the
figures are built (it cost most of a fit heatmap's build on every rerun), so these tests run the validators on what
each page sends (the chart's JSON spec) and fail on any property plotly does not know or a value it refuses."""

from __future__ import annotations

import json

import plotly.graph_objects as go
import pytest

from apptest_support import no_exception

PAGES = ("pages/memory.py", "pages/fit.py", "pages/time_cost.py", "pages/plans.py")


@pytest.mark.parametrize("page", PAGES)
def test_every_chart_of_the_page_validates(new_app, page):
    at = new_app()
    at.query_params["model"] = "Qwen/Qwen2.5-0.5B"
    at.switch_page(page).run()
    no_exception(at)
    if page == "pages/plans.py":
        at.button(key="plan_save").click().run()  # the compare charts
    views = {"pages/fit.py": ("models", "techniques"), "pages/time_cost.py": ("time", "shape", "dataset", "gpus", "plans")}
    if page == "pages/fit.py":
        at.radio(key="fit_labels").set_value("Fewest GPUs").run()  # the labelled heatmap too
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    for view in views.get(page, ()):  # every section's charts (ui.views: one section drawn at a time)
        at.radio(key="fit_view" if page == "pages/fit.py" else "tc_view").set_value(view).run()
        no_exception(at)
        specs += [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    assert specs
    for spec in specs:
        go.Figure(spec)  # raises ValueError on anything plotly would not draw as meant


def test_an_invalid_spec_is_refused_by_the_check():
    with pytest.raises(ValueError):
        go.Figure({"data": [{"type": "heatmap", "z": [[1]], "colourscale": "nope"}], "layout": {}})
