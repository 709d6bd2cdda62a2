"""The student's seat in a real browser: JupyterLab, as a learner opens it, runs every notebook.

One JupyterLab server (a free localhost port, a token, ``--no-browser``, the course's shipped settings from
``jupyter/lab/settings``, ``COURSE_SMOKE=1`` so training loops are short) serves a temporary copy of the
student notebooks. Headless Chromium (``tests/browser.py``) opens each one and runs *Run All*. Then, read
from the page's own notebook model (what JupyterLab renders):

- no cell shows an error or anything on stderr (a warning included), every code cell ran;
- every check cell says "not implemented yet" (the committed notebooks hold untouched stubs);
- no "Jupyter news" pop-up is shown (the shipped settings switch it off);

and in notebook 00 a correct solution typed into the exercise cell makes its check say "passed"; then a
syntax error in that cell, and the same in a fresh kernel, make it say "failed", never "passed" (the old
answer is still defined) nor a NameError; and a training cell appended to it shows its progress bar while
JupyterLab's status bar says Busy (not Idle).

``make test`` (CI) opens notebook 00 and a sample of the others (``LAB_SHARE``, printed); ``make test-all``
opens every notebook. The student-version run of every notebook (no error, nothing on stderr, every check
saying "not implemented yet") is asserted in CI on nbval's execution of it (``tests/website/test_site.py``), so that
no notebook is executed twice for the same assertions.

The time each check cell took in the kernel (JupyterLab's recorded timing) is written to
``SCREENSHOTS/check_times.json``: the first check of each notebook and the later ones. Screenshots of
every notebook after its run go to ``SCREENSHOTS`` (``tests/browser.py``), for a person to look at.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime

import pytest
from browser import (
    CURRENT,
    READ_CELLS,
    SCREENSHOTS,
    chromium,
    jupyterlab,
    open_notebook,
    run_command,
    screenshot,
    wait_until_done,
)
from conftest import NOTEBOOKS, ROOT, SAMPLE_NOTES, run_everything, sample, sample_seed

SHIPPED_SETTINGS = ROOT / "jupyter" / "lab" / "settings"
STATUS = re.compile(r"^\S*\s*(?P<name>\w+): (?P<status>passed|failed|not implemented yet|not defined|error|"
                    r"invalid)\b", re.MULTILINE)
RUN_TIMEOUT_S = 900  # one notebook's Run All on a busy 2-core machine
# Which notebooks run in JupyterLab: COURSE_LAB_NOTEBOOKS=00,07 runs only those (to look into one); `make test-all`
# (COURSE_TEST_ALL=1) runs them all; `make test` (CI) runs notebook 00 (where a solution is typed) and a sample of
# LAB_SHARE of the others, drawn from the run's seed (conftest.sample). Every notebook's student version is still
# run to the end in CI, by nbval, and its outputs are held to the same assertions (tests/website/test_site.py).
LAB_SHARE = 1 / 4
ONLY = [n.strip() for n in os.environ.get("COURSE_LAB_NOTEBOOKS", "").split(",") if n.strip()]


def lab_notebooks() -> list:
    """The notebooks this run opens in JupyterLab (see above)."""
    if ONLY:
        return [p for p in NOTEBOOKS if p.name[:2] in ONLY]
    if run_everything():
        return list(NOTEBOOKS)
    others = sample([p.name for p in NOTEBOOKS[1:]], LAB_SHARE, salt="lab")
    return [p for p in NOTEBOOKS if p == NOTEBOOKS[0] or p.name in others]


LAB_NOTEBOOKS = lab_notebooks()

# A learner's stable softmax, typed into notebook 00's exercise cell.
SOLUTION = '''def stable_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax of `x` along `dim`, safe for large inputs."""
    shifted = x - x.amax(dim=dim, keepdim=True)
    exps = torch.exp(shifted)
    return exps / exps.sum(dim=dim, keepdim=True)
'''


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A JupyterLab server on a copy of the notebooks, with the shipped settings; its URL and token."""
    with jupyterlab(tmp_path_factory.mktemp("lab"), NOTEBOOKS) as server:
        yield server


def _text(outputs: list[dict]) -> str:
    parts = []
    for out in outputs:
        parts.append("".join(out.get("text", "")) if out.get("output_type") == "stream" else "".join(
            "".join(v) for k, v in out.get("data", {}).items() if k.startswith("text/plain")))
        if out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    return "".join(parts)


def _seconds(execution: dict | None) -> float | None:
    """Kernel-side time of one cell from JupyterLab's recorded timing (execute_input to execute_reply)."""
    if not execution or "iopub.execute_input" not in execution or "shell.execute_reply" not in execution:
        return None
    start, end = (datetime.fromisoformat(execution[k].replace("Z", "+00:00"))
                  for k in ("iopub.execute_input", "shell.execute_reply"))
    return round((end - start).total_seconds(), 3)


def _close(page) -> None:
    """Shut the notebook's kernel down and save it (the temporary copy), so the page can be left."""
    page.evaluate(f"async () => {{ await {CURRENT}.sessionContext.shutdown(); await {CURRENT}.context.save(); }}")


def _news_popup(page) -> bool:
    return page.get_by_text(re.compile("Jupyter news", re.IGNORECASE)).count() > 0


@pytest.mark.slow
def test_the_shipped_settings_are_in_effect(lab) -> None:
    """JupyterLab reads the course's overrides: news and update checks are off (no pop-up, no network)."""
    url = f"{lab['url']}/lab/api/settings/@jupyterlab/apputils-extension:notification?token={lab['token']}"
    with urllib.request.urlopen(url, timeout=30) as response:
        reply = json.load(response)
    # Overrides become the schema's defaults; the (empty) user settings would win over them.
    defaults = {k: v.get("default") for k, v in reply["schema"]["properties"].items()}
    composite = {**defaults, **reply["settings"]}
    shipped = json.loads((SHIPPED_SETTINGS / "overrides.d" / "transformer-course.json").read_text())
    assert shipped["@jupyterlab/apputils-extension:notification"] == {"fetchNews": "false",
                                                                       "checkForUpdates": False}
    assert composite["fetchNews"] == "false" and composite["checkForUpdates"] is False, composite


@pytest.mark.slow
def test_every_notebook_runs_in_jupyterlab_and_a_typed_solution_passes(lab) -> None:
    if len(LAB_NOTEBOOKS) < len(NOTEBOOKS):
        SAMPLE_NOTES.append(f"tests/notebooks/test_browser_lab.py: {len(LAB_NOTEBOOKS)} of {len(NOTEBOOKS)} "
                            f"notebooks opened in JupyterLab ({', '.join(p.name[:2] for p in LAB_NOTEBOOKS)}; "
                            f"seed {sample_seed()})")
    problems: list[str] = []
    times: dict[str, list[dict]] = {}
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        for path in LAB_NOTEBOOKS:
            open_notebook(page, lab, path.name)
            run_command(page, "notebook:run-all-cells")
            cells = wait_until_done(page, RUN_TIMEOUT_S)
            if _news_popup(page):  # after the run: JupyterLab asks a while after it opens
                problems.append(f"{path.name}: the Jupyter news pop-up is shown")
            screenshot(page, f"lab-{path.stem}")
            checks = []
            for i, cell in enumerate(cells):
                if cell["type"] != "code":
                    continue
                for out in cell["outputs"]:
                    if out.get("output_type") == "error" or out.get("name") == "stderr":
                        problems.append(f"{path.name} cell {i}: {_text([out])[:400]}")
                if not cell["count"]:
                    problems.append(f"{path.name} cell {i}: did not run")
                meta = cell["meta"] or {}
                if meta.get("role") == "check":
                    match = STATUS.search(_text(cell["outputs"]))
                    status = match.group("status") if match and match.group("name") == meta["exercise"] else None
                    if status != "not implemented yet":
                        problems.append(f"{path.name}: check {meta['exercise']} says {status!r}, "
                                        "expected 'not implemented yet'")
                    checks.append({"exercise": meta["exercise"], "seconds": _seconds(cell["execution"])})
            times[path.stem] = checks
            _close(page)
        problems += _typed_solution_passes(page, lab, times)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / "check_times.json").write_text(json.dumps(times, indent=1))
    firsts = {nb: c[0]["seconds"] for nb, c in times.items() if c}
    later = [c["seconds"] for cs in times.values() for c in cs[1:] if c["seconds"] is not None]
    print(f"first check per notebook (s, in the browser's kernel): {firsts}; later checks: max "
          f"{max(later, default=float('nan'))} s")
    assert not problems, "\n".join(problems)


def _typed_solution_passes(page, lab: dict[str, str], times: dict[str, list[dict]]) -> list[str]:
    """Open notebook 00 afresh, type a solution into its exercise cell, run it and its check."""
    name = "00_welcome.ipynb"
    open_notebook(page, lab, name)
    cells = page.evaluate(READ_CELLS)
    index = next(i for i, c in enumerate(cells) if (c["meta"] or {}).get("role") == "exercise")
    # Run the cells above the exercise (imports), then select the exercise cell and replace its text.
    page.evaluate(f"() => {{ {CURRENT}.content.activeCellIndex = {index}; }}")
    run_command(page, "notebook:run-all-above")
    page.wait_for_function(f"() => {CURRENT}.sessionContext.session.kernel.status === 'idle'", timeout=120_000)
    editor = page.locator(".jp-Notebook .jp-Cell").nth(index).locator(".cm-content")
    editor.scroll_into_view_if_needed()
    editor.click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(SOLUTION)
    page.keyboard.press("Shift+Enter")  # runs the exercise cell, moves to the check cell
    page.keyboard.press("Shift+Enter")  # runs the check cell
    check = page.locator(".jp-Notebook .jp-Cell").nth(index + 1).locator(".jp-OutputArea-output")
    try:
        check.filter(has_text="stable_softmax: passed").wait_for(timeout=120_000)
    except Exception:  # noqa: BLE001 - reported with a screenshot
        screenshot(page, "lab-typed-solution-failed")
        return [f"{name}: the typed solution's check did not say passed: "
                f"{_text(page.evaluate(READ_CELLS)[index + 1]['outputs'])!r}"]
    screenshot(page, "lab-typed-solution")
    cells = page.evaluate(READ_CELLS)
    times["00_welcome typed"] = [{"exercise": "stable_softmax", "seconds": _seconds(cells[index + 1]["execution"])}]
    problems = _a_broken_cell_never_passes(page, index) + _busy_while_training(page)
    _close(page)
    return problems


BROKEN = SOLUTION.replace("dim: int = -1)", "dim: int = -1")  # a SyntaxError: the cell defines nothing


def _run_exercise_and_check(page, index: int) -> str:
    """Run the exercise cell at ``index`` and its check (as Shift+Enter twice does); the check's text."""
    page.evaluate(f"() => {{ {CURRENT}.content.activeCellIndex = {index}; }}")
    run_command(page, "notebook:run-cell-and-select-next")
    run_command(page, "notebook:run-cell-and-select-next")
    page.wait_for_function(f"() => {CURRENT}.content.model.cells.get({index + 1}).executionCount !== null && "
                           f"{CURRENT}.sessionContext.session.kernel.status === 'idle'", timeout=120_000)
    time.sleep(0.5)  # the last output message
    return _text(page.evaluate(READ_CELLS)[index + 1]["outputs"])


def _a_broken_cell_never_passes(page, index: int) -> list[str]:
    """Issue 33: after a correct answer, a syntax error in the exercise cell; then a fresh kernel.

    Neither check may show a green tick (the old answer is still defined after the first) or a NameError."""
    problems = []
    page.evaluate(f"() => {{ {CURRENT}.content.model.cells.get({index}).sharedModel.setSource({json.dumps(BROKEN)});"
                  f" {CURRENT}.content.model.cells.get({index + 1}).executionCount = null; }}")
    for moment in ("after a correct answer", "in a fresh kernel"):
        if moment == "in a fresh kernel":
            page.evaluate(f"async () => {{ await {CURRENT}.sessionContext.session.kernel.restart(); "
                          f"{CURRENT}.content.model.cells.get({index + 1}).executionCount = null; }}")
            page.evaluate(f"() => {{ {CURRENT}.content.activeCellIndex = {index}; }}")
            run_command(page, "notebook:run-all-above")
            page.wait_for_function(f"() => {CURRENT}.sessionContext.session.kernel.status === 'idle'",
                                   timeout=120_000)
        text = _run_exercise_and_check(page, index)
        if "✅" in text or "passed" in text or "NameError" in text or \
                "raised SyntaxError when it last ran" not in text:
            screenshot(page, "lab-broken-cell-" + moment.replace(" ", "-"))
            problems.append(f"00_welcome.ipynb: a syntax error in the exercise cell {moment}; its check says "
                            f"{text!r}")
        page.evaluate(f"() => {{ {CURRENT}.content.model.cells.get({index + 1}).executionCount = null; }}")
    return problems


# A training cell with the course's progress bar (a tqdm widget), about 6 s whatever the machine's load.
TRAINING = """import torch
from course_lib.models.gpt import GPT
from course_lib.training.language_model import train_lm
history = train_lm(GPT(50, d_model=16, num_heads=2, num_layers=1, max_len=16), torch.randint(0, 50, (500,)),
                   steps=100_000, batch_size=4, seq_len=8, max_seconds=6)
"""
WIDGET = "application/vnd.jupyter.widget-view+json"
STATUS_TEXT = "() => Array.from(document.querySelectorAll('.jp-StatusBar-TextItem')).map(e => e.textContent).join(' ')"


def _busy_while_training(page) -> list[str]:
    """In the open notebook, append and run a training cell; for 4 s from the moment its progress bar shows
    (the training runs 6 s), the kernel's status (and the status bar's text) must say Busy.

    JupyterLab 4.6 opened a kernel subshell for the bar's widget, and the kernel's "idle" answer to that
    request turned the status bar to Idle for the rest of the cell; the shipped settings switch comms over
    subshells off (``jupyter/README.md``).
    """
    index = page.evaluate(f"() => {CURRENT}.content.model.cells.length")
    page.evaluate(f"() => {{ {CURRENT}.content.model.sharedModel.insertCell({index}, {{cell_type: 'code', "
                  f"source: {json.dumps(TRAINING)}}}); {CURRENT}.content.activeCellIndex = {index}; }}")
    # the kernel's status messages during the cell, with the request each answers (reported on failure)
    page.evaluate(f"() => {{ window.courseStatus = []; {CURRENT}.sessionContext.session.kernel.iopubMessage.connect("
                  "(_, m) => { if (m.header.msg_type === 'status') window.courseStatus.push("
                  "m.content.execution_state + ' (' + m.parent_header.msg_type + ') ' + Date.now()); }); }")
    # started, not awaited: the command's promise settles only when the cell has run
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-cell'); }")
    samples: list[tuple[str, str]] = []
    started = time.monotonic()
    deadline, shown = time.monotonic() + 120, None
    while time.monotonic() < deadline and (shown is None or time.monotonic() < shown + 4):
        outputs = page.evaluate(READ_CELLS)[index]["outputs"]
        if any(WIDGET in out.get("data", {}) for out in outputs):  # the bar is shown: training runs for 6 s
            shown = shown or time.monotonic()
            samples.append((page.evaluate(f"() => {CURRENT}.sessionContext.session.kernel.status"),
                            page.evaluate(STATUS_TEXT)))
        time.sleep(0.3)
    page.wait_for_function(f"() => {CURRENT}.sessionContext.session.kernel.status === 'idle'", timeout=120_000)
    if len(samples) < 5:
        return [f"notebook 00: the training cell's progress bar was seen only {len(samples)} times in 4 s: "
                f"{page.evaluate(READ_CELLS)[index]['outputs']!r}"]
    wrong = [sample for sample in samples if sample[0] != "busy" or "Busy" not in sample[1]]
    if wrong:
        messages = page.evaluate("() => window.courseStatus")
        return [f"notebook 00: while the training cell ran, {len(wrong)} of {len(samples)} looks at the kernel "
                f"status were not Busy, e.g. {wrong[0]}; status messages (state, request, ms): {messages}; "
                f"bar first seen after {shown - started:.1f} s; the cell shows "
                f"{page.locator('.jp-Notebook .jp-Cell').nth(index).inner_text()!r}"]
    return []
