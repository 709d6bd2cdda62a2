"""One way to start a real browser for the browser tests: Playwright (pip) driving the system's Chromium.

Playwright's own browser download needs the internet, so the tests use Debian's ``chromium`` package
(``.ci/run`` installs it). A test that needs a browser calls :func:`chromium` and is skipped, with the
reason, where no Chromium is installed; in CI (``CI=true``) a missing browser is a failure instead, so a
broken install can never turn the browser tests into silent skips.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

# The flags keep a headless Chromium from reaching for the network at start (updates, sync, QUIC) on a
# machine that has none; --no-sandbox because CI runs as root.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ROOT = Path(__file__).resolve().parents[1]
SHIPPED_SETTINGS = ROOT / "jupyter" / "lab" / "settings"
SCREENSHOTS = Path(os.environ.get("COURSE_SCREENSHOTS", Path(__file__).resolve().parents[1] / "test-screenshots"))


def chromium_path() -> str | None:
    """The system Chromium's executable, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def required_chromium() -> str:
    """The system Chromium's executable; the test is skipped where there is none (failed in CI)."""
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium on this CI machine: .ci/run should have installed Debian's 'chromium'")
        pytest.skip("no system Chromium (Debian/Ubuntu: apt-get install chromium)")
    return executable


@contextmanager
def chromium() -> Iterator[object]:
    """A headless Playwright ``Browser`` on the system Chromium; closed on exit."""
    executable = required_chromium()
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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def jupyterlab(base: Path, notebooks: list[Path]) -> Iterator[dict[str, str]]:
    """A JupyterLab server in ``base`` on a copy of ``notebooks``, with the course's shipped settings and
    ``COURSE_SMOKE=1``; yields its URL, token and log file, and stops it on exit."""
    root = base / "notebooks"
    root.mkdir(parents=True)
    for path in notebooks:
        shutil.copy(path, root / path.name)
    shutil.copytree(SHIPPED_SETTINGS, base / "app-settings")  # as `make lab` installs them
    user = base / "user-settings" / "@jupyterlab" / "notebook-extension"
    user.mkdir(parents=True)
    # The test's own user setting: record each cell's execution times (read below), nothing else.
    (user / "tracker.jupyterlab-settings").write_text(json.dumps({"recordTiming": True}))
    port, token = _free_port(), os.urandom(16).hex()
    env = {k: v for k, v in os.environ.items() if k not in ("MPLBACKEND", "JUPYTER_CONFIG_DIR")}
    env.update(COURSE_SMOKE="1", JUPYTERLAB_SETTINGS_DIR=str(base / "user-settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"), JUPYTER_CONFIG_DIR=str(base / "config"),
               JUPYTER_RUNTIME_DIR=str(base / "runtime"), PYTHONPATH=os.pathsep.join(
                   [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    log = open(base / "lab.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         f"--LabApp.app_settings_dir={base / 'app-settings'}", "--expose-app-in-browser", "--allow-root"],
        env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not start:\n{(base / 'lab.log').read_text()[-3000:]}")
                time.sleep(0.5)
        yield {"url": url, "token": token, "log": str(base / "lab.log")}
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


# JavaScript run in the page, on the application object (`--expose-app-in-browser`).
CURRENT = "window.jupyterapp.shell.currentWidget"
READ_CELLS = f"""() => {{
    const nb = {CURRENT};
    return Array.from({{length: nb.content.model.cells.length}},
        (_, i) => {{ const c = nb.content.model.cells.get(i); return {{
            type: c.type, source: c.sharedModel.getSource(), meta: c.getMetadata('course') || null,
            count: c.type === 'code' ? c.executionCount : null,
            outputs: c.type === 'code' ? c.outputs.toJSON() : [],
            execution: c.getMetadata('execution') || null}}; }});
}}"""


def open_notebook(page, lab: dict[str, str], name: str) -> None:
    page.goto(f"{lab['url']}/lab/tree/{name}?token={lab['token']}&reset")
    page.wait_for_function(f"() => window.jupyterapp && {CURRENT} && {CURRENT}.content && "
                           f"{CURRENT}.context.path === {json.dumps(name)} && {CURRENT}.sessionContext.session "
                           f"&& {CURRENT}.sessionContext.session.kernel && "
                           f"{CURRENT}.sessionContext.session.kernel.status === 'idle'", timeout=120_000)


def run_command(page, command: str) -> None:
    page.evaluate(f"() => window.jupyterapp.commands.execute({json.dumps(command)})")


def wait_until_done(page, timeout_s: float) -> list[dict]:
    """Wait until every code cell ran (or one failed and Run All stopped); return the cells."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        idle = page.evaluate(f"() => {CURRENT}.sessionContext.session.kernel.status === 'idle'")
        cells = page.evaluate(READ_CELLS)
        code = [c for c in cells if c["type"] == "code"]
        failed = any(o.get("output_type") == "error" for c in code for o in c["outputs"])
        if idle and (failed or all(c["count"] for c in code)):
            time.sleep(0.5)  # outputs of the last message
            return page.evaluate(READ_CELLS)
        time.sleep(1.0)
    raise AssertionError(f"Run All did not finish within {timeout_s} s")
