"""Plans page: save the sidebar's scenario as a named plan in the team's library (ui/plan_store.py: a database every
replica shares), compare, rename and delete plans, export/import them as CSV, and copy the Trainer/PEFT/bitsandbytes
(and DeepSpeed) settings that match a plan."""

import streamlit as st

from sqlalchemy.exc import SQLAlchemyError

from engine.errors import EngineError
from engine.plan.cost import calibration_for
from engine.plan.code_summary import training_code_summary
from engine.plan.config_export import config_files
from engine.plan.plans import Plan, evaluate_plan, plans_from_csv, plans_to_csv, unique_plan_name
from engine.plan.training_code import training_code
from engine.units import fmt_bytes
from ui.catalog_session import session_gpus, session_prices
from ui.formats import md_plain
from ui.layout import scenario_page
from ui.plan_store import PlanStoreError, current_author, plan_store, unavailable
from ui.plan_actions import choose_plan, remove_control, rename_control, show_notice
from ui.plans import (
    add_plans, band_summary, compare_table, export_stamp, memory_compare_figure, refresh_plans, resolve_config,
    save_plan, saved_names, saved_plans, seen_plan, show_import_report, time_cost_compare_figure,
    time_cost_notes,
)
from ui.scenario_form import time_cost_sidebar
from ui.share import write_query_params
from ui.verdict import verdict_label

model, scenario, hw = scenario_page("Plans: save, compare, export", write_url=False)
tc = time_cost_sidebar(hw)
write_query_params(scenario)  # the dataset, run and price inputs just drawn go into the URL too
if tc is None:
    st.stop()
unit = hw.unit
try:
    store = plan_store()
    unreadable = refresh_plans(store)
except SQLAlchemyError as exc:  # the database went away after this process connected
    st.error(f"The saved plans are not available: {md_plain(str(unavailable(exc)))}.")
    st.stop()
except PlanStoreError as exc:
    st.error(f"The saved plans are not available: {md_plain(str(exc))}.")
    st.stop()
author = current_author()

# --- Save the current scenario ----------------------------------------------------------------------------------------
st.subheader("Save the current scenario")
# An uploaded config has no repo id: the plan names the file and keeps the config itself, so it recomputes anywhere.
uploaded = model.origin.kind == "file"
repo_id = model.origin.repo_id or (f"upload:{model.origin.name}" if uploaded else None)
if not repo_id:
    st.info("This model has no repo id: pick a catalog model, a Hub repo id or upload a config.json to save a plan.")
else:
    try:
        num_gpus = tc.num_gpus
        d = tc.dataset
        cal = calibration_for(model.arch, scenario, tc.gpu, num_gpus, hw.training_strategy,
                              tc.measured_tokens_per_second, fused_kernels=tc.fused_kernels)
        current = Plan(
            # The default name is never a saved plan's (a typed one may be: replacing it needs the explicit choice).
            name=st.session_state.get("plan_name") or unique_plan_name(
                f"{repo_id.split('/')[-1]} {scenario.method.value} {num_gpus} x {tc.gpu.name}", saved_names()),
            model_repo_id=repo_id, model_revision=model.origin.revision,
            **scenario.model_dump(),  # every scenario field is a plan input of the same name
            # one GPU trains without sharding (no DeepSpeed config for a single GPU)
            gpu=tc.gpu.name, num_gpus=num_gpus, strategy=hw.training_strategy,
            dataset_total_tokens=d.total_tokens,
            dataset_examples=d.examples, dataset_avg_tokens=d.avg_tokens, epochs=d.epochs, packing=d.packing, runs=d.runs,
            calibration=cal.factor if cal else 1.0, fused_kernels=tc.fused_kernels, price_source=tc.price_source,
        )
        result = evaluate_plan(current, model.config, gpus=session_gpus(), prices=session_prices(), arch=model.arch)
    except (EngineError, ValueError) as exc:
        st.error(f"This scenario cannot be saved as a plan: {md_plain(exc)}")
        st.stop()
    c1, c2 = st.columns([3, 1])
    c1.text_input("Plan name", key="plan_name", placeholder=current.name)
    st.caption(f"{current.num_gpus} x {md_plain(current.gpu)} ({current.strategy.value}) · peak {fmt_bytes(result.per_gpu_peak_bytes, unit)} "
               f"per GPU · {verdict_label(result.verdict)} · {band_summary(result)} (80% band in brackets)")
    clash = seen_plan(current.name)
    overwrite = clash is not None and c1.checkbox(
        f"Replace the saved plan '{md_plain(current.name)}' (saved by {md_plain(clash.author)}, "
        f"{clash.updated_at[:16].replace('T', ' ')} UTC)", key="plan_overwrite")
    if c2.button("Save plan", key="plan_save", type="primary"):
        if clash is not None and not overwrite:
            st.warning(f"A plan named '{md_plain(current.name)}' is already saved: tick 'Replace the saved plan' to replace it, "
                       "or choose another name.")
        else:
            try:
                save_plan(store, current, model.config if uploaded else None, replace=overwrite, author=author)
                st.success(f"{'Replaced' if overwrite else 'Saved'} plan '{md_plain(current.name)}'.")
            except PlanStoreError as exc:  # saved or changed by someone else a moment ago: nothing overwritten
                st.warning(f"Not saved: {md_plain(str(exc))}.")
            except SQLAlchemyError as exc:
                st.error(f"Not saved: {md_plain(str(unavailable(exc)))}.")
            unreadable = refresh_plans(store)

# --- Import ----------------------------------------------------------------------------------------------------------
with st.expander("Import plans from CSV", expanded=not saved_plans()):
    upload = st.file_uploader("Plans CSV (as exported here)", type=["csv"], key="plans_import")
    if upload is not None and st.session_state.get("_plans_import_id") != upload.file_id:
        st.session_state["_plans_import_id"] = upload.file_id
        imported = plans_from_csv(upload.getvalue(), resolve_config, gpus=session_gpus(), prices=session_prices())
        outcome = add_plans(store, list(imported.plans), (imported.app_version, imported.exported_at), author=author)
        unreadable = refresh_plans(store)
        st.session_state["_plans_import_report"] = (upload.name, imported, outcome)
    if report := st.session_state.get("_plans_import_report"):
        show_import_report(*report)

for row, reason in unreadable:
    st.warning(f"The saved plan '{md_plain(row.plan.name)}' cannot be recomputed in this session: {md_plain(reason)}")
plans = saved_plans()
if not plans:
    show_notice()  # "Removed 'NAME'." of the last plan
    st.info("No saved plans yet: set the scenario in the sidebar and save it, or import a CSV.")
    st.stop()

# --- Compare ---------------------------------------------------------------------------------------------------------
st.subheader("Compare")
compare_table(plans, unit)
st.plotly_chart(memory_compare_figure(plans, unit), width="stretch", key="plans_memory_chart")
st.caption("Components at each plan's peak on one GPU, before any ZeRO / FSDP sharding over its GPUs; ◆ = the per-GPU peak of the plan's GPUs and strategy.")
st.plotly_chart(time_cost_compare_figure(plans), width="stretch", key="plans_time_cost_chart")
time_cost_notes(plans)

# --- Export ----------------------------------------------------------------------------------------------------------
st.subheader("Export")
stamp = export_stamp()
st.download_button("Download all plans (CSV)", plans_to_csv(plans, version=stamp[0], exported_at=stamp[1]),
                   file_name="plans.csv", mime="text/csv", key="plans_csv_all")
st.caption("One row per plan, every input and output in its own column, with the app version and export time. A file "
           "imported and not changed re-exports with its own version and time (byte for byte); otherwise the time is now.")
show_notice()  # what the last rename or removal did
chosen = choose_plan([p.name for p, _ in plans])
if chosen is None:
    st.stop()
plan, result = next(x for x in plans if x[0].name == chosen)
c1, c2, c3 = st.columns([2, 2, 1])
c1.download_button("Download this plan (CSV)", plans_to_csv([(plan, result)]), file_name=f"plan_{chosen}.csv"[:120],
                   mime="text/csv", key="plans_csv_one")
rename_control(store, chosen, c2)
remove_control(store, chosen, c3)
snippet = training_code_summary(plan)
st.markdown(f"**{md_plain(snippet.title)}** for plan '{md_plain(plan.name)}': a starting point to copy, not a full script")
for gap in snippet.not_expressed:
    st.caption(f"Not in this snippet: {md_plain(gap)}.")
try:
    stored = seen_plan(chosen)
    plan_config = stored.config if stored and stored.config else resolve_config(plan.model_repo_id, plan.model_revision)
except EngineError:
    plan_config = None
st.code(training_code(plan, plan_config), language="python")
st.markdown("**The same plan as config files** (each re-imports to this scenario on the Memory page or with "
            "`python -m engine estimate --from-config`):")
exports = config_files(plan, plan_config)
for col, f in zip(st.columns(len(exports)), exports):
    col.download_button(f.name, f.text.encode("utf-8"), file_name=f.name, key=f"plans_export_{f.name}",
                        help=f"{f.format}" + (f". Not expressible in it: {'; '.join(f.lost)}" if f.lost else ""))
