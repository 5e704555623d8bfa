"""Where the browser's CPU goes in one sidebar change: a profile of a page in headless Chromium (issue 26).

bench_browser.py says how long a redraw takes and how much main-thread CPU it costs; this script says what that CPU
is spent on, for the same change on the same page (the micro batch size typed into the sidebar, a value not used
before; the first change warms the page and is not counted). Per change, medians or means over ``--changes``:

- the page's main-thread CPU (Chromium's ``ThreadTime``, as bench_browser.py) and the messages the server sent
  (websocket frames and bytes: one frame per element, widget or block of the rerun);
- the DOM commits: how many separate batches of DOM mutations the frontend made, and in which Streamlit element
  (``data-testid``) the mutations of each batch fell, which shows which elements were drawn again;
- a V8 CPU profile (the Profiler domain, 200 µs sampling): self time per script file of Streamlit's frontend (its
  chunks are named after their component: ``PlotlyChart``, ``DataFrame``, ``StreamlitMarkdown`` ...) and the
  functions of most inclusive time.

Run by hand against a running server, e.g. ``python benchmarks/profile_browser.py --url http://127.0.0.1:8501
--pages memory,fit``; not part of the tests. The profiler adds its own overhead: compare files against each other,
not the CPU figure here against bench_browser.py's.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_browser import _IDLE, _PROBE, ARGS, CHROMIUM, _thread_ms  # noqa: E402

# Each MutationObserver callback is one batch of DOM changes (one React commit, or one Plotly draw); the mutations are
# counted by the nearest element above them that carries a data-testid (Streamlit's element containers do).
_COMMITS = """() => {
  window.__commits = [];
  const owner = (node) => {
    let e = node && node.nodeType === 1 ? node : node && node.parentElement;
    while (e && !(e.getAttribute && e.getAttribute('data-testid'))) e = e.parentElement;
    return e ? e.getAttribute('data-testid') : '?';
  };
  new MutationObserver((records) => {
    const counts = {};
    for (const m of records) {
      const k = owner(m.target);
      counts[k] = (counts[k] || 0) + 1 + m.addedNodes.length + m.removedNodes.length;
    }
    window.__commits.push(counts);
  }).observe(document.body, {childList: true, subtree: true, attributes: true, characterData: true});
}"""


def _change(page, box, value: int) -> None:
    box.fill(str(value))
    box.press("Enter")
    page.wait_for_function("() => window.__rerun && window.__rerun.drawn !== null", timeout=20_000, polling=20)
    page.wait_for_function(_IDLE, timeout=60_000)
    page.wait_for_timeout(300)


def _frame_key(call_frame: dict) -> tuple[str, str, int, int]:
    return (call_frame["functionName"] or "(anonymous)", call_frame["url"].rsplit("/", 1)[-1],
            call_frame["lineNumber"], call_frame["columnNumber"])


def summarise_profile(profile: dict, changes: int, top: int) -> list[str]:
    """Self ms per script file and inclusive ms of the ``top`` functions, per change, from a CDP ``Profile``."""
    nodes = {n["id"]: n for n in profile["nodes"]}
    parent = {c: n["id"] for n in profile["nodes"] for c in n.get("children", ())}
    sampled: collections.Counter = collections.Counter()
    for node_id, delta_us in zip(profile["samples"], profile["timeDeltas"]):
        sampled[node_id] += delta_us
    by_file: collections.Counter = collections.Counter()
    inclusive: collections.Counter = collections.Counter()
    for node_id, us in sampled.items():
        key = _frame_key(nodes[node_id]["callFrame"])
        by_file[key[1] or key[0]] += us  # native frames ("(program)", "(garbage collector)") by their name
        seen, x = set(), node_id
        while x is not None:  # each function once per sample, however deep its recursion
            k = _frame_key(nodes[x]["callFrame"])
            if k not in seen:
                inclusive[k] += us
                seen.add(k)
            x = parent.get(x)
    lines = ["  self ms per change, by script file:"]
    lines += [f"    {us / 1e3 / changes:7.1f}  {name}" for name, us in by_file.most_common(top) if name != "(idle)"]
    lines.append("  inclusive ms per change, by function (name, file, line, column):")
    lines += [f"    {us / 1e3 / changes:7.1f}  {k}" for k, us in inclusive.most_common(top + 2) if k[0] not in ("(root)", "(idle)")]
    return lines


def profile_page(browser, url: str, name: str, changes: int, top: int) -> list[str]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.add_init_script(_PROBE)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    frames: list[int] = []
    cdp.on("Network.webSocketFrameReceived", lambda e: frames.append(len(e["response"]["payloadData"])))
    cdp.send("Network.enable")
    page.goto(f"{url}/{name}")
    page.wait_for_selector("h1", timeout=120_000)
    page.wait_for_timeout(500)
    page.wait_for_function(_IDLE, timeout=120_000)
    box = page.locator('[data-testid="stSidebar"] input[aria-label="Micro batch size"]')
    _change(page, box, 2)  # warms this page's code paths
    page.evaluate(_COMMITS)
    cdp.send("Profiler.enable")
    cdp.send("Profiler.setSamplingInterval", {"interval": 200})
    cdp.send("Profiler.start")
    cpu, sent, batches = [], [], []
    testids: collections.Counter = collections.Counter()
    for i in range(changes):
        frames.clear()
        page.evaluate("() => { window.__commits = []; }")
        before = _thread_ms(cdp)
        _change(page, box, 3 + i)
        cpu.append(_thread_ms(cdp) - before)
        sent.append((len(frames), sum(frames)))
        commits = page.evaluate("() => window.__commits")
        batches.append(len(commits))
        for counts in commits:
            testids.update(counts)
    profile = cdp.send("Profiler.stop")["profile"]
    context.close()
    lines = [f"{name}: browser main-thread CPU per change p50 {statistics.median(cpu):.0f} ms (with the profiler); "
             f"messages {statistics.median(n for n, _ in sent):.0f} ({statistics.median(b for _, b in sent) / 1e3:,.0f} kB "
             f"as received); DOM commit batches {statistics.median(batches):.0f}",
             "  DOM mutations per change, by the element they fell in: "
             + ", ".join(f"{k} {v / changes:.0f}" for k, v in testids.most_common(8))]
    return lines + summarise_profile(profile, changes, top)


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a running server of the app")
    parser.add_argument("--pages", default="memory,fit,time_cost", help="pages with the training sidebar")
    parser.add_argument("--changes", type=int, default=4)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            for name in args.pages.split(","):
                print("\n".join(profile_page(browser, args.url, name, args.changes, args.top)), flush=True)
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
