"""Prerequisites of the real-browser tests: Playwright's Python package and a Chromium binary (Debian's
``/usr/bin/chromium``; browsers are never downloaded). Missing ones skip the tests, except under
``E2E_REQUIRED=1`` (set by .ci/run), where they fail them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test in a real headless Chromium (needs playwright + chromium)")


def chromium_path() -> str | None:
    """``E2E_CHROMIUM`` if set, else Debian's Chromium, else ``chromium`` on PATH."""
    explicit = os.environ.get("E2E_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    for candidate in CHROMIUM_CANDIDATES:
        if Path(candidate).is_file():
            return candidate
    return shutil.which("chromium")


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of the Chromium to drive; skips (or fails under E2E_REQUIRED=1) when it or Playwright is missing."""
    required = os.environ.get("E2E_REQUIRED") == "1"
    problems = []
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        problems.append(f"Playwright's Python package is not installed ({exc}); pip install -e '.[e2e]'")
    path = chromium_path()
    if path is None:
        problems.append("no Chromium found (apt-get install chromium, or set E2E_CHROMIUM)")
    if problems:
        message = "; ".join(problems)
        if required:
            pytest.fail(f"E2E_REQUIRED=1 but {message}", pytrace=False)
        pytest.skip(message)
    from playwright.sync_api import expect

    # Playwright's 5 s default for expect() fails a first request of a fresh server on a busy 2-core machine (the same
    # page at the same place, just later); a hang still fails, after 30 s.
    expect.set_options(timeout=30_000)
    return path  # type: ignore[return-value]
