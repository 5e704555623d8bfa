"""Measure what a causal-LM loss holds per logit, on real CPU tensors (no GPU, no weights).

Counts the bytes of every live tensor storage (a TorchDispatchMode sees each new storage, a weakref callback its
release) while a tiny Qwen2 model with a large vocabulary runs its forward with ``labels`` (the loss of the installed
transformers) and then backward, the way Trainer runs a step: the model's outputs are dropped before backward.
The rest of the tiny model is small, so bytes / (batch x seq x vocab) is the loss path's bytes per logit, within
about 0.3 B. ``engine.memory.loss_paths`` models these figures; tests/memory/test_loss_paths.py runs this script.

    python scripts/loss_probe.py [--batch 2] [--loss hf|torchtune_chunked]
    PYTHONPATH=/path/to/transformers-4.41.2 python scripts/loss_probe.py     # another release's loss path

Prints one JSON line: the transformers version, forward peak, bytes held after the forward, and the extra peak of
backward over what the forward left, each per logit.
"""

from __future__ import annotations

import argparse
import json
import weakref

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
    parser.add_argument("--loss", choices=("hf", "torchtune_chunked"), default="hf")
    args = parser.parse_args()
    torch.manual_seed(0)
    print(json.dumps(measure(args.batch, args.loss)))


if __name__ == "__main__":
    main()
