"""The Plans page and a Scale out layout CSV (a fresh user's browser test): the file the Scale out page downloads
("Download this layout's plan (CSV)") is one layout's results, which no plan can hold (a plan is a GPU count with a
ZeRO / FSDP strategy: engine.plan.plans.Plan). The Plans page said "missing required column 'name', ..."; it now says
this is a layout CSV, names the file's layout and GPUs, where the layout reopens and what the page loads
(engine.plan.csv_checks.layout_csv_problem). The file is the one the page really sends: the bytes of its download
button, read where Streamlit stores them (a spy on the test runtime's in-memory media storage, which still stores)."""

from __future__ import annotations

import csv
import io

from streamlit.runtime.memory_media_file_storage import MemoryMediaFileStorage

from apptest_support import no_exception, shown


def _scale_out_csv(new_app, monkeypatch):
    """The Scale out page at its defaults and the bytes of its "Download this layout's plan (CSV)"."""
    sent: list[tuple[bytes, str | None]] = []
    store = MemoryMediaFileStorage.load_and_get_id

    def spy(self, path_or_data, mimetype, kind, filename=None):
        if isinstance(path_or_data, bytes) and mimetype == "text/csv":
            sent.append((path_or_data, filename))
        return store(self, path_or_data, mimetype, kind, filename)

    monkeypatch.setattr(MemoryMediaFileStorage, "load_and_get_id", spy)
    at = new_app().switch_page("pages/scale_out.py").run()  # the default layout fits: the download is there
    no_exception(at)
    return at, next(d for d, name in sent if name == "scale_out_plan.csv")


def test_the_scale_out_layout_csv_is_a_plain_csv(new_app, monkeypatch):
    # A fresh user's run: the record read True / False (Python's words) and every field was quoted. It is now written
    # as the plans CSV writes (engine.csv_cells.csv_text): true / false, quoted only where a cell needs it.
    _, data = _scale_out_csv(new_app, monkeypatch)
    header, first = data.decode().splitlines()[:2]
    assert header.startswith("layout,gpu,num_gpus,fits,verdict,tokens_per_second,hours,")
    row = next(csv.DictReader(io.StringIO(data.decode())))
    assert row["fits"] == "true" and row["gpu"] == "NVIDIA A100 80GB" and row["num_gpus"] == "8"
    assert first.startswith("TP1 PP1 DP8, mb 1, selective recompute, ZeRO-3/FSDP".join('""') + ",NVIDIA A100 80GB,8,true,")
    assert "True" not in data.decode() and "False" not in data.decode()


def test_the_scale_out_layout_csv_is_named_on_the_plans_page(new_app, monkeypatch):
    at, data = _scale_out_csv(new_app, monkeypatch)
    row = next(csv.DictReader(io.StringIO(data.decode())))
    assert row["layout"] == "TP1 PP1 DP8, mb 1, selective recompute, ZeRO-3/FSDP" and row["num_gpus"] == "8"

    at.switch_page("pages/plans.py").run()
    at.file_uploader(key="plans_import").set_value(("scale_out_plan.csv", data, "text/csv")).run()
    no_exception(at)
    errors = [shown(e.value) for e in at.error]
    assert any(e.startswith("The file was not loaded: this is a layout CSV (layout 'TP1 PP1 DP8, mb 1, selective "
                            "recompute, ZeRO-3/FSDP' on 8 x 'NVIDIA A100 80GB'), as the Scale out page's 'Download "
                            "this layout's plan (CSV)'") for e in errors), errors
    text = " ".join(errors)
    assert "missing required column" not in text
    assert "Reopen the layout on the Scale out page (its link carries every input)" in text
    assert "plans load from a plans CSV (the Plans page's 'Download all plans (CSV)' or 'Download this plan (CSV)'" in text
    assert not at.session_state["saved_plans"]  # nothing loaded
