"""The torchtune importer maps a recipe's ``loss._component_`` to the loss implementation record of the code it runs
(torchtune 0.6.1, pytorch/torchtune@a6290a5b: CEWithChunkedOutputLoss in the recipe configs, torch.nn.CrossEntropyLoss
the other loss its recipes take). It mapped CEWithChunkedOutputLoss to Liger's fused loss before (an approximation
that dropped the 16-bit logit chunks and the log-softmaxes the recipe keeps)."""

from __future__ import annotations

from engine.importers import import_configs
from engine.scenario.loss import LossImplementation
from engine.scenario.training import Scenario

RECIPE = """
model:
  _component_: torchtune.models.llama3_1.lora_llama3_1_8b
  lora_attn_modules: [q_proj, v_proj]
  lora_rank: 8
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /tmp/Meta-Llama-3.1-8B-Instruct/
batch_size: 2
tokenizer:
  _component_: torchtune.models.llama3.llama3_tokenizer
  path: /tmp/Meta-Llama-3.1-8B-Instruct/original/tokenizer.model
  max_seq_len: 2048
loss:
  _component_: {loss}
dtype: bf16
"""


def _imported(loss: str):
    return import_configs([("8B_lora_single_device.yaml", RECIPE.format(loss=loss).encode())])


def test_chunked_loss_maps_to_its_record_not_liger():
    r = _imported("torchtune.modules.loss.CEWithChunkedOutputLoss")
    assert r.fields["loss_implementation"] is LossImplementation.TORCHTUNE_CHUNKED
    assert not r.fields.get("fused_cross_entropy")
    assert Scenario.build(**r.fields).loss is LossImplementation.TORCHTUNE_CHUNKED


def test_cross_entropy_maps_to_torchtune_ce():
    r = _imported("torch.nn.CrossEntropyLoss")
    assert r.fields["loss_implementation"] is LossImplementation.TORCHTUNE_CE


def test_linear_cross_entropy_is_said_unmodelled():
    r = _imported("torchtune.modules.loss.LinearCrossEntropyLoss")
    assert "loss_implementation" not in r.fields
    assert "LinearCrossEntropyLoss" in r.unsupported["loss._component_"]


def test_compile_makes_the_chunked_loss_its_compiled_record():
    """compile: True is Scenario.torch_compile: the recipe's training.compile_loss compiles
    CEWithChunkedOutputLoss.compute_cross_entropy, so the chunked loss, named or left to the framework's default, runs
    as torchtune_chunked_compiled (Scenario.loss, which memory and time read); other losses stay."""
    compiled = "\ncompile: True\n"

    def loss_of(text: str):
        r = import_configs([("r.yaml", text.encode())])
        return r, Scenario.build(**r.fields).loss

    r, loss = loss_of(RECIPE.format(loss="torchtune.modules.loss.CEWithChunkedOutputLoss") + compiled)
    assert r.fields["torch_compile"] is True and r.fields["loss_implementation"] is LossImplementation.TORCHTUNE_CHUNKED
    assert loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED
    assert "compile" in r.unsupported  # the compiled model layers' activations stay counted as eager
    r, loss = loss_of(RECIPE.split("loss:")[0] + "dtype: bf16" + compiled)
    assert "loss_implementation" not in r.fields and loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED
    assert loss_of(RECIPE.format(loss="torch.nn.CrossEntropyLoss") + compiled)[1] is LossImplementation.TORCHTUNE_CE
    r, _ = loss_of(RECIPE.format(loss="torchtune.modules.loss.LinearCrossEntropyLoss") + compiled)
    assert "loss_implementation" not in r.fields and "loss._component_" in r.unsupported
    r, loss = loss_of(RECIPE.format(loss="torchtune.modules.loss.CEWithChunkedOutputLoss") + "\ncompile: False\n")
    assert r.fields["torch_compile"] is False and loss is LossImplementation.TORCHTUNE_CHUNKED
    assert "compile" not in r.unsupported
