"""Freeze-tuning (Scenario.trainable_layers): LLaMA-Factory's finetuning_type freeze, the last N blocks trainable.

Values by hand from Llama-2-7B's config (hidden 4096, MLP 11008, 32 layers, vocab 32000): one block's linears
4 x 4096^2 + 3 x 4096 x 11008 = 202,375,168 weights, plus its two RMSNorm weights (8,192).
Behaviour read from hiyouga/LLaMA-Factory: ``_setup_freeze_tuning`` (model/adapter.py: the last N layers train,
embeddings / final norm / LM head frozen, trainable params cast to fp32), ``get_custom_gradient_checkpointing_func``
(model_utils/checkpointing.py: only trainable blocks are checkpointed; frozen blocks below record no graph), and
v0.5.3's ``enable_input_require_grads`` (src/llmtuner/model/patcher.py: every block in the graph).
"""

from __future__ import annotations

import pytest

from engine.errors import ScenarioError
from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.scenario.training import Scenario
from engine.time.gemm import step_gemms

LLAMA2 = architecture_from_config(catalog_model("meta-llama/Llama-2-7b-hf").config)
LINEARS = 4 * 4096 * 4096 + 3 * 4096 * 11008
BLOCK = LINEARS + 2 * 4096
TOKENS = 512


def sc(precision: str = "bf16", **kw) -> Scenario:
    return Scenario.build(method="full", precision=precision, optimizer="adamw_8bit", micro_batch_size=1, seq_len=TOKENS,
                          gradient_checkpointing=True, attention="flash_attention_2", **kw)


def test_only_the_last_blocks_train_in_fp32_under_mixed_precision():
    # LLaMA-Factory bf16: true (not pure_bf16): the model loads in bf16, the trainable blocks are cast to fp32
    est = estimate_memory(LLAMA2, sc("amp_bf16", trainable_layers=3))
    assert est.trainable_parameters == 3 * BLOCK
    parts = est.parts_by_key
    assert parts["gradients"].bytes == 4 * 3 * BLOCK  # fp32 gradients of the fp32 trainable blocks
    # weights: the 3 trainable blocks in fp32, everything else (29 blocks, embeddings, head, final norm) in bf16
    assert parts["weights"].bytes == 4 * 3 * BLOCK + 2 * (LLAMA2.total_parameters - 3 * BLOCK)
    # autocast caches the bf16 copies of the trainable blocks' linears only (the frozen rest is bf16 already)
    assert parts["weight_copies"].bytes == 2 * 3 * LINEARS
    pure = estimate_memory(LLAMA2, sc(trainable_layers=3)).parts_by_key  # pure_bf16: everything 16-bit
    assert pure["weights"].bytes == 2 * LLAMA2.total_parameters and pure["gradients"].bytes == 2 * 3 * BLOCK


def test_frozen_blocks_below_save_no_activations():
    full = estimate_memory(LLAMA2, sc()).parts_by_key["activations"].bytes
    freeze = estimate_memory(LLAMA2, sc(trainable_layers=3)).parts_by_key["activations"].bytes
    # checkpointed: each block in the graph keeps its bf16 input (2 B x tokens x hidden); the 29 frozen ones none;
    # and the frozen LM head saves no input for a weight gradient (2 B x tokens x hidden less)
    head_input = 2 * 4096 * TOKENS
    assert full - freeze == 29 * 2 * 4096 * TOKENS + head_input
    graph = estimate_memory(LLAMA2, sc(trainable_layers=3, frozen_input_grads=True)).parts_by_key["activations"].bytes
    assert graph == full - head_input  # enable_input_require_grads: every block is checkpointed again


def _backward_flops(s: Scenario) -> float:
    return sum(g.flops for g in step_gemms(LLAMA2, s, 2) if g.phase == "backward")


def test_backward_stops_at_the_first_trainable_block():
    head_dgrad = 2 * 32000 * 4096 * TOKENS  # the frozen LM head: input gradient only
    # 3 blocks x (input + weight gradient) = 4 x linears x tokens each
    assert _backward_flops(sc(trainable_layers=3)) == pytest.approx(3 * 4 * LINEARS * TOKENS + head_dgrad, rel=1e-12)
    # with the embeddings' output requiring grad: input gradients of all 32 blocks, weight gradients of 3
    assert _backward_flops(sc(trainable_layers=3, frozen_input_grads=True)) == pytest.approx(
        (32 * 2 + 3 * 2) * LINEARS * TOKENS + head_dgrad, rel=1e-12)


def test_freeze_is_a_full_fine_tuning_setting():
    with pytest.raises(ScenarioError, match="use it with method full"):
        Scenario.build(method="lora", trainable_layers=2)
    with pytest.raises(ScenarioError, match="set trainable_layers too"):
        Scenario.build(method="full", frozen_input_grads=True)


def test_llamafactory_freeze_config_imports_as_freeze_tuning():
    from engine.importers import import_configs
    yaml = (b"model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: freeze\n"
            b"freeze_trainable_layers: 3\nfreeze_trainable_modules: all\ncutoff_len: 512\nbf16: true\n")
    s = import_configs([("lf.yaml", yaml)]).scenario()
    assert s.method.value == "full" and s.trainable_layers == 3 and not s.frozen_input_grads
    # LLaMA-Factory's default freeze_trainable_layers is 2 (hparams/finetuning_args.py)
    s2 = import_configs([("lf.yaml", yaml.replace(b"freeze_trainable_layers: 3\n", b""))]).scenario()
    assert s2.trainable_layers == 2


def test_cli_takes_the_trainable_layers(capsys):
    import json

    from engine.cli import main
    args = ["estimate", "--model", "meta-llama/Llama-2-7b-hf", "--offline", "--method", "full", "--precision", "bf16",
            "--seq-len", "512", "--gradient-checkpointing", "--trainable-layers", "3"]
    assert main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenario"]["trainable_layers"] == 3 and out["trainable_parameters"] == 3 * BLOCK


def test_the_tracer_refuses_freeze_tuning_rather_than_trace_full_training():
    from engine.errors import NotTraceableError
    from engine.trace import check_traceable
    traceable = Scenario.build(method="full", precision="bf16", optimizer="adamw", trainable_layers=3)
    with pytest.raises(NotTraceableError, match="freeze-tuning is not traced"):
        check_traceable(traceable)


def test_a_freeze_plan_exports_and_imports_back():
    from engine.importers import import_configs
    from engine.plan.config_export import config_files
    from engine.plan.plans import Plan
    from engine.plan.training_code import training_code
    p = Plan(name="p", model_repo_id="meta-llama/Llama-3.2-1B", gpu="H100 SXM", dataset_total_tokens=10**6,
             method="full", precision="amp_bf16", trainable_layers=3, gradient_checkpointing=True)
    files = {f.name: f for f in config_files(p)}
    back = import_configs([("lf.yaml", files["llamafactory.yaml"].text.encode())]).scenario()
    assert (back.method.value, back.trainable_layers) == ("full", 3)
    # formats without a freeze key say so instead of exporting full training silently
    assert any("freeze-tuning of the last 3 blocks" in x for x in files["sft_config.yaml"].lost)
    code = training_code(p)
    compile(code, "training_code", "exec")
    assert "range(max(0, layers - 3), layers)" in code and "param.data = param.data.float()" in code


def test_flops_per_token_count_the_trainable_blocks_backward():
    from engine.time.flops import flops_per_token
    full = flops_per_token(LLAMA2, sc())
    freeze = flops_per_token(LLAMA2, sc(trainable_layers=3))
    n = full.matmul_parameters
    # forward 2N, input and weight gradients 2N each over 3 of 32 blocks (PaLM appendix B's 6N, restricted)
    assert full.dense == 6 * n and freeze.dense == pytest.approx((2 + 4 * 3 / 32) * n)
    assert freeze.recompute == pytest.approx(full.recompute * 3 / 32)
    graph = flops_per_token(LLAMA2, sc(trainable_layers=3, frozen_input_grads=True))
    assert graph.dense == pytest.approx((4 + 2 * 3 / 32) * n) and graph.recompute == full.recompute
