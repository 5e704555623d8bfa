"""Fit page: which GPUs a fine-tuning scenario fits on, for every catalog model and every technique."""

import json

import pandas as pd
import streamlit as st

from ui.catalog_session import session_gpus, session_prices, table_key
from ui.inputs import checked_number
from engine.errors import EngineError
from engine.plan.largest import SEED_TABLE_SOURCE
from engine.plan.fit import check_fit, what_fits
from engine.scenario.optimizer import Optimizer
from engine.memory.parallel import STRATEGY_LABELS
from engine.scenario.precision import PrecisionMode, precision_spec
from engine.scenario.training import Method, Scenario
from engine.memory.device import device_used_bytes
from engine.units import fmt_bytes, fmt_count, to_unit
from ui.charts import CELL_LABELS, NO_CELL_LABELS
from ui.layout import scenario_page
from ui.verdict import show_tight
from ui.tables import number_columns
from ui.formats import md_plain
from ui.views import section_choice
from ui.shared_results import models_fit, seed_rows as shared_seed_rows, techniques_fit

# The matrices and the seed table are kept for every session, keyed by the JSON of their inputs (ui.shared_results:
# a cached function defined here would be made anew, its source hashed, on every rerun).


model, scenario, hw = scenario_page("Which GPU does it fit on?")
unit, strategy = hw.unit, hw.strategy

gpus = session_gpus()
# Exact keys (JSON of the frozen inputs): cheap to hash, unlike the objects themselves. The GPU table's is made once per
# table object (table_key), not on every rerun (1.7 ms).
gpus_key = table_key(gpus)
model_key = json.dumps(model.config, sort_keys=True, default=str)
_WHY_SEED_DIFFERS = (
    """**Why the numbers differ from the seed's**

- *Bytes per parameter.* The seed's rule counts 12 B/param for "bf16 mixed" (2 + 2 + 8). Trainer's mixed precision keeps
  fp32 weights and gradients beside fp32 AdamW states: 16 B/param, plus autocast's 16-bit weight copies during backward.
  Pure bf16 (8 B/param with fused AdamW) or an 8-bit optimizer fit larger models than the mixed default.
- *Activations and the loss.* The seed's sizes count model states only; the estimate adds the saved activations and the
  fp32 logits, log-softmax and their gradients over the whole vocabulary (12 B × tokens × vocab: 3.2 GB for Llama 3 at
  2,048 tokens), which is why a long sequence or a large vocabulary moves a model off a GPU.
- *Efficient methods.* LoRA on a bf16 base needs about 2 B/param for the frozen weights; QLoRA about 0.5 B/param for the quantized layers. With
  gradient checkpointing an 8B model's LoRA fits 24 GB, so the seed's "3B on 24 GB" is conservative for today's stack.
- *Usable, not nominal memory.* The comparison uses the device total nvidia-smi reports (e.g. 81,559 MiB for an H100
  80GB, 24,564 MiB for an RTX 4090), not the marketing size, and the CUDA context (0.3-1 GiB) still has to fit beside it.
- *Catalog granularity.* Only the bundled models are tried: their sizes jump from 13B to Mixtral's 46.7B and then 70B, so a
  seed range such as "30-40B" shows as the largest catalog model that fits, and "same" allows for nominal sizes
  (-15%/+25%: "7B" covers 5.95-8.75B).
- *Multi-GPU.* The seed adds the VRAM of all GPUs. Only sharding pools memory: with ZeRO-3 the model states divide by the
  number of GPUs, but activations, the loss tensors and the gathered layer stay on every GPU; with DDP nothing is pooled.
"""
)


def _model(m) -> str:
    return "nothing in the catalog" if m.label is None else f"{m.label} ({fmt_count(m.parameters)})"


@st.fragment
def _seed_section(gpus: tuple, gpus_key: str, unit: str) -> None:
    """The seed chapter's table recomputed for a standard scenario of its own: its inputs rerun only this section
    (st.fragment), not the matrices above."""
    st.subheader("Largest model per GPU: the seed chapter's table recomputed")
    st.caption("The seed's numbers beside the largest catalog model whose estimate fits, for a standard scenario you can change here.")
    st.session_state.setdefault("seed_ckpt", True)
    st.session_state.setdefault("seed_efficient", Method.LORA)
    st.session_state.setdefault("seed_full_precision", PrecisionMode.AMP_BF16)
    s1, s2, s3, s4, s5 = st.columns(5)
    seed_seq = int(checked_number(s1, "Sequence length", "seed_seq_len", 2048, step=256, below=st))
    seed_batch = int(checked_number(s2, "Micro batch", "seed_micro_batch", 1, step=1, below=st))
    seed_ckpt = s3.toggle("Gradient checkpointing", key="seed_ckpt")
    seed_full_precision = s4.selectbox("Full FT precision", [PrecisionMode.AMP_BF16, PrecisionMode.BF16],
                                       format_func=lambda m: precision_spec(m).label, key="seed_full_precision")
    seed_eff = s5.selectbox("Efficient method", [Method.LORA, Method.QLORA], format_func=lambda m: m.value.upper() if m is Method.QLORA else "LoRA",
                            key="seed_efficient")
    common = dict(micro_batch_size=seed_batch, seq_len=seed_seq, gradient_checkpointing=seed_ckpt, optimizer=Optimizer.ADAMW_FUSED)
    full_sc = Scenario.build(method=Method.FULL, precision=seed_full_precision, **common)
    eff_sc = Scenario.build(method=seed_eff, precision=PrecisionMode.BF16, **common)
    seed_rows = shared_seed_rows(full_sc, eff_sc, gpus, key=(full_sc.model_dump_json(), eff_sc.model_dump_json(), gpus_key))

    st.table(pd.DataFrame([  # static: all ten columns wrap to the page width
        {
            "GPUs (seed)": r.seed.seed_label,
            f"usable ({unit})": f"{to_unit(r.usable_memory_bytes, unit):,.1f}",
            "seed VRAM": r.seed.seed_vram,
            "seed: full FT": r.seed.seed_full or "—",
            "computed: full FT": _model(r.full),
            "full vs seed": r.full_vs_seed,
            "seed: efficient": r.seed.seed_efficient,
            f"computed: {seed_eff.value}": _model(r.efficient),
            "efficient vs seed": r.efficient_vs_seed,
            "strategy": r.strategy.value,
        }
        for r in seed_rows
    ]), hide_index=True)
    st.caption(
        f"Full FT: {precision_spec(seed_full_precision).label}, fused AdamW; efficient: {seed_eff.value} on a bf16 base (rank "
        f"{Scenario().lora_r}, attention projections); both at micro batch {seed_batch} × {seed_seq:,} tokens"
        f"{', gradient checkpointing' if seed_ckpt else ''}. Multi-GPU lines use ZeRO-3 across the GPUs. Source: {SEED_TABLE_SOURCE}."
    )


def _download(data: bytes, name: str, key: str) -> None:
    st.download_button(f"Download {name} (CSV)", data, file_name=f"{name}.csv", mime="text/csv", key=key)


def _matrix_section(view: str) -> None:
    """One of the two fit matrices (``view``: "models" or "techniques"), computed, drawn and offered as CSV."""
    # No cell text by default (colour and hover only): each label is an SVG text element plotly.js lays out on every redraw
    st.session_state.setdefault("fit_labels", NO_CELL_LABELS)
    labels = st.radio("Cell labels", CELL_LABELS, key="fit_labels", horizontal=True,
                      help="Fewest GPUs: blank (green) one is enough, ≈ tight on one, ×N the fewest of that GPU with the "
                           "row's strategy (models: the sidebar's; techniques: DDP, ZeRO-3 for its own row), ✗ none up to "
                           "1,024. Headroom: on one GPU, in the sidebar's unit. The colour is always the one-GPU headroom.")
    # Which strategy the fewest GPUs use (engine.plan.fit): the models matrix, the sidebar's for every row; the techniques
    # matrix, each row's own (Technique.strategy: DDP but for the ZeRO-3 row), whatever the sidebar says.
    st.caption(
        f"This matrix tries every GPU of the catalog (columns from the least usable memory to the most), with the sidebar's "
        f"scenario and, for the fewest GPUs, "
        + (f"the sidebar's strategy ({strategy.value})" if view == "models"
           else f"each row's own strategy (not the sidebar's {strategy.value})")
        + ". Cells: blank (green) one GPU is enough, ≈ tight: may not fit (under 10% of the peak to spare), ×N the fewest GPUs, ✗ none up to 1,024. Colour: the headroom (green) or shortfall (red) "
        f"in {unit} on one GPU against its usable memory (what nvidia-smi / rocm-smi report, before the CUDA context and "
        "allocator reserve). ⚠ after a GPU's name: it has no bf16 for a bf16 row. Hover a cell for its breakdown."
    )
    try:
        if view == "models":
            errors, figure, csv = models_fit(scenario, gpus, strategy, unit, labels,
                                           key=(scenario.model_dump_json(), gpus_key, strategy))
        else:
            errors, figure, csv = techniques_fit(model.arch, scenario, gpus, unit, labels,
                                               key=(model_key, scenario.model_dump_json(), gpus_key))
    except EngineError as exc:
        st.error(f"Cannot compute the fit: {md_plain(exc)}")
        st.stop()
    if view == "models":
        st.subheader("Catalog models × every GPU")
        st.caption(f"Your scenario: {precision_spec(scenario.precision).label}, {scenario.method.value}, micro batch "
                   f"{scenario.micro_batch_size} × {scenario.seq_len:,} tokens, {scenario.optimizer.value}"
                   f"{', gradient checkpointing' if scenario.gradient_checkpointing else ''}; fewest GPUs with {strategy.value}.")
    else:
        st.subheader(f"Techniques × every GPU for {md_plain(model.title)}")
        st.caption("Same batch, sequence, accumulation, attention and LoRA settings in every row; each row sets what its label says. "
                   "Fewest GPUs: the ZeRO-3 row's ×N shards over the GPUs (ZeRO-3); every other training row uses DDP "
                   "(nothing pooled: one GPU or none) and the inference row one replica per GPU; the sidebar's "
                   f"{strategy.value} is not used here. The CSV's min_gpus_strategy column names each row's.")
    st.plotly_chart(figure, width="stretch", key=f"fit_{view}_chart")
    if errors:  # one caption of paragraphs, not one element per row
        st.caption("\n\n".join(f"Not computed — {md_plain(label)}: {md_plain(error)}" for label, error in errors))
    name = "fit_models_x_gpus" if view == "models" else "fit_techniques_x_gpus"
    _download(csv, name, f"fit_{view}_csv")


view = section_choice("fit_view", help="One section at a time: a sidebar change recomputes and redraws only the "
                                         "section shown (the others follow when you pick them). The link keeps it.")
if view == "largest":
    _seed_section(gpus, gpus_key, unit)
    st.markdown(_WHY_SEED_DIFFERS)
else:
    _matrix_section(view)

st.subheader(f"What fits on {md_plain(hw.label)}")
st.caption("Your hardware from the sidebar (the matrices of the section above try every GPU of the catalog).")
gpu, num_gpus = hw.gpu, hw.num_gpus
fit_strategy = hw.training_strategy  # one GPU trains without sharding: ZeRO/FSDP there only add their buffers
try:
    fit = check_fit(model.arch, scenario, gpu, fit_strategy, num_gpus, offload=hw.offload)
    limits = what_fits(model.arch, scenario, gpu, fit_strategy, num_gpus)
    fewest = check_fit(model.arch, scenario, gpu, strategy, 1).min_gpus
except EngineError as exc:
    st.error(f"Cannot compute the fit: {md_plain(exc)}")
    st.stop()
for warning in fit.warnings:
    st.warning(md_plain(warning))
show_tight(fit.verdict, f"{num_gpus} x {gpu.name}")
m1, m2, m3, m4, m5 = st.columns(5)
m1.metric("Per-GPU peak", fmt_bytes(fit.peak_bytes, unit),
          help=f"{fit.peak_bytes:,.0f} bytes of tensors (max_memory_allocated), {fit.peak_phase.replace('_', ' ')}")
m2.metric("nvidia-smi would show", fmt_bytes(fit.device_used_bytes, unit),
          help="the per-GPU peak + the caching allocator's reserve + the CUDA context")
m3.metric("Headroom" if fit.fits else "Shortfall", fmt_bytes(abs(fit.headroom_bytes), unit),
          help=f"usable {fmt_bytes(fit.usable_memory_bytes, unit)} minus what nvidia-smi would show")
mb, sl = limits.micro_batch, limits.seq_len
m4.metric("Largest micro batch", "none" if mb.value is None else f"{mb.value:,}",
          help=f"at sequence length {scenario.seq_len:,}; searched up to {mb.cap:,} ({mb.capped_by})")
m5.metric("Longest sequence", "none" if sl.value is None else f"{sl.value:,}",
          help=f"at micro batch {scenario.micro_batch_size}; searched up to {sl.cap:,} ({sl.capped_by})")
lines = []


def _both(allocated: float) -> str:
    """The tensors of a peak and what nvidia-smi would show for it (what the verdict compares with the usable memory)."""
    return (f"{fmt_bytes(allocated, unit)} of tensors (max_memory_allocated), "
            f"{fmt_bytes(device_used_bytes(allocated), unit)} in nvidia-smi")


usable_text = fmt_bytes(gpu.usable_memory_bytes, unit)
for lim, what in ((mb, "micro batch"), (sl, "sequence length")):
    if lim.value is None:
        lines.append(f"- Even a {what} of 1 does not fit: {_both(lim.next_peak_bytes or 0)} per GPU, over the "
                     f"{usable_text} usable.")
    elif lim.next_value is None:
        lines.append(f"- Every {what} up to {lim.cap:,} ({lim.capped_by}) fits: {_both(lim.peak_bytes or 0)} per GPU "
                     f"there, within the {usable_text} usable.")
    else:
        lines.append(f"- {what.capitalize()} {lim.value:,} needs {_both(lim.peak_bytes or 0)} per GPU, within the "
                     f"{usable_text} usable; {lim.next_value:,} would need {_both(lim.next_peak_bytes or 0)}.")
st.markdown("\n".join(lines))
st.caption(f"{md_plain(hw.label)}; usable "
           f"{fmt_bytes(gpu.usable_memory_bytes, unit)} per GPU ({md_plain(gpu.usable_source)}). Fewest GPUs for this scenario with "
           f"{STRATEGY_LABELS[strategy]}: {fewest if fewest else 'none up to 1,024'}.")
prices = sorted((p for p in session_prices() if p.gpu == gpu.name), key=lambda p: p.on_demand_usd_per_hour)
if prices:
    with st.expander(f"Prices of one {md_plain(gpu.name)} GPU-hour", expanded=False):
        st.dataframe(pd.DataFrame([
            {"source": p.source_name, "on_demand": p.on_demand_usd_per_hour, "spot": p.spot_usd_per_hour,
             "date": p.date.isoformat(), "url": p.url, "note": p.note} for p in prices
        ]), hide_index=True, width="stretch", column_config=number_columns(
            {"on_demand": ("on demand", "usd_per_gpu_hour"), "spot": ("spot", "usd_per_gpu_hour")}))



