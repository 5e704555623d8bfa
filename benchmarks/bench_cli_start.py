"""Whole-command start-up of the CLI: ``python -m engine estimate --config config.json`` on a local config (the
bundled Llama 3.2 1B's config.json written to a temporary file), from process start to exit, as a user's shell sees
it. The CLI imports only what the verb typed needs (:mod:`engine.cli`: no Hub client, importers, model catalog, GPU
catalog, fit, scale-out or time model for a local memory estimate; only the scale-out options' enums), and pydantic
builds only the models it uses (``defer_build`` on the others), so this measures the import of the engine's core
(pydantic models, the architecture builders, the memory components) and one estimate. Of it, Python with pydantic
and one model is about 0.27 s of CPU on the team's machine (2026-12: the rest of the engine about 0.09 s).

Target: median under 0.35 s (issue 25; llm-analysis answers in 0.57 s on the same kind of config). Also prints
``python -X importtime``'s slowest top-level imports, to see what to make lazy next. Exits 1 when the median misses
the target. Run by hand (``python benchmarks/bench_cli_start.py [--runs 20]``); hyperfine gives the same figure:
``hyperfine -w 3 'python -m engine estimate --config /tmp/config.json'``. Not part of the tests (no timed tests).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 0.35
CONFIG = ROOT / "data" / "models" / "meta-llama__Llama-3.2-1B.json"  # a catalog entry: its "config" is a config.json


CPU_S: list[float] = []  # user + system CPU seconds of each run: on a machine shared with other work, the wall time
# waits for the CPU as well; the CPU time says what the command itself costs


def _run(argv: list[str], env: dict[str, str] | None = None) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, env=env)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU_S.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        sys.exit(f"the command failed ({done.returncode}): {done.stderr.decode(errors='replace')[-500:]}")
    return elapsed


def _bytecode_env(tmp: str) -> dict[str, str]:
    """The environment with bytecode caching on, in a folder of ``tmp``: an installed package has its ``.pyc`` files
    (pip compiles them), so the warm-up runs write them even where ``PYTHONDONTWRITEBYTECODE`` is set (it is on the
    team's machines: without this every run compiled the engine's ~70 modules again, ~0.15 s of CPU)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
    return env


def _slowest_imports(argv: list[str], env: dict[str, str], n: int = 8) -> list[tuple[float, str]]:
    done = subprocess.run([sys.executable, "-X", "importtime", *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                          env=env)
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and not parts[2].startswith("   "):
            rows.append((int(parts[1]) / 1e6, parts[2].strip()))  # top-level imports only (two spaces of nesting)
    return sorted(rows, reverse=True)[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(json.loads(CONFIG.read_text())["config"]))
        argv = [sys.executable, "-m", "engine", "estimate", "--config", str(config)]
        env = _bytecode_env(tmp)
        for _ in range(3):  # warm the file cache and the bytecode
            _run(argv, env)
        CPU_S.clear()
        times = [_run(argv, env) for _ in range(args.runs)]
        imports = _slowest_imports(argv, env)
    median = statistics.median(times)
    print(f"python -m engine estimate --config (local): median {median:.3f} s, min {min(times):.3f} s, "
          f"max {max(times):.3f} s over {args.runs} runs (target: median < {TARGET_S} s); CPU time median "
          f"{statistics.median(CPU_S):.3f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("slowest top-level imports (cumulative s): " + ", ".join(f"{name} {t:.3f}" for t, name in imports))
    return 0 if median < TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
