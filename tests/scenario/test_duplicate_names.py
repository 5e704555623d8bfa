"""A module named twice (``--modules-to-save embed_tokens,embed_tokens``, a config's list with a repeat) is one module,
as PEFT reads it: ``LoraConfig`` turns ``target_modules`` into a set, and ``modules_to_save`` wraps each module whose
name ends with one of the names once (peft ``tuners_utils`` / ``other.ModulesToSaveWrapper``). Before, a repeated
``modules_to_save`` name counted the embedding's trainable copy twice: Llama 3.2 1B LoRA 528.7M trainable parameters
instead of 266.1M (issue 25: no silent wrong number)."""

from __future__ import annotations

from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_from_config
from engine.model.sources import config_from_catalog
from engine.scenario.training import Scenario

LLAMA_1B = architecture_from_config(config_from_catalog("meta-llama/Llama-3.2-1B")[0])


def test_a_repeated_module_to_save_is_counted_once():
    once = estimate_memory(LLAMA_1B, Scenario.build(method="lora", modules_to_save="embed_tokens"))
    twice = estimate_memory(LLAMA_1B, Scenario.build(method="lora", modules_to_save="embed_tokens,embed_tokens"))
    assert twice.trainable_parameters == once.trainable_parameters
    # The trainable copy of embed_tokens is the embedding itself: vocab 128,256 x hidden 2,048 (Llama 3.2 1B's config).
    assert once.trainable_parameters - estimate_memory(LLAMA_1B, Scenario.build(method="lora")).trainable_parameters \
        == 128_256 * 2_048


def test_repeated_lora_targets_are_one_target_and_the_order_is_kept():
    sc = Scenario.build(method="lora", lora_targets="v_proj,q_proj,v_proj")
    assert sc.lora_targets == ("v_proj", "q_proj")
