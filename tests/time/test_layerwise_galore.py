"""Layer-wise GaLore 8-bit (``galore_adamw_8bit_layerwise``): what LLaMA-Factory's paper ran for its GaLore rows.

Sources: hiyouga/LLaMA-Factory@8963e89 (the paper's commit) ``examples/extras/galore/galore_adamw_8bit_bf16.sh``
(``--optim adamw_8bit --use_galore --galore_layerwise --galore_rank 128 --pure_bf16``) and ``src/llmtuner/train/
utils.py`` ``_create_galore_optimizer`` (one GaLoreAdamW8bit per parameter, stepped and ``zero_grad``-ed in its
``register_post_accumulate_grad_hook``); galore-torch 1.0 ``galore_torch/adamw8bit.py`` (``p.saved_data =
p.data.clone()``, the bitsandbytes update, ``torch.cuda.synchronize()`` per parameter); Zheng et al. 2024
(arXiv:2403.13372) Table 4's memory column.
"""

from __future__ import annotations

import pytest

from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.scenario.training import Scenario
from engine.time.adapters import galore_8bit_step_bytes
from engine.time.throughput import estimate_throughput

LLAMA2_7B = architecture_from_config(catalog_model("meta-llama/Llama-2-7b-hf").config)
A100_40 = find_gpu("A100 40GB")
LLAMA2_7B_PARAMS = sum(g.parameters for g in LLAMA2_7B.tensors)


def _sc(optimizer: str, **kw) -> Scenario:
    return Scenario.build(method="full", precision="bf16", optimizer=optimizer, framework="hf", micro_batch_size=1,
                          seq_len=512, gradient_checkpointing=True, attention="flash_attention_2", **kw)


def test_one_gradient_alive_at_a_time_matches_the_papers_memory_column():
    """Table 4: Llama-2-7B GaLore peaks at 15.43 GB on the A100 40GB, below its 13.5 GB of bf16 weights plus 13.5 GB of
    bf16 gradients: the in-backward steps free each gradient. Our estimate: the weights (12.55 GiB), the largest
    tensor's gradient (the 32000 x 4096 embedding or LM head, 0.24 GiB), 8-bit states of the projected gradients."""
    layerwise = estimate_memory(LLAMA2_7B, _sc("galore_adamw_8bit_layerwise"), A100_40)
    after = estimate_memory(LLAMA2_7B, _sc("galore_adamw"), A100_40)
    grads = layerwise.parts_by_key["gradients"].bytes
    assert grads == pytest.approx(32000 * 4096 * 2)
    assert after.parts_by_key["gradients"].bytes == pytest.approx(LLAMA2_7B_PARAMS * 2, rel=1e-6)
    assert layerwise.total_bytes / 1e9 == pytest.approx(15.43, rel=0.03)  # 15.27 GB (14.22 GiB)



def test_in_backward_steps_that_synchronise_add_the_backwards_host_time():
    """Each hook's ``torch.cuda.synchronize()`` empties the launch queue, so the backward's host launches add to its
    kernels instead of hiding under them; the step moves GaLoreAdamW8bit's bytes (the weight's clone, the update
    projected back and added) and the Trainer clips nothing."""
    t = estimate_throughput(LLAMA2_7B, _sc("galore_adamw_8bit_layerwise"), A100_40)
    # 6 m n + 3 low (bf16) + 4 low (two uint8 states) per projected tensor; the rest one bitsandbytes pass (10 B)
    proj = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    low = 32 * 128 * (4 * 4096 + 3 * 11008)
    rest = LLAMA2_7B_PARAMS - proj
    sc = _sc("galore_adamw_8bit_layerwise")
    assert galore_8bit_step_bytes(LLAMA2_7B, sc, 2) == pytest.approx(12 * proj + 10 * low + 10 * rest)
    # the exposed host time is the backward's whole launch time: more than the after-backward step's
    after = estimate_throughput(LLAMA2_7B, _sc("galore_adamw"), A100_40)
    assert t.breakdown_s["overhead"] > after.breakdown_s["overhead"] + 0.05
    assert t.breakdown_s["optimizer"] < after.breakdown_s["optimizer"]


def test_layerwise_refuses_gradient_accumulation_and_several_gpus():
    """LLaMA-Factory@8963e89 raises for layer-wise GaLore with gradient accumulation (``_create_galore_optimizer``:
    "Per-layer GaLore does not support gradient accumulation.") and in distributed training (``hparams/parser.py``:
    "Distributed training does not support layer-wise GaLore.")."""
    with pytest.raises((ScenarioError, ValueError), match="gradient accumulation"):
        _sc("galore_adamw_8bit_layerwise", gradient_accumulation_steps=4)
    with pytest.raises(ScenarioError, match="one GPU only"):
        estimate_throughput(LLAMA2_7B, _sc("galore_adamw_8bit_layerwise"), A100_40, num_gpus=2)


def test_llamafactory_config_with_galore_layerwise_imports_as_it():
    """LLaMA-Factory's ``use_galore`` + ``galore_layerwise`` over ``optim: adamw_8bit`` is this optimizer; over
    ``adamw_torch`` (layer-wise GaLoreAdamW) it is not modelled and said so."""
    from engine.importers import import_configs

    def read(optim: str):
        text = (f"model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: pt\nfinetuning_type: full\noptim: {optim}\n"
                "use_galore: true\ngalore_layerwise: true\ngalore_rank: 128\npure_bf16: true\n")
        return import_configs([("llamafactory.yaml", text.encode())])

    r = read("adamw_8bit")
    assert r.scenario().optimizer.value == "galore_adamw_8bit_layerwise" and r.scenario().galore_rank == 128
    assert "layer-wise GaLore AdamW" in read("adamw_torch").unsupported["use_galore"]
