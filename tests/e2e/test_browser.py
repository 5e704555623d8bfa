"""End-to-end: ``streamlit run streamlit_app.py`` on 127.0.0.1 in a subprocess, driven by headless Chromium through
Playwright (Debian's ``/usr/bin/chromium``, never a downloaded browser).

One test walks every page through the sidebar navigation: no Streamlit exception box anywhere, the Plotly charts
drawn (``.js-plotly-plot`` with its ``.main-svg``) on the pages that have charts, a widget change (micro batch size)
that changes the displayed peak memory, a CSV download that really arrives with its header, and a fake token given
to the server as ``HF_TOKEN`` that never appears in any page's HTML nor in the server's stdout/stderr although the
server really uses it: the last step reads a gated repo by its id from the local Hub stub (tests/hubstub.py, in this
process on 127.0.0.1, where ``HF_ENDPOINT`` points), which accepts only that token. Nothing reaches the network.
"""

from __future__ import annotations

import csv
import io
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.model.sources import config_from_catalog
from hubstub import HubStub, StubRepo

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "hf_E2EFakeToken_MustNeverAppear_51x"
GATED = "acme/gated-qwen"  # served by the stub with Qwen2.5 0.5B's bundled config: 494,032,768 parameters
BROWSER_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]
# Sidebar navigation label -> (page title, whether the page draws Plotly charts)
PAGES = {
    "Memory": ("GPU memory of a fine-tuning step", True),
    "Model": ("Model architecture", True),
    "GPU fit": ("Which GPU does it fit on?", True),
    "Time & cost": (None, True),
    "Plans": ("Plans: save, compare, export", False),
    "GPUs & prices": ("GPUs and prices", False),
    "Methodology": ("Methodology", False),
}
pytestmark = pytest.mark.e2e


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[dict]:
    """A headless Streamlit server of the app with HF_TOKEN set; yields its URL and its log files."""
    logs = tmp_path_factory.mktemp("streamlit")
    port = _free_port()
    stub = HubStub({GATED: StubRepo(config=config_from_catalog("Qwen/Qwen2.5-0.5B")[0], gated=True)},
                   valid_tokens={TOKEN}).start()
    env = {**os.environ, "HF_TOKEN": TOKEN, "HF_ENDPOINT": stub.url, "HF_HUB_OFFLINE": "0",
           "HF_HUB_DISABLE_TELEMETRY": "1", "PYTHONUNBUFFERED": "1", "HF_HOME": str(logs / "hf_home")}
    out, err = (logs / "stdout.txt").open("wb"), (logs / "stderr.txt").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "streamlit_app.py", "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false",
         "--logger.level", "debug"],
        cwd=ROOT, env=env, stdout=out, stderr=err,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"streamlit did not become healthy: {(logs / 'stderr.txt').read_text()[-2000:]}")
            time.sleep(0.3)
        yield {"url": url, "stdout": logs / "stdout.txt", "stderr": logs / "stderr.txt", "stub": stub}
    finally:
        stub.stop()
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
        err.close()


def _wait_idle(page) -> None:
    """Wait until the script run finished: Streamlit's running indicator gone, and no stale elements."""
    page.wait_for_timeout(200)
    page.wait_for_function(
        """() => !document.querySelector('[data-testid="stStatusWidget"] [data-testid="stStatusWidgetRunningIcon"]')
              && !document.querySelector('[data-stale="true"]')""",
        timeout=45_000,
    )
    page.wait_for_timeout(150)


def _metric_value(page, label: str) -> str:
    metric = page.locator('[data-testid="stMetric"]', has=page.locator('[data-testid="stMetricLabel"]', has_text=label))
    return metric.first.locator('[data-testid="stMetricValue"]').inner_text()


def expected_fit_peak() -> int:
    """Llama 3.1 8B on an A100 80GB in the fit page's models x GPUs matrix, for the default scenario at micro batch 8
    (the engine computes it here independently of the server)."""
    from engine.model.build import architecture_from_config
    from engine.model.catalog import load_models
    from engine.plan.fit import model_matrix
    from engine.hardware.gpus import load_gpus
    from engine.memory.parallel import Strategy
    from engine.scenario.training import Scenario

    catalog = [(m.name, architecture_from_config(m.config)) for m in load_models()]
    matrix = model_matrix(catalog, Scenario.build(micro_batch_size=8), load_gpus(), Strategy.ZERO3)
    record = next(r for r in matrix.records() if r["row"] == "Llama 3.1 8B" and r["gpu"] == "NVIDIA A100 80GB")
    return int(record["peak_bytes_one_gpu"])


def test_every_page_in_a_real_browser(chromium, server, tmp_path):
    from playwright.sync_api import expect, sync_playwright

    started = time.monotonic()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True, args=BROWSER_ARGS)
        try:
            context = browser.new_context(accept_downloads=True, viewport={"width": 1500, "height": 1000})
            page = context.new_page()
            page.set_default_timeout(45_000)
            page.goto(server["url"], wait_until="domcontentloaded")
            expect(page.locator("h1", has_text="GPU memory of a fine-tuning step")).to_be_visible()
            _wait_idle(page)

            # A widget change changes a displayed number: micro batch 1 -> 8 raises the peak memory.
            before = _metric_value(page, "Peak memory")
            box = page.locator('input[aria-label="Micro batch size"]')
            box.fill("8")
            box.press("Enter")
            expect(page.locator('[data-testid="stMetric"]', has_text="Peak memory")
                   .locator('[data-testid="stMetricValue"]')).not_to_have_text(before)
            _wait_idle(page)
            after = _metric_value(page, "Peak memory")
            assert before.endswith(" GiB") and after.endswith(" GiB")
            assert float(after.split()[0].replace(",", "")) > float(before.split()[0].replace(",", "")), (before, after)

            html_seen = []
            for label, (title, has_charts) in PAGES.items():
                page.locator('[data-testid="stSidebarNav"] a', has_text=label).first.click()
                if title:
                    expect(page.locator("h1", has_text=title)).to_be_visible()
                _wait_idle(page)
                assert page.locator('[data-testid="stException"]').count() == 0, label
                if has_charts:
                    expect(page.locator(".js-plotly-plot .main-svg").first).to_be_attached()
                    assert page.locator(".js-plotly-plot").count() >= 1, label
                html_seen.append(page.content())
                if label == "GPU fit":
                    # The scenario (micro batch 8) survived the page switch and a CSV download arrives.
                    assert page.locator('input[aria-label="Micro batch size"]').input_value() == "8"
                    with page.expect_download() as info:
                        page.locator('[data-testid="stDownloadButton"] button',
                                     has_text="Download fit_models_x_gpus (CSV)").click()
                    download = info.value
                    assert download.suggested_filename == "fit_models_x_gpus.csv"
                    target = tmp_path / "fit.csv"
                    download.save_as(target)
                    rows = list(csv.DictReader(io.StringIO(target.read_text())))
                    assert list(rows[0])[:4] == ["row", "gpu", "usable_bytes", "peak_bytes_one_gpu"]
                    cell = next(r for r in rows if r["row"] == "Llama 3.1 8B" and r["gpu"] == "NVIDIA A100 80GB")
                    assert int(cell["peak_bytes_one_gpu"]) == expected_fit_peak()  # the browser's scenario: batch 8
            assert page.locator('[data-testid="stException"]').count() == 0

            # A gated repo by id: the server reads it with its HF_TOKEN (the stub accepts nothing else).
            page.locator('[data-testid="stSidebarNav"] a', has_text="Memory").first.click()
            expect(page.locator("h1", has_text="GPU memory of a fine-tuning step")).to_be_visible()
            _wait_idle(page)
            page.locator('[data-testid="stSidebar"] label', has_text="Hub repo id").first.click()
            _wait_idle(page)
            repo_box = page.locator('input[aria-label="Hub repo id"]')
            repo_box.fill(GATED)
            repo_box.press("Enter")
            try:
                parameters = page.locator('[data-testid="stMetric"]', has=page.get_by_text("Parameters", exact=True))
                expect(parameters.locator('[data-testid="stMetricValue"]')).to_have_text("494.0M", timeout=30_000)
            except AssertionError:
                pytest.fail("the gated model did not load: " + page.locator("section.main, [data-testid='stMain']")
                            .first.inner_text()[:1500])
            _wait_idle(page)
            assert page.locator('[data-testid="stException"]').count() == 0
            html_seen.append(page.content())

            # Uploads: a non-JSON file gets the app's st.error; one over server.maxUploadSize (1 MB) is refused.
            page.locator('[data-testid="stSidebar"] label', has_text="Upload config.json").first.click()
            _wait_idle(page)
            uploader = page.locator('[data-testid="stFileUploader"] input[type="file"]')
            uploader.set_input_files({"name": "config.json", "mimeType": "application/json", "buffer": b"<html>no</html>"})
            expect(page.get_by_text("config.json is not valid JSON (line 1, column 1")).to_be_visible(timeout=30_000)
            uploader.set_input_files({"name": "big.json", "mimeType": "application/json",
                                      "buffer": b"{" + b" " * 1_500_000 + b"}"})
            expect(page.locator('[data-testid="stFileUploader"]', has_text="or smaller")).to_be_visible(timeout=30_000)
            _wait_idle(page)
            assert page.locator('[data-testid="stException"]').count() == 0
        finally:
            browser.close()
    assert any(r.token_accepted for r in server["stub"].requests_for(GATED))  # the token really was used

    html = "\n".join(html_seen)
    assert "Llama" in html  # the pages' content really was captured
    assert TOKEN not in html and "MustNeverAppear" not in html
    server_output = server["stdout"].read_text(errors="replace") + server["stderr"].read_text(errors="replace")
    assert TOKEN not in server_output and "MustNeverAppear" not in server_output
    assert time.monotonic() - started < 90
