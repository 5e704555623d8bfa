"""Wall time and cost of a fine-tuning run: tokens to process, hours, GPU-hours, USD.

Time = tokens x epochs / tokens per second (the seed chapter's "Training Time" formula, with the
throughput of all GPUs together from the step-time model, :mod:`engine.time.throughput`); cost = hours x GPUs x price per GPU-hour, on demand and spot, times the
number of experimental runs ("Estimación de Costos en la Nube": 4 h x $4.00 = $16 on demand, 4 h x $1.20
= $4.80 spot on an A100-40GB; 5 runs = $80 / $24).

Prices come from the catalog's price sources (``data/gpu_prices.csv`` via :func:`engine.hardware.gpus.load_prices`):
one named source, or the cheapest price any source lists (:data:`CHEAPEST_LISTED`). A GPU a source does not
price gets no cost and a reason, never an invented price.

The plan search (:func:`search_plans`) tries every GPU kind x count (1, 2, 4, ... 64) with one multi-GPU
strategy, keeps the plans whose per-GPU peak fits the GPU's usable memory (:func:`engine.plan.fit.check_fit`),
and returns their hours and costs, the Pareto front of (hours, cost), the cheapest and the fastest.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.model.architecture import Architecture
from engine.errors import CatalogError, ScenarioError
from engine.plan.fit import check_fit
from engine.plan.verdict import Verdict
from engine.hardware.gpus import Gpu, GpuPrice, find_gpu, load_gpus, load_prices
from engine.memory.result import MemoryEstimate
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.scenario.training import Scenario
from engine.memory.activations import attention_choice
from engine.scenario.precision import precision_spec
from engine.time.band import Band
from engine.time.throughput import Calibration, Throughput, calibrate, estimate_throughput, peak_flops_for
from engine.units import fmt_count


MAX_DATASET_TOKENS = 10**15
"""Largest dataset size accepted (tokens or examples): 1,000 trillion, far above any published training set (~15T
tokens for Llama 3); larger is a typo."""


def _mtok(n: float) -> str:
    """Tokens in millions with two decimals (``34.88M``), in trillions and beyond as :func:`engine.units.fmt_count`
    says them (``10,000.0T``), so a huge dataset does not read as ``10,000,000,000,000.00M``."""
    return f"{n / 1e6:,.2f}M" if n < 1e12 else fmt_count(n)


class Dataset(BaseModel):
    """What one epoch processes. Give ``total_tokens``, or ``examples`` and ``avg_tokens``.

    Without packing every example is padded (or cut) to the sequence length, so an epoch processes
    ``examples x seq_len`` tokens and the padding is wasted compute; with packing, examples are
    concatenated into full sequences and an epoch processes ``examples x avg_tokens``.
    """

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    total_tokens: int | None = Field(None, ge=1, le=MAX_DATASET_TOKENS)
    examples: int | None = Field(None, ge=1, le=MAX_DATASET_TOKENS)
    avg_tokens: float | None = Field(None, gt=0, le=MAX_DATASET_TOKENS)
    epochs: float = Field(1.0, gt=0, le=10_000)
    packing: bool = True
    runs: int = Field(1, ge=1, le=10_000)

    @model_validator(mode="after")
    def _one_size(self) -> "Dataset":
        if self.total_tokens is None and (self.examples is None or self.avg_tokens is None):
            raise ValueError("give the dataset as total tokens, or as examples and average tokens per example")
        return self

    def tokens_per_epoch(self, seq_len: int) -> float:
        """Tokens the GPUs process in one epoch, padding included."""
        if self.examples is None or self.avg_tokens is None:
            return float(self.total_tokens or 0)
        per_example = min(self.avg_tokens, seq_len) if self.packing else seq_len
        return self.examples * per_example

    @property
    def dataset_tokens(self) -> float:
        """Size of the data itself: ``total_tokens``, or ``examples x avg_tokens`` (no padding, one epoch)."""
        if self.examples is None or self.avg_tokens is None:
            return float(self.total_tokens or 0)
        return self.examples * self.avg_tokens

    def scaled(self, factor: float) -> "Dataset":
        """The same dataset ``factor`` times as large (more examples, or more tokens), at least one of either."""
        if factor <= 0:
            raise ValueError("factor must be positive")
        if self.examples is None or self.avg_tokens is None:
            return self.model_copy(update={"total_tokens": max(1, round((self.total_tokens or 0) * factor))})
        return self.model_copy(update={"examples": max(1, round(self.examples * factor))})

    def truncated_tokens(self, seq_len: int) -> float:
        """Tokens of the data cut off because examples are longer than ``seq_len`` (every example is truncated to
        the sequence length, with or without packing: TRL ``SFTTrainer`` ``max_length`` truncation, which its default
        best-fit packing keeps); 0 for a token total."""
        if self.examples is None or self.avg_tokens is None:
            return 0.0
        return self.examples * max(0.0, self.avg_tokens - seq_len)

    def token_notes(self, seq_len: int) -> tuple[str, ...]:
        """What truncation and packing (or padding) do to the token count, in plain words (empty for a token total)."""
        if self.examples is None or self.avg_tokens is None:
            return ()
        per_epoch, data = self.tokens_per_epoch(seq_len), self.dataset_tokens
        notes = []
        cut = self.truncated_tokens(seq_len)
        if cut:
            notes.append(
                f"truncation: each example is cut to the sequence length ({seq_len:,} tokens), so {self.examples:,} examples x "
                f"{self.avg_tokens:,.0f} tokens = {_mtok(data)} tokens of data give {_mtok(per_epoch)} tokens per "
                f"epoch; {_mtok(cut)} ({cut / data:.0%}) are never trained on: raise the sequence length or split the "
                "examples to use them")
        if not self.packing and self.avg_tokens < seq_len:
            notes.append(f"no packing: every example is padded to {seq_len:,} tokens, so an epoch processes "
                         f"{_mtok(per_epoch)} tokens for {_mtok(data)} of data ({self.padding_waste(seq_len):.0%} padding)")
        return tuple(notes)

    def padding_waste(self, seq_len: int) -> float:
        """Fraction of processed tokens that are padding (0 with packing or a token total)."""
        if self.packing or self.examples is None or self.avg_tokens is None:
            return 0.0
        return max(0.0, 1 - self.avg_tokens / seq_len)


CostBasis = Literal["on_demand", "spot"]
"""Which price a cost is on: on-demand or spot."""


class RunCost(BaseModel):
    """Time and money of ``runs`` training runs."""

    model_config = ConfigDict(frozen=True)

    tokens: float
    tokens_per_second: float
    hours: float
    gpu_hours: float
    cost_usd_on_demand: float | None
    cost_usd_spot: float | None
    band_low: float = 1.0
    band_high: float = 1.0
    band_note: str = ""

    @property
    def tokens_per_second_low(self) -> float:
        """Low end of the tokens/s band (:mod:`engine.time.band`)."""
        return self.tokens_per_second * self.band_low

    @property
    def tokens_per_second_high(self) -> float:
        """High end of the tokens/s band."""
        return self.tokens_per_second * self.band_high

    def _range(self, value: float | None) -> tuple[float | None, float | None]:
        return (None, None) if value is None else (value / self.band_high, value / self.band_low)

    @property
    def hours_low(self) -> float:
        """Fewest hours in the band (at the high tokens/s)."""
        return self.hours / self.band_high

    @property
    def hours_high(self) -> float:
        """Most hours in the band (at the low tokens/s)."""
        return self.hours / self.band_low

    @property
    def gpu_hours_range(self) -> tuple[float, float]:
        """(low, high) GPU-hours in the band."""
        return self.gpu_hours / self.band_high, self.gpu_hours / self.band_low

    @property
    def cost_usd_on_demand_range(self) -> tuple[float | None, float | None]:
        """(low, high) on-demand USD in the band (None when unpriced)."""
        return self._range(self.cost_usd_on_demand)

    @property
    def cost_usd_spot_range(self) -> tuple[float | None, float | None]:
        """(low, high) spot USD in the band (None when unpriced)."""
        return self._range(self.cost_usd_spot)

    def cost(self, basis: CostBasis = "on_demand") -> float | None:
        """USD on ``basis`` prices (None: the source lists no such price)."""
        return self.cost_usd_on_demand if basis == "on_demand" else self.cost_usd_spot

    def cost_range(self, basis: CostBasis = "on_demand") -> tuple[float | None, float | None]:
        """(low, high) USD on ``basis`` prices in the 80% band ((None, None): no such price)."""
        return self._range(self.cost(basis))

    def band_record(self) -> dict[str, float | None]:
        """The band's figures under their JSON / CSV names (``*_low`` / ``*_high``)."""
        od, spot = self.cost_usd_on_demand_range, self.cost_usd_spot_range
        return {"tokens_per_second_low": self.tokens_per_second_low, "tokens_per_second_high": self.tokens_per_second_high,
                "hours_low": self.hours_low, "hours_high": self.hours_high,
                "gpu_hours_low": self.gpu_hours_range[0], "gpu_hours_high": self.gpu_hours_range[1],
                "cost_usd_on_demand_low": od[0], "cost_usd_on_demand_high": od[1],
                "cost_usd_spot_low": spot[0], "cost_usd_spot_high": spot[1]}


def run_cost(
    dataset: Dataset,
    seq_len: int,
    tokens_per_second: float,
    num_gpus: int = 1,
    on_demand_usd_per_gpu_hour: float | None = None,
    spot_usd_per_gpu_hour: float | None = None,
    band: Band | None = None,
) -> RunCost:
    """Hours and USD to process ``dataset`` at ``tokens_per_second`` (all GPUs together); ``band`` (the throughput's
    :class:`engine.time.band.Band`) gives every figure its low / high (none: a point, low = high).

    Raises:
        ScenarioError: non-positive throughput or GPU count, or a negative price.
    """
    if tokens_per_second <= 0 or num_gpus < 1:
        raise ScenarioError("throughput must be positive and the GPU count at least 1")
    for price in (on_demand_usd_per_gpu_hour, spot_usd_per_gpu_hour):
        if price is not None and price < 0:
            raise ScenarioError(f"a price per GPU-hour cannot be negative (got {price})")
    tokens = dataset.tokens_per_epoch(seq_len) * dataset.epochs
    hours = tokens / tokens_per_second / 3600 * dataset.runs
    gpu_hours = hours * num_gpus

    def cost(price: float | None) -> float | None:
        return None if price is None else gpu_hours * price

    return RunCost(
        tokens=tokens * dataset.runs,
        tokens_per_second=tokens_per_second,
        hours=hours,
        gpu_hours=gpu_hours,
        cost_usd_on_demand=cost(on_demand_usd_per_gpu_hour),
        cost_usd_spot=cost(spot_usd_per_gpu_hour),
        band_low=band.low if band else 1.0, band_high=band.high if band else 1.0, band_note=band.note if band else "",
    )


DATASET_FACTORS: tuple[float, ...] = tuple(10 ** (k / 4) for k in range(-8, 9))
"""Dataset sizes of :func:`dataset_sweep`, relative to the user's: 1/100 to 100x, four per decade (1 included)."""


def dataset_sweep(
    dataset: Dataset,
    seq_len: int,
    tokens_per_second: float,
    num_gpus: int = 1,
    on_demand_usd_per_gpu_hour: float | None = None,
    spot_usd_per_gpu_hour: float | None = None,
    factors: Sequence[float] = DATASET_FACTORS,
    band: Band | None = None,
) -> list[tuple[Dataset, RunCost]]:
    """:func:`run_cost` of ``dataset`` scaled by each factor (time and cost against dataset size), each with ``band``."""
    out = []
    for f in factors:
        d = dataset.scaled(f)
        out.append((d, run_cost(d, seq_len, tokens_per_second, num_gpus, on_demand_usd_per_gpu_hour, spot_usd_per_gpu_hour,
                                band=band)))
    return out


# --------------------------------------------------------------------------------------------------
# Prices from the catalog's price sources

CHEAPEST_LISTED = "cheapest listed (any source)"
"""Pseudo price source: for each GPU, the row of whichever source lists the lowest on-demand price, with that
row's spot price (None when that source lists none: spot prices of other sources are not mixed in)."""


class PriceQuote(BaseModel):
    """Price of one GPU-hour of ``gpu`` from a price source; None where the source lists none, with ``reason``."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    source: str
    on_demand_usd_per_hour: float | None = None
    spot_usd_per_hour: float | None = None
    on_demand_source: str | None = None
    spot_source: str | None = None
    date: str | None = None
    reason: str | None = None

    def per_hour(self, basis: CostBasis = "on_demand") -> float | None:
        """USD per GPU-hour on ``basis`` (None: the source lists no such price)."""
        return self.on_demand_usd_per_hour if basis == "on_demand" else self.spot_usd_per_hour

    def source_of(self, basis: CostBasis = "on_demand") -> str | None:
        """Where the ``basis`` price was read (None: no such price)."""
        return self.on_demand_source if basis == "on_demand" else self.spot_source


def price_source_names(prices: Sequence[GpuPrice] | None = None) -> list[str]:
    """The price sources of ``data/gpu_prices.csv`` (or ``prices``) in file order, after :data:`CHEAPEST_LISTED`."""
    rows = load_prices() if prices is None else prices
    return [CHEAPEST_LISTED, *dict.fromkeys(p.source_name for p in rows)]


def resolve_price_source(name: str, prices: Sequence[GpuPrice] | None = None) -> str:
    """The source named ``name`` (case and surrounding spaces ignored; "cheapest" = :data:`CHEAPEST_LISTED`).

    Raises:
        CatalogError: no such source; the message lists them.
    """
    wanted = name.strip().lower()
    names = price_source_names(prices)
    if wanted in ("cheapest", "cheapest listed", CHEAPEST_LISTED):
        return CHEAPEST_LISTED
    for n in names:
        if n.lower() == wanted:
            return n
    raise CatalogError(f"unknown price source '{name}'; sources: " + "; ".join(names))


def quote_price(gpu: Gpu | str, source: str = CHEAPEST_LISTED, prices: Sequence[GpuPrice] | None = None) -> PriceQuote:
    """On-demand and spot price of one ``gpu``-hour from ``source`` (one row of ``data/gpu_prices.csv``; with
    :data:`CHEAPEST_LISTED`, the row with the lowest on-demand price). Never invented: a source without that GPU
    (or without a spot price for it) gives None and says so in ``reason``.

    Raises:
        CatalogError: unknown GPU or price source.
    """
    name = gpu.name if isinstance(gpu, Gpu) else find_gpu(gpu).name
    source = resolve_price_source(source, prices)
    rows = [p for p in (load_prices() if prices is None else prices) if p.gpu == name]
    if source != CHEAPEST_LISTED:
        rows = [p for p in rows if p.source_name == source]
    if not rows:
        where = "any price source" if source == CHEAPEST_LISTED else f"'{source}'"
        return PriceQuote(gpu=name, source=source, reason=f"no price for {name} in {where}")
    row = min(rows, key=lambda p: p.on_demand_usd_per_hour)
    reason = None if row.spot_usd_per_hour is not None else f"'{row.source_name}' lists no spot price for {name}"
    return PriceQuote(
        gpu=name, source=source, on_demand_usd_per_hour=row.on_demand_usd_per_hour, spot_usd_per_hour=row.spot_usd_per_hour,
        on_demand_source=row.source_name, spot_source=row.source_name if row.spot_usd_per_hour is not None else None,
        date=row.date.isoformat(), reason=reason,
    )


# --------------------------------------------------------------------------------------------------
# One plan (GPU kind x count x strategy) and the search over all of them

PLAN_GPU_COUNTS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
"""GPU counts the plan search tries for every GPU kind."""


class PlanEstimate(BaseModel):
    """Memory fit, throughput, time and cost of ``dataset`` on ``num_gpus`` x ``gpu`` with ``strategy``."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    num_gpus: int
    strategy: Strategy
    fits: bool
    per_gpu_peak_bytes: float
    headroom_bytes: float
    min_gpus: int | None
    throughput: Throughput
    run: RunCost
    price: PriceQuote
    notes: tuple[str, ...] = ()
    verdict: Verdict = Verdict.FITS
    """fits / tight / does_not_fit (:mod:`engine.plan.verdict`)."""

    @property
    def label(self) -> str:
        """``2 x NVIDIA A100 80GB``."""
        return f"{self.num_gpus} x {self.gpu}"

    def cost(self, basis: CostBasis = "on_demand") -> float | None:
        """USD of the run on ``basis`` prices (None: the source lists no such price)."""
        return self.run.cost(basis)

    def cost_range(self, basis: CostBasis = "on_demand") -> tuple[float | None, float | None]:
        """(low, high) USD of the run on ``basis`` prices in the 80% band ((None, None): no such price)."""
        return self.run.cost_range(basis)

    def record(self) -> dict[str, Any]:
        """A flat row for a table or a CSV download."""
        return {
            "gpu": self.gpu, "num_gpus": self.num_gpus, "strategy": self.strategy.value, "fits": self.fits,
            "verdict": self.verdict.value, "per_gpu_peak_bytes": round(self.per_gpu_peak_bytes), "headroom_bytes": round(self.headroom_bytes),
            "tokens_per_second": round(self.run.tokens_per_second, 1), "hours": self.run.hours,
            **self.run.band_record(),
            "gpu_hours": self.run.gpu_hours, "cost_usd_on_demand": self.run.cost_usd_on_demand,
            "cost_usd_spot": self.run.cost_usd_spot, "on_demand_usd_per_gpu_hour": self.price.on_demand_usd_per_hour,
            "on_demand_source": self.price.on_demand_source, "spot_usd_per_gpu_hour": self.price.spot_usd_per_hour,
            "spot_source": self.price.spot_source, "price_date": self.price.date, "step_time_s": self.throughput.step_time_s,
            "mfu": self.throughput.mfu, "hfu": self.throughput.hfu, "calibration": self.throughput.calibration,
            "attention_kernel": self.throughput.attention_kernel, "link": self.throughput.step.link,
            "peak_dtype": self.throughput.peak.dtype,
            "notes": "; ".join(n for n in (*self.notes, self.price.reason) if n),
        }


def estimate_plan(
    arch: Architecture,
    sc: Scenario,
    dataset: Dataset,
    gpu: Gpu,
    num_gpus: int = 1,
    strategy: Strategy = Strategy.DDP,
    *,
    calibration: float = 1.0,
    fused_kernels: bool = False,
    price_source: str = CHEAPEST_LISTED,
    prices: Sequence[GpuPrice] | None = None,
    estimate: MemoryEstimate | None = None,
    cuda_graphs: bool = False,
) -> PlanEstimate:
    """Fit (:func:`engine.plan.fit.check_fit`), tokens/s (:func:`engine.time.throughput.estimate_throughput`), hours and
    cost of one plan, whether it fits or not (``fits`` says; :func:`search_plans` offers only those that fit).
    One GPU trains without sharding: ``strategy`` applies from 2 GPUs on (ZeRO/FSDP on one GPU would only add
    their buffers and DeepSpeed's fp32 master copy). ``estimate`` (the memory estimate of ``sc``) is reused unless
    ``gpu`` runs another attention kernel (pre-Ampere GPUs: no flash), in which case it is recomputed for ``gpu``.
    ``calibration``: the factor of :func:`engine.time.throughput.calibrate`, applied to tokens/s. ``cuda_graphs``: the
    passes replayed as CUDA graphs (torch.compile's reduce-overhead mode; :func:`engine.time.step.step_time`).

    Raises:
        ScenarioError: invalid calibration or GPU count, no catalog peak for the compute dtype, or
            flash_attention_2 on a pre-Ampere GPU.
        CatalogError: unknown price source.
    """
    if num_gpus == 1:
        strategy = Strategy.DDP
    kernel = attention_choice(arch, sc, precision_spec(sc.precision), gpu).kernel
    est = estimate if estimate is not None and estimate.attention_kernel == kernel else estimate_memory(arch, sc, gpu)
    fit = check_fit(arch, sc, gpu, strategy, num_gpus, estimate=est)
    tp = estimate_throughput(arch, sc, gpu, num_gpus=num_gpus, strategy=strategy, calibration=calibration,
                             fused_kernels=fused_kernels, estimate=est, cuda_graphs=cuda_graphs)
    quote = quote_price(gpu, price_source, prices)
    run = run_cost(dataset, sc.seq_len, tp.tokens_per_second, num_gpus, quote.on_demand_usd_per_hour, quote.spot_usd_per_hour,
                   band=tp.band)
    notes = [n for n in (tp.peak.note, *fit.warnings, *dataset.token_notes(sc.seq_len)) if n]
    if num_gpus > 1 and tp.step.link and tp.step.link.startswith(("PCIe", "InfiniBand")):
        notes.append(f"{strategy.value} traffic between the {num_gpus} GPUs goes over {tp.step.link}")
    return PlanEstimate(
        gpu=gpu.name, num_gpus=num_gpus, strategy=strategy, fits=fit.fits, verdict=fit.verdict,
        per_gpu_peak_bytes=fit.peak_bytes, headroom_bytes=fit.headroom_bytes, min_gpus=fit.min_gpus, throughput=tp, run=run, price=quote, notes=tuple(notes),
    )


def calibration_for(
    arch: Architecture, sc: Scenario, gpu: Gpu, num_gpus: int, strategy: Strategy, measured_tokens_per_second: float | None,
    *, fused_kernels: bool = False, estimate: MemoryEstimate | None = None,
) -> Calibration | None:
    """"Calibrate to my run": the :class:`~engine.time.throughput.Calibration` of a measured tokens/s (all GPUs)
    against the raw prediction of the same plan; None without a measurement.

    Raises:
        ScenarioError: a measurement more than 10x off the prediction, or a plan that cannot be timed.
    """
    if measured_tokens_per_second is None:
        return None
    if num_gpus == 1:
        strategy = Strategy.DDP
    kernel = attention_choice(arch, sc, precision_spec(sc.precision), gpu).kernel
    est = estimate if estimate is not None and estimate.attention_kernel == kernel else estimate_memory(arch, sc, gpu)
    raw = estimate_throughput(arch, sc, gpu, num_gpus=num_gpus, strategy=strategy, fused_kernels=fused_kernels, estimate=est)
    return calibrate(measured_tokens_per_second, raw)


class ExcludedGpu(BaseModel):
    """A GPU kind with no plan in the search, and why."""

    model_config = ConfigDict(frozen=True)

    gpu: str
    reason: str


class PlanSearch(BaseModel):
    """Every plan that fits in memory, the Pareto front of (hours, cost) and the cheapest and fastest plans.

    ``plans``: fitting plans, fastest first. ``pareto``: priced plans no other priced plan beats on both hours
    and cost (``basis`` prices), fastest first. ``cheapest``: lowest cost (fewer hours on ties); ``fastest``:
    fewest hours among all fitting plans (priced or not; cheaper on ties). ``excluded``: GPU kinds with no
    fitting plan at the searched counts, with the reason.
    """

    model_config = ConfigDict(frozen=True)

    strategy: Strategy
    basis: CostBasis
    price_source: str
    counts: tuple[int, ...]
    plans: tuple[PlanEstimate, ...]
    pareto: tuple[PlanEstimate, ...]
    cheapest: PlanEstimate | None
    fastest: PlanEstimate | None
    excluded: tuple[ExcludedGpu, ...]

    def records(self) -> list[dict[str, Any]]:
        """One flat row per fitting plan (a CSV download), with its Pareto / cheapest / fastest flags."""
        front = {(p.gpu, p.num_gpus) for p in self.pareto}
        out = []
        for p in self.plans:
            key = (p.gpu, p.num_gpus)
            out.append({
                **p.record(), "pareto": key in front,
                "cheapest": self.cheapest is not None and key == (self.cheapest.gpu, self.cheapest.num_gpus),
                "fastest": self.fastest is not None and key == (self.fastest.gpu, self.fastest.num_gpus),
            })
        return out

    def for_gpu(self, gpu: str) -> list[PlanEstimate]:
        """Fitting plans of one GPU kind, by GPU count."""
        return sorted((p for p in self.plans if p.gpu == gpu), key=lambda p: p.num_gpus)

    def cheapest_per_gpu(self) -> list[PlanEstimate]:
        """For each GPU kind with a priced plan, its cheapest plan (fewer GPUs on ties), cheapest kind first."""
        best: dict[str, PlanEstimate] = {}
        for p in self.plans:
            c = p.cost(self.basis)
            if c is None:
                continue
            cur = best.get(p.gpu)
            if cur is None or (c, p.num_gpus) < (cur.cost(self.basis) or 0.0, cur.num_gpus):
                best[p.gpu] = p
        return sorted(best.values(), key=lambda p: (p.cost(self.basis) or 0.0, p.run.hours))


def pareto_front(plans: Sequence[PlanEstimate], basis: CostBasis = "on_demand") -> list[PlanEstimate]:
    """Priced plans not dominated on (hours, cost): no other plan is at most as slow and as costly and better in
    one of the two. Fastest first."""
    priced = sorted((p for p in plans if p.cost(basis) is not None), key=lambda p: (p.run.hours, p.cost(basis)))
    front: list[PlanEstimate] = []
    best = float("inf")
    for p in priced:
        c = p.cost(basis)
        assert c is not None
        if c < best:
            front.append(p)
            best = c
    return front


def search_plans(
    arch: Architecture,
    sc: Scenario,
    dataset: Dataset,
    *,
    gpus: Sequence[Gpu] | None = None,
    strategy: Strategy = Strategy.DDP,
    counts: Sequence[int] = PLAN_GPU_COUNTS,
    calibration: float = 1.0,
    fused_kernels: bool = False,
    price_source: str = CHEAPEST_LISTED,
    prices: Sequence[GpuPrice] | None = None,
    basis: CostBasis = "on_demand",
    estimate: MemoryEstimate | None = None,
) -> PlanSearch:
    """Every GPU kind (default: the catalog) x count in ``counts`` with ``strategy``, kept only where the plan
    FITS in memory (:func:`engine.plan.fit.check_fit`): hours and cost of each, the Pareto front, the cheapest
    and the fastest. A plan that does not fit is never in ``plans``, so never cheapest or fastest.

    A GPU kind that cannot run the scenario (no peak for its dtype; flash_attention_2 before Ampere) is in
    ``excluded`` with the reason.

    Raises:
        ScenarioError: invalid calibration or a count outside 1..1024; CatalogError: unknown price source.
    """
    source = resolve_price_source(price_source, prices)
    est = estimate if estimate is not None else estimate_memory(arch, sc)
    plans: list[PlanEstimate] = []
    excluded: list[ExcludedGpu] = []
    for gpu in load_gpus() if gpus is None else gpus:
        if peak_flops_for(gpu, sc.precision).flops is None:
            excluded.append(ExcludedGpu(gpu=gpu.name, reason=peak_flops_for(gpu, sc.precision).note or "no peak"))
            continue
        try:
            attention_choice(arch, sc, precision_spec(sc.precision), gpu)
        except ScenarioError as exc:
            excluded.append(ExcludedGpu(gpu=gpu.name, reason=str(exc)))
            continue
        fitting = []
        for n in counts:
            plan = estimate_plan(arch, sc, dataset, gpu, n, strategy, calibration=calibration, fused_kernels=fused_kernels,
                                 price_source=source, prices=prices, estimate=est)
            if plan.fits:
                fitting.append(plan)
        if not fitting:
            why = (f"does not fit on one GPU, and {strategy.value} does not divide memory over GPUs"
                   if strategy is Strategy.DDP else f"does not fit on up to {max(counts)} GPUs with {strategy.value}")
            excluded.append(ExcludedGpu(gpu=gpu.name, reason=why))
        plans += fitting
    plans.sort(key=lambda p: (p.run.hours, p.cost(basis) if p.cost(basis) is not None else float("inf")))
    priced = [p for p in plans if p.cost(basis) is not None]
    cheapest = min(priced, key=lambda p: (p.cost(basis), p.run.hours)) if priced else None
    fastest = plans[0] if plans else None
    return PlanSearch(
        strategy=strategy, basis=basis, price_source=source, counts=tuple(counts), plans=tuple(plans),
        pareto=tuple(pareto_front(plans, basis)), cheapest=cheapest, fastest=fastest, excluded=tuple(excluded),
    )
