"""Streamlit widgets and Plotly charts shared by the pages. No formulas live here: every number comes
from the ``engine`` package."""
