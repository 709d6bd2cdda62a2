"""The notebooks' install cell and the course's published links, from the one setting of where it is published.

The cell itself is run in a fresh environment without ``course_lib`` in ``tests/edition/test_install_anywhere.py``
(slow); here: every notebook holds the current cell, writing it is idempotent and leaves the lesson's cells alone, the
cell does nothing where ``course_lib`` is importable, and every link derives from ``[tool.course] repository``.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT

import course_lib
from course_lib.edition.install import (
    PACKAGES_VARIABLE,
    ROLE,
    binder_url,
    colab_url,
    install_cell_source,
    is_install_cell,
    packages_url,
    publication,
    set_install_cell,
)

_spec = importlib.util.spec_from_file_location("install_cell", ROOT / "tools" / "install_cell.py")
install_cell = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install_cell)

NOTEBOOKS = install_cell.notebooks()


def _current_source() -> str:
    return install_cell_source(course_lib.__version__, packages_url(publication()))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_notebooks_first_code_cell_is_the_current_install_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert is_install_cell(first), f"{path.name}: the first code cell is not the install cell: " \
                                   "run python tools/install_cell.py"
    assert first.source == _current_source(), f"{path.name}: the install cell is stale: " \
                                              "run python tools/install_cell.py"
    assert sum(is_install_cell(c) for c in nb.cells) == 1


def test_the_readmes_links_are_every_notebooks_from_the_setting() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = install_cell.links_block(NOTEBOOKS, publication())
    assert block in readme, "README.md's Colab and Binder links are stale: run python tools/install_cell.py"
    for path in NOTEBOOKS:
        assert f"]({colab_url(path.name)})" in readme and f"]({binder_url(path.name)})" in readme


def test_writing_the_cell_is_idempotent_updates_in_place_and_keeps_the_lessons_cells() -> None:
    original = nbformat.read(ROOT / "notebooks" / "00_welcome.ipynb", as_version=4)
    original.cells = [c for c in original.cells if not is_install_cell(c)]
    nb = copy.deepcopy(original)
    assert set_install_cell(nb, install_cell_source("0.1.0", "https://example.org/p"))
    first_code = next(i for i, c in enumerate(original.cells) if c.cell_type == "code")
    assert is_install_cell(nb.cells[first_code]) and nb.cells[first_code].metadata["course"] == {"role": ROLE}
    lesson = [c for c in nb.cells if not is_install_cell(c)]
    assert [(c.source, c.metadata) for c in lesson] == [(c.source, c.metadata) for c in original.cells]
    text = nbformat.writes(nb)
    assert not set_install_cell(nb, install_cell_source("0.1.0", "https://example.org/p"))
    assert nbformat.writes(nb) == text, "a second run changed the notebook"
    nb.cells[first_code].metadata["tags"] = ["kept"]
    assert set_install_cell(nb, install_cell_source("0.2.0", "https://example.org/p"))
    assert len(nb.cells) == len(original.cells) + 1
    cell = nb.cells[first_code]
    assert "course_lib-0.2.0-py3-none-any.whl" in cell.source and cell.metadata["tags"] == ["kept"]
    nbformat.validate(nb)


def test_a_misplaced_install_cell_moves_before_the_first_code_cell() -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell("x = 1")])
    set_install_cell(nb, install_cell_source("0.1.0", "https://example.org/p"))
    nb.cells.append(nb.cells.pop(1))  # an editor moved it to the end
    assert set_install_cell(nb, install_cell_source("0.1.0", "https://example.org/p"))
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"] and is_install_cell(nb.cells[1])


def test_the_cell_does_nothing_where_course_lib_is_importable() -> None:
    """In the course's environment the cell neither runs pip nor prints: a package index that cannot answer
    (port 9, nothing listens) would make any install attempt fail."""
    source = install_cell_source(course_lib.__version__, "http://127.0.0.1:9/nothing")
    env = {**os.environ, PACKAGES_VARIABLE: "http://127.0.0.1:9/nothing",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0 and done.stdout == "" and done.stderr == "", done.stdout + done.stderr


def test_the_cell_refuses_a_packages_address_that_is_no_url() -> None:
    for bad in ("/tmp/packages", 'https://x.org/"; import os', "https://x.org/a b"):
        with pytest.raises(ValueError, match="packages must be an http"):
            install_cell_source("0.1.0", bad)


def test_every_link_derives_from_the_one_setting(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "https://github.com/some-school/nlp-course"\n')
    where = publication(tmp_path / "pyproject.toml")
    assert colab_url("01_attention.ipynb", where) == \
        "https://colab.research.google.com/github/some-school/nlp-course/blob/main/notebooks/01_attention.ipynb"
    assert binder_url("01_attention.ipynb", where) == \
        "https://mybinder.org/v2/gh/some-school/nlp-course/main?urlpath=lab/tree/notebooks/01_attention.ipynb"
    assert packages_url(where) == "https://some-school.github.io/nlp-course/packages"
    (tmp_path / "pyproject.toml").write_text('[tool.course]\nrepository = "gitlab.com/some-school/nlp-course"\n')
    with pytest.raises(ValueError, match=r"\[tool.course\] repository: expected https://github.com/OWNER/NAME"):
        publication(tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    with pytest.raises(ValueError, match="no \\[tool.course\\] repository"):
        publication(tmp_path / "pyproject.toml")


def test_the_website_opens_each_notebook_page_with_its_links() -> None:
    _hooks = importlib.util.spec_from_file_location("site_hooks", ROOT / "site" / "hooks.py")
    hooks = importlib.util.module_from_spec(_hooks)
    _hooks.loader.exec_module(hooks)
    html = hooks.open_in_links("04_masking.ipynb", ROOT)
    assert f'href="{colab_url("04_masking.ipynb")}"' in html and f'href="{binder_url("04_masking.ipynb")}"' in html
    assert "<img" not in html, "the site fetches nothing from another host: links, not badge images"


def test_the_tool_reports_what_differs_and_check_changes_nothing(tmp_path: Path) -> None:
    """``--check`` on a copy of the repository's notebooks and README: it names every stale file, writes none."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    for path in NOTEBOOKS[:2]:
        (root / "notebooks" / path.name).write_bytes(path.read_bytes())
    (root / "pyproject.toml").write_bytes((ROOT / "pyproject.toml").read_bytes())
    (root / "README.md").write_text(f"# x\n\n{install_cell.BEGIN}\nold\n{install_cell.END}\n")
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    stale = install_cell.stale(root, write=False)
    assert "README.md" in stale and all(p.read_bytes() == b for p, b in before.items())
    install_cell.stale(root, write=True)
    assert install_cell.stale(root, write=False) == []
    for path in NOTEBOOKS[:2]:
        cells = json.loads((root / "notebooks" / path.name).read_text())["cells"]
        assert sum(c.get("metadata", {}).get("course", {}).get("role") == ROLE for c in cells) == 1


def test_a_class_edition_drops_the_courses_install_cell(tmp_path: Path) -> None:
    """The course's cell installs the whole course_lib (every answer): a class edition's notebooks do not carry it
    (``--colab`` writes the edition's own, tested in test_install_anywhere.py)."""
    from course_lib.edition.build import copy_notebooks

    nb = nbformat.read(ROOT / "notebooks" / "00_welcome.ipynb", as_version=4)
    set_install_cell(nb, _current_source())
    nbformat.write(nb, tmp_path / "00_welcome.ipynb")
    (copied,) = copy_notebooks([tmp_path / "00_welcome.ipynb"], tmp_path / "edition")
    cells = nbformat.read(copied, as_version=4).cells
    assert not any(is_install_cell(c) for c in cells)
    assert [c.source for c in cells] == [c.source for c in nb.cells if not is_install_cell(c)]
