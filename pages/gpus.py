"""GPUs & prices page: the catalog and price sources behind every page, editable for this session."""

import pandas as pd
import streamlit as st

from engine.errors import CatalogError
from ui.catalog_session import apply_edits, is_edited, reset_edits, session_gpus, session_prices
from ui.layout import page_setup
from ui.downloads import csv_bytes
from ui.formats import md_plain

page_setup()
st.title("GPUs and prices")
st.caption(
    "Specs come from each GPU's datasheet (dense tensor throughput, not the sparse figure); usable memory is the "
    "total nvidia-smi / rocm-smi reports. Prices are USD per GPU-hour, each with its source and date. Edit any cell "
    "or add rows, then apply: the GPU fit and Time & cost pages use your tables for this browser session only."
)
if is_edited():
    st.info("This session uses edited tables.")

gpu_cols = [c for c in session_gpus()[0].model_dump().keys()]
gpus = pd.DataFrame([{**g.model_dump(), "aliases": ";".join(g.aliases)} for g in session_gpus()])[gpu_cols]
prices = pd.DataFrame([{**p.model_dump(), "date": p.date.isoformat()} for p in session_prices()])

st.subheader("GPUs")
edited_gpus = st.data_editor(gpus, num_rows="dynamic", hide_index=True, width="stretch", key="gpu_editor")
st.subheader("Prices (USD per GPU-hour)")
edited_prices = st.data_editor(prices, num_rows="dynamic", hide_index=True, width="stretch", key="price_editor")


def _rows(frame: pd.DataFrame) -> list[dict]:
    # Empty cells come back as NaN/None; the engine's validators read "" as "not given".
    return [{k: ("" if pd.isna(v) else v) for k, v in row.items()} for row in frame.to_dict("records")]


left, right = st.columns(2)
if left.button("Use these tables for this session", type="primary"):
    try:
        apply_edits(_rows(edited_gpus), _rows(edited_prices))
        st.success("Applied: the GPU fit and Time & cost pages now use these tables.")
    except CatalogError as exc:
        st.error(f"Not applied: {md_plain(exc)}")
if right.button("Restore the bundled catalog"):
    reset_edits()
    st.rerun()

c1, c2 = st.columns(2)
c1.download_button("Download GPUs (CSV)", csv_bytes(edited_gpus), "gpus.csv", "text/csv")
c2.download_button("Download prices (CSV)", csv_bytes(edited_prices), "gpu_prices.csv", "text/csv")
