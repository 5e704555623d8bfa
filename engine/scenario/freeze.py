"""Freeze-tuning: full fine-tuning of the last N decoder blocks only (``Scenario.trainable_layers``).

What the product models is LLaMA-Factory's ``finetuning_type: freeze`` (hiyouga/LLaMA-Factory
``src/llamafactory/model/adapter.py`` ``_setup_freeze_tuning``: ``freeze_trainable_layers`` > 0 trains
``range(num_layers - n, num_layers)`` with ``freeze_trainable_modules: all``; the embeddings, the final norm and the
LM head stay frozen unless ``freeze_extra_modules`` names them; default n = 2):

- **parameters**: the trainable blocks' tensors train (their gradients and optimizer states exist), every other
  tensor is frozen. LLaMA-Factory loads the model in the compute dtype and casts the trainable parameters to fp32
  (``cast_trainable_params_to_fp32`` unless ``pure_bf16``): under mixed precision (``amp_*``, LLaMA-Factory's
  ``bf16: true``) the trainable blocks are fp32 and the frozen tensors 16-bit; pure 16-bit (``pure_bf16``) keeps
  both 16-bit (:func:`stored_bytes`).
- **autograd**: the frozen embeddings' output does not require grad, so the frozen blocks below the first trainable
  one record no graph: they save no activations and backward stops at the first trainable block (its input is made
  to require grad by LLaMA-Factory's ``get_custom_gradient_checkpointing_func``, which also checkpoints only the
  trainable blocks: ``model_utils/checkpointing.py``). Backward runs the LM head's input gradient (no weight
  gradient: it is frozen) and, in the N trainable blocks, input and weight gradients (and their recompute).
- ``Scenario.frozen_input_grads``: LLaMA-Factory up to April 2024 (v0.5.3 ``src/llmtuner/model/patcher.py``:
  ``gradient_checkpointing_enable(use_reentrant=True)`` then ``model.enable_input_require_grads()``; the
  trainable-only checkpointing came in April 2024, c7c21606) made the embeddings' output require grad: every block
  is then in the graph, checkpointed (its input saved) and recomputed, and backward runs the input gradients of
  every block; only the N trainable blocks add weight gradients.

A block tensor group holds one tensor per layer (``count`` a multiple of the layer count): its trainable share is
``count x N / L``. The share of a group that is not (e.g. DeepSeek's first dense layers) is taken pro rata.
"""

from __future__ import annotations

from engine.model.architecture import Architecture, TensorGroup
from engine.scenario.precision import PrecisionSpec
from engine.scenario.training import Method, Scenario

BLOCK_ROLES = ("attention", "mlp", "norms")


def trainable_blocks(arch: Architecture, sc: Scenario) -> int:
    """Decoder blocks whose parameters train: all of them unless ``sc`` freeze-tunes the last N (N capped at the
    model's layers, as LLaMA-Factory's ``max(0, num_layers - n)`` does)."""
    L = arch.num_layers
    if sc.method is not Method.FULL or sc.trainable_layers is None:
        return L
    return min(sc.trainable_layers, L)


def is_freeze(arch: Architecture, sc: Scenario) -> bool:
    """``sc`` freezes some of ``arch``'s parameters while training the others in full (freeze-tuning)."""
    return sc.method is Method.FULL and sc.trainable_layers is not None


def weight_share(arch: Architecture, sc: Scenario) -> float:
    """Share of the decoder blocks with weight gradients: N / L under freeze-tuning, 1 otherwise."""
    return trainable_blocks(arch, sc) / arch.num_layers if is_freeze(arch, sc) else 1.0


def backward_share(arch: Architecture, sc: Scenario) -> float:
    """Share of the decoder blocks that backward (and checkpointing's recompute) runs through and that save
    activations: :func:`weight_share`, or every block with ``frozen_input_grads``."""
    return 1.0 if sc.frozen_input_grads else weight_share(arch, sc)


def graph_blocks(arch: Architecture, sc: Scenario) -> int:
    """Blocks in the autograd graph (saving activations): the trainable ones, or all with ``frozen_input_grads``."""
    return arch.num_layers if sc.frozen_input_grads else trainable_blocks(arch, sc)


def _is_block(arch: Architecture, g: TensorGroup) -> bool:
    return g.role in BLOCK_ROLES and g.count >= arch.num_layers


def split_groups(arch: Architecture, sc: Scenario) -> tuple[list[TensorGroup], list[TensorGroup]]:
    """(trainable, frozen) tensor groups of a freeze-tuning run: each block group split into its last N layers'
    tensors and the rest; the embeddings, final norm and LM head frozen."""
    share = weight_share(arch, sc)
    trainable, frozen = [], []
    for g in arch.tensors:
        if not _is_block(arch, g):
            frozen.append(g)
            continue
        n = round(g.count * share)
        if n:
            trainable.append(g.model_copy(update={"count": n}))
        if g.count - n:
            frozen.append(g.model_copy(update={"count": g.count - n}))
    return trainable, frozen


def stored_bytes(spec: PrecisionSpec) -> tuple[float, float]:
    """(bytes per trainable element, bytes per frozen element) under freeze-tuning: the precision's weight dtype
    for the trainable blocks (fp32 under mixed precision), the compute dtype for the frozen rest."""
    return float(spec.weight_bytes), float(spec.compute_bytes)
