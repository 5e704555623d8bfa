"""Measure, don't guess: an exact fake-tensor trace of a Hugging Face training step.

Optional (``pip install -e ".[trace]"``: torch, transformers, peft). Given a model config and a
:class:`~engine.scenario.training.Scenario`, the real transformers model is built under PyTorch's FakeTensorMode
on a fake ``cuda`` device (no weights, no GPU) and two training steps run as ``Trainer`` runs them;
every tensor storage allocation and free is counted (rounded to the CUDA allocator's 512-byte blocks),
giving the peak of ``torch.cuda.max_memory_allocated()`` with a breakdown by category and phase
(:class:`~engine.trace.result.TraceResult`). Method and findings: ../shared/reference/tracing-notes.md.

This module does not import torch: the trace runs in a subprocess (``python -m engine.trace.worker``,
JSON in and out), which also keeps torch out of the Streamlit server. Package layout:

- ``result.py``   the result model (torch-free)
- ``kernels.py``  which attention kernel a GPU would choose (torch-free)
- ``compare.py``  engine estimate vs trace, per component (torch-free)
- ``fake_cuda.py`` the C++ extension that makes a CPU-only torch accept ``cuda`` fake tensors
- ``counter.py``  allocation counting (a TorchDispatchMode), ``patches.py`` autocast/SDPA fixes,
  ``workspace.py`` buffers CUDA attention kernels allocate inside themselves,
  ``step.py`` model building and the Trainer-like step, ``worker.py`` the subprocess entry point
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from typing import Any

from engine.errors import (
    EngineError,
    NotTraceableError, TraceError, TraceFailedError, TraceModelTypeError, TraceUnavailableError,
)
from engine.scenario.optimizer import Optimizer
from engine.scenario.training import Method, Scenario
from engine.trace.result import CATEGORIES, PHASES, StepPeak, TraceResult

__all__ = [
    "CATEGORIES", "PHASES", "StepPeak", "TraceResult", "TraceError", "TraceUnavailableError", "NotTraceableError",
    "TraceModelTypeError", "TraceFailedError", "tracer_available", "check_traceable", "trace_training_step",
    "INSTALL_HINT", "DEFAULT_TIMEOUT_S",
]

INSTALL_HINT = 'pip install -e ".[trace]"'
DEFAULT_TIMEOUT_S = 300.0
"""Default limit for one trace (worker start, first build of the extension, model build, two steps)."""
REQUIRED = ("torch", "transformers", "peft")

TRACEABLE_OPTIMIZERS = {o.value for o in Optimizer if o.record.traceable}
"""Optimizers the worker can build (their records' ``traceable``: torch's AdamW foreach/fused and SGD, transformers'
Adafactor, galore-torch's GaLoreAdamW, PEFT's LoRA-FA; each built in :func:`engine.trace.step.make_optimizer`)."""


def tracer_available() -> tuple[bool, str]:
    """Whether the ``[trace]`` extra is installed: ``(True, "")`` or ``(False, reason)``.

    Only looks for the packages (no import, so it is cheap to call from the app).
    """
    missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
    if missing:
        return False, f"{', '.join(missing)} not installed; install the tracer with: {INSTALL_HINT}"
    if not sys.platform.startswith("linux"):
        return False, "the tracer preloads a compiled shared library with LD_PRELOAD, which needs Linux"
    return True, ""


def check_traceable(scenario: Scenario, config: dict[str, Any] | None = None) -> None:
    """Raise :class:`NotTraceableError` when ``scenario`` (on ``config``) cannot be traced on fake tensors.

    QLoRA and pre-quantized checkpoints store weights with bitsandbytes/GPTQ/AWQ kernels, and the
    bitsandbytes optimizers (8-bit, paged) keep and update their states in CUDA kernels: none has a
    fake-tensor implementation, and tracing something else instead would give a wrong number.
    """
    if scenario.method is Method.QLORA:
        raise NotTraceableError(
            "QLoRA is not traceable: its 4-bit weights are bitsandbytes Params4bit updated by CUDA-only kernels "
            "(no fake-tensor implementation); trace the LoRA scenario for the adapters, activations and optimizer")
    name = scenario.optimizer.value
    if name not in TRACEABLE_OPTIMIZERS:
        raise NotTraceableError(
            f"optimizer {name} is not traceable: bitsandbytes optimizers keep quantized or paged states updated by "
            "CUDA-only kernels (no fake-tensor implementation); trace one of "
            + ", ".join(o.value for o in Optimizer if o.record.traceable and o.record.requires == "any") + " instead")
    framework = getattr(scenario, "framework", None)
    if framework is not None and getattr(framework, "value", framework) != "hf":
        raise NotTraceableError(
            f"the {getattr(framework, 'value', framework)} training stack is not traceable: the tracer runs the Hugging Face "
            "stack (transformers models, PEFT, Trainer's step); choose the hf framework to trace it")
    if getattr(scenario, "fused_cross_entropy", False):
        raise NotTraceableError(
            "the fused linear cross-entropy is not traceable: Liger Kernel's loss runs Triton GPU kernels "
            "(no fake-tensor implementation); trace without it to see the logits it would save")
    if getattr(scenario, "liger_kernels", False):
        raise NotTraceableError(
            "Liger Kernel's RMSNorm, SwiGLU and RoPE are Triton GPU kernels (no fake-tensor implementation); "
            "trace without liger_kernels to see what the unfused modules save")
    if getattr(scenario, "trainable_layers", None) is not None:
        raise NotTraceableError(
            "freeze-tuning is not traced yet: the tracer's worker trains every parameter of the model (LLaMA-Factory's "
            "freeze of all but the last blocks and its trainable-only checkpointing are not built there); trace full "
            "fine-tuning to check the trainable blocks' share")
    if getattr(scenario, "gradient_checkpointing_offload", False):
        raise NotTraceableError(
            "Unsloth-style offloaded checkpointing is Unsloth's own autograd function, and Unsloth imports only with a "
            "CUDA GPU (its Triton kernels); trace gradient checkpointing without offload instead")
    quant = (config or {}).get("quantization_config")
    if quant:
        method = quant.get("quant_method", "unknown") if isinstance(quant, dict) else "unknown"
        raise NotTraceableError(
            f"this checkpoint is pre-quantized ({method}): its weights need CUDA-only dequantization kernels; "
            "trace the unquantized base model instead")


def _request(config: dict[str, Any], scenario: Scenario) -> dict[str, Any]:
    """The worker's input. LoRA's default targets are resolved by the engine (every attention projection,
    :func:`engine.scenario.lora.default_targets`), not left to PEFT's per-model default (often q_proj, v_proj only)."""
    spec = scenario.model_dump(mode="json")
    from engine.scenario.peft import is_feedforward, method_default_targets, targeted, uses_targets

    if uses_targets(scenario.method):
        from engine.model.build import architecture_or_approximation

        try:
            arch = architecture_or_approximation(config)[0]
            if scenario.lora_targets is None:
                spec["lora_targets"] = list(method_default_targets(arch, scenario.method))
            if scenario.method is Method.IA3:  # which targets IA3 scales at their input
                spec["ia3_feedforward_modules"] = [lin.module for lin in targeted(arch, scenario) if is_feedforward(arch, lin)]
        except EngineError:  # the engine cannot read this config: let PEFT pick its default
            pass
    return {"config": config, "scenario": spec}


def trace_training_step(config: dict[str, Any], scenario: Scenario, timeout_s: float = DEFAULT_TIMEOUT_S) -> TraceResult:
    """Trace two training steps of ``scenario`` on the model of ``config`` (a config.json dict).

    Runs ``python -m engine.trace.worker`` in a subprocess; the first call also compiles the fake CUDA
    extension (about 30 s, cached under ``~/.cache/finetune-fit``).

    Raises:
        TraceUnavailableError: the ``[trace]`` extra is not installed.
        NotTraceableError: QLoRA, a bitsandbytes optimizer or a pre-quantized checkpoint.
        TraceModelTypeError: transformers does not know the config's ``model_type``.
        TraceFailedError: the trace failed or took longer than ``timeout_s`` seconds.
    """
    # What can never be traced is said first: installing the extra would not help.
    check_traceable(scenario, config)
    ok, reason = tracer_available()
    if not ok:
        raise TraceUnavailableError(reason)
    t0 = time.perf_counter()
    reply = _run_worker(_request(config, scenario), timeout_s)
    return result_from_reply(reply, wall_seconds=time.perf_counter() - t0)


def result_from_reply(reply: dict[str, Any], wall_seconds: float = 0.0) -> TraceResult:
    """The worker's reply as a :class:`TraceResult`, or the typed error it reports."""
    if "error" in reply:
        err = reply["error"]
        if err["kind"] == "model_type":
            raise TraceModelTypeError(err["message"])
        if err["kind"] == "not_traceable":
            raise NotTraceableError(err["message"])
        raise TraceFailedError(f"the trace failed: {err['message']}")
    return TraceResult(**reply["result"], wall_seconds=round(wall_seconds, 3))


def worker_command() -> list[str]:
    """The command line of the worker (this interpreter, ``-m engine.trace.worker``)."""
    return [sys.executable, "-m", "engine.trace.worker"]


def _run_worker(request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    try:
        proc = subprocess.run(worker_command(), input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout_s, env=env, cwd=root)
    except subprocess.TimeoutExpired:
        raise TraceFailedError(f"the trace took longer than {timeout_s:.0f} s and was stopped; "
                               "try a shorter sequence or a smaller batch") from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise TraceFailedError(f"the trace worker exited with status {proc.returncode}: {tail}")
    return json.loads(lines[-1])
