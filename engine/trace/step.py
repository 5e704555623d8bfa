"""Build a Hugging Face model from its config and run two training steps the way ``Trainer`` does.

Runs inside the worker process (torch, transformers and peft imported). What is reproduced from
transformers 5.x ``Trainer`` (``trainer.py``, ``trainer_optimizer.py``) and why it matters for memory:

- ``model.train()``; mixed precision through ``torch.autocast("cuda", dtype)`` around the forward only
  (accelerate's ``autocast`` wraps ``compute_loss``), fp16 with a loss scale;
- ``loss = model(input_ids=..., labels=...).loss`` with no ``attention_mask`` (an unpadded batch: the
  collator's all-ones mask lets transformers skip the 4-D mask, which fake tensors cannot prove), outputs
  dropped before ``backward`` (``compute_loss`` returns the loss only, so the logits are freed);
- gradient checkpointing via ``activation_checkpointing_enable()`` with its defaults
  (``use_reentrant=False``; it calls ``enable_input_require_grads()`` for ``input_ids`` models, which is
  what makes checkpointing work for frozen-embedding PEFT models);
- two parameter groups (weight decay / no weight decay on biases and norms), gradient clipping at
  ``max_grad_norm=1.0``, ``optimizer.step()``, ``zero_grad(set_to_none=True)``;
- optimizers: ``adamw_torch`` (foreach, the CUDA default), ``adamw_torch_fused``, transformers'
  ``Adafactor(scale_parameter=False, relative_step=False)``, ``torch.optim.SGD``.
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any, Callable

import torch

from engine.trace import patches
from engine.trace.peft_build import after_step as peft_after_step
from engine.trace.counter import AllocationLog, CountingMode, storage_key
from engine.trace.result import PHASES

LEARNING_RATE = 5e-5
"""``TrainingArguments.learning_rate`` default (no effect on memory)."""
MAX_GRAD_NORM = 1.0
"""``TrainingArguments.max_grad_norm`` default: Trainer clips gradients every step."""
_NO_DECAY = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")
"""Trainer's ``get_decay_parameter_names`` name patterns (plus ``nn.LayerNorm`` modules)."""
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class ModelTypeUnknown(Exception):
    """The config's ``model_type`` is not a transformers causal-LM architecture."""


def build_model(config: dict[str, Any], spec: dict[str, Any], device: str) -> torch.nn.Module:
    """The causal LM of ``config`` with random weights in the weight dtype of ``spec['precision']``."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(config)
    model_type = cfg.pop("model_type", None)
    try:
        hf_config = AutoConfig.for_model(model_type, **cfg)
    except (ValueError, KeyError) as exc:
        raise ModelTypeUnknown(f"model_type {model_type!r} is not known to transformers "
                               f"{transformers.__version__}: {exc}") from None
    # The flash-attn package's CUDA kernels cannot run on fake tensors; SDPA's flash kernel is the same
    # FlashAttention-2 algorithm (same saved tensors: output and log-sum-exp), chosen for 16-bit unmasked inputs.
    attention = "sdpa" if spec["attention"] == "flash_attention_2" else spec["attention"]
    weight_dtype = {"fp32": "fp32", "amp_bf16": "fp32", "amp_fp16": "fp32", "bf16": "bf16", "fp16": "fp16"}[spec["precision"]]
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(hf_config, attn_implementation=attention,
                                                     dtype=_DTYPES[weight_dtype])
        except ValueError as exc:
            if "Unrecognized configuration class" in str(exc):
                raise ModelTypeUnknown(f"transformers has no causal-LM class for model_type {model_type!r}") from None
            raise
    return model


def add_lora(model: torch.nn.Module, spec: dict[str, Any]) -> torch.nn.Module:
    """Wrap ``model`` with the PEFT adapters of ``spec['method']`` as ``get_peft_model(model, config)`` does
    (LoRA and the other PEFT methods: :func:`engine.trace.peft_build.peft_config`)."""
    from peft import get_peft_model

    from engine.trace.peft_build import peft_config

    cfg = peft_config(spec)
    # PEFT moves each new adapter to its base layer's device and dtype with Module.to(). For FakeTensor
    # parameters, Module._apply insists on swapping tensors in place (torch.utils.swap_tensors), which
    # fails while other references exist; for the time of the wrapping, parameters are replaced by new
    # Parameters instead (same memory: one new adapter tensor each).
    saved = torch.nn.Module._apply
    torch.nn.Module._apply = _apply_by_replacement
    try:
        return get_peft_model(model, cfg)
    finally:
        torch.nn.Module._apply = saved


def _apply_by_replacement(self: torch.nn.Module, fn, recurse: bool = True) -> torch.nn.Module:
    """``Module._apply`` that replaces each parameter and buffer by ``fn`` of it (no in-place swap)."""
    if recurse:
        for child in self.children():
            _apply_by_replacement(child, fn)
    with torch.no_grad():
        for key, param in self._parameters.items():
            new = fn(param) if param is not None else None
            if new is not None and new is not param:  # unchanged parameters stay (and stay tied)
                self._parameters[key] = torch.nn.Parameter(new, requires_grad=param.requires_grad)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
    return self


def make_optimizer(model: torch.nn.Module, name: str, spec: dict[str, Any] | None = None) -> torch.optim.Optimizer:
    """The optimizer ``TrainingArguments(optim=...)`` builds, over Trainer's two parameter groups (GaLore and
    LoRA-FA build their own groups: :mod:`engine.trace.peft_build`)."""
    from engine.trace import peft_build

    if name == "galore_adamw":
        return peft_build.galore_adamw()(peft_build.galore_groups(model, spec or {}), lr=LEARNING_RATE,
                                         no_deprecation_warning=True)
    if name == "lora_fa":
        return peft_build.lorafa(model, spec or {}, LEARNING_RATE)
    no_decay_modules = {n for n, m in model.named_modules() if isinstance(m, torch.nn.LayerNorm)}
    decay, other = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        module = n.rsplit(".", 1)[0]
        (other if _NO_DECAY.search(n.lower()) or module in no_decay_modules else decay).append(p)
    groups = [{"params": decay, "weight_decay": 0.0}, {"params": other, "weight_decay": 0.0}]
    groups = [g for g in groups if g["params"]]
    if name == "adamw":
        return torch.optim.AdamW(groups, lr=LEARNING_RATE, foreach=True)
    if name == "adamw_fused":
        return torch.optim.AdamW(groups, lr=LEARNING_RATE, fused=True)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        return Adafactor(groups, lr=LEARNING_RATE, scale_parameter=False, relative_step=False)
    if name == "sgd":
        return torch.optim.SGD(groups, lr=LEARNING_RATE, foreach=True)
    if name == "sgd_momentum":
        return torch.optim.SGD(groups, lr=LEARNING_RATE, momentum=0.9, foreach=True)
    raise ValueError(f"optimizer {name!r} is not traceable")


def _autocast(spec: dict[str, Any], device: str):
    if spec["precision"] == "amp_bf16":
        return torch.autocast(device, dtype=torch.bfloat16)
    if spec["precision"] == "amp_fp16":
        return torch.autocast(device, dtype=torch.float16)
    return contextlib.nullcontext()


def run(config: dict[str, Any], spec: dict[str, Any], device: str = "cuda", fake: bool = True,
        emulate: bool = True, on_step: Callable[[int], None] | None = None, count: bool = True) -> dict[str, Any]:
    """Trace two optimizer steps of ``spec`` (a Scenario dumped to a dict) on ``config``.

    ``device="cuda", fake=True`` is the trace; ``device="cpu", fake=False`` runs the same steps for real
    (tests compare the two timelines); on a GPU, ``fake=False, emulate=False`` runs them for real without
    the GPU emulation patches (scripts/gpu_check_trace.py). ``on_step(step)`` is called before each step.
    ``count=False`` runs without the counting dispatch mode (whose presence changes some autograd choices,
    see :meth:`CountingMode._accumulates`), for a real run measured by the device's own statistics.
    Returns the log and facts as plain Python values.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    t0 = time.perf_counter()
    if emulate:
        patches.apply()
    patches.KERNEL_CALLS.clear()
    fake_mode = FakeTensorMode(allow_non_fake_inputs=False) if fake else contextlib.nullcontext()
    with fake_mode:
        torch.manual_seed(0)
        model = build_model(config, spec, device)
        if spec["gradient_checkpointing"]:
            model.activation_checkpointing_enable()
        if spec["method"] != "full":
            model = add_lora(model, spec)
        model.train()
        optimizer = make_optimizer(model, spec["optimizer"], spec)
        log = AllocationLog(device_type=torch.device(device).type)
        weights = {storage_key(p) for p in model.parameters()}
        for p in model.parameters():
            log.track(p, "parameters")
        for b in model.buffers():
            log.track(b, "parameters")
        trainable = [p for p in model.parameters() if p.requires_grad]
        for p in trainable:
            p.register_post_accumulate_grad_hook(lambda q: log.relabel(q.grad, "gradients"))
        micro = min(spec["gradient_accumulation_steps"], 2)
        vocab = model.get_input_embeddings().weight.shape[0]
        with CountingMode(log, weights) if count else contextlib.nullcontext():
            for step in (1, 2):
                if on_step is not None:
                    on_step(step)
                _train_step(model, optimizer, trainable, spec, device, log, step, micro, vocab)
        kernel_calls = dict(patches.KERNEL_CALLS)
        notes = []
        if spec["attention"] == "flash_attention_2":
            notes.append("flash_attention_2 traced as SDPA's FlashAttention-2 kernel (the flash-attn package's CUDA "
                         "kernels cannot run on fake tensors; same algorithm and saved tensors)")
        return {
            "notes": notes,
            "log": log,
            "kernel_calls": kernel_calls,
            "total_parameters": sum(p.numel() for p in model.parameters()),
            "trainable_parameters": sum(p.numel() for p in trainable),
            "micro_batches_traced": micro,
            "trace_seconds": time.perf_counter() - t0,
        }


def _train_step(model, optimizer, trainable, spec, device, log: AllocationLog, step: int, micro: int, vocab: int) -> None:
    """One optimizer step: ``micro`` forward/backward passes, clipping, ``step()``, ``zero_grad``."""
    b, s = spec["micro_batch_size"], spec["seq_len"]
    for _ in range(micro):
        log.mark(step, "forward")
        input_ids = torch.randint(0, vocab, (b, s), device=device)
        labels = input_ids.clone()  # the LM collator's labels are a copy of the inputs
        with _autocast(spec, device):
            loss = model(input_ids=input_ids, labels=labels).loss  # outputs (logits) dropped here
        if spec["gradient_accumulation_steps"] > 1:
            loss = loss / spec["gradient_accumulation_steps"]
        if spec["precision"] == "amp_fp16":
            loss = loss * 65536.0  # GradScaler's initial scale: scale(loss).backward()
        del input_ids, labels
        log.mark(step, "backward")
        loss.backward()
        del loss
    log.mark(step, "optimizer")
    torch.nn.utils.clip_grad_norm_(trainable, MAX_GRAD_NORM)
    optimizer.step()
    peft_after_step(model, spec, step)
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                log.relabel(value, "optimizer_states")
    optimizer.zero_grad(set_to_none=True)


def summarize(out: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able result fields (see :class:`engine.trace.result.TraceResult`) of :func:`run`'s output."""
    log: AllocationLog = out["log"]
    first, steady = log.replay(1), log.replay(2)
    calls = out["kernel_calls"]
    kernel = max(calls, key=calls.get) if calls else "eager"
    return {
        "peak_allocated_bytes": steady.peak_allocated_bytes,
        "peak_phase": steady.peak_phase,
        "phase_peaks": steady.phase_peaks,
        "breakdown": steady.breakdown,
        "first_step": first.model_dump(),
        "attention_kernel": kernel,
        "kernel_calls": calls,
        "total_parameters": out["total_parameters"],
        "trainable_parameters": out["trainable_parameters"],
        "micro_batches_traced": out["micro_batches_traced"],
        "allocations": sum(1 for e in log.events if e[0] == "a"),
        "trace_seconds": round(out["trace_seconds"], 3),
        "notes": list(out.get("notes", [])),
    }


assert set(PHASES) == {"forward", "backward", "optimizer"}
