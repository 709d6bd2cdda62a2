"""The notebooks are stored with the kernel metadata JupyterLab writes (tools/notebook_metadata.py), so that
opening one does not mark it modified.

Measured in JupyterLab 4.6.6 with ipykernel 7.4.0 (headless Chromium, the notebook opened and its kernel idle):
a notebook stored with ``"Python 3"`` / ``{"name": "python"}`` was marked modified; one stored with the
kernelspec alone, or with ``language_info`` lacking the Python version, too; one stored with exactly what
:func:`course_lib.exercises.authoring.kernel_metadata` gives was not.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from conftest import NOTEBOOKS, ROOT

from course_lib.exercises.authoring import kernel_metadata

_spec = importlib.util.spec_from_file_location("notebook_metadata", ROOT / "tools" / "notebook_metadata.py")
notebook_metadata = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebook_metadata)


def test_kernel_metadata_is_what_the_kernel_reports() -> None:
    wanted = kernel_metadata()
    assert wanted["kernelspec"] == {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    assert wanted["language_info"]["version"] == sys.version.split()[0]
    assert wanted["language_info"]["codemirror_mode"] == {"name": "ipython", "version": 3}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_a_notebook_is_stored_with_jupyterlabs_kernel_metadata(path) -> None:
    stored = json.loads(path.read_text(encoding="utf-8"))["metadata"]
    wanted = kernel_metadata()
    assert stored["kernelspec"] == wanted["kernelspec"], "run python tools/notebook_metadata.py"
    stored_version = stored["language_info"].get("version")
    if stored_version != wanted["language_info"]["version"]:
        pytest.skip(f"stored for Python {stored_version}, this is {wanted['language_info']['version']} (JupyterLab "
                    f"on another Python marks the notebook modified; the course stores CI's version)")
    assert stored["language_info"] == wanted["language_info"], "run python tools/notebook_metadata.py"


def test_the_script_touches_only_the_kernel_metadata() -> None:
    wanted = {"kernelspec": {"display_name": "X", "language": "python", "name": "x"}, "language_info": {"name": "y"}}
    for path in NOTEBOOKS[:3]:
        text = path.read_text(encoding="utf-8")
        before, after = json.loads(text), json.loads(notebook_metadata.with_kernel_metadata(text, wanted))
        assert after["cells"] == before["cells"] and after["metadata"]["course"] == before["metadata"]["course"]
        assert {k: after["metadata"][k] for k in wanted} == wanted
        assert set(after) == set(before) and set(after["metadata"]) == set(before["metadata"]) | set(wanted)
