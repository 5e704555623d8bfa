"""Measure what a causal-LM loss holds per logit, on real CPU tensors (no GPU, no weights).

Counts the bytes of every live tensor storage (a TorchDispatchMode sees each new storage, a weakref callback its
release) while a tiny Qwen2 model with a large vocabulary runs its forward with ``labels`` (the loss of the installed
transformers) and then backward, the way Trainer runs a step: the model's outputs are dropped before backward.
The rest of the tiny model is small, so bytes / (batch x seq x vocab) is the loss path's bytes per logit, within
about 0.3 B. ``engine.memory.loss_paths`` models these figures; tests/memory/test_loss_paths.py runs this script.

    python scripts/loss_probe.py [--batch 2] [--loss hf|torchtune_chunked|torchtune_chunked_compiled]
    PYTHONPATH=/path/to/transformers-4.41.2 python scripts/loss_probe.py     # another release's loss path

Prints one JSON line: the transformers version, forward peak, bytes held after the forward, and the extra peak of
backward over what the forward left, each per logit.

``--loss torchtune_chunked_compiled`` runs torchtune's chunked loss as its recipes run it with ``compile: True``
(``training.compile_loss`` compiles only ``compute_cross_entropy``, one chunk's upcast + summed cross-entropy, with
Inductor). A TorchDispatchMode cannot measure it: Dynamo runs a function eagerly while a dispatch mode is active, and
the kernels of a compiled graph allocate below the dispatcher. So this mode measures with two other tools, after one
untimed step that compiles the forward and backward graphs:

- ``saved_*``: ``torch.autograd.graph.saved_tensors_hooks`` around the compiled calls: the pack hook sees every tensor
  the compiled autograd function saves for backward (AOTAutograd's partitioner chose them); counted once per storage,
  and split into the 16-bit logit chunks themselves (the function's input, kept alive by being saved) and new tensors.
- ``forward_peak`` / ``held_after_forward`` / ``backward_extra``: the CPU allocator's own tally of live bytes, read
  from ``torch.profiler`` (``profile_memory=True``: every allocation and free through c10's CPU allocator, Inductor's
  buffers included, with the running total). It cannot see memory a kernel takes outside that allocator (C++ stack
  or thread-local scratch of a generated kernel: per-thread, a few rows at most), nor allocations made before the
  profile started (the model's weights, the input ids: not part of the loss).

``profiler_eager_check`` is the eager chunked loss measured the same way, to compare the allocator tally with the
dispatch-mode figures of ``--loss torchtune_chunked``.
"""

from __future__ import annotations

import argparse
import json
import weakref
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

VOCAB, SEQ, CHUNKS = 32000, 256, 8


class LiveBytes(TorchDispatchMode):
    """Bytes of live tensor storages created inside the mode, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage._cdata
                if key not in self.live:
                    self.live[key] = storage.nbytes()
                    self.now += storage.nbytes()
                    self.peak = max(self.peak, self.now)
                    weakref.finalize(storage, self._free, key)
        return out

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)


def _model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=SEQ,
                      tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    for p in model.parameters():
        p.requires_grad_(False)
    model.model.embed_tokens.weight.requires_grad_(True)  # the hidden states need a gradient, as under LoRA
    return model


def _chunked_loss(model, ids):
    """torchtune's CEWithChunkedOutputLoss as its recipes run it: the LM head on 8 slices of the hidden states, each
    chunk upcast and summed into the loss on its own, the chunks dropped before backward."""
    hidden = model.model(input_ids=ids).last_hidden_state
    chunks = [model.lm_head(h) for h in hidden.tensor_split(CHUNKS, dim=1)]
    labels = ids.tensor_split(CHUNKS, dim=1)
    total = 0.0
    for logits, target in zip(chunks, labels):
        total = total + F.cross_entropy(logits.reshape(-1, VOCAB).float(), target.reshape(-1), reduction="sum")
    return total / ids.numel()


def _chunk_cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """One chunk's loss as torchtune's ``compute_cross_entropy`` computes it: upcast to fp32, summed cross-entropy."""
    return F.cross_entropy(logits.float(), labels, ignore_index=-100, reduction="sum")


def _tt_forward(model, ids, chunk_loss: Callable, on_chunk_loss: Callable = lambda f: f()) -> torch.Tensor:
    """torchtune's recipe step up to backward: ``TransformerDecoder.chunked_output`` (the LM head on each of
    ``h.chunk(8, dim=1)``), the loss over the chunks (each reshaped to tokens x vocab, its labels alike; inside the
    profiler range ``probe_loss``), the recipe's ``del logits``. ``on_chunk_loss`` wraps each chunk's loss call (the
    saved-tensor hooks)."""
    from torch.profiler import record_function

    hidden = model.model(input_ids=ids).last_hidden_state
    logits = [model.lm_head(h) for h in hidden.chunk(CHUNKS, dim=1)]
    labels = [t.reshape(-1) for t in ids.chunk(CHUNKS, dim=1)]
    total = 0.0
    with record_function("probe_loss"):
        for chunk, target in zip([c.reshape(-1, c.size(-1)) for c in logits], labels):
            total = total + on_chunk_loss(lambda: chunk_loss(chunk, target))
    del logits, chunk  # the recipe's del logits: only what the loss saved keeps a chunk alive now
    return total / ids.numel()


def _allocator_tally(step: Callable[[], torch.Tensor], loss_backward: str = "") -> dict[str, int]:
    """Bytes from the CPU allocator's running total of live bytes as torch.profiler records it (allocations made
    inside the profile only): the peak of the whole forward (``forward_peak``), the peak while the loss runs over
    the chunks (``loss_forward_peak``: the LM head's own transients excluded), what is left after the forward
    (``held``), the extra peak of the whole backward over it (``backward_extra``) and, where ``loss_backward`` names
    the loss's backward node, the extra peak while those nodes run (``loss_backward_extra``)."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with record_function("probe_forward"):
            value = step()
        with record_function("probe_backward"):
            value.backward()
        del value
    allocs, spans = [], {}

    def walk(events) -> None:
        for e in events:
            if e.tag == _EventType.Allocation and str(e.extra_fields.device) == "cpu":
                allocs.append((e.start_time_ns, e.extra_fields.total_allocated))
            elif e.name in ("probe_forward", "probe_backward", "probe_loss") or (
                    loss_backward and e.name.startswith("autograd::engine::evaluate_function: " + loss_backward)):
                spans.setdefault(e.name.split(": ")[-1], []).append((e.start_time_ns, e.end_time_ns))
            walk(e.children)

    walk(prof.profiler.kineto_results.experimental_event_tree())
    allocs.sort()

    def peak(name: str, floor: int = 0) -> int:
        return max([total for t, total in allocs for a, b in spans.get(name, ()) if a <= t <= b], default=floor)

    f1 = spans["probe_forward"][0][1]
    held = ([total for t, total in allocs if t <= f1] or [0])[-1]
    out = {"forward_peak": peak("probe_forward"), "loss_forward_peak": peak("probe_loss"), "held": held,
           "backward_extra": peak("probe_backward", held) - held}
    if loss_backward:
        assert spans.get(loss_backward), f"no {loss_backward} node ran"
        out["loss_backward_extra"] = peak(loss_backward, held) - held
    return out


def _saved_for_backward(model, ids, chunk_loss: Callable) -> dict[str, int]:
    """Bytes the chunk losses save for backward (once per storage), split into the logit chunks they were given and
    new tensors, seen by saved-tensor pack hooks around each chunk's loss call."""
    storages: dict[int, tuple[int, bool]] = {}
    inputs: set[int] = set()

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        storages.setdefault(s.data_ptr(), (s.nbytes(), s.data_ptr() in inputs))
        return t

    def wrapped(chunk, target):
        inputs.add(chunk.untyped_storage().data_ptr())
        return chunk_loss(chunk, target)

    def hooked(call):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            return call()

    value = _tt_forward(model, ids, wrapped, hooked)
    value.backward()
    return {"saved_logit_chunks": sum(n for n, is_input in storages.values() if is_input),
            "saved_other": sum(n for n, is_input in storages.values() if not is_input)}


def measure_compiled(batch: int) -> dict:
    """torchtune's chunked loss with its chunk function compiled by Inductor (see the module docstring)."""
    import transformers
    from torch._dynamo.utils import counters

    model = _model()
    ids = torch.randint(0, VOCAB, (batch, SEQ))
    compiled = torch.compile(_chunk_cross_entropy, backend="inductor")
    _tt_forward(model, ids, compiled).backward()  # compiles the forward and backward graphs
    graphs = counters["stats"]["unique_graphs"]
    tally = _allocator_tally(lambda: _tt_forward(model, ids, compiled), "CompiledFunctionBackward")
    saved = _saved_for_backward(model, ids, compiled)
    eager = _allocator_tally(lambda: _tt_forward(model, ids, _chunk_cross_entropy))
    assert counters["stats"]["unique_graphs"] == graphs, "recompiled while measuring"
    per = batch * SEQ * VOCAB
    r = lambda v: round(v / per, 3)  # noqa: E731
    return {"torch": torch.__version__, "transformers": transformers.__version__, "loss": "torchtune_chunked_compiled",
            "batch": batch, "compiled_graphs": graphs,
            "forward_peak_per_logit": r(tally["forward_peak"]), "loss_forward_peak_per_logit": r(tally["loss_forward_peak"]),
            "held_after_forward_per_logit": r(tally["held"]), "backward_extra_per_logit": r(tally["backward_extra"]),
            "loss_backward_extra_per_logit": r(tally["loss_backward_extra"]),
            "saved_logit_chunks_per_logit": r(saved["saved_logit_chunks"]),
            "saved_other_per_logit": r(saved["saved_other"]),
            "profiler_eager_check": {"forward_peak_per_logit": r(eager["forward_peak"]),
                                     "loss_forward_peak_per_logit": r(eager["loss_forward_peak"]),
                                     "held_after_forward_per_logit": r(eager["held"]),
                                     "backward_extra_per_logit": r(eager["backward_extra"])}}


def measure(batch: int, loss: str) -> dict:
    import transformers

    model = _model()
    ids = torch.randint(0, VOCAB, (batch, SEQ))
    mode = LiveBytes()
    with mode:
        if loss == "torchtune_chunked":
            value = _chunked_loss(model, ids)
        else:
            out = model(input_ids=ids, labels=ids)
            value = out.loss
            del out  # Trainer's compute_loss returns the loss only
        forward_peak, held = mode.peak, mode.now
        mode.peak = mode.now
        value.backward()
        backward_extra = mode.peak - held
    per = batch * SEQ * VOCAB
    return {"transformers": transformers.__version__, "loss": loss, "batch": batch,
            "forward_peak_per_logit": round(forward_peak / per, 3), "held_after_forward_per_logit": round(held / per, 3),
            "backward_extra_per_logit": round(backward_extra / per, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--loss", choices=("hf", "torchtune_chunked", "torchtune_chunked_compiled"), default="hf")
    args = parser.parse_args()
    torch.manual_seed(0)
    if args.loss == "torchtune_chunked_compiled":
        print(json.dumps(measure_compiled(args.batch)))
    else:
        print(json.dumps(measure(args.batch, args.loss)))


if __name__ == "__main__":
    main()
