"""A serving plan: one model on GPUs of one kind as tensor-parallel replicas, its fit, KV-cache budget, the most
concurrent sequences at a context, and prefill and decode tokens per second (:mod:`engine.memory.inference` for the
bytes of one rank, :mod:`engine.time.serving` for the speed). The CLI's ``--method inference`` and the Memory page's
serving mode show it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.errors import ScenarioError
from engine.hardware.gpus import Gpu
from engine.memory.inference import (MAX_TENSOR_PARALLEL, InferenceLimits, InferenceScenario, estimate_inference,
                                     inference_limits, tensor_parallel_problems)
from engine.memory.parallel import Strategy
from engine.memory.result import MemoryEstimate
from engine.model.architecture import Architecture
from engine.plan.fit import FitResult, check_fit
from engine.time.serving import ServingSpeed, serving_speed


class ServingPlan(BaseModel):
    """``replicas`` x ``tensor_parallel`` GPUs serving ``scenario``; memory, fit and limits are one rank's."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    scenario: InferenceScenario
    gpu: str
    replicas: int
    estimate: MemoryEstimate
    fit: FitResult
    limits: InferenceLimits
    speed: ServingSpeed | None
    """None when the catalog has no 16-bit peak for the GPU (the reason is in ``notes``)."""
    min_tensor_parallel: int | None
    notes: tuple[str, ...] = ()

    @property
    def num_gpus(self) -> int:
        return self.replicas * self.scenario.tensor_parallel

    @property
    def decode_tokens_per_second(self) -> float | None:
        """Every replica's concurrent sequences together."""
        return None if self.speed is None else self.speed.decode_tokens_per_second * self.replicas

    @property
    def prefill_tokens_per_second(self) -> float | None:
        return None if self.speed is None else self.speed.prefill_tokens_per_second * self.replicas


def _fits(arch: Architecture, isc: InferenceScenario, gpu: Gpu) -> bool:
    return not tensor_parallel_problems(arch, isc.tensor_parallel) and check_fit(arch, isc, gpu).fits


def fewest_tensor_parallel(arch: Architecture, isc: InferenceScenario, gpu: Gpu, most: int = MAX_TENSOR_PARALLEL) -> int | None:
    """The smallest power-of-two tensor-parallel degree up to ``most`` at which one rank of ``isc`` fits on ``gpu``
    (None: none does)."""
    t = 1
    while t <= most:
        if _fits(arch, isc.model_copy(update={"tensor_parallel": t}), gpu):
            return t
        t *= 2
    return None


def serving_plan(arch: Architecture, isc: InferenceScenario, gpu: Gpu, num_gpus: int | None = None,
                 choose_tensor_parallel: bool = False) -> ServingPlan:
    """Serve ``isc`` on ``num_gpus`` x ``gpu`` (default: one replica of ``isc.tensor_parallel`` GPUs).
    ``choose_tensor_parallel``: take the fewest tensor-parallel degree that fits within ``num_gpus`` (as TGI shards a
    model over the GPUs it is given), said in ``notes``.

    Raises:
        ScenarioError: ``num_gpus`` not a multiple of the tensor-parallel degree, or a degree the model cannot be
            split over.
    """
    notes = []
    if choose_tensor_parallel and num_gpus:
        t = fewest_tensor_parallel(arch, isc, gpu, num_gpus)
        if t is not None and t != isc.tensor_parallel:
            isc = isc.model_copy(update={"tensor_parallel": t})
            notes.append(f"tensor parallel {t}: the fewest GPUs per replica on which one rank fits "
                         f"({num_gpus // t} replica{'s' if num_gpus // t > 1 else ''})")
    t = isc.tensor_parallel
    n = num_gpus or t
    if n % t:
        raise ScenarioError(f"{n} GPUs are not a multiple of tensor parallel {t}")
    est = estimate_inference(arch, isc)
    fit = check_fit(arch, isc, gpu, Strategy.DDP, 1, estimate=est)
    speed = None
    try:
        speed = serving_speed(arch, isc, gpu)
    except ValueError as exc:
        notes.append(f"no serving speed: {exc}")
    fewest = None if fit.fits else fewest_tensor_parallel(arch, isc, gpu)
    if fewest is not None:
        notes.append(f"one rank does not fit at tensor parallel {t}; tensor parallel {fewest} fits")
    return ServingPlan(scenario=isc, gpu=gpu.name, replicas=n // t, estimate=est, fit=fit,
                       limits=inference_limits(arch, isc, gpu.usable_memory_bytes), speed=speed,
                       min_tensor_parallel=fewest if not fit.fits else t, notes=tuple(notes))
