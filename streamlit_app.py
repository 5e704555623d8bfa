"""Fine-tune fit: what-if explorer for the GPU memory, time and cost of fine-tuning a Hugging Face model.

Run with ``streamlit run streamlit_app.py``. This file is the router: ``st.navigation`` picks the page from the URL
path (``/memory``, ``/fit``, ...), and the shell (page config, the sidebar's model picker and hardware) is drawn
here for every page before the page runs. The root URL opens the Memory page at ``/memory``, so every page,
the first one included, has its own address to share.
"""

import streamlit as st

from ui.layout import app_shell

# Emoji page icons: the browser draws them itself (Streamlit makes the favicon a data: SVG of the emoji), while a
# ":material/...:" page icon's favicon is fetched from fonts.gstatic.com, which an offline or firewalled deployment
# cannot reach (tests/e2e/test_browser.py checks that no request leaves the server).
PAGES = [
    st.Page("pages/memory.py", title="Memory", icon="📊", url_path="memory"),
    st.Page("pages/model.py", title="Model", icon="🧩", url_path="model"),
    st.Page("pages/fit.py", title="GPU fit", icon="🎯", url_path="fit"),
    st.Page("pages/time_cost.py", title="Time & cost", icon="⏱️", url_path="time_cost"),
    st.Page("pages/plans.py", title="Plans", icon="🔖", url_path="plans"),
    st.Page("pages/scale_out.py", title="Scale out", icon="🕸️", url_path="scale_out"),
    st.Page("pages/gpus.py", title="GPUs & prices", icon="💾", url_path="gpus"),
    st.Page("pages/methodology.py", title="Methodology", icon="📖", url_path="methodology"),
]


def _landing() -> None:
    # Streamlit gives the default page the root URL only, so "/memory" would be "not found": the root is a hidden
    # page that moves to /memory, keeping a shared link's query string.
    st.switch_page(PAGES[0], query_params=st.query_params.to_dict())


landing = st.Page(_landing, title="Fine-tune fit", url_path="start", default=True, visibility="hidden")
page = st.navigation([landing, *PAGES])
if page is not landing:
    app_shell()
page.run()
