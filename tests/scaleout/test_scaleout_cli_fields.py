"""The scale-out CLI's top-level fields are the most loaded rank's, and FP8 is refused where a GPU has none.

Found by a fresh-user review: `estimate --tensor-parallel 2 --pipeline-parallel 2 --gpu H100` printed the one-GPU
peak (about 122 GiB for Llama-3.1-8B) at the top level beside `fits: true`, and `--precision fp8` on an A100 ran at
the bf16 rate without a word.
"""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.errors import ScenarioError
from engine.hardware.gpus import find_gpu
from engine.scaleout.fp8 import Fp8Recipe, check_fp8_gpu

BASE = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--offline", "--tensor-parallel", "2", "--pipeline-parallel", "2",
        "--num-nodes", "1"]


def run(capsys, *extra: str) -> tuple[int, dict | None, str]:
    code = main([*BASE, *extra])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def test_top_level_memory_is_the_most_loaded_rank(capsys):
    code, out, _ = run(capsys, "--gpu", "H100 SXM")
    assert code == 0
    assert out["peak_allocated_bytes"] == out["max_rank_peak_allocated_bytes"]
    worst = max(out["per_rank"], key=lambda r: r["peak_allocated_bytes"])
    assert out["device_used_bytes"] == worst["device_used_bytes"]
    assert out["single_gpu_total_bytes"] > 3 * out["peak_allocated_bytes"]  # TP2 x PP2 splits the one-GPU run
    assert out["fits"] is (worst["device_used_bytes"] <= out["gpu"]["usable_memory_bytes"])
    assert out["verdict"] in ("fits", "tight", "does_not_fit")


def test_a_large_pipeline_bubble_is_said(capsys):
    # PP 2 with the default global batch: one micro batch per step, bubble (2 - 1) / (1 + 2 - 1) = 50%.
    code, out, _ = run(capsys, "--gpu", "H100 SXM")
    assert code == 0 and out["bubble_fraction"] == pytest.approx(0.5)
    assert any("pipeline bubble is 50%" in w for w in out["warnings"])


@pytest.mark.parametrize("gpu", ["A100 80GB", "V100 32GB"])
def test_fp8_on_a_gpu_without_fp8_exits_2(capsys, gpu):
    code, _, err = run(capsys, "--gpu", gpu, "--precision", "fp8")
    assert code == 2 and err.count("\n") == 1 and "has no FP8 tensor cores" in err


def test_fp8_check_names_the_gpu_and_passes_hopper():
    with pytest.raises(ScenarioError, match="NVIDIA A100 80GB has no FP8"):
        check_fp8_gpu(Fp8Recipe.TE, find_gpu("A100 80GB"))
    check_fp8_gpu(Fp8Recipe.TE, find_gpu("H100 SXM"))  # Hopper has FP8
    check_fp8_gpu(None, find_gpu("V100 32GB"))  # no FP8 asked: nothing to check
