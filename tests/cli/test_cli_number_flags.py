"""Every numeric flag of ``estimate`` / ``plan`` against nan, inf, zero, negatives and huge values, and options that
a command never reads (issue 25: one line and exit 2, never a traceback, an ``Infinity`` in the JSON or a value
ignored without a word).

Found by running each flag of ``estimate --help`` with 0, -1, nan, inf, -inf, 1e30, 2.5, 1e-30, a 5,000-digit number
and '' (the rows below are those that were a traceback, a non-JSON ``Infinity`` or silently unused before).
``main`` runs in this process (argparse's exit is a SystemExit): the same code path as ``python -m engine``.
"""

from __future__ import annotations

import json
import math

import pytest

from engine.cli import main

LLAMA_1B = ("--model", "meta-llama/Llama-3.2-1B", "--offline")
TIME = ("--gpu", "A100 80GB", "--dataset-tokens", "1000000")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's errors
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def refused(capsys, *argv: str) -> str:
    rc, out, err = run(capsys, *argv)
    lines = err.strip().splitlines()
    assert rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("error: "), (rc, out[:300], err[-600:])
    return lines[0]


@pytest.mark.parametrize("flag", ["--lora-alpha", "--lora-dropout", "--loraplus-lr-ratio", "--epochs",
                                  "--measured-tokens-per-second", "--moe-capacity-factor", "--inter-node-gbits"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_a_float_flag_refuses_nan_and_infinity(capsys, flag, value):
    # Before: --inter-node-gbits nan was a pydantic traceback; --moe-capacity-factor inf printed "Infinity" (not
    # JSON); nan passed every range check it met.
    line = refused(capsys, "estimate", *LLAMA_1B, *TIME, f"{flag}={value}")
    assert flag in line and "finite" in line, line


def test_a_huge_float_is_cut_in_the_message(capsys):
    line = refused(capsys, "estimate", *LLAMA_1B, "--lora-alpha", "9" * 5000)
    assert "5,000 characters" in line and len(line) < 200


@pytest.mark.parametrize("flag, value", [("--inter-node-gbits", "0"), ("--inter-node-gbits", "-1"),
                                         ("--moe-capacity-factor", "0"), ("--gpus-per-node", "0"),
                                         ("--gpus-per-node", "-1")])
def test_zero_is_refused_not_read_as_the_default(capsys, flag, value):
    # Before: `args.x or default` read --inter-node-gbits 0 and --gpus-per-node 0 as their defaults (200 Gb/s, 8).
    line = refused(capsys, "estimate", *LLAMA_1B, *TIME, "--num-gpus", "16", f"{flag}={value}")
    assert flag in line


@pytest.mark.parametrize("args, needle", [
    (("--method", "inference", "--micro-batch-size", "0"), "--micro-batch-size is a training option"),
    (("--method", "inference", "--lora-r", "-1", "--optimizer", "sgd"), "--lora-r, --optimizer are training options"),
    (("--method", "inference", "--gpu", "A100 80GB", "--gpus-per-node", "4"), "--gpus-per-node is a training option"),
    (("--inter-node-gbits", "100", "--tensor-parallel", "2"), "--inter-node-gbits sets the step time's network: it needs --gpu"),
    (("--recompute-layers", "4"), "--recompute-layers counts the layers of full recompute: it needs --recompute full"),
    (("--moe-capacity-factor", "1.25"), "--moe-capacity-factor: this llama model has no experts"),
])
def test_an_option_the_command_would_not_read_is_refused(capsys, args, needle):
    # Before: each was accepted and ignored (a serving estimate of micro batch 0, a network speed never used).
    assert needle in refused(capsys, "estimate", *LLAMA_1B, *args)


def test_the_options_still_work_where_they_apply(capsys):
    rc, out, _ = run(capsys, "estimate", *LLAMA_1B, "--gpu", "A100 80GB", "--tensor-parallel", "2",
                     "--inter-node-gbits", "100", "--recompute", "full", "--recompute-layers", "4")
    assert rc == 0 and json.loads(out)["layout"]["recompute_layers"] == 4
    rc, out, _ = run(capsys, "estimate", *LLAMA_1B, "--method", "inference", "--seq-len", "4096", "--concurrency", "2")
    assert rc == 0 and json.loads(out)["scenario"]["seq_len"] == 4096


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


@pytest.mark.parametrize("flag", ["--epochs", "--measured-tokens-per-second", "--inter-node-gbits"])
def test_a_large_finite_value_gives_json_without_infinity(capsys, flag):
    rc, out, err = run(capsys, "estimate", *LLAMA_1B, *TIME, "--num-gpus", "2", "--tensor-parallel", "2", flag, "1e30")
    if rc == 0:
        assert "Infinity" not in out and "NaN" not in out and _finite(json.loads(out)), out[:500]
    else:
        assert rc == 2 and len(err.strip().splitlines()) == 1, err[-500:]


@pytest.mark.parametrize("name, needle", [("", "--name: String should have at least 1 character"),
                                          ("   ", "--name: must hold a visible character"),
                                          ("a\u202eb", "--name: holds an invisible formatting character (U+202E")])
def test_a_plan_name_that_cannot_name_a_plan_is_refused_by_its_flag(capsys, name, needle):
    # Before: --name '' silently became the default name, and a right-to-left override was written into the CSV.
    assert needle in refused(capsys, "plan", *LLAMA_1B, *TIME, "--name", name)


def test_gpus_per_node_with_a_time_estimate_is_refused_not_ignored(capsys):
    # Before: 2 GPUs on nodes of 1 gave the same tokens/s as on one node (NVLink), without a word; the step time's ring
    # (engine.time.step) puts up to 8 GPUs on a node. A layout's cluster does read it (InfiniBand between 2 nodes).
    args = ("--gpu", "A100 80GB", "--num-gpus", "2", "--dataset-tokens", "1000000", "--gpus-per-node", "1")
    assert "--gpus-per-node (1): time and cost put up to 8 GPUs on a node" in refused(capsys, "estimate", *LLAMA_1B, *args)
    rc, out, _ = run(capsys, "estimate", *LLAMA_1B, *args, "--tensor-parallel", "1")
    assert rc == 0 and {c["link_name"] for c in json.loads(out)["collectives"]} == {"InfiniBand between 2 nodes"}


def test_an_empty_price_source_is_refused_not_read_as_cheapest(capsys):
    # Before: `args.price_source or CHEAPEST_LISTED` priced --price-source '' at the cheapest source without a word.
    assert "unknown price source ''" in refused(capsys, "estimate", *LLAMA_1B, *TIME, "--price-source", "")


@pytest.mark.parametrize("name, needle", [("", "--name: must hold a visible character"),
                                          ("a\u202eb", "--name: holds an invisible formatting character"),
                                          ("two\nlines", "--name: holds a control character")])
def test_a_layout_plan_name_follows_the_plan_name_rules(capsys, name, needle):
    # Before: the layout plan row took any name (a right-to-left override, a line break splitting the CSV row).
    assert needle in refused(capsys, "plan", *LLAMA_1B, *TIME, "--tensor-parallel", "1", "--num-gpus", "2", "--name", name)


@pytest.mark.parametrize("verb, args, needle", [
    ("estimate", ("--num-gpus", "1025"), "--num-gpus: must be between 1 and 1,024"),
    ("plan", ("--num-gpus", "2000"), "--num-gpus: Input should be less than or equal to 1024"),
    ("estimate", ("--num-gpus", "9" * 30), "argument --num-gpus: must be at most 1,048,576"),
    ("estimate", ("--dataset-tokens", "0"), "--dataset-tokens: Input should be greater than or equal to 1"),
    ("estimate", ("--dataset-tokens", "100", "--epochs", "1e15"), "--epochs: Input should be less than or equal to 10000"),
    ("estimate", ("--dataset-tokens", "100", "--runs", "0"), "--runs: Input should be greater than or equal to 1"),
])
def test_an_out_of_range_count_is_said_by_its_flag(capsys, verb, args, needle):
    # Before: "num_gpus: ...", "total_tokens: ...", "epochs: ...": the engine's field names, not the flags typed.
    base = ("--gpu", "A100 80GB") + (() if "--dataset-tokens" in args else ("--dataset-tokens", "1000000"))
    assert needle in refused(capsys, verb, *LLAMA_1B, *base, *args)


def test_a_layout_still_takes_thousands_of_gpus(capsys):
    rc, out, _ = run(capsys, "estimate", *LLAMA_1B, "--gpu", "A100 80GB", "--num-gpus", "2048", "--tensor-parallel", "8")
    assert rc == 0 and json.loads(out)["layout"]["world_size"] == 2048


TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


@pytest.mark.parametrize("flag", ["--lora-targets", "--modules-to-save"])
def test_a_token_as_a_module_name_is_refused_not_exported(capsys, flag):
    # Before: plan --lora-targets hf_... (method full: the targets unused) wrote the token into the CSV's lora_targets.
    line = refused(capsys, "plan", *LLAMA_1B, *TIME, flag, f"q_proj,{TOKEN}")
    assert "looks like a Hugging Face token" in line and "AbCdEfGh" not in line


@pytest.mark.parametrize("args, needle", [
    # Before: each was accepted and unused: a LoRA on a 16-bit base for "--quant-type int8", a full fine-tuning for
    # "--lora-r 8", 20 virtual tokens of nothing.
    (("--method", "lora", "--quant-type", "int8"), "--quant-type does not apply to --method lora"),
    (("--lora-r", "8", "--lora-targets", "q_proj"), "--lora-r, --lora-targets do not apply to --method full"),
    (("--method", "ia3", "--lora-r", "8"), "--lora-r does not apply to --method ia3"),
    (("--method", "prompt_tuning", "--lora-targets", "q_proj"), "--lora-targets does not apply to --method prompt_tuning"),
    (("--method", "lora", "--num-virtual-tokens", "5"), "--num-virtual-tokens does not apply to --method lora"),
    (("--method", "lora", "--galore-rank", "8"), "--galore-rank does not apply to --optimizer adamw_fused"),
    (("--method", "lora", "--no-prepare-kbit"), "--no-prepare-kbit does not apply to --method lora"),
])
def test_an_option_the_method_never_reads_is_refused(capsys, args, needle):
    assert needle in refused(capsys, "estimate", *LLAMA_1B, *args)


@pytest.mark.parametrize("args", [("--method", "qlora", "--quant-type", "int8", "--no-prepare-kbit"),
                                  ("--optimizer", "galore_adamw", "--galore-rank", "64"),
                                  ("--method", "dora", "--lora-r", "8", "--use-rslora"),
                                  ("--method", "prefix_tuning", "--num-virtual-tokens", "8")])
def test_options_the_method_reads_are_taken(capsys, args):
    rc, out, err = run(capsys, "estimate", *LLAMA_1B, *args)
    assert rc == 0, err


def test_an_imported_node_size_is_checked_the_same_way(capsys, tmp_path):
    # accelerate: 16 processes on 2 machines are nodes of 8, what the time model puts on a node; 4 on 4 are not.
    eight = tmp_path / "acc8.yaml"
    eight.write_text("distributed_type: MULTI_GPU\nnum_processes: 16\nnum_machines: 2\n")
    rc, out, err = run(capsys, "estimate", *LLAMA_1B, "--from-config", str(eight), *TIME)
    assert rc == 0 and json.loads(out)["hours"] > 0, err
    one = tmp_path / "acc1.yaml"
    one.write_text("distributed_type: MULTI_GPU\nnum_processes: 4\nnum_machines: 4\n")
    assert "the imported files' GPUs per node (1)" in refused(capsys, "estimate", *LLAMA_1B, "--from-config", str(one), *TIME)
    rc, _, err = run(capsys, "estimate", *LLAMA_1B, *TIME, "--num-gpus", "4", "--gpus-per-node", "8")
    assert rc == 0, err  # 4 GPUs of a node of 8: one node, as the time model has it
