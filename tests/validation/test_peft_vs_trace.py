"""The PEFT methods (issue 18) against their fake-tensor traces: every method on two architectures, the trainable
parameter count exact and the peak within 3% (data/traced_scenarios.csv, ``scripts/trace_table.py --design peft``:
PEFT 0.21.2, galore-torch 1.0, transformers 5.24, torch 2.13 on Llama-3.2-1B and Qwen2.5-0.5B)."""

import csv
from collections import defaultdict
from pathlib import Path

import pytest

from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_or_approximation
from engine.model.catalog import catalog_model
from engine.scenario.peft import trainable_parameter_count
from tests.validation.test_traced_table import scenario_of

TABLE = Path(__file__).resolve().parents[2] / "data" / "traced_scenarios.csv"
NEW_METHODS = {"dora", "ia3", "vera", "loha", "lokr", "adalora", "prompt_tuning", "prefix_tuning", "p_tuning"}


def _peft_rows():
    with TABLE.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if r["method"] in NEW_METHODS or r["modules_to_save"]
            or r["optimizer"] in ("galore_adamw", "lora_fa")]


ROWS = _peft_rows()


def _label(row):
    return f"{row['model']}-{row['method']}-{row['optimizer']}-{row['precision']}-gc{row['gradient_checkpointing']}-{row['modules_to_save']}"


def test_every_method_and_trick_is_traced_on_two_architectures():
    seen = defaultdict(set)
    for r in ROWS:
        key = r["method"] if r["method"] in NEW_METHODS else (r["optimizer"] if r["optimizer"] != "adamw_fused"
                                                                else "modules_to_save:" + r["modules_to_save"])
        seen[key].add(r["model"])
    expected = NEW_METHODS | {"galore_adamw", "lora_fa", "modules_to_save:lm_head", "modules_to_save:embed_tokens"}
    assert set(seen) == expected
    assert all(len(models) >= 2 for models in seen.values()), dict(seen)


@pytest.mark.parametrize("row", ROWS, ids=_label)
def test_trainable_parameters_exact_and_peak_within_3_percent(row):
    sc = scenario_of(row)
    arch = architecture_or_approximation(catalog_model(row["config_source"].split(":", 1)[1]).config)[0]
    assert trainable_parameter_count(arch, sc) == int(row["trainable_parameters"])
    est = estimate_memory(arch, sc)
    assert est.trainable_parameters == int(row["trainable_parameters"])
    peak = int(row["peak_allocated_bytes"])
    assert abs(est.total_bytes - peak) / peak < 0.03, (est.total_bytes, peak)
