"""``python -m engine.trace.worker``: trace one scenario, JSON in on stdin, JSON out on stdout.

The process first makes sure the fake CUDA extension is loaded before torch starts: if it is not
preloaded, it builds the extension (once, cached) and re-executes itself with ``LD_PRELOAD``
(:mod:`engine.trace.fake_cuda`). Input: ``{"config": {...}, "scenario": {...}}`` (a Scenario dumped in
JSON mode), or ``{"batch": [request, ...]}`` for one reply line per request. Output: ``{"result": {...}}``
or ``{"error": {"kind": ..., "message": ...}}`` where kind is ``model_type`` (unknown to transformers),
``not_traceable`` or ``failed``. A request with ``"mode": "fake_vs_real"`` runs the scenario on fake CUDA
tensors and for real on the CPU and returns both allocation timelines (tests).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

BUILD_SECONDS = "FINETUNE_FIT_FAKE_CUDA_BUILD_S"
"""Set in the re-executed process when it had to compile the extension first (seconds taken)."""
PRELOADED = "FINETUNE_FIT_FAKE_CUDA"
"""Set (to the library path) in the re-executed process, whose LD_PRELOAD holds the extension."""


def _reexec_with_preload() -> None:
    """Re-execute this process with the fake CUDA extension preloaded; on a CUDA build of torch with a GPU,
    carry on as is (fake ``cuda`` tensors work natively and a second CUDA registration would break it)."""
    import torch

    if torch.version.cuda and torch.cuda.is_available():
        os.environ[PRELOADED] = "native"
        return
    import time

    from engine.trace import fake_cuda

    t0 = time.perf_counter()
    built = not (fake_cuda.build_dir() / f"{fake_cuda.NAME}.so").exists()
    lib = fake_cuda.build()
    env = dict(os.environ)
    if built:
        env[BUILD_SECONDS] = f"{time.perf_counter() - t0:.1f}"
    env[PRELOADED] = str(lib)
    env["LD_PRELOAD"] = " ".join(p for p in (str(lib), env.get("LD_PRELOAD", "")) if p)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(fake_cuda.torch_lib_dir()), env.get("LD_LIBRARY_PATH", "")) if p)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "engine.trace.worker", *sys.argv[1:]], env)


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    import torch

    return {"torch": torch.__version__, "transformers": version("transformers"), "peft": version("peft"),
            "python": sys.version.split()[0]}


def trace(request: dict) -> dict:
    """Run the trace of ``request`` and return the output object (result or error)."""
    import warnings

    from engine.trace import step

    warnings.filterwarnings("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    if request.get("mode") == "fake_vs_real":
        return _fake_vs_real(request)
    try:
        out = step.run(request["config"], request["scenario"])
    except step.ModelTypeUnknown as exc:
        return {"error": {"kind": "model_type", "message": str(exc)}}
    except Exception as exc:  # any failure inside torch/transformers: report it, with the traceback's tail
        tail = traceback.format_exc().strip().splitlines()[-6:]
        return {"error": {"kind": "failed", "message": f"{type(exc).__name__}: {exc}", "detail": "\n".join(tail)}}
    result = step.summarize(out)
    result["versions"] = _versions()
    if os.environ.get(BUILD_SECONDS):
        result["notes"].append(f"first use: compiled the fake CUDA extension in {os.environ.pop(BUILD_SECONDS)} s")
    return {"result": result}


def _fake_vs_real(request: dict) -> dict:
    """The same scenario traced on fake ``cuda`` tensors and run for real on the CPU, counted the same way:
    both allocation timelines (kind, bytes, final label) and summaries, for the tests."""
    from engine.trace import step

    ops = bool(request.get("ops"))
    try:
        fake = step.run(request["config"], request["scenario"], device="cuda", fake=True)
        real = step.run(request["config"], request["scenario"], device="cpu", fake=False)
    except Exception as exc:
        return {"error": {"kind": "failed", "message": f"{type(exc).__name__}: {exc}"}}
    return {"fake": {"timeline": fake["log"].timeline(ops), "result": step.summarize(fake)},
            "real": {"timeline": real["log"].timeline(ops), "result": step.summarize(real)}}


def main() -> None:
    if not os.environ.get(PRELOADED):
        _reexec_with_preload()
    request = json.loads(sys.stdin.read())
    if "batch" in request:  # many scenarios in one process (scripts/trace_table.py): one reply per line
        for one in request["batch"]:
            sys.stdout.write(json.dumps(trace(one)) + "\n")
            sys.stdout.flush()
        return
    reply = trace(request)
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
