"""Fine-tune fit: what-if explorer for the GPU memory, time and cost of fine-tuning a Hugging Face model.

Run with ``streamlit run streamlit_app.py``. The sidebar's model picker is drawn here, for every page.
"""

import streamlit as st

from ui.layout import app_shell

page = st.navigation(
    [
        st.Page("pages/memory.py", title="Memory", icon=":material/stacked_bar_chart:", default=True),
        st.Page("pages/model.py", title="Model", icon=":material/schema:"),
        st.Page("pages/fit.py", title="GPU fit", icon=":material/grid_on:"),
        st.Page("pages/time_cost.py", title="Time & cost", icon=":material/schedule:"),
        st.Page("pages/plans.py", title="Plans", icon=":material/bookmarks:"),
        # issue 19: many nodes (TP x PP x CP x EP x DP)
        st.Page("pages/scale_out.py", title="Scale out", icon=":material/hub:"),
        st.Page("pages/gpus.py", title="GPUs & prices", icon=":material/memory:"),
        st.Page("pages/methodology.py", title="Methodology", icon=":material/menu_book:"),
    ]
)
app_shell()
page.run()
