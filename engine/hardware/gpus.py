"""The GPU catalog (``data/gpus.csv``) and GPU prices (``data/gpu_prices.csv``), validated on load.

``gpus.csv`` has one row per GPU a framework sees as one device (an MI250X package is two such devices,
so its row is one GCD). Per row:

- ``memory_gib``: advertised capacity (binary GiB for these parts); ``usable_mib``: what the software
  stack reports as the device's total: ``nvidia-smi``'s "Total" on Linux with the default ECC setting
  (ECC on GDDR6 datacenter parts keeps 1/16 of the memory, hence T4 15360 MiB out of 16 GiB), or
  ``rocm-smi``'s VRAM total on AMD. ``usable_source`` says, per row, where the number comes from or
  the rule that derived it. PyTorch can report up to ~2% less than nvidia-smi (the driver's reserve;
  e.g. T4 15102 MiB, A100 40GB 40441-40654 MiB depending on the driver), and the CUDA context and the
  caching allocator take more on top: neither is subtracted here (see ``engine.memory.estimate.NOT_MODELLED``).
- dense tensor TFLOP/s in bf16, fp16, fp8 and non-tensor fp32 (empty = not supported or not published).
  Datasheets print sparse figures with an asterisk; those are halved. GeForce cards run fp16/bf16 with
  fp32 accumulation (what training uses) at half their fp16-accumulate rate: that figure is kept.
- memory bandwidth (GB/s), bf16/fp8 support, PCIe generation, GPU-to-GPU link bandwidth (NVLink or
  Infinity Fabric, GB/s both directions as datasheets print it; 0 = none), the datasheet URL and notes.
- for the step-time model (:mod:`engine.time`): ``compute_capability`` (CUDA ``major.minor``; empty on AMD,
  whose gfx target is in ``rates_source``), ``sm_count`` (SMs, or compute units on AMD), the *measured*
  achievable matmul rate ``matmul_bf16_tflops`` / ``matmul_fp16_tflops`` with ``matmul_source`` (Stas Bekman's
  maximum-achievable-matmul-FLOPS table, stas00/ml-engineering@744d01e1 compute/accelerator/README.md, or another
  published measurement named in the cell; at most :data:`MEASURED_OVER_PEAK` x the dense peak; empty
  where nobody published one: the time model then takes a documented fraction of the dense peak),
  ``nvlink_gbps_per_direction`` and ``pcie_gbps_per_direction`` (GB/s one way per GPU, the figure collectives
  are limited by), ``p2p`` (False: GeForce 40/50 cards, whose stock driver has no peer-to-peer over PCIe, so
  NCCL stages traffic through host memory) and ``rates_source``.
- a citation many rows share is written once in ``data/gpu_sources.csv`` and a cell cites it as ``[id]`` at its start
  (:mod:`engine.hardware.sources`; the loaded rows carry the full text).

``gpu_prices.csv`` keeps several price sources side by side: ``gpu, source_name, on_demand_usd_per_hour,
spot_usd_per_hour, date, url, note``. Every row carries its date and source; an empty spot price means
the source lists none.

Names resolve forgivingly (:func:`find_gpu`): case, spaces, dashes, underscores, a vendor or brand prefix
(NVIDIA, AMD, GeForce, Tesla, Instinct) and a "GB" after a number do not matter, and aliases such as
"A100-80GB", "H100 SXM" or "RTX 4090" name their GPU. A family name fits several GPUs ("A100": 40GB or 80GB, SXM or
PCIe; "V100": 16GB or 32GB; "H100": SXM, PCIe or NVL), and the variants differ in memory, bandwidth or peak rate, so
each gives other numbers. Published runs and scripts say "A100" or "H100" all the time, so such a name is not
refused: when it is the alias of one GPU in ``gpus.csv`` (the catalog's declared default: "A100" -> NVIDIA A100 80GB,
"H100" -> NVIDIA H100 80GB, the SXM board, "V100" -> NVIDIA V100 16GB) it resolves to that GPU, and
:func:`gpu_name_note` says so and names the other GPUs it fits, for every caller to show (the CLI's warnings, the
app's link and import warnings): never silently. A name that fits several GPUs and is nobody's alias ("A100 SXM")
has no declared default and is refused with the candidates (:class:`AmbiguousGpuError`). This module has no
Streamlit import.
"""

from __future__ import annotations

import datetime as dt
import difflib
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from engine.errors import AmbiguousGpuError, CatalogError, validated_row
from engine.files import csv_rows, data_file
from engine.hardware.sources import expand_sources

GIB = 1024**3
MIB = 1024**2

GPUS_FILE = "gpus.csv"
PRICES_FILE = "gpu_prices.csv"

_OPTIONAL_NUMBERS = ("bf16_tflops", "fp16_tflops", "fp32_tflops", "fp8_tflops", "spot_usd_per_hour")
MEASURED_OVER_PEAK = 1.05
"""How far a measured matmul rate may exceed the datasheet's dense peak: GPU Boost above the rated boost clock (the
RTX 4090's measured 166.6 TFLOP/s bf16 is 1.01 x its 165.2)."""

_OPTIONAL_RATES = ("compute_capability", "sm_count", "matmul_bf16_tflops", "matmul_fp16_tflops",
                   "nvlink_gbps_per_direction", "pcie_gbps_per_direction")


MAX_MEMORY_GIB = 4096.0
"""Most memory one GPU may have (GiB): 14x the largest shipping today (288 GB: B300, MI355X). An edited table's
``1e308`` would pass every check that compares it with a model, and is a typo."""
MAX_USD_PER_GPU_HOUR = 1000.0
"""Highest price of one GPU-hour accepted (USD): about 100x any listed (the bundled sources price an H200 or B200
at a few dollars). ``1e308`` would make every cost of a plan overflow to infinity."""


class Gpu(BaseModel):
    """One GPU (as one device) with its memory, throughput, links and sources. See the module docstring."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)  # NaN/inf in an edited table: an error

    name: str = Field(min_length=1)
    vendor: Literal["NVIDIA", "AMD"]
    segment: Literal["consumer", "workstation", "datacenter", "cloud"]
    aliases: tuple[str, ...] = ()
    memory_gib: float = Field(gt=0, le=MAX_MEMORY_GIB)
    usable_mib: int = Field(gt=0)
    usable_source: str = Field(min_length=1)
    bf16_tflops: float | None = Field(default=None, gt=0)
    fp16_tflops: float | None = Field(default=None, gt=0)
    fp32_tflops: float | None = Field(default=None, gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    memory_bandwidth_gbps: float = Field(gt=0)
    bf16: bool
    fp8: bool
    pcie_gen: int = Field(ge=1, le=7)
    gpu_link_gbps: float = Field(ge=0)
    interconnect: str = ""
    compute_capability: float | None = Field(default=None, gt=0)
    sm_count: int | None = Field(default=None, gt=0)
    matmul_bf16_tflops: float | None = Field(default=None, gt=0)
    matmul_fp16_tflops: float | None = Field(default=None, gt=0)
    matmul_source: str = ""
    nvlink_gbps_per_direction: float | None = Field(default=None, ge=0)
    pcie_gbps_per_direction: float | None = Field(default=None, gt=0)
    p2p: bool = True
    rates_source: str = ""
    datasheet_url: str = Field(pattern=r"^https://")
    notes: str = ""

    @field_validator("aliases", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return tuple(a.strip() for a in value.split(";") if a.strip()) if isinstance(value, str) else value

    @field_validator(*_OPTIONAL_NUMBERS[:4], mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(*_OPTIONAL_RATES, mode="before")
    @classmethod
    def _empty_rate_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("p2p", mode="before")
    @classmethod
    def _empty_p2p_is_true(cls, value: Any) -> Any:
        return True if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _consistent(self) -> "Gpu":
        if self.usable_mib > self.memory_gib * 1024:
            raise ValueError(f"usable_mib {self.usable_mib} exceeds the capacity ({self.memory_gib:g} GiB = {self.memory_gib * 1024:.0f} MiB)")
        if self.bf16 != (self.bf16_tflops is not None):
            raise ValueError("bf16 flag and bf16_tflops disagree (bf16_tflops must be empty exactly when bf16 is false)")
        if self.fp8 != (self.fp8_tflops is not None):
            raise ValueError("fp8 flag and fp8_tflops disagree (fp8_tflops must be empty exactly when fp8 is false)")
        if (self.matmul_bf16_tflops or self.matmul_fp16_tflops) and not self.matmul_source.strip():
            raise ValueError("a measured matmul rate needs its matmul_source")
        # A datasheet peak is at the rated boost clock; GeForce cards' GPU Boost runs above it when power allows (RTX
        # 4090: torch.mm measures 162-173 TFLOP/s against the whitepaper's 165.2), so a measurement may pass the peak
        # by a few percent; more is a typo.
        for measured, peak in ((self.matmul_bf16_tflops, self.bf16_tflops), (self.matmul_fp16_tflops, self.fp16_tflops)):
            if measured is not None and (peak is None or measured > peak * MEASURED_OVER_PEAK):
                raise ValueError(f"measured matmul rate {measured} exceeds the dense peak {peak} by more than "
                                 f"{MEASURED_OVER_PEAK - 1:.0%}")
        return self

    @property
    def memory_bytes(self) -> int:
        """Advertised memory in bytes."""
        return int(self.memory_gib * GIB)

    @property
    def usable_memory_bytes(self) -> int:
        """The device total the software stack reports (``usable_mib``), in bytes: what fits are checked against."""
        return self.usable_mib * MIB


class GpuPrice(BaseModel):
    """Price of one GPU-hour from one source on one date. ``gpu`` is the catalog name."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    gpu: str = Field(min_length=1)
    source_name: str = Field(min_length=1)
    on_demand_usd_per_hour: float = Field(gt=0, le=MAX_USD_PER_GPU_HOUR)
    spot_usd_per_hour: float | None = Field(default=None, gt=0, le=MAX_USD_PER_GPU_HOUR)
    date: dt.date
    url: str = Field(min_length=1)
    note: str = ""

    @field_validator("spot_usd_per_hour", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value


@lru_cache(maxsize=8)
def _load_gpus(path: Path) -> tuple[Gpu, ...]:
    # shared citations are written once in data/gpu_sources.csv and cited by [id] (engine.hardware.sources)
    return gpus_from_rows(expand_sources(csv_rows(path), path.name), path.name)


def gpus_from_rows(rows: Sequence[tuple[int, Mapping[str, Any]]], source: str) -> tuple[Gpu, ...]:
    """Validate GPU rows (fields as the columns of ``data/gpus.csv``) given as (row number, row) pairs.

    Used for the bundled file and for a table a user edited in the app.

    Raises:
        CatalogError: a bad row, named by ``source``, its number, its name and the field at fault; two
            rows claiming the same name or alias; no rows.
    """
    gpus: list[Gpu] = []
    seen: dict[str, str] = {}
    for line, row in rows:
        label = f"{source} row {line} ({row.get('name')!r})"
        gpu = validated_row(Gpu, row, label)
        for key in {_key(gpu.name), *(_key(a) for a in gpu.aliases)}:
            if key in seen:
                raise CatalogError(f"{label}: name or alias {key!r} already names {seen[key]!r}")
            seen[key] = gpu.name
        gpus.append(gpu)
    if not gpus:
        raise CatalogError(f"{source} lists no GPU")
    return tuple(gpus)


def load_gpus(path: str | Path | None = None) -> tuple[Gpu, ...]:
    """Every GPU of ``data/gpus.csv`` (or of ``path``), in file order.

    Raises:
        CatalogError: a bad row, named by its line number (header = 1), its name and the field at fault;
            or two rows claiming the same name or alias.
    """
    return _load_gpus(Path(path) if path is not None else data_file(GPUS_FILE))


@lru_cache(maxsize=8)
def _load_prices(path: Path, gpus_path: Path) -> tuple[GpuPrice, ...]:
    return prices_from_rows(csv_rows(path), _load_gpus(gpus_path), path.name)


def prices_from_rows(
    rows: Sequence[tuple[int, Mapping[str, Any]]], gpus: tuple[Gpu, ...], source: str
) -> tuple[GpuPrice, ...]:
    """Validate price rows (columns of ``data/gpu_prices.csv``) against ``gpus``, GPU names resolved.

    Raises:
        CatalogError: a bad row (missing date or source, non-positive price, unknown GPU, a second row of one GPU and
            source), named by its number.
    """
    prices = []
    seen: dict[tuple[str, str], int] = {}
    for line, row in rows:
        label = f"{source} row {line} ({row.get('gpu')!r}, {row.get('source_name')!r})"
        price = validated_row(GpuPrice, row, label)
        try:
            gpu = _resolve(price.gpu, gpus)
        except CatalogError as exc:
            raise CatalogError(f"{label}: {exc}") from None
        # One price per GPU and source: a second row would be taken or not by the order of a search, without a word.
        key = (gpu.name, price.source_name.strip().casefold())
        if key in seen:
            raise CatalogError(f"{label}: {source} row {seen[key]} already prices {gpu.name} for that source; keep one row")
        seen[key] = line
        prices.append(price.model_copy(update={"gpu": gpu.name}))
    return tuple(prices)


def load_prices(path: str | Path | None = None, gpus_path: str | Path | None = None) -> tuple[GpuPrice, ...]:
    """Every price row of ``data/gpu_prices.csv`` (or ``path``), GPU names resolved to catalog names.

    Raises:
        CatalogError: a bad row (missing date or source, non-positive price, unknown GPU), named by its line.
    """
    return _load_prices(
        Path(path) if path is not None else data_file(PRICES_FILE),
        Path(gpus_path) if gpus_path is not None else data_file(GPUS_FILE),
    )


def spot_sources(prices: Sequence[GpuPrice] | None = None) -> list[str]:
    """The price sources that list a spot price for at least one GPU, in file order (``prices``: the rows to read,
    default :func:`load_prices`)."""
    rows = load_prices() if prices is None else prices
    return list(dict.fromkeys(p.source_name for p in rows if p.spot_usd_per_hour is not None))


def prices_for(gpu: Gpu | str) -> list[GpuPrice]:
    """Price rows of one GPU (any accepted name), cheapest on-demand first."""
    name = gpu.name if isinstance(gpu, Gpu) else find_gpu(gpu).name
    return sorted((p for p in load_prices() if p.gpu == name), key=lambda p: p.on_demand_usd_per_hour)


# --------------------------------------------------------------------------------------------------
# Name resolution

_BRANDS = re.compile(r"\b(nvidia|amd|geforce|tesla|instinct|quadro|radeon)\b")


def _key(name: str) -> str:
    """Canonical form of a GPU name: lower case, no brand words, "80GB" -> "80", letters and digits only."""
    text = _BRANDS.sub(" ", name.lower())
    text = re.sub(r"(\d)\s*gb\b", r"\1", text)
    return re.sub(r"[^a-z0-9]", "", text)


def _words(name: str) -> frozenset[str]:
    """The words of a GPU name in canonical form: ``"Tesla V100-SXM2-16GB"`` -> {"v100", "sxm2", "16"}."""
    text = re.sub(r"(\d)\s*gb\b", r"\1", _BRANDS.sub(" ", name.lower()))
    return frozenset(w for w in re.split(r"[^a-z0-9]+", text) if w)


def variants(name: str, gpus: tuple[Gpu, ...]) -> list[str]:
    """Catalog names of the GPUs ``name`` could mean: those whose name or an alias has every word of ``name``
    ("A100" -> the four A100s; "H100 SXM" -> the H100 80GB only), in catalog order."""
    wanted = _words(name)
    if not wanted:
        return []
    return [g.name for g in gpus if any(wanted <= _words(n) for n in (g.name, *g.aliases))]


def _match(name: str, gpus: Sequence[Gpu], note: bool = True) -> tuple[Gpu, str | None]:
    """The GPU ``name`` names and the note saying which other GPUs it also fits (None when it names one only).

    A catalog name is the catalog's own and carries no note. Else an alias names its GPU: aliases are unique in a
    table (:func:`gpus_from_rows`), so the alias is the table's declared default for that text; the note lists the
    other GPUs :func:`variants` finds for it (computed only when ``note``: resolving a name needs none). A name that
    fits several GPUs and is no alias has no default.

    Raises:
        AmbiguousGpuError: the name fits several GPUs and is nobody's alias; the message lists them.
        CatalogError: no GPU has that name or alias; the message lists the closest names.
    """
    wanted = _key(name)
    if wanted:
        for gpu in gpus:
            if wanted == _key(gpu.name):
                return gpu, None
        named = next((g for g in gpus if wanted in (_key(a) for a in g.aliases)), None)
        if named is not None and not note:
            return named, None
        candidates = variants(name, tuple(gpus))
        if named is not None:
            others = [c for c in candidates if c != named.name]
            return named, default_gpu_note(name, named.name, others) if others else None
        if len(candidates) > 1:
            raise AmbiguousGpuError(ambiguous_gpu_message(name, candidates), tuple(candidates))
    raise CatalogError(unknown_gpu_message(name, tuple(gpus)))


def _resolve(name: str, gpus: Sequence[Gpu]) -> Gpu:
    """The GPU ``name`` names in ``gpus`` (the rule of :func:`_match`, whose errors it raises), without the note."""
    return _match(name, gpus, note=False)[0]


def default_gpu_note(name: str, chosen: str, others: Sequence[str]) -> str:
    """``"'A100' read as NVIDIA A100 80GB (the catalog's GPU for that name); it also fits NVIDIA A100 40GB, ...: give
    the full name for another"``."""
    return (f"'{name}' read as {chosen} (the catalog's GPU for that name); it also fits {', '.join(others)}: "
            "give the full name for another")


def ambiguous_gpu_message(name: str, candidates: Sequence[str]) -> str:
    """``"ambiguous GPU 'A100 SXM': it names 2 GPUs of the catalog (NVIDIA A100 40GB, NVIDIA A100 80GB) and the catalog
    declares none of them its GPU for that name; give one of these names"``."""
    return (f"ambiguous GPU '{name}': it names {len(candidates)} GPUs of the catalog ({', '.join(candidates)}) and the "
            "catalog declares none of them its GPU for that name; give one of these names")


def unknown_gpu_message(name: str, gpus: tuple[Gpu, ...] | None = None) -> str:
    """``"unknown GPU 'x'; closest: A, B"``, or the whole catalog when no name is close (never an unrelated guess)."""
    gpus = gpus if gpus is not None else load_gpus()
    close = closest_gpus(name, gpus)
    shown = _shown_name(name)
    if close:
        return f"unknown GPU {shown}; closest: {', '.join(close)}"
    nearest = closest_gpus(name, gpus, n=NEAREST_SHOWN, similar=0.0)
    if not name.strip():
        return (f"no GPU named (got {shown}): give a GPU of the catalog, e.g. 'A100 80GB'; the {len(gpus)} GPUs are "
                "listed on the GPUs & prices page and in data/gpus.csv")
    spelling = f" (nearest in spelling: {', '.join(nearest)})" if nearest else ""
    return (f"unknown GPU {shown}: no catalog GPU has a similar name{spelling}; "
            f"the {len(gpus)} GPUs of the catalog are listed on the GPUs & prices page and in data/gpus.csv")


NEAREST_SHOWN = 3
"""How many names an unknown GPU name that is like no catalog name is answered with (not the whole catalog)."""


def _shown_name(name: str, limit: int = 60) -> str:
    """``'name'`` for a message, cut to ``limit`` characters (a pasted paragraph stays a one-line message)."""
    return f"'{name}'" if len(name) <= limit else f"'{name[:limit]}...' ({len(name):,} characters)"


SIMILAR = 0.6
"""Least spelling similarity (difflib's ratio of the canonical names, 0-1) for a name to be suggested: "H300" ~ "H200"
(0.75), "RTX 4070" ~ "RTX 4090" (0.86), while "nonexistent" is close to nothing (at most 0.4)."""


def closest_gpus(name: str, gpus: tuple[Gpu, ...] | None = None, n: int = 3, similar: float = SIMILAR) -> list[str]:
    """Up to ``n`` catalog names closest to ``name``, closest first: names (or aliases) containing it, then names whose
    canonical form is at least ``similar`` (default :data:`SIMILAR`) alike in spelling. Empty when none is close."""
    gpus = gpus if gpus is not None else load_gpus()
    wanted = _key(name)
    if not wanted:
        return []
    scores: dict[str, float] = {}
    for gpu in gpus:
        keys = (_key(gpu.name), *(_key(a) for a in gpu.aliases))
        if any(wanted in k for k in keys):
            score = 2.0  # "a100" names every A100; an exact alias resolved before this
        else:
            # Spelling against the canonical name only: short aliases ("3060") would match any digits.
            score = difflib.SequenceMatcher(None, wanted, keys[0]).ratio()
        if score >= similar:
            scores[gpu.name] = score
    return sorted(scores, key=lambda g: -scores[g])[:n]  # stable: catalog order among equals


def find_gpu(name: str) -> Gpu:
    """Resolve a GPU name forgivingly (see the module docstring): a catalog name, else the GPU whose alias it is,
    even when it also fits others ("A100" -> NVIDIA A100 80GB, the catalog's declared default; say
    :func:`gpu_name_note` to the user).

    Raises:
        AmbiguousGpuError: the name fits several GPUs and is nobody's alias ("A100 SXM"); the message lists them.
        CatalogError: no match; the message lists the closest names.
    """
    return _resolve(name, load_gpus())


def gpu_name_note(name: str, gpus: Sequence[Gpu] | None = None) -> str | None:
    """What a user must be told about reading ``name`` as :func:`find_gpu` does (in ``gpus``, default the catalog):
    None for a catalog name or a name that fits one GPU; for a name that fits several GPUs and is one's alias
    ("A100", "H100", "V100", "A100 PCIe"), which GPU it was read as and the others it fits, e.g. ``"'A100' read as
    NVIDIA A100 80GB (the catalog's GPU for that name); it also fits NVIDIA A100 40GB, NVIDIA A100 40GB PCIe, NVIDIA
    A100 80GB PCIe: give the full name for another"``. The reason: the default keeps scripts and published runs
    that say "A100" working, and the note keeps the choice visible (the variants give other numbers).

    Raises:
        AmbiguousGpuError, CatalogError: as :func:`find_gpu`, for a name it refuses.
    """
    return _match(name, load_gpus() if gpus is None else gpus)[1]
