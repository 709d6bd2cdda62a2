"""One way to start a real browser for the browser tests: Playwright (pip) driving the system's Chromium.

Playwright's own browser download needs the internet, so the tests use Debian's ``chromium`` package
(``.ci/run`` installs it). A test that needs a browser calls :func:`chromium` and is skipped, with the
reason, where no Chromium is installed; in CI (``CI=true``) a missing browser is a failure instead, so a
broken install can never turn the browser tests into silent skips.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# The flags keep a headless Chromium from reaching for the network at start (updates, sync, QUIC) on a
# machine that has none; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SCREENSHOTS = Path(os.environ.get("COURSE_SCREENSHOTS", Path(__file__).resolve().parents[1] / "test-screenshots"))


def chromium_path() -> str | None:
    """The system Chromium's executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Playwright ``Browser`` on the system Chromium; closed on exit."""
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium on this CI machine: .ci/run should have installed Debian's 'chromium'")
        pytest.skip("no system Chromium (Debian/Ubuntu: apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: object, name: str) -> Path:
    """Save a full-page screenshot under ``SCREENSHOTS`` (for a person to look at after a failure)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
