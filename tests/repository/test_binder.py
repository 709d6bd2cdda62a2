"""The class image (``binder/``, repo2docker): its build plan installs the course and its post-build step works.

repo2docker prints the Dockerfile it would build with ``--no-build --debug``, without Docker. It is not one of the
course's packages: the slow test installs it, pinned (:data:`REPO2DOCKER`), into a virtual environment of its own.
The post-build step runs here for real, with a stand-in for the image's ``python`` (its pip call is recorded, not
run), into a folder standing in for the image's environment; JupyterLab started with what it wrote opens on
``notebooks/``.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from conftest import ROOT
from test_environment import _makefile_python_range

#: The repo2docker the build plan is generated with (PyPI's jupyter-repo2docker).
REPO2DOCKER = "jupyter-repo2docker==2026.4.0"
BINDER = ROOT / "binder"


def _post_build(tmp_path: Path) -> tuple[Path, list[str]]:
    """Run binder/postBuild as repo2docker does (in the repository), into a stand-in environment ``prefix``."""
    prefix, shims = tmp_path / "notebook-env", tmp_path / "bin"
    shims.mkdir(parents=True)
    log = tmp_path / "python-calls.txt"
    (shims / "python").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\n')
    (shims / "python").chmod(0o755)
    env = {**os.environ, "NB_PYTHON_PREFIX": str(prefix), "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run([str(BINDER / "postBuild")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return prefix, log.read_text().splitlines()


def test_the_post_build_step_installs_course_lib_the_settings_and_opens_notebooks(tmp_path: Path) -> None:
    prefix, calls = _post_build(tmp_path)
    assert calls == ["-m pip install --no-cache-dir --no-deps -e ."], calls  # course_lib, as `make env` installs it
    settings = prefix / "share/jupyter/lab/settings/overrides.d/transformer-course.json"
    assert settings.read_bytes() == (ROOT / "jupyter/lab/settings/overrides.d/transformer-course.json").read_bytes()
    lab = json.loads((prefix / "etc/jupyter/jupyter_lab_config.json").read_text())
    notebook = json.loads((prefix / "etc/jupyter/jupyter_notebook_config.json").read_text())
    assert lab == {"LabApp": {"default_url": "/lab/tree/notebooks"}}
    assert notebook == {"JupyterNotebookApp": {"default_url": "/lab/tree/notebooks"}}


def test_the_image_takes_the_courses_pins_with_pytorchs_cpu_build_and_a_supported_python() -> None:
    lines = [line.split("#", 1)[0].strip() for line in (BINDER / "requirements.txt").read_text().splitlines()]
    lines = [line for line in lines if line]
    assert "-r ../requirements.txt" in lines, "the image must install the course's own pins, not a copy of them"
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in lines
    assert all("==" in line for line in lines if not line.startswith("-")), f"unpinned: {lines}"
    runtime = re.fullmatch(r"python-3\.(\d+)\s*", (BINDER / "runtime.txt").read_text())
    low, high = _makefile_python_range()
    assert runtime and low <= (3, int(runtime[1])) <= high, "binder/runtime.txt: a Python the Makefile supports"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_jupyterlab_opens_on_notebooks_with_what_the_post_build_step_wrote(tmp_path: Path) -> None:
    prefix, _ = _post_build(tmp_path)
    (tmp_path / "root" / "notebooks").mkdir(parents=True)
    port = _free_port()
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(prefix / "etc/jupyter")}
    lab = subprocess.Popen([sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--allow-root",
                            "--ServerApp.token=", f"--ServerApp.root_dir={tmp_path / 'root'}"],
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object) -> None:
            return None

    try:
        location = None
        for _ in range(240):
            try:
                urllib.request.build_opener(NoRedirect).open(f"http://127.0.0.1:{port}/", timeout=5)
            except urllib.error.HTTPError as err:
                location = err.headers.get("Location")
                break
            except OSError:
                time.sleep(0.5)
        assert location is not None and urlsplit(location).path == "/lab/tree/notebooks", location
    finally:
        lab.terminate()
        lab.wait(timeout=60)


@pytest.mark.slow
def test_repo2dockers_build_plan_installs_course_lib_and_runs_the_post_build_step(tmp_path: Path) -> None:
    venv = tmp_path / "repo2docker"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "--quiet", REPO2DOCKER],
                               capture_output=True, text=True, timeout=1200)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    plan = subprocess.run([str(venv / "bin/repo2docker"), "--no-build", "--debug", str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert plan.returncode == 0, plan.stderr
    dockerfile, log = plan.stdout, plan.stderr
    assert "Building conda environment for python=3.11" in log, log
    steps = [line for line in dockerfile.splitlines() if line.startswith(("COPY", "RUN", "CMD", "ENTRYPOINT"))]
    copy = steps.index(next(s for s in steps if re.fullmatch(r"COPY --chown=\S+ src/ \$\{REPO_DIR\}/", s)))
    pins = steps.index('RUN ${KERNEL_PYTHON_PREFIX}/bin/pip install --no-cache-dir -r "binder/requirements.txt"')
    post_build = steps.index("RUN ./binder/postBuild")
    assert copy < pins < post_build, "the repository is copied in, then the pins installed, then postBuild run"
