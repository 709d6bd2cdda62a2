"""Where the course is published, and the notebooks' install cell that uses it (Colab, Binder, any Jupyter).

One setting names where the repository is published: ``[tool.course] repository`` in ``pyproject.toml`` (a GitHub
address). Everything else derives from it:

- :func:`colab_url` and :func:`binder_url`: a notebook opened in Colab or on Binder from a link (the README's and the
  website's links);
- :func:`packages_url`: the folder the course's wheel is published in (the website's ``packages/``, which
  ``make site`` fills), from which the install cell installs ``course_lib``;
- :func:`install_cell_source`: the first code cell of every notebook. Where ``course_lib`` cannot be imported
  (Colab, a plain Jupyter) it installs the notebook's own version of it from that folder in one quiet ``pip`` call,
  keeping the PyTorch that is there (the call names the installed torch at its installed version, so pip can
  neither replace nor upgrade it; an older torch than ``course_lib`` accepts is an error, not a multi-GB download);
  everywhere else it does nothing. The course needs no data file: its data is generated or comes inside the
  packages it depends on (``data/README.md``), so installing the package installs the data. ``COURSE_PACKAGES``
  (a URL: ``https://``, or ``file://`` for a folder) replaces the published folder: a test's local index, a
  class's own edition.

``tools/install_cell.py`` writes the cell into every notebook (cell metadata ``{"course": {"role": "install"}}``),
``course-class-edition --colab URL`` into a class edition's notebooks, pointing at that edition's wheel.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import nbformat

__all__ = ["ROLE", "PACKAGES_VARIABLE", "Publication", "publication", "colab_url", "binder_url", "packages_url",
           "wheel_name", "build_wheel", "course_dependencies", "install_cell_source", "is_install_cell",
           "set_install_cell"]

#: The cell metadata that marks the install cell: ``cell.metadata["course"]["role"]``.
ROLE = "install"

#: The install cell's id (a fixed one: writing the cell twice gives the same notebook).
CELL_ID = "course-install"

#: The environment variable that replaces the published package folder (a URL or a local folder).
PACKAGES_VARIABLE = "COURSE_PACKAGES"

ROOT = Path(__file__).resolve().parents[2]
_GITHUB = re.compile(r"^https://github\.com/(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+?)/?$")


class Publication:
    """Where the repository is published (``https://github.com/OWNER/NAME``, branch ``branch``)."""

    def __init__(self, repository: str, branch: str = "main") -> None:
        match = _GITHUB.match(repository)
        if not match:
            raise ValueError(f"[tool.course] repository: expected https://github.com/OWNER/NAME, got {repository!r}")
        self.repository, self.branch = repository.rstrip("/"), branch
        self.owner, self.name = match["owner"], match["name"]


def publication(pyproject: Path | None = None) -> Publication:
    """The setting ``[tool.course]`` of ``pyproject`` (the repository's by default): ``repository``, and ``branch``
    (``main`` by default)."""
    pyproject = ROOT / "pyproject.toml" if pyproject is None else pyproject
    setting: Mapping[str, Any] = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("course", {})
    if "repository" not in setting:
        raise ValueError(f"{pyproject}: no [tool.course] repository = \"https://github.com/OWNER/NAME\"")
    return Publication(str(setting["repository"]), str(setting.get("branch", "main")))


def course_dependencies(pyproject: Path | None = None) -> list[str]:
    """``course_lib``'s declared dependencies: ``[project] dependencies`` of the repository's ``pyproject`` (or
    the one given), or of the installed distribution's metadata where ``course_lib`` runs from a wheel (no
    ``pyproject.toml`` beside it)."""
    pyproject = ROOT / "pyproject.toml" if pyproject is None else pyproject
    if pyproject.is_file():
        return list(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["dependencies"])
    from importlib import metadata

    return [r for r in metadata.requires("course_lib") or [] if "extra ==" not in r]


def colab_url(notebook: str, where: Publication | None = None) -> str:
    """The address that opens ``notebooks/<notebook>`` (a file name) in Colab, from the published repository."""
    where = where or publication()
    return f"https://colab.research.google.com/github/{where.owner}/{where.name}/blob/{where.branch}/notebooks/{notebook}"


def binder_url(notebook: str, where: Publication | None = None) -> str:
    """The address that opens ``notebooks/<notebook>`` in JupyterLab on mybinder.org (image from ``binder/``)."""
    where = where or publication()
    return (f"https://mybinder.org/v2/gh/{where.owner}/{where.name}/{where.branch}"
            f"?urlpath=lab/tree/notebooks/{notebook}")


def packages_url(where: Publication | None = None) -> str:
    """The published folder of the course's wheel: ``packages/`` of the website on GitHub Pages."""
    where = where or publication()
    return f"https://{where.owner.lower()}.github.io/{where.name}/packages"


def wheel_name(version: str) -> str:
    """The file name of ``course_lib``'s wheel at ``version`` (pure Python: one wheel for every platform)."""
    return f"course_lib-{version.replace('-', '_')}-py3-none-any.whl"


def build_wheel(project: Path, wheels: Path) -> Path:
    """Build the wheel of ``project`` (a folder with ``pyproject.toml`` and ``course_lib/``) into ``wheels``.

    The build runs on a copy, so that setuptools' work folders (``build/``, ``*.egg-info``) never land in the
    repository or the edition, and without build isolation: it uses this environment's setuptools, offline.
    """
    with tempfile.TemporaryDirectory(prefix="course-wheel-") as scratch:
        copy = Path(scratch) / "project"
        shutil.copytree(project / "course_lib", copy / "course_lib", ignore=shutil.ignore_patterns("__pycache__"))
        for name in ("pyproject.toml", "README.md"):
            if (project / name).is_file():
                shutil.copyfile(project / name, copy / name)
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                                "--wheel-dir", str(wheels), str(copy)], capture_output=True, text=True)
        if built.returncode:
            raise RuntimeError(f"build_wheel: pip wheel {project} failed:\n{built.stdout}{built.stderr}")
    version = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"].get("version")
    if version is None:  # the course's own pyproject takes it from course_lib.__version__ (dynamic)
        version = re.search(r'^__version__ = "([^"]+)"', (project / "course_lib" / "__init__.py").read_text(),
                            re.MULTILINE)[1]
    wheel = wheels / wheel_name(version)
    if not wheel.is_file():
        raise RuntimeError(f"build_wheel: pip built no {wheel}")
    return wheel


INSTALL_CELL = '''\
# Colab or a Jupyter without course_lib: install course_lib {version} beside its PyTorch (elsewhere: nothing).
import importlib.util
import os
import subprocess
import sys

if importlib.util.find_spec("course_lib") is None:
    _where = (os.environ.get("{variable}") or "{packages}").rstrip("/")
    _wheel = f"course_lib @ {{_where}}/{wheel}"
    _pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", _wheel], capture_output=True, text=True)
    if _pip.returncode:
        raise RuntimeError(f"installing course_lib failed:\\n{{_pip.stdout}}{{_pip.stderr}}")
    importlib.invalidate_caches()
    print(f"course_lib {version} installed from {{_where}}")'''


def install_cell_source(version: str, packages: str) -> str:
    """The install cell for ``course_lib`` ``version`` whose wheel is published in the folder at URL ``packages``."""
    if not re.match(r"^(https?|file)://[^\s\"'{}\\\\]+$", packages):
        raise ValueError(f"install_cell_source: packages must be an http(s):// or file:// URL, got {packages!r}")
    return INSTALL_CELL.format(version=version, packages=packages.rstrip("/"), wheel=wheel_name(version),
                               variable=PACKAGES_VARIABLE)


def is_install_cell(cell: Mapping[str, Any]) -> bool:
    """Whether ``cell`` is the install cell (its metadata ``course.role`` is :data:`ROLE`)."""
    return cell.get("cell_type") == "code" and cell.get("metadata", {}).get("course", {}).get("role") == ROLE


def set_install_cell(nb: nbformat.NotebookNode, source: str) -> bool:
    """Make ``nb``'s install cell hold ``source``; returns whether ``nb`` changed (idempotent).

    An existing install cell is updated in place and moved, if it has to be, before the first other code cell
    (the first code cell of the notebook is the install cell); otherwise a new one is inserted there. The
    lesson's own cells and their metadata are left as they are.
    """
    before = nbformat.writes(nb)
    existing = [cell for cell in nb.cells if is_install_cell(cell)]
    cell = existing[0] if existing else nbformat.v4.new_code_cell(id=CELL_ID)
    nb.cells = [c for c in nb.cells if not is_install_cell(c)]
    cell.source, cell.outputs, cell.execution_count = source, [], None
    cell.metadata.setdefault("course", {})["role"] = ROLE
    first_code = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), len(nb.cells))
    nb.cells.insert(first_code, cell)
    return nbformat.writes(nb) != before
