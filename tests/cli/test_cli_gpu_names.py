"""``--gpu`` with a family name ("A100", "H100", "V100", "A100 PCIe"), run as a subprocess: the name reads as the
catalog's GPU for it (the GPU whose alias it is in data/gpus.csv), the run goes on (exit 0), and the choice is said
as one ``warning:`` line on stderr and in the JSON's top-level ``warnings``. Every number equals the run that names
that GPU in full. A name of several GPUs that is nobody's alias ("A100 SXM") exits 2 (tests/cli/test_cli.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference import config_path, require_reference

require_reference()
ROOT = Path(__file__).resolve().parents[2]
LLAMA_1B = "meta-llama/Llama-3.2-1B"
A100_NOTE = ("'A100' read as NVIDIA A100 80GB (the catalog's GPU for that name); it also fits NVIDIA A100 40GB, "
             "NVIDIA A100 40GB PCIe, NVIDIA A100 80GB PCIe: give the full name for another")
H100_NOTE = ("'H100' read as NVIDIA H100 80GB (the catalog's GPU for that name); it also fits NVIDIA H100 80GB PCIe, "
             "NVIDIA H100 NVL: give the full name for another")
A100_PCIE_NOTE = ("'A100 PCIe' read as NVIDIA A100 80GB PCIe (the catalog's GPU for that name); it also fits "
                  "NVIDIA A100 40GB PCIe: give the full name for another")
V100_NOTE = ("'V100' read as NVIDIA V100 16GB (the catalog's GPU for that name); it also fits NVIDIA V100 32GB: give "
             "the full name for another")


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=os.environ.copy(), capture_output=True,
                          text=True, timeout=120)


def estimate(gpu: str, *args: str) -> tuple[dict, list[str]]:
    proc = run_cli("estimate", "--config", str(config_path(LLAMA_1B)), "--gpu", gpu, *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr.splitlines()


@pytest.mark.parametrize(
    ("case", "short", "full", "note", "args"),
    [
        ("time_and_cost", "A100", "NVIDIA A100 80GB", A100_NOTE, ("--method", "lora", "--dataset-tokens", "1000000")),
        ("scale_out", "H100", "NVIDIA H100 80GB", H100_NOTE, ("--tensor-parallel", "2")),
        ("serving", "A100 PCIe", "NVIDIA A100 80GB PCIe", A100_PCIE_NOTE, ("--method", "inference")),
        ("many_gpus", "V100", "NVIDIA V100 16GB", V100_NOTE, ("--method", "lora", "--num-gpus", "2", "--strategy", "zero3")),
    ],
)
def test_a_family_name_reads_as_the_catalogs_gpu_with_a_warning(case, short, full, note, args):
    out, stderr = estimate(short, *args)
    assert [line for line in stderr if line.startswith("warning:")] == [f"warning: {note}"]
    assert out["gpu"]["name"] == full
    assert out["warnings"].count(note) == 1
    # The same run naming the GPU in full: no warning, and every other field (fit, bytes, time, cost) the same.
    named, named_stderr = estimate(full, *args)
    assert not [line for line in named_stderr if line.startswith("warning:")]
    assert note not in named["warnings"]
    out["warnings"].remove(note)
    assert out == named


def test_plan_says_how_the_gpu_name_was_read_and_writes_the_catalog_name():
    proc = run_cli("plan", "--config", str(config_path(LLAMA_1B)), "--method", "lora", "--gpu", "A100",
                   "--dataset-tokens", "1000000")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [f"warning: {A100_NOTE}"]
    header, row = proc.stdout.splitlines()[:2]
    assert dict(zip(header.split(","), row.split(",")))["gpu"] == "NVIDIA A100 80GB"


def test_the_gpu_help_says_the_rule():
    help_text = " ".join(run_cli("estimate", "--help").stdout.split())
    assert ("a family name such as 'A100' reads as the catalog's GPU for it, the A100 80GB, with a warning naming the "
            "others; one that is no GPU's alias, such as 'A100 SXM', is refused with them") in help_text
