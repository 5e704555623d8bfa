"""Bytes per logit (one token x one vocabulary entry) that each loss implementation holds, read from its code.

Two moments matter (:mod:`engine.memory.estimate`): the **forward** (everything alive together while the loss runs;
``logits_forward``, phase ``forward``) and the **start of backward** (what the loss saved plus the gradients its
backward creates while that is alive; ``logits_loss``, phase ``backward``). ``c`` is the compute dtype's bytes (the LM
head's output); fp32 runs (``c == 4``) make no upcast copy (``.float()`` of an fp32 tensor returns it).
Liger's fused loss and LitGPT's chunked loss are not per-logit (:mod:`engine.memory.logits`).
"""

from __future__ import annotations

from typing import NamedTuple

from engine.model.architecture import Architecture
from engine.scenario.loss import LossImplementation, TransformersVersion
from engine.scenario.precision import PrecisionSpec
from engine.scenario.training import Scenario

TORCHTUNE_OUTPUT_CHUNKS = 8
"""torchtune ``CEWithChunkedOutputLoss(num_output_chunks=8)``, the default of its recipes' configs."""

TORCHTUNE_SOURCE = "pytorch/torchtune@a6290a5b (v0.6.1)"
"""The torchtune code the torchtune loss paths are read from (the chunked loss unchanged since it came in
pytorch/torchtune@4fba6cd4, released in 0.3.0)."""


class LossPath(NamedTuple):
    """Bytes per logit at the loss's forward and at the start of backward, with what they are and the source."""

    forward: float
    backward: float
    forward_text: str
    backward_text: str
    source: str


def _upcast(c: float) -> float:
    """Bytes per logit of an fp32 copy of ``c``-byte logits (none when they are fp32 already)."""
    return 0.0 if c == 4 else 4.0


def loss_path(arch: Architecture, sc: Scenario, spec: PrecisionSpec) -> LossPath:
    """The per-logit bytes of ``sc.loss`` (not Liger / LitGPT, which :mod:`engine.memory.logits` handles)."""
    c = float(spec.compute_bytes)
    soft = c if arch.final_logit_softcapping else 0.0  # Gemma 2's tanh-capped logits are kept for backward
    loss = sc.loss
    if loss is LossImplementation.MEGATRON:
        return _megatron(c)
    if loss is LossImplementation.TORCHTUNE_CHUNKED:
        return _torchtune(c)
    if loss is LossImplementation.TORCHTUNE_CHUNKED_COMPILED:
        return _torchtune_compiled(c)
    if loss is LossImplementation.TORCHTUNE_CE:
        return _torchtune_ce(c)
    if loss is LossImplementation.TORCHTUNE_CE_V02:
        return _torchtune_ce_v02(c)
    if loss is LossImplementation.INPLACE_FUSED:
        return LossPath(c, c, f"the {c:g}-byte logits the kernel saves (fp32 log-sum-exp per token only)",
                        "the saved logits, overwritten in place by their gradient",
                        "flash-attn flash_attn/ops/triton/cross_entropy.py CrossEntropyLoss (save_for_backward(logits, "
                        "lse, labels); backward: dlogits = logits if inplace_backward); llm.c fused_classifier")
    if loss is LossImplementation.TORCHTITAN:
        return LossPath(c + _upcast(c) + 4, 12.0, f"logits ({c:g} B), their fp32 copy and the log-softmax",
                        "fp32 log-softmax + its gradients",
                        "torchtitan torchtitan/components/loss.py cross_entropy_loss: F.cross_entropy(pred.flatten(0, 1)"
                        ".float(), ...), eager (the compiled loss is not modelled)")
    return _transformers(c, soft, sc)


def _transformers(c: float, soft: float, sc: Scenario) -> LossPath:
    """transformers' causal-LM loss by release range (read from modeling_qwen2.py / modeling_llama.py 4.41.2 and
    4.45.2, loss/loss_utils.py 4.46.3, 4.48.3, 4.49.0 and 4.50.0; measured by ``scripts/loss_probe.py``).

    The backward is 12 B in every range (log-softmax + nll and log-softmax gradients). The forward differs:
    4.50+ keeps the model's logits, their fp32 copy and the log-softmax (c + 4 + 4); 4.46-4.49 add the shifted copy
    ``logits[..., :-1, :].contiguous()`` (4 B, a real copy only for micro batch > 1); up to 4.45 the model's forward
    upcast the logits itself, freeing the 16-bit ones: fp32 logits + shifted copy + log-softmax (4 + 4 + 4; 8 for
    micro batch 1).
    """
    version = sc.transformers_version
    shift = 4.0 if sc.micro_batch_size > 1 else 0.0
    shift_text = "its shifted copy" if shift else "no shifted copy (one sequence: the slice is contiguous)"
    if version is TransformersVersion.V4_45_AND_OLDER:
        forward = 4.0 + shift + 4.0 + soft
        text = f"fp32 logits (the model's forward upcasts them; the 16-bit ones are freed), {shift_text}, log-softmax"
        where = "transformers <= 4.45 modeling_llama.py / modeling_qwen2.py forward: logits = logits.float(), " \
                "shift_logits = logits[..., :-1, :].contiguous(), CrossEntropyLoss"
    elif version is TransformersVersion.V4_46_TO_4_49:
        forward = c + _upcast(c) + shift + 4.0 + soft
        text = f"logits ({c:g} B), their fp32 copy, {shift_text}, log-softmax"
        where = "transformers 4.46-4.49 loss/loss_utils.py ForCausalLMLoss: logits.float(), shifted logits copy"
    else:
        forward = c + 8.0 + soft
        text = f"logits ({c:g} B), their fp32 copy and the log-softmax (labels shifted, not logits)"
        where = "transformers 4.50-5.x loss/loss_utils.py ForCausalLMLoss: logits.float(), labels padded and shifted"
    return LossPath(forward, 12.0 + soft, text, "fp32 log-softmax + its gradients",
                    f"{where}; fake-tensor traces (tracing-notes.md)")


def _megatron(c: float) -> LossPath:
    """Megatron-LM ``_VocabParallelCrossEntropy`` (megatron/core/tensor_parallel/cross_entropy.py): one fp32 copy of
    the logits (``calculate_logits_max``), max subtracted, exp and softmax **in place** in it, saved for backward;
    backward turns that buffer into the gradient in place, and autograd casts it to the logits' dtype. The 16-bit
    logits die with the model's forward. Over tensor parallel ranks each holds vocab / TP (not this one-GPU figure)."""
    up = _upcast(c)
    return LossPath(c + up, 4.0 + (c if up else 0.0),
                    f"logits ({c:g} B) and the fp32 buffer that becomes the softmax in place" if up
                    else "fp32 logits, softmax computed in place",
                    "the saved fp32 softmax, turned into the gradient in place" + (f", + its {c:g}-byte cast" if up else ""),
                    "Megatron-LM megatron/core/tensor_parallel/cross_entropy.py _VocabParallelCrossEntropy "
                    "(save_for_backward(exp_logits, ...); grad_input = softmax, in place)")


def _torchtune(c: float) -> LossPath:
    """torchtune ``CEWithChunkedOutputLoss``, not compiled (pytorch/torchtune@a6290a5b, v0.6.1; unchanged in what it
    holds since 4fba6cd4, 0.3.0): the recipe calls ``model.set_num_output_chunks(8)``, so
    ``TransformerDecoder.chunked_output`` returns the output projection of ``h.chunk(8, dim=1)`` as a list of 8
    ``c``-byte logit chunks (no upcast in the model); the loss's ``compute_cross_entropy`` upcasts one chunk
    (``logits.float()``) and ``F.cross_entropy`` saves that chunk's fp32 log-softmax, so after the loop every chunk's
    log-softmax (4 B) is alive next to the 16-bit chunks. The recipe's ``del logits`` (``_loss_step``) frees the chunks
    before backward, which then works one chunk at a time (its two fp32 gradients)."""
    n = TORCHTUNE_OUTPUT_CHUNKS
    up = _upcast(c)
    forward = c + 4.0 + up / n
    # One chunk's nll and log-softmax gradients next to every log-softmax; its cast to c bytes comes after the chunk's
    # log-softmax and nll gradient are freed (measured: scripts/loss_probe.py --loss torchtune_chunked, 4 + 1.0).
    backward = 4.0 + 8.0 / n
    return LossPath(forward, backward,
                    f"logit chunks ({c:g} B), every chunk's fp32 log-softmax, one chunk's fp32 copy (1/{n})",
                    f"every chunk's fp32 log-softmax + one chunk's gradients (1/{n})",
                    f"torchtune torchtune/modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss "
                    f"(num_output_chunks=8, not compiled), modules/transformer.py chunked_output, the recipes' "
                    f"del logits before backward ({TORCHTUNE_SOURCE})")


def _torchtune_compiled(c: float) -> LossPath:
    """torchtune ``CEWithChunkedOutputLoss`` with ``compile: True`` (pytorch/torchtune@a6290a5b): the recipe's
    ``training.compile_loss`` replaces ``compute_cross_entropy`` (one chunk's ``logits.float()`` + summed
    ``F.cross_entropy``) by its ``torch.compile`` (Inductor). AOTAutograd's partitioner (min-cut rematerialisation,
    the same code on CPU and CUDA) saves for backward the ``c``-byte chunk it was given and per-token fp32 statistics
    (max, log-sum-exp: 8 B a token, nothing per logit), not the fp32 log-softmax an eager chunk keeps; backward
    recomputes the softmax from the chunk. So the recipe's ``del logits`` frees nothing: every chunk (``c``) stays
    alive until its backward; the compiled forward allocates only the per-token statistics (no fp32 copy of a chunk),
    and each chunk's backward writes one ``c``-byte gradient (``c / 8``).

    Measured (torch 2.13.0 CPU, Inductor; ``python scripts/loss_probe.py --batch 2 --loss
    torchtune_chunked_compiled``, 8 bf16 chunks of 2 x 256 x 32,000): the pack hooks of saved-tensor hooks see 2.0 B
    per logit of saved logit chunks and 0.001 B of others; the CPU allocator's tally (torch.profiler) 2.07 B at the
    loss's forward peak and after the forward, + 0.25 B while the compiled backward runs. Not seen: memory a
    generated kernel takes outside the allocator, and what CUDA's Triton kernels and caching allocator do (their
    fusion can differ from the CPU's C++ kernels; the saved tensors are the partitioner's, not the device's)."""
    n = TORCHTUNE_OUTPUT_CHUNKS
    return LossPath(c, c + c / n,
                    f"logit chunks ({c:g} B; the compiled loss saves them, no fp32 copy or log-softmax)",
                    f"every chunk saved by the compiled loss + one chunk's {c:g}-byte gradient (1/{n})",
                    f"torchtune torchtune/modules/loss/ce_chunked_output_loss.py CEWithChunkedOutputLoss, "
                    f"training/_compile.py compile_loss (compute_cross_entropy under torch.compile) ({TORCHTUNE_SOURCE});"
                    f" measured: scripts/loss_probe.py --loss torchtune_chunked_compiled (torch 2.13.0, Inductor, CPU)")


def _torchtune_ce(c: float) -> LossPath:
    """torchtune 0.3+ with ``loss: torch.nn.CrossEntropyLoss`` (pytorch/torchtune@a6290a5b): no output chunks, so
    ``TransformerDecoder.forward`` returns ``self.output(h).float()`` (the ``c``-byte logits live only through that
    cast); the recipe shifts the labels, not the logits, reshapes (a view) and ``del logits`` before backward
    (since pytorch/torchtune@8a98fbaa, 0.3.0). Forward: fp32 logits + log-softmax (8 B; the cast's ``c + 4`` is
    less); backward: the saved log-softmax + its two gradients (12 B)."""
    return LossPath(max(c + _upcast(c), 8.0), 12.0, "fp32 logits (the model upcasts its output), log-softmax",
                    "fp32 log-softmax + its gradients (the recipe deletes the logits before backward)",
                    f"torchtune modules/transformer.py TransformerDecoder.forward (self.output(h).float()), "
                    f"recipes/*_single_device.py _loss_step (labels shifted, del logits), torch.nn.CrossEntropyLoss "
                    f"({TORCHTUNE_SOURCE})")


def _torchtune_ce_v02(c: float) -> LossPath:
    """torchtune 0.1-0.2 (``loss: torch.nn.CrossEntropyLoss`` in every config; pytorch/torchtune@0217d44c, v0.1.1):
    the model returns ``self.output(h).float()``; the recipe runs ``logits = logits[..., :-1, :].contiguous()``
    (a copy when the micro batch is > 1, the original then freed; for one sequence a view that keeps it) and
    ``logits.transpose(1, 2)``, and keeps ``logits`` alive through ``loss.backward()`` (no ``del logits`` until
    pytorch/torchtune@8a98fbaa, 0.3.0). Forward: the fp32 logits (or their copy) + log-softmax (8 B; during the copy
    the original and the copy, 8 B too); backward: the kept fp32 logits + the log-softmax + its two gradients
    (16 B)."""
    return LossPath(max(c + _upcast(c), 8.0), 16.0,
                    "fp32 logits (the model upcasts; their shifted copy replaces them), log-softmax",
                    "the fp32 shifted logits the recipe keeps + fp32 log-softmax + its gradients",
                    "torchtune 0.1-0.2 modules/transformer.py TransformerDecoder.forward (self.output(h).float()), "
                    "recipes/*_finetune_*.py train loop (logits[..., :-1, :].contiguous(), kept through backward), "
                    "torch.nn.CrossEntropyLoss (pytorch/torchtune@0217d44c)")
