"""The dev container (VS Code, Codespaces) installs the environment ``make lab`` does, on a supported Python.

Neither VS Code nor the container runs here: the JSON is read as VS Code reads it (plain JSON is valid JSONC), and
its set-up script is run with a stand-in ``make`` and ``sudo`` that record what they are asked.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from conftest import ROOT
from test_environment import _makefile_python_range

FOLDER = ROOT / ".devcontainer"


def _config() -> dict:
    return json.loads((FOLDER / "devcontainer.json").read_text(encoding="utf-8"))


def test_the_dev_container_is_valid_json_on_a_supported_python() -> None:
    config = _config()
    assert config["name"] and config["postCreateCommand"] == "bash .devcontainer/post-create.sh"
    image = re.fullmatch(r"mcr\.microsoft\.com/devcontainers/python:3\.(\d+)(-\w+)?", config["image"])
    low, high = _makefile_python_range()
    assert image and low <= (3, int(image[1])) <= high, config["image"]
    vscode = config["customizations"]["vscode"]
    assert {"ms-python.python", "ms-toolsai.jupyter"} <= set(vscode["extensions"])
    assert vscode["settings"]["python.defaultInterpreterPath"] == "${containerWorkspaceFolder}/.venv/bin/python"
    assert re.search(r"^VENV \?= \.venv$", (ROOT / "Makefile").read_text(), re.MULTILINE), "the Makefile's .venv"


def test_its_set_up_runs_the_makefiles_install_with_pytorchs_cpu_build(tmp_path: Path) -> None:
    shims, log = tmp_path / "bin", tmp_path / "calls.txt"
    shims.mkdir()
    for name in ("make", "sudo"):
        (shims / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n')
        (shims / name).chmod(0o755)
    venv_python = tmp_path / "repo" / ".venv" / "bin" / "python"  # what `make env` would have made
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\necho "venv-python $*" >> "{log}"\n')
    venv_python.chmod(0o755)
    env = {**os.environ, **_config()["containerEnv"], "PATH": f"{shims}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(FOLDER / "post-create.sh")], cwd=tmp_path / "repo", env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    calls = log.read_text().splitlines()
    assert "make env PIP_ARGS=--extra-index-url https://download.pytorch.org/whl/cpu" in calls, calls
    assert any(c.startswith("sudo apt-get install") and "bubblewrap" in c for c in calls), calls
    assert any(c.startswith("venv-python -m ipykernel install") for c in calls), calls
    assert "env:" in (ROOT / "Makefile").read_text(), "the Makefile's env target (requirements.txt + course_lib)"
