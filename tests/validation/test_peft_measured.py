"""The PEFT methods against published measurements (data/peft_measured_memory.csv): PEFT's own method comparison
(huggingface/peft method_comparison/MetaMathQA, Llama-3.2-3B, bf16, batch 4, up to 768 tokens, one L40S), the peak of
``torch.cuda.max_memory_reserved()`` over each run. Held to issue 5's targets for measured rows (each within 25%, median
within 10%); the runs also evaluate with generation in the same process, so the estimate is not expected to be exact."""

import statistics

from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_or_approximation
from engine.model.catalog import catalog_model
from engine.validation.measurements import PEFT_MEASURED_MEMORY_FILE, load_measured_memory
from engine.validation.memory import row_scenario


def _errors():
    out = {}
    for m in load_measured_memory(PEFT_MEASURED_MEMORY_FILE):
        arch = architecture_or_approximation(catalog_model(m.catalog_model).config)[0]
        est = estimate_memory(arch, row_scenario(m))
        out[m.id] = (m.method, m.optimizer, 100 * (est.peak_reserved_bytes - m.measured_bytes) / m.measured_bytes)
    return out


def test_rows_have_sources_and_cover_the_methods():
    rows = load_measured_memory(PEFT_MEASURED_MEMORY_FILE)
    assert {m.method for m in rows} >= {"lora", "dora", "ia3", "vera", "loha", "adalora", "prompt_tuning",
                                        "prefix_tuning", "p_tuning", "full"}
    assert any(m.optimizer == "lora_fa" for m in rows) and any(m.use_rslora for m in rows)
    assert all(m.source and m.source_locator and m.memory_kind == "reserved" and m.unit == "GiB" for m in rows)


def test_estimates_within_issue_5_targets():
    errors = _errors()
    assert all(abs(e) <= 25.0 for _, _, e in errors.values()), errors
    assert statistics.median(abs(e) for _, _, e in errors.values()) <= 10.0, errors


def test_the_published_ordering_holds():
    # Published: DoRA above LoRA (its weight-norm work), LoRA-FA below LoRA (no lora_A gradients or states).
    e = {(m, o): err for m, o, err in _errors().values()}
    rows = {(m.method, m.optimizer): m for m in load_measured_memory(PEFT_MEASURED_MEMORY_FILE)}
    assert rows[("dora", "adamw")].measured_value > rows[("lora", "adamw")].measured_value
    assert rows[("lora", "lora_fa")].measured_value < rows[("lora", "adamw")].measured_value
    assert e  # computed for every row
