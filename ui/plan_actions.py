"""The Plans page's actions on one chosen plan: choose it, rename it, remove it in two steps, and the message each
leaves for the next rerun.

Removing a plan of the team's library takes two clicks that name it: "Remove this plan" arms a confirmation
("Remove 'NAME' from the team library?" with Remove and Cancel), and only its Remove deletes, with the version the
plan had when the first click was made (a plan someone changed meanwhile is refused, never removed silently). A rerun
that shows another plan disarms it. After a removal nothing is chosen: the selector shows its placeholder, so a
repeated click cannot remove the next plan. The actions are button callbacks: they run before the page's script, so
what they change (the selection, the emptied "New name" box) is in place when the widgets are drawn.
"""

from __future__ import annotations

import streamlit as st
from pydantic import ValidationError
from sqlalchemy.exc import SQLAlchemyError

from engine.errors import explain_validation
from ui.formats import md_plain
from ui.plan_store import PlanStore, PlanStoreError, unavailable
from ui.plans import remove_plan, rename_plan, seen_plan

CHOSEN_KEY = "plans_chosen"  # the selectbox of the plan acted on
NEW_NAME_KEY = "plans_new_name"  # the rename box
ARMED_KEY = "_plans_remove_armed"  # (name, version) a first "Remove this plan" click asked to remove
NOTICE_KEY = "_plans_notice"  # what an action did, for the rerun it causes: (what, *names or reason)


def show_notice() -> None:
    """The last action's message, once (each drawn here, user text escaped)."""
    what, *args = st.session_state.pop(NOTICE_KEY, None) or (None,)
    if what == "renamed":
        st.success(f"Renamed '{md_plain(args[0])}' to '{md_plain(args[1])}'.")
    elif what == "removed":
        st.success(f"Removed '{md_plain(args[0])}'.")
    elif what == "no_name":
        st.warning(f"Not renamed: type the new name of '{md_plain(args[0])}' in the box first.")
    elif what in ("not_renamed", "not_removed"):
        st.warning(f"Not {'renamed' if what == 'not_renamed' else 'removed'}: {md_plain(args[0])}.")
    elif what == "unavailable":
        st.error(f"Not {'renamed' if args[0] == 'renamed' else 'removed'}: {md_plain(args[1])}.")


def _failed(verb: str, exc: Exception) -> None:
    if isinstance(exc, ValidationError):
        st.session_state[NOTICE_KEY] = (f"not_{verb}", explain_validation(exc))
    elif isinstance(exc, SQLAlchemyError):
        st.session_state[NOTICE_KEY] = ("unavailable", verb, str(unavailable(exc)))
    else:
        st.session_state[NOTICE_KEY] = (f"not_{verb}", str(exc))


def _rename(store: PlanStore, name: str) -> None:
    new_name = (st.session_state.get(NEW_NAME_KEY) or "").strip()
    if not new_name:
        st.session_state[NOTICE_KEY] = ("no_name", name)
        return
    try:
        rename_plan(store, name, new_name)
    except (PlanStoreError, ValidationError, SQLAlchemyError) as exc:
        _failed("renamed", exc)  # the typed name stays in the box, to correct
        return
    st.session_state[CHOSEN_KEY] = new_name  # the renamed plan stays the chosen one
    st.session_state[NEW_NAME_KEY] = ""
    st.session_state[NOTICE_KEY] = ("renamed", name, new_name)


def _arm(name: str) -> None:
    seen = seen_plan(name)
    if seen is not None:
        st.session_state[ARMED_KEY] = (name, seen.version)


def _disarm() -> None:
    st.session_state.pop(ARMED_KEY, None)


def _remove(store: PlanStore) -> None:
    armed = st.session_state.pop(ARMED_KEY, None)
    if armed is None:  # a second click on a confirmation already acted on: nothing more to remove
        return
    name, version = armed
    try:
        remove_plan(store, name, version)
    except (PlanStoreError, SQLAlchemyError) as exc:  # changed, renamed or deleted by someone else since: kept
        _failed("removed", exc)
        return
    st.session_state[CHOSEN_KEY] = None  # nothing chosen: no other plan takes its place under the buttons
    st.session_state[NOTICE_KEY] = ("removed", name)


def choose_plan(names: list[str]) -> str | None:
    """The plan selector: the first plan on a first visit, then the user's choice; None (its placeholder) after a
    removal, or when the chosen plan left the library (renamed or deleted elsewhere), never another plan implicitly.
    A removal armed for another plan than the one shown is disarmed."""
    if st.session_state.get(CHOSEN_KEY) not in (*names, None):
        st.session_state[CHOSEN_KEY] = None
    chosen = st.selectbox("Plan", names, key=CHOSEN_KEY, placeholder="Choose a plan to download, rename or remove")
    if (armed := st.session_state.get(ARMED_KEY)) and armed[0] != chosen:
        _disarm()
    return chosen


def rename_control(store: PlanStore, name: str, column) -> None:
    """The "New name" box and its "Rename this plan" button in ``column``."""
    column.text_input("New name", key=NEW_NAME_KEY, placeholder=name, label_visibility="collapsed")
    column.button("Rename this plan", key="plans_rename", on_click=_rename, args=(store, name))


def remove_control(store: PlanStore, name: str, column) -> None:
    """"Remove this plan" in ``column``, and under it, once armed, the confirmation that names the plan."""
    column.button("Remove this plan", key="plans_remove", on_click=_arm, args=(name,))
    if not st.session_state.get(ARMED_KEY):
        return
    box = st.container(border=True)
    box.warning(f"Remove '{md_plain(name)}' from the team library? Every session loses it; this cannot be undone.")
    yes, no, _ = box.columns([1, 1, 4])
    yes.button("Remove", key="plans_remove_confirm", type="primary", on_click=_remove, args=(store,))
    no.button("Cancel", key="plans_remove_cancel", on_click=_disarm)
