"""Fine-tune fit: what-if explorer for the GPU memory of fine-tuning a Hugging Face model.

Run with ``streamlit run streamlit_app.py``. The sidebar's model picker is shared by every page.
"""

import streamlit as st

from ui.model_picker import model_sidebar

st.set_page_config(page_title="Fine-tune fit", page_icon="🧮", layout="wide")

page = st.navigation(
    [
        st.Page("pages/memory.py", title="Memory", icon="📊", default=True),
        st.Page("pages/model.py", title="Model", icon="🧱"),
        st.Page("pages/methodology.py", title="Methodology", icon="📐"),
    ]
)
model_sidebar()
page.run()
