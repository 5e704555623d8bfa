"""The Memory page's serving mode over several GPUs (issue 24 item 7): tensor parallelism, the KV-cache budget at
vLLM's gpu_memory_utilization, the most concurrent sequences and decode tokens/s, as the engine computes them."""

from __future__ import annotations

from apptest_support import metric, no_exception
from engine.hardware.gpus import find_gpu
from engine.memory.inference import InferenceScenario
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.plan.serving import serving_plan

LLAMA_70B = "meta-llama/Llama-3.1-70B"


def test_serving_70b_over_two_a100s_fits_and_shows_concurrency_and_decode_speed(new_app):
    at = new_app()
    at.query_params.update({"model": LLAMA_70B, "gpu": "NVIDIA A100 80GB", "mem_workload": "Inference",
                            "inf_weight_precision": "fp16", "inf_seq_len": "4096"})
    at.run()
    no_exception(at)
    assert metric(at, "Decode tokens/s") == "does not fit"  # 141 GB of fp16 weights on one 80 GB GPU
    assert any("Tensor parallel 2 fits" in w.value for w in at.warning), [w.value for w in at.warning]
    at.selectbox(key="inf_tp").set_value(2).run()
    no_exception(at)
    arch = architecture_from_config(config_from_catalog(LLAMA_70B)[0])
    isc = InferenceScenario(weight_precision="fp16", seq_len=4096, tensor_parallel=2, gpu_memory_utilization=0.9)
    plan = serving_plan(arch, isc, find_gpu("A100 80GB"))
    assert plan.fit.fits and 70.5e9 < plan.estimate.components["weights"] < 70.7e9
    assert metric(at, "Max concurrency") == f"{plan.limits.max_concurrency:,}"
    assert metric(at, "Decode tokens/s") == f"{plan.decode_tokens_per_second:,.0f}"
    assert at.query_params["inf_tp"] == "2"


def test_one_sequence_is_singular(new_app):
    # "Longest context at 1 sequences" read wrong: one sequence is singular, more are plural (ui.formats.sequences).
    from apptest_support import shown

    at = new_app()
    at.query_params.update({"mem_workload": "Inference", "inf_concurrency": "1"})
    at.run()
    no_exception(at)
    verdict = " ".join(shown(x.value) for x in [*at.success, *at.warning, *at.error] if "Longest context" in x.value)
    assert "Longest context at 1 sequence: " in verdict and "1 sequences" not in verdict
    assert "1 sequence at " in next(m.help for m in at.metric if m.label == "Decode tokens/s")
    at.number_input(key="inf_concurrency").set_value(2).run()
    verdict = " ".join(shown(x.value) for x in [*at.success, *at.warning, *at.error] if "Longest context" in x.value)
    assert "Longest context at 2 sequences: " in verdict
