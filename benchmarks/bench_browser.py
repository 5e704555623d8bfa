"""Rerun latency after a widget change, measured in a real browser (headless Debian Chromium through Playwright).

For every page: a fresh server (``--url`` to reuse one), one browser session at 1,400 x 1,000 px that opens the page,
then changes a widget ``--reruns`` times: the micro batch size typed into the sidebar (the sequence length on Scale
out; each time a value not used before, so no cache of a previous value answers), or, on the pages without the training sidebar (Model, GPUs &
prices, Methodology), the model picked in the sidebar. Each change is timed in the page, from the key press to the moment it is drawn again: Streamlit's frontend reports
the script run finished (it has then received and applied every element) and two animation frames have been painted
(Plotly charts included). The part until the run finished ("run") is printed beside it. A change whose run is not drawn within 20 s
counts as 20 s (never dropped); one that starts no run at all (a click that missed) is named on stderr and not timed.

The wall times count the time other processes held the cores, so each line also gives the CPU one change cost: the
page's main thread in Chromium (``ThreadTime`` of its Performance domain: parsing the deltas, React, Plotly, layout)
and, with a server of its own, the server process (/proc: the script run, serialising, sending), medians per change,
and the load average when the page was done. A page is named by its URL path, with a query to time another section of
a page that draws one at a time (``ui.views``): ``--pages "time_cost?tc_view=plans,fit?fit_view=techniques"``.

Target: the drawn time under 300 ms at the 95th percentile on every page (2 cores). Prints one line per page and
exits 1 when a page misses it (p95 >= 300 ms). Run by hand (``python benchmarks/bench_browser.py``); not part of the tests.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import free_port, percentile, start_server, wait_healthy  # noqa: E402

PAGES = ("memory", "model", "fit", "time_cost", "plans", "scale_out", "gpus", "methodology")
TRAINING_PAGES = ("memory", "fit", "time_cost", "plans", "scale_out")  # the pages with the training sidebar
# Scale out: the micro batch must divide the layout's global batch (64 over 8 data-parallel ranks by default), so the
# sequence length is the sidebar value typed there.
SEQUENCE_PAGES = ("scale_out",)
TARGET_P95_MS = 300.0
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--disable-background-networking"]
MODELS = ("Qwen2.5 7B", "Llama 3.1 8B")
_IDLE = """() => !document.querySelector('[data-testid="stStatusWidgetRunningIcon"]')
                 && !document.querySelector('[data-stale="true"]')"""


# In the page: the key press's time, then when Streamlit's script state (the ``data-test-script-state`` attribute of
# the app's root, which its frontend keeps for tests) went from "running" back to "notRunning", then two animation
# frames later (drawn). All timed with performance.now() in the page, so the driver's own work is not counted.
_PROBE = """
window.__rerun = null;
document.addEventListener('keydown', (e) => {
  if (e.key === 'Enter') window.__rerun = {start: performance.now(), running: false, finished: null, drawn: null};
}, true);
new MutationObserver((records) => {
  const r = window.__rerun, app = document.querySelector('[data-testid="stApp"]');
  if (!r || !app || r.finished !== null) return;
  const state = app.getAttribute('data-test-script-state');
  // A fast run may go running -> notRunning between two callbacks: the records' old values still show it.
  if (state === 'running' || records.some((m) => m.oldValue === 'running')) r.running = true;
  if (state === 'notRunning' && r.running) {
    r.finished = performance.now();
    requestAnimationFrame(() => requestAnimationFrame(() => { r.drawn = performance.now(); }));
  }
}).observe(document, {attributes: true, attributeOldValue: true, subtree: true,
                      attributeFilter: ['data-test-script-state']});
"""


def cpu_ms(pid: int | None) -> float:
    """CPU time (user + system) a process has used so far, in ms, from /proc (Linux); 0 without a pid."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1e3 / os.sysconf("SC_CLK_TCK")


@dataclass
class Timed:
    drawn: list[float] = field(default_factory=list)  # ms from the key press until drawn, per change
    run: list[float] = field(default_factory=list)  # ms until the script run finished, per change
    browser_cpu: list[float] = field(default_factory=list)  # the page's main-thread CPU ms, per change
    server_cpu: list[float] = field(default_factory=list)  # the server process's CPU ms, per change (own server only)


def _thread_ms(cdp) -> float:
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return metrics["ThreadTime"] * 1e3  # CPU time of the page's main thread (Chromium's Performance domain)


def time_page(browser, url: str, page_name: str, reruns: int, server_pid: int | None = None) -> Timed:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(_PROBE)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    page.goto(f"{url}/{page_name}")
    page.wait_for_selector("h1", timeout=120_000)
    page.wait_for_timeout(500)
    page.wait_for_function(_IDLE, timeout=120_000)
    out = Timed()
    sequence = page_name.split("?")[0] in SEQUENCE_PAGES
    box = page.locator(f'[data-testid="stSidebar"] input[aria-label="{"Sequence length" if sequence else "Micro batch size"}"]')
    training = page_name.split("?")[0] in TRAINING_PAGES
    if training:
        box.wait_for()
    for i in range(reruns + 1):  # the first change warms this page's code paths; it is not counted
        before = _thread_ms(cdp), cpu_ms(server_pid)
        if training:
            box.fill(str(1024 + 128 * i if sequence else 2 + i))
            box.press("Enter")
        else:
            page.locator('[data-testid="stSidebar"] [data-testid="stSelectbox"]').first.click()
            page.keyboard.type(MODELS[i % 2])
            option = page.get_by_role("option").filter(has_text=MODELS[i % 2]).first
            page.evaluate("() => { window.__rerun = {start: performance.now(), running: false, finished: null, "
                          "drawn: null}; }")  # the click below starts the rerun
            option.click()
        slow = False
        try:
            page.wait_for_function("() => window.__rerun && window.__rerun.drawn !== null", timeout=20_000, polling=20)
        except PlaywrightTimeout:
            state = page.evaluate("() => window.__rerun")
            if not (state and state["running"]):  # the change started no run the probe saw (a missed click): not timed
                print(f"  {page_name}: change {i} not timed (no run seen)", file=sys.stderr)
                page.keyboard.press("Escape")
                continue
            # a run that started and was not drawn within 20 s is counted (as 20 s or more), never dropped
            print(f"  {page_name}: change {i} not drawn within 20 s", file=sys.stderr)
            slow = True
        page.wait_for_function(_IDLE, timeout=120_000)
        r = page.evaluate("() => window.__rerun")
        if slow:
            r["drawn"] = r["finished"] = max(r["drawn"] or 0.0, r["finished"] or 0.0, r["start"] + 20_000)
        if i:
            out.drawn.append(r["drawn"] - r["start"])
            out.run.append(r["finished"] - r["start"])
            # CPU of the change (the driver's typing and waiting included, a few ms): not inflated by other work on
            # the machine the way the wall times are
            out.browser_cpu.append(_thread_ms(cdp) - before[0])
            out.server_cpu.append(cpu_ms(server_pid) - before[1])
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"{page_name}: exception box after a rerun")
        page.wait_for_timeout(300)  # a person reads before the next change
    context.close()
    return out


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
    print(f"{os.cpu_count()} CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start")
    try:
        wait_healthy(url)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
            try:
                for name in args.pages.split(","):
                    t = time_page(browser, url, name, args.reruns, None if proc is None else proc.pid)
                    drawn = t.drawn
                    p95 = percentile(drawn, 95)
                    cpu = (f"; CPU per change p50: browser {percentile(t.browser_cpu, 50):4.0f} ms"
                           + (f", server {percentile(t.server_cpu, 50):4.0f} ms" if proc is not None else ""))
                    print(f"{name:12s} reruns {len(drawn):3d}  drawn p50 {percentile(drawn, 50):5.0f} p95 {p95:5.0f} "
                          f"max {max(drawn, default=float('nan')):5.0f} ms  (run p50 {percentile(t.run, 50):5.0f} p95 "
                          f"{percentile(t.run, 95):5.0f} ms{cpu}; load {os.getloadavg()[0]:.2f})", flush=True)
                    if not p95 < TARGET_P95_MS:  # a miss at 300 ms too, and when nothing was timed (nan)
                        missed.append(name)
            finally:
                browser.close()
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
    print("OK" if not missed else f"MISSED (p95 >= {TARGET_P95_MS:.0f} ms): {', '.join(missed)}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
