"""course_lib installs beside a PyTorch that is already there, as Colab or a student's machine has one (slow).

A fresh virtual environment (no system site-packages, no course_lib) gets the PyTorch this environment runs, at its
exact version, from the package sources pip is configured with (those ``make env`` installed from; this machine keeps
the CPU build on disk); each test works on its own copy of that environment. Then:

- the wheel of course_lib, as built for distribution, is installed with its dependencies: pip leaves PyTorch as it
  is (its log and its files say so), and notebook 00's cells up to its first check run there;
- the notebooks' install cell runs where course_lib is missing, beside the packages Colab ships, and installs the
  wheel from a local package index (a folder served by ``http.server`` on 127.0.0.1, standing in for the published
  one; ``COURSE_PACKAGES`` points the cell at it): PyTorch untouched, notebook 00's check cell runs, and a second
  run of the cell does nothing.

The dependencies the course's wheel brings (sacrebleu, num2words, ...) come from those same package sources.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from static_server import serve

import course_lib
from course_lib.edition.build import build_edition, edition_pins
from course_lib.edition.install import PACKAGES_VARIABLE, build_wheel, install_cell_source, packages_url, publication

pytestmark = pytest.mark.slow

#: What Colab ships of the course's dependencies (installed at the course's pins before the cell runs); the cell
#: then adds the others (sacrebleu, num2words, koreanize-matplotlib) and course_lib.
COLAB_HAS = ("numpy", "matplotlib", "tqdm", "nbformat", "nbclient", "ipykernel", "scikit-learn", "tokenizers")

#: Runs cells as Jupyter does (IPython's shell) and stops at the first that fails.
RUN_CELLS = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for source in json.load(sys.stdin):
    result = shell.run_cell(source)
    if not result.success:
        sys.exit(f"cell failed: {result.error_before_exec or result.error_in_exec!r}")
import course_lib
print("course_lib from", course_lib.__file__)
"""


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def _fresh_env(folder: Path) -> dict[str, str]:
    """Environment variables for the fresh venv: nothing of this one's course_lib on the path."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", PACKAGES_VARIABLE)}
    env["PATH"] = os.pathsep.join([str(folder / "bin"), env.get("PATH", "")])
    return env


def _pip(python: Path, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check", *args],
                          capture_output=True, text=True, env=env, cwd=cwd, timeout=1800)
    assert done.returncode == 0, f"pip install {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def torch_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding this environment's PyTorch at its exact version (``2.13.0+cpu`` here), installed once:
    each test works on a copy of it (:func:`_venv_with_torch`), so PyTorch is installed once, not per test."""
    folder = tmp_path_factory.mktemp("torch-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, timeout=300)
    # --no-compile, then one import that writes the byte code of the modules PyTorch imports, and only those
    # (18 s -> 8 s on an idle 2-core machine). What the tests install on top of it is installed --no-compile too
    # (each venv runs one notebook: Python compiles the modules it imports, not the thousands it never does); the
    # install cell's own pip, the code under test, is left as a student's runs.
    python, env = folder / "bin" / "python", _fresh_env(folder)
    _pip(python, "--quiet", "--no-compile", f"torch=={metadata.version('torch')}", env=env, cwd=folder)
    writing = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([str(python), "-W", "ignore", "-c", "import torch"], check=True, env=writing, cwd=folder,
                   timeout=300)
    return folder


def _venv_with_torch(template: Path, folder: Path) -> Path:
    """A copy of the venv ``template`` at ``folder`` (its python is a link to the base interpreter, and nothing in
    it names its own path that ``python -m pip`` and ``python -c`` use); returns its python.

    The files under ``lib/`` (PyTorch's 750 MB) are hard links to the template's, not copies: 5 processor seconds
    less per copy. pip never writes into an installed file (it removes or renames a package's files and writes new
    ones), so the template stays as installed, and a reinstalled torch file still shows as a new inode in
    :func:`_torch_files`. The rest (``bin/``, whose scripts pip may rewrite in place, and ``pyvenv.cfg``) is
    copied."""
    library = template / "lib"

    def link_or_copy(source: str, destination: str) -> None:
        if Path(source).is_relative_to(library):
            os.link(source, destination)
        else:
            shutil.copy2(source, destination)

    shutil.copytree(template, folder, symlinks=True, copy_function=link_or_copy)
    (folder / "pyvenv.cfg").write_text((template / "pyvenv.cfg").read_text().replace(str(template), str(folder)))
    return folder / "bin" / "python"


def _torch_files(python: Path) -> dict[str, tuple[int, int, int]]:
    """Every file of the installed torch (package and dist-info): size, inode and modification time."""
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    files = {}
    for top in [site / "torch", *site.glob("torch-*.dist-info")]:
        for path in top.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts:
                stat = path.stat()
                files[str(path.relative_to(site))] = (stat.st_size, stat.st_ino, stat.st_mtime_ns)
    assert len(files) > 1000, f"no torch found in {site}"
    return files


def _notebook_00_up_to_its_first_check() -> list[str]:
    """Notebook 00's code cells as a student runs them, up to its first check cell (the stub left as it is)."""
    nb = nbformat.read(ROOT / "notebooks" / "00_welcome.ipynb", as_version=4)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cells.append(cell.source)
            if cell.metadata.get("course", {}).get("role") == "check":
                return cells
    raise AssertionError("notebook 00 has no check cell")


def _run_check_cell(python: Path, folder: Path, env: dict[str, str]) -> str:
    done = subprocess.run([str(python), "-c", RUN_CELLS], input=json.dumps(_notebook_00_up_to_its_first_check()),
                          capture_output=True, text=True, env={**env, "MPLBACKEND": "Agg"}, cwd=folder, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "not implemented yet" in done.stdout, done.stdout  # the check's verdict on the untouched stub
    assert f"course_lib from {folder}" in done.stdout, done.stdout  # the fresh venv's, not this repository's
    return done.stdout


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding course_lib's wheel, built from this repository as ``make site`` publishes it."""
    folder = tmp_path_factory.mktemp("packages")
    wheel = build_wheel(ROOT, folder)
    assert wheel.name == f"course_lib-{course_lib.__version__}-py3-none-any.whl"
    return folder


@pytest.fixture()
def local_index(wheels: Path) -> Iterator[str]:
    """``wheels`` served over HTTP on 127.0.0.1, standing in for the published ``packages/`` folder."""
    with serve(wheels) as url:
        yield url


def test_the_wheel_installs_beside_pytorch_without_reinstalling_it(wheels: Path, torch_venv: Path,
                                                                   tmp_path: Path) -> None:
    folder = tmp_path / "venv"
    python = _venv_with_torch(torch_venv, folder)
    env = _fresh_env(folder)
    before = _torch_files(python)
    (wheel,) = wheels.glob("*.whl")
    done = _pip(python, "--no-compile", str(wheel), env=env, cwd=tmp_path)
    installed = [line for line in done.stdout.splitlines() if line.startswith("Installing collected packages:")]
    assert installed and "course_lib" in installed[0].replace("-", "_"), done.stdout
    assert "torch" not in installed[0].split(":", 1)[1].replace(" ", "").split(","), installed[0]
    assert "Requirement already satisfied: torch" in done.stdout, done.stdout
    assert _torch_files(python) == before, "pip touched torch's files"
    _run_check_cell(python, folder, env)


def test_the_install_cell_installs_course_lib_where_it_is_missing(local_index: str, torch_venv: Path,
                                                                  tmp_path: Path) -> None:
    folder = tmp_path / "venv"
    python = _venv_with_torch(torch_venv, folder)
    env = _fresh_env(folder)
    pins = _pins()
    _pip(python, "--quiet", "--no-compile", *(f"{name}=={pins[name]}" for name in COLAB_HAS), env=env, cwd=tmp_path)
    missing = subprocess.run([str(python), "-c", "import course_lib"], capture_output=True, text=True, env=env,
                             cwd=tmp_path)
    assert missing.returncode != 0 and "No module named 'course_lib'" in missing.stderr
    before = _torch_files(python)
    cell = install_cell_source(course_lib.__version__, packages_url(publication()))  # every notebook's first cell
    env_cell = {**env, PACKAGES_VARIABLE: local_index}
    start = time.perf_counter()
    done = subprocess.run([str(python), "-c", cell], capture_output=True, text=True, env=env_cell, cwd=tmp_path,
                          timeout=1800)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stdout + done.stderr
    where = local_index.rstrip("/")
    assert done.stdout.strip() == f"course_lib {course_lib.__version__} installed from {where}", done.stdout
    print(f"the install cell took {seconds:.1f} s (course_lib, sacrebleu, num2words, koreanize-matplotlib)")
    assert _torch_files(python) == before, "the install cell touched torch's files"
    version = subprocess.run([str(python), "-c", "import course_lib; print(course_lib.__version__)"],
                             capture_output=True, text=True, env=env, cwd=tmp_path)
    assert version.stdout.strip() == course_lib.__version__, version.stdout + version.stderr
    again = subprocess.run([str(python), "-c", cell], capture_output=True, text=True,
                           env={**env, PACKAGES_VARIABLE: "http://127.0.0.1:9/"}, cwd=tmp_path, timeout=300)
    assert again.returncode == 0 and again.stdout == "" and again.stderr == "", again.stdout + again.stderr
    _run_check_cell(python, folder, env)


def test_a_colab_ready_class_edition_installs_its_own_package(tmp_path: Path) -> None:
    """``course-class-edition --colab URL``: the edition's wheel (no grader, no answers: its manifest) is in
    ``packages/``, declares the course's dependencies, and every notebook's first cell installs it from URL."""
    from zipfile import ZipFile

    from course_lib.edition.cli import main
    from course_lib.edition.install import course_dependencies, is_install_cell

    out, url = tmp_path / "class00", "https://school.example/class00/packages"
    assert main(["--out", str(out), "--notebooks", "00", "--no-record", "--colab", url]) == 0
    wheel = out / "packages" / f"course_lib-{course_lib.__version__}-py3-none-any.whl"
    with ZipFile(wheel) as archive:
        names = archive.namelist()
        meta = archive.read(f"course_lib-{course_lib.__version__}.dist-info/METADATA").decode()
    assert "course_lib/edition/manifest.json" in names and not any(n.startswith("course_lib/grading/") for n in names)
    assert not any(n.startswith("course_lib/checks/nb") for n in names), "the edition's checks are stored data"
    assert [line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist:")] == \
        [d.replace(" ", "") for d in course_dependencies()]
    nb = nbformat.read(out / "notebooks" / "00_welcome.ipynb", as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert is_install_cell(first) and first.source == install_cell_source(course_lib.__version__, url)
    assert not (out / "build").exists() and not list(out.glob("*.egg-info")), "no build leftovers in the edition"


RUN_EDITION = '''
import sys, nbformat
from nbclient import NotebookClient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nb.cells.insert(0, nbformat.v4.new_code_cell("import course_lib, torch; print('EDITION', course_lib.__file__)"))
NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
from course_lib.exercises.execute import check_statuses
print("STATUSES", sorted(set(check_statuses(nb).values())))
print("FIRST", nb.cells[0].outputs[0]["text"])
'''


def test_pip_install_of_the_edition_into_a_fresh_venv_runs_the_graded_notebook_unsolved(
        torch_venv: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The class edition ``--graded 04`` (smoke mode) installs with its pinned dependencies into a fresh venv that has
    the course's torch pin, and runs notebook 04 unsolved with that venv's Python alone (its own nbclient and
    ipykernel, nothing of this repository on the path)."""
    edition = tmp_path / "class04"
    monkeypatch.setenv("COURSE_SMOKE", "1")
    build_edition(edition, graded="04")
    declared = tomllib.loads((edition / "pyproject.toml").read_text())["project"]["dependencies"]
    assert declared == edition_pins() and "torch==2.13.0" in declared
    venv = tmp_path / "venv"
    python = _venv_with_torch(torch_venv, venv)  # a fresh venv with the course's torch pin installed, as a student's
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _pip(python, "--quiet", "--no-compile", str(edition), env=env, cwd=tmp_path)
    env.update(COURSE_SMOKE="1", MPLBACKEND="Agg")
    run = subprocess.run([str(python), "-c", RUN_EDITION, str(edition / "notebooks" / "04_masking.ipynb"),
                          str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=1800)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "STATUSES ['not implemented yet']" in run.stdout, run.stdout[-2000:]
    installed = next(line for line in run.stdout.splitlines() if line.startswith("FIRST"))
    assert str(venv) in installed and str(ROOT) not in installed  # the venv's own copy, not the repository's
    nb = nbformat.read(edition / "notebooks" / "04_masking.ipynb", as_version=4)
    assert any(c.cell_type == "code" and "YOUR CODE HERE" in c.source for c in nb.cells)  # shipped unsolved
