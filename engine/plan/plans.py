"""Plans: a named, saved scenario (model, training settings, GPUs, dataset, prices) and its results.

:class:`Plan` holds the inputs only; :func:`evaluate_plan` recomputes every output (:class:`PlanResult`) from
them through the engine (:func:`engine.memory.estimate.estimate_memory`, :func:`engine.plan.cost.estimate_plan`), so a plan read
back from a CSV file is never trusted for its numbers. The model's config comes from the bundled catalog by repo id,
or is passed in as a dict (a Hub repo the caller resolved): this module reads no network.

CSV (:func:`plans_to_csv`, :func:`plans_from_csv`): one row per plan, every input and output in its own column, units
in the output column names (``_bytes``, ``_gb``, ``_hours``, ``_usd``), plus ``app_version`` and ``exported_at``.
Import re-validates each row with pydantic and recomputes it; rows that do not validate are returned with their row
number and reason, the rest load. Round trip: export -> import -> export with the file's own ``app_version`` and
``exported_at`` (returned by the import as :attr:`PlanImport.app_version` / :attr:`PlanImport.exported_at`) gives the
same bytes; a new export stamps the current version and time. No token is ever a field of a plan.

:func:`engine.plan.training_code.training_code` renders a plan as Python source to copy;
:mod:`engine.plan.config_export` writes the same plan as config files (TRL, PEFT, bitsandbytes, DeepSpeed, accelerate,
axolotl, LLaMA-Factory).
"""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from engine.model.architecture import Architecture
from engine.model.build import architecture_or_approximation
from engine.plan.cost import CHEAPEST_LISTED, Dataset, estimate_plan, resolve_price_source
from engine.plan.csv_checks import header_problem, layout_csv_problem, shown_cell
from engine.plan.plan_names import name_problem, same_name
from engine.secrets import looks_like_token, redact_tokens
from engine.plan.plan_gpu import find_plan_gpu, plan_gpu_note
from engine.plan.verdict import Verdict
from engine.csv_cells import cell_value, neutralize, restore
from engine.errors import EngineError, explain_validation
from engine.hardware.gpus import Gpu, GpuPrice
from engine.memory.estimate import estimate_memory
from engine.memory.parallel import Strategy
from engine.scenario.training import DEFAULT_PRECISION, Scenario
from engine.model.sources import config_from_catalog

COMPONENT_KEYS: tuple[str, ...] = (
    "weights", "weight_copies", "gradients", "gradient_temporaries", "optimizer_states", "optimizer_temporaries",
    "activations", "recomputed_layer", "logits_loss", "logits_forward",
)
"""Memory components of :func:`engine.memory.estimate.estimate_memory`, in CSV column order."""


def app_version() -> str:
    """The package version (installed metadata, else ``pyproject.toml``, else 0.1.0)."""
    from importlib import metadata

    try:
        return metadata.version("finetune-fit")
    except metadata.PackageNotFoundError:
        pass
    try:
        import tomllib

        data = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8"))
        return str(data["project"]["version"])
    except (OSError, KeyError, ValueError):
        return "0.1.0"


class Plan(Scenario):
    """The inputs of one saved plan: a training :class:`~engine.scenario.training.Scenario` (every field and
    validator inherited, so a new scenario field is a plan field at once) plus the plan's name, model, GPUs,
    dataset and pricing. Field names are the CSV's input columns (:data:`INPUT_COLUMNS`)."""

    name: str = Field(min_length=1, max_length=200)
    model_repo_id: str = Field(min_length=1, max_length=200)
    model_revision: str | None = None
    gpu: str = Field(min_length=1)
    num_gpus: int = Field(1, ge=1, le=1024)
    strategy: Strategy = Strategy.DDP
    dataset_total_tokens: int | None = None
    dataset_examples: int | None = None
    dataset_avg_tokens: float | None = None
    epochs: float = 1.0
    packing: bool = True
    runs: int = 1
    calibration: float = Field(1.0, ge=0.1, le=10)
    fused_kernels: bool = False
    price_source: str = CHEAPEST_LISTED

    @field_validator("model_revision", mode="before")
    @classmethod
    def _empty_revision(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("name", "model_repo_id", "model_revision", "gpu", "price_source")
    @classmethod
    def _one_line(cls, value: Any) -> Any:
        # A line break in a text cell would split the CSV row in spreadsheets (and CR is a formula trigger).
        if isinstance(value, str) and ("\r" in value or "\n" in value):
            raise ValueError("must be one line (no line breaks)")
        if looks_like_token(value):  # a token pasted into a plan would be exported in every CSV of it
            raise ValueError("looks like a Hugging Face token, which a plan never holds; paste tokens into the token box")
        return value

    @field_validator("name", "model_repo_id", "model_revision")
    @classmethod
    def _visible_name(cls, value: Any, info: ValidationInfo) -> Any:
        # A name must not pass for another plan's in the shared library (engine.plan.plan_names), nor its model (an
        # uploaded config is named by its file: "upload:<file name>", which the browser sends as it likes). A row already
        # stored is read back as it is (context {"stored": True}): a rule added later must not hide a saved plan.
        if isinstance(value, str) and not (info.context or {}).get("stored") and (problem := name_problem(value)):
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _valid_dataset(self) -> "Plan":
        try:
            self.dataset()
        except ValidationError as exc:
            raise ValueError("dataset: " + explain_validation(exc, all_errors=True)) from None
        return self

    def scenario(self) -> Scenario:
        """The training scenario of this plan, as a plain :class:`Scenario`."""
        return Scenario(**{k: getattr(self, k) for k in Scenario.model_fields})

    def dataset(self) -> Dataset:
        """The dataset of this plan (pydantic ValidationError when invalid)."""
        return Dataset(total_tokens=self.dataset_total_tokens, examples=self.dataset_examples,
                       avg_tokens=self.dataset_avg_tokens, epochs=self.epochs, packing=self.packing, runs=self.runs)


_IDENTITY_FIELDS = ("name", "model_repo_id", "model_revision")


INPUT_COLUMNS: tuple[str, ...] = (
    *_IDENTITY_FIELDS, *Scenario.model_fields, *(f for f in Plan.model_fields if f not in Scenario.model_fields and f not in _IDENTITY_FIELDS)
)
"""The CSV's input columns: the plan's identity, the scenario's fields, then GPUs, dataset and pricing."""


class PlanResult(BaseModel):
    """Everything :func:`evaluate_plan` computes for a plan. Bytes are per step on one GPU unless named per GPU."""

    model_config = ConfigDict(frozen=True)

    total_parameters: int
    trainable_parameters: int
    components_bytes: dict[str, float]
    total_bytes: float
    peak_phase: str
    per_gpu_peak_bytes: float
    usable_memory_bytes: float
    headroom_bytes: float
    fits: bool
    min_gpus: int | None
    tokens_per_second: float
    hours: float
    gpu_hours: float
    cost_usd_on_demand: float | None
    cost_usd_spot: float | None
    price_source: str
    notes: tuple[str, ...] = ()
    band: dict[str, float | None] = {}
    """The 80% band of tokens/s, hours and cost (``RunCost.band_record``, :mod:`engine.time.band`)."""
    verdict: Verdict = Verdict.FITS
    """fits / tight / does_not_fit (:mod:`engine.plan.verdict`)."""


def evaluate_plan(
    plan: Plan,
    config: dict[str, Any] | None = None,
    *,
    gpus: Sequence[Gpu] | None = None,
    prices: Sequence[GpuPrice] | None = None,
    arch: Architecture | None = None,
) -> PlanResult:
    """Recompute a plan's memory, fit, tokens/s, hours and cost from its inputs.

    ``config``: the model's config dict; None reads the bundled catalog copy of ``plan.model_repo_id``.
    ``arch``: that config's architecture when the caller already holds it (the app keeps one per config, so the
    engine's per-architecture memos answer); None builds it from ``config``.
    ``gpus``/``prices``: the GPU and price tables (default: the bundled ones).

    Raises:
        CatalogError: model not bundled (and no config given), unknown GPU or price source.
        ScenarioError / ConfigError: the plan does not apply to the model (e.g. LoRA targets it lacks).
    """
    if arch is None:
        if config is None:
            config, _ = config_from_catalog(plan.model_repo_id)
        arch, _approx = architecture_or_approximation(config)
    gpu = find_plan_gpu(plan.gpu, gpus)
    sc = plan.scenario()
    source = resolve_price_source(plan.price_source, prices)
    est = estimate_memory(arch, sc)
    pe = estimate_plan(arch, sc, plan.dataset(), gpu, plan.num_gpus, plan.strategy, calibration=plan.calibration,
                       fused_kernels=plan.fused_kernels, price_source=source, prices=prices, estimate=est)
    comps = est.components
    return PlanResult(
        total_parameters=est.total_parameters, trainable_parameters=est.trainable_parameters,
        components_bytes={k: float(comps.get(k, 0.0)) for k in COMPONENT_KEYS} | {k: v for k, v in comps.items() if k not in COMPONENT_KEYS},
        total_bytes=est.total_bytes, peak_phase=est.peak_phase, per_gpu_peak_bytes=pe.per_gpu_peak_bytes,
        usable_memory_bytes=float(gpu.usable_memory_bytes), headroom_bytes=pe.headroom_bytes, fits=pe.fits, verdict=pe.verdict,
        min_gpus=pe.min_gpus, tokens_per_second=pe.run.tokens_per_second, hours=pe.run.hours, gpu_hours=pe.run.gpu_hours,
        cost_usd_on_demand=pe.run.cost_usd_on_demand, cost_usd_spot=pe.run.cost_usd_spot, price_source=source,
        notes=tuple(n for n in (*est.warnings, *pe.notes, pe.price.reason) if n), band=pe.run.band_record(),
    )


# --------------------------------------------------------------------------------------------------
# CSV

BAND_COLUMNS: tuple[str, ...] = ("tokens_per_second_low", "tokens_per_second_high", "train_hours_low", "train_hours_high",
                                 "cost_on_demand_usd_low", "cost_on_demand_usd_high", "cost_spot_usd_low", "cost_spot_usd_high")
"""The 80% band of the time and cost outputs (issue 23), named after the point columns."""
_BAND_KEYS = ("tokens_per_second_low", "tokens_per_second_high", "hours_low", "hours_high", "cost_usd_on_demand_low",
              "cost_usd_on_demand_high", "cost_usd_spot_low", "cost_usd_spot_high")

OUTPUT_COLUMNS: tuple[str, ...] = (
    "total_parameters", "trainable_parameters",
    *(f"mem_{k}_bytes" for k in COMPONENT_KEYS), "mem_other_bytes",
    "total_bytes", "total_gb", "peak_phase", "per_gpu_peak_bytes", "per_gpu_peak_gb", "usable_memory_bytes",
    "headroom_bytes", "fits", "verdict", "min_gpus", "tokens_per_second", "train_hours", "gpu_hours", "cost_on_demand_usd",
    "cost_spot_usd", *BAND_COLUMNS, "notes",
)
STAMP_COLUMNS: tuple[str, ...] = ("app_version", "exported_at")
CSV_COLUMNS: tuple[str, ...] = INPUT_COLUMNS + OUTPUT_COLUMNS + STAMP_COLUMNS


def _cell(value: Any) -> str:
    """A plans CSV cell before ``csv.writer`` quotes it: target modules joined by commas, infinity empty, anything
    else as every CSV of the app writes it (:func:`engine.csv_cells.cell_value`)."""
    if isinstance(value, tuple):
        return neutralize(",".join(value))
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    return cell_value(value)


def plan_record(plan: Plan, result: PlanResult) -> dict[str, Any]:
    """One flat row: inputs, then outputs with units in their names."""
    row: dict[str, Any] = {k: getattr(plan, k) for k in INPUT_COLUMNS}
    row.update({
        "total_parameters": result.total_parameters, "trainable_parameters": result.trainable_parameters,
        **{f"mem_{k}_bytes": round(result.components_bytes.get(k, 0.0)) for k in COMPONENT_KEYS},
        "mem_other_bytes": round(sum(v for k, v in result.components_bytes.items() if k not in COMPONENT_KEYS)),
        "total_bytes": round(result.total_bytes), "total_gb": round(result.total_bytes / 1e9, 3),
        "peak_phase": result.peak_phase, "per_gpu_peak_bytes": round(result.per_gpu_peak_bytes),
        "per_gpu_peak_gb": round(result.per_gpu_peak_bytes / 1e9, 3), "usable_memory_bytes": round(result.usable_memory_bytes),
        "headroom_bytes": round(result.headroom_bytes), "fits": result.fits, "verdict": result.verdict.value,
        "min_gpus": result.min_gpus,
        "tokens_per_second": result.tokens_per_second, "train_hours": result.hours, "gpu_hours": result.gpu_hours,
        "cost_on_demand_usd": result.cost_usd_on_demand, "cost_spot_usd": result.cost_usd_spot,
        **{col: result.band.get(key) for col, key in zip(BAND_COLUMNS, _BAND_KEYS)},
        "notes": "; ".join(result.notes),
    })
    return row


def export_time() -> str:
    """Now, UTC, to the second, ISO 8601 (``2026-11-29T20:15:00Z``)."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def plans_to_csv(
    plans: Sequence[tuple[Plan, PlanResult]], *, version: str | None = None, exported_at: str | None = None
) -> bytes:
    """The CSV (UTF-8, ``\\n`` line ends) of ``plans``: a header of :data:`CSV_COLUMNS`, one row per plan.

    ``version``/``exported_at`` default to this app's version and now; pass an imported file's own to re-export it
    byte for byte.
    """
    stamp = {"app_version": version or app_version(), "exported_at": exported_at or export_time()}
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for plan, result in plans:
        row = {**plan_record(plan, result), **stamp}
        writer.writerow([_cell(row[c]) for c in CSV_COLUMNS])
    return buf.getvalue().encode("utf-8")


class RowError(BaseModel):
    """A CSV row that did not load: its row number (1 = the first row after the header) and why. Row 0 is the file
    itself (not UTF-8, empty, required columns missing): then no row loads, and it is reported once."""

    model_config = ConfigDict(frozen=True)

    row: int
    reason: str

    @field_validator("reason", mode="before")
    @classmethod
    def _no_token(cls, value: Any) -> Any:
        # The reason quotes the cell ("name: looks like a Hugging Face token ... (got 'hf_...')"): shown on the Plans
        # page and on the CLI's stderr, it must not show the token it refuses.
        return redact_tokens(value)


class PlanImport(BaseModel):
    """What :func:`plans_from_csv` read: the plans that loaded (recomputed), the rows that did not, the file's
    stamp (version and export time of its first loaded row), and warnings about the file (optional input columns
    missing, each with the default used)."""

    model_config = ConfigDict(frozen=True)

    plans: tuple[tuple[Plan, PlanResult], ...] = ()
    errors: tuple[RowError, ...] = ()
    app_version: str | None = None
    exported_at: str | None = None
    warnings: tuple[str, ...] = ()

    @property
    def file_error(self) -> str | None:
        """Why the whole file was refused (row 0), or None."""
        return next((e.reason for e in self.errors if e.row == 0), None)


ConfigResolver = Callable[[str, str | None], dict[str, Any]]

REQUIRED_COLUMNS: tuple[str, ...] = (
    "name", "model_repo_id", "gpu", "method", "micro_batch_size", "seq_len", "num_gpus", "strategy",
)
"""Input columns a plans CSV must have: without them a plan would load as another plan (a QLoRA plan without
``method`` and ``seq_len`` would come back as full fine-tuning at 2,048 tokens), so the file is refused."""
DATASET_COLUMNS: tuple[str, ...] = ("dataset_total_tokens", "dataset_examples")
"""At least one of these (a dataset size) must be a column."""
def _default_text(name: str) -> str:
    if name == "precision":
        return "the method's usual precision (" + ", ".join(f"{m.value} {p.value}" for m, p in DEFAULT_PRECISION.items()) + ")"
    default = Plan.model_fields[name].default
    return "none" if default is None else repr(_cell(default))


def _parse_row(values: dict[str, str]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name in INPUT_COLUMNS:
        if name not in values:
            continue
        raw = values[name]
        # A cell neutralised on export keeps its exact text (a leading tab is part of it); others are trimmed.
        text = restore(raw) if raw.startswith("'") else raw.strip()
        if text == "":
            if Plan.model_fields[name].is_required():
                fields[name] = text  # let pydantic say it is too short
            elif Plan.model_fields[name].default is None:
                fields[name] = None
            continue
        fields[name] = text
    return fields


def _utf8(cells: list[str]) -> bool:
    try:
        "".join(cells).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _file_error(reason: str) -> PlanImport:
    return PlanImport(errors=(RowError(row=0, reason=reason),))


def plans_from_csv(
    data: bytes,
    resolve_config: ConfigResolver | None = None,
    *,
    gpus: Sequence[Gpu] | None = None,
    prices: Sequence[GpuPrice] | None = None,
) -> PlanImport:
    """Read plans from CSV bytes: each row is validated as a :class:`Plan` and recomputed by :func:`evaluate_plan`.

    ``resolve_config(repo_id, revision)`` gives the config of a model (default: the bundled catalog). Output columns
    of the file are ignored (recomputed); an unknown column too, with a warning naming it. Text cells neutralised against formula injection on
    export (:mod:`engine.csv_cells`) are restored. The file is refused, with one reason (row 0), when it is empty,
    not UTF-8 text, not CSV, has a column twice, has column names but no row or more than :data:`~engine.plan.csv_checks.MAX_PLAN_ROWS` rows,
    or lacks a :data:`REQUIRED_COLUMNS` column or any dataset size column (a layout CSV of the Scale out page or of
    ``plan`` with a layout is named as such: :func:`~engine.plan.csv_checks.layout_csv_problem`); an optional
    input column that is missing gives one warning naming the default every plan then uses. A row with the wrong
    number of cells, a NUL character, or that does not validate or evaluate, is listed in ``errors`` with why. A row whose GPU is a
    family name ("A100") loads on the catalog's GPU for it, under that GPU's name, with a warning saying so
    (:mod:`engine.plan.plan_gpu`).
    """
    if not data.strip():
        return _file_error("the file is empty")
    # Bytes that are not UTF-8 become lone surrogates, so a row can say so; a file that is not UTF-8 says it once.
    text = data.decode("utf-8-sig", errors="surrogateescape")
    try:
        records = list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as exc:
        return _file_error(f"the file is not CSV: {exc}")
    bad = {i for i, r in enumerate(records) if not _utf8(r)}
    rows = [i for i, r in enumerate(records) if i and r and "".join(r).strip()]
    if 0 in bad or (len(rows) > 1 and bad >= set(rows)):
        return _file_error("the file is not UTF-8 text: save it as UTF-8 CSV (spreadsheets: 'CSV UTF-8')")
    header = [h.strip() for h in records[0]]
    refused = header_problem(header, len(rows))
    if refused:
        return _file_error(refused)
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if not any(c in header for c in DATASET_COLUMNS):
        missing.append("dataset_total_tokens (or dataset_examples and dataset_avg_tokens)")
    if missing and (layout := layout_csv_problem(header, records[rows[0]])):  # the Scale out page's CSV
        return _file_error(layout)
    if missing:
        return _file_error("missing required column" + ("s " if len(missing) > 1 else " ") + ", ".join(repr(m) for m in missing)
                           + ": without them the plans would load as other plans; add them (export a plan to see every column)")
    optional = [c for c in INPUT_COLUMNS if c not in header and c not in REQUIRED_COLUMNS and c not in DATASET_COLUMNS
                and c != "dataset_avg_tokens"]
    warnings = tuple(f"column {c!r} is missing: every plan uses its default, {_default_text(c)}" for c in optional)
    unknown = [shown_cell(c) for c in header if c and c not in CSV_COLUMNS]
    if len(unknown) == 1:
        warnings += (f"column {unknown[0]} is not a plans-CSV column: ignored",)
    elif unknown:  # one warning, the first few named: a file of 5,000 extra columns is not 5,000 boxes
        more = f" and {len(unknown) - MAX_NAMED:,} more" if len(unknown) > MAX_NAMED else ""
        warnings += (f"{len(unknown):,} columns are not plans-CSV columns: ignored ({', '.join(unknown[:MAX_NAMED])}{more})",)
    loaded: list[tuple[Plan, PlanResult]] = []
    errors: list[RowError] = []
    stamp: tuple[str | None, str | None] = (None, None)
    resolver = resolve_config or (lambda repo, rev: config_from_catalog(repo)[0])
    for number, cells in enumerate(records[1:], start=1):
        if not cells or not "".join(cells).strip():
            continue
        if number in bad:
            errors.append(RowError(row=number, reason="not UTF-8 text"))
            continue
        if len(cells) != len(header):
            errors.append(RowError(row=number, reason=f"{len(cells)} cells for {len(header)} columns"))
            continue
        if any("\x00" in c for c in cells):
            errors.append(RowError(row=number, reason="holds a NUL character (byte 0), which no plan's text has; "
                                                      "remove it or re-export the plan"))
            continue
        values = dict(zip(header, cells))
        try:
            plan = Plan(**_parse_row(values))
        except ValidationError as exc:
            errors.append(RowError(row=number, reason=explain_validation(exc, all_errors=True)))
            continue
        try:
            result = evaluate_plan(plan, resolver(plan.model_repo_id, plan.model_revision), gpus=gpus, prices=prices)
        except EngineError as exc:
            errors.append(RowError(row=number, reason=str(exc)))
            continue
        if (note := plan_gpu_note(plan.gpu, gpus)) is not None:  # "A100": loaded as the A100 80GB, by that name
            warnings += (f"row {number}: {note}",)
            plan = plan.model_copy(update={"gpu": find_plan_gpu(plan.gpu, gpus).name})
        if not loaded:
            stamp = (restore(values.get("app_version") or "") or None, restore(values.get("exported_at") or "") or None)
        loaded.append((plan, result))
    return PlanImport(plans=tuple(loaded), errors=tuple(errors), app_version=stamp[0], exported_at=stamp[1],
                      warnings=warnings)


MAX_NAMED = 10
"""Most unknown columns a file's warning names (the rest are counted)."""


def unique_plan_name(name: str, taken: Sequence[str]) -> str:
    """``name``, or ``name (2)``, ``name (3)``, ... : the first that is none of ``taken``, names compared as
    :func:`engine.plan.plan_names.plan_name_key` compares them ("Plan A" is taken by "plan a"): saving never replaces
    a plan by accident, nor makes a second one that reads the same."""
    if same_name(name, taken) is None:
        return name
    k = 2
    while same_name(f"{name} ({k})", taken) is not None:
        k += 1
    return f"{name} ({k})"


# --------------------------------------------------------------------------------------------------
# Ready-to-run code
