"""Hours, GPU-hours and cost of a dataset on a parallel layout: the one-GPU plan's arithmetic
(:func:`engine.plan.cost.run_cost`, :func:`engine.plan.cost.quote_price`) on the layout's tokens per second
(:mod:`engine.scaleout.step_time`) and its world size.

Every figure carries the time model's cross-validated 80% band (:func:`engine.time.band.band_for` of the layout's
world size on a stack other than the Hugging Face Trainer, as the step time's own band): :func:`run_cost` divides the
hours, GPU-hours and cost by the band's factors, exactly as the one-GPU plan does. This module does no arithmetic of
its own.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.csv_cells import csv_text
from engine.errors import ScenarioError
from engine.plan.cost import CHEAPEST_LISTED, Dataset, PriceQuote, RunCost, quote_price, run_cost
from engine.plan.verdict import Verdict, fit_verdict
from engine.scaleout.estimate import LayoutEstimate
from engine.scaleout.step_time import Cluster
from engine.time.band import Band, band_for


class LayoutRun(BaseModel):
    """A dataset trained on one layout of a cluster: the fit of the most loaded rank, tokens/s, hours and cost.

    ``run.tokens_per_second`` is all GPUs together; ``run.gpu_hours`` = hours x the layout's world size."""

    model_config = ConfigDict(frozen=True)

    label: str
    gpu: str
    num_gpus: int
    fits: bool
    verdict: Verdict
    run: RunCost
    price: PriceQuote
    notes: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """A flat row for a table or a CSV download, with the column names of the one-GPU plan's record
        (:meth:`engine.plan.cost.PlanEstimate.record`) and of the CLI's JSON: ``hours``, ``gpu_hours``,
        ``cost_usd_on_demand``, ``cost_usd_spot`` and their bands (``tokens_per_second_low`` / ``_high``,
        ``hours_low`` / ``_high``, ``gpu_hours_low`` / ``_high``, ``cost_usd_on_demand_low`` / ``_high``,
        ``cost_usd_spot_low`` / ``_high``: :meth:`engine.plan.cost.RunCost.band_record`) and ``band_note``."""
        return {
            "layout": self.label, "gpu": self.gpu, "num_gpus": self.num_gpus, "fits": self.fits,
            "verdict": self.verdict.value, "tokens_per_second": round(self.run.tokens_per_second, 1),
            "hours": self.run.hours, "gpu_hours": self.run.gpu_hours, "cost_usd_on_demand": self.run.cost_usd_on_demand,
            "cost_usd_spot": self.run.cost_usd_spot, **self.run.band_record(), "band_note": self.run.band_note,
            "on_demand_usd_per_gpu_hour": self.price.on_demand_usd_per_hour,
            "on_demand_source": self.price.on_demand_source, "spot_usd_per_gpu_hour": self.price.spot_usd_per_hour,
            "spot_source": self.price.spot_source, "price_date": self.price.date,
            "notes": "; ".join(n for n in (*self.notes, self.price.reason) if n),
        }


def layout_band(world_size: int) -> Band:
    """The 80% band of a layout's tokens/s over ``world_size`` GPUs: the cross-validated band of the multi-GPU rows
    (one GPU: the one-GPU rows of stacks other than the Hugging Face Trainer), :func:`engine.time.band.band_for`."""
    return band_for(world_size, hf_stack=False)


def layout_run(est: LayoutEstimate, cluster: Cluster, dataset: Dataset, seq_len: int,
               price_source: str = CHEAPEST_LISTED) -> LayoutRun:
    """Time and cost of ``dataset`` (sequences of ``seq_len`` tokens) on ``est``'s layout over ``cluster``, priced
    from ``price_source`` (:func:`engine.plan.cost.quote_price`; a GPU the source does not price gets no cost and a
    reason). A layout that does not fit still gets its hours, with a note saying they are for reference only. Every
    figure has its band (:func:`layout_band`; ``run.hours_low`` = hours / the band's high factor, and so on).

    Raises:
        ScenarioError: ``est`` has no step time (it was estimated without a cluster).
        CatalogError: unknown price source.
    """
    if est.time is None:
        raise ScenarioError("time and cost of a layout need its cluster (--gpu)")
    worst = est.memory.max_stage
    usable = cluster.gpu.usable_memory_bytes
    fits = worst.device_used_bytes <= usable
    quote = quote_price(cluster.gpu, price_source)
    world = est.layout.world_size
    run = run_cost(dataset, seq_len, est.time.tokens_per_second, world, quote.on_demand_usd_per_hour,
                   quote.spot_usd_per_hour, band=layout_band(world))
    notes = list(dataset.token_notes(seq_len))
    if not fits:
        notes.append(f"the most loaded rank (stage {worst.stage}) does not fit on {cluster.gpu.name}: "
                     "time and cost for reference only")
    return LayoutRun(label=est.layout.label(), gpu=cluster.gpu.name, num_gpus=world, fits=fits,
                     verdict=fit_verdict(worst.peak_allocated_bytes, usable), run=run, price=quote, notes=tuple(notes))


def candidate_runs(candidates: list, dataset: Dataset, seq_len: int, quote: PriceQuote) -> list[RunCost | None]:
    """:func:`engine.plan.cost.run_cost` of ``dataset`` on each layout search result
    (:class:`engine.scaleout.search.Candidate`) at ``quote``'s prices, each with its band (:func:`layout_band`);
    None for one that does not fit (no time)."""
    return [run_cost(dataset, seq_len, c.tokens_per_second, c.layout.world_size, quote.on_demand_usd_per_hour,
                     quote.spot_usd_per_hour, band=layout_band(c.layout.world_size)) if c.fits and c.tokens_per_second else None for c in candidates]


def layout_plans_csv(rows: list[dict[str, Any]]) -> bytes:
    """Layout plans as CSV (UTF-8, ``\\n`` line ends): the union of the rows' keys in first-seen order as the header;
    :func:`engine.csv_cells.csv_text`'s cells (text neutralised against spreadsheet formulas, booleans ``true`` /
    ``false``, None empty, quoted only where needed)."""
    columns = list(dict.fromkeys(k for r in rows for k in r))
    return csv_text(columns, ([r.get(c) for c in columns] for r in rows)).encode("utf-8")
