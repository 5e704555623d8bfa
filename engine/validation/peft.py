"""The PEFT methods' estimates against published measurements (data/peft_measured_memory.csv), for the Methodology
page and the tests: one record per row with the measured and estimated peak reserved memory and the error."""

from __future__ import annotations

from engine.memory.estimate import estimate_memory
from engine.model.build import architecture_or_approximation
from engine.model.catalog import catalog_model
from engine.validation.measurements import PEFT_MEASURED_MEMORY_FILE, load_measured_memory
from engine.validation.memory import row_scenario


def peft_measured_records() -> list[dict[str, object]]:
    """Rows of ``peft_measured_memory.csv`` beside our ``max_memory_reserved()`` estimate (GiB, error in %)."""
    out = []
    for m in load_measured_memory(PEFT_MEASURED_MEMORY_FILE):
        arch = architecture_or_approximation(catalog_model(m.catalog_model).config)[0]
        sc = row_scenario(m)
        est = estimate_memory(arch, sc).peak_reserved_bytes
        out.append({"id": m.id, "method": m.method, "optimizer": m.optimizer, "model": m.model_id,
                    "measured GiB": m.measured_value, "ours GiB": round(est / 2**30, 2),
                    "error %": round(100 * (est - m.measured_bytes) / m.measured_bytes, 1), "source": m.source_locator})
    return out
