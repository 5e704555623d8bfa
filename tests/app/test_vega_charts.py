"""The Vega-Lite charts of ui/vega.py: their rows carry the engine's numbers, and their specs are valid Vega-Lite
(Altair's copy of the Vega-Lite JSON schema, which Streamlit installs), as drawn by the Memory page."""

from __future__ import annotations

import json

import altair as alt
import pyarrow as pa
import pytest

from apptest_support import no_exception
from engine.hardware.gpus import find_gpu
from engine.memory.sweep import sweep_techniques
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scenario.training import Scenario
from ui.charts import COMPONENT_STYLE
from ui.vega import memory_stack_chart

LLAMA_8B = "meta-llama/Llama-3.1-8B"


def _sweep():
    arch = architecture_from_config(config_from_catalog(LLAMA_8B)[0])
    return sweep_techniques(arch, Scenario(micro_batch_size=2, seq_len=2048))


def test_memory_stack_rows_add_up_to_each_rows_nvidia_smi_total():
    rows = _sweep()
    gpu = find_gpu("NVIDIA A100 80GB")
    data, spec = memory_stack_chart(rows, "GiB", gpu)
    ok = [r for r in rows if r.estimate is not None]
    assert len({d["technique"] for d in data}) == len(ok)
    for order, r in enumerate(ok):
        mine = [d for d in data if d["order"] == order]
        # the components and overheads of the engine's estimate stack to what nvidia-smi would show
        assert sum(d["value"] for d in mine) == pytest.approx(r.estimate.device_used_bytes / 2**30, abs=1e-3)
        assert {d["total"] for d in mine} == {round(r.estimate.device_used_bytes / 2**30, 4)}
        assert mine[0]["technique"].endswith(" ◀") == r.is_current
    assert sum(d["technique"].endswith(" ◀") for d in data if d["order"] == 0) <= 1
    colour = next(layer for layer in spec["layer"] if layer["mark"]["type"] == "bar")["encoding"]["color"]["scale"]
    styles = dict(COMPONENT_STYLE.values())
    assert colour["range"] == [styles[c] for c in colour["domain"]]  # one colour per component, as the Plotly charts
    (rule,) = [layer for layer in spec["layer"] if layer["mark"]["type"] == "rule"]
    assert rule["data"]["values"][0]["usable"] == pytest.approx(gpu.usable_memory_bytes / 2**30, abs=1e-3)
    alt.LayerChart.from_dict({**spec, "data": {"values": data}}, validate=True)  # raises on invalid Vega-Lite


def test_an_invalid_spec_is_refused_by_the_check():
    with pytest.raises(Exception):
        alt.LayerChart.from_dict({"layer": [{"mark": {"type": "bar"}, "encoding": {"x": {"feild": "a"}}}]},
                                 validate=True)


def test_the_memory_page_sends_the_sweep_as_a_valid_vega_lite_chart(new_app):
    at = new_app().run()
    no_exception(at)
    (chart,) = at.get("vega_lite_chart")
    spec = json.loads(chart.proto.spec)
    table = pa.ipc.open_stream(chart.proto.data.data).read_all().to_pylist()
    assert {"technique", "component", "value", "total"} <= set(table[0])
    alt.LayerChart.from_dict({**spec, "data": {"values": table}}, validate=True)
