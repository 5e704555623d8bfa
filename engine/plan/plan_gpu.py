"""The GPU a plan names (:class:`engine.plan.plans.Plan`'s ``gpu``) in the GPU table it is evaluated against.

A plan saved by the app names its GPU by catalog name, found exactly. A hand-written or older file may say "A100":
the catalog's forgiving lookup (:func:`engine.hardware.gpus.find_gpu`) reads it as the GPU whose alias it is, the
catalog's declared default (NVIDIA A100 80GB), and :func:`plan_gpu_note` says so, for the import's warnings, rather
than refusing a row that published runs write this way; a name of several GPUs that is nobody's alias ("A100 SXM")
is refused with the candidates.
"""

from __future__ import annotations

from typing import Sequence

from engine.errors import AmbiguousGpuError, CatalogError
from engine.hardware.gpus import Gpu, find_gpu, gpu_name_note, load_gpus


def find_plan_gpu(name: str, gpus: Sequence[Gpu] | None = None) -> Gpu:
    """The GPU named exactly ``name`` in ``gpus`` (default: the catalog), else the catalog's forgiving lookup.

    Raises:
        AmbiguousGpuError: a name of several GPUs that is nobody's alias; the message names the candidates.
        CatalogError: ``unknown GPU 'name'`` (not in the catalog, or not in ``gpus``).
    """
    table = load_gpus() if gpus is None else gpus
    for g in table:
        if g.name == name:
            return g
    try:
        found = find_gpu(name)
    except AmbiguousGpuError:
        raise  # its message names the candidates
    except CatalogError:
        raise CatalogError(f"unknown GPU '{name}'") from None
    for g in table:
        if g.name == found.name:
            return g
    raise CatalogError(f"unknown GPU '{name}'")


def plan_gpu_note(name: str, gpus: Sequence[Gpu] | None = None) -> str | None:
    """How :func:`find_plan_gpu` read ``name`` when it fits several GPUs ("'A100' read as NVIDIA A100 80GB (the
    catalog's GPU for that name); it also fits ..."), None for a name of ``gpus`` or a name of one GPU.

    Raises:
        AmbiguousGpuError, CatalogError: as :func:`find_plan_gpu`, for a name it refuses.
    """
    table = load_gpus() if gpus is None else gpus
    if any(g.name == name for g in table):
        return None
    return gpu_name_note(name)
