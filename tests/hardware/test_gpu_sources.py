"""Citations many GPU rows share: written once in data/gpu_sources.csv, cited by [id] in data/gpus.csv."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from engine.errors import CatalogError
from engine.hardware.gpus import find_gpu, load_gpus
from engine.hardware.sources import REFERENCE, expand_sources, gpu_sources

DATA = Path(__file__).resolve().parents[2] / "data"


def _rows(name: str) -> list[dict[str, str]]:
    with (DATA / name).open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_reference_is_defined_and_every_source_is_cited():
    cited = Counter(m.group(1) for row in _rows("gpus.csv") for v in row.values() if (m := REFERENCE.match(v or "")))
    assert set(cited) == set(gpu_sources()), "an id nobody cites, or a citation of an undefined id"


def test_no_long_citation_is_repeated_across_rows():
    # the point of the table: a citation (the shared ones are 150-230 characters) is written once, not on every row;
    # shorter per-row facts such as the GeForce peer-to-peer note may repeat
    cells = Counter(v for row in _rows("gpus.csv") for k, v in row.items() if k != "datasheet_url" and len(v or "") >= 150)
    assert [c for c, n in cells.items() if n > 1] == []


def test_loaded_rows_carry_the_full_citation():
    t4, h100 = find_gpu("T4"), find_gpu("H100 SXM")
    assert t4.rates_source == ("compute capability: NVIDIA CUDA GPUs list https://developer.nvidia.com/cuda-gpus; "
                               "sm_count: the datasheet; link per direction: stas00/ml-engineering@744d01e1 "
                               "network/README.md NVLink and PCIe tables (datasheet duplex figure halved)")
    assert h100.matmul_source.startswith("measured maximum achievable matmul (MAMF): stas00/ml-engineering@744d01e1 "
                                         "compute/accelerator/README.md 'Maximum Achievable Matmul FLOPS comparison "
                                         "table' row 'NVIDIA H100 SXM'")
    assert not any("[" in g.rates_source[:1] or g.matmul_source.startswith("[") for g in load_gpus())


def test_an_undefined_reference_names_the_row():
    with pytest.raises(CatalogError, match=r"gpus.csv row 7 \('NVIDIA X'\): rates_source cites \[nope\]"):
        expand_sources([(7, {"name": "NVIDIA X", "rates_source": "[nope]; more"})], "gpus.csv")
    assert expand_sources([(2, {"name": "x", "notes": "see [a] later"})], "f", {"a": "A"}) == [
        (2, {"name": "x", "notes": "see [a] later"})]  # only a reference at the start of a cell is expanded
