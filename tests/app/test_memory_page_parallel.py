"""Memory page (AppTest): the Many GPUs controls change the per-GPU total; the Inference technique."""

from __future__ import annotations

import pytest

from engine.model.build import architecture_from_config
from engine.memory.inference import InferenceScenario, estimate_inference
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Offload, Strategy, plan_parallel
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import Attention, Method, Scenario
from engine.scenario.optimizer import Optimizer
from engine.model.sources import config_from_catalog

LLAMA_8B = "meta-llama/Llama-3.1-8B"


def peak_bytes(at) -> int:
    help_text = {m.label: m.help for m in at.metric}["Peak memory"]
    return int(help_text.removesuffix(" bytes").replace(",", ""))


def default_plan(strategy: Strategy, offload: Offload = Offload.NONE):
    arch = architecture_from_config(config_from_catalog(LLAMA_8B)[0])
    sc = Scenario.build(method=Method.FULL, precision=PrecisionMode.AMP_BF16, optimizer=Optimizer.ADAMW_FUSED,
                        micro_batch_size=1, seq_len=2048, attention=Attention.SDPA)
    return arch, plan_parallel(estimate_memory(arch, sc), arch, sc, strategy, offload)


@pytest.fixture
def app(new_app):
    at = new_app().run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_strategy_controls_change_the_per_gpu_total(app):
    one = peak_bytes(app)
    assert len(app.get("plotly_chart")) == 1  # one GPU: no per-GPU chart, the sweep (the checklist is closed)
    app.number_input(key="num_gpus").set_value(8).run()
    app.selectbox(key="strategy").set_value(Strategy.ZERO3).run()
    assert not app.exception, [e.value for e in app.exception]
    _, plan = default_plan(Strategy.ZERO3)
    assert peak_bytes(app) == round(plan.per_gpu_bytes(8)) < one
    assert len(app.get("plotly_chart")) == 2  # the technique sweep and the per-GPU bar
    app.selectbox(key="strategy").set_value(Strategy.DDP).run()
    _, ddp = default_plan(Strategy.DDP)
    assert peak_bytes(app) == round(ddp.per_gpu_bytes(8)) > one  # DDP divides nothing and adds its buckets
    app.selectbox(key="strategy").set_value(Strategy.ZERO3).run()
    app.selectbox(key="offload").set_value(Offload.OPTIMIZER_AND_PARAMS).run()
    _, off = default_plan(Strategy.ZERO3, Offload.OPTIMIZER_AND_PARAMS)
    assert peak_bytes(app) == round(off.per_gpu_bytes(8))
    labels = [m.label for m in app.metric]
    assert "CPU memory per node (offload)" in labels
    fig = next(c for c in app.get("plotly_chart") if c.proto.id.endswith("per_gpu_chart"))
    assert "CPU memory (per node)" in fig.proto.spec


def test_offload_with_ddp_is_explained_not_a_crash(app):
    app.selectbox(key="strategy").set_value(Strategy.DDP).run()
    app.selectbox(key="offload").set_value(Offload.OPTIMIZER).run()
    assert not app.exception and any("offload needs ZeRO or FSDP" in e.value for e in app.error)


def test_inference_technique(app):
    app.radio(key="mem_workload").set_value("Inference").run()
    # Serving has its own title and asks only what serving uses: the GPU and the unit, no training scenario.
    assert [t.value for t in app.title] == ["GPU memory of serving the model"]
    assert [h.value for h in app.sidebar.header] == ["Model", "Hardware"]
    assert [s.label for s in app.sidebar.selectbox] == ["Model", "GPU"] and not app.sidebar.number_input
    app.number_input(key="inf_concurrency").set_value(16).run()
    assert not app.exception, [e.value for e in app.exception]
    arch = architecture_from_config(config_from_catalog(LLAMA_8B)[0])
    est = estimate_inference(arch, InferenceScenario(concurrency=16, seq_len=8192))
    assert peak_bytes(app) == round(est.total_bytes)
    assert {m.label: m.value for m in app.metric}["KV cache per token"] == "128.0 KiB"
    assert any("Longest context" in s.value for s in app.success) or any("Longest context" in w.value for w in app.warning)
