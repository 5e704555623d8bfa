"""The fine-tuning methods, one record each: full fine-tuning, LoRA, QLoRA and the PEFT methods beyond them.

Every fact of one method that another part of the product reads is its :class:`MethodRecord` in :data:`RECORDS`:
its label, its default precision, PEFT's ``peft_type`` and the key names of its config class (the importers read
``adapter_config.json`` with them), whether it trains LoRA's A/B pairs (rsLoRA, LoRA+ and LoRA-FA apply), whether it
adds virtual tokens instead of adapting linears (and whether they lengthen the sequence), whether the trainer formats
(TRL's ``ModelConfig``, axolotl, LLaMA-Factory) can build it, and the trainable tensors it adds to one targeted
module (shapes as PEFT 0.21 creates them; sources in :mod:`engine.scenario.peft`). The method labels, default
precisions, method groups, export and import tables are derived from these records.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Callable, Mapping

from engine.model.architecture import Architecture, LinearLayer
from engine.scenario.precision import PrecisionMode


class Method(str, Enum):
    """Fine-tuning technique (its facts: :attr:`record`)."""

    FULL = "full"
    LORA = "lora"
    QLORA = "qlora"
    # PEFT methods beyond LoRA (trainable tensors: engine.scenario.peft)
    DORA = "dora"
    IA3 = "ia3"
    VERA = "vera"
    LOHA = "loha"
    LOKR = "lokr"
    ADALORA = "adalora"
    PROMPT_TUNING = "prompt_tuning"
    PREFIX_TUNING = "prefix_tuning"
    P_TUNING = "p_tuning"

    @property
    def record(self) -> "MethodRecord":
        """Everything the engine knows about this method (:data:`RECORDS`)."""
        return RECORDS[self]


Shapes = list[tuple[str, tuple[int, ...]]]
ModuleShapes = Callable[[Architecture, LinearLayer, int], Shapes]
"""The trainable tensors ``(name, shape)`` a method adds to one targeted ``nn.Linear(in, out)`` of an architecture,
at LoRA rank ``r``: ``(arch, lin, r) -> shapes``."""


@dataclass(frozen=True)
class MethodRecord:
    """One method, everything the engine says about it; lists of methods are derived from these.

    - ``label``: the app's label; ``default_precision``: the precision a scenario gets when none is chosen (what the
      Hugging Face and PEFT examples use: :data:`engine.scenario.training.DEFAULT_PRECISION`).
    - ``peft_type``: ``adapter_config.json``'s ``peft_type`` (None: full fine-tuning); ``rank_key`` / ``alpha_key`` /
      ``dropout_key``: the config class's names for the scenario's LoRA rank, alpha and dropout (None: it has none);
      ``peft_defaults``: that class's defaults for them (peft 0.21.2).
    - ``lora_pairs``: trains ``lora_A`` / ``lora_B`` pairs; ``prompt``: virtual tokens, no target modules;
      ``grows_sequence``: the virtual tokens are prepended to the input (every layer runs on s + n tokens);
      ``trainer_formats``: TRL's ``ModelConfig``, axolotl and LLaMA-Factory build it (LoRA, QLoRA, DoRA).
    - ``module_shapes``: the trainable tensors it adds per targeted module (:data:`ModuleShapes`; None: none).
    """

    name: str
    label: str
    default_precision: PrecisionMode
    peft_type: str | None = None
    rank_key: str | None = None
    alpha_key: str | None = None
    dropout_key: str | None = None
    peft_defaults: Mapping[str, float] = field(default_factory=dict)
    lora_pairs: bool = False
    prompt: bool = False
    grows_sequence: bool = False
    trainer_formats: bool = False
    module_shapes: ModuleShapes | None = None


def mlp_outputs(arch: Architecture) -> list[LinearLayer]:
    """The MLP's output projections (down_proj, fc2, GPT-2's mlp.c_proj): in = intermediate, out = hidden."""
    return [lin for lin in arch.layer_linears if lin.role == "mlp" and lin.out_features == arch.hidden_size
            and lin.in_features != arch.hidden_size]


def is_feedforward(arch: Architecture, lin: LinearLayer) -> bool:
    """IA3 scales the input of a feed-forward (MLP output) module and the output of every other module."""
    return any(lin.module == o.module for o in mlp_outputs(arch))


def _lora(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    return [("lora_A", (r, lin.in_features)), ("lora_B", (lin.out_features, r))]


def _dora(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    return _lora(arch, lin, r) + [("lora_magnitude_vector", (lin.out_features,))]


def _adalora(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    i, o = lin.in_features, lin.out_features
    return [("lora_A", (r, i)), ("lora_E", (r, 1)), ("lora_B", (o, r)), ("ranknum", (1,))]


def _ia3(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    return [("ia3_l", (1, lin.in_features) if is_feedforward(arch, lin) else (lin.out_features, 1))]


def _vera(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    return [("vera_lambda_b", (lin.out_features,)), ("vera_lambda_d", (r,))]


def _loha(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    i, o = lin.in_features, lin.out_features
    return [("hada_w1_a", (o, r)), ("hada_w1_b", (r, i)), ("hada_w2_a", (o, r)), ("hada_w2_b", (r, i))]


def factorization(dim: int) -> tuple[int, int]:
    """``dim = m x n`` with m <= n and m the largest divisor not above sqrt(dim) (PEFT LoKr ``factorization(dim, -1)``)."""
    m = 1
    d = 1
    while d * d <= dim:
        if dim % d == 0:
            m = d
        d += 1
    return m, dim // m


def _lokr(arch: Architecture, lin: LinearLayer, r: int) -> Shapes:
    """LoKr's tensors for one module: out = a b, in = c d; w1 (a x c), w2 (b x d) or its rank-r factors."""
    a, b = factorization(lin.out_features)
    c, d = factorization(lin.in_features)
    shapes: Shapes = [("lokr_w1", (a, c))]
    if r < max(b, d) / 2:
        shapes += [("lokr_w2_a", (b, r)), ("lokr_w2_b", (r, d))]
    else:
        shapes.append(("lokr_w2", (b, d)))
    return shapes


_BF16 = PrecisionMode.BF16
_LORA_KEYS = dict(peft_type="LORA", rank_key="r", alpha_key="lora_alpha", dropout_key="lora_dropout",
                  peft_defaults=dict(lora_r=8, lora_alpha=8.0, lora_dropout=0.0), lora_pairs=True, trainer_formats=True,
                  module_shapes=_lora)

RECORDS: dict[Method, MethodRecord] = {Method(r.name): r for r in (
    MethodRecord("full", "Full fine-tuning", PrecisionMode.AMP_BF16),
    MethodRecord("lora", "LoRA", _BF16, **_LORA_KEYS),
    MethodRecord("qlora", "QLoRA", _BF16, **_LORA_KEYS),
    MethodRecord("dora", "DoRA", _BF16, **{**_LORA_KEYS, "module_shapes": _dora}),
    MethodRecord("ia3", "IA3", _BF16, peft_type="IA3", peft_defaults=dict(lora_dropout=0.0), module_shapes=_ia3),
    MethodRecord("vera", "VeRA", _BF16, peft_type="VERA", rank_key="r", dropout_key="vera_dropout",
                 peft_defaults=dict(lora_r=256, lora_dropout=0.0), module_shapes=_vera),
    MethodRecord("loha", "LoHa", _BF16, peft_type="LOHA", rank_key="r", alpha_key="alpha",
                 peft_defaults=dict(lora_r=8, lora_alpha=8.0, lora_dropout=0.0), module_shapes=_loha),
    MethodRecord("lokr", "LoKr", _BF16, peft_type="LOKR", rank_key="r", alpha_key="alpha",
                 peft_defaults=dict(lora_r=8, lora_alpha=8.0, lora_dropout=0.0), module_shapes=_lokr),
    MethodRecord("adalora", "AdaLoRA", _BF16, peft_type="ADALORA", rank_key="init_r", alpha_key="lora_alpha",
                 dropout_key="lora_dropout", peft_defaults=dict(lora_r=12, lora_alpha=8.0, lora_dropout=0.0),
                 module_shapes=_adalora),
    MethodRecord("prompt_tuning", "Prompt tuning", _BF16, peft_type="PROMPT_TUNING", prompt=True, grows_sequence=True),
    MethodRecord("prefix_tuning", "Prefix tuning", _BF16, peft_type="PREFIX_TUNING", prompt=True),
    MethodRecord("p_tuning", "P-tuning", _BF16, peft_type="P_TUNING", prompt=True, grows_sequence=True),
)}
"""Every method's :class:`MethodRecord`, by member."""

_missing = [m.value for m in Method if m not in RECORDS]
if _missing:  # a member without its record would fail later, far from here
    raise RuntimeError(f"engine.scenario.methods: no MethodRecord for {', '.join(_missing)}")
