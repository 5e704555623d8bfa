"""Rerun latency after a widget change, measured in a real browser (headless Debian Chromium through Playwright).

For every page: a fresh server (``--url`` to reuse one), one browser session at 1,400 x 1,000 px that opens the page,
then changes a widget ``--reruns`` times: the micro batch size typed into the sidebar (each time a value not used
before, so no cache of a previous value answers), or, on the pages without the training sidebar (Model, GPUs &
prices, Methodology), the model picked in the sidebar. Each change is timed from the key press to the moment the
page is drawn again: the websocket's ``script_finished`` received, then no element marked stale and two animation
frames painted (Plotly charts included). The server's part (key press to ``script_finished``) is printed beside it.

Target: the drawn time under 300 ms at the 95th percentile on every page (2 cores). Prints one line per page and
exits non-zero when a page misses it. Run by hand (``python benchmarks/bench_browser.py``); not part of the tests.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import free_port, percentile, start_server, wait_healthy  # noqa: E402
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg  # noqa: E402

PAGES = ("memory", "model", "fit", "time_cost", "plans", "gpus", "methodology")
TARGET_P95_MS = 300.0
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking"]
MODELS = ("Qwen2.5 7B", "Llama 3.1 8B")
_IDLE = """() => !document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')
                 && !document.querySelector('[data-stale="true"]')"""
_PAINTED = "() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))"


class Finished:
    """Records when the websocket delivers a ``script_finished`` (other than 'finished early for a rerun')."""

    def __init__(self) -> None:
        self.at: float | None = None

    def frame(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg()
        try:
            msg.ParseFromString(payload)
        except Exception:  # noqa: BLE001 - not a ForwardMsg frame
            return
        if msg.WhichOneof("type") == "script_finished" and msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN:
            self.at = time.perf_counter()


def time_page(browser, url: str, page_name: str, reruns: int) -> tuple[list[float], list[float]]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    finished = Finished()
    page.on("websocket", lambda ws: ws.on("framereceived", finished.frame))
    page.goto(f"{url}/{page_name}")
    page.wait_for_selector("h1", timeout=120_000)
    page.wait_for_timeout(500)
    page.wait_for_function(_IDLE, timeout=120_000)
    drawn, server = [], []
    box = page.locator('[data-testid="stSidebar"] input[aria-label="Micro batch size"]')
    training = box.count() > 0
    for i in range(reruns + 1):  # the first change warms this page's code paths; it is not counted
        finished.at = None
        if training:
            box.fill(str(2 + i))
            start = time.perf_counter()
            box.press("Enter")
        else:
            picker = page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first
            picker.click()
            page.keyboard.type(MODELS[i % 2])
            start = time.perf_counter()
            page.keyboard.press("Enter")
        while finished.at is None:
            page.wait_for_timeout(2)
            if time.perf_counter() - start > 60:
                raise TimeoutError(f"{page_name}: no script_finished within 60 s")
        page.wait_for_function(_IDLE, timeout=60_000, polling="raf")
        page.evaluate(_PAINTED)
        end = time.perf_counter()
        if i:
            drawn.append((end - start) * 1e3)
            server.append((finished.at - start) * 1e3)
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"{page_name}: exception box after a rerun")
    context.close()
    return drawn, server


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", default=",".join(PAGES))
    parser.add_argument("--reruns", type=int, default=20)
    parser.add_argument("--url", help="an already running server (default: a fresh one)")
    args = parser.parse_args(argv)
    proc, url = None, args.url
    if url is None:
        port = free_port()
        proc = start_server(port, Path(tempfile.mkdtemp(prefix="bench_browser_")))
        url = f"http://127.0.0.1:{port}"
    missed = []
    try:
        wait_healthy(url)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                for name in args.pages.split(","):
                    drawn, server = time_page(browser, url, name, args.reruns)
                    p95 = percentile(drawn, 95)
                    print(f"{name:12s} reruns {len(drawn):3d}  drawn p50 {percentile(drawn, 50):5.0f} p95 {p95:5.0f} "
                          f"max {max(drawn):5.0f} ms  (server p50 {percentile(server, 50):5.0f} p95 "
                          f"{percentile(server, 95):5.0f} ms)", flush=True)
                    if p95 > TARGET_P95_MS:
                        missed.append(name)
            finally:
                browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    print("OK" if not missed else f"MISSED (p95 > {TARGET_P95_MS:.0f} ms): {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
