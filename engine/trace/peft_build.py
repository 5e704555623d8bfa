"""PEFT adapters and the PEFT-side optimizers of a traced scenario (runs inside the worker: torch and peft imported).

Each method is built the way its library's documentation builds it (PEFT 0.21): ``get_peft_model(model, config)``
with ``LoraConfig(use_dora=..., use_rslora=...)``, ``IA3Config``, ``VeraConfig``, ``LoHaConfig``, ``LoKrConfig``,
``AdaLoraConfig``, ``PromptTuningConfig``, ``PrefixTuningConfig`` or ``PromptEncoderConfig`` (P-tuning); the
optimizers LoRA-FA (``peft.optimizers.create_lorafa_optimizer``) and GaLore (galore-torch 1.0 ``GaLoreAdamW`` over
transformers 5's two parameter groups).
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import sys
import types
from typing import Any

import torch

ADALORA_TOTAL_STEP = 1000
"""``AdaLoraConfig.total_step`` (required by PEFT 0.21)."""
ADALORA_TINIT = 200
"""``AdaLoraConfig.tinit`` of PEFT's example scripts: the traced steps are in the warm-up, where the importance
scores are updated (their memory is counted) but no rank is masked yet (masking reads a k-th value with
``.item()``, which fake tensors cannot answer; it changes no tensor's size)."""
GALORE_RANK_DEFAULT = 128
GALORE_SCALE = 0.25
"""transformers 5 ``_get_galore_optimizer`` defaults (``optim_args``: rank 128, scale 0.25, proj_type std)."""


def peft_config(spec: dict[str, Any]):
    """The PEFT config object of ``spec['method']`` (a Scenario dumped to JSON), or None for full fine-tuning.

    Raises:
        ValueError: a method this function does not build (tracing something else would give a wrong number).
    """
    import peft

    method = spec["method"]
    targets = spec.get("lora_targets")
    if targets is not None and "all-linear" in targets:
        targets = "all-linear"
    save = list(spec.get("modules_to_save") or []) or None
    common = dict(task_type="CAUSAL_LM", target_modules=targets, modules_to_save=save)
    if save:
        _patch_module_copy()
    r, alpha, dropout = spec["lora_r"], spec["lora_alpha"], spec["lora_dropout"]
    if method in ("lora", "dora"):
        return peft.LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, use_dora=method == "dora",
                               use_rslora=bool(spec.get("use_rslora")), **common)
    if method == "ia3":
        return peft.IA3Config(feedforward_modules=spec.get("ia3_feedforward_modules"), **common)
    if method == "vera":
        return peft.VeraConfig(r=r, vera_dropout=dropout, **common)
    if method == "loha":
        _patch_module_dropout("loha")
        return peft.LoHaConfig(r=r, alpha=alpha, **common)
    if method == "lokr":
        _patch_module_dropout("lokr")
        return peft.LoKrConfig(r=r, alpha=alpha, **common)
    if method == "adalora":
        return peft.AdaLoraConfig(init_r=r, target_r=max(1, r * 2 // 3), lora_alpha=alpha, lora_dropout=dropout,
                                  total_step=ADALORA_TOTAL_STEP, tinit=ADALORA_TINIT, **common)
    n = spec.get("num_virtual_tokens", 20)
    if method == "prompt_tuning":
        return peft.PromptTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=n)
    if method == "prefix_tuning":
        return peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=n)
    if method == "p_tuning":
        return peft.PromptEncoderConfig(task_type="CAUSAL_LM", num_virtual_tokens=n)
    if method == "full":
        return None
    raise ValueError(f"the tracer builds no PEFT config for method {method!r}")


def galore_adamw():
    """galore-torch 1.0's ``GaLoreAdamW`` class, imported without the package ``__init__`` (which also imports the
    8-bit variant and so bitsandbytes, a CUDA library the tracer does not need)."""
    try:
        import galore_torch  # noqa: F401  (present with its dependencies)
        from galore_torch import GaLoreAdamW
        return GaLoreAdamW
    except ImportError:
        pass
    root = importlib.util.find_spec("galore_torch")
    if root is None or not root.submodule_search_locations:
        raise ImportError("galore-torch is not installed (pip install --no-deps galore-torch==1.0)")
    stub = types.ModuleType("galore_torch")
    stub.__path__ = list(root.submodule_search_locations)
    stub.__spec__ = root
    sys.modules["galore_torch"] = stub
    return importlib.import_module("galore_torch.adamw").AdamW


def galore_groups(model: torch.nn.Module, spec: dict[str, Any]) -> list[dict[str, Any]]:
    """transformers 5 ``_setup_low_rank_optimizer``'s two groups: every other parameter, then the weights of the
    decoder blocks' ``nn.Linear`` modules with GaLore's rank, gap, scale and projection type.

    The trace refreshes the projection every step (``update_proj_gap=1``), so that its steady step contains the SVD
    a real run does every ``update_proj_gap`` steps: the peak over a run includes it.
    """
    names = {f"{n}.weight" for n, m in model.named_modules()
             if isinstance(m, torch.nn.Linear) and (".layers." in n or ".h." in n)}
    target = [p for n, p in model.named_parameters() if n in names and p.requires_grad]
    other = [p for n, p in model.named_parameters() if n not in names and p.requires_grad]
    rank = spec.get("galore_rank") or GALORE_RANK_DEFAULT
    return [{"params": other}, {"params": target, "rank": rank, "update_proj_gap": 1, "scale": GALORE_SCALE,
                                "proj_type": "std"}]


def lorafa(model: torch.nn.Module, spec: dict[str, Any], lr: float) -> torch.optim.Optimizer:
    """PEFT 0.21 ``create_lorafa_optimizer``: freezes every ``lora_A`` and updates ``lora_B`` only."""
    from peft.optimizers import create_lorafa_optimizer

    return create_lorafa_optimizer(model, r=spec["lora_r"], lora_alpha=spec["lora_alpha"], lr=lr)


def after_step(model: torch.nn.Module, spec: dict[str, Any], step: int) -> None:
    """AdaLoRA's budget update, called after ``optimizer.step()`` and before ``zero_grad()`` as PEFT documents."""
    if spec["method"] == "adalora":
        model.base_model.update_and_allocate(step)


class _KeptModule:
    """``torch.rand(1)`` in LoHa/LoKr's module-dropout test: with ``module_dropout=0`` (the default) the module always
    runs; the comparison is answered without reading a (fake) random value."""

    def __gt__(self, p: float) -> bool:
        return p <= 0.0


class _TorchWithoutModuleDropout(types.ModuleType):
    """``torch`` as LoHa/LoKr's layer modules see it in the trace: ``rand(1)`` is :class:`_KeptModule`."""

    def __getattr__(self, name: str):
        if name == "rand":
            return lambda *size, **kw: _KeptModule() if size in ((1,), ((1,),)) else torch.rand(*size, **kw)
        return getattr(torch, name)


def _patch_module_dropout(kind: str) -> None:
    module = importlib.import_module(f"peft.tuners.{kind}.layer")
    if not isinstance(module.torch, _TorchWithoutModuleDropout):
        module.torch = _TorchWithoutModuleDropout("torch")


def _copy_module(obj, memo=None):
    """``copy.deepcopy`` of a module of fake tensors within the trace's one fake mode (the stock deepcopy makes new
    fake modes): every parameter and buffer cloned, as a deep copy does."""
    if not isinstance(obj, torch.nn.Module):
        return copy.deepcopy(obj, memo)
    new = copy.copy(obj)
    new.__dict__ = dict(obj.__dict__)
    with torch.no_grad():
        new._parameters = {k: None if p is None else torch.nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
                           for k, p in obj._parameters.items()}
        new._buffers = {k: None if b is None else b.clone() for k, b in obj._buffers.items()}
    new._modules = {k: None if m is None else _copy_module(m) for k, m in obj._modules.items()}
    return new


def _patch_module_copy() -> None:
    other = importlib.import_module("peft.utils.other")
    other.copy = types.SimpleNamespace(deepcopy=_copy_module, copy=copy.copy)
