"""Llama-2-7B LoRA under llama-recipes' FSDP (issue 25 item 9).

Published: meta-llama/llama-recipes (now llama-cookbook) PR #41 "Improve FSDP LoRA Memory Usage" (awgu, 2023-07-25):
``torchrun --nproc_per_node 4 llama_finetuning.py --enable_fsdp --use_peft --peft_method lora --model_name
llama-2-7b-hf --pure_bf16`` on 4 x A100 40GB: 15.22 GB peak active, 19.36 GB peak reserved, with
``limit_all_gathers=True`` and ``loss = model(**batch).loss`` (the logits not kept through backward).

The run, from llama-recipes' defaults of that time: LoRA r 8 on q_proj, v_proj (alpha 32, dropout 0.05), batch 4 of
2,048-token packed samsum chunks, FSDP FULL_SHARD with the per-LlamaDecoderLayer auto-wrap policy, FSDP activation
checkpointing on every decoder layer, pure bf16, torch AdamW; transformers 4.31, whose Llama has no SDPA path yet
(eager attention) and upcasts the logits in its forward (``transformers_version <= 4.45``).

What the FSDP wrapping holds, modelled (engine.memory.parallel): the frozen base sharded over the 4 GPUs (pure bf16,
no MixedPrecision copies), the decoder layer in use unsharded beside the next one prefetched
(``backward_prefetch=BACKWARD_PRE``; ``limit_all_gathers=True`` lets no more than two all-gathers run ahead), the LoRA
units' gradients. Added for this item: the eager attention's backward in the recomputed layer, which holds the
probabilities' gradients beside the saved probabilities (engine.memory.activations.scores_backward_bytes, confirmed
by the traced table: median 0.066% -> 0.058%). Estimate 10.35 -> 12.35 GiB allocated.

The difference that remains, documented, not fitted:
- FSDP1's root unit. llama-recipes wraps each LlamaDecoderLayer (and each LoRA leaf) and leaves embeddings, final
  norm and LM head (262M parameters, 0.49 GiB in bf16) in the root unit, which FSDP1 does not reshard after the
  forward (``_post_forward`` frees only non-root units): gathered through backward. The estimate's one FSDP rule
  follows torchtune and torchtitan, which shard embeddings and output as units of their own (torchtune's 70B configs:
  ``custom_sharded_layers``); keeping the root gathered for every FSDP run moves their published rows the wrong way
  (m006 -6.8% -> +18.8%, m007 -1.8% -> +11.0%, m008 +12.8% -> +30.2%), so it is not applied. With it: 12.84 GiB.
- the published "GB": 14.17 GiB if decimal, 15.22 GiB if binary (llama-recipes' own MemoryTrace prints binary GiB);
  the estimate is 13-19% below it; reserved 19.36 against our 13.58 GiB: the caching allocator's fragmentation
  with eager's 0.5 GiB s x s blocks, which the estimate's fixed 10% reserve does not follow.
- FSDP1's flat-parameter padding and the LoRA leaves as units of their own (a few MB).
"""

from __future__ import annotations

import pytest

from engine.hardware.gpus import find_gpu
from engine.memory.parallel import Strategy, decoder_layer_parameters
from engine.model.build import architecture_from_config
from engine.model.catalog import catalog_model
from engine.plan.fit import check_fit
from engine.scenario.training import Scenario

ARCH = architecture_from_config(catalog_model("meta-llama/Llama-2-7b-hf").config)
RUN = Scenario.build(method="lora", precision="bf16", optimizer="adamw", lora_r=8, lora_alpha=32, lora_dropout=0.05,
                     lora_targets="q_proj,v_proj", micro_batch_size=4, seq_len=2048, gradient_checkpointing=True,
                     attention="eager", transformers_version="4.31")
PUBLISHED_ACTIVE = 15.22
PUBLISHED_RESERVED = 19.36


def _fit():
    return check_fit(ARCH, RUN, find_gpu("A100 40GB"), Strategy.FSDP_FULL_SHARD, 4)


def test_gathered_layers_and_the_root_left_out():
    layer = decoder_layer_parameters(ARCH)
    assert layer == 202_383_360  # 4 x 4096^2 attention + 3 x 4096 x 11008 MLP + 2 norms
    assert _fit().components["gathered_weights"] == pytest.approx(2 * layer * 2)  # two bf16 decoder layers
    root = ARCH.total_parameters - 32 * layer
    assert root == 2 * 32000 * 4096 + 4096  # embeddings, LM head, final norm: the 0.49 GiB FSDP1 keeps gathered
    assert root * 2 / 2**30 == pytest.approx(0.49, abs=0.005)


def test_llama_recipes_fsdp_lora_against_the_published_peak():
    fit = _fit()
    ours = fit.peak_bytes / 2**30
    assert fit.peak_phase == "recompute"
    assert ours == pytest.approx(12.35, abs=0.02)
    assert fit.components["recomputed_layer"] / 2**30 == pytest.approx(6.32, abs=0.01)  # eager s x s + its gradients
    # Read as GB (1e9) or GiB, the published peak is 13-19% above ours (the module docstring says why).
    low, high = PUBLISHED_ACTIVE * 1e9 / 2**30, PUBLISHED_ACTIVE
    assert 0.80 * high < ours < 0.88 * low
