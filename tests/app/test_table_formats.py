"""Tables of the Plans, Time & cost and GPU fit pages: each number column in one format (st.dataframe's column_config),
the unit in its header, bytes in the sidebar's unit. Before, st.dataframe formatted each column from its data, so
``1234.5678`` stood beside ``1,234.6``, and the Plans table showed GB whatever the sidebar's unit."""

from __future__ import annotations

import pytest

from apptest_support import column_config, no_exception, table
from engine.hardware.gpus import find_gpu, load_prices


def formats(frame) -> dict[str, tuple[str, str]]:
    return {k: (v["label"], v["type_config"]["format"]) for k, v in column_config(frame).items() if "type_config" in v}


def test_plans_compare_table_has_one_format_per_column_and_bytes_in_the_sidebar_unit(new_app):
    at = new_app()
    at.query_params["model"] = "Qwen/Qwen2.5-0.5B"
    at.switch_page("pages/plans.py").run()
    at.radio(key="unit").set_value("GB").run()
    at.text_input(key="plan_name").input("first").run()
    at.button(key="plan_save").click().run()
    no_exception(at)
    compare = table(at, "per_gpu_peak_bytes")
    assert formats(compare) == {
        "micro_batch_size": ("micro batch size", "%,d"), "seq_len": ("sequence length", "%,d"), "num_gpus": ("GPUs", "%,d"),
        "per_gpu_peak_bytes": ("per-GPU peak (GB)", "%,.2f"), "tokens_per_second": ("throughput (tokens/s)", "%,.0f"),
        "train_hours": ("wall time (h)", "%,.3f"), "cost_on_demand_usd": ("cost on demand (USD)", "%,.2f"),
        "cost_spot_usd": ("cost spot (USD)", "%,.2f"),
        # the 80% band of each time and cost (issue 23), as in the CSV
        "tokens_per_second_low": ("throughput low (tokens/s)", "%,.0f"),
        "tokens_per_second_high": ("throughput high (tokens/s)", "%,.0f"),
        "train_hours_low": ("wall time low (h)", "%,.3f"), "train_hours_high": ("wall time high (h)", "%,.3f"),
        "cost_on_demand_usd_low": ("cost on demand low (USD)", "%,.2f"),
        "cost_on_demand_usd_high": ("cost on demand high (USD)", "%,.2f"),
        "cost_spot_usd_low": ("cost spot low (USD)", "%,.2f"), "cost_spot_usd_high": ("cost spot high (USD)", "%,.2f")}
    (plan, result), = at.session_state["saved_plans"]
    assert compare.value["per_gpu_peak_bytes"][0] == pytest.approx(result.per_gpu_peak_bytes / 1e9)

    at.radio(key="unit").set_value("GiB").run()
    compare = table(at, "per_gpu_peak_bytes")
    assert formats(compare)["per_gpu_peak_bytes"] == ("per-GPU peak (GiB)", "%,.2f")
    assert compare.value["per_gpu_peak_bytes"][0] == pytest.approx(result.per_gpu_peak_bytes / 2**30)


def test_time_cost_tables_have_one_format_per_column_and_units_in_the_headers(new_app):
    at = new_app().switch_page("pages/time_cost.py").run()
    at.radio(key="tc_view").set_value("plans").run()  # one section at a time (ui.views)
    no_exception(at)
    assert formats(table(at, "pareto")) == {
        "num_gpus": ("GPUs", "%,d"), "tokens_per_second": ("throughput (tokens/s)", "%,.0f"),
        "tokens_per_second_low": ("throughput low (tokens/s)", "%,.0f"),  # the 80% band (issue 23)
        "tokens_per_second_high": ("throughput high (tokens/s)", "%,.0f"),
        "hours": ("wall time (h)", "%,.3f"), "hours_low": ("wall time low (h)", "%,.3f"),
        "hours_high": ("wall time high (h)", "%,.3f"), "gpu_hours": ("GPU time (GPU-h)", "%,.3f"),
        "cost_usd_on_demand": ("cost on demand (USD)", "%,.2f"), "cost_usd_spot": ("cost spot (USD)", "%,.2f"),
        "gpu_hours_low": ("GPU time low (GPU-h)", "%,.3f"), "gpu_hours_high": ("GPU time high (GPU-h)", "%,.3f"),
        "cost_usd_on_demand_low": ("cost on demand low (USD)", "%,.2f"),
        "cost_usd_on_demand_high": ("cost on demand high (USD)", "%,.2f"),
        "cost_usd_spot_low": ("cost spot low (USD)", "%,.2f"), "cost_usd_spot_high": ("cost spot high (USD)", "%,.2f")}
    at.radio(key="tc_view").set_value("measured").run()
    assert formats(table(at, "measured tokens/s")) == {
        "measured tokens/s": ("measured (tokens/s)", "%,.0f"), "predicted tokens/s": ("predicted (tokens/s)", "%,.0f"),
        "MFU (predicted)": ("MFU (predicted)", "%.3f"), "HFU (predicted)": ("HFU (predicted)", "%.3f")}


def test_fit_price_table_has_one_format_per_column_and_units_in_the_headers(new_app):
    at = new_app().switch_page("pages/fit.py").run()
    no_exception(at)
    prices = table(at, "on_demand")
    assert formats(prices) == {"on_demand": ("on demand (USD per GPU-hour)", "%,.2f"),
                               "spot": ("spot (USD per GPU-hour)", "%,.2f")}
    a100 = sorted((p for p in load_prices() if p.gpu == find_gpu("A100 80GB").name), key=lambda p: p.on_demand_usd_per_hour)
    assert list(prices.value["on_demand"]) == [p.on_demand_usd_per_hour for p in a100]  # numbers, not text
