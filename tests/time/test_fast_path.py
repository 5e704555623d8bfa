"""The step-time model's fast path (per-architecture GEMM tables with equal shapes merged, columns computed with
``map``, cached method settings) gives the StepTime of the straightforward computation: a Gemm per shape from
``step_gemms``, ``gemm_work`` on each, max(FLOPs / rate, bytes / bandwidth) summed GEMM by GEMM, the adapter FLOPs
summed and subtracted in full. Every float agrees to 1e-12 (only the order of additions differs), over a grid of
models, methods, shapes, GPUs and strategies, cold (nothing cached) and warm; cold and warm are identical (==).

Uses the bundled catalog (data/models), so it runs without ../shared/reference.
"""

from __future__ import annotations

import itertools

import pytest

from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.scenario.peft import LORA_FAMILY, targeted
from engine.scenario.precision import precision_spec
from engine.scenario.training import Framework, Method, Scenario
from engine.time import step
from engine.time.adapters import adapter_flops_per_token, offload_transfer_bytes
from engine.time.attention import attention_work
from engine.time.gemm import GemmTable, gemm_shapes, gemm_work, occupancy_flops, step_gemms
from engine.time.memory_bound import cast_bytes_per_use, dequant_bytes_per_use, layer_forward_bytes, loss_bytes
from engine.time.overhead import BACKWARD_HOST_FACTOR, COMPILED_BACKWARD_HOST_FACTOR, layer_kernels
from engine.time.rates import gpu_rates

MODELS = ["openai-community/gpt2", "meta-llama/Llama-3.1-8B", "deepseek-ai/DeepSeek-V2-Lite",
          "mistralai/Mixtral-8x7B-v0.1", "google-bert/bert-large-uncased", "google/gemma-2-2b", "Qwen/Qwen3-30B-A3B"]
METHODS = [dict(method="full"), dict(method="full", precision="amp_bf16"), dict(method="lora"),
           dict(method="lora", lora_targets="all-linear", lora_r=64), dict(method="qlora", double_quant=True),
           dict(method="lora", optimizer="lora_fa"), dict(method="lora", modules_to_save="lm_head"),
           dict(method="dora", lora_dropout=0.05), dict(method="loha"), dict(method="ia3"),
           dict(method="prompt_tuning"), dict(method="prefix_tuning")]
SHAPES = [dict(seq_len=333, micro_batch_size=3), dict(seq_len=4096, micro_batch_size=1, gradient_accumulation_steps=4)]
GPUS = [find_gpu(g) for g in ("A100 80GB", "H100 SXM", "L40S")]
PLANS = [(1, Strategy.DDP, False), (8, Strategy.ZERO3, True), (4, Strategy.DDP, False)]


class ReferenceGemms:
    """The GEMMs of one micro batch the straightforward way: (padded FLOPs, bytes) of each from ``gemm_work``, by
    part (blocks' forward, LM head's forward, backward), each part's time summed GEMM by GEMM."""

    def __init__(self, works: dict[str, list[tuple[float, float, float]]], flops: float, block_flops: float) -> None:
        self.works, self.flops, self.block_flops = works, flops, block_flops

    def seconds(self, rate: float, bandwidth: float, sms: int = 0) -> tuple[float, float, float]:
        return tuple(sum(max(f / rate, b / bandwidth, sms * o / rate) for f, b, o in self.works[part])
                     for part in ("block", "head", "backward"))


def reference_work(arch, sc, kernel, fused):
    """``engine.time.step._work`` the straightforward way: nothing cached, a Gemm per shape."""
    spec = precision_spec(sc.precision)
    c = spec.compute_bytes
    t = float(sc.tokens_per_micro_batch)
    layers = arch.num_layers
    resid = 4 if (spec.weight_bytes == 4 or (sc.method is Method.QLORA and sc.prepare_kbit_training)) else spec.weight_bytes
    adapted = targeted(arch, sc)
    targets = adapted if sc.method in LORA_FAMILY else []
    works = {"block": [], "head": [], "backward": []}
    gemm_flops = block_flops = 0.0
    for gm in step_gemms(arch, sc, c, targets):
        part = "backward" if gm.phase == "backward" else ("head" if gm.part == "lm_head" else "block")
        works[part].append((*gemm_work(gm), occupancy_flops(gm)))
        gemm_flops += gm.flops
        if part == "block":
            block_flops += gm.flops
    recompute_flops = block_flops if sc.gradient_checkpointing else 0.0
    full = attention_work(arch, t, sc.seq_len)
    model_flops = gemm_flops + 3.0 * full
    linear_params = sum(gr.parameters for gr in arch.tensors if gr.linear)
    cast_f, cast_b = cast_bytes_per_use(spec.autocast and spec.weight_bytes == 4)
    k_layer = layer_kernels(arch, sc, kernel, fused, sum(lin.count for lin in adapted))
    k_fwd = layers * k_layer + step.HEAD_KERNELS
    tokens = sc.micro_batch_size * sc.seq_len
    adapter = adapter_flops_per_token(arch, sc, 0.0) * tokens
    if sc.method in LORA_FAMILY:  # LoRA's A/B GEMMs are timed by step_gemms: take them out again
        for lin in adapted:
            n = lin.blocks(arch.num_layers) * lin.count
            share = arch.experts_per_token / arch.num_experts if lin.count > 1 and arch.num_experts else 1.0
            adapter -= n * share * 6.0 * sc.lora_r * (lin.in_features + lin.out_features) * tokens
    tensors = (sum(gr.count for gr in arch.tensors) if sc.method is Method.FULL
               else 2 * sum(lin.count * lin.blocks(arch.num_layers) for lin in targets))
    # torch.compile's backward (fused off the HF stack) is one compiled graph: no autograd engine per op
    bwd_factor = COMPILED_BACKWARD_HOST_FACTOR if fused and sc.framework is not Framework.HF else BACKWARD_HOST_FACTOR
    return step._Work(
        gemms=ReferenceGemms(works, gemm_flops, block_flops), model_flops=model_flops,
        executed_flops=model_flops + recompute_flops + (full if sc.gradient_checkpointing else 0.0),
        attention_full=full,
        elem_fwd_bytes=layers * layer_forward_bytes(arch, c, resid, fused) * t,
        casts_fwd_bytes=cast_f * linear_params,
        casts_bwd_bytes=(cast_b if sc.method is Method.FULL else 0.0) * linear_params,
        head_bytes=loss_bytes(arch, sc, c) * t + 2 * resid * arch.hidden_size * t,
        embed_grad_bytes=(2 * arch.vocab_size * arch.hidden_size * (4 if spec.weight_bytes == 4 else c)
                          if sc.method is Method.FULL else 0.0),
        dequant_bytes=dequant_bytes_per_use(sc, c) * linear_params,
        kernels_fwd=k_fwd,
        kernels_bwd=bwd_factor * k_fwd + (layers * k_layer if sc.gradient_checkpointing else 0.0),
        tensors=tensors, adapter_flops=max(0.0, adapter), offload_bytes=offload_transfer_bytes(arch, sc, resid),
    )


def _clear_caches() -> None:
    step._WORK.clear()
    step._METHODS.clear()


@pytest.mark.parametrize("repo_id", MODELS)
def test_fast_path_gives_the_reference_step_time(repo_id, monkeypatch):
    arch = architecture_from_config(catalog_model(repo_id).config)
    checked = 0
    for method, shape, ckpt in itertools.product(METHODS, SHAPES, (False, True)):
        if ckpt and method["method"] == "prefix_tuning":
            continue  # PEFT rejects prefix tuning with gradient checkpointing (so does Scenario)
        sc = Scenario.build(**method, **shape, gradient_checkpointing=ckpt)
        for gpu in GPUS:
            est = estimate_memory(arch, sc, gpu)
            rates = gpu_rates(gpu, sc.precision)
            for n, strategy, fused in PLANS:
                kwargs = dict(num_gpus=n, strategy=strategy, fused_kernels=fused)
                _clear_caches()
                cold = step.step_time(arch, sc, est, gpu, rates, **kwargs)
                warm = step.step_time(arch, sc, est, gpu, rates, **kwargs)
                with monkeypatch.context() as m:
                    m.setattr(step, "_work", reference_work)
                    ref = step.step_time(arch, sc, est, gpu, rates, **kwargs)
                assert cold == warm, (sc, gpu.name, n, strategy)
                assert cold.breakdown_s == pytest.approx(ref.breakdown_s, rel=1e-12, abs=0.0), (sc, gpu.name, n, strategy)
                assert (cold.tokens, cold.attention_kernel, cold.link) == (ref.tokens, ref.attention_kernel, ref.link)
                assert cold.executed_flops == pytest.approx(ref.executed_flops, rel=1e-12)
                assert cold.model_flops == pytest.approx(ref.model_flops, rel=1e-12)
                checked += 1
    assert checked == (2 * len(METHODS) - 1) * len(SHAPES) * len(GPUS) * len(PLANS)


def test_merged_columns_time_every_gemm_once():
    """The GEMM table's columns against the GEMMs one by one, on a GPU-like rate where some GEMMs are compute-bound
    and others (LoRA's rank-16 ones) bandwidth-bound: the same total seconds and FLOPs."""
    arch = architecture_from_config(catalog_model("meta-llama/Llama-3.1-8B").config)
    sc = Scenario.build(method="lora", seq_len=777)
    targets = targeted(arch, sc)
    gemms = list(step_gemms(arch, sc, 2, targets))
    table = GemmTable(gemm_shapes(arch, False, targets, sc.lora_r), 2)
    work = table.work((777.0, 777.0))
    assert len(table._a) < len(gemms)  # q/o, k/v and gate/up share shapes: merged
    assert work.flops == pytest.approx(sum(g.flops for g in gemms), rel=1e-12)
    for rate, bandwidth in ((217e12, 1.73e12), (600e12, 2.8e12), (1e12, 10e12)):
        direct = sum(max(f / rate, b / bandwidth) for f, b in map(gemm_work, gemms))
        assert sum(work.seconds(rate, bandwidth)) == pytest.approx(direct, rel=1e-12)
        bound = [f / rate > b / bandwidth for f, b in map(gemm_work, gemms)]
        if rate == 217e12:
            assert any(bound) and not all(bound)
        # with an A100's 108 SMs: rank-16 X A at 777 tokens is 7 tiles, occupancy-bound
        occupied = sum(max(f / rate, b / bandwidth, 108 * occupancy_flops(g) / rate)
                       for g, (f, b) in zip(gemms, map(gemm_work, gemms)))
        assert sum(work.seconds(rate, bandwidth, 108)) == pytest.approx(occupied, rel=1e-12)
        if rate == 217e12:
            assert occupied > direct
