"""Memory of the PEFT methods beyond LoRA: their trainable tensors' dtypes, the tensors their modules save for
backward, the per-forward work of DoRA, LoHa and LoKr, prefix tuning's key/value prefix, AdaLoRA's importance
scores, and Unsloth-style offloaded checkpointing.

Behaviour modelled: PEFT 0.21 (``tuners/lora/dora.py``, ``tuners/ia3``, ``tuners/vera``, ``tuners/loha``,
``tuners/lokr``, ``tuners/adalora``, ``tuners/prefix_tuning``) on transformers 5; checked against fake-tensor traces
of each method on Llama-3.2-1B and Qwen2.5-0.5B (data/traced_scenarios.csv, ``scripts/trace_table.py --design peft``).
Autograd saves an operand only when the gradient that needs it is required (frozen base weights: no saved inputs).
Widths below are bytes per token (per element of the module's input or output width).
"""

from __future__ import annotations

from engine.memory.components import MemoryComponent, Phase
from engine.model.architecture import Architecture, LinearLayer, TensorGroup
from engine.scenario.peft import (
    LORA_FAMILY, adapter_groups, frozen_adapter_buffers, is_feedforward, saved_module_copies, targeted,
)
from engine.scenario.precision import PrecisionSpec
from engine.scenario.training import Framework, Method, Scenario


def peft_tensor_bytes(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> tuple[list[tuple[TensorGroup, float]],
                                                                                      list[tuple[TensorGroup, float]]]:
    """(trainable, frozen) tensor groups a PEFT method adds, with bytes per element.

    Adapters are fp32 under PEFT (``autocast_adapter_dtype=True``; the prompt encoders are new fp32 modules too), the
    weight dtype with LitGPT/torchtune. ``modules_to_save`` copies keep the base weight's dtype (a deep copy). VeRA's
    shared projections are fp32 buffers.
    """
    adapter = 4.0 if sc.framework is Framework.HF else float(spec.weight_bytes)
    copies = {g.name for g in saved_module_copies(arch, sc)}
    trainable = [(g, float(spec.weight_bytes) if g.name in copies else adapter) for g in adapter_groups(arch, sc)]
    frozen = [(g, 4.0) for g in frozen_adapter_buffers(arch, sc)]
    if sc.optimizer.record.freezes_lora_a:  # create_lorafa_optimizer freezes every lora_A: no gradient, no state
        frozen += [(g, b) for g, b in trainable if g.name.endswith(".lora_A")]
        trainable = [(g, b) for g, b in trainable if not g.name.endswith(".lora_A")]
    return trainable, frozen


def _share(arch: Architecture, lin: LinearLayer) -> float:
    """A module's weight in the per-layer average: blocks that have it / layers, expert modules by top-k / E."""
    tokens = lin.count * arch.experts_per_token / arch.num_experts if lin.count > 1 else 1.0
    return tokens * lin.blocks(arch.num_layers) / arch.num_layers


def saved_per_token(arch: Architecture, sc: Scenario, c: int, autocast: bool) -> float:
    """Bytes per token (averaged over blocks) that the adapters of one block save for backward.

    ``w`` is the width of an adapter's operands: fp32 under PEFT (the input is cast to the adapter's dtype), the
    compute dtype under autocast or with LitGPT/torchtune adapters.

    - LoRA / QLoRA / AdaLoRA: the input lora_A saves (``w``), dropout's 1-byte mask, lora_B's r-wide input; LoRA-FA
      freezes lora_A, which then saves no input (Zhang et al. 2023, "LoRA-FA", sec. 3).
    - DoRA: LoRA's, plus the base output and the LoRA output the magnitude products save (``out`` wide each).
    - AdaLoRA: LoRA's, plus the out-wide product divided by the trainable ``ranknum``.
    - IA3: the base output (``out``) it scales, or the input (``in``, cast to fp32) of a feed-forward module.
    - VeRA: dropout's mask, the r-wide and the out-wide outputs that lambda_d and lambda_b scale.
    - LoHa / LoKr: the input the delta-weight linear saves.
    """
    if sc.method is Method.FULL:
        return 0.0
    w = c if (autocast or sc.framework is not Framework.HF) else 4
    mask = 1 if sc.lora_dropout > 0 else 0
    total = 0.0
    for lin in targeted(arch, sc):
        i, o, r = lin.in_features, lin.out_features, sc.lora_r
        m = sc.method
        if m in LORA_FAMILY or m is Method.ADALORA:
            a_input = 0 if sc.optimizer.record.freezes_lora_a else w
            per = (a_input + mask) * i + w * r
            if m is Method.DORA:
                per += 2 * w * o
            if m is Method.ADALORA:  # the division by the trainable ``ranknum`` saves its out-wide dividend
                per += w * o
        elif m is Method.IA3:
            # A feed-forward module's input is cast to the fp32 vector's dtype before the product, which saves it.
            per = (4 if sc.framework is Framework.HF else c) * i if is_feedforward(arch, lin) else c * o
        elif m is Method.VERA:
            per = mask * i + w * (r + o)
        else:  # LoHa, LoKr
            per = w * i
        total += _share(arch, lin) * per
    return total


def saved_per_layer(arch: Architecture, sc: Scenario, c: int, autocast: bool, weight_bytes: int) -> float:
    """Bytes per block, independent of the tokens, that the adapters save for backward.

    - LoHa / LoKr: the delta weight (out x in) the linear saves, fp32 (16-bit under autocast, which casts it).
    - DoRA with dropout: the base weight in the input's dtype, which the second base product ``F.linear(dropout(x),
      W)`` saves for the input gradient: an fp32 copy of a 16-bit weight, a 16-bit cast under autocast, none when the
      weight already is fp32 and there is no autocast.
    """
    total = 0.0
    for lin in targeted(arch, sc):
        n = lin.in_features * lin.out_features * _share(arch, lin)
        if sc.method in (Method.LOHA, Method.LOKR):
            total += n * (c if autocast else 4)
        elif sc.method is Method.DORA and sc.lora_dropout > 0:
            total += n * (c if autocast else (4 if weight_bytes != 4 else 0))
    return total


def forward_transient_component(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent | None:
    """The per-module work of DoRA, LoHa and LoKr in the forward (and in the recompute of a checkpointed block):
    the largest module's temporaries on top of what is saved.

    DoRA (PEFT ``DoraLinearLayer``): lora_B(lora_A(I_in)) builds the in x out LoRA weight from an in x in identity,
    then ``W + s BA`` and its row norm (detached: DoRA sec. 4.3): in^2 + 3 in x out fp32 elements. LoHa: the two
    rank-r products (w1a w1b, w2a w2b) and their Hadamard product: 3 out x in. LoKr: the Kronecker product and its
    scaled copy: 2 out x in.
    """
    lins = targeted(arch, sc)
    if sc.method not in (Method.DORA, Method.LOHA, Method.LOKR) or not lins:
        return None
    if sc.method is Method.DORA:
        per = max(4.0 * (lin.in_features ** 2 + 3 * lin.in_features * lin.out_features) for lin in lins)
        what = "DoRA weight norm: identity (in x in) + LoRA weight, W + sBA (in x out) x 4 B, largest module"
    else:
        k = 3 if sc.method is Method.LOHA else 2
        per = max(4.0 * k * lin.in_features * lin.out_features for lin in lins)
        what = f"{sc.method.value} delta weight build: {k} x out x in x 4 B, largest module"
    phases: tuple[Phase, ...] = ("forward", "recompute") if sc.gradient_checkpointing else ("forward",)
    return MemoryComponent(key="adapter_transients", label="Adapter forward temporaries", bytes=per, phases=phases,
                           formula=what, source="PEFT 0.21 tuners/lora/dora.py, tuners/loha, tuners/lokr")


def prefix_kv_component(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> MemoryComponent | None:
    """Prefix tuning's keys and values: each layer's attention saves keys and values n tokens longer (the prefix is
    concatenated in front of the sequence's own), and the prefix embedding's output (batch x n x layers x 2 x kv
    width, fp32) lives through the forward."""
    if sc.method is not Method.PREFIX_TUNING:
        return None
    n, b = sc.num_virtual_tokens, sc.micro_batch_size
    kv = arch.kv_out
    saved = arch.num_layers * 2 * kv * n * b * spec.compute_bytes
    prefix = arch.num_layers * 2 * kv * n * b * 4.0
    return MemoryComponent(key="prefix_kv", label="Prefix keys/values", bytes=saved + prefix,
                           phases=("forward", "backward"),
                           formula=f"{arch.num_layers} layers x 2 x {kv} x {n} virtual tokens x batch x ({spec.compute_bytes} B "
                                   "saved by attention + 4 B prefix embedding output)",
                           source="PEFT 0.21 PrefixEncoder + transformers DynamicCache (torch.cat of prefix and keys)")


def adalora_scores_component(arch: Architecture, sc: Scenario, phases: tuple[Phase, ...]) -> MemoryComponent | None:
    """AdaLoRA's ``RankAllocator``: three fp32 tensors the size of every adapter tensor (importance, its moving
    average, its uncertainty), kept across steps (PEFT 0.21 ``tuners/adalora/layer.py`` ``update_ipt``)."""
    if sc.method is not Method.ADALORA:
        return None
    params = sum(g.parameters for g in adapter_groups(arch, sc))
    return MemoryComponent(key="adalora_scores", label="AdaLoRA importance scores", bytes=3 * 4.0 * params,
                           phases=phases, formula="3 x adapter parameters x 4 B (ipt, exp_avg_ipt, exp_avg_unc)",
                           source="PEFT 0.21 AdaLoRA RankAllocator.update_ipt")


def offloaded_inputs_bytes(arch: Architecture, sc: Scenario, resid: int) -> float:
    """Bytes the Unsloth-style offload moves to CPU RAM: every checkpointed block input (layers x resid x tokens x
    hidden). Unsloth's ``Unsloth_Offloaded_Gradient_Checkpointer`` copies each block's input to the CPU in the forward
    and back one block at a time in backward (unsloth ``models/_utils.py``)."""
    if not (sc.gradient_checkpointing and sc.gradient_checkpointing_offload):
        return 0.0
    return float(arch.num_layers * resid * arch.hidden_size * sc.tokens_per_micro_batch)
