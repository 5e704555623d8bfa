"""Regenerate data/traced_scenarios.csv: fake-tensor traces of training steps, the ground truth
the analytical engine is checked against (issue #5).

Each row is one scenario traced by :mod:`engine.trace` (peak of the steady-state second step, the first
step's peak, per-phase peaks, the live bytes by category at the peak, the attention kernel, versions).
Design: for each of four models (GPT-2, Llama-3.2-1B, Qwen2.5-0.5B, Mistral-7B) a base scenario (full
fine-tuning, fused AdamW, SDPA, b=1 s=512) varied so that every factor is covered on every model
(precision x checkpointing x shape for full FT, LoRA, eager attention, other optimizers, gradient
accumulation): 33 rows per model, not a full factorial.

Usage: ``python scripts/trace_table.py [--out PATH] [--models gpt2,llama] [--jobs 2] [--limit N]``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.model.catalog import catalog_model  # noqa: E402
from engine.scenario.training import Scenario  # noqa: E402
from engine.trace import _request, check_traceable, worker_command  # noqa: E402
from engine.trace.result import CATEGORIES, PHASES  # noqa: E402

MODELS = {
    "gpt2": "openai-community/gpt2",
    "llama": "meta-llama/Llama-3.2-1B",
    "qwen": "Qwen/Qwen2.5-0.5B",
    "mistral": "mistralai/Mistral-7B-v0.1",
}
"""Short name -> catalog repo id (data/models/*.json)."""

SHAPES = {"A": (1, 512), "B": (4, 1024)}
SCENARIO_FIELDS = list(Scenario.model_fields)
COLUMNS = (
    ["model", "config_source"] + SCENARIO_FIELDS
    + ["peak_allocated_bytes", "first_step_peak_bytes", "peak_phase"]
    + [f"{p}_peak_bytes" for p in PHASES]
    + [f"{c}_bytes" for c in CATEGORIES]
    + ["attention_kernel", "total_parameters", "trainable_parameters", "trace_seconds",
       "torch_version", "transformers_version", "peft_version"]
)


def design() -> list[dict[str, Any]]:
    """Scenario fields of the rows of one model (33 rows)."""
    rows: list[dict[str, Any]] = []

    def add(**kw: Any) -> None:
        shape = kw.pop("shape", "A")
        b, s = SHAPES[shape]
        base = dict(method="full", precision="amp_bf16", optimizer="adamw_fused", attention="sdpa",
                    gradient_checkpointing=False, micro_batch_size=b, seq_len=s)
        base.update(kw)
        rows.append(base)

    for precision in ("fp32", "amp_bf16", "bf16"):  # full FT: precision x checkpointing x shape (12)
        for gc in (False, True):
            for shape in ("A", "B"):
                add(precision=precision, gradient_checkpointing=gc, shape=shape)
    for precision in ("fp32", "amp_bf16", "bf16"):  # LoRA (attention projections, r=16) (8)
        for gc in (False, True):
            add(method="lora", precision=precision, gradient_checkpointing=gc)
    add(method="lora", precision="amp_bf16", gradient_checkpointing=True, shape="B")
    add(method="lora", precision="bf16", shape="B", lora_targets="all-linear")
    for precision in ("fp32", "amp_bf16", "bf16"):  # eager attention (5)
        add(precision=precision, attention="eager")
    add(precision="amp_bf16", attention="eager", gradient_checkpointing=True, shape="B")
    add(method="lora", precision="bf16", attention="eager")
    for precision in ("fp32", "amp_bf16", "bf16"):  # torch foreach AdamW (3)
        add(precision=precision, optimizer="adamw")
    for precision in ("amp_bf16", "bf16"):  # Adafactor, SGD (4)
        add(precision=precision, optimizer="adafactor")
        add(precision=precision, optimizer="sgd")
    add(precision="amp_bf16", gradient_accumulation_steps=4)  # gradient accumulation (1)
    return rows


PEFT_MODELS = ("llama", "qwen")
"""The PEFT methods' rows (issue 18) are traced on two Llama-style architectures: Llama-3.2-1B (no biases) and
Qwen2.5-0.5B (q/k/v biases, a 151,936-token vocabulary)."""


def peft_design() -> list[dict[str, Any]]:
    """Scenario fields of the PEFT-method rows of one model: every method in pure bf16 without checkpointing and in
    mixed bf16 with checkpointing (b=1, s=512, adapters on the attention projections unless said), 26 rows."""
    rows: list[dict[str, Any]] = []
    variants = [dict(method=m) for m in ("dora", "ia3", "vera", "loha", "lokr", "adalora", "prompt_tuning",
                                         "prefix_tuning", "p_tuning")]
    variants += [dict(method="lora", modules_to_save="lm_head"), dict(method="lora", modules_to_save="embed_tokens"),
                 dict(method="lora", optimizer="lora_fa"), dict(method="full", optimizer="galore_adamw")]
    for v in variants:
        # PEFT 0.21 rejects prefix tuning with gradient checkpointing: its second row is mixed bf16 without it.
        gc_second = v["method"] != "prefix_tuning"
        for precision, gc in (("bf16", False), ("amp_bf16", gc_second)):
            row = dict(method="full", precision=precision, optimizer="adamw_fused", attention="sdpa",
                       gradient_checkpointing=gc, micro_batch_size=1, seq_len=512)
            row.update(v)
            rows.append(row)
    return rows


def _row(model: str, repo: str, scenario: Scenario, result: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"model": model, "config_source": f"catalog:{repo}"}
    for name, value in scenario.model_dump(mode="json").items():
        row[name] = ",".join(value) if isinstance(value, list) else ("" if value is None else value)
    row.update(peak_allocated_bytes=result["peak_allocated_bytes"],
               first_step_peak_bytes=result["first_step"]["peak_allocated_bytes"], peak_phase=result["peak_phase"])
    row.update({f"{p}_peak_bytes": result["phase_peaks"][p] for p in PHASES})
    row.update({f"{c}_bytes": result["breakdown"][c] for c in CATEGORIES})
    v = result["versions"]
    row.update(attention_kernel=result["attention_kernel"], total_parameters=result["total_parameters"],
               trainable_parameters=result["trainable_parameters"], trace_seconds=result["trace_seconds"],
               torch_version=v["torch"], transformers_version=v["transformers"], peft_version=v["peft"])
    return row


def _existing(path: str) -> list[dict[str, Any]]:
    """The rows already in ``path``, with the scenario fields added since they were traced set to their defaults."""
    if not os.path.exists(path):
        return []
    defaults = Scenario().model_dump(mode="json")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for name in SCENARIO_FIELDS:
            if name not in row:
                value = defaults[name]
                row[name] = ",".join(value) if isinstance(value, list) else ("" if value is None else value)
    return rows


def _run_batch(jobs: list[tuple[str, str, Scenario, dict]]) -> list[dict[str, Any]]:
    """Trace ``jobs`` in one worker process (one reply line per job)."""
    if not jobs:
        return []
    request = {"batch": [_request(cfg, sc) for _, _, sc, cfg in jobs]}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(worker_command(), input=json.dumps(request), capture_output=True, text=True, env=env, cwd=ROOT)
    replies = [json.loads(ln) for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if len(replies) != len(jobs):
        raise SystemExit(f"worker failed ({proc.returncode}): {proc.stderr[-2000:]}")
    rows = []
    for (model, repo, sc, _), reply in zip(jobs, replies):
        if "error" in reply:  # reported and left out; the run goes on
            print(f"FAILED {model} {sc.model_dump(mode='json')}: {reply['error']['message']}", file=sys.stderr)
            rows.append(None)
        else:
            rows.append(_row(model, repo, sc, reply["result"]))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "data" / "traced_scenarios.csv"))
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated short names: " + ", ".join(MODELS))
    ap.add_argument("--jobs", type=int, default=2, help="worker processes in parallel (default 2)")
    ap.add_argument("--limit", type=int, default=0, help="rows per model (0: all)")
    ap.add_argument("--design", choices=("base", "peft"), default="base",
                    help="base: the 33 rows per model; peft: the PEFT methods' rows (models: %s)" % ",".join(PEFT_MODELS))
    ap.add_argument("--append", action="store_true", help="keep the rows already in --out and add the new ones")
    args = ap.parse_args(argv)
    jobs = []
    models = args.models.split(",") if args.design == "base" or args.models != ",".join(MODELS) else list(PEFT_MODELS)
    for model in models:
        repo = MODELS[model]
        config = catalog_model(repo).config
        rows = (design() if args.design == "base" else peft_design())[: args.limit or None]
        for fields in rows:
            scenario = Scenario.build(**fields)
            check_traceable(scenario, config)
            jobs.append((model, repo, scenario, config))
    t0 = time.perf_counter()
    n = max(1, args.jobs)
    chunks = [jobs[i::n] for i in range(n)]
    with ThreadPoolExecutor(n) as pool:
        parts = list(pool.map(_run_batch, chunks))
    order = {id(j): i for i, j in enumerate(jobs)}
    keyed = sorted((order[id(j)], r) for part, chunk in zip(parts, chunks) for r, j in zip(part, chunk) if r is not None)
    rows = [r for _, r in keyed]
    kept = _existing(args.out) if args.append else []
    with open(args.out, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for row in kept + rows:
            w.writerow(row)
    print(f"{len(rows)} rows -> {args.out} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
