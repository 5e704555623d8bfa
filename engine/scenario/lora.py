"""LoRA adapters: which linear layers a ``target_modules`` list selects, and the adapter tensors.

PEFT (``peft.LoraConfig``, 0.1x) adds to each targeted ``nn.Linear(in, out)`` two matrices,
``lora_A`` (r x in) and ``lora_B`` (out x r), without bias by default (Hu et al. 2021, "LoRA", sec. 4.1):
``r * (in + out)`` trainable parameters per module. ``target_modules`` names match a module when they
equal the last component of its path; ``"all-linear"`` selects every linear layer of the decoder
blocks (PEFT excludes the output layer, ``lm_head``).
"""

from __future__ import annotations

from engine.model.architecture import Architecture, LinearLayer, TensorGroup
from engine.errors import ScenarioError
from engine.memo import by_identity

ALL_LINEAR = "all-linear"


def _is_attention(lin: LinearLayer) -> bool:
    return lin.role == "attention"


@by_identity()
def default_targets(arch: Architecture) -> tuple[str, ...]:
    """The attention projections of ``arch`` (q, k, v, o or their fused forms), the seeds' choice.

    A name that would also select MLP modules under PEFT's suffix rule is left out: GPT-2's ``c_proj``
    names both the attention output and the MLP output, so its default is ``c_attn`` alone (PEFT's own
    default for gpt2).
    """
    names = dict.fromkeys(lin.target_name for lin in arch.layer_linears if _is_attention(lin))
    return tuple(n for n in names if all(_is_attention(lin) for lin in arch.layer_linears if lin.matches(n)))


_RESOLVED: dict[tuple[int, tuple[str, ...] | None], tuple[Architecture, tuple[LinearLayer, ...]]] = {}
_RESOLVED_SIZE = 1024
"""Resolved targets by (architecture identity, targets): one estimate resolves the same targets many times (weights,
activations, adapters, the time model) and a fit matrix thousands of times. The cached architecture is kept and
compared by identity, so a reused id never returns another model's layers; errors are never cached."""


def resolve_targets(arch: Architecture, targets: tuple[str, ...] | None) -> list[LinearLayer]:
    """Linear layers of one block that ``targets`` selects (a new list each call; resolution cached per architecture).

    Raises:
        ScenarioError: no targets, or a target that matches no linear layer of this architecture (the
            message lists the names that exist).
    """
    key = (id(arch), targets)
    hit = _RESOLVED.get(key)
    if hit is not None and hit[0] is arch:
        return list(hit[1])
    found = _resolve(arch, targets)
    if len(_RESOLVED) >= _RESOLVED_SIZE:
        _RESOLVED.clear()
    _RESOLVED[key] = (arch, tuple(found))
    return found


def _resolve(arch: Architecture, targets: tuple[str, ...] | None) -> list[LinearLayer]:
    if targets is None:
        targets = default_targets(arch)
    if not targets:
        raise ScenarioError("LoRA needs at least one target module")
    if ALL_LINEAR in targets:
        return list(arch.layer_linears)
    unknown = [t for t in targets if not any(lin.matches(t) for lin in arch.layer_linears)]
    if unknown:
        raise ScenarioError(
            f"LoRA target(s) {', '.join(unknown)} match no linear layer of this {arch.model_type} model; "
            f"available: {', '.join(arch.linear_target_names())} (or {ALL_LINEAR})"
            + ("; to train the LM head (or the embeddings) in full, use modules_to_save (--modules-to-save lm_head)"
               if any(t in ("lm_head", "embed_tokens") for t in unknown) else "")
        )
    return [lin for lin in arch.layer_linears if any(lin.matches(t) for t in targets)]


def adapter_tensors(arch: Architecture, r: int, targets: tuple[str, ...] | None) -> list[TensorGroup]:
    """The ``lora_A`` and ``lora_B`` tensor groups for rank ``r`` over every block.

    Shapes: A is (r, in_features), B is (out_features, r); ``count`` = layers x modules per layer.
    """
    groups = []
    for lin in resolve_targets(arch, targets):
        n = lin.blocks(arch.num_layers) * lin.count
        role = "attention" if _is_attention(lin) else "mlp"
        groups.append(TensorGroup(name=lin.module + ".lora_A", shape=(r, lin.in_features), count=n, role=role))
        groups.append(TensorGroup(name=lin.module + ".lora_B", shape=(lin.out_features, r), count=n, role=role))
    return groups
