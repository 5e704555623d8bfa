"""The seed chapters' memory-optimisation checklist as a what-if: from the naive run to yours, one technique at a time.

Source of the checklist: the seed chapters (../shared/seeds/, "Capítulo 3: Entrenamiento eficiente en memoria", the
closing list): mixed precision, gradient checkpointing, gradient accumulation, 8-bit or paged optimizers, DeepSpeed,
QLoRA, shorter sequences, smaller batches. :func:`build_checklist` starts from the **naive** run, full fine-tuning in
fp32 with your AdamW (fused, the Trainer default, unless you chose torch's foreach AdamW) at your micro batch and
sequence length on one GPU, and applies the ticked
techniques one at a time in that order (:data:`ORDER`, the seeds' order: the cheap switches first, then the ones that
change the hardware, the technique or the data). Each step gives the scenario after it, the peak it reaches, the
saving against the step before, and the training speed (:mod:`engine.time.throughput`) so that a technique that trades
speed for memory shows it.

Peaks are the engine's: :func:`engine.memory.estimate.estimate_memory`'s ``total_bytes`` (every tensor at the peak, paged
optimizer states included, as they sit on the GPU while there is room) on one GPU, and
:meth:`engine.memory.parallel.ParallelPlan.per_gpu_bytes` per GPU with DeepSpeed. Bytes throughout; tokens per second of
all the step's GPUs together.

What each step changes (the rest is kept from the step before):

- mixed precision: your 16-bit mode (mixed bf16 if you chose fp32) and your attention kernel;
- gradient checkpointing: on (one more forward per step: +2N FLOPs per token);
- gradient accumulation: your accumulation steps (4 if you use none) at the **same** micro batch. It does not lower
  the peak: what one micro batch keeps alive is unchanged, and with full fine-tuning the gradients also stay alive
  between micro batches (engine.memory). Its use is to keep the effective batch when the micro batch shrinks, which
  the "smaller batches" step does;
- 8-bit or paged optimizer: yours if it is one of them, else bitsandbytes ``paged_adamw_8bit``;
- DeepSpeed: ZeRO-2 or ZeRO-3 over N GPUs (per-GPU peak);
- QLoRA: your LoRA or QLoRA settings (QLoRA with rank 16 on the attention projections if you fine-tune fully);
- shorter sequences: a shorter sequence length (half of yours unless given);
- smaller batches: a smaller micro batch (half of yours unless given), with more accumulation steps keeping the
  effective batch (micro batch x accumulation steps x GPUs).

When the ticks are exactly the techniques your scenario uses (:func:`default_techniques`), a last step, "your other
settings", moves to your exact scenario (another optimizer such as Lion or SGD, the framework, a fused loss, your
GPUs and strategy), so that the final bar is the estimate of your configuration.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict

from engine.model.architecture import Architecture
from engine.errors import ScenarioError
from engine.hardware.gpus import Gpu
from engine.memory.estimate import estimate_memory
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import Strategy, plan_parallel
from engine.scenario.precision import PrecisionMode
from engine.scenario.training import METHOD_LABELS, Attention, Method, Scenario
from engine.time.throughput import estimate_throughput


class Technique(str, Enum):
    """The seeds' checklist items."""

    MIXED_PRECISION = "mixed_precision"
    GRADIENT_CHECKPOINTING = "gradient_checkpointing"
    GRADIENT_ACCUMULATION = "gradient_accumulation"
    EIGHT_BIT_OPTIMIZER = "eight_bit_optimizer"
    DEEPSPEED = "deepspeed"
    QLORA = "qlora"
    SHORTER_SEQUENCES = "shorter_sequences"
    SMALLER_BATCHES = "smaller_batches"


ORDER: tuple[Technique, ...] = tuple(Technique)
"""The order steps are applied in: the seeds' checklist order."""

TECHNIQUE_LABELS = {
    Technique.MIXED_PRECISION: "Mixed precision",
    Technique.GRADIENT_CHECKPOINTING: "Gradient checkpointing",
    Technique.GRADIENT_ACCUMULATION: "Gradient accumulation",
    Technique.EIGHT_BIT_OPTIMIZER: "8-bit / paged optimizer",
    Technique.DEEPSPEED: "DeepSpeed ZeRO",
    Technique.QLORA: "QLoRA",
    Technique.SHORTER_SEQUENCES: "Shorter sequences",
    Technique.SMALLER_BATCHES: "Smaller batches",
}

MEMORY_SAVING_OPTIMIZERS = tuple(o for o in Optimizer if o.record.eight_bit or o.record.paged)
"""Optimizers the "8-bit or paged" item stands for (their records' ``eight_bit`` / ``paged``)."""

DEFAULT_ACCUMULATION = 4
"""Accumulation steps the accumulation step uses when the chosen scenario has none."""

ZERO_STAGES = (Strategy.ZERO2, Strategy.ZERO3)
"""The DeepSpeed stages the checklist offers."""


class ChecklistStep(BaseModel):
    """One step: the scenario after it, its peak (bytes, per GPU), the saving against the step before (bytes,
    positive = less memory) and the training speed (tokens/s of all GPUs; None where the GPU has no peak for the
    precision's compute dtype)."""

    model_config = ConfigDict(frozen=True)

    technique: Technique | None
    label: str
    change: str
    tradeoff: str
    scenario: Scenario
    num_gpus: int
    strategy: Strategy
    peak_bytes: float
    saving_bytes: float
    tokens_per_second: float | None
    speed_note: str = ""

    @property
    def effective_batch(self) -> int:
        """Sequences per optimizer step: micro batch x accumulation steps x GPUs."""
        return self.scenario.micro_batch_size * self.scenario.gradient_accumulation_steps * self.num_gpus


class Checklist(BaseModel):
    """The naive step followed by one step per ticked technique, in :data:`ORDER`."""

    model_config = ConfigDict(frozen=True)

    steps: tuple[ChecklistStep, ...]
    target: Scenario | None = None
    """Your scenario (the one the checklist was built for)."""

    @property
    def naive(self) -> ChecklistStep:
        return self.steps[0]

    @property
    def final(self) -> ChecklistStep:
        return self.steps[-1]

    @property
    def total_saving_bytes(self) -> float:
        """Naive peak minus final peak (= the sum of the steps' savings), bytes."""
        return self.naive.peak_bytes - self.final.peak_bytes

    def speed_change(self, index: int) -> float | None:
        """Tokens/s of step ``index`` over the step before, minus 1 (-0.25 = 25% slower); None when unknown."""
        if index == 0:
            return None
        now, before = self.steps[index].tokens_per_second, self.steps[index - 1].tokens_per_second
        if now is None or before is None:
            return None
        return now / before - 1.0


def _text(value: object) -> str:
    return str(value.value) if isinstance(value, Enum) else str(value)


def naive_scenario(scenario: Scenario) -> Scenario:
    """Full fine-tuning in fp32 with AdamW (``scenario``'s foreach AdamW if it uses it, else the Trainer's default
    fused AdamW), no checkpointing or accumulation, at ``scenario``'s micro batch and sequence length
    (flash-attention, which needs 16 bits, becomes SDPA)."""
    attention = Attention.SDPA if scenario.attention is Attention.FLASH_ATTENTION_2 else scenario.attention
    optimizer = Optimizer.ADAMW if scenario.optimizer is Optimizer.ADAMW else Optimizer.ADAMW_FUSED
    return Scenario.build(method=Method.FULL, precision=PrecisionMode.FP32, optimizer=optimizer,
                          micro_batch_size=scenario.micro_batch_size, seq_len=scenario.seq_len, attention=attention)


def default_techniques(scenario: Scenario, strategy: Strategy = Strategy.DDP) -> frozenset[Technique]:
    """The checklist items ``scenario`` (and a multi-GPU ``strategy``) already uses: the ticks that rebuild it."""
    on = set()
    if scenario.precision is not PrecisionMode.FP32:
        on.add(Technique.MIXED_PRECISION)
    if scenario.gradient_checkpointing:
        on.add(Technique.GRADIENT_CHECKPOINTING)
    if scenario.gradient_accumulation_steps > 1:
        on.add(Technique.GRADIENT_ACCUMULATION)
    if scenario.optimizer in MEMORY_SAVING_OPTIMIZERS:
        on.add(Technique.EIGHT_BIT_OPTIMIZER)
    if strategy in ZERO_STAGES:
        on.add(Technique.DEEPSPEED)
    if scenario.method is not Method.FULL:
        on.add(Technique.QLORA)
    return frozenset(on)


def _apply(t: Technique, sc: Scenario, user: Scenario, seq_len: int, micro_batch: int) -> tuple[dict, str, str, str]:
    """(scenario fields to change, label, what changes, what it costs) for technique ``t``."""
    if t is Technique.MIXED_PRECISION:
        mode = user.precision if user.precision is not PrecisionMode.FP32 else PrecisionMode.AMP_BF16
        return ({"precision": mode, "attention": user.attention}, f"Mixed precision ({mode.value})",
                f"precision fp32 -> {mode.value}" + (f", attention {user.attention.value}" if user.attention is not sc.attention else ""),
                "faster: 16-bit tensor cores; autocast keeps 16-bit copies of the weights for backward")
    if t is Technique.GRADIENT_CHECKPOINTING:
        return ({"gradient_checkpointing": True}, "Gradient checkpointing", "checkpointing on",
                "slower: each block's forward runs again in backward (+2N FLOPs per token)")
    if t is Technique.GRADIENT_ACCUMULATION:
        steps = user.gradient_accumulation_steps if user.gradient_accumulation_steps > 1 else DEFAULT_ACCUMULATION
        return ({"gradient_accumulation_steps": steps}, f"Gradient accumulation ({steps} steps)",
                f"accumulation steps {sc.gradient_accumulation_steps} -> {steps} at the same micro batch",
                "no saving at the same micro batch (one micro batch's tensors are unchanged; full fine-tuning also keeps "
                "the gradients between micro batches); it keeps the effective batch when the micro batch shrinks")
    if t is Technique.EIGHT_BIT_OPTIMIZER:
        opt = user.optimizer if user.optimizer in MEMORY_SAVING_OPTIMIZERS else Optimizer.PAGED_ADAMW_8BIT
        return ({"optimizer": opt}, f"8-bit / paged optimizer ({opt.value})", f"optimizer {sc.optimizer.value} -> {opt.value}",
                "block-wise quantize/dequantize in every step; paged states evicted to CPU under pressure are slow to bring back")
    if t is Technique.QLORA:
        if user.method is Method.FULL:
            fields = {"method": Method.QLORA, "lora_r": 16, "lora_targets": None}
        else:
            fields = {"method": user.method, "lora_r": user.lora_r, "lora_alpha": user.lora_alpha,
                      "lora_targets": user.lora_targets, "quant_type": user.quant_type, "double_quant": user.double_quant,
                      "prepare_kbit_training": user.prepare_kbit_training,
                      "num_virtual_tokens": user.num_virtual_tokens, "modules_to_save": user.modules_to_save}
        method = fields["method"]
        label = ("QLoRA (4-bit base + LoRA)" if method is Method.QLORA
                 else f"{METHOD_LABELS[method]} (frozen base + adapters)")  # LoRA, DoRA, IA3, prompt tuning, ...
        return (fields, label, f"method full -> {method.value}, rank {fields['lora_r']}",
                "frozen base: no weight gradients (4N FLOPs per token instead of 6N); QLoRA dequantizes each 4-bit weight "
                "on every use")
    if t is Technique.SHORTER_SEQUENCES:
        return ({"seq_len": seq_len}, f"Shorter sequences ({seq_len:,} tokens)", f"sequence length {sc.seq_len:,} -> {seq_len:,}",
                "fewer tokens per step; longer examples are truncated or split, which changes the data")
    # SMALLER_BATCHES
    effective = sc.micro_batch_size * sc.gradient_accumulation_steps
    steps = -(-effective // micro_batch)
    return ({"micro_batch_size": micro_batch, "gradient_accumulation_steps": steps},
            f"Smaller batches ({micro_batch} x {steps} accumulation)",
            f"micro batch {sc.micro_batch_size} -> {micro_batch}, accumulation {sc.gradient_accumulation_steps} -> {steps} "
            "(same effective batch)",
            "smaller matrix multiplications use the GPU less well (not modelled: same MFU)")


def build_checklist(
    arch: Architecture,
    scenario: Scenario,
    techniques: frozenset[Technique] | set[Technique],
    gpu: Gpu,
    *,
    zero_strategy: Strategy = Strategy.ZERO2,
    num_gpus: int = 2,
    shorter_seq_len: int | None = None,
    smaller_micro_batch: int | None = None,
    calibration: float = 1.0,
    user_strategy: Strategy = Strategy.DDP,
    user_gpus: int = 1,
) -> Checklist:
    """The naive run and one step per technique of ``techniques``, in :data:`ORDER` (see the module docstring).

    Args:
        arch: the model.
        scenario: your chosen scenario (its precision, optimizer, LoRA settings and attention are the ones the steps use).
        techniques: the ticked checklist items.
        gpu: the GPU the speed is computed for.
        zero_strategy: ``zero2`` or ``zero3`` for the DeepSpeed step; num_gpus: its GPU count (>= 2).
        shorter_seq_len: sequence length of the "shorter sequences" step (default: half of ``scenario.seq_len``).
        smaller_micro_batch: micro batch of the "smaller batches" step (default: half of the micro batch, at least 1).
        calibration: factor on the step-time model's tokens/s (:func:`engine.time.throughput.calibrate`).
        user_strategy, user_gpus: your own multi-GPU setting (the Memory page's), for the "your other settings" step.
    Returns:
        A :class:`Checklist` whose savings sum to the naive peak minus the final peak.
    Raises:
        ScenarioError: a DeepSpeed stage other than ZeRO-2/3, fewer than 2 GPUs for it, a "shorter" sequence not
            shorter than the current one or below 1, a "smaller" micro batch below 1 or not smaller, or LoRA targets
            that match no module of ``arch``.
    """
    if Technique.DEEPSPEED in techniques:
        if zero_strategy not in ZERO_STAGES:
            raise ScenarioError(f"DeepSpeed step: choose zero2 or zero3 (got {zero_strategy.value})")
        if num_gpus < 2:
            raise ScenarioError(f"DeepSpeed step: ZeRO divides memory over at least 2 GPUs (got {num_gpus})")
    seq_len = shorter_seq_len if shorter_seq_len is not None else max(1, scenario.seq_len // 2)
    if Technique.SHORTER_SEQUENCES in techniques and not 1 <= seq_len < scenario.seq_len:
        raise ScenarioError(f"shorter sequences: must be between 1 and {scenario.seq_len - 1:,} tokens (got {seq_len:,})")
    micro = smaller_micro_batch if smaller_micro_batch is not None else max(1, scenario.micro_batch_size // 2)
    if Technique.SMALLER_BATCHES in techniques and (micro < 1 or (micro >= scenario.micro_batch_size and scenario.micro_batch_size > 1)):
        raise ScenarioError(f"smaller batches: must be between 1 and {scenario.micro_batch_size - 1} (got {micro})")

    def step(t: Technique | None, label: str, change: str, tradeoff: str, sc: Scenario, n: int, strategy: Strategy,
             before: float | None) -> ChecklistStep:
        try:
            est = estimate_memory(arch, sc, gpu)  # the GPU decides the attention kernel
        except ScenarioError:
            est = estimate_memory(arch, sc)  # flash_attention_2 before Ampere: memory as on a newer GPU, no speed
        peak = est.total_bytes if n == 1 else plan_parallel(est, arch, sc, strategy).per_gpu_bytes(n)
        try:
            tps: float | None = estimate_throughput(arch, sc, gpu, calibration=calibration, num_gpus=n, strategy=strategy, estimate=est).tokens_per_second
            note = ""
        except ScenarioError as exc:
            tps, note = None, str(exc)
        return ChecklistStep(technique=t, label=label, change=change, tradeoff=tradeoff, scenario=sc, num_gpus=n,
                             strategy=strategy, peak_bytes=peak, saving_bytes=0.0 if before is None else before - peak,
                             tokens_per_second=tps, speed_note=note)

    sc = naive_scenario(scenario)
    n, strategy = 1, Strategy.DDP
    steps = [step(None, "Naive: full fine-tuning, fp32, AdamW", "fp32 weights, gradients and AdamW states; no savings",
                  "the baseline", sc, n, strategy, None)]
    for t in ORDER:
        if t not in techniques:
            continue
        if t is Technique.DEEPSPEED:
            n, strategy = num_gpus, zero_strategy
            label = f"DeepSpeed {zero_strategy.value.replace('zero', 'ZeRO-')} on {num_gpus} GPUs"
            change = f"{num_gpus} GPUs, {zero_strategy.value}: optimizer states and gradients" + (
                " and weights" if zero_strategy is Strategy.ZERO3 else "") + " divided over the GPUs (peak per GPU)"
            tradeoff = "more GPUs: more tokens/s in all, at a scaling efficiency below 1 (communication)"
        else:
            fields, label, change, tradeoff = _apply(t, sc, scenario, seq_len, micro)
            sc = Scenario.build(**{**sc.model_dump(), **fields})
        steps.append(step(t, label, change, tradeoff, sc, n, strategy, steps[-1].peak_bytes))
    if frozenset(techniques) == default_techniques(scenario, user_strategy):
        user_n, user_st = (user_gpus, user_strategy) if user_gpus > 1 else (1, Strategy.DDP)
        changed = [f"{k} {_text(getattr(sc, k))} -> {_text(getattr(scenario, k))}"
                   for k in Scenario.model_fields if getattr(sc, k) != getattr(scenario, k)]
        if (user_n, user_st) != (n, strategy):
            changed.append(f"{user_n} GPU(s), {user_st.value}")
        if changed:
            steps.append(step(None, "Your other settings", "; ".join(changed),
                              "the rest of your scenario, so that the last bar is your configuration",
                              scenario, user_n, user_st, steps[-1].peak_bytes))
    return Checklist(steps=tuple(steps), target=scenario)


__all__ = [
    "Checklist", "ChecklistStep", "DEFAULT_ACCUMULATION", "MEMORY_SAVING_OPTIMIZERS", "ORDER", "TECHNIQUE_LABELS",
    "Technique", "ZERO_STAGES", "build_checklist", "default_techniques", "naive_scenario",
]
