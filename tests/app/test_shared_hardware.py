"""One hardware setting (GPU kind, count, GPUs per node, strategy, offload) in the sidebar, shared by every page and
by the URL: chosen on the Memory page, it is what GPU fit, Time & cost and Plans compute for."""

from __future__ import annotations

from apptest_support import no_exception, shown
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy, plan_parallel
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scenario.training import Scenario
from engine.units import fmt_bytes


def test_hardware_chosen_on_one_page_is_every_pages_hardware(new_app):
    at = new_app().run()
    at.selectbox(key="gpu").set_value("NVIDIA H100 80GB").run()
    at.number_input(key="num_gpus").set_value(8).run()
    at.selectbox(key="strategy").set_value(Strategy.ZERO3).run()
    no_exception(at)
    arch = architecture_from_config(config_from_catalog("meta-llama/Llama-3.1-8B")[0])
    per_gpu = plan_parallel(estimate_memory(arch, Scenario()), arch, Scenario(), Strategy.ZERO3).per_gpu_bytes(8)
    assert any(f"per GPU, 8 GPUs with ZeRO-3" in shown(c.value) for c in at.caption)
    label = "8 × NVIDIA H100 80GB, ZeRO-3 (+ weights sharded)"

    at.switch_page("pages/fit.py").run()
    no_exception(at)
    assert any(shown(s.value) == f"What fits on {label}" for s in at.subheader)
    peak = next(m for m in at.metric if m.label == "Per-GPU peak")
    assert peak.value == fmt_bytes(per_gpu, "GiB")  # the fit page's check uses the same 8 GPUs and strategy

    at.switch_page("pages/time_cost.py").run()
    no_exception(at)
    assert at.selectbox(key="gpu").value == "NVIDIA H100 80GB" and at.number_input(key="num_gpus").value == 8
    assert "· **8 x NVIDIA H100 80GB**, ZeRO-3 (+ weights sharded) ·" in at.caption[0].value
    help_text = next(m.help for m in at.metric if m.label == "Tokens/s")
    assert "all 8 GPUs together" in help_text

    at.switch_page("pages/plans.py").run()
    no_exception(at)
    assert any(c.value.startswith("8 x NVIDIA H100 80GB (zero3)") for c in at.caption)
    assert at.query_params["gpu"] == "NVIDIA H100 80GB" and at.query_params["num_gpus"] == "8"
    assert at.query_params["strategy"] == "zero3"
