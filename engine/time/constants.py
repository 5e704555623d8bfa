"""The step-time model's few fitted global constants, in one record, and the scope that may override them.

Every other rate and count of :mod:`engine.time` comes from a named source (datasheets, measured matmul tables,
kernel papers, library code). These constants are the ones no source pins down to one value; each is fitted once
over the published throughput rows (:mod:`engine.validation.crossval` refits them leaving one source out, which is
the accuracy the product publishes). They are global: never per row, per model or per source.

:func:`current` is what the model reads. :func:`using` overrides the record for the calls inside a ``with`` block
(a :class:`contextvars.ContextVar`, so it is local to a thread / task): cross-validation evaluates the model at other
values without any module-level state changing. Caches that hold seconds (``engine.time.rates.gpu_rates``, the
scale-out work cache) key on the record.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, fields, replace
from typing import Iterator


@dataclass(frozen=True, slots=True, eq=False)
class TimeConstants:
    """The fitted constants (see each field's comment for what it scales and where it was fitted).

    Compared and hashed by identity (``eq=False``): the caches that key on the record in force then cost a pointer,
    not five floats, on every step-time call (benchmarks/bench_engine.py); compare values with :meth:`as_dict`.

    - ``gemm_efficiency``: share of the measured maximum-achievable matmul rate (MAMF) a training step's GEMMs
      reach on average (``engine.time.rates``). MAMF is the best shape of a brute-force search on a warm idle GPU;
      a step's GEMMs have the model's shapes and run under sustained power.
    - ``eager_host_factor``: host time per kernel of an eager Hugging Face training stack (Trainer + PEFT wrapper
      modules, accelerate's autocast and hooks, bitsandbytes' Python wrappers) / that of a plain PyTorch loop over the
      same transformers model (``engine.time.overhead.SECONDS_PER_KERNEL``, measured on the plain loop).
    - ``attention_efficiency``: share of FlashAttention-2's published H100 kernel rates (forward and backward apart,
      by sequence length, ``engine.time.attention.flash_rates``) a training step reaches on Hopper GPUs.
    - ``network_efficiency``: share of the NIC's line rate NCCL's ring reaches between nodes (nccl-tests busbw).
    - ``power_exponent``: a GPU held below its TDP runs its compute at (cap / TDP) ** this (``engine.time.rates
      .power_limited``). Prior 1/3: CMOS dynamic power P = C V^2 f with the voltage scaled with the clock in the DVFS
      range gives f ~ P^(1/3).
    """

    gemm_efficiency: float = 0.80
    eager_host_factor: float = 1.5
    attention_efficiency: float = 0.7
    network_efficiency: float = 0.96
    power_exponent: float = 0.75

    def with_values(self, **values: float) -> "TimeConstants":
        """A copy with ``values`` replaced (names of the fields)."""
        return replace(self, **values)

    def as_dict(self) -> dict[str, float]:
        """Field name -> value."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


FITTED = TimeConstants()
"""The values the product uses: the in-sample best over every compared row (benchmarks/validate_time.py prints the
fit and its leave-one-source-out cross-validation; the Methodology page shows both). Fitted on the 158 compared rows
of data/throughput_measurements.csv and data/large_runs.csv; what pins each one down: ``gemm_efficiency`` the packed
one-node rows (torchtune, ml-engineering, NeMo AutoModel, Megatron-LM, Korthikanti; torchtune's RTX 4090 rows since the card
runs at its measured matmul rate, not 0.80 x its datasheet); ``eager_host_factor`` the
Hugging Face stack rows (ms-swift, LlamaFactory: in sample 1.5, and 1.5 with either source left out since Qwen v1's
fused flash-attn rotary kernel is counted, engine.time.overhead.FLASH_ROTARY_KERNELS; before, ms-swift's Qwen rows
wanted 1.0 and LlamaFactory's LoRA rows, predicted with it, came out 35-41% too fast); ``attention_efficiency`` the long-sequence Hopper rows
(torchtitan's CP sweep, NeMo, ml-engineering's 8k B200 rows; 0.7 since nanotron's rows run its fused kernels, was 0.8);
``network_efficiency`` the multi-node InfiniBand rows of Megatron-LM's H100 table (16B-314B) and NeMo (Mixtral 8x7B,
Llama 2 70B, Nemotron 340B), which the model times too slow below 0.96; it is InfiniBand's share only: nanotron's rows
ran on AWS EFA, whose share and step latency are their own record's (``engine.time.fabrics.EFA``, from nccl-tests on p5
and AWS's NCCL tuner), so this constant no longer moves them; ``power_exponent`` torchtitan's 500 W
H100 rows (the only rows that state a cap: left out, the prior 1/3 is used)."""

_CURRENT: ContextVar[TimeConstants] = ContextVar("time_constants", default=FITTED)


def current() -> TimeConstants:
    """The constants in force (:data:`FITTED` unless inside :func:`using`)."""
    return _CURRENT.get()


@contextmanager
def using(constants: TimeConstants) -> Iterator[TimeConstants]:
    """Evaluate the model with ``constants`` inside the ``with`` block (restored on exit, also on an error)."""
    token = _CURRENT.set(constants)
    try:
        yield constants
    finally:
        _CURRENT.reset(token)
