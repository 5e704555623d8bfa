"""The loss implementations' one registry (engine.scenario.loss.LOSSES): every loss has its record, and what the
step time and the Scenario derive from it is the behaviour each record cites."""

from engine.scenario.loss import LOSSES, LossImplementation
from engine.scenario.training import Framework, Scenario


def test_every_loss_has_one_record_with_a_distinct_label():
    assert set(LOSSES) == set(LossImplementation)
    labels = [r.label for r in LOSSES.values()]
    assert len(set(labels)) == len(labels)


def test_on_chip_losses_are_the_two_fused_ones_with_their_source():
    # Liger's fused linear cross-entropy (liger-kernel 0.5) and torchtune's compiled chunk (training.compile_loss,
    # pytorch/torchtune@a6290a5b) keep each chunk on chip; every other loss is eager (2c + 24 bytes per logit).
    on_chip = {k for k, r in LOSSES.items() if r.on_chip}
    assert on_chip == {LossImplementation.LIGER, LossImplementation.TORCHTUNE_CHUNKED_COMPILED}
    assert "liger-kernel" in LOSSES[LossImplementation.LIGER].on_chip
    assert "a6290a5b" in LOSSES[LossImplementation.TORCHTUNE_CHUNKED_COMPILED].on_chip


def test_compiled_form_read_by_scenario_loss():
    # torchtune compiles only its chunked loss (training.compile_loss); transformers' loss runs as it is.
    tt = Scenario(framework=Framework("torchtune"), torch_compile=True)
    assert tt.loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED
    assert Scenario(framework=Framework("torchtune")).loss is LossImplementation.TORCHTUNE_CHUNKED
    assert Scenario(torch_compile=True).loss is LossImplementation.HF
    compiled = {k: r.compiled_form for k, r in LOSSES.items() if r.compiled_form}
    assert compiled == {LossImplementation.TORCHTUNE_CHUNKED: LossImplementation.TORCHTUNE_CHUNKED_COMPILED}
