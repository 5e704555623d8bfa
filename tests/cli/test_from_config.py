"""``python -m engine estimate --from-config FILE [FILE ...]`` as a subprocess: precedence (files in order, then the
flags the user typed, never argparse's defaults), the model named by the file (bundled catalog with --offline), the
files' GPUs and strategy with --gpu, and bad input as exit status 2 with one line on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "training_configs"


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, env=os.environ.copy(), capture_output=True,
                          text=True, timeout=60)


def estimate(*args: str) -> dict:
    proc = run_cli("estimate", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_file_names_the_model_and_sets_the_scenario():
    out = estimate("--from-config", str(FIXTURES / "sft_config_trl015.yaml"), "--offline")
    assert out["source"] == {"kind": "catalog", "name": "Llama 3.2 1B", "repo_id": "meta-llama/Llama-3.2-1B"}
    s = out["scenario"]
    assert (s["micro_batch_size"], s["seq_len"], s["gradient_accumulation_steps"], s["precision"], s["optimizer"]) == \
        (8, 2048, 2, "bf16", "adamw_8bit")
    imp = out["import"]
    assert imp["files"] == [{"file": "sft_config_trl015.yaml", "format": "TRL SFTConfig", "version": "trl 0.15.2 - 1.16.0"}]
    assert imp["mapped"]["max_seq_length"] == 2048 and "learning_rate" in imp["ignored"]
    assert imp["unsupported"] == {}


def test_typed_flags_override_the_file_and_defaults_do_not(tmp_path):
    cfg = write(tmp_path, "ax.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 8\nsequence_len: 1024\n")
    out = estimate("--from-config", cfg, "--offline", "--micro-batch-size", "1")  # 1 is also argparse's default
    assert out["scenario"]["micro_batch_size"] == 1 and out["scenario"]["seq_len"] == 1024  # 1024, not the default 2048
    assert out["import"]["overridden_by_flags"] == ["micro_batch_size"]


def test_later_files_override_earlier_ones(tmp_path):
    a = write(tmp_path, "a.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 8\nsequence_len: 1024\n")
    b = write(tmp_path, "b.yaml", "base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 2\n")
    out = estimate("--from-config", a, b, "--offline")
    assert (out["scenario"]["micro_batch_size"], out["scenario"]["seq_len"]) == (2, 1024)


def test_the_files_gpus_and_strategy_apply_with_gpu():
    args = ("--from-config", str(FIXTURES / "sft_config_trl015.yaml"), str(FIXTURES / "accelerate_fsdp.yaml"), "--offline")
    out = estimate(*args, "--gpu", "A100 80GB")
    assert (out["strategy"], out["num_gpus"], out["offload"], out["gpus_per_node"]) == ("fsdp_full_shard", 8, "optimizer_and_params", 8)
    # TRL's gradient_checkpointing: false, but FSDP checkpoints every layer (fsdp_activation_checkpointing: true).
    assert out["scenario"]["gradient_checkpointing"] is True
    assert out["import"]["applied"] == ["strategy", "offload", "num_gpus", "gpus_per_node"]
    assert estimate(*args, "--gpu", "A100 80GB", "--num-gpus", "2")["num_gpus"] == 2  # a typed flag wins
    assert "apply with --gpu" in " ".join(estimate(*args)["import"]["notes"])  # without --gpu: echoed only


def test_files_of_different_formats_that_disagree_exit_2(tmp_path):
    ds = write(tmp_path, "ds.json", '{"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}')
    proc = run_cli("estimate", "--from-config", str(FIXTURES / "sft_config_trl015.yaml"), ds, "--offline")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("error: sft_config_trl015.yaml: per_device_train_batch_size and ds.json: "
                           "train_micro_batch_size_per_gpu disagree (8 vs 1); make the files agree, or drop one\n")


@pytest.mark.parametrize(("text", "needle"), [
    ("model: [unclosed\n", "is not valid YAML (line"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n", "expands to more than 50,000 values"),
    ("base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: two\n", "micro_batch_size: must be an integer >= 1 (got 'two')"),
    ("base_model: acme/unknown-model\nmicro_batch_size: 1\n", "'acme/unknown-model' is not in the bundled catalog"),
    ("base_model: meta-llama/Llama-3.2-1B\nmicro_batch_size: 1\nbf16: true\nfp16: true\n", "bf16 and fp16 are both true"),
    ('{"zero_optimization": {"stage": 3}}', "the config files name no model: give --model REPO_ID or --config PATH"),
    ("base_model: meta-llama/Llama-3.2-1B\nsequence_len: 10000000\n", "seq_len: Input should be less than or equal to 2097152"),
], ids=["not_yaml", "yaml_bomb", "wrong_type", "unknown_model", "conflicting_keys", "no_model", "absurd_value"])
def test_bad_files_exit_2_with_one_line(tmp_path, text, needle):
    proc = run_cli("estimate", "--from-config", write(tmp_path, "train.yaml", text), "--offline")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr and "Traceback" not in proc.stderr


def test_no_model_and_no_file_is_a_one_line_error():
    proc = run_cli("estimate")
    assert proc.returncode == 2
    assert proc.stderr == "error: give --model REPO_ID, --config PATH, or --from-config FILE naming the model\n"
