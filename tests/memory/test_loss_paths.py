"""Loss implementations and transformers' loss path by release (issue 25 items 8 and 12).

Sources: transformers' own code (modeling_qwen2.py 4.41.2 / 4.45.2, loss/loss_utils.py 4.46.3-4.50.0), measured on
real CPU tensors by scripts/loss_probe.py (run here against the installed transformers; the 4.41.2 and 4.46.3 figures
were measured with those wheels on PYTHONPATH and are quoted); Megatron-LM cross_entropy.py, torchtune
ce_chunked_output_loss.py, flash-attn ops/triton/cross_entropy.py; llm.c's published GPT-2 (124M) run.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.memory.loss_paths import loss_path
from engine.memory.parallel import Offload, Strategy
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.plan.fit import check_fit
from engine.errors import ScenarioError
from engine.scenario.loss import LossImplementation, TransformersVersion
from engine.scenario.precision import precision_spec
from engine.scenario.training import Scenario

ROOT = Path(__file__).resolve().parents[2]
GPT2 = architecture_from_config(catalog_model("openai-community/gpt2").config)
QWEN = architecture_from_config(catalog_model("Qwen/Qwen2.5-7B").config)  # Qwen2ForCausalLM, vocab 152,064 as Qwen2-7B


def _path(arch, **fields):
    sc = Scenario.build(**fields)
    return loss_path(arch, sc, precision_spec(sc.precision))


# Measured by scripts/loss_probe.py (bf16 logits, vocab 32,000 x 256 tokens; ~0.3-0.6 B per logit is the tiny model's
# other tensors): forward peak per logit, micro batch 1 and 2. Backward: 7.97-8.0 B over the 4.3-4.6 B held = 12 B.
MEASURED_FORWARD = {
    TransformersVersion.V4_45_AND_OLDER: (8.568, 12.295),   # transformers 4.41.2
    TransformersVersion.V4_46_TO_4_49: (10.566, 14.294),    # transformers 4.46.3
    TransformersVersion.V4_50_PLUS: (10.581, 10.325),       # transformers 5.24.0
}


@pytest.mark.parametrize("version", list(TransformersVersion))
@pytest.mark.parametrize("batch", [1, 2])
def test_transformers_forward_by_release(version, batch):
    path = _path(QWEN, method="lora", micro_batch_size=batch, transformers_version=version)
    measured = MEASURED_FORWARD[version][batch - 1]
    assert path.forward == pytest.approx(measured, abs=0.6)
    assert path.backward == 12.0  # log-softmax + nll and log-softmax gradients, every release


def test_release_numbers_read_as_ranges():
    assert Scenario.build(transformers_version="4.41.2").transformers_version is TransformersVersion.V4_45_AND_OLDER
    assert Scenario.build(transformers_version="4.47").transformers_version is TransformersVersion.V4_46_TO_4_49
    assert Scenario.build(transformers_version="5.0.0").transformers_version is TransformersVersion.V4_50_PLUS
    assert Scenario().transformers_version is TransformersVersion.V4_50_PLUS  # default: the current release
    with pytest.raises(ScenarioError, match="transformers_version"):
        Scenario.build(transformers_version="newest")


def test_liger_is_the_fused_switch():
    assert Scenario.build(loss_implementation="liger").fused_cross_entropy
    assert Scenario.build(fused_cross_entropy=True).loss is LossImplementation.LIGER
    assert Scenario.build(framework="litgpt").loss is LossImplementation.LITGPT_CHUNKED
    with pytest.raises(ScenarioError, match="choose one loss"):
        Scenario.build(fused_cross_entropy=True, loss_implementation="megatron")


def test_qwen2_7b_32k_llamafactory_case():
    """Item 8: LoRA, 32k tokens, micro batch 1, FA2, checkpointing, ZeRO-3 + offload (the LLaMA-Factory report on
    transformers 4.41). At micro batch 1 the 4.41 path holds no more than 5.x: the shifted slice of one sequence is
    contiguous (no copy) and the in-model upcast frees the bf16 logits, so its forward is 8 B per logit (5.x: 10) and
    the backward 12 B in both; the peak, and the verdict, do not move. With two sequences 4.46-4.49 hold 4 B more."""
    gpu = find_gpu("A100 80GB")
    def fit(version, batch=1):
        sc = Scenario.build(method="lora", micro_batch_size=batch, seq_len=32768 // batch, gradient_checkpointing=True,
                            attention="flash_attention_2", transformers_version=version)
        return check_fit(QWEN, sc, gpu, Strategy.ZERO3, 8, offload=Offload.OPTIMIZER_AND_PARAMS)
    new, old = fit("5.0"), fit("4.41.2")
    assert old.peak_bytes == new.peak_bytes
    logits = 32768 * 152064
    assert new.components["logits_loss"] == pytest.approx(12 * logits)
    mid, now = fit("4.46.3", batch=2), fit("5.0", batch=2)
    # the shifted fp32 copy makes the forward (14 B per logit) the peak, above 5.x's backward (12 B)
    assert mid.components["logits_forward"] == pytest.approx(14 * logits) and mid.peak_phase == "forward"
    assert mid.peak_bytes - now.peak_bytes > 1.9 * logits


def test_megatron_vocab_parallel():
    """megatron/core/tensor_parallel/cross_entropy.py: one fp32 copy (calculate_logits_max), exp and softmax in place,
    save_for_backward(exp_logits, ...); backward turns it into the gradient in place, cast to bf16 by autograd."""
    path = _path(GPT2, loss_implementation="megatron", precision="bf16")
    assert (path.forward, path.backward) == (2 + 4, 4 + 2)
    fp32 = _path(GPT2, loss_implementation="megatron", precision="fp32")
    assert (fp32.forward, fp32.backward) == (4, 4)  # .float() of fp32 logits is the same tensor


def test_inplace_fused():
    """flash-attn CrossEntropyLoss: save_for_backward(logits, lse, labels); inplace_backward: dlogits = logits."""
    path = _path(GPT2, loss_implementation="inplace_fused", precision="bf16")
    assert (path.forward, path.backward) == (2, 2)


def test_torchtitan_eager_is_transformers_current():
    """torchtitan components/loss.py: F.cross_entropy(pred.flatten(0, 1).float(), ...) on the model's bf16 output."""
    a = _path(GPT2, loss_implementation="torchtitan", precision="bf16")
    b = _path(GPT2, precision="bf16")
    assert (a.forward, a.backward) == (b.forward, b.backward) == (10, 12)


LLAMA31_8B = architecture_from_config(catalog_model("meta-llama/Llama-3.1-8B").config)  # vocab 128,256


def _torchtune_chunked_bytes(batch: int, seq: int, vocab: int, chunks: int = 8, c: int = 2) -> tuple[int, int]:
    """(forward, backward) bytes of torchtune's CEWithChunkedOutputLoss, eager, walked chunk by chunk as its code runs
    (pytorch/torchtune@a6290a5b, v0.6.1: modules/transformer.py chunked_output = [self.output(chunk) for chunk in
    h.chunk(8, dim=1)]; modules/loss/ce_chunked_output_loss.py: for each chunk F.cross_entropy(chunk.float(), ...),
    which saves the chunk's fp32 log-softmax; the recipe's _loss_step then del logits before backward)."""
    step = -(-seq // chunks)  # torch.chunk: ceil(seq / chunks) tokens per chunk, the last one shorter
    sizes = [min(step, seq - k * step) for k in range(chunks) if seq > k * step]
    logits16 = sum(batch * s * vocab * c for s in sizes)  # every chunk, alive until the recipe's del logits
    peak_fwd, saved = 0, 0
    for s in sizes:
        n = batch * s * vocab
        peak_fwd = max(peak_fwd, logits16 + saved + n * 4 + n * 4)  # the chunk's fp32 copy and its log-softmax
        saved += n * 4  # the copy dies, the log-softmax stays for backward
    first = batch * sizes[-1] * vocab  # autograd starts with the last chunk: its nll and log-softmax gradients
    peak_bwd = saved + 2 * first * 4
    return peak_fwd, peak_bwd


def test_torchtune_default_loss_is_its_recipes_chunked_loss():
    """torchtune's recipe configs name torchtune.modules.loss.CEWithChunkedOutputLoss as their loss since
    pytorch/torchtune@4fba6cd4 (0.3.0; e.g. recipes/configs/llama3_1/8B_lora_single_device.yaml at a6290a5b, 0.6.1),
    so the torchtune framework counts it without being told: Llama-3.1-8B, micro batch 2 x 2048, bf16."""
    sc = Scenario.build(framework="torchtune", method="lora", micro_batch_size=2, seq_len=2048)
    assert sc.loss is LossImplementation.TORCHTUNE_CHUNKED
    est = estimate_memory(LLAMA31_8B, sc)
    parts = {p.key: p for p in est.parts}
    fwd, bwd = _torchtune_chunked_bytes(2, 2048, 128_256)
    assert parts["logits_loss"].bytes == pytest.approx(bwd) == 2_626_682_880  # 2 x 2048 x 128,256 x (4 + 1) B
    assert parts["logits_forward"].bytes == pytest.approx(fwd) == 3_414_687_744  # x (2 + 4 + 0.5) B
    hf = {p.key: p for p in estimate_memory(LLAMA31_8B, Scenario.build(method="lora", micro_batch_size=2,
                                                                        seq_len=2048)).parts}
    assert hf["logits_forward"].bytes == 2 * 2048 * 128_256 * 10  # transformers 4.50+: bf16 + fp32 + log-softmax
    assert est.assumptions[0].endswith("loss: torchtune CEWithChunkedOutputLoss (8 chunks)")
    assert "a6290a5b" in parts["logits_loss"].source


def test_torchtune_cross_entropy_paths():
    """torch.nn.CrossEntropyLoss under torchtune: 0.3+ (a6290a5b) the model returns self.output(h).float() and the
    recipe deletes the logits before backward: 4 + 4 forward, log-softmax + two gradients backward; 0.1-0.2
    (0217d44c) the recipe keeps logits[..., :-1, :].contiguous() through backward: 4 more at backward."""
    new = _path(LLAMA31_8B, framework="torchtune", loss_implementation="torchtune_ce", precision="bf16")
    old = _path(LLAMA31_8B, framework="torchtune", loss_implementation="torchtune_ce_v02", precision="bf16",
                micro_batch_size=2)
    assert (new.forward, new.backward) == (8, 12)
    assert (old.forward, old.backward) == (8, 16)
    assert "a6290a5b" in new.source and "0217d44c" in old.source


def test_torchtune_compiled_chunked_path():
    """compile: True: the recipes compile each chunk's upcast + cross-entropy; AOTAutograd saves the c-byte chunk (not
    the fp32 log-softmax), so every chunk stays alive to backward (c) and backward adds one chunk's gradient (c/8)."""
    bf16 = _path(LLAMA31_8B, framework="torchtune", loss_implementation="torchtune_chunked_compiled", precision="bf16")
    fp32 = _path(LLAMA31_8B, framework="torchtune", loss_implementation="torchtune_chunked_compiled", precision="fp32")
    assert (bf16.forward, bf16.backward) == (2, 2.25)
    assert (fp32.forward, fp32.backward) == (4, 4.5)
    assert "loss_probe.py --loss torchtune_chunked_compiled" in bf16.source and "a6290a5b" in bf16.source
    sc = Scenario.build(framework="torchtune", method="lora", micro_batch_size=2, seq_len=2048,
                        loss_implementation="torchtune_chunked_compiled")
    parts = {p.key: p for p in estimate_memory(LLAMA31_8B, sc).parts}
    assert parts["logits_loss"].bytes == 2 * 2048 * 128_256 * 2.25
    assert parts["logits_forward"].bytes == 2 * 2048 * 128_256 * 2


def test_torchtune_default_under_compile_is_the_compiled_record():
    """The loss's compiled form (LOSSES' compiled_form): torchtune's chunked loss, its framework default or chosen, runs as
    torchtune_chunked_compiled when the run is compiled (Scenario.torch_compile); eager otherwise; other losses are
    what they are either way. The step time reads the same loss: the compiled chunked loss keeps its chunks on chip;
    the step time's other fused kernels (Unsloth, Liger) do not compile the loss."""
    from engine.time.memory_bound import loss_bytes

    tt = Scenario.build(framework="torchtune")
    assert tt.loss is LossImplementation.TORCHTUNE_CHUNKED
    compiled_run = Scenario.build(framework="torchtune", torch_compile=True)
    assert compiled_run.loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED
    # the same run not compiled
    assert compiled_run.model_copy(update={"torch_compile": False}).loss is LossImplementation.TORCHTUNE_CHUNKED
    chosen = Scenario.build(framework="torchtune", loss_implementation="torchtune_chunked", torch_compile=True)
    assert chosen.loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED
    for fields in ({"framework": "torchtune", "loss_implementation": "torchtune_ce"}, {},
                   {"framework": "litgpt"}, {"fused_cross_entropy": True}):
        sc = Scenario.build(**fields)
        assert Scenario.build(**fields, torch_compile=True).loss is sc.loss
    v = LLAMA31_8B.vocab_size
    assert loss_bytes(LLAMA31_8B, tt, 2) == 28 * v
    assert loss_bytes(LLAMA31_8B, compiled_run, 2) == 12 * v
    stated = Scenario.build(framework="torchtune", loss_implementation="torchtune_chunked_compiled")
    assert loss_bytes(LLAMA31_8B, stated, 2) == 12 * v


def test_llama31_8b_torchtune_compile_switch_counts_the_measured_compiled_loss():
    """Llama-3.1-8B, torchtune, LoRA, micro batch 2 x 2048, bf16: with torch_compile the loss component is the
    measured compiled record (scripts/loss_probe.py: 2 B per logit at the forward, every chunk saved, + one chunk's
    2-byte gradient at backward), without it the eager chunked loss (2 + 4 + 0.5 B at the forward)."""
    logits = 2 * 2048 * 128_256
    common = dict(framework="torchtune", method="lora", micro_batch_size=2, seq_len=2048)
    on = {p.key: p for p in estimate_memory(LLAMA31_8B, Scenario.build(**common, torch_compile=True)).parts}
    off = {p.key: p for p in estimate_memory(LLAMA31_8B, Scenario.build(**common)).parts}
    assert on["logits_forward"].bytes == 2 * logits == 1_050_673_152
    assert on["logits_loss"].bytes == 2.25 * logits
    assert "loss_probe.py --loss torchtune_chunked_compiled" in on["logits_loss"].source
    fwd, bwd = _torchtune_chunked_bytes(2, 2048, 128_256)
    assert off["logits_forward"].bytes == fwd == 6.5 * logits
    assert off["logits_loss"].bytes == bwd
    est = estimate_memory(LLAMA31_8B, Scenario.build(**common, torch_compile=True))
    assert est.assumptions[0].endswith("loss: torchtune CEWithChunkedOutputLoss (8 chunks), compiled")


def test_frameworks_count_their_own_loss_without_a_note():
    for framework, loss in (("hf", "hf"), ("litgpt", "litgpt_chunked"), ("torchtune", "torchtune_chunked")):
        sc = Scenario.build(framework=framework)
        assert sc.loss.value == loss
        assert "recipes run" not in estimate_memory(QWEN, sc).assumptions[0]


def _probe(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "loss_probe.py"), *args], capture_output=True,
                         text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


# Skipped without the [trace] extra, except under TRACE_REQUIRED=1 (.ci/run sets it once the extra is installed).
_REQUIRED = os.environ.get("TRACE_REQUIRED") == "1"
needs_torch = pytest.mark.skipif(
    not _REQUIRED and not (importlib.util.find_spec("torch") and importlib.util.find_spec("transformers")),
    reason="torch and transformers (the [trace] extra) measure the loss")
needs_inductor = pytest.mark.skipif(not _REQUIRED and not (shutil.which("g++") or shutil.which("c++")),
                                    reason="Inductor's CPU kernels need a C++ compiler")


@needs_torch
def test_installed_transformers_measured():
    m = _probe("--batch", "2")
    path = _path(QWEN, method="lora", micro_batch_size=2, precision="bf16")
    assert m["forward_peak_per_logit"] == pytest.approx(path.forward, abs=0.6)
    assert m["held_after_forward_per_logit"] + m["backward_extra_per_logit"] == pytest.approx(path.backward, abs=0.6)


@needs_torch
def test_torchtune_chunked_measured():
    """torchtune CEWithChunkedOutputLoss as its recipe runs it (8 chunks, each upcast alone, logits dropped before
    backward), measured: every chunk's fp32 log-softmax is kept (4 B) plus one chunk's gradients in backward."""
    m = _probe("--batch", "2", "--loss", "torchtune_chunked")
    path = _path(QWEN, method="lora", micro_batch_size=2, precision="bf16", loss_implementation="torchtune_chunked")
    assert m["forward_peak_per_logit"] == pytest.approx(path.forward, abs=0.6)
    assert m["held_after_forward_per_logit"] + m["backward_extra_per_logit"] == pytest.approx(path.backward, abs=0.6)


@needs_torch
@needs_inductor
def test_torchtune_chunked_compiled_measured():
    """torchtune CEWithChunkedOutputLoss with compile: True (compute_cross_entropy under torch.compile, Inductor, CPU),
    measured: the compiled chunk saves the 16-bit chunk it was given (2 B per logit in all, the recipe's del logits
    then frees nothing) and per-token statistics only; no fp32 copy or log-softmax in the forward; one chunk's 16-bit
    gradient in backward. The allocator tally of the same run's eager loss agrees with the eager record."""
    m = _probe("--batch", "2", "--loss", "torchtune_chunked_compiled")
    path = _path(QWEN, method="lora", micro_batch_size=2, precision="bf16",
                 loss_implementation="torchtune_chunked_compiled")
    assert (path.forward, path.backward) == (2, 2.25)
    assert m["saved_logit_chunks_per_logit"] == pytest.approx(2.0, abs=0.01)
    assert m["saved_other_per_logit"] < 0.01
    assert m["loss_forward_peak_per_logit"] == pytest.approx(path.forward, abs=0.1)
    assert m["held_after_forward_per_logit"] == pytest.approx(path.forward, abs=0.1)
    assert m["held_after_forward_per_logit"] + m["loss_backward_extra_per_logit"] == pytest.approx(path.backward,
                                                                                                   abs=0.1)
    eager = _path(QWEN, method="lora", micro_batch_size=2, precision="bf16", loss_implementation="torchtune_chunked")
    check = m["profiler_eager_check"]
    assert check["forward_peak_per_logit"] == pytest.approx(eager.forward, abs=0.6)
    assert check["held_after_forward_per_logit"] + check["backward_extra_per_logit"] == pytest.approx(eager.backward,
                                                                                                      abs=0.6)


def test_gpt2_124m_llmc_run_fits_with_a_fused_in_place_loss():
    """Item 12: llm.c's GPT-2 (124M) reproduction (karpathy/llm.c discussion #481, 2024-05-28) trains micro batch 64
    x 1,024 tokens per A100 80GB, with its fused classifier (gradient written over the logits). With transformers'
    loss the logits and loss alone are 12 B x 65,536 x 50,257 = 36.8 GiB and the step does not fit; with the fused
    in-place loss it fits. The issue's 2k-token shape (32 x 2,048, the same tokens) gives the same."""
    gpu = find_gpu("A100 80GB")
    base = dict(method="full", precision="amp_bf16", micro_batch_size=64, seq_len=1024)
    hf = check_fit(GPT2, Scenario.build(**base), gpu)
    fused = check_fit(GPT2, Scenario.build(**base, loss_implementation="inplace_fused"), gpu)
    assert hf.components["logits_loss"] / 2**30 == pytest.approx(36.81, abs=0.01)
    assert not hf.fits and fused.fits
    cfg = {**catalog_model("openai-community/gpt2").config, "n_positions": 2048, "n_ctx": 2048}
    long = architecture_from_config(cfg)
    shape = dict(base, micro_batch_size=32, seq_len=2048)
    assert not check_fit(long, Scenario.build(**shape), gpu).fits
    assert check_fit(long, Scenario.build(**shape, loss_implementation="inplace_fused"), gpu).fits


def test_formula_names_the_release():
    est = estimate_memory(QWEN, Scenario.build(method="lora", micro_batch_size=2, transformers_version="4.41"))
    forward = next(p for p in est.parts if p.key == "logits_forward")
    assert "4.45" in forward.source and "shifted copy" in forward.formula
    assert any("4.45 and older" in a for a in est.assumptions)
