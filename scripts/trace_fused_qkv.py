"""Trace a Qwen (v1) block on fake CUDA tensors: transformers' Llama block with q, k and v fused into one ``c_attn``.

Qwen v1 (``QWenLMHeadModel``) is remote code (``trust_remote_code=True``) that the tracer cannot build offline; its
block is a Llama block whose q/k/v are one ``c_attn`` = Linear(hidden, 3 x hidden, bias=True) (``modeling_qwen.py`` of
Qwen/Qwen-7B), so this script builds Llama with Qwen-7B's sizes (hidden 4096, 32 layers, 32 heads, w1/w2 11,008 =
intermediate_size / 2, vocabulary 151,936, untied) and replaces each attention's q/k/v by the three chunks of one
fused projection. The trace counts 7,721,324,544 parameters, Qwen-7B's published count. ``unfused`` traces the same
model with q/k/v apart. The result is the figure tests/model/test_structure_facts.py checks the estimate against.

Usage: ``python scripts/trace_fused_qkv.py [fused|unfused] [seq_len]`` (prints the trace result as JSON; about 30 s).
Full fine-tuning, mixed bf16, micro batch 1, SDPA, no checkpointing, fused AdamW.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.trace import fake_cuda, worker  # noqa: E402

if not os.environ.get(worker.PRELOADED):  # load the fake CUDA extension before torch, as the worker does
    lib = fake_cuda.build()
    env = dict(os.environ, **{worker.PRELOADED: str(lib)})
    env["LD_PRELOAD"] = " ".join(p for p in (str(lib), env.get("LD_PRELOAD", "")) if p)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(fake_cuda.torch_lib_dir()), env.get("LD_LIBRARY_PATH", "")) if p)
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import torch  # noqa: E402
from torch import nn  # noqa: E402

from engine.scenario.training import Scenario  # noqa: E402
from engine.trace import step  # noqa: E402

QWEN_7B = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
           "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128, "vocab_size": 151936,
           "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "max_position_embeddings": 8192,
           "attention_bias": False, "mlp_bias": False}
"""Qwen-7B-Chat's sizes (data/models/Qwen__Qwen-7B-Chat.json) as a Llama config."""


class FusedQKV(nn.Module):
    """``QWenAttention.c_attn``: one Linear(hidden, 3 x hidden, bias=True); q, k and v are its three chunks."""

    def __init__(self, hidden: int, dtype: torch.dtype):
        super().__init__()
        self.c_attn = nn.Linear(hidden, 3 * hidden, bias=True, dtype=dtype)
        self.key: torch.Tensor | None = None
        self.out: tuple[torch.Tensor, ...] | None = None


class Chunk(nn.Module):
    """Stands in for q_proj / k_proj / v_proj: chunk ``i`` of the fused projection, computed once per input."""

    def __init__(self, fused: FusedQKV, i: int):
        super().__init__()
        object.__setattr__(self, "fused", fused)  # not a submodule: its parameters belong to the attention's qkv
        self.i = i

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.fused
        if f.key is not x:
            f.out, f.key = f.c_attn(x).chunk(3, dim=-1), x
        out = f.out[self.i]
        if self.i == 2:  # LlamaAttention calls v_proj last: keep nothing alive past the layer
            f.out = f.key = None
        return out


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else "fused"
    seq = int(sys.argv[2]) if len(sys.argv) > 2 else 2048
    build = step.build_model

    def build_fused(config, spec, device):
        model = build(config, spec, device)
        if mode == "fused":
            for layer in model.model.layers:
                a = layer.self_attn
                with torch.device(device):
                    a.qkv = FusedQKV(a.q_proj.in_features, a.q_proj.weight.dtype)
                a.q_proj, a.k_proj, a.v_proj = (Chunk(a.qkv, i) for i in range(3))
        return model

    step.build_model = build_fused
    import warnings

    import transformers

    warnings.filterwarnings("ignore")
    transformers.logging.set_verbosity_error()
    sc = Scenario.build(method="full", precision="amp_bf16", seq_len=seq, micro_batch_size=1, attention="sdpa",
                        gradient_checkpointing=False, optimizer="adamw_fused")
    result = step.summarize(step.run(QWEN_7B, sc.model_dump(mode="json")))
    result["versions"] = worker._versions()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
