"""The Time & cost page's log axes: clean major ticks (1, 10, 100 ... or 1, 2, 5 per decade; GPU counts and sequence
lengths at the points computed) and the unit in every axis title. Plotly's own log ticks labelled every minor tick
(2, 3, 4 ... 9) of a one- or two-decade axis."""

from __future__ import annotations

import math
import re

import pytest

from apptest_support import charts, no_exception
from ui.axes import log_axis, tick_text


def mantissa(v: float) -> int:
    m = v / 10 ** math.floor(math.log10(v) + 1e-9)
    assert m == pytest.approx(round(m)), v
    return round(m)


@pytest.fixture
def figures(new_app) -> dict[str, dict]:
    at = new_app().switch_page("pages/time_cost.py").run()
    no_exception(at)
    stack, shape, time, cost, count, plans = (  # one section at a time (ui.views): each section's charts
        f for view in ("time", "shape", "dataset", "gpus", "plans") for f in charts(at.radio(key="tc_view").set_value(view).run()))
    return {"shape": shape, "time": time, "cost": cost, "count": count, "plans": plans}


def test_every_log_axis_has_clean_labelled_major_ticks_and_a_unit_in_its_title(figures):
    seen = 0
    for name, fig in figures.items():
        for key, axis in fig["layout"].items():
            if not key.startswith(("xaxis", "yaxis")):
                continue
            assert re.search(r"\(.+\)", axis["title"]["text"]), (name, key, axis["title"])  # "(hours)", "(USD)", ...
            if axis.get("type") != "log":
                continue
            seen += 1
            ticks, labels = axis["tickvals"], axis["ticktext"]
            assert axis["tickmode"] == "array" and len(ticks) == len(labels) >= 2, (name, key)
            values = [v for t in fig["data"] for v in (t.get(key[0]) or []) if v]
            if name in ("shape", "count") and key == "xaxis":
                assert ticks == sorted(set(values))  # sequence lengths / GPU counts computed
            else:
                assert {mantissa(t) for t in ticks} <= {1, 2, 5}, (name, key, ticks)
                # the ticks cover the values: one at or below the smallest, one at or above the largest
                assert ticks[0] <= min(values) * (1 + 1e-9) and ticks[-1] >= max(values) * (1 - 1e-9), (name, key)
    assert seen == 8  # dataset and hours (time), dataset and cost, GPUs, hours and cost (plans), sequence length


def test_cost_ticks_read_as_dollars_and_tokens_compactly(figures):
    assert all(t.startswith("$") for t in figures["cost"]["layout"]["yaxis"]["ticktext"])
    assert figures["time"]["layout"]["xaxis"]["title"]["text"] == "dataset per epoch (tokens, after truncation / padding)"
    assert "15M" not in figures["time"]["layout"]["xaxis"]["ticktext"]  # ticks are round numbers, not the dataset's


@pytest.mark.parametrize(("values", "labels"), [
    ([0.01, 100], ["0.01", "0.1", "1", "10", "100"]),  # four decades: powers of ten only
    ([2.1, 3.9], ["2", "5"]),  # within a decade: widened to the 1-2-5 ticks around it
    ([0.3, 40], ["0.2", "0.5", "1", "2", "5", "10", "20", "50"]),
    ([1.5e5, 2.4e9], ["100k", "1M", "10M", "100M", "1B", "10B"]),
])
def test_log_axis_ticks(values, labels):
    axis = log_axis(values, "x (unit)")
    assert axis["ticktext"] == labels
    if "range" in axis:  # widened: a little beyond the end ticks (plotly.js draws a tick on the range's end at -inf)
        assert axis["range"][0] < math.log10(axis["tickvals"][0]) and axis["range"][1] > math.log10(axis["tickvals"][-1])
    assert tick_text(2e3, "$") == "$2k"
