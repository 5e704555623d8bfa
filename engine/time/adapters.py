"""Time terms of the PEFT methods and tricks, as FLOPs and bytes (pure functions; :mod:`engine.time.step` turns them
into seconds).

Counted as a matmul of (a x b) by (b x c) = 2abc FLOPs; a training step runs the forward once and the backward
twice (input and weight gradients). Behaviour modelled: PEFT 0.21, galore-torch 1.0, Unsloth's offloaded
checkpointing (``unsloth/models/_utils.py``).
"""

from __future__ import annotations

from engine.memory.adapters import offloaded_inputs_bytes
from engine.model.architecture import Architecture, LinearLayer
from engine.scenario.optimizer import Optimizer, galore_projected
from engine.scenario.peft import LORA_FAMILY, SEQUENCE_GROWING, adapter_groups, saved_module_copies, targeted
from engine.scenario.training import Method, Scenario

GALORE_UPDATE_PROJ_GAP = 200
"""transformers 5 ``optim="galore_adamw"`` default ``update_proj_gap``: one SVD per projected tensor every 200 steps."""


def _module_flops_per_token(sc: Scenario, i: int, o: int) -> float:
    """Adapter FLOPs per token of one module (forward + backward)."""
    r, m = sc.lora_r, sc.method
    if m in LORA_FAMILY or m is Method.ADALORA or m is Method.VERA:
        low_rank = 6.0 * r * (i + o)
        if sc.optimizer is Optimizer.LORA_FA:  # lora_A has no weight gradient
            low_rank -= 2.0 * r * i
        if m is Method.DORA and sc.lora_dropout > 0:
            # DoRA recomputes the base product on the dropped-out input (forward + input gradient)
            low_rank += 4.0 * i * o
        return low_rank
    if m in (Method.LOHA, Method.LOKR):
        return 6.0 * i * o  # x @ delta_W^T, like a full-rank trainable linear
    if m is Method.IA3:
        return 3.0 * (i + o)
    return 0.0


def _module_flops_per_step(sc: Scenario, i: int, o: int) -> float:
    """Adapter FLOPs per forward (independent of the tokens): building DoRA's LoRA weight from an identity and the
    weight norm, LoHa's two rank-r products and their backward, LoKr's Kronecker product."""
    r, m = sc.lora_r, sc.method
    if m is Method.DORA:
        return 2.0 * i * i * r + 2.0 * i * r * o + 4.0 * i * o
    if m is Method.LOHA:
        return 3 * 2 * (2.0 * o * r * i)  # two products forward, four in backward
    if m is Method.LOKR:
        return 3.0 * o * i
    return 0.0


def adapter_flops_per_token(arch: Architecture, sc: Scenario, base_per_token: float,
                            adapted: list[LinearLayer] | None = None) -> float:
    """Extra training FLOPs per (user) token of ``sc``'s method over the frozen base's ``base_per_token``
    (forward + input gradients, attention included).

    Adapters per module (above); the per-forward weight work spread over the micro batch's tokens; virtual tokens
    (prompt tuning, P-tuning: the whole model runs on s + n tokens; prefix tuning: attention over n more keys);
    ``modules_to_save`` copies (their weight gradients); GaLore's projections and its SVD refresh, spread over a step.
    ``adapted``: :func:`engine.scenario.peft.targeted` of ``sc``, when the caller has it.
    """
    tokens = sc.micro_batch_size * sc.seq_len
    total = 0.0
    for lin in targeted(arch, sc) if adapted is None else adapted:
        n = lin.blocks(arch.num_layers) * lin.count
        share = arch.experts_per_token / arch.num_experts if lin.count > 1 and arch.num_experts else 1.0
        total += n * share * _module_flops_per_token(sc, lin.in_features, lin.out_features)
        total += n * (1 + int(sc.gradient_checkpointing)) * _module_flops_per_step(sc, lin.in_features, lin.out_features) / tokens
    if sc.method in SEQUENCE_GROWING:
        total += base_per_token * sc.num_virtual_tokens / sc.seq_len
    if sc.method is Method.PREFIX_TUNING:
        total += 3.0 * 4 * arch.num_layers * arch.q_out * sc.num_virtual_tokens
    if sc.method in (Method.PROMPT_TUNING, Method.P_TUNING, Method.PREFIX_TUNING):
        total += 6.0 * sum(g.parameters for g in adapter_groups(arch, sc)) * sc.micro_batch_size / tokens
    for g in saved_module_copies(arch, sc):
        if g.role == "lm_head":
            total += 2.0 * g.numel  # its weight gradient (the forward and input gradient are in the base)
    return total


def galore_flops_per_step(arch: Architecture, sc: Scenario) -> float:
    """GaLore's optimizer-step FLOPs: project every gradient (2 m n r) and the update back (2 m n r), and the SVD of
    each projected m x n gradient every ``update_proj_gap`` steps (about 4 m n min(m, n) for a thin SVD)."""
    if not sc.optimizer.record.galore:
        return 0.0
    total = 0.0
    for g in arch.tensors:
        if galore_projected(g):
            m, n = g.shape
            r = min(sc.galore_rank, m, n)
            total += g.count * (4.0 * m * n * r + 4.0 * m * n * min(m, n) / GALORE_UPDATE_PROJ_GAP)
    return total


def galore_8bit_step_bytes(arch: Architecture, sc: Scenario, param_bytes: float) -> float:
    """HBM bytes of one step of layer-wise GaLore 8-bit (``galore_adamw_8bit_layerwise``) over every tensor, each
    stepped alone (galore-torch 1.0 ``GaLoreAdamW8bit.step``): a projected (m x n) tensor clones the weight
    (``p.saved_data = p.data.clone()``: read + write), lets bitsandbytes' 8-bit kernel update the r x max(m, n)
    projected zeros (read the projected gradient and ``p.data``, write ``p.data``, read and write two uint8 states),
    writes the update projected back (its GEMM is in :func:`galore_flops_per_step`) and adds it to the saved weight
    (``add_``: two reads, one write): 6 m n + 3 low bytes x ``param_bytes`` + 4 low; any other tensor is one
    bitsandbytes pass (gradient, weight read and written, two 8-bit states read and written). No gradient clipping:
    the Trainer's ``clip_grad_norm_`` finds no gradient left after the in-backward steps."""
    total = 0.0
    for g in arch.tensors:
        if galore_projected(g):
            m, n = g.shape
            low = min(sc.galore_rank, m, n) * max(m, n)
            total += g.count * (6.0 * m * n * param_bytes + low * (3.0 * param_bytes + 4.0))
        else:
            total += g.parameters * (3.0 * param_bytes + 4.0)
    return total


def offload_transfer_bytes(arch: Architecture, sc: Scenario, resid_bytes: int) -> float:
    """Bytes Unsloth-style offloading moves over PCIe per micro batch: every checkpointed block input to the CPU in
    the forward and back in the backward (Unsloth overlaps the copies with compute: ``non_blocking=True``)."""
    return 2.0 * offloaded_inputs_bytes(arch, sc, resid_bytes)


def transfer_seconds(nbytes: float, link_bytes_per_s: float) -> float:
    """Seconds to move ``nbytes`` over a host link of ``link_bytes_per_s`` (hidden when compute takes longer)."""
    if link_bytes_per_s <= 0:
        raise ValueError("link bandwidth must be positive")
    return nbytes / link_bytes_per_s


def extra_adapter_flops(arch: Architecture, sc: Scenario, adapted: list[LinearLayer] | None = None) -> float:
    """FLOPs per micro batch the PEFT method adds beyond what :func:`engine.time.gemm.step_gemms` already times.

    ``step_gemms`` times the base GEMMs and, for the LoRA family (LoRA, QLoRA, DoRA), the ``lora_A`` / ``lora_B``
    GEMMs; every other term of :func:`adapter_flops_per_token` (DoRA's weight norm and dropout pass, LoHa / LoKr's
    delta weights, IA3's scaling, VeRA's shared projections, virtual tokens, ``modules_to_save`` copies) is added here.
    ``adapted``: :func:`engine.scenario.peft.targeted` of ``sc``, when the caller has it.
    """
    if sc.method in (Method.LORA, Method.QLORA) and not sc.modules_to_save:
        return 0.0  # lora_A / lora_B are all of it (the sum below cancels to 0); skipped, as every estimate runs it
    tokens = sc.micro_batch_size * sc.seq_len
    adapted = targeted(arch, sc) if adapted is None else adapted
    extra = adapter_flops_per_token(arch, sc, 0.0, adapted) * tokens
    if sc.method in LORA_FAMILY:
        for lin in adapted:
            n = lin.blocks(arch.num_layers) * lin.count
            share = arch.experts_per_token / arch.num_experts if lin.count > 1 and arch.num_experts else 1.0
            extra -= n * share * 6.0 * sc.lora_r * (lin.in_features + lin.out_features) * tokens
    return max(0.0, extra)
